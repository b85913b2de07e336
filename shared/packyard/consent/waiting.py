"""Waiting for consent: a recorded wait, not a paused execution (an Express run lasts at most 5 minutes, a consent
window 7 days). The Consent task of the install state machine moves the planned operation to ``awaiting_consent``
(its lease the consent deadline) with the installation's consent wait, and the execution ends. A decision starts a
new execution (``consent.decisions``); no decision by the deadline and the sweep settles it ``consent_expired``."""

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
def await_consent(tenant: str, workspace_id: str, operation_id: str, runner: str | None = None) -> dict[str, Any]:
    """Record the wait (fenced on the version its runner planned or claimed it at). A re-run of this task finds it
    recorded: nothing to do. An operation another execution runs is ClaimLost."""
    logger.append_keys(tenant=tenant, workspace=workspace_id, operationId=operation_id)
    op = load(tenant, workspace_id, operation_id)
    if op.consent is None or op.plan is None or op.target is None:
        raise ClaimLost(f"operation {operation_id} asks no consent (state {op.state})")
    if op.state is OperationState.AWAITING_CONSENT and op.consent.decision is None:
        return {"waiting": True, "replay": True}
    if op.state is not OperationState.PLANNED or op.consent.decision is not None:
        raise ClaimLost(f"operation {operation_id} is {op.state}, not planned and undecided")
    if runner is not None and op.runner != runner:
        raise ClaimLost(f"operation {operation_id} is run by another execution")
    now = clock.now()
    wait = _wait(op, now)
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


def _wait(op: Operation, since: int) -> ConsentWait:
    if op.consent is None or op.target is None:
        raise ClaimLost(f"operation {op.operation_id} asks no consent")
    return ConsentWait(
        operation_id=op.operation_id,
        installation_id=op.installation_id,
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
