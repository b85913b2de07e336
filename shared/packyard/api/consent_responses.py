"""API response models of consent: what waits for approval, the decision recorded, and the consent an operation
asked (shown on operations, installations and previews). A task token never appears in any of them."""

from __future__ import annotations

from typing import Literal, Self

from pydantic import Field

from packyard.api.base import ApiModel
from packyard.api.times import Timestamp
from packyard.consent.models import Approval, ConsentWait
from packyard.operations.models import AskedPermission, Consent


class AskedPermissionView(ApiModel):
    kind: str
    resource: str = Field(description='what it covers; "*" for everything')

    @classmethod
    def of(cls, asked: AskedPermission) -> Self:
        return cls(kind=asked.kind, resource=asked.resource)


class ConsentView(ApiModel):
    """The consent an owner-origin operation asked: the exact plan (digest), the permissions it adds, and once
    decided, the decision."""

    permissions: list[AskedPermissionView]
    plan_digest: str = Field(alias="planDigest", description="approve or reject exactly this plan")
    requested_at: Timestamp | None = Field(None, alias="requestedAt", description="RFC 3339 UTC")
    deadline: Timestamp | None = Field(None, description="settles refused consent_expired after this, RFC 3339 UTC")
    decision: Literal["approve", "reject"] | None = None
    decided_by: str | None = Field(None, alias="decidedBy", description="the subject who decided")
    decided_at: Timestamp | None = Field(None, alias="decidedAt", description="RFC 3339 UTC")

    @classmethod
    def of(cls, consent: Consent) -> Self:
        return cls(
            permissions=[AskedPermissionView.of(p) for p in consent.permissions],
            plan_digest=consent.plan_digest,
            requested_at=consent.requested_at,
            deadline=consent.deadline,
            decision=consent.decision,
            decided_by=consent.decided_by,
            decided_at=consent.decided_at,
        )


class ConsentWaitView(ApiModel):
    """An operation waiting for an owner's decision (``GET …/approvals`` items; an installation's
    ``pendingConsent``): its release status reads ``pending_permission`` until decided."""

    operation_id: str = Field(alias="operationId")
    installation_id: str = Field(alias="installationId")
    package: str
    version: str
    status: Literal["pending_permission"] = "pending_permission"
    permissions: list[AskedPermissionView] = Field(description="what the plan adds")
    plan_digest: str = Field(alias="planDigest", description="send it with the decision")
    requested_by: str | None = Field(None, alias="requestedBy", description="the subject who asked")
    since: Timestamp = Field(description="when it started waiting, RFC 3339 UTC")
    deadline: Timestamp = Field(description="settles refused consent_expired after this, RFC 3339 UTC")

    @classmethod
    def of(cls, wait: ConsentWait) -> Self:
        return cls(
            operation_id=wait.operation_id,
            installation_id=wait.installation_id,
            package=wait.package,
            version=wait.version,
            permissions=[AskedPermissionView.of(p) for p in wait.permissions],
            plan_digest=wait.plan_digest,
            requested_by=wait.requested_by,
            since=wait.since,
            deadline=wait.deadline,
        )


class ConsentWaitPage(ApiModel):
    """``GET /v1/workspaces/{ws}/approvals``: what waits for a decision."""

    keep_null = frozenset({"nextCursor"})
    items: list[ConsentWaitView]
    next_cursor: str | None = Field(alias="nextCursor", description="pass as ?cursor= for the next page; null at end")

    @classmethod
    def of(cls, waits: list[ConsentWait], next_cursor: str | None) -> Self:
        return cls(items=[ConsentWaitView.of(w) for w in waits], next_cursor=next_cursor)


class ApprovalLinks(ApiModel):
    operation: str = Field(description="the operation decided on: poll it to see it commit or settle")


class ApprovalView(ApiModel):
    """``POST …/installations/{id}/approvals``: the decision recorded (a replay of the key answers the same)."""

    approval_id: str = Field(alias="approvalId")
    operation_id: str = Field(alias="operationId")
    installation_id: str = Field(alias="installationId")
    decision: Literal["approve", "reject"]
    plan_digest: str = Field(alias="planDigest")
    decided_by: str = Field(alias="decidedBy", description="the subject who decided")
    decided_at: Timestamp = Field(alias="decidedAt", description="RFC 3339 UTC")
    links: ApprovalLinks

    @classmethod
    def of(cls, approval: Approval, workspace: str) -> Self:
        return cls(
            approval_id=approval.approval_id,
            operation_id=approval.operation_id,
            installation_id=approval.installation_id,
            decision=approval.decision,
            plan_digest=approval.plan_digest,
            decided_by=approval.decided_by,
            decided_at=approval.decided_at,
            links=ApprovalLinks(operation=f"/v1/workspaces/{workspace}/operations/{approval.operation_id}"),
        )
