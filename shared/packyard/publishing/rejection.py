"""Rejection (the publish state machine's Catch target): record why, give the reservation back, publish nothing,
and discard the staged objects. Fenced: a stale execution changes nothing."""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.metrics import MetricUnit

from packyard import clock
from packyard.errors import ArchiveRejectCode, ArchiveRejected, ClaimLost, NotFound, PackyardError, VersionExists
from packyard.maintenance import reclaim
from packyard.observability import logger, metrics, tracer
from packyard.publishing.models import ArchiveSource, Rejection, Upload, UploadState
from packyard.publishing.uploads import retained_until
from packyard.publishing.verification import claimed
from packyard.store import blobs, catalog
from packyard.workflow_inputs import caught_error_message


@tracer.capture_method(capture_response=False)
def reject(
    tenant: str, upload_id: str, token: str, verdict: dict[str, Any] | None, error: dict[str, Any] | None
) -> dict[str, Any]:
    """Record why, give the reservation back, publish nothing. Fenced: a stale execution changes nothing."""
    logger.append_keys(tenant=tenant, uploadId=upload_id)
    rejection = rejection_from(verdict, error)
    try:
        upload = claimed(tenant, upload_id, token)
    except (ClaimLost, NotFound):
        return {"rejected": False, "reason": "claim_lost"}
    if upload.state is not UploadState.VERIFYING:
        return {"rejected": upload.state is UploadState.REJECTED, "state": str(upload.state)}
    now = clock.now()
    if not (verdict and verdict.get("verdict") == "rejected"):
        # publish may have run and written blobs before it failed: any without a record is an orphan, reclaimed by
        # the blob sweep if still nothing references it (marked before the settle, so a crash here is re-run)
        reclaim.mark_orphans(upload.tenant, _written_blobs(upload), now)
    # staging first: nothing reads it once verification ended, and a crash after it leaves the session verifying, so
    # the retry (or the sweep) settles it; a crash after the settle would leave the objects to the lifecycle rule
    discard_staging(upload)
    try:
        catalog.settle_upload_without_release(
            upload,
            UploadState.REJECTED,
            rejection.model_dump(by_alias=True, exclude_none=True),
            now,
            retain_until=retained_until(now),
        )
    except ClaimLost:
        return {"rejected": False, "reason": "claim_lost"}
    metrics.add_metric(name="UploadsRejected", unit=MetricUnit.Count, value=1)
    logger.info("upload rejected", extra={"code": rejection.code, "subCode": rejection.sub_code})
    return {"rejected": True, "rejection": rejection.as_output()}


def _written_blobs(upload: Upload) -> dict[str, int]:
    """The blobs a publish of ``upload`` writes (sha256 → size): its manifest, and its archive unless it reused one."""
    written = {upload.manifest_digest: upload.manifest_size}
    if upload.source is ArchiveSource.UPLOAD:
        written[upload.archive_sha256] = upload.archive_size
    return written


PUBLISH_FAILED_DETAIL = "the publish could not be completed; nothing was published and the reservation was returned"
# errorType (the exception class name, as Step Functions reports it) → the stable code the caller sees
_ERROR_CODES: dict[str, str] = {cls.__name__: cls.code for cls in (VersionExists, ArchiveRejected, ClaimLost)}


def rejection_from(verdict: dict[str, Any] | None, error: dict[str, Any] | None) -> Rejection:
    if verdict and verdict.get("verdict") == "rejected":
        return Rejection(
            code=verdict.get("code", "archive_rejected"),
            sub_code=verdict.get("subCode"),
            detail=str(verdict.get("detail", ""))[:1000],
        )
    error = error or {}
    error_type = str(error.get("Error", "States.Unknown"))
    code = _ERROR_CODES.get(error_type)
    if code is None:
        # not one of ours: the Cause (an AWS error text, a stack trace, a class name) stays in the execution's history
        # and the logs; the answer says what happened in Packyard's words
        logger.warning("publish failed", extra={"error": error_type})
        return Rejection(code="publish_failed", detail=PUBLISH_FAILED_DETAIL)
    detail = caught_error_message(error) or code
    sub_code = None
    if error_type == ArchiveRejected.__name__:
        # an ArchiveRejected reads "<sub-code>: <detail>" (its str), e.g. the stored bytes changed before publish
        named, _, rest = detail.partition(": ")
        if named in {str(code) for code in ArchiveRejectCode}:
            sub_code, detail = named, rest
    return Rejection(code=code, sub_code=sub_code, detail=detail)


def discard_staging(upload: Upload) -> bool:
    """Staged objects of a session that ended unpublished (rejected, expired) are deleted now rather than left to
    the bucket's lifecycle rule; a failure here is only logged (the rule still reclaims them) and answered False (a
    sweep then retries it as a cleanup job)."""
    try:
        blobs.delete_prefix_objects(
            [
                blobs.staged_archive_key(upload.tenant, upload.upload_id, upload.token),
                blobs.staged_manifest_key(upload.tenant, upload.upload_id, upload.token),
            ]
        )
    except PackyardError:
        logger.warning(
            "could not discard staged objects; the lifecycle rule will", extra={"uploadId": upload.upload_id}
        )
        return False
    return True
