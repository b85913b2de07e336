"""Cleanup jobs: work a sweep must finish later (delete what nothing needs any more), each claimed, retried with
exponential backoff and parked after its last attempt, never retried forever and never silently dropped.

The API other modules use (keep imports cheap: this module imports no action's module):

- ``JobKind``: what a job does. ``RELEASE_BLOBS`` (subject ``{"package", "version"}``: a yanked release lets go of
  its blobs), ``ORPHAN_BLOB`` (``{"sha256"}``: remove a blob nothing references, if still so), ``STAGING``
  (``{"uploadId", "token"}``: delete an upload session's staging objects; registered here), ``RESTORE_HOLDERS``
  (``{"package", "version"}``: a healed release's installations the scrub set ``needs_attention`` become active
  again; ``maintenance.scrub``).
- ``enqueue_item(tenant, kind, subject, now, *, delay=0) -> dict``: a TransactWriteItems ``Put`` of the job, to add
  to the transaction that makes the job necessary (a yank, a rejection). Idempotent: the key derives from kind and
  subject, so enqueueing twice is one job (re-armed: attempts start over, a park is lifted).
- ``enqueue(tenant, kind, subject, now, *, delay=0)``: the same, alone.
- ``register(kind, action)``: the function that does a kind of job, ``action(job: Job, now: int) -> None``; it raises
  to fail the attempt. Actions must be idempotent (an attempt may run twice: a crash after the action, before the
  job's deletion). A module registers its actions at import; ``PROVIDERS`` names the module of each kind so a run
  imports it on first need (``maintenance.reclaim`` registers ``RELEASE_BLOBS`` and ``ORPHAN_BLOB``).
- ``run_job(item, now) -> str``: what the sweep does with a due job item (``DueKind.JOB``).

An attempt (``run_job``): the claim (fenced on the due attributes the sweep read, so of two sweeps that read the job
one wins, the other answers ``raced``) counts the attempt and moves ``dueAt`` to the end of the claim window (so if
the attempt dies without a word the job comes back then, its attempt counted: a crashing action cannot loop
forever); then the action; success → the job is deleted (fenced on the claim) → ``done``; failure → due again
after ``min(base * 2**(attempts-1), cap)`` → ``retried``, or, when that was attempt ``sweep_max_attempts``,
``parked``: out of the due index into ``parked#job`` (still listed by ``packyard sweep``), ``SweepJobsParked`` metric
(alarmed) and an error log with its kind and subject.

``retry_at``/``back_off`` give every other due item (uploads, operations, blobs) the same attempts, backoff and park
when its sweep action fails (``sweeps.sweep``).
"""

from __future__ import annotations

import importlib
import secrets
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from aws_lambda_powertools.metrics import MetricUnit

from packyard.config import limits
from packyard.observability import logger, metrics
from packyard.store import blobs, due
from packyard.store import jobs as job_store
from packyard.store.due import DueKind


class JobKind(StrEnum):
    RELEASE_BLOBS = "release_blobs"
    ORPHAN_BLOB = "orphan_blob"
    STAGING = "staging"
    RESTORE_HOLDERS = "restore_holders"


@dataclass(frozen=True)
class Job:
    """One attempt's view of a job: whose, what, about what, and which attempt this is (1 for the first)."""

    tenant: str
    kind: JobKind
    subject: Mapping[str, str]
    attempt: int


JobAction = Callable[[Job, int], None]

_ACTIONS: dict[JobKind, JobAction] = {}
# the module that registers each kind's action, imported on first need (never at this module's import)
PROVIDERS: dict[JobKind, str] = {
    JobKind.RELEASE_BLOBS: "packyard.maintenance.reclaim",
    JobKind.ORPHAN_BLOB: "packyard.maintenance.reclaim",
    JobKind.STAGING: __name__,
    JobKind.RESTORE_HOLDERS: "packyard.maintenance.scrub",
}


def register(kind: JobKind, action: JobAction) -> JobAction:
    """Make ``action`` the one that runs jobs of ``kind`` (the latest registration wins). Returns the action, so it
    can be used as ``register(JobKind.X, fn)`` at module level after ``fn``."""
    _ACTIONS[JobKind(kind)] = action
    return action


def action_of(kind: JobKind) -> JobAction | None:
    if kind not in _ACTIONS and kind in PROVIDERS:
        importlib.import_module(PROVIDERS[kind])
    return _ACTIONS.get(kind)


def enqueue_item(tenant: str, kind: JobKind, subject: Mapping[str, str], now: int, *, delay: int = 0) -> dict[str, Any]:
    return job_store.put_item(tenant, str(JobKind(kind)), _subject(subject), due_at=now + max(delay, 0), now=now)


def enqueue(tenant: str, kind: JobKind, subject: Mapping[str, str], now: int, *, delay: int = 0) -> None:
    job_store.put(tenant, str(JobKind(kind)), _subject(subject), due_at=now + max(delay, 0), now=now)
    logger.info("cleanup job enqueued", extra={"jobKind": str(kind), "subject": dict(subject)})


def _subject(subject: Mapping[str, str]) -> dict[str, str]:
    return {str(name): str(value) for name, value in subject.items()}


# ---- backoff ----------------------------------------------------------------------------------------------------


def retry_delay(attempts: int) -> int:
    """Seconds before the next attempt after ``attempts`` failed ones: base, 2 base, 4 base, ... up to the cap."""
    settings = limits()
    exponent = min(max(attempts - 1, 0), 32)
    return int(min(settings.sweep_retry_base_seconds * 2**exponent, settings.sweep_retry_cap_seconds))


def retry_at(attempts: int, now: int) -> int | None:
    """When to try again after ``attempts`` failed attempts, or None: that was the last one, park it."""
    if attempts >= limits().sweep_max_attempts:
        return None
    return now + retry_delay(attempts)


def error_name(exc: BaseException) -> str:
    """What is recorded of a failure: the error's class name and, for our own errors, their short message."""
    from packyard.errors import PackyardError

    name = type(exc).__name__
    return f"{name}: {exc}"[: due.ERROR_MAX_LENGTH] if isinstance(exc, PackyardError) else name


def back_off(kind: DueKind, item: dict[str, Any], now: int, exc: BaseException) -> str:
    """A due item whose sweep action failed: due again after the backoff (``backed_off``), or parked after its last
    attempt (``parked``; ``SweepItemsParked`` metric, alarmed, and an error log). Fenced on what the sweep read:
    ``raced`` if the item moved meanwhile (its new state decides what is due)."""
    mark = due.mark_of(item)
    attempts = mark.attempts + 1
    when = retry_at(attempts, now)
    error = error_name(exc)
    if not due.back_off(mark, kind=kind, retry_at=when, now=now, error=error):
        return "raced"
    if when is None:
        metrics.add_metric(name="SweepItemsParked", unit=MetricUnit.Count, value=1)
        logger.error(
            "sweep item parked after its last attempt",
            extra={"dueKind": str(kind), "item": mark.item_name, "attempts": attempts, "lastError": error},
        )
        return "parked"
    return "backed_off"


# ---- running a job ------------------------------------------------------------------------------------------------


def run_job(item: dict[str, Any], now: int) -> str:
    """One attempt at a due job (see the module docstring): ``done``, ``retried``, ``parked`` or ``raced``."""
    job = job_store.job_from_item(item)
    record = job.record
    described = {"jobKind": record.kind, "subject": record.subject, "tenant": record.tenant}
    if job.attempts >= limits().sweep_max_attempts:
        # its last attempt was claimed and never reported back (it died): park it as it is
        if not job_store.park(job, None, now=now, error=job.mark.error or "AttemptDied"):
            return "raced"
        _parked(described, job.attempts, job.mark.error or "AttemptDied")
        return "parked"
    token = secrets.token_hex(8)
    claimed = job_store.claim(job, token, now=now, until=now + limits().job_claim_seconds)
    if claimed is None:
        return "raced"  # another sweep claimed it first (or it was re-enqueued): nothing for us to do
    attempt = claimed.attempts
    try:
        kind = JobKind(record.kind)
        action = action_of(kind)
        if action is None:
            raise LookupError(f"no action is registered for job kind {kind}")
        action(Job(tenant=record.tenant, kind=kind, subject=dict(record.subject), attempt=attempt), now)
    except Exception as exc:
        error = error_name(exc)
        when = retry_at(attempt, now)
        if when is None:
            if not job_store.park(claimed, token, now=now, error=error):
                return "raced"
            _parked(described, attempt, error)
            return "parked"
        logger.warning(
            "cleanup job failed; retried later",
            extra={**described, "attempt": attempt, "lastError": error, "retryAt": when},
            exc_info=True,
        )
        return "retried" if job_store.release(claimed, token, retry_at=when, error=error) else "raced"
    job_store.finish(claimed, token)  # False: re-enqueued meanwhile; it runs again, harmlessly
    logger.info("cleanup job done", extra={**described, "attempt": attempt})
    return "done"


def _parked(described: dict[str, Any], attempts: int, error: str) -> None:
    metrics.add_metric(name="SweepJobsParked", unit=MetricUnit.Count, value=1)
    logger.error(
        "cleanup job parked after its last attempt", extra={**described, "attempts": attempts, "lastError": error}
    )


# ---- the jobs this module runs itself -------------------------------------------------------------------------------


def discard_staging(job: Job, now: int) -> None:
    """STAGING: delete an upload session's staging objects (deleting what is gone already succeeds)."""
    upload_id, token = job.subject["uploadId"], job.subject["token"]
    blobs.delete_prefix_objects(
        [
            blobs.staged_archive_key(job.tenant, upload_id, token),
            blobs.staged_manifest_key(job.tenant, upload_id, token),
        ]
    )


register(JobKind.STAGING, discard_staging)
