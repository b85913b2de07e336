"""Verification a transient failure stopped starts again: the publish workflow ends a throttle (or another transient
error) that outlasted its retries in ``Deferred``, leaving the upload verifying with its reservation. When the
maintenance sweep finds such an upload past its reservation window it starts a later attempt, execution
``<uploadId>-r<n>`` (same upload, same token: every task is fenced on them), up to :data:`MAX_RESUMES` times; only
then is the upload rejected. The attempts are found by name (never recorded), so a crash between starting one and
recording anything leaves nothing to repair: the next sweep finds it running.
"""

from __future__ import annotations

from packyard.config import limits, required
from packyard.observability import logger
from packyard.publishing.models import Upload
from packyard.store import catalog, workflows

DEFERRED = "Deferred"  # the publish workflow's Fail state for a transient failure past its retries
MAX_RESUMES = 5


def attempt_names(upload_id: str) -> list[str]:
    return [upload_id, *(f"{upload_id}-r{n}" for n in range(1, MAX_RESUMES + 1))]


def resume(upload: Upload, now: int) -> str | None:
    """For a verifying upload past its window: ``still_verifying`` (an attempt runs), ``resumed`` (a later attempt
    started now), or None when its verification ended otherwise (never started, or failed past every attempt):
    the caller rejects it."""
    if not upload.execution_arn:
        return None
    machine = required("publish_state_machine_arn").publish_state_machine_arn
    for number, name in enumerate(attempt_names(upload.upload_id)):
        arn = upload.execution_arn if number == 0 else workflows.execution_arn(machine, name)
        status, error = workflows.execution_outcome(arn)
        if status == "RUNNING":
            catalog.postpone_upload_check(upload, now + limits().reservation_ttl_seconds)
            return "still_verifying"
        if status is None and number > 0:
            task = {"tenant": upload.tenant, "uploadId": upload.upload_id, "token": upload.token}
            workflows.start(machine, name, task)
            catalog.postpone_upload_check(upload, now + limits().reservation_ttl_seconds)
            logger.info("verification resumed", extra={"uploadId": upload.upload_id, "attempt": number})
            return "resumed"
        if status != "FAILED" or error != DEFERRED:
            return None
    return None
