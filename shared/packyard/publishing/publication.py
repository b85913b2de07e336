"""Publication (a publish state machine task): write the content-addressed blobs, then in one transaction the
release, the upload's end and the usage ledger. Safe to re-run after a crash at any point."""

from __future__ import annotations

import time
from typing import Any

from aws_lambda_powertools.metrics import MetricUnit

from packyard import clock
from packyard.config import limits
from packyard.errors import ArchiveRejectCode, ArchiveRejected, ClaimLost, TransientStoreError, VersionExists
from packyard.maintenance import scrub
from packyard.observability import logger, metrics, tracer
from packyard.publishing.manifest import parse_manifest, unpacked_size
from packyard.publishing.models import ArchiveSource, Release, ReleaseStatus, Upload, UploadState
from packyard.publishing.uploads import retained_until
from packyard.publishing.verification import STAGED_MANIFEST_ALTERED, claimed, staged_manifest_matches
from packyard.store import blobs, catalog, reclaims
from packyard.store.records import BlobRecord

PUBLISH_ATTEMPTS = 3
# a publish meeting a blob being reclaimed waits this long, doubled on each later attempt (a reclaim takes < 1 s)
RECLAIM_WAIT_SECONDS = 0.5


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
    manifest = manifest_bytes = None
    if existing is None:
        manifest_bytes = _manifest_bytes(upload)
        manifest = parse_manifest(manifest_bytes, limits())

    for attempt in range(PUBLISH_ATTEMPTS):
        if existing is not None:
            now = clock.now()
            catalog.settle_upload_as_duplicate(upload, now, retain_until=retained_until(now))
            return {"release": existing.receipt(), "duplicate": True}
        if manifest is None or manifest_bytes is None:
            raise ClaimLost(f"upload {upload_id}: the manifest was not read before publishing")
        new_blobs, known_blobs, reclaiming = _blob_records(upload)
        if reclaiming:
            # a sweep is reclaiming one of our blobs (claimed while nothing referenced it): let it finish, then
            # write the blob anew
            time.sleep(RECLAIM_WAIT_SECONDS * 2**attempt)
            continue
        # objects are written only after their records were read absent (or orphan): a reclaim deletes an object
        # only under a claim, which moves the record, so our transaction below then fails and we read again
        _store_blobs(upload, verified, manifest_bytes, {*new_blobs, *(k.sha256 for k in known_blobs if k.orphan)})
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
        blocked = catalog.publish_release(
            upload,
            release,
            new_blobs=new_blobs,
            known_blobs=known_blobs,
            now=now,
            retain_until=retained_until(now),
            check_blobs_at=scrub.next_check(now),
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


def _blob_records(upload: Upload) -> tuple[dict[str, int], list[BlobRecord], bool]:
    """The upload's blobs as their records read now (one strongly consistent read): absent ones (new: sha256 →
    size), existing ones, and whether one is being reclaimed."""
    sizes = {upload.archive_sha256: upload.archive_size, upload.manifest_digest: upload.manifest_size}
    found = reclaims.read_blobs(upload.tenant, list(sizes))
    new = {sha256: size for sha256, size in sizes.items() if sha256 not in found}
    return new, list(found.values()), any(record.reclaiming is not None for record in found.values())


def _manifest_bytes(upload: Upload) -> bytes:
    """The canonical manifest: staged by the session, or (a previous attempt published the blob and lost the staging
    object since) the blob."""
    staged = blobs.read_bytes(
        blobs.staged_manifest_key(upload.tenant, upload.upload_id, upload.token), at_most=upload.manifest_size
    )
    if staged is None:
        staged = blobs.read_bytes(blobs.blob_key(upload.tenant, upload.manifest_digest), at_most=upload.manifest_size)
    if staged is None:
        raise ArchiveRejected(ArchiveRejectCode.CORRUPT_ARCHIVE, "staged manifest vanished before publish")
    # re-hashed here too: what is written as the manifest blob (and read back by every reader) is exactly the
    # manifest the session declared, whatever happened to the staged object after verification
    if not staged_manifest_matches(upload, staged):
        raise ArchiveRejected(ArchiveRejectCode.DIGEST_MISMATCH, STAGED_MANIFEST_ALTERED)
    return staged


def _store_blobs(upload: Upload, verified: dict[str, Any], manifest_bytes: bytes, wanted: set[str]) -> None:
    """Content-addressed objects for the ``wanted`` blobs (records absent or orphan): the manifest, and the archive
    copied from staging (an upload that reused a stored archive cannot bring it back once reclaimed)."""
    tenant = upload.tenant
    if upload.manifest_digest in wanted:
        blobs.put_bytes(
            blobs.blob_key(tenant, upload.manifest_digest), manifest_bytes, upload.manifest_digest, if_absent=True
        )
    if upload.archive_sha256 not in wanted:
        return
    target = blobs.blob_key(tenant, upload.archive_sha256)
    if blobs.head(target) is not None:
        return
    if upload.source is not ArchiveSource.UPLOAD:
        raise ArchiveRejected(
            ArchiveRejectCode.MISSING_FILE, "the stored archive this upload reuses was reclaimed: upload it again"
        )
    staged = blobs.staged_archive_key(tenant, upload.upload_id, upload.token)
    blobs.copy_verified(staged, str(verified.get("archiveEtag", "")), target, upload.archive_sha256)
