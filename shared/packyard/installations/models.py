"""Installations: what a workspace has installed, where it applies (its scope) and the identifiers' rules.

An installation is ``(tenant, workspace, installationId)``. Its ``version`` is bumped by every committed change and
is the optimistic-concurrency token callers see as the ETag. Nothing here does I/O.
"""

from __future__ import annotations

import hashlib
import json
import re
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from packyard.errors import InvalidRequest
from packyard.installations.grants import Grant
from packyard.installations.scopes import Scope

INSTALLATION_ID = re.compile(r"[a-z0-9](?:[a-z0-9._-]{0,62}[a-z0-9])?", re.ASCII)
WORKSPACE_ID = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9._-]{0,126}[A-Za-z0-9])?", re.ASCII)


def check_installation_id(value: str) -> str:
    if not INSTALLATION_ID.fullmatch(value):
        raise InvalidRequest(f"installation id {value!r} must be 1-64 chars of a-z, 0-9, '.', '_', '-'")
    return value


def check_workspace_id(value: str) -> str:
    if not WORKSPACE_ID.fullmatch(value):
        raise InvalidRequest(f"workspace id {value!r} must be 1-128 chars of letters, digits, '.', '_', '-'")
    return value


class InstallationStatus(StrEnum):
    INSTALLING = "installing"
    ACTIVE = "active"
    NEEDS_ATTENTION = "needs_attention"
    DISABLED = "disabled"
    ARCHIVED = "archived"
    REMOVED = "removed"
    ERROR = "error"


class Creation(StrEnum):
    FRESH = "fresh"
    REPLACEMENT = "replacement"
    REMINTED = "reminted"


class ReleaseRef(BaseModel):
    """The release an installation points at, pinned by digest so a runtime can verify what it loads."""

    model_config = ConfigDict(populate_by_name=True, frozen=True)

    package: str
    version: str
    manifest_digest: str = Field(alias="manifestDigest")
    archive_sha256: str = Field(alias="archiveSha256")
    archive_size: int = Field(alias="archiveSize")


class Installation(BaseModel):
    model_config = ConfigDict(populate_by_name=True, frozen=True)

    tenant: str
    workspace: str
    installation_id: str = Field(alias="installationId")
    instance_id: str = Field(alias="instanceId")
    version: int = Field(ge=1)
    status: InstallationStatus
    creation: Creation
    package: str
    release: ReleaseRef | None = None
    previous: ReleaseRef | None = None
    scope: Scope
    grants: list[Grant] = Field(default_factory=list)
    grant_generation: int = Field(default=0, alias="grantGeneration")
    config: dict[str, Any] = Field(default_factory=dict)
    last_operation_id: str = Field(alias="lastOperationId")
    updated_at: int = Field(alias="updatedAt")

    @property
    def is_live(self) -> bool:
        return self.status is not InstallationStatus.REMOVED

    @property
    def holds_slot(self) -> bool:
        """Counts towards the workspace's and its task's installation limits (archived and removed ones do not)."""
        return self.status not in (InstallationStatus.REMOVED, InstallationStatus.ARCHIVED)

    def same_content(self, other: Installation) -> bool:
        """Equal in everything a plan fixes, including which operation wrote it (an exact replay of a commit)."""
        return (
            plan_digest(self) == plan_digest(other)
            and self.last_operation_id == other.last_operation_id
            and self.instance_id == other.instance_id
        )


def etag(version: int) -> str:
    return f'"{version}"'


def plan_digest(installation: Installation) -> str:
    """Digest of what a plan decides, independent of which operation carries it out (so a preview's digest
    matches the admitted operation's plan when nothing changed in between)."""
    fixed = installation.model_dump(
        by_alias=True, mode="json", exclude={"updated_at", "last_operation_id", "instance_id"}
    )
    return hashlib.sha256(json.dumps(fixed, sort_keys=True, separators=(",", ":")).encode()).hexdigest()
