"""Publication (a publish state machine task): write the content-addressed blobs, then in one transaction the
release, the upload's end and the usage ledger. Safe to re-run after a crash at any point."""

from __future__ import annotations

import time
from typing import Any

from aws_lambda_powertools.metrics import MetricUnit

from packyard import changes, clock
from packyard.config import limits
from packyard.errors import ArchiveRejectCode, ArchiveRejected, ClaimLost, TransientStoreError, VersionExists
from packyard.maintenance import jobs, scrub
from packyard.observability import logger, metrics, tracer
from packyard.publishing import file_pack
from packyard.publishing.manifest import Manifest, parse_manifest, unpacked_size
from packyard.publishing.models import ArchiveSource, Release, ReleaseStatus, Upload, UploadState
from packyard.publishing.signing import Attested, attest
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
        # a retried step (its first try may have died before the event went out): the same event again
        release = catalog.get_release(tenant, upload.package, upload.version)
        if release.upload_id == upload_id:
            changes.emit(changes.release_published(release))
        return {"release": release.receipt(), "replay": True}
    if upload.state is not UploadState.VERIFYING:
        raise ClaimLost(f"upload {upload_id} is {upload.state}, not verifying")

    existing = catalog.find_release(tenant, upload.package, upload.version)
    if existing is not None and existing.manifest_digest != upload.manifest_digest:
        raise VersionExists(f"{upload.package}@{upload.version} was published with different content meanwhile")
    manifest = manifest_bytes = None
    if existing is None or heals(existing, upload):
        manifest_bytes = _manifest_bytes(upload, verified)
        manifest = parse_manifest(manifest_bytes, limits())

    attested: Attested | None = None
    for attempt in range(PUBLISH_ATTEMPTS):
        if existing is not None and not heals(existing, upload):
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
        # a blob found missing or corrupt is written again from the bytes verified here; healing a release writes
        # both of its blobs again (content-addressed: a healthy one is overwritten with the same bytes)
        replaced = {k.sha256 for k in known_blobs if k.corrupt_at is not None and not k.orphan}
        if existing is not None:
            replaced |= {k.sha256 for k in known_blobs if not k.orphan}
        # objects are written only after their records were read absent (or orphan): a reclaim deletes an object
        # only under a claim, which moves the record, so our transaction below then fails and we read again
        _store_blobs(
            upload,
            verified,
            (manifest_bytes, manifest),
            {*new_blobs, *(k.sha256 for k in known_blobs if k.orphan)},
            replace=replaced,
            unrecorded=set(new_blobs),
        )
        now = clock.now()
        if existing is not None:
            healed = _heal(upload, existing, new_blobs, known_blobs, now)
            if healed is not None:
                return healed
            existing = catalog.find_release(tenant, upload.package, upload.version)
            if existing is None or existing.manifest_digest != upload.manifest_digest:
                raise VersionExists(f"{upload.package}@{upload.version} changed while it was being healed")
            continue
        # signed once per upload, before the release exists (a retry reuses the envelope an attempt stored)
        attested = attested or attest(upload, now)
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
            published_at=attested.published_at,
            published_by=upload.created_by,
            attestation=attested.ref,
        )
        blocked = catalog.publish_release(
            upload,
            release,
            new_blobs=new_blobs,
            known_blobs=known_blobs,
            now=now,
            retain_until=retained_until(now),
            check_blobs_at=scrub.next_check(now),
            replaced_blobs=frozenset(replaced),
        )
        if blocked is None:
            changes.emit(changes.release_published(release))  # after the release is committed
            metrics.add_metric(name="ReleasesPublished", unit=MetricUnit.Count, value=1)
            logger.info("release published", extra={"package": upload.package, "version": upload.version})
            if replaced:
                metrics.add_metric(name="BlobsHealed", unit=MetricUnit.Count, value=len(replaced))
                logger.info("missing or corrupt blobs written again", extra={"blobs": sorted(replaced)})
            return {"release": release.receipt()}
        if blocked.existing_release is not None:
            existing = blocked.existing_release
            if existing.upload_id == upload.upload_id:
                # a retried step (its first try may have died before the event went out): the same event again
                changes.emit(changes.release_published(existing))
                return {"release": existing.receipt(), "replay": True}
            if existing.manifest_digest != upload.manifest_digest:
                raise VersionExists(f"{upload.package}@{upload.version} was published with different content")
            continue
        if blocked.upload_changed:
            return _settled_meanwhile(upload)
        # another publish created or dropped one of our blobs between our read and the transaction: re-read
    raise TransientStoreError(f"publish of {upload_id} kept racing on blob records")


def heals(existing: Release, upload: Upload) -> bool:
    """An upload of a release's identical content heals it when the release was made ``unavailable`` (its stored
    bytes failed an integrity check) and still holds its blobs: the bytes were taken again (never reused from
    storage) and verified, so they replace the bad blobs."""
    return (
        existing.status is ReleaseStatus.UNAVAILABLE
        and existing.blobs_released_at is None
        and existing.manifest_digest == upload.manifest_digest
        and upload.source is ArchiveSource.UPLOAD
    )


def _heal(
    upload: Upload, existing: Release, new_blobs: dict[str, int], known_blobs: list[BlobRecord], now: int
) -> dict[str, Any] | None:
    """The healing transaction (``catalog.heal_release``), then the installations back to active. None when the
    release moved meanwhile (the caller reads it again)."""
    subject = {"package": existing.package, "version": existing.version}
    blocked = catalog.heal_release(
        upload,
        existing,
        restored=ReleaseStatus.YANKED if existing.yanked_at is not None else ReleaseStatus.PUBLISHED,
        new_blobs=new_blobs,
        known_blobs=known_blobs,
        now=now,
        retain_until=retained_until(now),
        check_blobs_at=scrub.next_check(now),
        restore_job=jobs.enqueue_item(upload.tenant, jobs.JobKind.RESTORE_HOLDERS, subject, now),
    )
    if blocked is None:
        metrics.add_metric(name="ReleasesHealed", unit=MetricUnit.Count, value=1)
        restored = scrub.restore_holders(upload.tenant, existing.package, existing.version, now)
        logger.info("release healed", extra={**subject, "installationsRestored": restored})
        return {"release": existing.receipt(), "healed": True, "installationsRestored": restored}
    if blocked.upload_changed:
        return _settled_meanwhile(upload)
    return None


def _settled_meanwhile(upload: Upload) -> dict[str, Any]:
    """The upload moved while our transaction was being decided: published by this very attempt (a lost answer,
    retried) is a replay; anything else is another owner's."""
    current = catalog.get_upload(upload.tenant, upload.upload_id)
    if current.state is UploadState.PUBLISHED and current.token == upload.token:
        return {"release": catalog.get_release(upload.tenant, upload.package, upload.version).receipt()}
    raise ClaimLost(f"upload {upload.upload_id} changed state while publishing")


def _blob_records(upload: Upload) -> tuple[dict[str, int], list[BlobRecord], bool]:
    """The upload's blobs as their records read now (one strongly consistent read): absent ones (new: sha256 →
    size), existing ones, and whether one is being reclaimed."""
    sizes = {upload.archive_sha256: upload.archive_size, upload.manifest_digest: upload.manifest_size}
    found = reclaims.read_blobs(upload.tenant, list(sizes))
    new = {sha256: size for sha256, size in sizes.items() if sha256 not in found}
    return new, list(found.values()), any(record.reclaiming is not None for record in found.values())


def _manifest_bytes(upload: Upload, verified: dict[str, Any]) -> bytes:
    """The canonical manifest: the one Verify read and carried here (small manifests), else as staged by the
    session, or (a previous attempt published the blob and lost the staging object since) the blob. Whichever it is,
    it is hashed against the session's ``manifestDigest`` before anything is written from it."""
    carried = verified.get("manifest")
    if isinstance(carried, str) and staged_manifest_matches(upload, carried.encode("utf-8")):
        return carried.encode("utf-8")
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


def _store_blobs(
    upload: Upload,
    verified: dict[str, Any],
    manifest: tuple[bytes, Manifest],
    wanted: set[str],
    *,
    replace: set[str],
    unrecorded: set[str],
) -> None:
    """Content-addressed objects for the ``wanted`` blobs (records absent or orphan): the manifest, and the archive
    copied from staging (an upload that reused a stored archive cannot bring it back once reclaimed), then the
    archive's file pack (``file_pack``: written with the archive, deleted with it). Blobs in ``replace`` (found
    missing or corrupt, or of a release being healed) are written over whatever is stored, their pack too: the
    bytes written are the ones verified (the manifest re-hashed, the archive an ETag-pinned, checksummed copy, the
    pack's files re-hashed against the manifest), so a crash between two writes leaves each object either as it
    was or right, and the retry writes what is missing.

    An archive in ``unrecorded`` (its record was read absent, the common case of new content) is copied and packed
    without asking S3 first whether the objects are there (a HEAD each): only an earlier attempt of this publish, or
    a concurrent one of the same archive, could have written them, with the same bytes, so writing them again is
    harmless and costs a copy only on such a retry. An orphan's objects (a publish wrote them and lost its release)
    are likely there: asked for, as before."""
    tenant = upload.tenant
    manifest_bytes, parsed = manifest
    if upload.manifest_digest in replace:
        blobs.put_bytes(blobs.blob_key(tenant, upload.manifest_digest), manifest_bytes, upload.manifest_digest)
    elif upload.manifest_digest in wanted:
        blobs.put_bytes(
            blobs.blob_key(tenant, upload.manifest_digest), manifest_bytes, upload.manifest_digest, if_absent=True
        )
    if upload.archive_sha256 not in wanted and upload.archive_sha256 not in replace:
        return
    target = blobs.blob_key(tenant, upload.archive_sha256)
    replacing = upload.archive_sha256 in replace
    unasked = upload.archive_sha256 in unrecorded and upload.source is ArchiveSource.UPLOAD
    if replacing or unasked or blobs.head(target) is None:
        if upload.source is not ArchiveSource.UPLOAD:
            raise ArchiveRejected(
                ArchiveRejectCode.MISSING_FILE,
                "the stored archive this upload reuses was reclaimed or failed an integrity check: upload it again",
            )
        staged = blobs.staged_archive_key(tenant, upload.upload_id, upload.token)
        blobs.copy_verified(staged, str(verified.get("archiveEtag", "")), target, upload.archive_sha256)
    file_pack.write_file_pack(
        tenant, upload.archive_sha256, parsed, archive_size=upload.archive_size, replace=replacing or unasked
    )
