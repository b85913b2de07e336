"""The capacity model of docs/scaling.md: measure what each request kind costs, then replay a synthetic day for
10,000 tenants through it and print the bottleneck.

1. **Measure** (in-process moto, real state machine executions, the handlers as deployed): for a publish, an install,
   an update, a rollback and an uninstall lifecycle, and the reads a runtime makes, every DynamoDB request with the
   items it names (→ read/write request units from the items' real sizes), S3 requests, Step Functions executions
   and state transitions (from the execution history), Lambda invocations per function, API Gateway requests.
2. **Price** each kind at the list prices below (us-east-1; see docs/scaling.md for the date and the sources).
3. **Simulate** a day: 10,000 tenants with Zipf-distributed activity, a diurnal curve, per-minute arrivals; for every
   minute, the peak per-second load on each limit that can bind (one partition key's write throughput for the
   busiest workspace, the busiest tenant's usage ledger item, the table, Step Functions StartExecution and state
   transitions, Lambda concurrency, API Gateway), and the day's cost. Prints the limits sorted by headroom.

Prints figures; asserts nothing. ``--skip-measure`` uses the figures recorded in docs/scaling.md instead of measuring.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import sys
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "shared")]
os.environ.setdefault("POWERTOOLS_METRICS_DISABLED", "true")
os.environ.setdefault("POWERTOOLS_LOG_LEVEL", "ERROR")

# --- Prices (us-east-1 list prices; docs/scaling.md gives the date and where they were read) -------------------------

PRICE = {
    "dynamodb_wru": 0.625 / 1e6,  # on-demand, per write request unit
    "dynamodb_rru": 0.125 / 1e6,  # on-demand, per read request unit
    "s3_put": 0.005 / 1000,  # PUT, COPY, POST, LIST
    "s3_get": 0.0004 / 1000,  # GET, HEAD and the rest (DELETE is free)
    "sfn_transition": 0.025 / 1000,  # Standard workflows
    # Express workflows: per request, plus duration per GB-second, billed in 64 MB chunks and 100 ms increments
    # (https://aws.amazon.com/step-functions/pricing/)
    "sfn_express_request": 1.00 / 1e6,
    "sfn_express_gb_second": 0.00001667,
    "lambda_request": 0.20 / 1e6,
    "lambda_gb_second": 0.0000133334,  # arm64
    "apigw_request": 1.00 / 1e6,  # HTTP API, first 300 million a month
    # KMS (https://aws.amazon.com/kms/pricing/): $1 a month per customer managed key, asymmetric included; a request
    # on an ECC key (the release signing key's Sign) at the asymmetric rate, $0.15 per 10,000 (before the free tier)
    "kms_key_month": 1.00,
    "kms_asymmetric_request": 0.15 / 10_000,
}
# Duration assumed per warm invocation on AWS (not measurable here): (memory GB, seconds)
DURATION = {"VerifyFunction": (1.0, 0.05), "default": (0.5, 0.04)}
# An Express run is billed for its own duration: its tasks' Lambda durations (above) plus what Step Functions itself
# takes per state (assumed 10 ms a state entered), rounded up to 100 ms, at the 64 MB minimum of memory (the state
# Packyard's workflows carry is a few KB)
EXPRESS_SECONDS_PER_STATE = 0.01
EXPRESS_MEMORY_GB = 64 / 1024
# the functions the API invokes (the rest are the workflows' tasks)

# --- Limits that can bind (defaults of a new account, us-east-1) ---------------------------------------------------

LIMITS = {
    "DynamoDB: one partition key, writes (busiest workspace)": 1000.0,  # WCU/s per partition
    "DynamoDB: one item, writes (busiest tenant's USAGE ledger)": 1000.0,  # WCU/s on a single item
    "DynamoDB: table, write request units (on-demand table quota)": 40000.0,
    "DynamoDB: table, read request units (on-demand table quota)": 40000.0,
    # Step Functions quotas (developer guide, "Quotas", us-east-1): set from the template's workflow types by
    # workflow_limits(): Standard StartExecution refills 300/s (bucket 1,300) and state transitions 1,500/s (bucket
    # 5,000); Express StartExecution refills 6,000/s (bucket 6,000) and its state transitions are unlimited
    "Lambda: concurrent executions (account)": 1000.0,
    "API Gateway HTTP API: requests (account throttle)": 10000.0,
}

# --- Limits the template itself sets (read from template.yaml: route throttles, reserved concurrency) ---------------

# the routes the simulated day loads, and what of the day each one carries
ROUTE_LOADS = {
    "GET /v1/workspaces/{workspace}/resolved": "reads",
    "GET /v1/workspaces/{workspace}/operations/{operation}": "operation polls",
    "PUT /v1/workspaces/{workspace}/installations/{installation}": "lifecycles",
    "POST /v1/packages/{package}/versions/{version}/uploads": "publishes",
    "POST /v1/uploads/{id}/complete": "publishes",
    "GET /v1/uploads/{id}": "upload polls",
}


STANDARD_START = "Step Functions: StartExecution, Standard (token bucket refill)"
EXPRESS_START = "Step Functions: StartExecution, Express (token bucket refill)"
STANDARD_TRANSITIONS = "Step Functions: state transitions, Standard (refill)"


def workflow_types() -> dict[str, str]:
    """Each state machine of template.yaml → its workflow type (STANDARD or EXPRESS)."""
    from devstack.template import DEFAULT_TEMPLATE, load_template

    return {
        name: str(resource["Properties"].get("Type", "STANDARD"))
        for name, resource in load_template(DEFAULT_TEMPLATE)["Resources"].items()
        if resource["Type"] in ("AWS::Serverless::StateMachine", "AWS::StepFunctions::StateMachine")
    }


def workflow_limits(types: dict[str, str]) -> dict[str, float]:
    """The Step Functions quotas the template's workflows can reach."""
    found: dict[str, float] = {}
    if "STANDARD" in types.values():
        found.update({STANDARD_START: 300.0, STANDARD_TRANSITIONS: 1500.0})
    if "EXPRESS" in types.values():
        found[EXPRESS_START] = 6000.0
    return found


def route_limit(route: str) -> str:
    return f"API route throttle: {route}"


def template_limits(parameters: dict[str, str]) -> tuple[dict[str, float], dict[str, int]]:
    """The route throttles of template.yaml (rate per second) for the routes the day loads, and the concurrency each
    function reserves with ``parameters`` (none with the template's defaults)."""
    from devstack import deployment
    from devstack.template import DEFAULT_TEMPLATE, load_template

    template = load_template(DEFAULT_TEMPLATE)
    throttles = {t.route: t.rate for t in deployment.route_throttles(template, parameters)}
    limits = {route_limit(route): throttles[route] for route in ROUTE_LOADS if route in throttles}
    return limits, deployment.reserved_concurrency(template, parameters)


# --- 1. Measure ----------------------------------------------------------------------------------------------------


@dataclass
class Flow:
    """What one request kind cost, end to end."""

    name: str
    dynamodb: Counter[str] = field(default_factory=Counter)  # operation -> requests
    wru: float = 0.0
    rru: float = 0.0
    s3: Counter[str] = field(default_factory=Counter)
    kms: Counter[str] = field(default_factory=Counter)  # operation -> requests (release signing)
    executions: int = 0  # Standard executions
    transitions: int = 0  # Standard state transitions (the priced unit)
    express_runs: int = 0  # Express executions (priced per request and per billed duration)
    express_transitions: int = 0  # states the Express runs entered (free; they set the billed duration)
    express_seconds: float = 0.0  # billed Express duration (rounded up to 100 ms per run)
    waited_seconds: float = 0.0  # an API function waiting for the work to end (Prefer: wait): Lambda duration
    lambdas: Counter[str] = field(default_factory=Counter)
    api_requests: int = 0
    workspace_wru: float = 0.0  # written on the workspace's partition key
    ledger_wru: float = 0.0  # written on the tenant's USAGE item

    def as_dict(self) -> dict[str, Any]:
        return {
            "dynamodb": dict(self.dynamodb),
            "wru": self.wru,
            "rru": self.rru,
            "s3": dict(self.s3),
            "kms": dict(self.kms),
            "executions": self.executions,
            "transitions": self.transitions,
            "express_runs": self.express_runs,
            "express_transitions": self.express_transitions,
            "express_seconds": self.express_seconds,
            "waited_seconds": self.waited_seconds,
            "lambdas": dict(self.lambdas),
            "api_requests": self.api_requests,
            "workspace_wru": self.workspace_wru,
            "ledger_wru": self.ledger_wru,
        }


def item_size(item: dict[str, Any]) -> int:
    """DynamoDB's item size: attribute names plus values (strings UTF-8, numbers ~ digits/2 + 1, maps/lists nested)."""

    def value_size(value: dict[str, Any]) -> int:
        (kind, inner), *_ = value.items()
        if kind in ("S", "B"):
            return len(inner.encode() if isinstance(inner, str) else inner)
        if kind == "N":
            return len(str(inner).lstrip("-").replace(".", "")) // 2 + 1
        if kind in ("BOOL", "NULL"):
            return 1
        if kind == "M":
            return 3 + sum(len(k.encode()) + value_size(v) + 1 for k, v in inner.items())
        if kind == "L":
            return 3 + sum(value_size(v) + 1 for v in inner)
        if kind in ("SS", "NS", "BS"):
            return sum(len(str(v)) for v in inner)
        return 0

    return sum(len(name.encode()) + value_size(value) for name, value in item.items())


@contextmanager
def recorded_calls() -> Iterator[list[tuple[str, str, dict[str, Any]]]]:
    """Every AWS API call made while the block runs (any thread), with its parameters."""
    from botocore.handlers import BUILTIN_HANDLERS

    calls: list[tuple[str, str, dict[str, Any]]] = []

    def hook(model: Any = None, params: Any = None, context: Any = None, **_: Any) -> None:
        if model is None or (isinstance(context, dict) and context.get("capacity_recorded")):
            return
        if isinstance(context, dict) and context.get("is_presign_request"):
            return  # a presigned URL is signed locally: no request (the client's use of it is counted apart)
        if isinstance(context, dict):
            context["capacity_recorded"] = True
        calls.append((model.service_model.service_name, model.name, dict(params or {})))

    entry = ("before-parameter-build", hook)
    BUILTIN_HANDLERS.append(entry)
    try:
        yield calls
    finally:
        BUILTIN_HANDLERS.remove(entry)


def measure() -> dict[str, dict[str, Any]]:
    import boto3

    import devstack
    from devstack import express, lambdas
    from devstack.api import LocalApi
    from devstack.caller import Caller
    from packyard.store import aws
    from packyard_cli.build import build_from_files

    flows: dict[str, Flow] = {}
    with devstack.local_aws() as stack, recorded_calls() as calls:
        aws.reset_clients()  # clients made from now on carry the recording hook
        caller = Caller(LocalApi(stack), "t-capacity")
        sfn = boto3.client("stepfunctions")
        dynamodb = boto3.client("dynamodb")

        def run(name: str, action: Callable[[], Any], *, waits: bool = False) -> None:
            calls.clear()
            lambdas.clear_invocations()
            before = {run.arn for run in devstack.express_runs()}
            execution_arn = action()
            flow = Flow(name)
            if isinstance(execution_arn, dict) and not (
                express.is_express_arn(execution_arn["arn"])
                or express.is_express_machine(execution_arn["arn"].split(":")[6])
            ):
                history = sfn.get_execution_history(executionArn=execution_arn["arn"], maxResults=1000)["events"]
                flow.executions = 1
                flow.transitions = sum(1 for event in history if event["type"].endswith("StateEntered"))
            account(flow, list(calls), dynamodb, stack.table_name)
            for invocation in lambdas.invocations():
                flow.lambdas[invocation.function] += 1
            flow.api_requests = sum(n for fn, n in flow.lambdas.items() if fn in API_FUNCTIONS)
            runs = [run for run in devstack.express_runs() if run.arn not in before]
            if runs:
                task_seconds = sum(
                    n * DURATION.get(fn, DURATION["default"])[1]
                    for fn, n in flow.lambdas.items()
                    if fn not in API_FUNCTIONS
                )
                flow.express_runs = len(runs)
                flow.express_transitions = sum(run.transitions for run in runs)
                for run in runs:
                    seconds = task_seconds / len(runs) + run.transitions * EXPRESS_SECONDS_PER_STATE
                    flow.express_seconds += math.ceil(round(seconds, 6) * 10) / 10
                if waits:  # the API call that waited for the work lasted about as long as the runs did
                    flow.waited_seconds = task_seconds + flow.express_transitions * EXPRESS_SECONDS_PER_STATE
            flows[name] = flow

        built = {v: build_from_files({"SKILL.md": f"capacity {v}\n".encode()}) for v in ("1.0.0", "1.1.0")}
        machine = stack.state_machine_arns["InstallStateMachine"]
        prefix, _, machine_name = machine.partition(":stateMachine:")

        wait = {"Prefer": "wait=20"}  # what `packyard publish` / `install` send: the answer comes when it settles

        def publish(version: str) -> Callable[[], dict[str, Any]]:
            def go() -> dict[str, Any]:
                session = caller.request_upload("pkg", version, built[version])
                caller.put_archive(session.body, built[version].archive)
                done = caller.post(f"/v1/uploads/{session.body['uploadId']}/complete", headers=wait)
                devstack.wait_for_execution(done.body["executionArn"], timeout=60, client=sfn)
                assert done.status == 200 and done.body["state"] == "published", done.body  # no poll
                return {"arn": done.body["executionArn"]}

            return go

        def operation(send: Callable[[], Any]) -> Callable[[], dict[str, Any]]:
            def go() -> dict[str, Any]:
                answer = send()
                admitted = answer.body
                arn = f"{prefix}:execution:{machine_name}:{admitted['operationId']}"
                devstack.wait_for_execution(arn, timeout=60, client=sfn)
                assert answer.status == 200 and admitted["outcome"]["result"] == "succeeded", admitted  # no poll
                return {"arn": arn}

            return go

        def put(version: str, key: str, if_match: str | None = None) -> Any:
            headers = {"Idempotency-Key": key, **wait, **({"If-Match": if_match} if if_match else {})}
            return caller.put(
                caller.installation_path("ws", "i"), {"package": "pkg", "version": version}, headers=headers
            )

        def change(method: str, path: str, key: str, if_match: str) -> Any:
            headers = {"Idempotency-Key": key, "If-Match": if_match, **wait}
            return caller.post(path, headers=headers) if method == "POST" else caller.delete(path, headers=headers)

        installation = caller.installation_path("ws", "i")
        # the measured publish is a new version of a package the process has published before (the usual one: a
        # warm function, its signing key's id already known), with content never stored
        publish("1.0.0")()
        run("publish (new content)", publish("1.1.0"), waits=True)
        run("install lifecycle", operation(lambda: put("1.0.0", "k1")), waits=True)
        run("update lifecycle", operation(lambda: put("1.1.0", "k2", '"1"')), waits=True)
        run(
            "rollback lifecycle", operation(lambda: change("POST", f"{installation}/rollback", "k3", '"2"')), waits=True
        )
        run("uninstall lifecycle", operation(lambda: change("DELETE", installation, "k4", '"3"')), waits=True)
        operation(lambda: put("1.0.0", "k5", '"4"'))()  # for the reads
        run("read: GET resolved (runtime)", lambda: caller.get("/v1/workspaces/ws/resolved"))
        run("read: GET operation (poll)", lambda: caller.get("/v1/workspaces/ws/operations/x"))
        sizes: dict[str, list[int]] = defaultdict(list)
        for page in dynamodb.get_paginator("scan").paginate(TableName=stack.table_name):
            for found in page["Items"]:
                kind = found["sk"]["S"].split("#", 1)[0]
                sizes[kind].append(item_size(found))
    measured: dict[str, dict[str, Any]] = {name: flow.as_dict() for name, flow in flows.items()}
    ITEM_SIZES.update({kind: max(values) for kind, values in sizes.items()})
    return measured


ITEM_SIZES: dict[str, int] = {}
"""Largest item of each kind (by sort key prefix) seen in the measurement, in bytes."""


API_FUNCTIONS = {"UploadsFunction", "CatalogFunction", "QueriesFunction", "AdmissionFunction", "ApprovalsFunction"}


def account(flow: Flow, calls: list[tuple[str, str, dict[str, Any]]], client: Any, table: str) -> None:
    """Request units of each DynamoDB call from the sizes of the items it names, as they are after the flow."""
    cache: dict[tuple[str, str], int] = {}

    def size(key: dict[str, Any]) -> int:
        pk, sk = key["pk"]["S"], key["sk"]["S"]
        if (pk, sk) not in cache:
            found = client.get_item(TableName=table, Key={"pk": {"S": pk}, "sk": {"S": sk}}).get("Item")
            cache[(pk, sk)] = item_size(found) if found else 100
        return cache[(pk, sk)]

    def write_units(key: dict[str, Any], transactional: bool) -> float:
        units = max(1, math.ceil(size(key) / 1024)) * (2 if transactional else 1)
        if "#WS#" in key["pk"]["S"]:
            flow.workspace_wru += units
        if key["sk"]["S"] == "USAGE":
            flow.ledger_wru += units
        return units

    for service, operation, params in calls:
        if service == "s3":
            flow.s3[operation] += 1
            continue
        if service == "kms":
            flow.kms[operation] += 1
            continue
        if service != "dynamodb":
            continue
        flow.dynamodb[operation] += 1
        if operation == "GetItem":
            factor = 1.0 if params.get("ConsistentRead") else 0.5
            flow.rru += max(1, math.ceil(size(params["Key"]) / 4096)) * factor
        elif operation == "BatchGetItem":
            for request in params["RequestItems"].values():
                factor = 1.0 if request.get("ConsistentRead") else 0.5
                flow.rru += sum(max(1, math.ceil(size(key) / 4096)) * factor for key in request["Keys"])
        elif operation == "Query":
            found = client.query(**{k: v for k, v in params.items() if k not in ("ExclusiveStartKey",)})
            total = sum(item_size(item) for item in found["Items"])
            flow.rru += max(1, math.ceil(total / 4096)) * (1.0 if params.get("ConsistentRead") else 0.5)
        elif operation in ("PutItem", "UpdateItem", "DeleteItem"):
            key = params.get("Key") or {"pk": params["Item"]["pk"], "sk": params["Item"]["sk"]}
            flow.wru += write_units(key, transactional=False)
        elif operation == "TransactWriteItems":
            for entry in params["TransactItems"]:
                ((_, op),) = entry.items()
                key = op.get("Key") or {"pk": op["Item"]["pk"], "sk": op["Item"]["sk"]}
                # a ConditionCheck is billed as a transactional write of its item (2 WRU per KB), not as a read:
                # measured against DynamoDB (docs/decisions.md, "A ConditionCheck is billed as a write")
                flow.wru += write_units(key, transactional=True)
        elif operation == "TransactGetItems":
            for entry in params["TransactItems"]:
                flow.rru += 2 * max(1, math.ceil(size(entry["Get"]["Key"]) / 4096))
    flow.s3["PutObject (client's presigned upload)"] += 1 if flow.name.startswith("publish") else 0


# --- 2. Price ------------------------------------------------------------------------------------------------------


def cost(flow: dict[str, Any]) -> dict[str, float]:
    s3_put = sum(n for op, n in flow["s3"].items() if op.startswith(("Put", "Copy", "List", "Create", "Upload")))
    s3_get = sum(n for op, n in flow["s3"].items() if op.startswith(("Get", "Head")))
    gb_seconds = 0.0
    for function, n in flow["lambdas"].items():
        memory, seconds = DURATION.get(function, DURATION["default"])
        gb_seconds += n * memory * seconds
    gb_seconds += flow.get("waited_seconds", 0.0) * DURATION["default"][0]
    invocations = sum(flow["lambdas"].values())
    express_cost = (
        flow.get("express_runs", 0) * PRICE["sfn_express_request"]
        + flow.get("express_seconds", 0.0) * EXPRESS_MEMORY_GB * PRICE["sfn_express_gb_second"]
    )
    return {
        "DynamoDB": flow["wru"] * PRICE["dynamodb_wru"] + flow["rru"] * PRICE["dynamodb_rru"],
        "S3": s3_put * PRICE["s3_put"] + s3_get * PRICE["s3_get"],
        "Step Functions": flow["transitions"] * PRICE["sfn_transition"] + express_cost,
        "Lambda": invocations * PRICE["lambda_request"] + gb_seconds * PRICE["lambda_gb_second"],
        "API Gateway": flow["api_requests"] * PRICE["apigw_request"],
        "KMS": sum(flow.get("kms", {}).values()) * PRICE["kms_asymmetric_request"],
    }


# --- 3. Simulate a day -----------------------------------------------------------------------------------------------


@dataclass
class Day:
    tenants: int = 10_000
    workspaces_per_tenant: int = 20
    installs_per_workspace: float = 3.0  # lifecycles a day (install, update, rollback or uninstall), on average
    publishes_per_tenant: float = 2.0
    runtime_reads_per_install: float = 10.0  # GET resolved by the runtime, per lifecycle
    # clients that send Prefer: wait (the CLI does) poll nothing; the day assumes the rest of them poll a few times
    polls_per_operation: float = 1.0
    zipf: float = 1.1  # tenant activity ~ 1 / rank^zipf
    hot_workspace_share: float = 0.3  # share of a tenant's lifecycles that go to its busiest workspace
    burst: float = 4.0  # peak second within a minute vs the minute's mean (bursty clients, retries)
    seed: int = 11


def diurnal(minute: int) -> float:
    """Relative load through the day: a trough at night, a peak mid-afternoon (mean 1)."""
    return 1 + 0.8 * math.sin((minute / 1440 - 0.375) * 2 * math.pi)


def simulate(flows: dict[str, dict[str, Any]], day: Day) -> dict[str, Any]:
    rng = random.Random(day.seed)
    weights = [1 / (rank + 1) ** day.zipf for rank in range(day.tenants)]
    scale = day.tenants / sum(weights)
    activity = [w * scale for w in weights]  # mean 1
    lifecycle_kinds = ["install lifecycle", "update lifecycle", "rollback lifecycle", "uninstall lifecycle"]
    lifecycle = {key: sum(flows[k][key] for k in lifecycle_kinds) / len(lifecycle_kinds) for key in ("wru", "rru")}
    lifecycle_ws_wru = sum(flows[k]["workspace_wru"] for k in lifecycle_kinds) / len(lifecycle_kinds)
    lifecycle_transitions = sum(flows[k]["transitions"] for k in lifecycle_kinds) / len(lifecycle_kinds)
    lifecycle_standard = sum(flows[k].get("executions", 0) for k in lifecycle_kinds) / len(lifecycle_kinds)
    lifecycle_express = sum(flows[k].get("express_runs", 0) for k in lifecycle_kinds) / len(lifecycle_kinds)
    lifecycle_api = sum(flows[k]["api_requests"] for k in lifecycle_kinds) / len(lifecycle_kinds)
    lifecycle_lambdas = sum(sum(flows[k]["lambdas"].values()) for k in lifecycle_kinds) / len(lifecycle_kinds)
    publish, read, poll = (
        flows["publish (new content)"],
        flows["read: GET resolved (runtime)"],
        flows["read: GET operation (poll)"],
    )

    daily_lifecycles = [a * day.workspaces_per_tenant * day.installs_per_workspace for a in activity]
    daily_publishes = [a * day.publishes_per_tenant for a in activity]
    peaks: dict[str, tuple[float, int]] = defaultdict(lambda: (0.0, 0))
    totals: Counter[str] = Counter()
    top = 0  # the busiest tenant is rank 0
    for minute in range(1440):
        shape = diurnal(minute) / 1440 / 60  # per second, mean
        noise = rng.uniform(0.9, 1.1)
        lifecycles_s = sum(daily_lifecycles) * shape * noise
        publishes_s = sum(daily_publishes) * shape * noise
        reads_s = lifecycles_s * day.runtime_reads_per_install
        polls_s = (lifecycles_s + publishes_s) * day.polls_per_operation
        hot_ws_s = daily_lifecycles[top] * day.hot_workspace_share * shape * noise
        hot_ledger_s = daily_publishes[top] * shape * noise
        burst = day.burst
        load = {
            "DynamoDB: one partition key, writes (busiest workspace)": hot_ws_s * lifecycle_ws_wru * burst,
            "DynamoDB: one item, writes (busiest tenant's USAGE ledger)": hot_ledger_s * publish["ledger_wru"] * burst,
            "DynamoDB: table, write request units (on-demand table quota)": (
                lifecycles_s * lifecycle["wru"] + publishes_s * publish["wru"]
            )
            * burst,
            "DynamoDB: table, read request units (on-demand table quota)": (
                lifecycles_s * lifecycle["rru"]
                + publishes_s * publish["rru"]
                + reads_s * read["rru"]
                + polls_s * poll["rru"]
            )
            * burst,
            STANDARD_START: (lifecycles_s * lifecycle_standard + publishes_s * publish.get("executions", 0)) * burst,
            EXPRESS_START: (lifecycles_s * lifecycle_express + publishes_s * publish.get("express_runs", 0)) * burst,
            STANDARD_TRANSITIONS: (lifecycles_s * lifecycle_transitions + publishes_s * publish["transitions"]) * burst,
            # concurrency = arrival rate x duration (Little's law), invocations of ~40-50 ms
            "Lambda: concurrent executions (account)": (
                (lifecycles_s * lifecycle_lambdas + publishes_s * sum(publish["lambdas"].values()) + reads_s + polls_s)
                * 0.05
                * burst
            ),
            "API Gateway HTTP API: requests (account throttle)": (
                lifecycles_s * lifecycle_api + publishes_s * publish["api_requests"] + reads_s + polls_s
            )
            * burst,
        }
        carried = {
            "reads": reads_s,
            "operation polls": lifecycles_s * day.polls_per_operation,
            "lifecycles": lifecycles_s,  # every admission counted on PUT: an upper bound for that one route
            "publishes": publishes_s,
            "upload polls": publishes_s * day.polls_per_operation,
        }
        for route, what in ROUTE_LOADS.items():
            if route_limit(route) in LIMITS:
                load[route_limit(route)] = carried[what] * burst
        # a function with reserved concurrency is capped there (Little's law again, ~50 ms a call)
        per_function = {
            "QueriesFunction": (reads_s + lifecycles_s * day.polls_per_operation) * 0.05 * burst,
            "UploadsFunction": publishes_s * (2 + day.polls_per_operation) * 0.05 * burst,
            "AdmissionFunction": lifecycles_s * 0.05 * burst,
        }
        for function, value in per_function.items():
            if f"Lambda: {function} reserved concurrency" in LIMITS:
                load[f"Lambda: {function} reserved concurrency"] = value
        for name, value in load.items():
            if name not in LIMITS:
                continue  # a quota of a workflow type the template does not use
            if value > peaks[name][0]:
                peaks[name] = (value, minute)
        totals["lifecycles"] += lifecycles_s * 60
        totals["publishes"] += publishes_s * 60
        totals["reads"] += (reads_s + polls_s) * 60
    return {"peaks": dict(peaks), "totals": dict(totals), "top_tenant_lifecycles": daily_lifecycles[top]}


# --- Report --------------------------------------------------------------------------------------------------------


def report(flows: dict[str, dict[str, Any]], day: Day) -> None:
    print("Capacity model (docs/scaling.md). Measured per request kind, on moto with the real state machines:")
    print(
        f"  {'request kind':<30}{'DDB req':>8}{'WRU':>6}{'RRU':>6}{'ws WRU':>7}{'S3':>4}{'SFN tr':>7}"
        f"{'Express':>8}{'Lambda':>7}{'API':>4}   DynamoDB requests"
    )
    for name, flow in flows.items():
        ddb = ", ".join(f"{op} {n}" for op, n in sorted(flow["dynamodb"].items()))
        express_runs = flow.get("express_runs", 0)
        express = f"{express_runs}/{flow.get('express_seconds', 0.0):.1f}s" if express_runs else "0"
        print(
            f"  {name:<30}{sum(flow['dynamodb'].values()):>8}{flow['wru']:>6.0f}{flow['rru']:>6.1f}"
            f"{flow['workspace_wru']:>7.0f}{sum(flow['s3'].values()):>4}{flow['transitions']:>7}"
            f"{express:>8}{sum(flow['lambdas'].values()):>7}{flow['api_requests']:>4}   {ddb}"
        )
    print(
        "  (SFN tr: Standard state transitions, the priced unit; Express: runs / billed seconds, "
        "at an assumed 10 ms a state plus the tasks' Lambda durations)"
    )
    if ITEM_SIZES:
        print("\n  Item sizes (largest seen, bytes): " + ", ".join(f"{k} {v}" for k, v in sorted(ITEM_SIZES.items())))
    print("\n  Cost per 1,000 (USD, us-east-1 list prices; Lambda at an assumed 40-50 ms per warm invocation):")
    print(
        f"  {'':<30}"
        + "".join(f"{k:>15}" for k in ("DynamoDB", "S3", "Step Functions", "Lambda", "API Gateway", "KMS", "total"))
    )
    for name in ("publish (new content)", "install lifecycle", "update lifecycle", "uninstall lifecycle"):
        parts = cost(flows[name])
        print(
            f"  {name:<30}"
            + "".join(f"{v * 1000:>15.4f}" for v in parts.values())
            + f"{sum(parts.values()) * 1000:>15.4f}"
        )

    result = simulate(flows, day)
    totals = result["totals"]
    print(
        f"\n  A synthetic day: {day.tenants:,} tenants (Zipf {day.zipf}), {day.workspaces_per_tenant} workspaces each, "
        f"{totals['lifecycles']:,.0f} install lifecycles, {totals['publishes']:,.0f} publishes, "
        f"{totals['reads']:,.0f} reads; the busiest tenant {result['top_tenant_lifecycles']:,.0f} lifecycles, "
        f"{day.hot_workspace_share:.0%} of them on one workspace; peak second = {day.burst} x the minute's mean."
    )
    day_cost = (
        totals["lifecycles"] * sum(cost(flows["install lifecycle"]).values())
        + totals["publishes"] * sum(cost(flows["publish (new content)"]).values())
        + totals["reads"] * sum(cost(flows["read: GET resolved (runtime)"]).values())
    )
    print(f"  cost of the day: ${day_cost:,.2f} (~${day_cost * 30:,.0f} a month)")
    rows = sorted(
        ((value / LIMITS[name], name, value, minute) for name, (value, minute) in result["peaks"].items()), reverse=True
    )
    print(f"\n  {'limit':<86}{'peak/s':>10}{'limit/s':>10}{'used':>8}  at")
    for used, name, value, minute in rows:
        print(f"  {name:<86}{value:>10.1f}{LIMITS[name]:>10.0f}{used:>8.1%}  {minute // 60:02d}:{minute % 60:02d}")
    used, name, value, minute = rows[0]
    headroom = 1 / used if used else float("inf")
    at = f"{minute // 60:02d}:{minute % 60:02d}"
    if used > 1:
        over = [row[1] for row in rows if row[0] > 1]
        print(
            f"\n  bottleneck: {name} — {used:.1%} of its limit at the peak ({at}): it binds already, the day needs "
            f"{used:.1f}x what the template allows ({len(over)} limit(s) over: {'; '.join(over)})."
        )
    else:
        print(
            f"\n  bottleneck: {name} — {used:.1%} of its limit at the peak ({at}); "
            f"the same day would have to grow {headroom:.1f}x for it to bind."
        )


# --- What a stack costs with no traffic -------------------------------------------------------------------------------

SECONDS_A_MONTH = 30 * 24 * 3600
# SnapStart for Python: the snapshot cache is billed per GB (of the function's memory) per second while a published
# version is active, and each restore per GB restored (us-east-1, https://aws.amazon.com/lambda/pricing/)
SNAPSTART_CACHE_GB_SECOND = 0.0000015046
ALARM_A_MONTH = 0.10  # CloudWatch standard-resolution metric alarm


def idle_cost() -> dict[str, float]:
    """A month of a stack nobody calls, from template.yaml: the maintenance schedule's executions (each visits every
    shard once: Shards, the Map, then SweepPage, MorePages and ShardSwept per shard), their Lambda calls and the
    due-index query of each page, the SnapStart caches of the functions that have one, and the alarms."""
    import re

    from devstack.template import DEFAULT_TEMPLATE, load_template

    template = load_template(DEFAULT_TEMPLATE)
    resources = template["Resources"]
    machine = resources["MaintenanceStateMachine"]["Properties"]
    rate = machine["Events"]["Sweep"]["Properties"]["Schedule"]
    minutes = int(re.fullmatch(r"rate\((\d+) minutes?\)", rate).group(1))  # type: ignore[union-attr]
    runs = SECONDS_A_MONTH / (60 * minutes)
    definition = json.loads((ROOT / machine["DefinitionUri"]).read_text())
    shards = len(definition["States"]["Shards"]["Result"])
    transitions = runs * (2 + 3 * shards)
    pages = runs * shards
    express = machine.get("Type") == "EXPRESS"
    duration = DURATION["default"][1]
    globals_ = template["Globals"]["Function"]
    sweeper_memory = resources["SweeperFunction"]["Properties"].get("MemorySize", globals_["MemorySize"]) / 1024
    snapstart_gb = sum(
        r["Properties"].get("MemorySize", globals_["MemorySize"]) / 1024
        for r in resources.values()
        if r["Type"] == "AWS::Serverless::Function" and _snapstart_on(template, r["Properties"].get("SnapStart"))
    )
    alarms = sum(1 for r in resources.values() if r["Type"] == "AWS::CloudWatch::Alarm")
    keys = sum(1 for r in resources.values() if r["Type"] == "AWS::KMS::Key")
    if express:
        # a run's billed duration: its pages (one sweeper call each) and states, rounded up to 100 ms
        seconds = math.ceil((shards * duration + (2 + 3 * shards) * EXPRESS_SECONDS_PER_STATE) * 10) / 10
        workflow = {
            f"Step Functions (Express): {runs:,.0f} runs of {seconds:.1f} s billed": runs
            * (PRICE["sfn_express_request"] + seconds * EXPRESS_MEMORY_GB * PRICE["sfn_express_gb_second"])
        }
    else:
        workflow = {
            f"Step Functions: {runs:,.0f} runs x {2 + 3 * shards} transitions = {transitions:,.0f}": transitions
            * PRICE["sfn_transition"]
        }
    return {
        **workflow,
        f"Lambda: {pages:,.0f} sweeper calls": pages * PRICE["lambda_request"]
        + pages * sweeper_memory * duration * PRICE["lambda_gb_second"],
        f"DynamoDB: {pages:,.0f} due-index queries (0.5 RRU)": pages * 0.5 * PRICE["dynamodb_rru"],
        f"SnapStart: {snapstart_gb:.1f} GB of snapshots cached": snapstart_gb
        * SECONDS_A_MONTH
        * SNAPSTART_CACHE_GB_SECOND,
        f"CloudWatch: {alarms} alarms": alarms * ALARM_A_MONTH,
        f"KMS: {keys} key(s) (the release signing key)": keys * PRICE["kms_key_month"],
    }


def _snapstart_on(template: dict[str, Any], setting: Any) -> bool:
    """Whether a function's SnapStart applies with the template's parameter defaults (``ApplyOn`` may be an ``!If``
    on a condition of a parameter)."""
    if not isinstance(setting, dict):
        return False
    apply_on = setting.get("ApplyOn")
    if isinstance(apply_on, dict) and "Fn::If" in apply_on:
        condition, when_true, when_false = apply_on["Fn::If"]
        apply_on = when_true if _condition_holds(template, condition) else when_false
    return apply_on == "PublishedVersions"


def _condition_holds(template: dict[str, Any], name: str) -> bool:
    """A template condition of the form ``Fn::Equals [!Ref Parameter, value]``, at the parameters' defaults."""
    (function, (left, right)), *_ = template["Conditions"][name].items()
    if function != "Fn::Equals":
        raise ValueError(f"condition {name}: only Fn::Equals on a parameter is modelled")
    if isinstance(left, dict) and "Ref" in left:
        left = str(template["Parameters"][left["Ref"]].get("Default"))
    return str(left) == str(right)


def report_idle() -> dict[str, float]:
    parts = idle_cost()
    print("\n  Idle cost of a stack, a month with no traffic (us-east-1 list prices, before free tiers):")
    for name, value in parts.items():
        print(f"    {name:<70}${value:>8.2f}")
    print(f"    {'total':<70}${sum(parts.values()):>8.2f}")
    return parts


# Issue 23's targets: per 1,000 (USD), a month idle (USD, Step Functions + Lambda + schedules), WRU, API requests
TARGETS = {"lifecycle": 0.030, "publish": 0.040, "idle": 1.00, "lifecycle_wru": 16, "lifecycle_api": 2}
LIFECYCLES = ("install lifecycle", "update lifecycle", "rollback lifecycle", "uninstall lifecycle")


def report_targets(flows: dict[str, dict[str, Any]], idle: dict[str, float]) -> None:
    """Each cost target against what was measured (met / NOT met), from the measured request counts."""
    print("\n  Targets (issue 23):")

    def line(what: str, value: float, target: float, unit: str) -> None:
        verdict = "met" if value <= target else "NOT met"
        print(f"    {what:<70}{unit}{value:>9.4f}  target <= {unit}{target:<8} {verdict}")

    for name in LIFECYCLES:
        line(f"{name}, per 1,000", sum(cost(flows[name]).values()) * 1000, TARGETS["lifecycle"], "$")
    line(
        "publish (new content), per 1,000",
        sum(cost(flows["publish (new content)"]).values()) * 1000,
        TARGETS["publish"],
        "$",
    )
    in_scope = sum(v for k, v in idle.items() if k.startswith(("Step Functions", "Lambda", "SnapStart", "Schedule")))
    line("idle month: Step Functions, Lambda (SnapStart too) and schedules", in_scope, TARGETS["idle"], "$")
    for name in LIFECYCLES:
        wru = flows[name]["wru"]
        print(
            f"    {name + ', DynamoDB write units':<70}{wru:>10.0f}  target <= {TARGETS['lifecycle_wru']:<9} "
            f"{'met' if wru <= TARGETS['lifecycle_wru'] else 'NOT met'}"
        )
        api = flows[name]["api_requests"]
        print(
            f"    {name + ', API requests (client waits)':<70}{api:>10}  target <= {TARGETS['lifecycle_api']:<9} "
            f"{'met' if api <= TARGETS['lifecycle_api'] else 'NOT met'}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--skip-measure", action="store_true", help="use the figures recorded in docs/scaling.md")
    parser.add_argument("--tenants", type=int, default=10_000)
    parser.add_argument("--write", type=Path, help="write the measured figures as JSON")
    parser.add_argument(
        "--parameter",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a template parameter, e.g. ApiReservedConcurrency=50 (the template's defaults otherwise)",
    )
    args = parser.parse_args()
    route_limits, reserved = template_limits(dict(p.split("=", 1) for p in args.parameter))
    LIMITS.update(workflow_limits(workflow_types()))
    LIMITS.update(route_limits)
    LIMITS.update({f"Lambda: {function} reserved concurrency": float(n) for function, n in reserved.items()})
    recorded = ROOT / "benchmarks" / "capacity_measured.json"
    if args.skip_measure:
        flows = json.loads(recorded.read_text())
    else:
        flows = measure()
        if args.write:
            args.write.write_text(json.dumps(flows, indent=2, sort_keys=True) + "\n")
    report(flows, Day(tenants=args.tenants))
    report_targets(flows, report_idle())


if __name__ == "__main__":
    main()
