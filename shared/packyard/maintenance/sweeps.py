"""Sweeps over the due index: each reads one page of one shard of what is due at ``now`` and acts on each item with a
fenced write, so a sweep is safe to run twice, concurrently, or after a crash anywhere (a re-run acts on what is
still due). A failing action is logged and counted (``SweepActionsFailed``) and its item backed off
(``jobs.back_off``, fenced on the due time the sweep read): due again after an exponential backoff, and after its
last attempt parked (out of the sweeps' reach, still listed, ``SweepItemsParked`` alarmed): never retried forever,
never silently dropped. The first page of shard 0 of each kind also reports how many of its items are parked
(``parked_total``).

- **Upload sessions.** Awaiting upload past the deadline → ``expired``, reservation returned (a write fenced on the
  session's state and token, so an old index image of a session completed meanwhile changes nothing), then staging
  objects deleted and the session out of the due index. Verifying past the reservation window → no run of its
  verification is going (an Express run lasts at most 5 minutes; no execution is looked up): verification starts
  again (``publishing.resumption``: ``resumes`` + 1 and the window renewed, fenced, then a new run; up to 5 times);
  past that → rejected (reservation returned, staging deleted).
- **Cleanup jobs** (``maintenance.jobs``): claimed, run, deleted; a failure is retried with backoff, then parked.
  An expired session whose staging objects could not be deleted gets a ``staging`` job.
- **Operations** past their lease: no execution runs them any more (every start renews the lease, which outlasts an
  Express run; nothing is looked up). Admitted or planned → restarted (``restarts`` + 1, fenced; a new execution
  replays what is recorded), up to ``MAX_RESTARTS``; committed → settled as Settle would (succeeded if its commit is
  in place); waiting for consent past its deadline → settled ``consent_expired``; out of restarts → settled
  ``unconfirmed interrupted``.
- **Blobs**: reclaimed when nothing references them (``maintenance.reclaim``), else re-hashed at their next integrity
  check (``maintenance.scrub``). A page of blobs reads at most ``scrub_bytes_per_page`` bytes; past it the rest stays
  due (``deferred``) and the page's cursor points right after the last blob it acted on.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from aws_lambda_powertools.metrics import MetricUnit

from packyard.config import limits
from packyard.errors import ClaimLost
from packyard.maintenance import jobs, reclaim, scrub
from packyard.observability import logger, metrics, tracer
from packyard.operations import settlement, workflow
from packyard.operations.models import Operation, OperationState
from packyard.publishing import rejection, resumption
from packyard.publishing.models import Upload, UploadState
from packyard.publishing.uploads import retained_until
from packyard.store import catalog, due, workspace
from packyard.store.due import DueKind

PAGE_SIZE = 50
# new executions the sweep starts for one operation past its lease before it settles it unconfirmed interrupted
MAX_RESTARTS = 2


@dataclass
class SweepPage:
    """What one page of one shard did, and where the next page starts (None: nothing more is due)."""

    kind: DueKind
    shard: int
    cursor: str | None
    counts: Counter[str] = field(default_factory=Counter)


@tracer.capture_method(capture_response=False)
def sweep(kind: DueKind, shard: int, now: int, cursor: str | None = None) -> SweepPage:
    logger.append_keys(sweep=str(kind), shard=shard)
    items, next_cursor = due.query(kind, shard, now, limit=PAGE_SIZE, cursor=cursor)
    page = SweepPage(kind=kind, shard=shard, cursor=next_cursor)
    act = _ACTIONS[kind]
    budget = _ReadBudget(kind)
    for index, item in enumerate(items):
        if not budget.allows(item):
            # this page's read budget is spent: the rest stays due, the next page starts after the last item acted on
            page.cursor = due.cursor_after(kind, shard, items[index - 1])
            page.counts["deferred"] += len(items) - index
            break
        try:
            page.counts[act(item, now)] += 1
        except ClaimLost:
            page.counts["raced"] += 1  # someone else moved it first: nothing left for us to do
        except Exception as failure:
            logger.exception("sweep action failed")  # the sweep and shard are in the log keys
            page.counts["failed"] += 1
            page.counts[_back_off(kind, item, now, failure)] += 1
    if shard == 0 and cursor is None:
        parked = _parked_total(kind)
        if parked:
            page.counts["parked_total"] += parked
    # the sweep backlog: what this page found due (the dashboard's "Sweep backlog"; deferred counts what it left)
    metrics.add_metric(name="SweepItemsDue", unit=MetricUnit.Count, value=len(items))
    for outcome, count in page.counts.items():
        metrics.add_metric(
            name=f"Sweep{kind.title()}{outcome.title().replace('_', '')}", unit=MetricUnit.Count, value=count
        )
    if page.counts["failed"]:
        metrics.add_metric(name="SweepActionsFailed", unit=MetricUnit.Count, value=page.counts["failed"])
    logger.info("swept a page", extra={"due": len(items), "counts": dict(page.counts), "more": bool(next_cursor)})
    return page


def _back_off(kind: DueKind, item: dict[str, Any], now: int, failure: Exception) -> str:
    """Back the failed item off (or park it); if even that fails, it stays due as it was (the next run retries)."""
    try:
        return jobs.back_off(kind, item, now, failure)
    except Exception:
        logger.exception("could not back off a failed sweep item; it stays due")
        return "back_off_failed"


def _parked_total(kind: DueKind) -> int:
    try:
        return due.count_parked(kind)
    except Exception:
        logger.exception("could not count parked items")
        return 0


def _finish_expired(upload: Upload, now: int) -> None:
    """An expired session's staged objects are deleted (or, failing that, handed to a ``staging`` cleanup job), then
    it leaves the due index."""
    if not rejection.discard_staging(upload):
        _retry_staging(upload, now)
    catalog.drop_upload_due(upload)


def _retry_staging(upload: Upload, now: int) -> None:
    """The staging objects could not be deleted: a ``staging`` cleanup job retries it (with backoff)."""
    jobs.enqueue(upload.tenant, jobs.JobKind.STAGING, {"uploadId": upload.upload_id, "token": upload.token}, now)


class _ReadBudget:
    """The bytes one page of blob checks may read (``scrub_bytes_per_page``), counted by each record's size before
    its check; the first item of a page is always acted on, so every page makes progress. Other kinds read no
    object bytes: unbounded."""

    def __init__(self, kind: DueKind) -> None:
        self.left = limits().scrub_bytes_per_page if kind is DueKind.BLOB else None
        self.first = True

    def allows(self, item: dict[str, Any]) -> bool:
        if self.left is None:
            return True
        cost = scrub.bytes_to_check(item)
        if not self.first and cost > self.left:
            return False
        self.first = False
        self.left -= cost
        return True


def _sweep_upload(item: dict[str, Any], now: int) -> str:
    upload = catalog.upload_from_due(item)
    if upload.state is UploadState.AWAITING_UPLOAD:
        if now < upload.expires_at:
            return "not_due"
        # The index is eventually consistent: this may be an old image of a session its client completed just
        # before the deadline (verifying now, its staged archive being read). The fenced settle decides, on the
        # state and token as stored (ClaimLost: counted raced, nothing deleted); only then does the staging go. The
        # session stays due until it has, so a crash in between leaves the next run an expired session to finish.
        catalog.settle_upload_without_release(
            upload, UploadState.EXPIRED, None, now, retain_until=retained_until(now), keep_due=True
        )
        _finish_expired(upload.model_copy(update={"state": UploadState.EXPIRED}), now)
        return "expired"
    if upload.state is UploadState.EXPIRED:
        # expired and still due: a sweep died before its staging was deleted, or a read expired it (expire_if_due)
        _finish_expired(upload, now)
        return "staging_discarded"
    if upload.state is UploadState.VERIFYING:
        # past its reservation window no run of its verification is going (an Express run lasts at most 5
        # minutes): verification starts again (renewed, fenced), or past its resumes the upload is rejected
        resumed = resumption.resume(upload, now)
        if resumed is not None:
            return resumed
        error = {"Error": "ExecutionEnded", "Cause": f"verification did not finish after {upload.resumes} resumes"}
        answer = rejection.reject(upload.tenant, upload.upload_id, upload.token, None, error)
        return "rejected" if answer.get("rejected") else "raced"
    return "not_due"


def _sweep_operation(item: dict[str, Any], now: int) -> str:
    seen = workspace.operation_from_due(item)
    if seen.state not in workspace.DUE_STATES or seen.lease_until > now:
        return "not_due"
    # what to do depends on the operation's state and attempt: read them consistently, not from the index's image
    # (eventually consistent: an operation resumed, decided or committed since may show its old state there)
    op = workspace.get_operation(seen.tenant, seen.workspace, seen.operation_id)
    if op is None:
        return "gone"
    if op.state not in workspace.DUE_STATES or op.lease_until > now:
        return "not_due"
    # past its lease no execution runs it: every start of one follows a write that renewed the lease, and the lease
    # (15 min) outlasts an Express run (5 min). Nothing is looked up (Express has no DescribeExecution).
    if op.state in (OperationState.ADMITTED, OperationState.PLANNED) and op.restarts < MAX_RESTARTS:
        # admission died before starting it, or its run stopped (a crash, the 5-minute limit): a new run replays
        # what is recorded
        workflow.restart(op, now)
        return "started"
    # committed (only Settle was left: the sweep runs it), waiting for consent past its deadline, or out of restarts
    settlement.settle_task(op.tenant, op.workspace, op.installation_id, op.operation_id, _ended_with(op))
    return "settled"


def _sweep_blob(item: dict[str, Any], now: int) -> str:
    """A blob is due to be reclaimed (nothing references it any more) or for its next integrity check."""
    blob = catalog.blob_from_due(item)
    if reclaim.is_unreferenced(blob):
        return reclaim.reclaim_blob(blob, now)
    return scrub.check_blob(blob, now)


def _sweep_job(item: dict[str, Any], now: int) -> str:
    if reclaim.is_release_job(item):
        # a yanked release is its own job until it has given its blobs back (due again when a holder lets go)
        return reclaim.run_release_job(item, now)
    return jobs.run_job(item, now)


_ACTIONS = {
    DueKind.UPLOAD: _sweep_upload,
    DueKind.OPERATION: _sweep_operation,
    DueKind.BLOB: _sweep_blob,
    DueKind.JOB: _sweep_job,
}


def _ended_with(op: Operation) -> dict[str, Any] | None:
    """What Settle is told about an operation no execution runs any more."""
    if op.state is OperationState.COMMITTED:
        return None  # its change landed: settle confirms the installation is the plan (else outcome_unknown)
    if op.state is OperationState.AWAITING_CONSENT:
        return {"Error": "States.Timeout", "Cause": "no decision within the consent window"}
    return {"Error": "ExecutionEnded", "Cause": f"no execution settled it after {op.restarts} restarts"}
