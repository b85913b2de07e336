"""The supersede rule over an installation's in-flight slot: who may take it over, how the superseded holder settles,
until when it is retained, and the 409 (with Retry-After) everyone else gets."""

from __future__ import annotations

import pytest

from packyard.config import limits
from packyard.errors import OperationInProgress
from packyard.installations.models import Creation, Installation, InstallationStatus
from packyard.installations.scopes import Scope
from packyard.operations.models import Action, Operation, OperationKind, OperationState, Outcome, Slot, Supersession
from packyard.operations.supersede import blocker, supersedable, superseded_outcome, supersession

NOW = 1_700_000_000
HOLDER = "op-holder"
NEW = "op-new"
SAME, OTHER = "intent-same", "intent-other"


def slot(
    *, holder: str | None = HOLDER, lease_until: int = NOW + 60, intent: str = SAME, pending: bool = False
) -> Slot:
    return Slot(operation_id=holder, claim=3, lease_until=lease_until, intent_digest=intent, pending=pending)


def operation(operation_id: str = NEW, intent: str = SAME) -> Operation:
    return Operation(
        tenant="t-acme",
        workspace="ws-1",
        operation_id=operation_id,
        installation_id="hello-1",
        action=Action.PUT,
        kind=OperationKind.UPDATE,
        state=OperationState.ADMITTED,
        version=1,
        request_digest="r" * 64,
        intent_digest=intent,
        lease_until=NOW + 900,
        created_at=NOW,
        updated_at=NOW,
    )


def installation(last_operation_id: str) -> Installation:
    return Installation(
        tenant="t-acme",
        workspace="ws-1",
        installation_id="hello-1",
        instance_id="inst-1",
        version=2,
        status=InstallationStatus.ACTIVE,
        creation=Creation.FRESH,
        package="hello",
        scope=Scope(),
        last_operation_id=last_operation_id,
        updated_at=NOW - 10,
    )


SUPERSEDABLE = [
    pytest.param(slot(pending=True), operation(intent=OTHER), HOLDER, id="pending holder, lease running, other intent"),
    pytest.param(slot(pending=True, lease_until=NOW - 1), operation(), HOLDER, id="pending holder, lease expired"),
    pytest.param(slot(lease_until=NOW - 1), operation(), HOLDER, id="lease expired, same intent"),
    pytest.param(slot(lease_until=NOW), operation(), HOLDER, id="lease ends exactly now, same intent"),
    pytest.param(slot(lease_until=NOW + 1), operation(), None, id="lease still running one second, same intent"),
    pytest.param(slot(), operation(), None, id="lease running, same intent"),
    pytest.param(slot(lease_until=NOW - 1), operation(intent=OTHER), None, id="lease expired, other intent"),
    pytest.param(slot(), operation(intent=OTHER), None, id="lease running, other intent"),
    pytest.param(slot(holder=NEW, pending=True), operation(), None, id="own operation holds it (pending)"),
    pytest.param(slot(holder=NEW, lease_until=NOW - 1), operation(), None, id="own operation holds it (expired)"),
    pytest.param(None, operation(), None, id="no slot yet"),
    pytest.param(slot(holder=None, pending=True, lease_until=0), operation(), None, id="slot free"),
]


@pytest.mark.parametrize(("held", "op", "expected"), SUPERSEDABLE)
def test_given_a_slot_when_another_operation_arrives_then_only_a_stopped_holder_is_supersedable(held, op, expected):
    assert supersedable(held, op, NOW) == expected


@pytest.mark.parametrize(
    ("current", "expected"),
    [
        pytest.param(
            installation(last_operation_id=HOLDER),
            Outcome(result="succeeded", detail=f"committed; settled by {NEW} after its worker stopped"),
            id="its commit landed (installation last written by it): succeeded",
        ),
        pytest.param(
            installation(last_operation_id="op-earlier"),
            Outcome(result="unconfirmed", code="cancelled", detail=f"superseded by {NEW}"),
            id="installation last written by another operation: cancelled",
        ),
        pytest.param(
            None,
            Outcome(result="unconfirmed", code="cancelled", detail=f"superseded by {NEW}"),
            id="no installation: cancelled",
        ),
    ],
)
def test_given_the_installation_as_read_when_the_holder_is_superseded_then_it_settles_as(current, expected):
    assert superseded_outcome(HOLDER, current, NEW) == expected


@pytest.mark.parametrize(
    ("held", "op", "current", "outcome"),
    [
        pytest.param(
            slot(pending=True),
            operation(intent=OTHER),
            installation(last_operation_id=HOLDER),
            Outcome(result="succeeded", detail=f"committed; settled by {NEW} after its worker stopped"),
            id="pending holder whose commit landed",
        ),
        pytest.param(
            slot(lease_until=NOW - 1),
            operation(),
            None,
            Outcome(result="unconfirmed", code="cancelled", detail=f"superseded by {NEW}"),
            id="expired holder with the same intent, nothing committed",
        ),
    ],
)
def test_given_a_supersedable_holder_when_deciding_then_the_supersession_retains_it_for_the_settled_retention(
    held, op, current, outcome
):
    decided = supersession(held, op, current, NOW)

    assert decided == Supersession(
        operation_id=HOLDER, outcome=outcome, retain_until=NOW + limits().settled_operation_retention_seconds
    )


@pytest.mark.parametrize(
    ("held", "op"),
    [
        pytest.param(slot(), operation(), id="lease running, same intent"),
        pytest.param(slot(lease_until=NOW - 1), operation(intent=OTHER), id="lease expired, other intent"),
        pytest.param(slot(holder=NEW, pending=True), operation(), id="own operation"),
        pytest.param(None, operation(), id="no slot"),
    ],
)
def test_given_a_holder_that_may_not_be_superseded_when_deciding_then_there_is_no_supersession(held, op):
    assert supersession(held, op, installation(last_operation_id=HOLDER), NOW) is None


@pytest.mark.parametrize(
    ("lease_until", "retry_after"),
    [
        pytest.param(NOW + 120, 120, id="120 s left on the lease"),
        pytest.param(NOW + 1, 1, id="1 s left"),
        pytest.param(NOW, 1, id="lease ends now: at least 1"),
        pytest.param(NOW - 3600, 1, id="lease long expired: at least 1"),
    ],
)
def test_given_another_holder_when_blocked_then_409_with_retry_after_the_remaining_lease(lease_until, retry_after):
    error = blocker(slot(lease_until=lease_until), operation(), NOW)

    assert isinstance(error, OperationInProgress)
    assert (error.status, error.code) == (409, "operation_in_progress")
    assert error.headers == {"Retry-After": str(retry_after)}
    assert error.extra == {"operationId": HOLDER, "retryAfter": retry_after}
    assert HOLDER in error.detail


@pytest.mark.parametrize(
    "held",
    [
        pytest.param(None, id="no slot"),
        pytest.param(slot(holder=None), id="slot free"),
        pytest.param(slot(holder=NEW), id="own operation holds it"),
    ],
)
def test_given_no_other_holder_when_checking_then_nothing_blocks(held):
    assert blocker(held, operation(), NOW) is None
