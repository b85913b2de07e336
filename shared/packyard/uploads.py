"""The publish flow: upload session → complete → verify → publish, or reject.

Every step may run more than once (client retries, Step Functions Retry, a Lambda dying mid-way). Each write is
fenced by the upload's state and per-attempt token, so a re-run converges on one release and one ledger entry.
"""

from __future__ import annotations

import secrets
import uuid
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from packyard import clock
from packyard.archive import verify_archive
from packyard.config import limits, settings
from packyard.errors import (
    ArchiveRejectCode,
    ArchiveRejected,
    ClaimLost,
    NotFound,
    PackyardError,
    TransientStoreError,
    UploadExpired,
    UploadIncomplete,
    VersionExists,
)
from packyard.manifest import canonical_manifest_bytes, content_digest, manifest_digest, parse_manifest, unpacked_size
from packyard.models import (
    ArchiveSource,
    Rejection,
    Release,
    ReleaseStatus,
    Upload,
    UploadState,
    check_package_name,
    check_version,
)
from packyard.observability import logger, metrics
from packyard.store import blobs, catalog, workflows
from packyard.tasks import caught_error_message


class ArchiveDeclaration(BaseModel):
    model_config = ConfigDict(extra="forbid")

    size: int = Field(ge=1, description="Size in bytes of the tar.gz the client will upload")
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$", description="Lowercase hex SHA-256 of the tar.gz")


class CreateUploadRequest(BaseModel):
    """Body of ``POST /v1/packages/{package}/versions/{version}/uploads``."""

    model_config = ConfigDict(extra="forbid")

    manifest: dict[str, Any] = Field(description="files [{path,size,sha256,mode?}], permissions, metadata")
    archive: ArchiveDeclaration


class CreatedUpload(BaseModel):
    """Either a new session, or the existing identical release (``existing`` set, nothing to upload)."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    upload: Upload | None = None
    upload_url: str | None = None
    existing: Release | None = None


def create_upload(tenant: str, package: str, version: str, request: CreateUploadRequest) -> CreatedUpload:
    check_package_name(package)
    check_version(version)
    bounds = limits()
    manifest = parse_manifest(request.manifest, bounds)
    declared = request.archive
    if declared.size > bounds.max_archive_bytes:
        raise ArchiveRejected(
            ArchiveRejectCode.TOO_LARGE, f"archive of {declared.size} bytes exceeds {bounds.max_archive_bytes}"
        )
    manifest_bytes = canonical_manifest_bytes(manifest)
    digest = manifest_digest(manifest)

    existing = catalog.find_release(tenant, package, version)
    if existing is not None:
        if existing.manifest_digest == digest:
            return CreatedUpload(existing=existing)
        raise VersionExists(
            f"{package}@{version} is already published with different content",
            existingManifestDigest=existing.manifest_digest,
        )

    source = ArchiveSource.BLOB if catalog.blob_exists(tenant, declared.sha256) else ArchiveSource.UPLOAD
    now = clock.now()
    upload = Upload(
        tenant=tenant,
        upload_id=uuid.uuid4().hex,
        token=secrets.token_hex(16),
        package=package,
        version=version,
        state=UploadState.AWAITING_UPLOAD,
        source=source,
        archive_size=declared.size,
        archive_sha256=declared.sha256,
        manifest_digest=digest,
        manifest_size=len(manifest_bytes),
        content_digest=content_digest(manifest),
        reserved_bytes=len(manifest_bytes) + (declared.size if source is ArchiveSource.UPLOAD else 0),
        created_at=now,
        expires_at=now + bounds.upload_ttl_seconds,
    )
    # The staged manifest is written first: if we die before the session exists, the lifecycle rule reclaims it.
    blobs.put_bytes(blobs.staged_manifest_key(tenant, upload.upload_id, upload.token), manifest_bytes, digest)
    catalog.create_upload(upload, quota_bytes=bounds.tenant_quota_bytes)
    metrics.add_metric(name="UploadSessionsCreated", unit="Count", value=1)
    url = None
    if source is ArchiveSource.UPLOAD:
        key = blobs.staged_archive_key(tenant, upload.upload_id, upload.token)
        url = blobs.presigned_put(key, bounds.upload_ttl_seconds)
    return CreatedUpload(upload=upload, upload_url=url)


def get_upload(tenant: str, upload_id: str) -> Upload:
    return catalog.get_upload(tenant, upload_id)


def expire_if_due(upload: Upload) -> Upload:
    """An awaiting session past its deadline becomes expired and gives back its reservation (idempotent)."""
    now = clock.now()
    if upload.state is not UploadState.AWAITING_UPLOAD or now < upload.expires_at:
        return upload
    try:
        catalog.settle_upload_without_release(upload, UploadState.EXPIRED, None, now)
    except ClaimLost:
        return catalog.get_upload(upload.tenant, upload.upload_id)
    return upload.model_copy(update={"state": UploadState.EXPIRED, "reserved_bytes": 0, "settled_at": now})


def complete_upload(tenant: str, upload_id: str) -> Upload:
    """Start verification (execution name = upload id). A repeat returns the same execution."""
    upload = expire_if_due(catalog.get_upload(tenant, upload_id))
    if upload.state is UploadState.EXPIRED:
        raise UploadExpired(f"upload {upload_id} expired at {upload.expires_at}; request a new session")
    machine = settings().publish_state_machine_arn
    arn = workflows.execution_arn(machine, upload.upload_id)
    if upload.state is UploadState.AWAITING_UPLOAD:
        if upload.source is ArchiveSource.UPLOAD:
            staged = blobs.head(blobs.staged_archive_key(tenant, upload.upload_id, upload.token))
            if staged is None:
                raise UploadIncomplete(f"nothing uploaded for {upload_id} yet; PUT the archive to the upload URL")
        try:
            upload = catalog.start_verifying(upload, arn)
        except ClaimLost:
            upload = catalog.get_upload(tenant, upload_id)
    if upload.state is UploadState.VERIFYING:
        workflows.start(machine, upload.upload_id, task_input(upload))
    return upload


def task_input(upload: Upload) -> dict[str, str]:
    return {"tenant": upload.tenant, "uploadId": upload.upload_id, "token": upload.token}


# ---- Step Functions tasks ----------------------------------------------------------------------------------------


def _claimed(tenant: str, upload_id: str, token: str) -> Upload:
    upload = catalog.get_upload(tenant, upload_id)
    if upload.token != token:
        raise ClaimLost(f"upload {upload_id} token does not match this execution")
    return upload


def verify(tenant: str, upload_id: str, token: str) -> dict[str, Any]:
    """Re-read the stored archive once, hash it and walk it against the manifest. Returns a verdict."""
    upload = _claimed(tenant, upload_id, token)
    if upload.state is UploadState.PUBLISHED:
        return {"verdict": "accepted", "replay": True}
    if upload.state is not UploadState.VERIFYING:
        return {"verdict": "rejected", "code": "claim_lost", "detail": f"upload is {upload.state}"}
    bounds = limits()
    raw_manifest = blobs.read_bytes(blobs.staged_manifest_key(tenant, upload_id, token))
    if raw_manifest is None:
        return _verdict_rejected(ArchiveRejected(ArchiveRejectCode.CORRUPT_ARCHIVE, "staged manifest is missing"))
    manifest = parse_manifest(raw_manifest, bounds)
    key = _archive_key(upload)
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
        metrics.add_metric(name="ArchivesRejected", unit="Count", value=1)
        return _verdict_rejected(rejected)
    finally:
        opened.stream.close()
    metrics.add_metric(name="ArchivesVerified", unit="Count", value=1)
    metrics.add_metric(name="VerifiedBytes", unit="Bytes", value=verified.archive_size)
    return {
        "verdict": "accepted",
        "archiveEtag": opened.etag,
        "unpackedSize": verified.unpacked_size,
        "fileCount": verified.file_count,
    }


def _verdict_rejected(rejected: ArchiveRejected) -> dict[str, Any]:
    return {"verdict": "rejected", "code": rejected.code, "subCode": str(rejected.sub_code), "detail": rejected.detail}


def _archive_key(upload: Upload) -> str:
    if upload.source is ArchiveSource.BLOB:
        return blobs.blob_key(upload.tenant, upload.archive_sha256)
    return blobs.staged_archive_key(upload.tenant, upload.upload_id, upload.token)


PUBLISH_ATTEMPTS = 3


def publish(tenant: str, upload_id: str, token: str, verified: dict[str, Any]) -> dict[str, Any]:
    """Write the blobs (content-addressed, conditional on absence) and, in one transaction, the release, the
    upload's final state and the usage ledger. Safe to re-run after a crash at any point."""
    upload = _claimed(tenant, upload_id, token)
    if upload.state is UploadState.PUBLISHED:
        return {"release": catalog.get_release(tenant, upload.package, upload.version).receipt(), "replay": True}
    if upload.state is not UploadState.VERIFYING:
        raise ClaimLost(f"upload {upload_id} is {upload.state}, not verifying")

    existing = catalog.find_release(tenant, upload.package, upload.version)
    if existing is not None and existing.manifest_digest != upload.manifest_digest:
        raise VersionExists(f"{upload.package}@{upload.version} was published with different content meanwhile")
    manifest = None
    if existing is None:
        manifest = parse_manifest(_store_blobs(upload, verified), limits())

    for _ in range(PUBLISH_ATTEMPTS):
        if existing is not None:
            catalog.settle_upload_as_duplicate(upload, clock.now())
            return {"release": existing.receipt(), "duplicate": True}
        assert manifest is not None
        now = clock.now()
        release = Release(
            tenant=tenant,
            package=upload.package,
            version=upload.version,
            status=ReleaseStatus.PUBLISHED,
            manifest_digest=upload.manifest_digest,
            content_digest=upload.content_digest,
            manifest_size=upload.manifest_size,
            archive_sha256=upload.archive_sha256,
            archive_size=upload.archive_size,
            unpacked_size=unpacked_size(manifest),
            file_count=len(manifest.files),
            permissions=[p.model_dump(mode="json", exclude_none=True) for p in manifest.permissions],
            upload_id=upload.upload_id,
            published_at=now,
        )
        new_blobs, known_blobs = _blob_records(upload)
        blocked = catalog.publish_release(upload, release, new_blobs=new_blobs, known_blobs=known_blobs, now=now)
        if blocked is None:
            metrics.add_metric(name="ReleasesPublished", unit="Count", value=1)
            logger.info("release published", extra={"package": upload.package, "version": upload.version})
            return {"release": release.receipt()}
        if blocked.existing_release is not None:
            existing = blocked.existing_release
            if existing.upload_id == upload.upload_id:
                return {"release": existing.receipt(), "replay": True}
            if existing.manifest_digest != upload.manifest_digest:
                raise VersionExists(f"{upload.package}@{upload.version} was published with different content")
            continue
        if blocked.upload_changed:
            current = catalog.get_upload(tenant, upload_id)
            if current.state is UploadState.PUBLISHED and current.token == token:
                return {"release": catalog.get_release(tenant, upload.package, upload.version).receipt()}
            raise ClaimLost(f"upload {upload_id} changed state while publishing")
        # another publish created or dropped one of our blobs between our read and the transaction: re-read
    raise TransientStoreError(f"publish of {upload_id} kept racing on blob records")


def _blob_records(upload: Upload) -> tuple[dict[str, int], list[str]]:
    new: dict[str, int] = {}
    known: list[str] = []
    for sha256, size in ((upload.archive_sha256, upload.archive_size), (upload.manifest_digest, upload.manifest_size)):
        if sha256 in new or sha256 in known:
            continue
        if catalog.blob_exists(upload.tenant, sha256):
            known.append(sha256)
        else:
            new[sha256] = size
    return new, known


def _store_blobs(upload: Upload, verified: dict[str, Any]) -> bytes:
    """Content-addressed blobs for the manifest and the archive; returns the manifest bytes."""
    tenant = upload.tenant
    manifest_key = blobs.blob_key(tenant, upload.manifest_digest)
    manifest_bytes = blobs.read_bytes(blobs.staged_manifest_key(tenant, upload.upload_id, upload.token))
    if manifest_bytes is not None:
        blobs.put_bytes(manifest_key, manifest_bytes, upload.manifest_digest, if_absent=True)
    else:
        # A previous attempt may have published the blob and lost the staging object since.
        manifest_bytes = blobs.read_bytes(manifest_key)
        if manifest_bytes is None:
            raise ArchiveRejected(ArchiveRejectCode.CORRUPT_ARCHIVE, "staged manifest vanished before publish")
    if upload.source is ArchiveSource.UPLOAD:
        target = blobs.blob_key(tenant, upload.archive_sha256)
        if blobs.head(target) is None:
            staged = blobs.staged_archive_key(tenant, upload.upload_id, upload.token)
            blobs.copy_verified(staged, str(verified.get("archiveEtag", "")), target, upload.archive_sha256)
    return manifest_bytes


def reject(
    tenant: str, upload_id: str, token: str, verdict: dict[str, Any] | None, error: dict[str, Any] | None
) -> dict[str, Any]:
    """Record why, give the reservation back, publish nothing. Fenced: a stale execution changes nothing."""
    rejection = rejection_from(verdict, error)
    try:
        upload = _claimed(tenant, upload_id, token)
    except (ClaimLost, NotFound):
        return {"rejected": False, "reason": "claim_lost"}
    if upload.state is not UploadState.VERIFYING:
        return {"rejected": upload.state is UploadState.REJECTED, "state": str(upload.state)}
    try:
        catalog.settle_upload_without_release(
            upload, UploadState.REJECTED, rejection.model_dump(by_alias=True, exclude_none=True), clock.now()
        )
    except ClaimLost:
        return {"rejected": False, "reason": "claim_lost"}
    _discard_staging(upload)
    metrics.add_metric(name="UploadsRejected", unit="Count", value=1)
    return {"rejected": True, "rejection": rejection.to_api()}


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
    code = _ERROR_CODES.get(error_type, "publish_failed")
    detail = caught_error_message(error) or error_type
    return Rejection(code=code, detail=detail)


def _discard_staging(upload: Upload) -> None:
    """Staged objects of a rejected session are deleted now rather than left to the lifecycle rule."""
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
