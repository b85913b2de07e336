"""API response models of the workspace side: installations, operations and previews (what admission answers
with too); the views only the read routes answer with (pages, ``resolved``, usage) are in ``query_responses``.

One model per route, separate from the domain models and from what the store keeps. Each renders, with
``model_dump(by_alias=True, mode="json")``, exactly the JSON the handlers answered with when the bodies were hand-built
dicts. Build them with ``View.of(domain, ...)``: constructors only reshape what they are given (download URLs and
expiry times come in as arguments); they do no I/O.
"""

from __future__ import annotations

from typing import Any, Literal, Self

from pydantic import Field

from packyard.api.base import ApiModel
from packyard.api.consent_responses import AskedPermissionView, ConsentView, ConsentWaitView
from packyard.api.times import Timestamp
from packyard.consent.models import ConsentWait

# Domain types
from packyard.installations.grants import Grant, PermissionKind
from packyard.installations.models import (
    Creation,
    Installation,
    InstallationStatus,
    ReleaseRef,
    etag,
    plan_digest,
)
from packyard.installations.scopes import Scope, ScopeKind
from packyard.operations.models import Intent, Operation, OperationKind, OperationState, Outcome, Preview

Origin = Literal["owner", "workflow"]
ORIGIN = "who asked: the workspace owner, or a workflow acting for it (a workflow cannot widen grants)"


# ---- workspaces: installations --------------------------------------------------------------------------------------


class ReleaseRefView(ApiModel):
    """The release an installation points at, pinned by digest so a runtime can verify what it loads."""

    package: str
    version: str
    manifest_digest: str = Field(alias="manifestDigest", description="sha256 hex of the canonical manifest")
    archive_sha256: str = Field(alias="archiveSha256", description="sha256 hex of the archive")
    archive_size: int = Field(alias="archiveSize", description="archive size in bytes")

    @classmethod
    def of(cls, ref: ReleaseRef) -> Self:
        return cls(
            package=ref.package,
            version=ref.version,
            manifest_digest=ref.manifest_digest,
            archive_sha256=ref.archive_sha256,
            archive_size=ref.archive_size,
        )


class ScopeView(ApiModel):
    """Where an installation applies; a workspace scope answers ``"id": null``."""

    keep_null = frozenset({"id"})
    kind: ScopeKind
    id: str | None = Field(description="the task, session or repository; null for the workspace scope")

    @classmethod
    def of(cls, scope: Scope) -> Self:
        return cls(kind=scope.kind, id=scope.id)


class GrantView(ApiModel):
    """A permission granted to an installation."""

    kind: PermissionKind
    resource: str = Field(description='what the grant covers; "*" for everything')
    origin: Origin = Field(description="who granted it")
    ceiling: ScopeKind = Field(description="the widest scope it was approved for; promoting above it re-asks consent")

    @classmethod
    def of(cls, grant: Grant) -> Self:
        return cls(kind=grant.kind, resource=grant.resource, origin=grant.origin, ceiling=grant.ceiling)


class InstallationView(ApiModel):
    """``GET /v1/workspaces/{ws}/installations/{id}``, and the items of the installations list."""

    keep_null = frozenset({"release", "previous"})
    workspace: str
    installation_id: str = Field(alias="installationId")
    instance_id: str = Field(alias="instanceId", description="changes when the installation is created afresh")
    version: int = Field(ge=1, description="bumped by every committed change; the ETag")
    status: InstallationStatus
    creation: Creation = Field(description="how the current instance came to be")
    package: str
    release: ReleaseRefView | None = Field(description="what is installed; null once removed")
    previous: ReleaseRefView | None = Field(description="what was installed before (the rollback target), or null")
    scope: ScopeView
    grants: list[GrantView]
    grant_generation: int = Field(alias="grantGeneration", description="bumped whenever the grants change")
    config: dict[str, Any] = Field(description="free-form configuration given at install")
    last_operation_id: str = Field(alias="lastOperationId", description="the operation that wrote this version")
    updated_at: Timestamp = Field(alias="updatedAt", description="RFC 3339 UTC")
    etag: str = Field(description='the version as an entity tag, e.g. "3"; send it as If-Match to change it')
    pending_consent: ConsentWaitView | None = Field(
        None, alias="pendingConsent", description="an operation of it waiting for approval (pending_permission)"
    )

    @classmethod
    def of(cls, inst: Installation, pending: ConsentWait | None = None) -> Self:
        return cls(
            workspace=inst.workspace,
            installation_id=inst.installation_id,
            instance_id=inst.instance_id,
            version=inst.version,
            status=inst.status,
            creation=inst.creation,
            package=inst.package,
            release=ReleaseRefView.of(inst.release) if inst.release is not None else None,
            previous=ReleaseRefView.of(inst.previous) if inst.previous is not None else None,
            scope=ScopeView.of(inst.scope),
            grants=[GrantView.of(g) for g in inst.grants],
            grant_generation=inst.grant_generation,
            config=inst.config,
            last_operation_id=inst.last_operation_id,
            updated_at=inst.updated_at,
            etag=etag(inst.version),
            pending_consent=ConsentWaitView.of(pending) if pending is not None else None,
        )


# ---- workspaces: operations -----------------------------------------------------------------------------------------


class TargetView(ApiModel):
    package: str
    version: str


class OutcomeView(ApiModel):
    result: Literal["succeeded", "refused", "unconfirmed"]
    status: int | None = Field(None, description="the HTTP status a refusal maps to")
    code: str | None = Field(None, description="stable code, e.g. not_installed")
    detail: str | None = None

    @classmethod
    def of(cls, outcome: Outcome) -> Self:
        return cls(result=outcome.result, status=outcome.status, code=outcome.code, detail=outcome.detail)


class OperationLinks(ApiModel):
    self_link: str = Field(alias="self", description="poll this operation here")


class OperationView(ApiModel):
    """An installation operation: what ``PUT``/``DELETE …/installations/{id}`` and ``POST …/rollback`` admit (202
    while in flight, 200 once settled) and ``GET /v1/workspaces/{ws}/operations/{opId}`` reads."""

    operation_id: str = Field(alias="operationId")
    workspace: str
    installation_id: str = Field(alias="installationId")
    kind: OperationKind = Field(description="derived from the request and the installation's state")
    state: OperationState
    intent: Intent
    origin: Origin = Field(description=ORIGIN)
    attempt: int = Field(description="restarts of the workflow after a lost lease")
    created_at: Timestamp = Field(alias="createdAt", description="RFC 3339 UTC")
    updated_at: Timestamp = Field(alias="updatedAt", description="RFC 3339 UTC")
    release: TargetView | None = Field(None, description="the release it installs; absent for an uninstall")
    installation_version: int | None = Field(
        None, alias="installationVersion", description="the installation version its plan writes, once planned"
    )
    outcome: OutcomeView | None = Field(None, description="how it settled")
    note: str | None = Field(None, description="e.g. not_installed")
    phase: str | None = Field(None, description="where a pending operation waits")
    error_code: str | None = Field(None, alias="errorCode", description="the last error's code")
    settled_at: Timestamp | None = Field(None, alias="settledAt", description="RFC 3339 UTC")
    superseded_by: str | None = Field(None, alias="supersededBy", description="the operation that took its slot")
    supersedes: str | None = Field(None, description="the operation whose slot it took")
    requested_by: str | None = Field(None, alias="requestedBy", description="the subject who asked for it")
    consent: ConsentView | None = Field(None, description="the approval it asked for, and the decision")
    links: OperationLinks

    @classmethod
    def of(cls, op: Operation) -> Self:
        return cls(
            operation_id=op.operation_id,
            workspace=op.workspace,
            installation_id=op.installation_id,
            kind=op.kind,
            state=op.state,
            intent=op.intent,
            origin=op.origin,
            attempt=op.attempt,
            created_at=op.created_at,
            updated_at=op.updated_at,
            release=TargetView(package=op.target.package, version=op.target.version) if op.target else None,
            installation_version=op.plan.version if op.plan else None,
            outcome=OutcomeView.of(op.outcome) if op.outcome else None,
            note=op.note,
            phase=op.phase,
            error_code=op.error_code,
            settled_at=op.settled_at,
            superseded_by=op.superseded_by,
            supersedes=op.supersedes,
            requested_by=op.requested_by,
            consent=ConsentView.of(op.consent) if op.consent else None,
            links=OperationLinks(self_link=f"/v1/workspaces/{op.workspace}/operations/{op.operation_id}"),
        )


class PreviewView(ApiModel):
    """``POST …/installations/{id}/preview``: the plan an operation would commit now, or why there is none."""

    keep_null = frozenset({"plan", "planDigest"})
    kind: OperationKind
    note: str | None = Field(None, description="why nothing would be planned (it would settle at admission)")
    plan: InstallationView | None = Field(description="the installation it would write; null when none")
    plan_digest: str | None = Field(
        alias="planDigest", description="send as planDigest to admit exactly this plan; null when none"
    )
    consent: list[AskedPermissionView] | None = Field(
        None, description="permissions an owner would be asked to approve before it commits"
    )

    @classmethod
    def of_preview(cls, preview: Preview) -> Self:
        plan = InstallationView.of(preview.plan) if preview.plan is not None else None
        asked = [AskedPermissionView(kind=k, resource=r) for k, r in preview.consent] or None
        return cls(kind=preview.kind, note=preview.note, plan=plan, plan_digest=preview.plan_digest, consent=asked)

    @classmethod
    def of(cls, op: Operation, plan: Installation | None) -> Self:
        """``plan`` None: the operation settles at admission (e.g. uninstalling what is not installed)."""
        if plan is None:
            return cls(kind=op.kind, note=op.note, plan=None, plan_digest=None)
        return cls(kind=op.kind, plan=InstallationView.of(plan), plan_digest=plan_digest(plan))
