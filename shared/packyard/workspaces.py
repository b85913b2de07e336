"""Reading a workspace: its installations, one installation, and what a runtime loads (``resolved``)."""

from __future__ import annotations

from typing import Any

from packyard import clock
from packyard.config import limits
from packyard.errors import NotFound
from packyard.installations import Installation, InstallationStatus, check_installation_id, check_workspace_id
from packyard.releases import MAX_PAGE, decode_cursor, encode_cursor
from packyard.store import blobs, workspace


def list_installations(
    tenant: str, workspace_id: str, limit: int, cursor: str | None
) -> tuple[list[Installation], str | None]:
    check_workspace_id(workspace_id)
    items, last = workspace.list_installations(
        tenant, workspace_id, limit=min(limit, MAX_PAGE), cursor=decode_cursor(cursor, tenant)
    )
    return items, encode_cursor(last)


def get_installation(tenant: str, workspace_id: str, installation_id: str) -> Installation:
    check_workspace_id(workspace_id)
    check_installation_id(installation_id)
    found = workspace.get_installation(tenant, workspace_id, installation_id)
    if found is None:
        raise NotFound(f"installation {installation_id} not found in workspace {workspace_id}")
    return found


def resolved(tenant: str, workspace_id: str) -> dict[str, Any]:
    """Active installations with the digests to verify, their grants and short-lived download URLs."""
    check_workspace_id(workspace_id)
    ttl = limits().download_url_ttl_seconds
    items: list[dict[str, Any]] = []
    cursor = None
    while True:
        page, cursor = workspace.list_installations(tenant, workspace_id, limit=MAX_PAGE, cursor=cursor)
        for inst in page:
            if inst.status is not InstallationStatus.ACTIVE or inst.release is None:
                continue
            release = inst.release
            items.append(
                {
                    "installationId": inst.installation_id,
                    "instanceId": inst.instance_id,
                    "version": inst.version,
                    "package": release.package,
                    "release": release.version,
                    "manifestDigest": release.manifest_digest,
                    "archive": {
                        "sha256": release.archive_sha256,
                        "size": release.archive_size,
                        "url": blobs.presigned_get(blobs.blob_key(tenant, release.archive_sha256), ttl),
                    },
                    "manifestUrl": blobs.presigned_get(blobs.blob_key(tenant, release.manifest_digest), ttl),
                    "scope": inst.scope.model_dump(exclude_none=True),
                    "grants": [g.model_dump() for g in inst.grants],
                    "grantGeneration": inst.grant_generation,
                    "config": inst.config,
                }
            )
        if not cursor:
            break
    return {"workspace": workspace_id, "items": items, "expiresAt": clock.now() + ttl}
