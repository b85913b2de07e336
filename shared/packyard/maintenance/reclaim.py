"""Reclaiming blobs nothing references any more ("remove if unreferenced").

- **Holders.** An installation holds its active and its previous release (``operations.commit.hold_changes``): a
  holder item per (release, installation) and a ``holdGeneration`` bump on the release, either in the commit
  transaction or outside it (``store.reclaims.hold_now`` before the commit, with ``heldBy``/``heldAt``;
  ``let_go_now`` after it; ``drop_hold`` when it was refused). A holder outside the transaction can outlive its
  hold (the execution died between the commit and the let-go), so "held" is decided holder by holder
  (``holds_release``): a holder is **stale** when its installation (missing, or not holding the release:
  ``operations.commit.held_releases``) does not hold it, its slot is not held by the operation that made it
  (``heldBy``: an operation in flight holds before its commit), and the installation read is not older than the
  hold (``heldAt`` ≤ its version; holders written in the transaction have no ``heldBy``/``heldAt`` and agree with
  their installation). An installation read older than ``heldAt`` whose slot was read free is read once more: the
  holding operation's commit, if it landed, landed while it held the slot, so the second read shows it (still
  older: it never committed and never will: a refused operation whose ``drop_hold`` was lost). With another
  operation in the slot it stays held (that one may have planned the same version and rely on the same holder
  key, a stale run having put its own over it). A stale holder is deleted if unchanged
  (``StaleHoldersDropped``); the first live one ends the walk (pages of ``HOLDERS_PAGE``, each one query and one
  BatchGetItem of the installations and slots).
- **References.** A blob record counts the releases holding it (``refs``; ``generation`` moves with every change).
  A release holds its blobs (archive and manifest) while it is published, and once yanked while anything holds it.
- **Giving blobs back** (``release_blobs``, a cleanup job: the yanked release itself is in the due index from its
  yank, due again whenever a holder lets go). Nobody holds it (no live holder, fenced by the release's
  ``holdGeneration``) → one transaction marks it ``blobsReleased`` and takes one reference off each of its blobs,
  putting a blob whose last reference that was in the due index now. Still held → looked at again later.
- **Reclaiming a blob** (``reclaim_blob``, for a due blob record with ``refs = 0``): (a) claim it at the generation
  read (``reclaiming``; a publish that took a reference meanwhile moved the generation and wins), held for
  ``job_claim_seconds`` (longer than the sweeper's timeout) and due again then; (b) delete the object; (c) one
  transaction deletes the record, conditional on the claim, and credits the tenant's ledger its size: exactly once.
  A crash between the steps leaves the record claimed and due: a later sweep takes the claim again and finishes.
  A record without ``refs`` (older than reference counting) is never reclaimed.
- **Orphans** (``mark_orphans``, from a rejection): an object a publish wrote before it failed, with no record, is
  recorded as an orphan (``refs = 0``, its bytes never counted) and reclaimed the same way, credited nothing; its
  record stays a week as a tombstone whose generation fences a publish that read it before. A publish meeting an
  orphan adopts it (its bytes join the ledger then).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

from aws_lambda_powertools.metrics import MetricUnit

from packyard.config import limits
from packyard.maintenance import jobs
from packyard.observability import logger, metrics
from packyard.publishing import file_pack
from packyard.publishing.models import Release
from packyard.store import blobs, reclaims
from packyard.store.records import BlobRecord, ReleaseHolder

if TYPE_CHECKING:
    from packyard.installations.models import Installation
    from packyard.operations.models import Slot

# a yanked release still held is looked at again this long after (a holder letting go makes it due at once)
HELD_RECHECK_SECONDS = 7 * 24 * 3600
# holders judged per page: one consistent query and one BatchGetItem of their installations and slots (2 keys each)
HOLDERS_PAGE = 25


def is_unreferenced(blob: BlobRecord) -> bool:
    """No release holds it (a record without a count is never unreferenced: it is older than counting)."""
    return blob.refs == 0


def reclaim_blob(blob: BlobRecord, now: int) -> str:
    """Claim, delete the object, then the record with the ledger's credit (see the module's docstring)."""
    if not is_unreferenced(blob) or blob.tenant is None:
        return "referenced"
    until = now + limits().job_claim_seconds
    if not reclaims.claim_blob(blob, now=now, until=until):
        return "kept"  # a publish took a reference (or another sweep holds the claim): nothing to do
    blobs.delete(blobs.blob_key(blob.tenant, blob.sha256))
    # an archive's file pack (and its large files) goes with it; a crash here leaves the claim, and the next sweep
    # deletes again (deleting what is gone succeeds)
    file_pack.delete_file_pack(blob.tenant, blob.sha256)
    claimed = blob.model_copy(update={"reclaiming": blob.generation, "reclaim_until": until})
    if not reclaims.finish_reclaim(claimed, now, tombstone_until=now + limits().orphan_tombstone_seconds):
        return "raced"
    if blob.orphan:
        metrics.add_metric(name="OrphanBlobsReclaimed", unit=MetricUnit.Count, value=1)
        logger.info("orphan blob reclaimed", extra={"sha256": blob.sha256, "size": blob.size})
        return "orphan_reclaimed"
    metrics.add_metric(name="BlobBytesReclaimed", unit=MetricUnit.Bytes, value=blob.size)
    logger.info("blob reclaimed", extra={"sha256": blob.sha256, "size": blob.size})
    return "reclaimed"


def release_blobs(release: Release, now: int) -> str:
    """A yanked release due as a cleanup job: give its blobs back if nothing holds it (see the docstring)."""
    current = reclaims.read_release(release.tenant, release.package, release.version)
    if current is None:
        return "gone"
    if current.yanked_at is None or current.blobs_released_at is not None:
        reclaims.drop_release_due(current)
        return "not_due"
    held = holds_release(current)
    if held == "changed":
        return "raced"  # a holder judged stale changed meanwhile: still due, looked at again next run
    if held == "held":
        reclaims.postpone_release(current, now + HELD_RECHECK_SECONDS)
        return "held"
    shas = [current.archive_sha256, current.manifest_digest]
    if not reclaims.release_blobs(current, reclaims.read_blobs(current.tenant, shas), now):
        return "raced"  # a holder or a publish moved meanwhile: still due, looked at again next run
    logger.info("yanked release gave its blobs back", extra={"package": current.package, "version": current.version})
    return "released"


def holds_release(release: Release) -> Literal["held", "free", "changed"]:
    """Whether a live holder holds ``release`` (see the docstring: stale holders met before it are dropped).
    "changed": a stale holder changed before it could be dropped (held again, or let go)."""
    cursor: str | None = None
    while True:
        holders, cursor = reclaims.list_holders(
            release.tenant, release.package, release.version, limit=HOLDERS_PAGE, cursor=cursor, consistent=True
        )
        for holder, (installation, slot) in zip(holders, reclaims.holder_states(holders), strict=True):
            if _is_live(holder, installation, slot):
                return "held"
            if not reclaims.drop_stale_holder(holder):
                return "changed"
            metrics.add_metric(name="StaleHoldersDropped", unit=MetricUnit.Count, value=1)
            logger.info(
                "stale release holder dropped",
                extra={
                    "package": holder.package,
                    "version": holder.version,
                    "workspace": holder.workspace,
                    "installationId": holder.installation_id,
                    "heldBy": holder.held_by,
                    "heldAt": holder.held_at,
                    "installationVersion": installation.version if installation else None,
                },
            )
        if cursor is None:
            return "free"


def _is_live(holder: ReleaseHolder, installation: Installation | None, slot: Slot | None) -> bool:
    """The holder still holds its release: its operation is in flight, or its installation holds the release (read
    again after the slot when the first read may be older than the hold)."""
    if holder.held_by is not None and slot is not None and slot.operation_id == holder.held_by:
        return True  # the operation that held it before its commit still holds the slot
    if _installation_holds(installation, holder):
        return True
    if holder.held_at is not None and holder.held_at > (installation.version if installation else 0):
        if slot is not None and slot.operation_id is not None:
            return True  # another operation in flight may have planned the same version and rely on this key
        # the installation may have been read before the holding operation's commit; that commit (if any) landed
        # while the operation held the slot, and the slot was just read free, so a read now shows it
        return _installation_holds(reclaims.read_installation(holder), holder)
    return False


def _installation_holds(installation: Installation | None, holder: ReleaseHolder) -> bool:
    # the domain's rule (imported here, on first need: the sweeper loads no operation code otherwise)
    from packyard.operations.commit import held_releases

    return (holder.package, holder.version) in held_releases(installation)


def is_release_job(item: dict[str, Any]) -> bool:
    """A yanked release among the cleanup jobs of the due index (its blobs to give back)."""
    return reclaims.is_release_item(item)


def run_release_job(item: dict[str, Any], now: int) -> str:
    """The cleanup job of a yanked release found in the due index."""
    return release_blobs(reclaims.release_from_due(item), now)


def mark_orphans(tenant: str, candidates: dict[str, int], now: int) -> int:
    """Blob objects (sha256 → size) a failed publish may have written: each with no record becomes an orphan record,
    due for reclamation now (its object, if there is one, is deleted only if still nobody references it). How many
    were marked. No object is looked at here: deleting one that was never written is harmless."""
    return sum(reclaims.mark_orphan(tenant, sha256, size, now) for sha256, size in candidates.items())


# ---- the cleanup-job kinds this module runs (maintenance.jobs) ----------------------------------------------------


def _release_blobs_job(job: jobs.Job, now: int) -> None:
    """RELEASE_BLOBS ``{"package", "version"}``: the same as the yanked release's own due entry (nothing if held)."""
    release = reclaims.read_release(job.tenant, job.subject["package"], job.subject["version"])
    if release is not None:
        release_blobs(release, now)


def _orphan_blob_job(job: jobs.Job, now: int) -> None:
    """ORPHAN_BLOB ``{"sha256"}``: an object with no record becomes an orphan record, reclaimed by the blob sweep."""
    mark_orphans(job.tenant, {job.subject["sha256"]: 0}, now)


jobs.register(jobs.JobKind.RELEASE_BLOBS, _release_blobs_job)
jobs.register(jobs.JobKind.ORPHAN_BLOB, _orphan_blob_job)
