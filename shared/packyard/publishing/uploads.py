"""Upload sessions: create one (manifest checked, quota reserved, presigned PUT), read it, expire it, complete it.

Completing starts the publish state machine (execution name = upload id), whose tasks live in ``verification``,
``publication`` and ``rejection``. Every write is fenced by the upload's state and per-attempt token, so any step
may run more than once and still converge on one release and one ledger entry.
"""

from __future__ import annotations

import secrets
import uuid
from dataclasses import dataclass
from typing import Any

from aws_lambda_powertools.metrics import MetricUnit
from pydantic import BaseModel, ConfigDict, Field

from packyard import clock
from packyard.authority import Principal
from packyard.config import limits, required
from packyard.errors import (
    ArchiveRejectCode,
    ArchiveRejected,
    ClaimLost,
    IdempotencyKeyReused,
    QuotaExceeded,
    TransientStoreError,
    UploadExpired,
    UploadIncomplete,
    VersionExists,
)
from packyard.observability import logger, metrics, tracer
from packyard.operations.preconditions import check_idempotency_key
from packyard.operations.preconditions import digest as digest_of
from packyard.publishing.manifest import canonical_manifest_bytes, content_digest, manifest_digest, parse_manifest
from packyard.publishing.models import (
    ArchiveSource,
    Release,
    ReleaseStatus,
    Upload,
    UploadState,
    check_package_name,
    check_version,
)
from packyard.store import blobs, catalog, counters, workflows


class ArchiveDeclaration(BaseModel):
    model_config = ConfigDict(extra="forbid")

    size: int = Field(ge=1, description="Size in bytes of the tar.gz the client will upload")
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$", description="Lowercase hex SHA-256 of the tar.gz")


class CreateUploadRequest(BaseModel):
    """Body of ``POST /v1/packages/{package}/versions/{version}/uploads``."""

    model_config = ConfigDict(extra="forbid")

    manifest: dict[str, Any] = Field(description="files [{path,size,sha256,mode?}], permissions, metadata")
    archive: ArchiveDeclaration


@dataclass(frozen=True)
class CreatedUpload:
    """A new session, and where to PUT the archive (None when the tenant already holds that archive blob)."""

    upload: Upload
    upload_url: str | None


def retained_until(settled_at: int) -> int:
    """A settled session stays readable this long, then the table's TTL removes it."""
    return settled_at + limits().settled_upload_retention_seconds


@tracer.capture_method(capture_response=False)
def create_upload(
    principal: Principal,
    package: str,
    version: str,
    request: CreateUploadRequest,
    *,
    idempotency_key: str | None = None,
) -> CreatedUpload | Release:
    """A new upload session, or the release itself when this exact content is already published (nothing to do;
    unless that release was made ``unavailable`` by an integrity check: the session then takes the bytes again and
    its publish heals the release).
    The session records its subject: the release's publisher. With an Idempotency-Key, the session's id is derived
    from it: the same key with the same request answers the same session (one reservation), with another request
    ``422 idempotency_key_reused``."""
    tenant = principal.tenant
    check_package_name(package)
    check_version(version)
    request_digest = digest_of(
        {"package": package, "version": version, **request.model_dump(mode="json", by_alias=True)}
    )
    upload_id = uuid.uuid4().hex
    if idempotency_key is not None:
        upload_id = upload_id_for(tenant, check_idempotency_key(idempotency_key))
        replayed = _replayed(tenant, upload_id, request_digest)
        if replayed is not None:
            return replayed
    logger.append_keys(tenant=tenant, package=package, version=version)
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
    healing = False
    if existing is not None:
        if existing.manifest_digest != digest:
            raise VersionExists(
                f"{package}@{version} is already published with different content",
                existingManifestDigest=existing.manifest_digest,
            )
        if existing.status is not ReleaseStatus.UNAVAILABLE or existing.blobs_released_at is not None:
            return existing
        # the identical content of a release whose stored bytes failed an integrity check: take the bytes again
        # (never from storage), verify them and heal the release with them (publication.heals)
        healing = True

    held = not healing and catalog.blob_exists(tenant, declared.sha256)
    source = ArchiveSource.BLOB if held else ArchiveSource.UPLOAD
    now = clock.now()
    upload = Upload(
        tenant=tenant,
        upload_id=upload_id,
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
        created_by=principal.subject or None,
        request_digest=request_digest if idempotency_key is not None else None,
    )
    if upload.reserved_bytes > bounds.tenant_quota_bytes:
        # with no ledger yet, the store's condition would pass: a request larger than the whole quota never fits
        raise QuotaExceeded(
            f"reserving {upload.reserved_bytes} bytes exceeds the tenant quota of {bounds.tenant_quota_bytes} bytes",
            usedBytes=counters.tenant_used_bytes(tenant),
            limitBytes=bounds.tenant_quota_bytes,
            requestedBytes=upload.reserved_bytes,
        )
    logger.append_keys(uploadId=upload.upload_id)
    # The staged manifest is written first: if we die before the session exists, the lifecycle rule reclaims it.
    blobs.put_bytes(blobs.staged_manifest_key(tenant, upload.upload_id, upload.token), manifest_bytes, digest)
    if not catalog.create_upload(upload, quota_bytes=bounds.tenant_quota_bytes):
        # the same key created it meanwhile (a concurrent retry): answer that session
        replayed = _replayed(tenant, upload.upload_id, request_digest)
        if replayed is None:
            raise TransientStoreError(f"upload {upload.upload_id} vanished while replaying its key")
        return replayed
    metrics.add_metric(name="UploadSessionsCreated", unit=MetricUnit.Count, value=1)
    logger.info(
        "upload session created",
        extra={"source": str(source), "reservedBytes": upload.reserved_bytes, "heals": healing},
    )
    url = None
    if source is ArchiveSource.UPLOAD:
        key = blobs.staged_archive_key(tenant, upload.upload_id, upload.token)
        url = blobs.presigned_put(key, bounds.upload_ttl_seconds)
    return CreatedUpload(upload=upload, upload_url=url)


def upload_id_for(tenant: str, key: str) -> str:
    """Deterministic: the same (tenant, Idempotency-Key) always names the same session."""
    return digest_of({"tenant": tenant, "upload": key})[:32]


def _replayed(tenant: str, upload_id: str, request_digest: str) -> CreatedUpload | None:
    """The session this key already created, answered again (with a fresh upload URL while one is needed)."""
    existing = catalog.find_upload(tenant, upload_id)
    if existing is None:
        return None
    if existing.request_digest != request_digest:
        raise IdempotencyKeyReused(
            f"Idempotency-Key already used for a different upload request (upload {upload_id})", uploadId=upload_id
        )
    url = None
    if existing.state is UploadState.AWAITING_UPLOAD and existing.source is ArchiveSource.UPLOAD:
        key = blobs.staged_archive_key(tenant, existing.upload_id, existing.token)
        url = blobs.presigned_put(key, limits().upload_ttl_seconds)
    return CreatedUpload(upload=existing, upload_url=url)


def get_upload(tenant: str, upload_id: str) -> Upload:
    return catalog.get_upload(tenant, upload_id)


def expire_if_due(upload: Upload) -> Upload:
    """An awaiting session past its deadline becomes expired and gives back its reservation (idempotent)."""
    now = clock.now()
    if upload.state is not UploadState.AWAITING_UPLOAD or now < upload.expires_at:
        return upload
    try:
        # stays due: the expiry sweep deletes its staged objects (a read deletes nothing)
        catalog.settle_upload_without_release(
            upload, UploadState.EXPIRED, None, now, retain_until=retained_until(now), keep_due=True
        )
    except ClaimLost:
        return catalog.get_upload(upload.tenant, upload.upload_id)
    return upload.model_copy(update={"state": UploadState.EXPIRED, "reserved_bytes": 0, "settled_at": now})


@tracer.capture_method(capture_response=False)
def complete_upload(tenant: str, upload_id: str) -> Upload:
    """Start verification (execution name = upload id). A repeat on a session still verifying starts another run
    (Express does not deduplicate names; every task is fenced on the session, so the duplicate is harmless, and a
    complete that died before StartExecution is started by its client's retry)."""
    logger.append_keys(tenant=tenant, uploadId=upload_id)
    upload = expire_if_due(catalog.get_upload(tenant, upload_id))
    if upload.state is UploadState.EXPIRED:
        raise UploadExpired(f"upload {upload_id} expired at {upload.expires_at}; request a new session")
    machine = required("publish_state_machine_arn").publish_state_machine_arn
    arn = workflows.execution_arn(machine, upload.upload_id)
    if upload.state is UploadState.AWAITING_UPLOAD:
        if upload.source is ArchiveSource.UPLOAD:
            staged = blobs.head(blobs.staged_archive_key(tenant, upload.upload_id, upload.token))
            if staged is None:
                raise UploadIncomplete(f"nothing uploaded for {upload_id} yet; PUT the archive to the upload URL")
        try:
            check_by = clock.now() + limits().reservation_ttl_seconds
            upload = catalog.start_verifying(upload, arn, check_by=check_by)
        except ClaimLost:
            upload = catalog.get_upload(tenant, upload_id)
    if upload.state is UploadState.VERIFYING:
        workflows.start(machine, upload.upload_id, task_input(upload))
    return upload


def task_input(upload: Upload) -> dict[str, str]:
    return {"tenant": upload.tenant, "uploadId": upload.upload_id, "token": upload.token}
