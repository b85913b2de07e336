"""Transient failures defer an operation to pending; the same key resumes it. Leases and superseding."""

from __future__ import annotations

import pytest

import devstack
from packyard import clock
from packyard.errors import TransientStoreError
from packyard.operations import commit
from packyard.store import workflows
from packyard_cli.build import build_from_files

WS = "ws-defer"


@pytest.fixture
def published(acme):
    acme.publish("hello", "1.0.0", build_from_files({"SKILL.md": b"one\n"}))
    return acme


def test_commit_failing_past_its_retries_defers_to_pending_and_the_same_key_resumes_it(published, monkeypatch):
    def flaky_commit(*args, **kwargs):
        raise TransientStoreError("DynamoDB: ThrottlingException")

    monkeypatch.setattr(commit, "commit_task", flaky_commit)
    devstack.retry_clock().clear()
    admitted = published.install(WS, "hello", "hello", "1.0.0", key="k-flaky")
    deferred = published.wait_settled(WS, admitted)

    assert (deferred["state"], deferred["phase"], deferred["errorCode"]) == (
        "pending",
        "planned",
        "unavailable",  # a stable code, not the exception's class name (issue 20)
    )
    assert devstack.retry_clock().waits == [1, 2, 4]  # the ASL's Retry: 3 attempts, backoff 2, waits recorded
    assert published.get(f"/v1/workspaces/{WS}/installations/hello").status == 404

    monkeypatch.undo()
    resumed = published.install(WS, "hello", "hello", "1.0.0", key="k-flaky")
    assert resumed.status == 202
    assert resumed.body["operationId"] == admitted.body["operationId"]
    final = published.wait_settled(WS, resumed)
    assert final["outcome"] == {"result": "succeeded"}
    assert published.get(f"/v1/workspaces/{WS}/installations/hello").body["version"] == 1


def test_a_pending_operation_is_superseded_by_another_request(published, monkeypatch):
    monkeypatch.setattr(commit, "commit_task", lambda *a, **k: (_ for _ in ()).throw(TransientStoreError("x")))
    stuck = published.wait_settled(WS, published.install(WS, "hello", "hello", "1.0.0", key="k-stuck"))
    assert stuck["state"] == "pending"
    monkeypatch.undo()

    fresh = published.install(WS, "hello", "hello", "1.0.0", key="k-fresh")

    assert fresh.status == 202
    assert published.wait_settled(WS, fresh)["outcome"] == {"result": "succeeded"}
    old = published.get(f"/v1/workspaces/{WS}/operations/{stuck['operationId']}").body
    assert (old["state"], old["outcome"]["code"], old["supersededBy"]) == (
        "settled",
        "cancelled",
        fresh.body["operationId"],
    )


def test_expired_lease_with_the_same_intent_supersedes_a_different_intent_waits(published, monkeypatch):
    started: list = []
    monkeypatch.setattr(workflows, "start", lambda *args: started.append(args) or "held")
    first = published.install(WS, "hello", "hello", "1.0.0", key="k-first")
    assert first.status == 202

    now = clock.now()
    monkeypatch.setattr(clock, "now", lambda: now + 16 * 60)  # past the 15-minute lease
    other_intent = published.install(WS, "hello", "hello", "1.0.0", key="k-other", scope={"kind": "task", "id": "t"})
    same_intent = published.install(WS, "hello", "hello", "1.0.0", key="k-same")

    assert (other_intent.status, other_intent.code) == (409, "operation_in_progress")
    assert same_intent.status == 202
    assert same_intent.body["supersedes"] == first.body["operationId"]
    superseded = published.get(f"/v1/workspaces/{WS}/operations/{first.body['operationId']}").body
    assert superseded["supersededBy"] == same_intent.body["operationId"]


def test_a_superseded_worker_learns_claim_lost_and_writes_nothing(published, monkeypatch, stack):
    from devstack import lambdas
    from packyard.errors import ClaimLost

    started: list = []
    monkeypatch.setattr(workflows, "start", lambda arn, name, payload: started.append(payload) or name)
    published.install(WS, "hello", "hello", "1.0.0", key="k-old")
    old_event = dict(started[-1])
    now = clock.now()
    monkeypatch.setattr(clock, "now", lambda: now + 16 * 60)
    published.install(WS, "hello", "hello", "1.0.0", key="k-new")

    with pytest.raises(ClaimLost):
        lambdas.invoke_handler(stack.functions["PlanningFunction"], old_event)
    assert published.get(f"/v1/workspaces/{WS}/installations/hello").status == 404
