"""The integrity scrub: re-hash stored blobs on a rolling schedule, within a bytes-per-page budget.

Every blob record is due for its first check ``scrub_interval_seconds`` after its publish, then as long again after
each check (the blob kind of the due index, a slot shared with reclamation: the sweep reclaims an unreferenced blob
and checks the others). A check streams the object through sha256 and compares digest and length with the record:

- **healthy** → due again one interval later (a fenced update on the due time the sweep read);
- **missing or corrupt** → every release the blob belongs to (the record's ``releases`` set, added to by each
  publish) becomes ``unavailable`` (installs, updates, rollbacks, restores and promotes of it are refused
  ``release_unavailable``; its archive has no download), every active installation of those releases
  ``needs_attention`` (the resolved view lists active installations only), ``BlobsCorrupt`` is emitted (alarmed),
  and last the record gets ``corruptAt`` and its next check. Marking the record last makes a crash anywhere
  converge: the record stays due at the time it was read and the next run marks again; each mark is conditional
  (a release already unavailable, an installation no longer active of it are left alone), so marking twice
  changes nothing. Nothing is ever unmarked by the scrub: a blob that reads healthy again after being marked is
  logged for an operator. What unmarks is a *healing publish* (``publishing.publication``): an upload of the same
  bytes, verified, writes the blob again and restores the release; ``restore_holders`` (run by that publish and, for
  a crash after it, by its ``RESTORE_HOLDERS`` cleanup job) brings the installations back to ``active``.

Records written before the scrub carry neither due attributes (they are never checked until backfilled) nor
``releases`` (a corrupt one is logged and marks nothing).
"""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.metrics import MetricUnit

from packyard import changes
from packyard.config import limits
from packyard.errors import ClaimLost
from packyard.maintenance.jobs import Job, JobKind, register
from packyard.observability import logger, metrics
from packyard.publishing.models import ReleaseStatus
from packyard.store import blobs, catalog, reclaims, workspace
from packyard.store.records import BlobRecord

HOLDERS_PAGE = 100


def next_check(now: int) -> int:
    """When a blob published or checked at ``now`` is next re-hashed."""
    return now + limits().scrub_interval_seconds


def bytes_to_check(item: dict[str, Any]) -> int:
    """What checking a due blob record reads (its recorded size): the sweep's budget counts it before the check."""
    return int(item.get("size", {}).get("N", 0))


def check_blob(blob: BlobRecord, now: int) -> str:
    """Re-hash the blob's stored object and act on the verdict; the outcome the sweep counts."""
    tenant = blob.tenant
    if tenant is None:
        raise ClaimLost(f"blob {blob.sha256} has no tenant")
    found = blobs.sha256_of(blobs.blob_key(tenant, blob.sha256), stop_after=blob.size)
    if found is not None and found == (blob.sha256, blob.size):
        if blob.corrupt_at is not None:
            logger.warning(
                "a blob marked corrupt reads healthy again; its releases stay unavailable",
                extra={"sha256": blob.sha256, "corruptAt": blob.corrupt_at},
            )
        catalog.record_blob_check(blob, now=now, next_check_at=next_check(now), corrupt=False)
        return "healthy"
    # Marking is never undone: decide on the record as stored, not on the index's (eventually consistent) image of
    # it. A record reclaimed, being reclaimed, unreferenced or moved by a publish or a release since has an object
    # that may rightly be gone or replaced: nothing is marked, and a record still due is checked again next run.
    current = reclaims.read_blobs(tenant, [blob.sha256]).get(blob.sha256)
    if current is None or current.reclaiming is not None or current.refs == 0 or current.generation != blob.generation:
        raise ClaimLost(f"blob {blob.sha256} changed since it was found due")
    problem = "missing" if found is None else "corrupt"
    _report(blob, problem, found, *_mark_unusable(tenant, blob, now), found_by="scrub")
    _announce(tenant, blob, problem, now, found_by="scrub")
    catalog.record_blob_check(blob, now=now, next_check_at=next_check(now), corrupt=True)
    return problem if blob.corrupt_at is None else f"still_{problem}"


def found_unusable(
    tenant: str, sha256: str, now: int, *, found: tuple[str, int] | None, release: tuple[str, str], found_by: str
) -> None:
    """A read outside the scrub (a manifest served, planned or resolved) found a blob missing or not matching its
    digest: mark exactly as the scrub would, at once. Its releases (the record's, and ``release`` the reader was
    reading, so a record older than the scrub still marks that one) become ``unavailable``, their active
    installations ``needs_attention``; the record gets ``corruptAt`` (kept if set: the scrub's next check then
    reports it ``still_…``, and a later publish of the same bytes knows to replace the object). ``found``: the
    digest and length read, None when the object is missing. A crash midway leaves the rest to the next read or the
    scrub; each mark is conditional, so marking twice changes nothing."""
    records = reclaims.read_blobs(tenant, [sha256])
    blob = records.get(sha256)
    if blob is None:  # no record (reclaimed, or never counted): the release alone is marked
        blob = BlobRecord(sha256=sha256, size=found[1] if found else 0, created_at=now, tenant=tenant)
    blob = blob.model_copy(update={"tenant": tenant, "releases": blob.releases | {f"{release[0]}@{release[1]}"}})
    problem = "missing" if found is None else "corrupt"
    _report(blob, problem, found, *_mark_unusable(tenant, blob, now), found_by=found_by)
    _announce(tenant, blob, problem, now, found_by=found_by)
    if sha256 in records:
        catalog.record_blob_corrupt(tenant, sha256, now)


def _report(
    blob: BlobRecord, problem: str, found: tuple[str, int] | None, releases: int, installations: int, *, found_by: str
) -> None:
    if blob.corrupt_at is None:
        metrics.add_metric(name="BlobsCorrupt", unit=MetricUnit.Count, value=1)
    logger.error(
        "blob failed its integrity check",
        extra={
            "sha256": blob.sha256,
            "problem": problem,
            "foundBy": found_by,
            "expected": {"size": blob.size},
            "found": {"size": found[1]} if found else None,
            "releasesMarked": releases,
            "installationsMarked": installations,
            "firstFound": blob.corrupt_at is None,
        },
    )


def _announce(tenant: str, blob: BlobRecord, problem: str, now: int, *, found_by: str) -> None:
    """``Release Unavailable`` for each release of the blob, once it is marked (``packyard.changes``): the first
    finding and every later one (``still_…``) put the same event, dated by the blob's first finding."""
    marked_at = blob.corrupt_at if blob.corrupt_at is not None else now
    changes.emit(
        *(
            changes.release_unavailable(
                tenant, package, version, blob=blob.sha256, problem=problem, found_by=found_by, marked_at=marked_at
            )
            for package, _, version in (ref.partition("@") for ref in sorted(blob.releases))
        )
    )


def _mark_unusable(tenant: str, blob: BlobRecord, now: int) -> tuple[int, int]:
    """Every release of the blob ``unavailable``, every active installation of one ``needs_attention``; how many
    of each changed now (conditional writes: what was marked already is left alone)."""
    if not blob.releases:
        logger.warning(
            "the corrupt blob records no releases (written before the scrub): none marked unavailable",
            extra={"sha256": blob.sha256},
        )
    releases = installations = 0
    for ref in sorted(blob.releases):
        package, _, version = ref.partition("@")
        releases += catalog.mark_release_unavailable(tenant, package, version, now)
        cursor: str | None = None
        while True:
            holders, cursor = catalog.release_holders(tenant, package, version, limit=HOLDERS_PAGE, cursor=cursor)
            for workspace_id, installation_id in holders:
                installations += workspace.mark_needs_attention(
                    tenant, workspace_id, installation_id, (package, version), now
                )
            if not cursor:
                break
    return releases, installations


def restore_holders(tenant: str, package: str, version: str, now: int) -> int:
    """The reverse of the marking, once a healing publish replaced the release's bad blobs with verified bytes: its
    installations that were set ``needs_attention`` become ``active`` again (conditional, like the marking: one that
    moved on is left alone); how many. Nothing while the release is unavailable (it rotted again meanwhile)."""
    release = catalog.find_release(tenant, package, version)
    if release is None or release.status is ReleaseStatus.UNAVAILABLE:
        return 0
    restored = 0
    cursor: str | None = None
    while True:
        holders, cursor = catalog.release_holders(tenant, package, version, limit=HOLDERS_PAGE, cursor=cursor)
        for workspace_id, installation_id in holders:
            restored += workspace.mark_attended(tenant, workspace_id, installation_id, (package, version), now)
        if not cursor:
            return restored


def _restore_holders_job(job: Job, now: int) -> None:
    restored = restore_holders(job.tenant, job.subject["package"], job.subject["version"], now)
    logger.info("installations of a healed release restored", extra={**job.subject, "installations": restored})


register(JobKind.RESTORE_HOLDERS, _restore_holders_job)
