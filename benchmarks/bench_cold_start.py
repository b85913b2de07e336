"""Cold start: a fresh interpreter importing each handler *and answering its first invocation*, against the floor.

The floor for this job (docs/architecture.md "Targets"): a bare Powertools ``APIGatewayHttpResolver`` that
builds one boto3 DynamoDB client and answers one request with one ``GetItem``, against the same endpoint in the same
run. Also printed: the ratio against the bare resolver alone (no boto3, answers ``{}``), the figure the earlier
version of this benchmark printed.

How it runs:

* the local stack (moto server + in-process handlers) is started on free loopback ports and seeded through the API:
  one published package and one settled installation;
* each case runs in a fresh interpreter with the environment Lambda gives a function (``LAMBDA_TASK_ROOT``,
  ``AWS_LAMBDA_FUNCTION_NAME``, an ``_X_AMZN_TRACE_ID``), so Powertools' Tracer is *active* and patches as on AWS
  (segments go to a UDP port on 127.0.0.1 where nothing listens); the template's environment (``TABLE_NAME``, …)
  and ``AWS_ENDPOINT_URL`` point the handler at the local stack;
* the child times the import of the handler file (Lambda's init phase, after the runtime's own start-up, which is
  the same for every function) and its first invocation with a realistic event: API functions get an API Gateway v2
  event (a read, or a replayed PUT), Step Functions tasks get the state input of the settled operation or published
  upload (a replay: one or two DynamoDB reads, the shape of the floor's one GetItem);
* median of ``--runs`` (default 9: the ratios move by about ±0.05 between runs on a shared machine) per case,
  cases interleaved so drift in machine speed hits all alike;
* every case runs from a copy laid out as the deployment is (the layer's ``packyard`` package, each function's
  ``app.py``, and the floor's and the bare resolver's files beside them) with the bytecode ``make build`` ships:
  ``.pyc`` compiled once (``--bytecode compiled``, the default). Lambda's file system is read-only, so code deployed
  without bytecode is compiled from source at every cold start; the floor's libraries (boto3, Powertools, pydantic)
  come compiled here, and ``make build`` compiles everything it deploys. ``--bytecode source`` measures the same
  copy without ``.pyc`` (a deployment that does not compile; about 240 M more instructions for admission's ~55
  modules of ours).

Prints figures with the target beside them; asserts nothing. ``--importtime HANDLER`` prints the slowest imports of
one handler (``python -X importtime``), the place to look when a ratio grows.
"""

from __future__ import annotations

import argparse
import compileall
import json
import os
import py_compile
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "shared")]

TARGET = 1.3
TENANT, WORKSPACE, INSTALLATION, PACKAGE = "t-cold", "ws-cold", "cold", "cold-skill"
FLOOR_KEY = {"pk": {"S": "TENANT#floor"}, "sk": {"S": "FLOOR"}}

BARE = """
from aws_lambda_powertools.event_handler import APIGatewayHttpResolver

app = APIGatewayHttpResolver(enable_validation=True)


@app.get("/ping")
def ping() -> dict:
    return {}


def lambda_handler(event, context):
    return app.resolve(event, context)
"""

FLOOR = f"""
import os

import boto3
from aws_lambda_powertools.event_handler import APIGatewayHttpResolver

app = APIGatewayHttpResolver(enable_validation=True)
dynamodb = boto3.client("dynamodb")
TABLE = os.environ["TABLE_NAME"]


@app.get("/ping")
def ping() -> dict:
    found = dynamodb.get_item(TableName=TABLE, Key={FLOOR_KEY!r}, ConsistentRead=True)
    return {{"found": "Item" in found}}


def lambda_handler(event, context):
    return app.resolve(event, context)
"""

PROBE = """
import time
started, cpu_started = time.perf_counter(), time.process_time()
import importlib.util, json, sys
sys.path.insert(0, {shared!r})
spec = importlib.util.spec_from_file_location("handler", {path!r})
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
imported, cpu_imported = time.perf_counter(), time.process_time()


class Context:
    function_name = {name!r}
    function_version = "$LATEST"
    invoked_function_arn = "arn:aws:lambda:us-east-1:123456789012:function:" + {name!r}
    memory_limit_in_mb = 512
    aws_request_id = "00000000-0000-4000-8000-000000000001"
    log_group_name = "/aws/lambda/" + {name!r}
    log_stream_name = "local"

    def get_remaining_time_in_millis(self):
        return 30000


event = json.loads({event!r})
error = None
try:
    result = module.lambda_handler(event, Context())
except Exception as exc:
    error, result = type(exc).__name__, None
answered, cpu_answered = time.perf_counter(), time.process_time()
status = result.get("statusCode") if isinstance(result, dict) else None
print("COLDSTART " + json.dumps({{"import": imported - started, "first": answered - imported,
                                  "cpu_import": cpu_imported - cpu_started, "cpu_first": cpu_answered - cpu_imported,
                                  "status": status, "error": error}}))
"""


def lambda_environment(base: dict[str, str], function: str) -> dict[str, str]:
    """What Lambda adds for an active-tracing function; the X-Ray daemon address is a loopback port nobody uses."""
    env = dict(base)
    env.update(
        AWS_LAMBDA_FUNCTION_NAME=function,
        AWS_LAMBDA_FUNCTION_MEMORY_SIZE="512",
        AWS_LAMBDA_FUNCTION_VERSION="$LATEST",
        LAMBDA_TASK_ROOT=str(ROOT / "functions" / function),
        AWS_EXECUTION_ENV="AWS_Lambda_python3.12",
        _X_AMZN_TRACE_ID="Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1",
        AWS_XRAY_DAEMON_ADDRESS="127.0.0.1:2999",
        AWS_XRAY_CONTEXT_MISSING="IGNORE_ERROR",
        POWERTOOLS_LOG_LEVEL="INFO",
    )
    for key in ("POWERTOOLS_METRICS_DISABLED", "POWERTOOLS_TRACE_DISABLED", "PYTHONPATH"):
        env.pop(key, None)
    return env


def build_artifact(dest: Path, *, compiled: bool) -> Path:
    """What ``make build`` deploys, in ``dest``: ``layer/packyard`` (``/opt/python`` on Lambda) and
    ``functions/<name>/app.py`` (``/var/task``), with unchecked-hash ``.pyc`` beside them when ``compiled`` (as the
    build compiles them). Returns the layer directory, the one the handlers import ``packyard`` from."""
    layer = dest / "layer"
    skip = shutil.ignore_patterns("__pycache__", "*.pyc")
    shutil.copytree(ROOT / "shared" / "packyard", layer / "packyard", ignore=skip)
    shutil.copytree(ROOT / "functions", dest / "functions", ignore=skip)
    (dest / "baseline").mkdir()
    (dest / "baseline" / "bare.py").write_text(BARE)
    (dest / "baseline" / "floor.py").write_text(FLOOR)
    if compiled:
        done = compileall.compile_dir(
            dest, quiet=1, invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH, workers=1
        )
        if not done:
            raise RuntimeError(f"compiling {dest} failed")
    return layer


def run_case(path: Path, name: str, event: dict[str, Any], env: dict[str, str], layer: Path) -> dict[str, Any]:
    code = PROBE.format(shared=str(layer), path=str(path), name=name, event=json.dumps(event))
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=tempfile.gettempdir(), check=False
    )
    for line in done.stdout.splitlines():
        if line.startswith("COLDSTART "):
            report: dict[str, Any] = json.loads(line.removeprefix("COLDSTART "))
            return report
    raise RuntimeError(f"{name}: no figure (exit {done.returncode})\n{done.stderr[-2000:]}")


# ------------------------------------------------------------------ the seeded local stack and the events


def api_event(api: Any, method: str, path: str, *, body: Any = None, headers: dict[str, str] | None = None) -> Any:
    """The event API Gateway would hand the function serving ``method path`` (as devstack.api.LocalApi builds it)."""
    from devstack.apigw import http_event
    from devstack.caller import Caller
    from devstack.server import claims_as_api_gateway_passes_them

    claims = claims_as_api_gateway_passes_them(Caller(api, TENANT).claims)  # every scope the routes ask for
    event = http_event(method, path, claims=claims, body=body, headers=headers)
    found = api.resolve(method, path)
    assert found is not None, path
    route, params = found
    event["routeKey"] = event["requestContext"]["routeKey"] = f"{route.method} {route.path}"
    event["pathParameters"] = params or None
    return route.function, event


def seed(stack: Any) -> dict[str, tuple[str, dict[str, Any]]]:
    """Publish one package and settle one installation; return ``{function: event}`` for each handler."""
    import boto3

    from devstack.api import LocalApi
    from devstack.caller import Caller
    from packyard.store import catalog
    from packyard_cli.build import build_from_files

    api = LocalApi(stack)
    caller = Caller(api, TENANT)
    built = build_from_files({"SKILL.md": b"cold start\n"}, permissions=[{"kind": "api_read"}])
    session = caller.request_upload(PACKAGE, "1.0.0", built)
    assert session.status == 201, session.body
    upload_id = session.body["uploadId"]
    caller.put_archive(session.body, built.archive)
    assert caller.complete_and_wait(upload_id)["state"] == "published"
    key = "k-cold"
    admitted = caller.install(WORKSPACE, INSTALLATION, PACKAGE, "1.0.0", key=key)
    operation = caller.wait_settled(WORKSPACE, admitted)  # any outcome will do: the tasks replay what it settled
    token = catalog.get_upload(TENANT, upload_id).token
    boto3.client("dynamodb").put_item(TableName=stack.table_name, Item={**FLOOR_KEY, "n": {"N": "1"}})

    upload_task = {"tenant": TENANT, "uploadId": upload_id, "token": token}
    operation_task = {
        "tenant": TENANT,
        "workspace": WORKSPACE,
        "installationId": INSTALLATION,
        "operationId": operation["operationId"],
    }
    cases: dict[str, tuple[str, dict[str, Any]]] = {}
    for function, event in (
        api_event(api, "GET", f"/v1/workspaces/{WORKSPACE}/installations/{INSTALLATION}"),
        api_event(api, "GET", f"/v1/packages/{PACKAGE}/versions/1.0.0"),
        api_event(api, "GET", f"/v1/uploads/{upload_id}"),
        api_event(
            api,
            "PUT",
            f"/v1/workspaces/{WORKSPACE}/installations/{INSTALLATION}",
            body={"package": PACKAGE, "version": "1.0.0"},
            headers={"Idempotency-Key": key},
        ),
    ):
        cases[function] = ("GET", event)
    by_logical = {spec.logical_id: spec for spec in stack.functions.values()}
    tasks = {
        "VerifyFunction": upload_task,
        "PublishFunction": {**upload_task, "verify": {"verdict": "accepted"}},
        "RejectFunction": {**upload_task, "verify": {"verdict": "rejected", "code": "archive_rejected"}},
        "PlanningFunction": operation_task,
        "CommitFunction": {**operation_task, "plan": {"version": 2}},
        "SettlementFunction": operation_task,
    }
    for logical_id, event in tasks.items():
        cases[logical_id] = ("task", event)
    out: dict[str, tuple[str, dict[str, Any]]] = {}
    for logical_id, (_, event) in cases.items():
        spec = by_logical[logical_id]
        module = spec.handler.rpartition(".")[0]
        out[spec.code_uri.name] = (str(spec.code_uri / f"{module}.py"), event)
    return out


def floor_event() -> dict[str, Any]:
    from devstack.apigw import http_event

    event = http_event("GET", "/ping", claims={"tenant": TENANT})
    event["routeKey"] = event["requestContext"]["routeKey"] = "GET /ping"
    return event


# ------------------------------------------------------------------ reporting


def importtime(handler: str, *, compiled: bool) -> None:
    """The 25 slowest imports (cumulative) of one handler file, from ``python -X importtime``, run from the built
    artifact as the benchmark runs it."""
    with tempfile.TemporaryDirectory(prefix="packyard-importtime-") as tmp:
        layer = build_artifact(Path(tmp), compiled=compiled)
        _importtime(Path(tmp) / "functions" / handler / "app.py", layer, handler)


def _importtime(path: Path, layer: Path, handler: str) -> None:
    code = (
        f"import sys, importlib.util; sys.path.insert(0, {str(layer)!r}); "
        f"s = importlib.util.spec_from_file_location('handler', {str(path)!r}); "
        "m = importlib.util.module_from_spec(s); s.loader.exec_module(m)"
    )
    env = lambda_environment(dict(os.environ), handler)
    done = subprocess.run([sys.executable, "-X", "importtime", "-c", code], capture_output=True, text=True, env=env)
    rows = []
    for line in done.stderr.splitlines():
        if line.startswith("import time:") and "|" in line and "self [us]" not in line:
            own, cumulative, name = (part.strip() for part in line.removeprefix("import time:").split("|", 2))
            rows.append((int(cumulative), int(own), name))
    for cumulative, own, name in sorted(rows, reverse=True)[:25]:
        print(f"{cumulative / 1000:8.1f} ms  (self {own / 1000:6.1f})  {name}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=9)
    parser.add_argument("--importtime", metavar="HANDLER", help="print the slowest imports of functions/HANDLER")
    parser.add_argument(
        "--bytecode",
        choices=["compiled", "source"],
        default="compiled",
        help="run the artifact with .pyc compiled as make build ships it (default), or from source only",
    )
    args = parser.parse_args()
    compiled = args.bytecode == "compiled"
    os.environ.setdefault("POWERTOOLS_METRICS_DISABLED", "true")
    os.environ.setdefault("POWERTOOLS_TRACE_DISABLED", "true")
    os.environ.setdefault("POWERTOOLS_LOG_LEVEL", "ERROR")
    if args.importtime:
        importtime(args.importtime, compiled=compiled)
        return

    from devstack.local import start
    from packyard_cli.ports import bind_ports

    with tempfile.TemporaryDirectory(prefix="packyard-cold-") as tmp:
        local = start(bind_ports("127.0.0.1", 0, 0), state_dir=Path(tmp), retry_wait_scale=0.0, log=lambda _: None)
        try:
            handlers = seed(local.stack)
            base_env = dict(os.environ)
            artifact = Path(tmp) / "artifact"
            layer = build_artifact(artifact, compiled=compiled)
            ping = floor_event()
            cases: dict[str, tuple[Path, dict[str, Any]]] = {
                "bare resolver": (artifact / "baseline" / "bare.py", ping),
                "floor": (artifact / "baseline" / "floor.py", ping),
                **{
                    name: (artifact / Path(path).relative_to(ROOT), event)
                    for name, (path, event) in sorted(handlers.items())
                },
            }
            samples: dict[str, list[dict[str, Any]]] = {name: [] for name in cases}
            for _ in range(args.runs):
                for name, (path, event) in cases.items():
                    function = name if name in handlers else "floor"
                    env = lambda_environment(base_env, function)
                    samples[name].append(run_case(path, function, event, env, layer))
        finally:
            local.stop()
    report(samples, args.runs, args.bytecode)


def report(samples: dict[str, list[dict[str, Any]]], runs: int, bytecode: str = "compiled") -> None:
    def median(name: str, *keys: str) -> float:
        return statistics.median(sum(sample[key] for key in keys) for sample in samples[name]) * 1000

    floor_cpu, bare_cpu = median("floor", "cpu_import", "cpu_first"), median("bare resolver", "cpu_import", "cpu_first")
    floor_wall, bare_wall = median("floor", "import", "first"), median("bare resolver", "import", "first")
    print(
        "Cold start: a fresh interpreter importing the handler and answering its first invocation, in the Lambda "
        f"environment with tracing active (median of {runs}, same run; bytecode: {bytecode})"
    )
    header = (
        f"{'handler':<15}{'import':>8}{'1st call':>10}{'total':>8}{'vs floor':>10}{'vs bare':>9}"
        f"{'wall total':>12}{'vs floor':>10}   target (CPU vs floor)   answer"
    )
    print(f"{'':<15}{'CPU ms':>8}{'CPU ms':>10}{'CPU ms':>8}{'':>10}{'':>9}{'ms':>12}")
    print(header)
    print("-" * len(header))
    for name in samples:
        cpu = median(name, "cpu_import", "cpu_first")
        wall = median(name, "import", "first")
        last = samples[name][-1]
        answer = last["error"] or last["status"] or "ok"
        baseline = name in ("floor", "bare resolver")
        verdict = "" if baseline else f"<= {TARGET:.2f} " + ("ok" if cpu / floor_cpu <= TARGET else "NOT MET")
        print(
            f"{name:<15}{median(name, 'cpu_import'):>8.0f}{median(name, 'cpu_first'):>10.0f}{cpu:>8.0f}"
            f"{cpu / floor_cpu:>10.2f}{cpu / bare_cpu:>9.2f}{wall:>12.0f}{wall / floor_wall:>10.2f}   "
            f"{verdict:<22}  {answer}"
        )
    print(
        f"floor = a bare APIGatewayHttpResolver + one boto3 DynamoDB client + one GetItem: {floor_cpu:.0f} ms CPU, "
        f"{floor_wall:.0f} ms wall; bare = the resolver alone: {bare_cpu:.0f} ms CPU, {bare_wall:.0f} ms wall.\n"
        f"Target: every handler <= {TARGET:.2f} x the floor. Judged on CPU time (the child's own user + system "
        "time): this machine is shared, and wall time moves with other processes' load; on an idle machine the two "
        "agree within the round trips to the local endpoint, which the floor makes too."
    )


if __name__ == "__main__":
    main()
