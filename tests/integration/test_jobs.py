"""Cleanup jobs and the backoff of every due item (maintenance.jobs): claimed, retried with exponential backoff, parked
after the last attempt (metric + log), never retried forever and never silently dropped; safe concurrently and after a
crash at any AWS call. Sweeps run in-process (``sweeps.sweep`` over every shard), as the sweeper function does."""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import Iterator
from typing import Any

import boto3
import pytest

from devstack.caller import Caller
from devstack.faults import InjectedCrash, crash_after
from packyard import clock
from packyard.config import limits
from packyard.errors import TransientStoreError
from packyard.maintenance import jobs
from packyard.maintenance.jobs import JobKind
from packyard.observability import logger
from packyard.operations import workflow
from packyard.store import blobs, catalog, due, dynamo, workflows
from packyard.store import jobs as job_store
from packyard.store.due import DueKind
from packyard_cli.build import build_from_files
from tests.support.metrics import emitted_metrics
from tests.support.sweeping import sweep_kinds

TENANT = "t-acme"
HOUR = 3600
DELAYS = [60, 120, 240, 480, 960, 1920, 3840]  # base 60 s, doubling; the 8th failure parks


def _raw(stack, pk: str, sk: str) -> dict[str, Any] | None:
    item = boto3.client("dynamodb").get_item(
        TableName=stack.table_name, Key={"pk": {"S": pk}, "sk": {"S": sk}}, ConsistentRead=True
    )
    return item.get("Item")


def _stage(stack, upload_id: str, token: str) -> list[str]:
    keys = [
        blobs.staged_archive_key(TENANT, upload_id, token),
        blobs.staged_manifest_key(TENANT, upload_id, token),
    ]
    for name in keys:
        boto3.client("s3").put_object(Bucket=stack.bucket_name, Key=name, Body=b"staged")
    return keys


def _exists(stack, name: str) -> bool:
    listed = boto3.client("s3").list_objects_v2(Bucket=stack.bucket_name, Prefix=name)
    return any(o["Key"] == name for o in listed.get("Contents", []))


@pytest.fixture
def emitted() -> Iterator[Counter[str]]:
    with emitted_metrics() as seen:
        yield seen


@pytest.fixture
def errors_logged() -> Iterator[list[tuple[str, dict[str, Any]]]]:
    """Error log lines (message and extra keys)."""
    seen: list[tuple[str, dict[str, Any]]] = []
    real = logger.error

    def spy(msg: object, *args: Any, **kwargs: Any) -> None:
        seen.append((str(msg), dict(kwargs.get("extra") or {})))
        real(msg, *args, **kwargs)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(logger, "error", spy)
        yield seen


@pytest.fixture
def failing_staging(monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """S3 refuses every staging delete; the calls are recorded."""
    calls: list[list[str]] = []

    def refuse(keys: list[str]) -> None:
        calls.append(keys)
        raise TransientStoreError("S3 is unavailable, retry")

    monkeypatch.setattr(blobs, "delete_prefix_objects", refuse)
    return calls


def test_given_a_staging_job_enqueued_in_a_transaction_when_swept_then_it_deletes_the_objects_and_itself(
    stack, emitted: Counter[str]
) -> None:
    now = clock.now()
    staged = _stage(stack, "up-1", "tok-1")
    subject = {"uploadId": "up-1", "token": "tok-1"}
    dynamo.transact([jobs.enqueue_item(TENANT, JobKind.STAGING, subject, now)], step="test.enqueue")
    # enqueued again (another step, so not answered from the first one's token): idempotent, the same job
    dynamo.transact([jobs.enqueue_item(TENANT, JobKind.STAGING, subject, now)], step="test.enqueue_again")
    pk, sk = job_store.job_key(TENANT, "staging", subject)
    stored = _raw(stack, pk, sk)
    assert stored is not None and stored["dueShard"]["S"].startswith("job#") and stored["dueAttempts"]["N"] == "0"

    assert sweep_kinds((DueKind.JOB,), now - 1).get("done", 0) == 0  # not due yet
    swept = sweep_kinds((DueKind.JOB,), now)

    assert swept["done"] == 1
    assert not any(_exists(stack, name) for name in staged)
    assert _raw(stack, pk, sk) is None
    assert sweep_kinds((DueKind.JOB,), now + HOUR).get("done", 0) == 0
    assert emitted["SweepJobsParked"] == 0


def test_given_a_job_that_keeps_failing_then_it_is_retried_with_growing_backoff_and_parked_after_its_last_attempt(
    stack, emitted: Counter[str], failing_staging: list[list[str]], errors_logged: list[tuple[str, dict[str, Any]]]
) -> None:
    start = clock.now()
    subject = {"uploadId": "up-2", "token": "tok-2"}
    jobs.enqueue(TENANT, JobKind.STAGING, subject, start)
    pk, sk = job_store.job_key(TENANT, "staging", subject)

    now, seen_due = start, []
    for attempt in range(1, len(DELAYS) + 1):
        assert sweep_kinds((DueKind.JOB,), now - 1).get("retried", 0) == 0  # backed off: not due a second early
        assert sweep_kinds((DueKind.JOB,), now)["retried"] == 1
        stored = _raw(stack, pk, sk)
        assert stored is not None
        assert (int(stored["dueAttempts"]["N"]), stored["dueError"]["S"].split(":")[0]) == (
            attempt,
            "TransientStoreError",
        )
        assert "claim" not in stored
        seen_due.append(int(stored["dueAt"]["S"]) - now)
        now = int(stored["dueAt"]["S"])
    assert seen_due == DELAYS

    parked = sweep_kinds((DueKind.JOB,), now)

    assert parked["parked"] == 1
    stored = _raw(stack, pk, sk)
    assert stored is not None  # never silently dropped
    assert (stored["dueShard"]["S"], int(stored["parkedAt"]["N"]), int(stored["dueAttempts"]["N"])) == (
        "parked#job",
        now,
        limits().sweep_max_attempts,
    )
    assert emitted["SweepJobsParked"] == 1
    (logged,) = [extra for message, extra in errors_logged if message.startswith("cleanup job parked")]
    assert (logged["jobKind"], logged["subject"], logged["attempts"]) == ("staging", subject, 8)
    assert len(failing_staging) == limits().sweep_max_attempts
    # never retried again, however late the sweep; still findable, and reported
    assert sweep_kinds((DueKind.JOB,), now + 30 * 24 * HOUR)["parked_total"] == 1
    assert len(failing_staging) == limits().sweep_max_attempts
    listed, _ = due.list_parked(DueKind.JOB, limit=10, cursor=None)
    assert [(m.pk, m.attempts) for m in listed] == [(pk, limits().sweep_max_attempts)]
    # enqueued again (a new reason to do it): re-armed, and it runs
    jobs.enqueue(TENANT, JobKind.STAGING, subject, now)
    assert due.count_parked(DueKind.JOB) == 0


def test_the_backoff_doubles_from_its_base_up_to_its_cap() -> None:
    assert [jobs.retry_delay(n) for n in range(1, 12)] == [
        60,
        120,
        240,
        480,
        960,
        1920,
        3840,
        7680,
        15360,
        21600,
        21600,
    ]
    assert jobs.retry_at(limits().sweep_max_attempts, 1000) is None


def test_given_a_claimed_job_then_a_concurrent_sweep_does_nothing_with_it(
    stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    now = clock.now()
    subject = {"sha256": "a" * 64}
    jobs.enqueue(TENANT, JobKind.ORPHAN_BLOB, subject, now)
    (item,), _ = due.query(
        DueKind.JOB, due.shard_of(job_store.job_key(TENANT, "orphan_blob", subject)[0]), now, limit=5, cursor=None
    )
    runs: list[str] = []

    def action(job: jobs.Job, at: int) -> None:
        runs.append(job.subject["sha256"])
        # meanwhile another sweep: one that read the job before the claim, and one that reads the index now
        runs.append(jobs.run_job(item, at))
        runs.append(str(dict(sweep_kinds((DueKind.JOB,), at))))

    monkeypatch.setitem(jobs._ACTIONS, JobKind.ORPHAN_BLOB, action)

    assert jobs.run_job(item, now) == "done"
    assert runs == ["a" * 64, "raced", "{}"]
    assert jobs.run_job(item, now) == "raced"  # done and deleted: a late duplicate changes nothing
    assert job_store.find(TENANT, "orphan_blob", subject) is None


def test_given_a_job_whose_attempt_died_then_it_comes_back_after_the_claim_window_with_the_attempt_counted(
    stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    now = clock.now()
    subject = {"sha256": "b" * 64}
    jobs.enqueue(TENANT, JobKind.ORPHAN_BLOB, subject, now)

    def dies(job: jobs.Job, at: int) -> None:
        raise InjectedCrash("the Lambda timed out")

    monkeypatch.setitem(jobs._ACTIONS, JobKind.ORPHAN_BLOB, dies)
    item = _raw(stack, *job_store.job_key(TENANT, "orphan_blob", subject))
    assert item is not None
    token = "died"
    claimed = job_store.claim(job_store.job_from_item(item), token, now=now, until=now + limits().job_claim_seconds)
    assert claimed is not None and claimed.attempts == 1  # ... and the attempt dies here, reporting nothing

    assert sweep_kinds((DueKind.JOB,), now + limits().job_claim_seconds - 1) == Counter()  # claimed: nobody touches it
    assert sweep_kinds((DueKind.JOB,), now + limits().job_claim_seconds)["retried"] == 1
    stored = job_store.find(TENANT, "orphan_blob", subject)
    assert stored is not None and stored.attempts == 2 and stored.claim is None


def test_given_a_job_whose_every_attempt_dies_then_it_is_parked_not_retried_forever(
    stack, monkeypatch: pytest.MonkeyPatch, emitted: Counter[str]
) -> None:
    now = clock.now()
    subject = {"sha256": "c" * 64}
    jobs.enqueue(TENANT, JobKind.ORPHAN_BLOB, subject, now)
    pk, sk = job_store.job_key(TENANT, "orphan_blob", subject)
    for _ in range(limits().sweep_max_attempts):
        job = job_store.job_from_item(_raw(stack, pk, sk) or {})
        assert job_store.claim(job, "dies", now=now, until=now + limits().job_claim_seconds) is not None
        now += limits().job_claim_seconds

    assert sweep_kinds((DueKind.JOB,), now)["parked"] == 1
    stored = job_store.find(TENANT, "orphan_blob", subject)
    assert stored is not None and stored.parked and stored.attempts == limits().sweep_max_attempts
    assert emitted["SweepJobsParked"] == 1


@pytest.mark.parametrize("fails_first", [False, True], ids=["succeeds", "fails-once"])
def test_given_a_crash_after_every_aws_call_of_a_job_run_then_re_runs_converge(
    stack, monkeypatch: pytest.MonkeyPatch, fails_first: bool
) -> None:
    real_delete = blobs.delete_prefix_objects
    k = 0
    while True:
        k += 1
        subject = {"uploadId": f"up-crash-{k}", "token": "tok"}
        staged = _stage(stack, subject["uploadId"], "tok")
        now = clock.now()
        jobs.enqueue(TENANT, JobKind.STAGING, subject, now)
        failures = [fails_first]

        def flaky(keys: list[str], failures: list[bool] = failures) -> None:
            if failures and failures.pop():
                raise TransientStoreError("S3 is unavailable, retry")
            real_delete(keys)

        monkeypatch.setattr(blobs, "delete_prefix_objects", flaky)
        item = _raw(stack, *job_store.job_key(TENANT, "staging", subject))
        assert item is not None
        with crash_after(k) as plan, contextlib.suppress(InjectedCrash):
            jobs.run_job(item, now)
        # re-runs, each at the time the job is next due, until nothing is left of it
        for _ in range(limits().sweep_max_attempts):
            stored = job_store.find(TENANT, "staging", subject)
            if stored is None:
                break
            assert not stored.parked, (k, stored)
            sweep_kinds((DueKind.JOB,), stored.mark.due_at)
        assert job_store.find(TENANT, "staging", subject) is None, k
        assert not any(_exists(stack, name) for name in staged), k
        if not plan.crashed:
            break
    # the calls crashed after: claim, delete the objects, delete the job; or claim, record the failure
    assert k == (3 if fails_first else 4)


def test_given_an_abandoned_upload_whose_expiry_keeps_failing_then_it_is_backed_off_then_parked_with_its_reservation(
    stack, acme: Caller, monkeypatch: pytest.MonkeyPatch, emitted: Counter[str]
) -> None:
    session = acme.request_upload("hello", "1.0.0", build_from_files({"SKILL.md": b"v1\n"}))
    upload_id = session.body["uploadId"]
    pk, sk = catalog.upload_key(TENANT, upload_id)

    def broken(*args: object, **kwargs: object) -> None:
        raise RuntimeError("the ledger is down")

    monkeypatch.setattr(catalog, "settle_upload_without_release", broken)
    now = clock.now() + 2 * HOUR
    delays = []
    for attempt in range(1, limits().sweep_max_attempts):
        swept = sweep_kinds((DueKind.UPLOAD,), now)
        assert (swept["failed"], swept["backed_off"]) == (1, 1)
        stored = _raw(stack, pk, sk)
        assert stored is not None
        assert (int(stored["dueAttempts"]["N"]), stored["dueError"]["S"]) == (attempt, "RuntimeError")
        delays.append(int(stored["dueAt"]["S"]) - now)
        now = int(stored["dueAt"]["S"])
    assert delays == DELAYS

    swept = sweep_kinds((DueKind.UPLOAD,), now)

    assert swept["parked"] == 1 and emitted["SweepItemsParked"] == 1
    stored = _raw(stack, pk, sk)
    assert stored is not None and stored["dueShard"]["S"] == "parked#upload"
    # nothing dropped: the session and its reservation are as they were, for an operator to look at
    upload = acme.get(f"/v1/uploads/{upload_id}").body
    assert upload["state"] == "awaiting_upload"
    assert int(stored["reservedBytes"]["N"]) > 0
    assert sweep_kinds((DueKind.UPLOAD,), now + 30 * 24 * HOUR) == Counter({"parked_total": 1})


def test_given_an_expired_upload_whose_staging_cannot_be_deleted_then_a_staging_job_retries_it(
    stack, acme: Caller, monkeypatch: pytest.MonkeyPatch
) -> None:
    session = acme.request_upload("hello", "1.0.0", build_from_files({"SKILL.md": b"v1\n"}))
    upload = catalog.get_upload(TENANT, session.body["uploadId"])
    staged = _stage(stack, upload.upload_id, upload.token)
    real_delete = blobs.delete_prefix_objects

    def refuse(keys: list[str]) -> None:
        raise TransientStoreError("S3 is unavailable, retry")

    monkeypatch.setattr(blobs, "delete_prefix_objects", refuse)
    now = clock.now() + 2 * HOUR
    assert sweep_kinds((DueKind.UPLOAD,), now)["expired"] == 1
    assert all(_exists(stack, name) for name in staged)
    assert sweep_kinds((DueKind.JOB,), now)["retried"] == 1

    monkeypatch.setattr(blobs, "delete_prefix_objects", real_delete)
    assert sweep_kinds((DueKind.JOB,), now + 60)["done"] == 1
    assert not any(_exists(stack, name) for name in staged)


def test_given_an_operation_whose_sweep_keeps_failing_then_it_is_backed_off_then_parked_until_it_settles(
    stack, acme: Caller, monkeypatch: pytest.MonkeyPatch, emitted: Counter[str]
) -> None:
    acme.publish("hello", "1.0.0", build_from_files({"SKILL.md": b"v1\n"}))
    monkeypatch.setattr(workflows, "start", lambda *args: "admission died before starting it")
    admitted = acme.install("ws-jobs", "hello", "hello", "1.0.0", key="k-parked")
    monkeypatch.undo()

    def unreachable(*args: object) -> str:
        raise TransientStoreError("Step Functions is unavailable, retry")

    # the sweep's action on an operation past its lease is a restart (its write, then StartExecution): it fails
    monkeypatch.setattr(workflow, "restart", unreachable)
    now = clock.now() + HOUR
    for _ in range(limits().sweep_max_attempts - 1):
        assert sweep_kinds((DueKind.OPERATION,), now)["backed_off"] == 1
        listed = [m for m in due.list_parked(DueKind.OPERATION, limit=10, cursor=None)[0]]
        assert listed == []
        now += jobs.retry_delay(limits().sweep_max_attempts)  # later than any backoff so far
    assert sweep_kinds((DueKind.OPERATION,), now)["parked"] == 1
    assert emitted["SweepItemsParked"] == 1
    (parked,) = due.list_parked(DueKind.OPERATION, limit=10, cursor=None)[0]
    assert parked.sk == f"OP#{admitted.body['operationId']}" and parked.error is not None
    assert parked.error.startswith("TransientStoreError")
    assert sweep_kinds((DueKind.OPERATION,), now + 30 * 24 * HOUR) == Counter({"parked_total": 1})
    monkeypatch.undo()

    # the same key starts its workflow, which settles it: the settle takes it out of the index, park and all
    later = clock.now() + HOUR
    monkeypatch.setattr(clock, "now", lambda: later)
    taken_over = acme.install("ws-jobs", "hello", "hello", "1.0.0", key="k-parked")
    assert taken_over.status == 202
    monkeypatch.undo()
    assert acme.wait_settled("ws-jobs", taken_over)["outcome"] == {"result": "succeeded"}
    assert due.count_parked(DueKind.OPERATION) == 0  # settled: out of the index, parked or not


def test_given_two_sweeps_that_saw_the_same_failure_then_only_one_backs_the_item_off(stack, acme: Caller) -> None:
    session = acme.request_upload("hello", "1.0.0", build_from_files({"SKILL.md": b"v1\n"}))
    now = clock.now() + 2 * HOUR
    shard = due.shard_of(session.body["uploadId"])
    (item,), _ = due.query(DueKind.UPLOAD, shard, now, limit=5, cursor=None)

    first = jobs.back_off(DueKind.UPLOAD, item, now, RuntimeError("down"))
    second = jobs.back_off(DueKind.UPLOAD, item, now, RuntimeError("down"))

    assert (first, second) == ("backed_off", "raced")
    stored = _raw(stack, *catalog.upload_key(TENANT, session.body["uploadId"]))
    assert stored is not None and stored["dueAttempts"]["N"] == "1" and int(stored["dueAt"]["S"]) == now + 60
