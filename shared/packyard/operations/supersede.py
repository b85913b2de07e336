"""Who may take an installation's single in-flight slot: the supersede rule, and how a superseded holder settles.

Pure decisions over the slot as read; admission writes them in one transaction with the new operation.
"""

from __future__ import annotations

from packyard.errors import OperationInProgress
from packyard.installations.models import Installation
from packyard.operations.models import Operation, Outcome, Slot, Supersession
from packyard.operations.timing import retained_until


def held_by_other(slot: Slot | None, op: Operation) -> str | None:
    """The id of another operation holding the slot, if any."""
    if slot is None or slot.operation_id is None or slot.operation_id == op.operation_id:
        return None
    return slot.operation_id


def supersedable(slot: Slot | None, op: Operation, now: int) -> str | None:
    """The holder may be superseded if it is pending, or its lease expired and it meant the same thing."""
    holder = held_by_other(slot, op)
    if holder is None or slot is None:
        return None
    if slot.pending or (slot.lease_until <= now and slot.intent_digest == op.intent_digest):
        return holder
    return None


def superseded_outcome(holder: str, installation: Installation | None, by: str) -> Outcome:
    """What the superseded operation settles as. If its commit already landed (the installation, checked at the
    baseline version in the same transaction, was last written by it), its change is in effect: it succeeded."""
    if installation is not None and installation.last_operation_id == holder:
        return Outcome(result="succeeded", detail=f"committed; settled by {by} after its worker stopped")
    return Outcome(result="unconfirmed", code="cancelled", detail=f"superseded by {by}")


def supersession(slot: Slot | None, op: Operation, installation: Installation | None, now: int) -> Supersession | None:
    """The decision to supersede the slot's holder in favour of ``op``, or None when it may not be superseded."""
    holder = supersedable(slot, op, now)
    if holder is None:
        return None
    return Supersession(
        operation_id=holder,
        outcome=superseded_outcome(holder, installation, op.operation_id),
        retain_until=retained_until(now),
    )


def blocker(slot: Slot | None, op: Operation, now: int) -> OperationInProgress | None:
    """``409 operation_in_progress`` (with Retry-After: the holder's remaining lease) when another operation holds
    the slot."""
    holder = held_by_other(slot, op)
    if holder is None or slot is None:
        return None
    retry_after = max(1, slot.lease_until - now)
    return OperationInProgress(
        f"operation {holder} is in flight on installation {op.installation_id}",
        headers={"Retry-After": str(retry_after)},
        operationId=holder,
        retryAfter=retry_after,
    )
