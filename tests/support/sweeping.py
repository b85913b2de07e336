"""Running the sweeps in tests: the real maintenance state machine as the schedule starts it, or every shard of some
kinds in-process, page after page, as its Map does."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any

import boto3
import pytest

import devstack
from devstack import express, lambdas
from devstack.api import ApiResponse
from devstack.caller import Caller
from packyard.maintenance import sweeps
from packyard.operations import settlement
from packyard.operations.models import Operation, OperationState, Outcome
from packyard.operations.timing import lease_until
from packyard.store import due, workflows
from packyard.store.due import DueKind


def scheduled_time(at: int) -> str:
    """An epoch second as the scheduled event's ``time`` (RFC 3339, UTC)."""
    return datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def sweep_by_function(stack: devstack.Stack, at: int, kinds: Iterable[str] = ("job", "blob")) -> Counter[str]:
    """Every shard of ``kinds`` through the sweeper function (its role), page after page, as if at ``at``; what the
    pages did, summed."""
    totals: Counter[str] = Counter()
    for kind in kinds:
        for shard in range(due.SHARDS):
            event: dict[str, Any] = {"kind": kind, "shard": shard, "time": scheduled_time(at)}
            while True:
                answer = lambdas.invoke_handler(stack.functions["SweeperFunction"], event)
                totals.update(answer["counts"])
                if not answer.get("cursor"):
                    break
                event = {**event, "cursor": answer["cursor"]}
    return totals


def run_maintenance(stack: devstack.Stack, at: int) -> Counter[str]:
    """The maintenance state machine started with the scheduled event as if at ``at``, run to its end (it must
    succeed); what all its pages did, summed."""
    event = json.loads((devstack.ROOT / "events" / "schedule_sweep.json").read_text())
    event["time"] = scheduled_time(at)
    sfn = boto3.client("stepfunctions", region_name=stack.region)
    started = sfn.start_execution(
        stateMachineArn=stack.state_machine_arns["MaintenanceStateMachine"], input=json.dumps(event)
    )
    finished = devstack.wait_for_execution(started["executionArn"], timeout=120)
    assert finished["status"] == "SUCCEEDED", (finished, failures(express.history(started["executionArn"])))
    counts: Counter[str] = Counter()
    for page in json.loads(finished["output"])["swept"]:
        counts.update(page["counts"])
    return counts


def failures(history: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The failed tasks' errors and causes in a run's events: what a failed run says about why."""
    return [
        {"type": event["type"], **details}
        for event in history
        for key, details in event.items()
        if key.endswith("EventDetails") and isinstance(details, dict) and "error" in details
    ]


def sweep_kinds(kinds: Iterable[DueKind], now: int) -> Counter[str]:
    """Every shard of ``kinds`` in-process, page after page until nothing more is due, as the Map runs them."""
    counts: Counter[str] = Counter()
    for kind in kinds:
        for shard in range(due.SHARDS):
            cursor: str | None = None
            while True:
                page = sweeps.sweep(kind, shard, now, cursor)
                counts.update(page.counts)
                cursor = page.cursor
                if not cursor:
                    break
    return counts


def committed_not_settled(op: Operation, outcome: Outcome, now: int) -> Operation:
    """In place of ``settlement.settled_as`` for the commit: what a commit wrote before "Commit settles"
    (docs/decisions.md), the transition to ``committed`` with the slot still held, left for Settle or the sweep."""
    return op.model_copy(
        update={"state": OperationState.COMMITTED, "version": op.version + 1, "lease_until": lease_until(now)}
    )


def install_with_settle_down(
    stack: devstack.Stack, caller: Caller, workspace: str, installation: str, package: str, version: str, *, key: str
) -> tuple[ApiResponse, dict[str, Any]]:
    """Install with a commit that leaves the operation ``committed`` (as commits did before they settled: code of an
    earlier release still running while a stack is updated) while Settle fails past its retries (its Catch ends the
    execution): the operation stays committed, left to the sweep. The admission's answer and the ended execution's
    description."""

    def settlement_is_down(*args: object, **kwargs: object) -> dict[str, Any]:
        raise RuntimeError("settlement is down")

    with pytest.MonkeyPatch.context() as patched:
        patched.setattr(settlement, "settle_task", settlement_is_down)
        patched.setattr(settlement, "settled_as", committed_not_settled)
        admitted = caller.install(workspace, installation, package, version, key=key)
        machine = stack.state_machine_arns["InstallStateMachine"]
        ended = devstack.wait_for_execution(workflows.execution_arn(machine, admitted.body["operationId"]), timeout=60)
    return admitted, ended
