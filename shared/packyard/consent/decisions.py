"""Deciding consent: an owner with the approve scope approves or rejects the exact plan an operation waits with.

Read, decide, write: one read of the installation's consent wait and of this key's approval, then the operation
(fenced by version, only while it waits), then one transaction recording the decision (the operation back to
planned with it, no runner, its lease renewed), so exactly one decision wins however many arrive at once. Only then
is a new execution of the install workflow started: its Plan claims the operation and replays the recorded plan
(approve: commit; reject: it settles refused ``consent_rejected``). A replay of the key answers the same decision
and starts an execution again (harmless: a run that finds the operation claimed or settled ends at once).
"""

from __future__ import annotations

from typing import Literal

from aws_lambda_powertools.metrics import MetricUnit
from pydantic import BaseModel, ConfigDict, Field

from packyard import clock
from packyard.authority import Principal
from packyard.consent.models import Approval
from packyard.errors import IdempotencyKeyReused, StaleAuthority, TransientStoreError
from packyard.installations.models import check_installation_id, check_workspace_id
from packyard.observability import logger, metrics, tracer
from packyard.operations import workflow
from packyard.operations.models import Operation, OperationState
from packyard.operations.preconditions import check_idempotency_key, digest
from packyard.operations.timing import lease_until
from packyard.store import consent, workspace

DECISION_ATTEMPTS = 3


class DecisionRequest(BaseModel):
    """Body of ``POST /v1/workspaces/{ws}/installations/{id}/approvals``."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    decision: Literal["approve", "reject"]
    plan_digest: str = Field(alias="planDigest", pattern=r"^[0-9a-f]{64}$", description="the plan being decided")
    operation_id: str | None = Field(
        default=None,
        alias="operationId",
        max_length=64,
        description="the operation being decided; when given, a decision reaching another (e.g. the one that "
        "superseded it) is stale",
    )


def approval_id_for(tenant: str, workspace_id: str, key: str) -> str:
    return "ap-" + digest({"tenant": tenant, "workspace": workspace_id, "key": key})[:32]


@tracer.capture_method(capture_response=False)
def decide(
    principal: Principal,
    workspace_id: str,
    installation_id: str,
    request: DecisionRequest,
    *,
    idempotency_key: str | None,
) -> Approval:
    """The decision this key records (or already recorded) on the operation waiting on the installation."""
    check_workspace_id(workspace_id)
    check_installation_id(installation_id)
    key = check_idempotency_key(idempotency_key)
    tenant = principal.tenant
    approval_id = approval_id_for(tenant, workspace_id, key)
    request_digest = digest({"installationId": installation_id, **request.model_dump(by_alias=True)})
    logger.append_keys(tenant=tenant, workspace=workspace_id, installationId=installation_id, approvalId=approval_id)
    for _ in range(DECISION_ATTEMPTS):
        wait, recorded = consent.read_for_decision(tenant, workspace_id, installation_id, approval_id)
        if recorded is not None:
            return _replay(tenant, workspace_id, recorded, request_digest)
        if wait is None:
            raise StaleAuthority(f"no operation awaits consent on installation {installation_id}")
        op = workspace.get_operation(tenant, workspace_id, wait.operation_id)
        if request.operation_id is not None and request.operation_id != wait.operation_id:
            raise StaleAuthority(f"operation {request.operation_id} no longer awaits consent")
        if op is None or op.state is not OperationState.AWAITING_CONSENT or op.consent is None:
            raise StaleAuthority(f"operation {wait.operation_id} no longer awaits consent")
        now = clock.now()
        if now >= wait.deadline:
            raise StaleAuthority(f"the consent window of operation {op.operation_id} has ended", deadline=wait.deadline)
        if request.plan_digest != op.consent.plan_digest:
            raise StaleAuthority(
                f"operation {op.operation_id} waits with another plan",
                planDigest=op.consent.plan_digest,
                operationId=op.operation_id,
            )
        decided = _decided(op, request, principal, now)
        approval = Approval(
            approval_id=approval_id,
            operation_id=op.operation_id,
            installation_id=installation_id,
            decision=request.decision,
            plan_digest=request.plan_digest,
            request_digest=request_digest,
            decided_by=principal.subject,
            decided_at=now,
            operation_version=decided.version,
        )
        conflict = consent.decide(op, decided, approval)
        if conflict is None:
            # named in full (f"Consent{decision.title()}d" made "ConsentRejectd" of a rejection)
            metrics.add_metric(
                name="ConsentApproved" if request.decision == "approve" else "ConsentRejected",
                unit=MetricUnit.Count,
                value=1,
            )
            logger.info("consent decided", extra={"decision": request.decision, "operationId": op.operation_id})
            workflow.start(decided)
            return approval
        if conflict.existing_approval is not None:
            return _replay(tenant, workspace_id, conflict.existing_approval, request_digest)
        # another decision (or a supersede) got there first: read again, which answers stale_authority
    raise TransientStoreError("the decision kept racing; retry with the same Idempotency-Key")


def _decided(op: Operation, request: DecisionRequest, principal: Principal, now: int) -> Operation:
    """Out of awaiting_consent: back to planned, the decision recorded on the operation, no runner (the execution
    the decision starts claims it). No longer waiting, it holds an ordinary lease again from now: a decision just
    before the consent deadline does not leave the execution it starts past its lease."""
    if op.consent is None:
        raise StaleAuthority(f"operation {op.operation_id} asks no consent")
    return op.model_copy(
        update={
            "state": OperationState.PLANNED,
            "version": op.version + 1,
            "runner": None,
            "lease_until": lease_until(now),
            "updated_at": now,
            "consent": op.consent.model_copy(
                update={"decision": request.decision, "decided_by": principal.subject, "decided_at": now}
            ),
        }
    )


def _replay(tenant: str, workspace_id: str, recorded: Approval, request_digest: str) -> Approval:
    if recorded.request_digest != request_digest:
        raise IdempotencyKeyReused(
            f"Idempotency-Key already used for a different decision (approval {recorded.approval_id})",
            approvalId=recorded.approval_id,
        )
    # the first attempt may have died between recording and starting the execution: starting again is harmless
    resume_decided(tenant, workspace_id, recorded)
    return recorded


def resume_decided(tenant: str, workspace_id: str, approval: Approval) -> None:
    """Start the install workflow again for the operation ``approval`` decided, while it is still in flight (a run
    of one already claimed, settled or deferred ends at once)."""
    op = workspace.get_operation(tenant, workspace_id, approval.operation_id)
    if op is not None and op.in_flight and op.state is not OperationState.PENDING:
        workflow.start(op)
