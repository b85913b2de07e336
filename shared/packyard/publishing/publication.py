"""Publication (a publish state machine task): write the content-addressed blobs, then in one transaction the
release, the upload's end and the usage ledger. Safe to re-run after a crash at any point."""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.metrics import MetricUnit

from packyard import clock
from packyard.config import limits
from packyard.errors import ArchiveRejectCode, ArchiveRejected, ClaimLost, TransientStoreError, VersionExists
from packyard.observability import logger, metrics, tracer
from packyard.publishing.manifest import parse_manifest, unpacked_size
from packyard.publishing.models import ArchiveSource, Release, ReleaseStatus, Upload, UploadState
from packyard.publishing.uploads import retained_until
from packyard.publishing.verification import claimed
from packyard.store import blobs, catalog

PUBLISH_ATTEMPTS = 3


@tracer.capture_method(capture_response=False)
def publish(tenant: str, upload_id: str, token: str, verified: dict[str, Any]) -> dict[str, Any]:
    """Write the blobs (content-addressed, conditional on absence) and, in one transaction, the release, the
    upload's final state and the usage ledger. Safe to re-run after a crash at any point."""
    logger.append_keys(tenant=tenant, uploadId=upload_id)
    upload = claimed(tenant, upload_id, token)
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
            now = clock.now()
            catalog.settle_upload_as_duplicate(upload, now, retain_until=retained_until(now))
            return {"release": existing.receipt(), "duplicate": True}
        if manifest is None:
            raise ClaimLost(f"upload {upload_id}: the manifest was not read before publishing")
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
            published_by=upload.created_by,
        )
        new_blobs, known_blobs = _blob_records(upload)
        blocked = catalog.publish_release(
            upload,
            release,
            new_blobs=new_blobs,
            known_blobs=known_blobs,
            now=now,
            retain_until=retained_until(now),
        )
        if blocked is None:
            metrics.add_metric(name="ReleasesPublished", unit=MetricUnit.Count, value=1)
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
