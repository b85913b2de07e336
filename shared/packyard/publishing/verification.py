"""Verification (a publish state machine task): re-read the stored archive once, hash it and walk it against the
manifest. Never trusts the client's checksum. Returns a verdict; a Choice state routes to publish or reject."""

from __future__ import annotations

import hashlib
from typing import Any

from aws_lambda_powertools.metrics import MetricUnit

from packyard.config import limits
from packyard.errors import ArchiveRejectCode, ArchiveRejected, ClaimLost
from packyard.observability import logger, metrics, tracer
from packyard.publishing.archive_verifier import verify_archive
from packyard.publishing.manifest import parse_manifest
from packyard.publishing.models import ArchiveSource, Upload, UploadState
from packyard.store import blobs, catalog


def claimed(tenant: str, upload_id: str, token: str) -> Upload:
    upload = catalog.get_upload(tenant, upload_id)
    if upload.token != token:
        raise ClaimLost(f"upload {upload_id} token does not match this execution")
    return upload


@tracer.capture_method(capture_response=False)
def verify(tenant: str, upload_id: str, token: str) -> dict[str, Any]:
    """Re-read the stored archive once, hash it and walk it against the manifest. Returns a verdict."""
    logger.append_keys(tenant=tenant, uploadId=upload_id)
    upload = claimed(tenant, upload_id, token)
    if upload.state is UploadState.PUBLISHED:
        return {"verdict": "accepted", "replay": True}
    if upload.state is not UploadState.VERIFYING:
        return {"verdict": "rejected", "code": "claim_lost", "detail": f"upload is {upload.state}"}
    bounds = limits()
    raw_manifest = blobs.read_bytes(blobs.staged_manifest_key(tenant, upload_id, token))
    if raw_manifest is None:
        return _verdict_rejected(ArchiveRejected(ArchiveRejectCode.CORRUPT_ARCHIVE, "staged manifest is missing"))
    if not staged_manifest_matches(upload, raw_manifest):
        return _verdict_rejected(ArchiveRejected(ArchiveRejectCode.DIGEST_MISMATCH, STAGED_MANIFEST_ALTERED))
    manifest = parse_manifest(raw_manifest, bounds)
    key = archive_key(upload)
    opened = blobs.open_stream(key)
    if opened is None:
        return _verdict_rejected(ArchiveRejected(ArchiveRejectCode.MISSING_FILE, "the archive object is missing"))
    try:
        verified = verify_archive(
            opened.stream,
            manifest,
            declared_size=upload.archive_size,
            declared_sha256=upload.archive_sha256,
            limits=bounds,
        )
    except ArchiveRejected as rejected:
        metrics.add_metric(name="ArchivesRejected", unit=MetricUnit.Count, value=1)
        logger.info("archive rejected", extra={"subCode": str(rejected.sub_code)})
        return _verdict_rejected(rejected)
    finally:
        opened.stream.close()
    metrics.add_metric(name="ArchivesVerified", unit=MetricUnit.Count, value=1)
    metrics.add_metric(name="VerifiedBytes", unit=MetricUnit.Bytes, value=verified.archive_size)
    return {
        "verdict": "accepted",
        "archiveEtag": opened.etag,
        "unpackedSize": verified.unpacked_size,
        "fileCount": verified.file_count,
        **carried_manifest(raw_manifest),
    }


MANIFEST_CARRIED_MAX_BYTES = 32 * 1024
"""A verified manifest up to this size rides in the task's answer to Publish (Step Functions carries 256 KB of state),
which then need not read the staged object a second time; Publish re-hashes it against the session's digest."""


def carried_manifest(raw: bytes) -> dict[str, str]:
    """``{"manifest": <its text>}`` for a small manifest (canonical JSON: UTF-8 text), else nothing."""
    if len(raw) > MANIFEST_CARRIED_MAX_BYTES:
        return {}
    try:
        return {"manifest": raw.decode("utf-8")}
    except UnicodeDecodeError:
        return {}


STAGED_MANIFEST_ALTERED = "the staged manifest's sha256 differs from the session's manifestDigest"


def staged_manifest_matches(upload: Upload, raw: bytes) -> bool:
    """The manifest bytes read back are the canonical manifest the session declared (its ``manifestDigest``):
    S3's upload checksum is not trusted to have caught a change (and moto does not check it)."""
    return len(raw) == upload.manifest_size and hashlib.sha256(raw).hexdigest() == upload.manifest_digest


def _verdict_rejected(rejected: ArchiveRejected) -> dict[str, Any]:
    return {"verdict": "rejected", "code": rejected.code, "subCode": str(rejected.sub_code), "detail": rejected.detail}


def archive_key(upload: Upload) -> str:
    if upload.source is ArchiveSource.BLOB:
        return blobs.blob_key(upload.tenant, upload.archive_sha256)
    return blobs.staged_archive_key(upload.tenant, upload.upload_id, upload.token)
