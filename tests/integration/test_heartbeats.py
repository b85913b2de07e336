"""Heartbeats (issue 8): every step of the install workflow renews its operation's lease (and its slot's) in the
fenced write it makes anyway, so the stuck-operation sweep and a same-intent request leave a live, slow operation
alone until its renewed lease runs out."""

from __future__ import annotations

from collections import Counter
from typing import Any

import boto3
import pytest

from devstack.caller import Caller
from packyard import clock
from packyard.config import limits
from packyard.maintenance import sweeps
from packyard.operations import planning
from packyard.store import due, workflows
from packyard.store.due import DueKind
from packyard_cli.build import build_from_files

WS = "ws-heartbeat"


def _stored(stack, sk: str) -> dict[str, Any]:
    item: dict[str, Any] = boto3.client("dynamodb").get_item(
        TableName=stack.table_name,
        Key={"pk": {"S": f"TENANT#t-acme#WS#{WS}"}, "sk": {"S": sk}},
        ConsistentRead=True,
    )["Item"]
    return item


def test_given_a_step_that_starts_late_and_renews_the_lease_then_a_sweep_after_the_original_lease_leaves_it_alone(
    stack, acme: Caller, monkeypatch: pytest.MonkeyPatch
) -> None:
    acme.publish("hello", "1.0.0", build_from_files({"SKILL.md": b"v1\n"}))
    monkeypatch.setattr(workflows, "start", lambda *args: "its workflow is slow to reach Plan")
    admitted = acme.install(WS, "hello", "hello", "1.0.0", key="k-slow").body
    monkeypatch.undo()
    op_id = admitted["operationId"]
    lease = limits().operation_lease_seconds
    original = int(_stored(stack, f"OP#{op_id}")["leaseUntil"]["N"])
    started = original - lease

    # the Plan step runs near the end of the original lease: its transition renews the operation's and the slot's
    late = started + lease - 100
    monkeypatch.setattr(clock, "now", lambda: late)
    planning.plan_task("t-acme", WS, op_id)
    monkeypatch.undo()
    renewed = late + lease
    assert int(_stored(stack, f"OP#{op_id}")["dueAt"]["S"]) == renewed
    assert int(_stored(stack, "SLOT#hello")["leaseUntil"]["N"]) == renewed

    between = original + 100  # past the original lease, before the renewed one
    page = sweeps.sweep(DueKind.OPERATION, due.shard_of(op_id), between)
    assert page.counts == Counter()  # not due: not even looked up
    assert acme.get(f"/v1/workspaces/{WS}/operations/{op_id}").body["state"] == "planned"
    monkeypatch.setattr(clock, "now", lambda: between)
    blocked = acme.install(WS, "hello", "hello", "1.0.0", key="k-same-intent")  # may supersede only past the lease
    monkeypatch.undo()
    assert (blocked.status, blocked.body["code"], blocked.body["operationId"]) == (409, "operation_in_progress", op_id)

    # past the renewed lease it is looked at: its workflow never started, so the sweep starts it and it completes
    later = sweeps.sweep(DueKind.OPERATION, due.shard_of(op_id), renewed + 1)
    assert later.counts["started"] == 1
    assert acme.wait_settled(WS, acme.get(f"/v1/workspaces/{WS}/operations/{op_id}"))["outcome"] == {
        "result": "succeeded"
    }


def test_given_a_consent_decided_then_the_operation_holds_an_ordinary_lease_again_from_the_decision(
    stack, acme: Caller, monkeypatch: pytest.MonkeyPatch
) -> None:
    acme.publish(
        "hello", "1.0.0", build_from_files({"SKILL.md": b"v1\n"}, permissions=[{"kind": "network", "resource": "x"}])
    )
    admitted = acme.install(WS, "hello", "hello", "1.0.0", key="k-consent")
    waiting = acme.wait_settled(WS, admitted, approve=False)
    assert waiting["state"] == "awaiting_consent"
    deadline = int(_stored(stack, "SLOT#hello")["leaseUntil"]["N"])
    monkeypatch.setattr(workflows, "start", lambda *args: "started")  # decided, its next execution not yet run

    decided = acme.decide(WS, waiting, "approve")

    assert decided.status in (200, 201), decided.body
    now = clock.now()
    lease = limits().operation_lease_seconds
    op_lease = int(_stored(stack, f"OP#{waiting['operationId']}")["leaseUntil"]["N"])
    slot_lease = int(_stored(stack, "SLOT#hello")["leaseUntil"]["N"])
    assert op_lease == slot_lease and now <= op_lease <= now + lease < deadline
    assert int(_stored(stack, f"OP#{waiting['operationId']}")["dueAt"]["S"]) == op_lease
