"""Reading a workspace: its installations, one installation, an operation, and what a runtime loads (``resolved``)."""

from __future__ import annotations

from packyard import clock
from packyard.config import limits
from packyard.consent.models import ConsentWait
from packyard.errors import NotFound
from packyard.installations.models import (
    Installation,
    InstallationStatus,
    check_installation_id,
    check_workspace_id,
)
from packyard.operations.models import Operation
from packyard.publishing import integrity
from packyard.store import blobs, consent, workspace
from packyard.workspaces.models import Resolved, ResolvedEntry

MAX_PAGE = 100


def list_installations(
    tenant: str, workspace_id: str, limit: int, cursor: str | None
) -> tuple[list[Installation], str | None]:
    check_workspace_id(workspace_id)
    return workspace.list_installations(tenant, workspace_id, limit=min(limit, MAX_PAGE), cursor=cursor)


def get_installation(tenant: str, workspace_id: str, installation_id: str) -> tuple[Installation, ConsentWait | None]:
    """The installation, and the operation of it waiting for consent if one does (one read)."""
    check_workspace_id(workspace_id)
    check_installation_id(installation_id)
    found, waiting = consent.read_installation(tenant, workspace_id, installation_id)
    if found is None:
        raise NotFound(f"installation {installation_id} not found in workspace {workspace_id}")
    return found, waiting


def get_operation(tenant: str, workspace_id: str, operation_id: str) -> Operation:
    op = workspace.get_operation(tenant, check_workspace_id(workspace_id), operation_id)
    if op is None:
        raise NotFound(f"operation {operation_id} not found")
    return op


def resolved(tenant: str, workspace_id: str, limit: int = MAX_PAGE, cursor: str | None = None) -> Resolved:
    """One page of the active installations with the digests to verify, their grants and short-lived download URLs.
    A page reads at most ``limit`` installations (and stops earlier at ``store.pages.PAGE_BYTES``, so its answer
    stays under Lambda's 6 MB: docs/architecture.md, "What one request may copy"); it may hold fewer active ones,
    even none, with a cursor to follow. Each manifest is hash-checked before its URL is handed out (once per
    digest): one missing or altered in storage makes its release unavailable and its installations
    ``needs_attention`` at once, so they are left out, as the scrub would leave them out."""
    check_workspace_id(workspace_id)
    ttl = limits().download_url_ttl_seconds
    size = min(limit, MAX_PAGE)
    entries: list[ResolvedEntry] = []
    intact: dict[str, bool] = {}
    page, next_cursor = workspace.list_installations(tenant, workspace_id, limit=size, cursor=cursor)
    for inst in page:
        if inst.status is not InstallationStatus.ACTIVE or inst.release is None:
            continue
        release = inst.release
        if release.manifest_digest not in intact:
            intact[release.manifest_digest] = integrity.manifest_intact(tenant, release, found_by="resolved")
        if not intact[release.manifest_digest]:
            continue
        entries.append(
            ResolvedEntry(
                installation=inst,
                archive_url=blobs.presigned_get(blobs.blob_key(tenant, release.archive_sha256), ttl),
                manifest_url=blobs.presigned_get(blobs.blob_key(tenant, release.manifest_digest), ttl),
            )
        )
    return Resolved(workspace=workspace_id, entries=entries, expires_at=clock.now() + ttl, next_cursor=next_cursor)
