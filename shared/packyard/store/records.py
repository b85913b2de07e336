"""Stored shapes that have no domain model of their own: counters, the usage ledger and blob records.

They carry ``schemaVersion`` like every item and are validated on read (``dynamo.from_item``).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class Counter(BaseModel):
    """Live installations of a workspace (``COUNT#WORKSPACE``) or of a task (``COUNT#TASK#<id>``)."""

    model_config = ConfigDict(frozen=True)

    n: int = Field(default=0, ge=0)


class UsageLedger(BaseModel):
    """The tenant's ``usedBytes``: retained blobs plus live reservations."""

    model_config = ConfigDict(frozen=True, populate_by_name=True)

    used_bytes: int = Field(default=0, ge=0, alias="usedBytes")


class BlobRecord(BaseModel):
    """One content-addressed blob the tenant holds."""

    model_config = ConfigDict(frozen=True, populate_by_name=True)

    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    size: int = Field(ge=0)
    created_at: int = Field(alias="createdAt")
