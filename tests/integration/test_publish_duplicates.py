"""Express runs at least once (issue 23): a duplicated publish run, a publish task run twice, and a duplicated
maintenance run are harmless. Through the real publish and maintenance state machines (Express in template.yaml) on
moto, with the local runtime's duplicates on purpose (``devstack.faults.duplicate_executions``: every StartExecution
starts a twin; ``duplicate_task_runs``: every Lambda task's handler runs twice). Whatever is duplicated: exactly one
release, the ledger charged once (the tenant's usage is the release's blobs, the reservation released once), a
rejected upload rejected once (its reservation returned once: the usage is 0, never negative).

What two concurrent runs of one step report is not counted here: the same fenced transaction built by both carries
the same ClientRequestToken (store.dynamo.request_token), so DynamoDB applies it once and answers both as the success
it was; both runs then say "published" or "rejected" (and count it in their metrics), with one effect stored."""

from __future__ import annotations

import json
import uuid
from collections import Counter
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from typing import Any

import boto3
import pytest

import devstack
from devstack import faults
from devstack.api import LocalApi
from devstack.caller import Caller
from devstack.counting import count_aws_requests
from devstack.express import Duplication, ExpressRun
from packyard import clock
from packyard.publishing import resumption
from packyard.store import catalog, workflows
from packyard.store.due import DueKind
from packyard_cli.build import build_from_files
from tests.support import stacks
from tests.support.callers import release_items, used_bytes
from tests.support.sweeping import scheduled_time, sweep_kinds

stack = stacks.stack
fresh_config = stacks.fresh_config

HOUR = 3600
PUBLISH = "PublishStateMachine"
TASKS = ("VerifyFunction", "PublishFunction", "RejectFunction")


@contextmanager
def duplicated(kinds: str) -> Iterator[dict[str, Duplication]]:
    """Runs ("runs"), task runs ("tasks") or both ("both") duplicated while the block runs."""
    with ExitStack() as stack_:
        plans: dict[str, Duplication] = {}
        if kinds in ("runs", "both"):
            plans["runs"] = stack_.enter_context(faults.duplicate_executions())
        if kinds in ("tasks", "both"):
            plans["tasks"] = stack_.enter_context(faults.duplicate_task_runs(set(TASKS)))
        yield plans


def _runs_of(stack: devstack.Stack, name: str) -> list[ExpressRun]:
    """Every run of the publish machine named ``name``, once all have stopped."""
    machine = stack.state_machine_arns[PUBLISH]
    devstack.wait_for_execution(workflows.execution_arn(machine, name), timeout=60)
    return devstack.express_runs(machine, name)


def _publish(caller: Caller, stack: devstack.Stack, archive: bytes | None = None) -> tuple[str, list[Any]]:
    built = build_from_files({"SKILL.md": b"# duplicated\n"})
    session = caller.request_upload("hello", "1.0.0", built)
    assert session.status == 201, session.body
    caller.put_archive(session.body, built.archive if archive is None else archive)
    completed = caller.post(f"/v1/uploads/{session.body['uploadId']}/complete")
    assert completed.status == 202, completed.body
    return session.body["uploadId"], _runs_of(stack, session.body["uploadId"])


def _blob_bytes(stack: devstack.Stack, caller: Caller) -> int:
    """What the tenant's ledger holds for its one release: the release's manifest and archive blobs."""
    (release,) = [i for i in release_items(stack, caller.tenant) if i["sk"]["S"].startswith("VERSION#")]
    return int(release["manifestSize"]["N"]) + int(release["archiveSize"]["N"])


@pytest.mark.parametrize("kinds", ["runs", "tasks", "both"])
def test_a_duplicated_publish_makes_one_release_and_charges_the_ledger_once(stack: devstack.Stack, kinds: str) -> None:
    caller = Caller(LocalApi(stack), f"t-dup-publish-{kinds}")
    with duplicated(kinds) as plans:
        upload_id, runs = _publish(caller, stack)

    # it was duplicated: two runs of the upload's name, or each task of the one run twice
    if "runs" in plans:
        assert plans["runs"].total == 1 and len(runs) == 2
    if "tasks" in plans:
        assert plans["tasks"].counts["VerifyFunction"] >= 1 and plans["tasks"].counts["PublishFunction"] >= 1
    assert all(run.status == "SUCCEEDED" for run in runs)
    # one release, written once; the upload published; the ledger holds the release's blobs, nothing reserved
    upload = caller.get(f"/v1/uploads/{upload_id}").body
    assert upload["state"] == "published"
    versions = [i for i in release_items(stack, caller.tenant) if i["sk"]["S"].startswith("VERSION#")]
    assert len(versions) == 1 and versions[0]["uploadId"]["S"] == upload_id
    assert used_bytes(stack, caller.tenant) == _blob_bytes(stack, caller)


@pytest.mark.parametrize("kinds", ["runs", "tasks", "both"])
def test_a_duplicated_rejection_rejects_once_and_returns_the_reservation_once(
    stack: devstack.Stack, kinds: str
) -> None:
    caller = Caller(LocalApi(stack), f"t-dup-reject-{kinds}")
    other = build_from_files({"SKILL.md": b"# not what the manifest says\n"})
    with duplicated(kinds):
        upload_id, runs = _publish(caller, stack, archive=other.archive)

    assert all(run.status == "SUCCEEDED" for run in runs)  # Rejected is a Succeed state
    upload = caller.get(f"/v1/uploads/{upload_id}").body
    assert (upload["state"], upload["rejection"]["code"]) == ("rejected", "archive_rejected")
    assert used_bytes(stack, caller.tenant) == 0  # returned once: a second return would make it negative
    assert release_items(stack, caller.tenant) == []


def _run_maintenance_duplicated(stack: devstack.Stack, at: int) -> tuple[int, Counter[str]]:
    """The maintenance machine started once as the schedule starts it, while every start is duplicated: how many
    runs it made, and what all their pages did, summed."""
    event = json.loads((devstack.ROOT / "events" / "schedule_sweep.json").read_text())
    event["time"] = scheduled_time(at)
    machine = stack.state_machine_arns["MaintenanceStateMachine"]
    name = f"sweep-{uuid.uuid4().hex}"
    with faults.duplicate_executions() as plan:
        boto3.client("stepfunctions").start_execution(stateMachineArn=machine, name=name, input=json.dumps(event))
    devstack.wait_for_execution(workflows.execution_arn(machine, name), timeout=120)
    counts: Counter[str] = Counter()
    runs = devstack.express_runs(machine, name)
    for run in runs:
        assert run.status == "SUCCEEDED", run
        for page in json.loads(run.description()["output"])["swept"]:
            counts.update(page["counts"])
    assert plan.total == 1
    return len(runs), counts


def _stored_resumes(stack: devstack.Stack, tenant: str, upload_id: str) -> int:
    pk, sk = catalog.upload_key(tenant, upload_id)
    item = boto3.client("dynamodb").get_item(
        TableName=stack.table_name, Key={"pk": {"S": pk}, "sk": {"S": sk}}, ConsistentRead=True
    )["Item"]
    return int(item["resumes"]["N"])


def test_a_duplicated_maintenance_run_renews_a_stalled_verification_once(
    stack: devstack.Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    caller = Caller(LocalApi(stack), "t-dup-sweep")
    built = build_from_files({"SKILL.md": b"# stalled\n"})
    session = caller.request_upload("hello", "1.0.0", built)
    caller.put_archive(session.body, built.archive)
    with monkeypatch.context() as patched:
        patched.setattr(workflows, "start", lambda *args: "complete died before starting its run")
        assert caller.post(f"/v1/uploads/{session.body['uploadId']}/complete").status == 202
    expired = caller.request_upload("abandoned", "1.0.0", build_from_files({"SKILL.md": b"# abandoned\n"}))

    runs, counts = _run_maintenance_duplicated(stack, clock.now() + HOUR)

    # two sweeps of the same due items, each item renewed or expired once as stored: the twin found it moved (not
    # due any more), or built the very same fenced transaction, which DynamoDB applied once and answered both (same
    # ClientRequestToken); a sweep that was answered "renewed" started one run, so at most a duplicate run of -r1
    assert runs == 2
    upload_id = session.body["uploadId"]
    assert _stored_resumes(stack, caller.tenant, upload_id) == 1
    renewed = _runs_of(stack, resumption.attempt_name(upload_id, 1))
    assert len(renewed) == counts["resumed"] and all(run.status == "SUCCEEDED" for run in renewed)
    assert devstack.express_runs(stack.state_machine_arns[PUBLISH], resumption.attempt_name(upload_id, 2)) == []
    assert counts["expired"] >= 1
    assert caller.get(f"/v1/uploads/{upload_id}").body["state"] == "published"
    assert caller.get(f"/v1/uploads/{expired.body['uploadId']}").body["state"] == "expired"
    assert used_bytes(stack, caller.tenant) == _blob_bytes(stack, caller)  # the expired reservation returned once


def test_publishing_and_the_upload_sweep_never_look_a_run_up(
    stack: devstack.Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Express runs cannot be described (InvalidArn): a publish, a stalled one renewed by the sweep, and its new run
    ask Step Functions only to start runs."""
    caller = Caller(LocalApi(stack), "t-no-lookups")
    built = build_from_files({"SKILL.md": b"# looked up\n"})
    with count_aws_requests() as requests:
        caller.publish("hello", "1.0.0", built)
        stalled = build_from_files({"SKILL.md": b"# stalled, then renewed\n"})
        session = caller.request_upload("hello", "1.1.0", stalled)
        caller.put_archive(session.body, stalled.archive)
        with monkeypatch.context() as patched:
            patched.setattr(workflows, "start", lambda *args: "complete died before starting its run")
            assert caller.post(f"/v1/uploads/{session.body['uploadId']}/complete").status == 202
        assert sweep_kinds([DueKind.UPLOAD], clock.now() + HOUR)["resumed"] == 1
        (renewed,) = _runs_of(stack, resumption.attempt_name(session.body["uploadId"], 1))

    assert renewed.status == "SUCCEEDED"
    calls = {operation for service, operation in requests if service == "stepfunctions"}
    assert calls == {"StartExecution"}
    assert requests[("stepfunctions", "StartExecution")] == 2  # the publish's and the renewal's
