"""Maintenance sweeps through the real maintenance state machine on moto (schedule input → Map over the due
index's shards → one sweeper page at a time), with the sweep's "now" taken from the scheduled event's time."""

from __future__ import annotations

import json
from typing import Any

import boto3
import pytest

import devstack
from devstack.caller import Caller
from devstack.lambdas import LambdaContext, load_module
from packyard import clock, config
from packyard.api.times import epoch_of
from packyard.publishing import resumption
from packyard.publishing.resumption import MAX_RESUMES
from packyard.store import due, workflows
from packyard_cli.build import build_from_files
from tests.support.callers import used_bytes
from tests.support.sweeping import install_with_settle_down, run_maintenance

WS = "ws-sweep"
EVENTS = devstack.ROOT / "events"
HOUR = 3600


def _staged_keys(stack, tenant: str) -> list[str]:
    listed = boto3.client("s3").list_objects_v2(Bucket=stack.bucket_name, Prefix=f"uploads/{tenant}/")
    return [o["Key"] for o in listed.get("Contents", [])]


def test_given_an_abandoned_upload_session_when_swept_after_its_deadline_then_it_expires_and_gives_back_its_bytes(
    stack, acme: Caller
) -> None:
    session = acme.request_upload("hello", "1.0.0", build_from_files({"SKILL.md": b"v1\n"}))
    assert session.status == 201
    assert used_bytes(stack, "t-acme") > 0 and _staged_keys(stack, "t-acme")

    early = run_maintenance(stack, clock.now())
    assert acme.get(f"/v1/uploads/{session.body['uploadId']}").body["state"] == "awaiting_upload"
    assert early.get("expired", 0) == 0

    swept = run_maintenance(stack, clock.now() + 2 * HOUR)

    assert swept["expired"] == 1
    assert acme.get(f"/v1/uploads/{session.body['uploadId']}").body["state"] == "expired"
    assert used_bytes(stack, "t-acme") == 0
    assert _staged_keys(stack, "t-acme") == []
    # swept twice: nothing is due any more
    assert run_maintenance(stack, clock.now() + 3 * HOUR).get("expired", 0) == 0


def test_given_a_verifying_session_whose_execution_never_ran_when_swept_then_verification_starts_again(
    stack, acme: Caller, monkeypatch: pytest.MonkeyPatch
) -> None:
    """(It was rejected at once when the sweep could look the execution up; an Express run cannot be looked up, and
    a session verifying past its window has none going: it is renewed and verification starts again.)"""
    built = build_from_files({"SKILL.md": b"v1\n"})
    session = acme.request_upload("hello", "1.0.0", built)
    acme.put_archive(session.body, built.archive)
    monkeypatch.setattr(workflows, "start", lambda *args: "never started")
    assert acme.post(f"/v1/uploads/{session.body['uploadId']}/complete").status == 202
    monkeypatch.undo()

    swept = run_maintenance(stack, clock.now() + HOUR)

    assert swept["resumed"] == 1
    machine = stack.state_machine_arns["PublishStateMachine"]
    again = workflows.execution_arn(machine, resumption.attempt_name(session.body["uploadId"], 1))
    assert devstack.wait_for_execution(again, timeout=60)["status"] == "SUCCEEDED"
    assert acme.get(f"/v1/uploads/{session.body['uploadId']}").body["state"] == "published"


def test_given_a_verifying_session_whose_runs_never_run_when_its_resumes_are_spent_then_it_is_rejected(
    stack, acme: Caller, monkeypatch: pytest.MonkeyPatch
) -> None:
    built = build_from_files({"SKILL.md": b"v1\n"})
    session = acme.request_upload("hello", "1.0.0", built)
    acme.put_archive(session.body, built.archive)
    monkeypatch.setattr(workflows, "start", lambda *args: "never started")
    assert acme.post(f"/v1/uploads/{session.body['uploadId']}/complete").status == 202
    window = config.limits().reservation_ttl_seconds
    renewals = [run_maintenance(stack, clock.now() + n * window)["resumed"] for n in range(1, MAX_RESUMES + 1)]
    monkeypatch.undo()

    swept = run_maintenance(stack, clock.now() + (MAX_RESUMES + 1) * window)

    assert renewals == [1] * MAX_RESUMES  # each renewal renewed the window: one per window, never two
    upload = acme.get(f"/v1/uploads/{session.body['uploadId']}").body
    assert swept["rejected"] == 1
    assert (upload["state"], upload["rejection"]["code"]) == ("rejected", "publish_failed")
    assert used_bytes(stack, "t-acme") == 0


def test_given_an_operation_whose_workflow_never_started_when_swept_after_its_lease_then_it_runs(
    stack, acme: Caller, monkeypatch: pytest.MonkeyPatch
) -> None:
    acme.publish("hello", "1.0.0", build_from_files({"SKILL.md": b"v1\n"}))
    monkeypatch.setattr(workflows, "start", lambda *args: "admission died before starting it")
    admitted = acme.install(WS, "hello", "hello", "1.0.0", key="k-orphan")
    monkeypatch.undo()
    assert acme.get(f"/v1/workspaces/{WS}/operations/{admitted.body['operationId']}").body["state"] == "admitted"

    assert run_maintenance(stack, clock.now()).get("started", 0) == 0  # its lease has not run out
    swept = run_maintenance(stack, clock.now() + HOUR)

    assert swept["started"] == 1
    assert acme.wait_settled(WS, admitted)["outcome"] == {"result": "succeeded"}


def test_given_a_committed_operation_whose_settle_failed_when_swept_then_it_settles_and_frees_its_slot(
    stack, acme: Caller, monkeypatch: pytest.MonkeyPatch
) -> None:
    acme.publish("hello", "1.0.0", build_from_files({"SKILL.md": b"v1\n"}))

    admitted, _ = install_with_settle_down(stack, acme, WS, "hello", "hello", "1.0.0", key="k-stuck")
    stuck = acme.get(f"/v1/workspaces/{WS}/operations/{admitted.body['operationId']}").body
    assert stuck["state"] == "committed"
    blocked = acme.install(WS, "hello", "hello", "1.0.0", key="k-next", if_match='"1"')
    assert (blocked.status, blocked.body["code"]) == (409, "operation_in_progress")

    swept = run_maintenance(stack, clock.now() + HOUR)

    settled = acme.get(f"/v1/workspaces/{WS}/operations/{admitted.body['operationId']}").body
    assert swept["settled"] == 1
    assert (settled["state"], settled["outcome"]) == ("settled", {"result": "succeeded"})
    assert acme.install(WS, "hello", "hello", "1.0.0", key="k-next", if_match='"1"').status == 202


@pytest.mark.parametrize(
    "event",
    [
        {},
        {"detail-type": "Scheduled Event", "resources": ["arn:aws:events:us-east-1:123456789012:rule/someone-else"]},
        {"kind": "tarball", "shard": 0, "time": "2026-11-30T12:00:00Z"},
        {"kind": "upload", "shard": -1, "time": "2026-11-30T12:00:00Z"},
        {"kind": "upload", "shard": 0, "time": "yesterday"},
        {"kind": "upload", "shard": 0, "time": "2026-11-30T12:00:00Z", "cursor": "not-a-cursor"},
    ],
    ids=["empty", "unknown-rule", "unknown-kind", "bad-shard", "bad-time", "bad-cursor"],
)
def test_given_an_event_the_sweeper_does_not_understand_then_it_says_so_and_changes_nothing(
    stack, acme: Caller, event: dict[str, Any]
) -> None:
    session = acme.request_upload("hello", "1.0.0", build_from_files({"SKILL.md": b"v1\n"}))
    spec = stack.functions["SweeperFunction"]
    handler = load_module(spec.code_uri / "app.py", "_sweeper_under_test").lambda_handler
    context = LambdaContext(
        function_name=spec.name, invoked_function_arn=spec.arn, memory_limit_in_mb=512, timeout_seconds=30
    )

    if event.get("cursor"):
        with pytest.raises(Exception, match="cursor"):
            handler(event, context)
    else:
        answer = handler(event, context)
        assert "ignored" in answer
    assert acme.get(f"/v1/uploads/{session.body['uploadId']}").body["state"] == "awaiting_upload"


def test_the_maintenance_map_covers_every_kind_and_shard_of_the_due_index() -> None:
    definition = json.loads((devstack.ROOT / "statemachines" / "maintenance.asl.json").read_text())
    listed = {(item["kind"], item["shard"]) for item in definition["States"]["Shards"]["Result"]}
    assert listed == {(str(kind), shard) for kind in due.DueKind for shard in range(due.SHARDS)}


def test_given_settled_operations_then_the_latest_is_kept_and_an_earlier_one_expires_ninety_days_after_settling(
    stack, acme: Caller
) -> None:
    acme.publish("hello", "1.0.0", build_from_files({"SKILL.md": b"v1\n"}))
    acme.publish("hello", "1.1.0", build_from_files({"SKILL.md": b"v1.1\n"}))
    first = acme.wait_settled(WS, acme.install(WS, "hello", "hello", "1.0.0", key="k-1"))
    second = acme.wait_settled(WS, acme.install(WS, "hello", "hello", "1.1.0", key="k-2", if_match='"1"'))

    def stored(op: dict[str, Any]) -> dict[str, Any]:
        return boto3.client("dynamodb").get_item(
            TableName=stack.table_name,
            Key={"pk": {"S": f"TENANT#t-acme#WS#{WS}"}, "sk": {"S": f"OP#{op['operationId']}"}},
            ConsistentRead=True,
        )["Item"]

    assert int(stored(first)["expiresAt"]["N"]) == epoch_of(first["settledAt"]) + 90 * 24 * HOUR
    assert "expiresAt" not in stored(second)  # the installation's latest settled operation is kept
    assert "dueShard" not in stored(first) and "dueShard" not in stored(second)  # settled: out of the due index


def test_given_a_lost_settle_when_the_key_is_sent_again_after_the_lease_then_the_operation_is_taken_over(
    stack, acme: Caller, monkeypatch: pytest.MonkeyPatch
) -> None:
    acme.publish("hello", "1.0.0", build_from_files({"SKILL.md": b"v1\n"}))

    admitted, described = install_with_settle_down(stack, acme, WS, "hello", "hello", "1.0.0", key="k-stuck")
    assert (
        described["status"],
        acme.get(f"/v1/workspaces/{WS}/operations/{admitted.body['operationId']}").body["state"],
    ) == (
        "FAILED",
        "committed",
    )
    replay_now = acme.install(WS, "hello", "hello", "1.0.0", key="k-stuck")
    assert (replay_now.status, replay_now.body["attempt"]) == (202, 0)  # its lease still runs: nothing to take over

    later = clock.now() + HOUR
    monkeypatch.setattr(clock, "now", lambda: later)
    taken_over = acme.install(WS, "hello", "hello", "1.0.0", key="k-stuck")

    assert (taken_over.status, taken_over.body["attempt"]) == (202, 1)
    final = acme.wait_settled(WS, taken_over)
    assert final["outcome"] == {"result": "succeeded"}
    assert acme.get(f"/v1/workspaces/{WS}/installations/hello").body["version"] == 1


def test_given_a_reject_that_keeps_failing_then_the_execution_records_it_and_the_sweep_finishes_the_upload(
    stack, acme: Caller, monkeypatch: pytest.MonkeyPatch
) -> None:
    from packyard.publishing import rejection

    built = build_from_files({"SKILL.md": b"v1\n"})
    session = acme.request_upload("hello", "1.0.0", built)
    acme.put_archive(session.body, b"not the archive the manifest describes")

    def broken_reject(*args: object, **kwargs: object) -> dict:
        raise RuntimeError("the rejection path is down")

    monkeypatch.setattr(rejection, "reject", broken_reject)
    completed = acme.post(f"/v1/uploads/{session.body['uploadId']}/complete")
    described = devstack.wait_for_execution(completed.body["executionArn"], timeout=60)
    monkeypatch.undo()

    assert (described["status"], described.get("error")) == ("FAILED", "RejectFailed")
    assert acme.get(f"/v1/uploads/{session.body['uploadId']}").body["state"] == "verifying"
    assert used_bytes(stack, "t-acme") > 0

    swept = run_maintenance(stack, clock.now() + HOUR)

    # past its window verification starts again (no execution is looked up: an Express run cannot be): the new run
    # rejects it with the verdict itself, the reservation returned once
    assert swept["resumed"] == 1
    machine = stack.state_machine_arns["PublishStateMachine"]
    again = workflows.execution_arn(machine, resumption.attempt_name(session.body["uploadId"], 1))
    assert devstack.wait_for_execution(again, timeout=60)["status"] == "SUCCEEDED"
    upload = acme.get(f"/v1/uploads/{session.body['uploadId']}").body
    assert (upload["state"], upload["rejection"]["code"]) == ("rejected", "archive_rejected")
    assert used_bytes(stack, "t-acme") == 0
