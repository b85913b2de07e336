"""DynamoDB requests per installation operation, counted with botocore event hooks on moto, beside the same figures
for Powertools' idempotency utility guarding a no-op handler.

Packyard rows:
* install / update / uninstall / rollback lifecycle: admission (PUT/DELETE/POST) → the real install state machine
  (Plan → Commit → Settle, Lambda tasks dispatched in-process) until the execution ends. The client's polling
  (DescribeExecution) is left out; the state machine's own Lambda invokes are not requests of the code under test.
* replay of a settled key: the same PUT again after the operation settled.
* duplicate in flight: the same PUT again while the first is admitted and its tasks have not run (StartExecution is
  replaced by a recorder for both requests, so the tasks never run; the recorder's count is shown as the
  Step Functions request the duplicate re-issues, idempotent by execution name).

Powertools rows: ``@idempotent`` with ``DynamoDBPersistenceLayer`` on a table with the key schema it needs (``id``
hash key) on the same moto: first call, replay of a completed key, and a duplicate while the record is INPROGRESS
(called from inside the handler; it raises IdempotencyAlreadyInProgressError).

Run: .venv/bin/python benchmarks/bench_operations.py
"""

from __future__ import annotations

import os
import sys
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

sys.path[:0] = [str(Path(__file__).parents[1]), str(Path(__file__).parents[1] / "shared")]
os.environ.setdefault("POWERTOOLS_METRICS_DISABLED", "true")
os.environ.setdefault("POWERTOOLS_TRACE_DISABLED", "true")
os.environ.setdefault("POWERTOOLS_LOG_LEVEL", "ERROR")

import boto3  # noqa: E402
from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

import devstack  # noqa: E402
from devstack.api import LocalApi  # noqa: E402
from devstack.caller import Caller  # noqa: E402
from devstack.counting import count_aws_requests  # noqa: E402
from devstack.lambdas import LambdaContext  # noqa: E402
from packyard.store import workflows  # noqa: E402
from packyard_cli.build import build_from_files  # noqa: E402

RUNS = 10
POLLING = ("stepfunctions", "DescribeExecution")
RECORDED_START = ("stepfunctions", "StartExecution*")
IDEMPOTENCY_TABLE = "PowertoolsIdempotency"


class Row:
    def __init__(self, label: str, target: str, counts: Counter) -> None:
        self.label, self.target, self.counts = label, target, counts

    def dynamodb(self) -> float:
        return sum(n for (service, _), n in self.counts.items() if service == "dynamodb")

    def others(self) -> str:
        short = {"stepfunctions": "sfn"}
        rest = sorted((f"{short.get(s, s)} {o}", n) for (s, o), n in self.counts.items() if s != "dynamodb")
        return ", ".join(f"{name} {n:g}" for name, n in rest) or "-"


def measure(label: str, target: str, action: Callable[[int], None], runs: int = RUNS) -> Row:
    """Mean requests per run of ``action(i)``."""
    total: Counter = Counter()
    for i in range(runs):
        with count_aws_requests() as counted:
            action(i)
        total.update({k: v for k, v in counted.items() if k != POLLING})
    return Row(label, target, Counter({k: v / runs for k, v in total.items()}))


@contextmanager
def recorded_starts() -> Iterator[list[str]]:
    """StartExecution replaced by a recorder: the operation stays admitted, its tasks never run."""
    started: list[str] = []
    real = workflows.start
    workflows.start = lambda arn, name, payload: started.append(name) or name  # type: ignore[assignment]
    try:
        yield started
    finally:
        workflows.start = real  # type: ignore[assignment]


def packyard_rows(stack: devstack.Stack) -> list[Row]:
    caller = Caller(LocalApi(stack), "t-bench")
    for version, text in (("1.0.0", "one"), ("1.1.0", "two")):
        # no permissions declared: an owner's install then needs no consent, and the lifecycle is the plain one
        built = build_from_files({"SKILL.md": f"{text}\n".encode()})
        assert caller.publish("hello", version, built)["state"] == "published"
    machine = stack.state_machine_arns["InstallStateMachine"]
    prefix, _, name = machine.partition(":stateMachine:")

    def run(response: Any, expect: str = "succeeded") -> dict[str, Any]:
        assert response.status in (200, 202), response.body
        op = response.body
        if op["state"] != "settled":
            execution = op["operationId"] if not op.get("attempt") else f"{op['operationId']}-{op['attempt']}"
            devstack.wait_for_execution(f"{prefix}:execution:{name}:{execution}", timeout=60)
        return op

    def settled(ws: str, op: dict[str, Any]) -> dict[str, Any]:
        final = caller.get(f"/v1/workspaces/{ws}/operations/{op['operationId']}").body
        assert final["state"] == "settled" and final["outcome"]["result"] == "succeeded", final
        return final

    def install(i: int) -> None:
        ws = f"ws-install-{i}"
        op = run(caller.install(ws, "hello", "hello", "1.0.0", key="k-install"))
        settled_ops.append((ws, op))

    settled_ops: list[tuple[str, dict[str, Any]]] = []
    rows = [measure("install lifecycle", "≤ 8", install)]
    for ws, op in settled_ops:
        settled(ws, op)

    def replay(i: int) -> None:
        ws, _ = settled_ops[i]
        again = caller.install(ws, "hello", "hello", "1.0.0", key="k-install")
        assert again.status == 200 and again.body["outcome"]["result"] == "succeeded", again.body

    rows.append(measure("replay of a settled key", "= 1", replay))

    def update(i: int) -> None:
        ws = f"ws-install-{i}"
        op = run(caller.install(ws, "hello", "hello", "1.1.0", key="k-update", if_match='"1"'))
        settled_ops[i] = (ws, op)

    rows.append(measure("update lifecycle", "≤ 8", update))
    for ws, op in settled_ops:
        settled(ws, op)

    def rollback(i: int) -> None:
        ws = f"ws-install-{i}"
        op = run(caller.rollback(ws, "hello", key="k-rollback", if_match='"2"'))
        settled_ops[i] = (ws, op)

    rows.append(measure("rollback lifecycle", "≤ 8", rollback))
    for ws, op in settled_ops:
        settled(ws, op)

    def uninstall(i: int) -> None:
        ws = f"ws-install-{i}"
        op = run(caller.uninstall(ws, "hello", key="k-uninstall", if_match='"3"'))
        settled_ops[i] = (ws, op)

    rows.append(measure("uninstall lifecycle", "≤ 8", uninstall))
    for ws, op in settled_ops:
        settled(ws, op)

    duplicates: Counter = Counter()
    for i in range(RUNS):
        ws = f"ws-dup-{i}"
        with recorded_starts() as started:
            first = caller.install(ws, "hello", "hello", "1.0.0", key="k-dup")
            assert first.status == 202, first.body
            started.clear()
            with count_aws_requests() as counted:
                again = caller.install(ws, "hello", "hello", "1.0.0", key="k-dup")
        assert again.status == 202 and again.body["operationId"] == first.body["operationId"], again.body
        duplicates.update(counted)
        duplicates[RECORDED_START] += len(started)
    rows.append(Row("duplicate while in flight", "= 1", _mean(duplicates, RUNS)))
    return rows


def _mean(counts: Counter, runs: int) -> Counter:
    return Counter({k: v / runs for k, v in counts.items()})


def powertools_rows(stack: devstack.Stack) -> list[Row]:
    from aws_lambda_powertools.utilities.idempotency import (
        DynamoDBPersistenceLayer,
        IdempotencyConfig,
        idempotent,
    )
    from aws_lambda_powertools.utilities.idempotency.exceptions import IdempotencyAlreadyInProgressError

    boto3.client("dynamodb", region_name=stack.region).create_table(
        TableName=IDEMPOTENCY_TABLE,
        KeySchema=[{"AttributeName": "id", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "id", "AttributeType": "S"}],
        BillingMode="PAY_PER_REQUEST",
    )
    persistence = DynamoDBPersistenceLayer(table_name=IDEMPOTENCY_TABLE)
    config = IdempotencyConfig(event_key_jmespath="key")
    inner: dict[str, Any] = {}

    @idempotent(persistence_store=persistence, config=config)
    def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
        if event.get("reenter"):
            # a duplicate delivered while this one runs: the record is INPROGRESS
            with count_aws_requests() as counted:
                try:
                    handler(event, context)
                except IdempotencyAlreadyInProgressError:
                    inner["raised"] = True
            inner["counts"].update(counted)
        return {"ok": True}

    context = LambdaContext(
        function_name="bench",
        invoked_function_arn="arn:aws:lambda:us-east-1:123456789012:function:bench",
        memory_limit_in_mb=128,
        timeout_seconds=30,
    )

    def first(i: int) -> None:
        assert handler({"key": f"first-{i}"}, context) == {"ok": True}

    def replay(i: int) -> None:
        assert handler({"key": f"first-{i}"}, context) == {"ok": True}

    rows = [
        measure("Powertools @idempotent: first call", "", first),
        measure("Powertools @idempotent: replay (COMPLETED)", "", replay),
    ]
    inner["counts"] = Counter()
    for i in range(RUNS):
        inner["raised"] = False
        handler({"key": f"dup-{i}", "reenter": True}, context)
        assert inner["raised"], "the duplicate was not refused as in progress"
    rows.append(Row("Powertools @idempotent: duplicate (INPROGRESS)", "", _mean(inner["counts"], RUNS)))
    return rows


def main() -> None:
    console = Console(width=max(Console().width, 160))
    with devstack.local_aws() as stack:
        rows = packyard_rows(stack)
        tool_rows = powertools_rows(stack)

    operations = sorted({op for row in rows + tool_rows for (service, op) in row.counts if service == "dynamodb"})
    table = Table(title=f"DynamoDB requests per operation on moto (mean of {RUNS} runs; client polling excluded)")
    table.add_column("scenario", no_wrap=True)
    table.add_column("target", justify="center")
    table.add_column("DynamoDB", justify="right")
    for op in operations:
        table.add_column(op, justify="right")
    table.add_column("other AWS requests", no_wrap=True)
    for index, row in enumerate(rows + tool_rows):
        if index == len(rows):
            table.add_section()
        cells = [f"{row.counts.get(('dynamodb', op), 0):g}" for op in operations]
        total = row.dynamodb()
        meets = _meets(total, row.target)
        mark = "" if meets is None else (" [green]ok" if meets else " [red]over")
        table.add_row(row.label, row.target or "-", f"[bold]{total:g}[/bold]{mark}", *cells, row.others())
    table.caption = (
        "* re-issued by the duplicate (idempotent by execution name); recorded in place of the real call so the "
        "first request's tasks stay unrun"
    )
    console.print(table)


def _meets(total: float, target: str) -> bool | None:
    if target.startswith("≤"):
        return total <= float(target[1:])
    if target.startswith("="):
        return total == float(target[1:])
    return None


if __name__ == "__main__":
    main()
