"""Settlement: the terminal outcome of an operation (or its deferral to ``pending``), and freeing its slot.

Every Catch of the install state machine lands here with the caught error. ``outcome_of`` maps what happened to an
outcome (a pure decision); ``settle_task`` writes it, with ``succeeded`` only when the installation row still is
what this operation committed.
"""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.metrics import MetricUnit

from packyard import changes, clock
from packyard.errors import (
    ConsentExpired,
    ConsentRejected,
    LimitExceeded,
    NeedsConsent,
    NotFound,
    PackyardError,
    PlanChanged,
    QuotaExceeded,
    ReleaseUnavailable,
    StaleAuthority,
)
from packyard.observability import logger, metrics, tracer
from packyard.operations.models import Operation, OperationState, Outcome, Slot
from packyard.operations.timing import retained_until
from packyard.store import workspace
from packyard.workflow_inputs import caught_error_message

# errorType (the exception class name Step Functions reports) → definitive refusal
REFUSALS: dict[str, type[PackyardError]] = {
    cls.__name__: cls
    for cls in (
        NeedsConsent,
        StaleAuthority,
        LimitExceeded,
        ReleaseUnavailable,
        PlanChanged,
        ConsentRejected,
        QuotaExceeded,
    )
}
# errorTypes a later attempt may get past: the operation is deferred (pending), not settled
TRANSIENT = ("TransientStoreError", "Lambda.", "States.Timeout", "States.HeartbeatTimeout")
OUTCOME_DETAIL_LIMIT = 500
NO_LONGER_PLANNED = Outcome(
    result="unconfirmed", code="outcome_unknown", detail="the installation no longer matches the committed plan"
)


@tracer.capture_method(capture_response=False)
def settle_task(
    tenant: str,
    workspace_id: str,
    installation_id: str,
    operation_id: str,
    error: dict[str, Any] | None,
    *,
    attempt: int | None = None,
    runner: str | None = None,
) -> dict[str, Any]:
    """Write the terminal outcome (or defer to pending on a transient failure) and free the slot. ``attempt`` is the
    attempt the calling execution runs: once the operation was resumed as a later one, an earlier attempt's Settle
    (Step Functions retrying one that died after deferring) leaves it alone. None (an execution started before
    inputs carried the attempt): not fenced. ``runner`` is the calling execution: once another execution claimed
    the operation, this one's Settle (a duplicate run's, Express runs at least once) leaves it alone. None (the
    sweep settling it directly): not fenced."""
    logger.append_keys(tenant=tenant, workspace=workspace_id, operationId=operation_id)
    op, slot = workspace.read_operation_and_slot(tenant, workspace_id, installation_id, operation_id)
    if op is None:
        raise NotFound(f"operation {operation_id} not found")
    if op.state is OperationState.SETTLED:
        tell_settled(op)  # settled by an earlier try, which may have died before its event went out
        return {"settled": True, "outcome": op.outcome.model_dump(exclude_none=True) if op.outcome else None}
    if attempt is not None and attempt != op.attempt:
        logger.info("settle of an earlier attempt ignored", extra={"attempt": attempt, "current": op.attempt})
        return {"settled": False, "reason": "attempt_superseded", "attempt": op.attempt}
    if runner is not None and op.runner is not None and op.runner != runner:
        logger.info("settle of another execution's operation ignored")
        return {"settled": False, "reason": "claim_lost"}
    if op.state is OperationState.PENDING:
        # an earlier attempt of this settle already deferred it: deferring again would lose the phase it stopped in
        return {"settled": False, "pending": True, "phase": op.phase, "errorCode": op.error_code}
    now = clock.now()
    error_type = str((error or {}).get("Error", ""))
    if error_type == "ClaimLost":
        return {"settled": False, "reason": "claim_lost"}
    outcome = consent_outcome(op, error_type)
    if outcome is None:
        if error_type.startswith(TRANSIENT):
            return _defer(op, error_type, now)
        outcome = outcome_of(op, error_type, caught_error_message(error, limit=OUTCOME_DETAIL_LIMIT))
    settled = settled_as(op, outcome, now)
    retire = retiring(op, slot)
    confirm = (op.plan.version, op.operation_id) if outcome.result == "succeeded" and op.plan is not None else None
    waiting = op.state is OperationState.AWAITING_CONSENT
    if not workspace.settle(
        op, settled, slot=slot, confirm_installation=confirm, retire=retire, drop_consent_wait=waiting
    ):
        settled = settled_as(op, NO_LONGER_PLANNED, now)
        workspace.settle(op, settled, slot=slot, confirm_installation=None, retire=retire, drop_consent_wait=waiting)
    final = settled.outcome or outcome
    if final.result != "succeeded":
        _drop_holds(op)  # after the refusal is recorded: this operation can no longer commit
    changes.emit(changes.operation_settled(settled, final))  # after the settlement is committed
    metrics.add_metric(name=f"Operations{final.result.title()}", unit=MetricUnit.Count, value=1)
    if final.code == ConsentExpired.code:
        metrics.add_metric(name="ConsentExpired", unit=MetricUnit.Count, value=1)  # a consent wait that ran out
    logger.info("operation settled", extra={"outcome": final.result, "code": final.code})
    return {"settled": True, "outcome": final.model_dump(exclude_none=True)}


def _drop_holds(op: Operation) -> None:
    """Take back the holds a refused operation's commit may have made before it was refused (only a planned
    operation whose plan may commit gets that far). One lost here (the run died) is a stale holder the reclaimer
    drops."""
    if op.state is not OperationState.PLANNED or op.plan is None:
        return
    if op.consent is not None and op.consent.decision != "approve":
        return
    from packyard.operations.commit import hold_changes  # commit imports this module

    holds = hold_changes(op.baseline, op.plan)["holds"]
    if holds:
        workspace.drop_holds(op, op.plan.version, holds)


def consent_outcome(op: Operation, error_type: str) -> Outcome | None:
    """How an operation that asked consent ends, whatever error reached Settle: rejected by its owner, or not
    decided within the consent window (the sweep found its wait past the deadline: it tells this as
    ``States.Timeout``). None: consent does not decide this outcome."""
    if op.consent is not None and op.consent.decision == "reject":
        by = f" by {op.consent.decided_by}" if op.consent.decided_by else ""
        return _refused(ConsentRejected, f"the plan was rejected{by}")
    if op.state is OperationState.AWAITING_CONSENT and error_type == "States.Timeout":
        return _refused(ConsentExpired, "no decision within the consent window")
    return None


def _refused(refusal: type[PackyardError], detail: str) -> Outcome:
    return Outcome(result="refused", status=refusal.status, code=refusal.code, detail=detail)


def outcome_of(op: Operation, error_type: str, error_message: str) -> Outcome:
    """The outcome of ``op`` given the errorType it was caught with ("" when its workflow ran to the end)."""
    if not error_type:
        if op.state is OperationState.COMMITTED and op.plan is not None:
            return Outcome(result="succeeded")
        return Outcome(result="unconfirmed", code="interrupted", detail=f"settled while {op.state}")
    refusal = REFUSALS.get(error_type)
    if refusal is not None:
        return Outcome(result="refused", status=refusal.status, code=refusal.code, detail=error_message)
    code = "outcome_unknown" if op.state is OperationState.COMMITTED else "interrupted"
    # not one of ours: the error's name and text (AWS's words, a class name) stay in the history and the logs
    logger.warning("operation stopped by an unexpected error", extra={"error": error_type[:120], "phase": op.state})
    return Outcome(result="unconfirmed", code=code, detail=f"the operation stopped while {op.state}")


def tell_settled(op: Operation) -> None:
    """Put the ``Operation Settled`` change event of ``op``, settled and stored: after the write that settled it, and
    again by every retry that finds it settled (at least once; the event's id is the same every time)."""
    if op.outcome is not None:
        changes.emit(changes.operation_settled(op, op.outcome))


def settled_as(op: Operation, outcome: Outcome, now: int) -> Operation:
    return op.model_copy(
        update={
            "state": OperationState.SETTLED,
            "version": op.version + 1,
            "outcome": outcome,
            "settled_at": now,
            "updated_at": now,
        }
    )


def retiring(op: Operation, slot: Slot | None) -> tuple[str, int] | None:
    """Settling makes ``op`` the installation's latest settled operation: the one before it starts its retention
    clock (from when it settled)."""
    if slot is None or slot.operation_id != op.operation_id:
        return None
    if slot.last_settled is None or slot.last_settled == op.operation_id or slot.last_settled_at is None:
        return None
    return slot.last_settled, retained_until(slot.last_settled_at)


def deferral_code(error_type: str) -> str:
    """The stable code a deferred operation shows (``errorCode``): ``throttled`` for a Lambda throttle, else
    ``unavailable``; never the error's own name (a class name, AWS's words)."""
    return "throttled" if error_type == "Lambda.TooManyRequestsException" else "unavailable"


def _defer(op: Operation, error_type: str, now: int) -> dict[str, Any]:
    """Park the operation as pending (its slot says so, so another request may supersede it); a retry with the
    same key resumes it in the phase it stopped in."""
    # a wait for consent resumes by planning again: the recorded plan asks consent again (a new wait is recorded)
    phase = OperationState.PLANNED if op.state is OperationState.AWAITING_CONSENT else op.state
    deferred = op.model_copy(
        update={
            "state": OperationState.PENDING,
            "version": op.version + 1,
            "phase": str(phase),
            "error_code": deferral_code(error_type),
            "updated_at": now,
        }
    )
    workspace.transition(
        op, deferred, slot_lease=now, slot_pending=True, drop_consent_wait=op.state is OperationState.AWAITING_CONSENT
    )
    metrics.add_metric(name="OperationsDeferred", unit=MetricUnit.Count, value=1)
    logger.info("operation deferred", extra={"phase": deferred.phase, "errorCode": deferred.error_code})
    return {"settled": False, "pending": True, "phase": deferred.phase, "errorCode": deferred.error_code}
