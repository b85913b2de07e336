"""Waiting for consent (a task of the install state machine, run with ``.waitForTaskToken``): the planned operation
moves to ``awaiting_consent`` and its task token is kept server-side until an owner decides or the window ends."""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.metrics import MetricUnit

from packyard import clock
from packyard.config import limits
from packyard.consent.models import ConsentWait
from packyard.errors import ClaimLost
from packyard.installations.models import check_workspace_id
from packyard.observability import logger, metrics, tracer
from packyard.operations.models import Operation, OperationState
from packyard.operations.planning import load
from packyard.store import consent


@tracer.capture_method(capture_response=False)
def await_consent(tenant: str, workspace_id: str, operation_id: str, task_token: str) -> dict[str, Any]:
    """Record the wait (or, on a retry of this task, the new token). The workflow stays paused until the token is
    used by a decision; this task's own answer is not its output."""
    logger.append_keys(tenant=tenant, workspace=workspace_id, operationId=operation_id)
    op = load(tenant, workspace_id, operation_id)
    if op.consent is None or op.consent.decision is not None or op.plan is None or op.target is None:
        raise ClaimLost(f"operation {operation_id} asks no consent (state {op.state})")
    now = clock.now()
    if op.state is OperationState.AWAITING_CONSENT:
        consent.refresh_consent_token(op, _wait(op, task_token, op.consent.requested_at or now))
        return {"waiting": True, "refreshed": True}
    if op.state is not OperationState.PLANNED:
        raise ClaimLost(f"operation {operation_id} is {op.state}, not planned")
    wait = _wait(op, task_token, now)
    waiting = op.model_copy(
        update={
            "state": OperationState.AWAITING_CONSENT,
            "version": op.version + 1,
            "lease_until": wait.deadline,
            "updated_at": now,
            "consent": op.consent.model_copy(update={"requested_at": now, "deadline": wait.deadline}),
        }
    )
    consent.await_consent(op, waiting, wait)
    metrics.add_metric(name="ConsentRequested", unit=MetricUnit.Count, value=1)
    logger.info("operation awaits consent", extra={"permissions": len(wait.permissions), "deadline": wait.deadline})
    return {"waiting": True}


def _wait(op: Operation, task_token: str, since: int) -> ConsentWait:
    if op.consent is None or op.target is None:
        raise ClaimLost(f"operation {op.operation_id} asks no consent")
    return ConsentWait(
        operation_id=op.operation_id,
        installation_id=op.installation_id,
        task_token=task_token,
        plan_digest=op.consent.plan_digest,
        package=op.target.package,
        version=op.target.version,
        permissions=op.consent.permissions,
        requested_by=op.requested_by,
        since=since,
        deadline=since + limits().consent_window_seconds,
    )


def waiting_in(tenant: str, workspace_id: str, limit: int, cursor: str | None) -> tuple[list[ConsentWait], str | None]:
    """What waits for a decision in the workspace (one page)."""
    check_workspace_id(workspace_id)
    return consent.list_consent_waits(tenant, workspace_id, limit=limit, cursor=cursor)
