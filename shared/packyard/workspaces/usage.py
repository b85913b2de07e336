"""Usage against the quotas: a workspace's installations and the bytes of the releases they reference (its 2 GiB),
and a tenant's stored bytes (retained blobs plus live upload reservations, its 10 GiB)."""

from __future__ import annotations

from dataclasses import dataclass

from packyard.config import limits
from packyard.installations.models import check_workspace_id
from packyard.store import counters


@dataclass(frozen=True)
class WorkspaceUsage:
    workspace: str
    installations: int
    installation_limit: int
    used_bytes: int
    limit_bytes: int


@dataclass(frozen=True)
class TenantUsage:
    used_bytes: int
    limit_bytes: int


def workspace_usage(tenant: str, workspace_id: str) -> WorkspaceUsage:
    check_workspace_id(workspace_id)
    installations, used = counters.read_usage(tenant, workspace_id)
    bounds = limits()
    return WorkspaceUsage(
        workspace=workspace_id,
        installations=installations,
        installation_limit=bounds.max_installations_per_workspace,
        used_bytes=used,
        limit_bytes=bounds.workspace_quota_bytes,
    )


def tenant_usage(tenant: str) -> TenantUsage:
    return TenantUsage(used_bytes=counters.tenant_used_bytes(tenant), limit_bytes=limits().tenant_quota_bytes)
