"""Verification that did not finish starts again. The publish workflow is an Express workflow: it runs for at most
five minutes, and nothing can ask Step Functions about one of its runs afterwards (no DescribeExecution). What
decides is the session's own record: an upload still verifying past its reservation window (1800 s, far longer than
a run can last) has no run going. Its verification stopped without settling it: a throttle or another transient
failure past the workflow's retries (``Deferred``), a Reject that failed (``RejectFailed``), a run that timed out, or
a complete that died before StartExecution. The maintenance sweep then renews it, a write fenced on the session's
state, token and ``resumes`` (``resumes`` + 1, the window renewed), and only after that write starts a new run,
named ``<uploadId>-r<n>`` (same upload, same token: every task is fenced on them), up to :data:`MAX_RESUMES` times;
past them the upload is rejected.

A crash between the write and StartExecution leaves a session verifying with a renewed window and no run: the sweep
renews it again once that window ends. Two sweeps reading the same session renew it once (the fence on ``resumes``);
a run started twice (Express is at least once) is harmless, as every task is fenced.
"""

from __future__ import annotations

from packyard.config import limits, required
from packyard.observability import logger
from packyard.publishing.models import Upload
from packyard.publishing.uploads import task_input
from packyard.store import catalog, workflows

MAX_RESUMES = 5
RESUMED = "resumed"


def attempt_name(upload_id: str, resumes: int) -> str:
    """The execution name of the run a session's ``resumes``-th renewal starts (0: the one complete starts)."""
    return upload_id if resumes == 0 else f"{upload_id}-r{resumes}"


def attempt_names(upload_id: str) -> list[str]:
    """Every name a session's verification may run under, in order."""
    return [attempt_name(upload_id, n) for n in range(MAX_RESUMES + 1)]


def resume(upload: Upload, now: int) -> str | None:
    """For a verifying upload past its window: ``resumed`` (renewed, and a new run started), or None when it has
    been resumed :data:`MAX_RESUMES` times already (the caller rejects it). ClaimLost when the session changed since
    it was read (settled, or renewed by another sweep)."""
    if upload.resumes >= MAX_RESUMES:
        return None
    renewed = catalog.renew_verification(upload, now + limits().reservation_ttl_seconds)
    machine = required("publish_state_machine_arn").publish_state_machine_arn
    workflows.start(machine, attempt_name(upload.upload_id, renewed.resumes), task_input(upload))
    logger.info("verification resumed", extra={"uploadId": upload.upload_id, "attempt": renewed.resumes})
    return RESUMED
