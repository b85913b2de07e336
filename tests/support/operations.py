"""An operation record for tests that need one as the domain holds it, without admitting it through a stack."""

from __future__ import annotations

from packyard.operations.models import Action, Operation, OperationKind, OperationState, Outcome


def an_operation(
    state: OperationState, *, operation_id: str = "op-1", tenant: str = "t-acme", version: int = 1
) -> Operation:
    """An install in workspace ``ws-1`` in ``state`` (settled ones succeeded)."""
    return Operation(
        tenant=tenant,
        workspace="ws-1",
        operationId=operation_id,
        installationId="hello",
        action=Action.PUT,
        kind=OperationKind.INSTALL,
        state=state,
        version=version,
        requestDigest="r" * 64,
        intentDigest="i" * 64,
        leaseUntil=0,
        createdAt=0,
        updatedAt=0,
        outcome=Outcome(result="succeeded") if state is OperationState.SETTLED else None,
    )
