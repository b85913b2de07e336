"""API response models only the read routes answer with: a page of installations, ``resolved`` (what a runtime
loads) and usage. Apart from ``workspace_responses`` so that admission, which answers with installations and
operations too, does not build these classes at import (issue 11, cold start).

Like every view: each renders, with ``model_dump(by_alias=True, mode="json")``, exactly the JSON of its route;
constructors only reshape what they are given (download URLs and expiry times come in as arguments).
"""

from __future__ import annotations

from typing import Any, Self

from pydantic import Field

from packyard.api.base import ApiModel, ReleaseArchive
from packyard.api.times import Timestamp
from packyard.api.workspace_responses import GrantView, InstallationView

# Domain types
from packyard.installations.models import Installation
from packyard.installations.scopes import ScopeKind
from packyard.workspaces.models import Resolved
from packyard.workspaces.usage import TenantUsage, WorkspaceUsage

# ---- workspaces: installations --------------------------------------------------------------------------------------


class InstallationPage(ApiModel):
    """``GET /v1/workspaces/{ws}/installations``."""

    keep_null = frozenset({"nextCursor"})
    items: list[InstallationView]
    next_cursor: str | None = Field(alias="nextCursor", description="pass as ?cursor= for the next page; null at end")

    @classmethod
    def of(cls, installations: list[Installation], next_cursor: str | None) -> Self:
        return cls(items=[InstallationView.of(i) for i in installations], next_cursor=next_cursor)


# ---- workspaces: what a runtime loads -------------------------------------------------------------------------------


class ResolvedScopeView(ApiModel):
    """Unlike an installation's scope, ``id`` is left out (not null) for the workspace scope."""

    kind: ScopeKind
    id: str | None = Field(None, description="the task, session or repository; absent for the workspace scope")


class ResolvedArchive(ReleaseArchive):
    url: str = Field(description="presigned GET URL of the archive")


class ResolvedInstallationView(ApiModel):
    installation_id: str = Field(alias="installationId")
    instance_id: str = Field(alias="instanceId")
    version: int = Field(description="the installation version")
    package: str
    release: str = Field(description="the installed version of the package")
    manifest_digest: str = Field(alias="manifestDigest", description="verify the manifest against this")
    archive: ResolvedArchive
    manifest_url: str = Field(alias="manifestUrl", description="presigned GET URL of the manifest")
    scope: ResolvedScopeView
    grants: list[GrantView]
    grant_generation: int = Field(alias="grantGeneration")
    config: dict[str, Any] = Field(description="free-form configuration given at install")
    attestation: str = Field(
        description="GET this for the release's DSSE envelope (404 for a release published before signing); verify "
        "it offline against the pinned GET /v1/signing-keys"
    )

    @classmethod
    def of(cls, inst: Installation, archive_url: str, manifest_url: str) -> Self:
        release = inst.release
        if release is None:
            raise ValueError(f"installation {inst.installation_id} has no release to resolve")
        return cls(
            installation_id=inst.installation_id,
            instance_id=inst.instance_id,
            version=inst.version,
            package=release.package,
            release=release.version,
            manifest_digest=release.manifest_digest,
            archive=ResolvedArchive(sha256=release.archive_sha256, size=release.archive_size, url=archive_url),
            manifest_url=manifest_url,
            scope=ResolvedScopeView(kind=inst.scope.kind, id=inst.scope.id),
            grants=[GrantView.of(g) for g in inst.grants],
            grant_generation=inst.grant_generation,
            config=inst.config,
            # getReleaseAttestation's path (signing_responses.attestation_path; not imported: the release side's
            # models stay out of this function's cold start)
            attestation=f"/v1/packages/{release.package}/versions/{release.version}/attestation",
        )


class ResolvedView(ApiModel):
    """``GET /v1/workspaces/{ws}/resolved``: one page of the active installations, their digests, grants and
    download URLs. A page may hold fewer items than ``limit`` (even none) and still have a next one."""

    keep_null = frozenset({"nextCursor"})
    workspace: str
    items: list[ResolvedInstallationView]
    expires_at: Timestamp = Field(alias="expiresAt", description="when the URLs stop working, RFC 3339 UTC")
    next_cursor: str | None = Field(
        None, alias="nextCursor", description="pass as ?cursor= for the next page; null at end"
    )

    @classmethod
    def of_resolved(cls, resolved: Resolved) -> Self:
        items = [
            ResolvedInstallationView.of(entry.installation, entry.archive_url, entry.manifest_url)
            for entry in resolved.entries
        ]
        return cls(
            workspace=resolved.workspace, items=items, expires_at=resolved.expires_at, next_cursor=resolved.next_cursor
        )

    @classmethod
    def of(
        cls, workspace: str, items: list[ResolvedInstallationView], expires_at: int, next_cursor: str | None = None
    ) -> Self:
        return cls(workspace=workspace, items=items, expires_at=expires_at, next_cursor=next_cursor)


# ---- usage ----------------------------------------------------------------------------------------------------------


class WorkspaceUsageView(ApiModel):
    """``GET /v1/workspaces/{ws}/usage``: the workspace against its limits."""

    workspace: str
    installations: int = Field(description="live installations (archived ones excluded)")
    installation_limit: int = Field(alias="installationLimit")
    used_bytes: int = Field(alias="usedBytes", description="bytes of the releases its installations reference")
    limit_bytes: int = Field(alias="limitBytes", description="the workspace quota; beyond it: quota_exceeded")

    @classmethod
    def of(cls, usage: WorkspaceUsage) -> Self:
        return cls(
            workspace=usage.workspace,
            installations=usage.installations,
            installation_limit=usage.installation_limit,
            used_bytes=usage.used_bytes,
            limit_bytes=usage.limit_bytes,
        )


class TenantUsageView(ApiModel):
    """``GET /v1/usage``: the tenant's stored bytes against its quota."""

    used_bytes: int = Field(alias="usedBytes", description="retained blobs plus live upload reservations")
    limit_bytes: int = Field(alias="limitBytes", description="the tenant quota; beyond it: quota_exceeded")

    @classmethod
    def of(cls, usage: TenantUsage) -> Self:
        return cls(used_bytes=usage.used_bytes, limit_bytes=usage.limit_bytes)
