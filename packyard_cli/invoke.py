"""``make invoke FN=… EVENT=events/…``: run one function's handler with an event, the Docker-free
``sam local invoke``.

The function runs in this process (:func:`devstack.lambdas.invoke_handler`: the handler file of template.yaml, a
Lambda context with the function's timeout and memory) against a local stack made for the call: moto in-process,
the table, bucket and state machines created from template.yaml, the handlers' environment set as the template
sets it. Nothing is left behind, and nothing touches a running ``make serve``.

The sample events in ``events/`` name things that exist in that stack: before the call, :func:`seed` publishes the
sample tenant's releases and brings an upload session or an installation operation to the step the function runs
at (with the state machines' automatic execution paused, so the step is still there to run). The ids are fixed:
upload sessions get the sample ids, and operation ids derive from fixed Idempotency-Keys. Your own event works the
same way; it runs against what the seed made (``--no-seed``: an empty stack).

``FN`` is a function's logical id (``VerifyFunction``) or its folder under ``functions/`` (``verify``).
``python -m packyard_cli.invoke --write-events`` rewrites ``events/`` from the seed.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import sys
import types
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from unittest import mock

ROOT = Path(__file__).resolve().parent.parent
EVENTS = ROOT / "events"

TENANT = "t-sample"
WORKSPACE = "ws-sample"
UPLOAD_ID = "0123456789abcdef0123456789abcdef"
UPLOAD_TOKEN = "5a3c0e1d2b4f69788796a5b4c3d2e1f0"
INSTALL_KEY = "sample-install-1"
CONSENT_KEY = "sample-consent-1"
PACKAGE = "hello-skill"
FILES_V1 = {"SKILL.md": b"# hello-skill\nSays hello.\n"}
FILES_V2 = {"SKILL.md": b"# hello-skill 2\nSays hello over the network.\n"}
FILES_UPLOAD = {"SKILL.md": b"# hello-skill 1.1\nSays hello, faster.\n"}
NETWORK = [{"kind": "network", "resource": "api.hello.example"}]

# which sample event each function gets, and what the seed must have made before it runs
SAMPLES: dict[str, tuple[str, str]] = {
    "UploadsFunction": ("http_create_upload.json", "releases"),
    "CatalogFunction": ("http_list_versions.json", "releases"),
    "FilesFunction": ("http_get_release_file.json", "releases"),
    "QueriesFunction": ("http_get_resolved.json", "committed"),
    "AdmissionFunction": ("http_install.json", "releases"),
    "ApprovalsFunction": ("http_list_approvals.json", "consent"),
    "VerifyFunction": ("sfn_verify.json", "uploaded"),
    "PublishFunction": ("sfn_publish.json", "verified"),
    "RejectFunction": ("sfn_reject.json", "uploaded"),
    "PlanningFunction": ("sfn_plan.json", "admitted"),
    "ConsentFunction": ("sfn_consent.json", "consent_planned"),
    "CommitFunction": ("sfn_commit.json", "planned"),
    "SettlementFunction": ("sfn_settle.json", "committed"),
    "SweeperFunction": ("sfn_sweep.json", "uploaded"),
    "TokenClaimsFunction": ("cognito_pre_token.json", "nothing"),
}
STAGES = (
    "nothing",
    "releases",
    "uploaded",
    "verified",
    "admitted",
    "planned",
    "committed",
    "consent_planned",
    "consent",
)


# the template parameters a function's stack needs, for a function that exists only under a Condition
STACK_PARAMETERS: dict[str, dict[str, str]] = {"TokenClaimsFunction": {"CreateUserPool": "true"}}


def stack_parameters(function: str) -> dict[str, str] | None:
    """The parameters of the stack ``function`` (a logical id or a folder under functions/) is invoked on."""
    for logical_id, parameters in STACK_PARAMETERS.items():
        if function in (logical_id, logical_id.removesuffix("Function").lower()):
            return parameters
    return None


class InvokeError(Exception):
    """Something to tell the user in one line (exit 2)."""


# ------------------------------------------------------------------ the stack for one call


@contextmanager
def local_stack(parameters: dict[str, str] | None = None) -> Iterator[Any]:
    import devstack

    stack = devstack.start_local_aws(parameters=parameters)
    try:
        yield stack
    finally:
        devstack.stop_local_aws()


@contextmanager
def executions_paused() -> Iterator[None]:
    """Starting a workflow execution only returns its ARN: the step it would run stays for the invoked function
    (the seed runs those steps itself, in order)."""
    from packyard.store import workflows

    with mock.patch.object(workflows, "start", lambda machine, name, payload: workflows.execution_arn(machine, name)):
        yield


@contextmanager
def sample_upload_ids() -> Iterator[None]:
    """The next upload session gets the sample id and token (the service draws random ones)."""
    from packyard.publishing import uploads

    fixed_uuid = types.SimpleNamespace(uuid4=lambda: types.SimpleNamespace(hex=UPLOAD_ID))
    fixed_secrets = types.SimpleNamespace(token_hex=lambda n=16: UPLOAD_TOKEN)
    with mock.patch.object(uploads, "uuid", fixed_uuid), mock.patch.object(uploads, "secrets", fixed_secrets):
        yield


def function_spec(stack: Any, name: str) -> Any:
    functions = stack.functions
    if name in functions:
        return functions[name]
    for spec in functions.values():
        if spec.code_uri.resolve() == (ROOT / "functions" / name).resolve():
            return spec
    known = ", ".join(f"{k} ({v.code_uri.name})" for k, v in sorted(functions.items()))
    raise InvokeError(f"no function {name!r} in template.yaml; the functions: {known}")


# ------------------------------------------------------------------ seeding


def seed(stack: Any, until: str) -> dict[str, Any]:
    """Make what the samples name, up to ``until`` (one of :data:`STAGES`); returns the ids it made."""
    from devstack import lambdas
    from devstack.api import LocalApi
    from devstack.caller import Caller
    from packyard_cli.build import build_from_files

    made: dict[str, Any] = {}
    if until == "nothing":  # the function reads only its event (TokenClaimsFunction)
        return made
    caller = Caller(LocalApi(stack), TENANT, subject="sample-owner")
    for version, files, permissions in (("1.0.0", FILES_V1, []), ("2.0.0", FILES_V2, NETWORK)):
        published = caller.publish(PACKAGE, version, build_from_files(files, permissions=permissions))
        if published.get("state") != "published":
            raise InvokeError(f"seeding: {PACKAGE}@{version} was not published: {published}")
    if until == "releases":
        return made

    def run(logical_id: str, event: dict[str, Any]) -> Any:
        return lambdas.invoke_handler(stack.functions[logical_id], event)

    with executions_paused():
        if until in ("uploaded", "verified"):
            built = build_from_files(FILES_UPLOAD)
            with sample_upload_ids():
                session = caller.request_upload(PACKAGE, "1.1.0", built)
            if session.status != 201:
                raise InvokeError(f"seeding: the upload session was refused: {session.body}")
            caller.put_archive(session.body, built.archive)
            completed = caller.post(f"/v1/uploads/{UPLOAD_ID}/complete")
            if completed.status not in (200, 202):
                raise InvokeError(f"seeding: completing the upload failed: {completed.body}")
            made["archiveEtag"] = f'"{hashlib.md5(built.archive, usedforsecurity=False).hexdigest()}"'
            if until == "verified":
                made["verify"] = run("VerifyFunction", upload_task())
            return made
        consent = until in ("consent", "consent_planned")
        version, key = ("2.0.0", CONSENT_KEY) if consent else ("1.0.0", INSTALL_KEY)
        admitted = caller.install(WORKSPACE, installation_for(consent), PACKAGE, version, key=key)
        if admitted.status not in (200, 202):
            raise InvokeError(f"seeding: the install was refused: {admitted.body}")
        made["operationId"] = admitted.body["operationId"]
        task = operation_task(made["operationId"], consent)
        if until in ("planned", "committed", "consent_planned", "consent"):
            made["plan"] = run("PlanningFunction", task)
        if until == "committed":
            made["commit"] = run("CommitFunction", {**task, "plan": made["plan"]})
        if until == "consent":
            made["consent"] = run("ConsentFunction", task)
    return made


def installation_for(consent: bool) -> str:
    return "hello-network" if consent else PACKAGE


def upload_task(**extra: Any) -> dict[str, Any]:
    return {"tenant": TENANT, "uploadId": UPLOAD_ID, "token": UPLOAD_TOKEN, **extra}


def operation_task(operation_id: str, consent: bool = False, **extra: Any) -> dict[str, Any]:
    """A task's state input: the execution's input (the attempt included) plus what earlier states added."""
    task: dict[str, Any] = {
        "tenant": TENANT,
        "workspace": WORKSPACE,
        "installationId": installation_for(consent),
        "operationId": operation_id,
        "attempt": 0,
    }
    return {**task, **extra}


# ------------------------------------------------------------------ the sample events


def http_event(
    method: str, path: str, route: str, params: dict[str, str], body: Any = None, headers: dict[str, str] | None = None
) -> dict[str, Any]:
    """An API Gateway HTTP API (payload 2.0) event as the JWT authorizer passes it on: the sample owner's claims."""
    from devstack.apigw import http_event as build
    from devstack.caller import ALL_SCOPES

    claims = {"tenant": TENANT, "sub": "sample-owner", "scope": " ".join(ALL_SCOPES), "actor": "owner"}
    event = build(
        method,
        path,
        claims=claims,
        body=body,
        headers=headers,
        route=types.SimpleNamespace(path=route),  # type: ignore[arg-type]
        path_parameters=params,
    )
    event["requestContext"].update(
        requestId="sample-request-1", time="30/Nov/2026:12:00:00 +0000", timeEpoch=1796040000000
    )
    return event


def sample_events(made: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Every sample event, from what the seeds made (``made[stage]``)."""
    from packyard_cli.build import build_from_files

    upload = build_from_files({"SKILL.md": b"# hello-skill 1.2\n"}).upload_request()
    verified = made["verified"]
    return {
        "http_create_upload.json": http_event(
            "POST",
            f"/v1/packages/{PACKAGE}/versions/1.2.0/uploads",
            "/v1/packages/{package}/versions/{version}/uploads",
            {"package": PACKAGE, "version": "1.2.0"},
            upload,
        ),
        "http_list_versions.json": http_event(
            "GET", f"/v1/packages/{PACKAGE}/versions", "/v1/packages/{package}/versions", {"package": PACKAGE}
        ),
        "http_get_release_file.json": http_event(
            "GET",
            f"/v1/packages/{PACKAGE}/versions/1.0.0/files/SKILL.md",
            "/v1/packages/{package}/versions/{version}/files/{path+}",
            {"package": PACKAGE, "version": "1.0.0", "path": "SKILL.md"},
        ),
        "http_get_resolved.json": http_event(
            "GET",
            f"/v1/workspaces/{WORKSPACE}/resolved",
            "/v1/workspaces/{workspace}/resolved",
            {"workspace": WORKSPACE},
        ),
        "http_install.json": http_event(
            "PUT",
            f"/v1/workspaces/{WORKSPACE}/installations/{PACKAGE}",
            "/v1/workspaces/{workspace}/installations/{installation}",
            {"workspace": WORKSPACE, "installation": PACKAGE},
            {"package": PACKAGE, "version": "1.0.0"},
            {"idempotency-key": "sample-http-install-1"},
        ),
        "http_list_approvals.json": http_event(
            "GET",
            f"/v1/workspaces/{WORKSPACE}/approvals",
            "/v1/workspaces/{workspace}/approvals",
            {"workspace": WORKSPACE},
        ),
        "sfn_verify.json": upload_task(),
        "sfn_publish.json": upload_task(verify=verified["verify"]),
        "sfn_reject.json": upload_task(
            verify={
                "verdict": "rejected",
                "code": "archive_rejected",
                "subCode": "digest_mismatch",
                "detail": "SKILL.md: sha256 differs from the manifest",
            }
        ),
        "sfn_plan.json": operation_task(made["admitted"]["operationId"]),
        "sfn_consent.json": operation_task(made["consent"]["operationId"], True),
        "sfn_commit.json": operation_task(made["planned"]["operationId"], plan=made["planned"]["plan"]),
        "sfn_settle.json": operation_task(made["committed"]["operationId"]),
        # one Map item of the maintenance state machine: the upload shards' first page, as if two hours later
        "sfn_sweep.json": {"kind": "upload", "shard": 0, "time": "2026-11-30T14:00:00Z"},
    }


def write_events() -> list[Path]:
    made: dict[str, dict[str, Any]] = {}
    for stage in ("verified", "admitted", "planned", "committed", "consent"):
        with local_stack() as stack:
            made[stage] = seed(stack, stage)
    EVENTS.mkdir(exist_ok=True)
    written = []
    for name, event in sample_events(made).items():
        path = EVENTS / name
        path.write_text(json.dumps(event, indent=2) + "\n", "utf-8")
        written.append(path)
    return written


# ------------------------------------------------------------------ one invocation


def invoke(function: str, event_file: Path, *, use_seed: bool = True, out: Callable[[str], None] = print) -> int:
    """Run ``function`` with the event in ``event_file``; prints the result. 0 ok, 1 the handler failed."""
    try:
        event = json.loads(event_file.read_text("utf-8"))
    except OSError as exc:
        raise InvokeError(f"cannot read {event_file}: {exc.strerror}") from None
    except ValueError as exc:
        raise InvokeError(f"{event_file} is not JSON: {exc}") from None
    from devstack import lambdas

    # logs (the handlers' and the seed's) go to stderr; stdout carries only the result, as with sam local invoke
    with contextlib.redirect_stdout(sys.stderr), local_stack(stack_parameters(function)) as stack:
        spec = function_spec(stack, function)
        if use_seed:
            stage = SAMPLES.get(spec.logical_id, ("", "releases"))[1]
            seed(stack, stage)
        try:
            result = lambdas.invoke_handler(spec, event)
        except Exception as exc:  # what Lambda reports as an Unhandled function error
            result = None
            error = {"errorType": type(exc).__name__, "errorMessage": str(exc)}
    if result is None:
        out(json.dumps(error, indent=2))
        return 1
    out(json.dumps(result, indent=2))
    if isinstance(result, dict) and isinstance(result.get("statusCode"), int) and result["statusCode"] >= 500:
        return 1
    return 0


def invoke_all() -> int:
    """Every function of template.yaml with its sample event; 1 if any has no sample or fails."""
    import devstack

    functions = sorted(devstack.load_template()["Resources"].items())
    failed = []
    for logical_id, resource in functions:
        if resource["Type"] != "AWS::Serverless::Function":
            continue
        sample = SAMPLES.get(logical_id)
        if sample is None or not (EVENTS / sample[0]).is_file():
            failed.append(f"{logical_id}: no sample event (add it to SAMPLES, then make events)")
            continue
        results: list[str] = []
        code = invoke(logical_id, EVENTS / sample[0], out=results.append)
        print(f"{'ok' if code == 0 else 'FAILED'}  {logical_id:<20} events/{sample[0]}")
        if code != 0:
            failed.append(f"{logical_id}: {''.join(results)[:500]}")
    for line in failed:
        print(line, file=sys.stderr)
    return 1 if failed else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="make invoke", description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("function", nargs="?", metavar="FN", help="logical id (VerifyFunction) or folder (verify)")
    parser.add_argument("event", nargs="?", metavar="EVENT", help="an event file, e.g. events/sfn_verify.json")
    parser.add_argument("--no-seed", action="store_true", help="run against an empty stack")
    parser.add_argument("--write-events", action="store_true", help="rewrite events/ from the seed")
    parser.add_argument("--list", action="store_true", help="list the functions and their sample events")
    parser.add_argument("--all", action="store_true", help="invoke every function with its sample (a check)")
    args = parser.parse_args(argv)
    try:
        if args.write_events:
            for path in write_events():
                print(f"wrote {path.relative_to(ROOT)}")
            return 0
        if args.all:
            return invoke_all()
        if args.list or not args.function:
            print("make invoke FN=<function> EVENT=<event file>; the functions and their sample events:")
            for logical_id, (sample, _) in SAMPLES.items():
                folder = logical_id.removesuffix("Function").lower()
                print(f"  make invoke FN={folder:<11} EVENT=events/{sample}")
            return 0
        if args.event:
            event = Path(args.event)
        else:  # the function's sample
            logical = next((k for k in SAMPLES if k.removesuffix("Function").lower() == args.function), args.function)
            event = EVENTS / SAMPLES.get(logical, ("missing.json", ""))[0]
        return invoke(args.function, event, use_seed=not args.no_seed)
    except InvokeError as exc:
        print(f"make invoke: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
