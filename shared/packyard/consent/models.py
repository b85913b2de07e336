"""Consent records: what waits for an owner's decision, and each decision taken (an approval, keyed by its
Idempotency-Key). Records written while the install workflow was Standard may carry the task token its paused
execution waited on; nothing uses it any more (a decision starts a new execution)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from packyard.operations.models import AskedPermission, Decision


class ConsentWait(BaseModel):
    """``CONSENT#<installationId>``: the installation's operation waiting for approval. At most one per
    installation (one operation in flight). ``task_token`` (old records only) never leaves the service."""

    model_config = ConfigDict(populate_by_name=True, frozen=True)

    operation_id: str = Field(alias="operationId")
    installation_id: str = Field(alias="installationId")
    task_token: str | None = Field(default=None, alias="taskToken", repr=False)
    plan_digest: str = Field(alias="planDigest")
    package: str
    version: str
    permissions: list[AskedPermission]
    requested_by: str | None = Field(default=None, alias="requestedBy")
    since: int
    deadline: int


class Approval(BaseModel):
    """``APPROVAL#<approvalId>``: one decision on one waiting operation, recorded once per Idempotency-Key."""

    model_config = ConfigDict(populate_by_name=True, frozen=True, defer_build=True)

    approval_id: str = Field(alias="approvalId")
    operation_id: str = Field(alias="operationId")
    installation_id: str = Field(alias="installationId")
    decision: Decision
    plan_digest: str = Field(alias="planDigest")
    request_digest: str = Field(alias="requestDigest")
    decided_by: str = Field(alias="decidedBy")
    decided_at: int = Field(alias="decidedAt")
    operation_version: int = Field(alias="operationVersion", description="the operation's version after the decision")
    task_token: str | None = Field(default=None, alias="taskToken", repr=False)
