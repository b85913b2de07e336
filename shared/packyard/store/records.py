"""Stored shapes that have no domain model of their own: counters, the usage ledger and blob records.

They carry ``schemaVersion`` like every item and are validated on read (``dynamo.from_item``).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class Counter(BaseModel):
    """Live installations of a workspace (``COUNT#WORKSPACE``) or of a task (``COUNT#TASK#<id>``); the workspace's
    also carries the bytes of the releases its installations reference (``usedBytes``, its quota)."""

    model_config = ConfigDict(frozen=True, populate_by_name=True)

    n: int = Field(default=0, ge=0)
    used_bytes: int = Field(default=0, ge=0, alias="usedBytes")


class UsageLedger(BaseModel):
    """The tenant's ``usedBytes``: retained blobs plus live reservations."""

    model_config = ConfigDict(frozen=True, populate_by_name=True, defer_build=True)

    used_bytes: int = Field(default=0, ge=0, alias="usedBytes")


class BlobRecord(BaseModel):
    """One content-addressed blob the tenant holds."""

    model_config = ConfigDict(frozen=True, populate_by_name=True, defer_build=True)

    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    size: int = Field(ge=0)
    created_at: int = Field(alias="createdAt")
    # from the key (catalog.blob_from_due); records written since the scrub also store it
    tenant: str | None = None
    # "package@version" of every release whose manifest or archive this blob is: a string set, ADDed by each
    # publish (records older than the integrity scrub have none). Written by the store as a set, never dumped.
    releases: frozenset[str] = Field(default_factory=frozenset, exclude=True)
    # the integrity scrub: when the stored object was last re-hashed, and when it was found missing or corrupt
    checked_at: int | None = Field(default=None, alias="checkedAt")
    corrupt_at: int | None = Field(default=None, alias="corruptAt")
    # the due time this record was read at (from the due index; the fence of a sweep's update), never stored
    due_at: str | None = Field(default=None, exclude=True)
    # reclamation (maintenance/reclaim.py): ``refs`` = releases holding the blob (None on records written before
    # reference counting: unknown, so never reclaimed); ``generation`` is bumped by every change of ``refs``, and a
    # reclaim claims the record at the generation it decided on (``reclaiming``, held until ``reclaimUntil``).
    # ``orphan``: an object a crashed, rejected publish left behind; its bytes were never in the usage ledger.
    refs: int | None = Field(default=None, ge=0)
    generation: int = Field(default=0, ge=0)
    reclaiming: int | None = None
    reclaim_until: int | None = Field(default=None, alias="reclaimUntil")
    orphan: bool = False


class ReleaseHolder(BaseModel):
    """An installation holding a release (its active or previous one): while any does, the release keeps its blobs."""

    model_config = ConfigDict(frozen=True, populate_by_name=True, defer_build=True)

    tenant: str
    package: str
    version: str
    workspace: str
    installation_id: str = Field(alias="installationId")
    # a hold established before the commit (store/reclaims.hold_now): the operation that established it and the
    # installation version it planned; holders written in the commit transaction (before these) have neither
    held_by: str | None = Field(None, alias="heldBy")
    held_at: int | None = Field(None, alias="heldAt")
