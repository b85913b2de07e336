"""outcome_of: the terminal outcome of an operation from the errorType its workflow was caught with; and which
errorTypes defer it to pending instead (TRANSIENT prefixes)."""

from __future__ import annotations

import pytest

from packyard.installations.models import Creation, Installation, InstallationStatus
from packyard.installations.scopes import Scope
from packyard.operations.models import Action, Operation, OperationKind, OperationState, Outcome
from packyard.operations.settlement import OUTCOME_DETAIL_LIMIT, REFUSALS, TRANSIENT, outcome_of

NOW = 1_700_000_000


def plan() -> Installation:
    return Installation(
        tenant="t-acme",
        workspace="ws-1",
        installation_id="hello-1",
        instance_id="inst-1",
        version=1,
        status=InstallationStatus.ACTIVE,
        creation=Creation.FRESH,
        package="hello",
        scope=Scope(),
        last_operation_id="op-1",
        updated_at=NOW,
    )


def operation(state: OperationState, *, planned: bool = True) -> Operation:
    return Operation(
        tenant="t-acme",
        workspace="ws-1",
        operation_id="op-1",
        installation_id="hello-1",
        action=Action.PUT,
        kind=OperationKind.INSTALL,
        state=state,
        version=3,
        request_digest="r" * 64,
        intent_digest="i" * 64,
        plan=plan() if planned else None,
        lease_until=NOW + 900,
        created_at=NOW,
        updated_at=NOW,
    )


@pytest.mark.parametrize(
    ("op", "expected"),
    [
        pytest.param(operation(OperationState.COMMITTED), Outcome(result="succeeded"), id="committed with a plan"),
        pytest.param(
            operation(OperationState.COMMITTED, planned=False),
            Outcome(result="unconfirmed", code="interrupted", detail="settled while committed"),
            id="committed without a plan",
        ),
        pytest.param(
            operation(OperationState.PLANNED),
            Outcome(result="unconfirmed", code="interrupted", detail="settled while planned"),
            id="planned, never committed",
        ),
        pytest.param(
            operation(OperationState.ADMITTED, planned=False),
            Outcome(result="unconfirmed", code="interrupted", detail="settled while admitted"),
            id="admitted, never planned",
        ),
    ],
)
def test_given_a_workflow_that_ran_to_the_end_when_settling_then_only_a_committed_plan_succeeds(op, expected):
    assert outcome_of(op, "", "") == expected


@pytest.mark.parametrize("state", [OperationState.ADMITTED, OperationState.PLANNED])
@pytest.mark.parametrize(
    ("error_type", "status", "code"),
    [
        pytest.param("NeedsConsent", 403, "needs_consent", id="NeedsConsent"),
        pytest.param("StaleAuthority", 409, "stale_authority", id="StaleAuthority"),
        pytest.param("LimitExceeded", 409, "limit_exceeded", id="LimitExceeded"),
        pytest.param("ReleaseUnavailable", 409, "release_unavailable", id="ReleaseUnavailable"),
        pytest.param("PlanChanged", 409, "plan_changed", id="PlanChanged"),
    ],
)
def test_given_a_refusal_error_type_when_settling_then_refused_with_its_class_status_and_code(
    error_type, status, code, state
):
    outcome = outcome_of(operation(state), error_type, "hello@2.0.0 needs api_write")

    assert outcome == Outcome(result="refused", status=status, code=code, detail="hello@2.0.0 needs api_write")


def test_given_the_refusal_table_then_it_is_exactly_the_seven_definitive_refusals():
    assert sorted(REFUSALS) == [
        "ConsentRejected",
        "LimitExceeded",
        "NeedsConsent",
        "PlanChanged",
        "QuotaExceeded",
        "ReleaseUnavailable",
        "StaleAuthority",
    ]


@pytest.mark.parametrize(
    ("state", "error_type", "code"),
    [
        pytest.param(OperationState.COMMITTED, "States.TaskFailed", "outcome_unknown", id="committed, task failed"),
        pytest.param(OperationState.COMMITTED, "States.Runtime", "outcome_unknown", id="committed, runtime error"),
        pytest.param(OperationState.COMMITTED, "StoreFailure", "outcome_unknown", id="committed, store failure"),
        pytest.param(OperationState.PLANNED, "States.TaskFailed", "interrupted", id="planned, task failed"),
        pytest.param(OperationState.ADMITTED, "StoredItemInvalid", "interrupted", id="admitted, stored item invalid"),
        pytest.param(OperationState.PLANNED, "needsconsent", "interrupted", id="refusal name in the wrong case"),
        pytest.param(OperationState.PLANNED, "ClaimLostX", "interrupted", id="unknown class name"),
    ],
)
def test_given_any_other_error_type_when_settling_then_unconfirmed_by_whether_it_committed(state, error_type, code):
    outcome = outcome_of(operation(state), error_type, "boom")

    # issue 20: neither the error's name (a class name, a States.* error) nor its text reaches the answer
    assert outcome == Outcome(result="unconfirmed", code=code, detail=f"the operation stopped while {state}")


@pytest.mark.parametrize("message_length", [10, OUTCOME_DETAIL_LIMIT, 5_000])
def test_given_any_error_message_when_unconfirmed_then_the_detail_carries_none_of_it(message_length):
    message = "AccessDeniedException: User arn:aws:sts::123456789012:assumed-role/x " + "x" * message_length

    outcome = outcome_of(operation(OperationState.COMMITTED), "States.Runtime", message)

    assert OUTCOME_DETAIL_LIMIT == 500
    assert outcome.detail == "the operation stopped while committed"
    assert "States.Runtime" not in outcome.detail and "arn:aws" not in outcome.detail


@pytest.mark.parametrize(
    ("error_type", "deferred"),
    [
        pytest.param("TransientStoreError", True, id="TransientStoreError"),
        pytest.param("Lambda.ServiceException", True, id="Lambda.ServiceException"),
        pytest.param("Lambda.TooManyRequestsException", True, id="Lambda.TooManyRequestsException"),
        pytest.param("Lambda.Unknown", True, id="Lambda.Unknown"),
        pytest.param("States.Timeout", True, id="States.Timeout"),
        pytest.param("States.HeartbeatTimeout", True, id="States.HeartbeatTimeout"),
        pytest.param("States.TaskFailed", False, id="States.TaskFailed"),
        pytest.param("States.Runtime", False, id="States.Runtime"),
        pytest.param("lambda.ServiceException", False, id="lambda in the wrong case"),
        pytest.param("StaleAuthority", False, id="a refusal"),
        pytest.param("ClaimLost", False, id="ClaimLost"),
        pytest.param("", False, id="no error"),
    ],
)
def test_given_an_error_type_when_classified_then_only_transient_prefixes_defer(error_type, deferred):
    assert error_type.startswith(TRANSIENT) is deferred


def test_given_the_refusals_then_none_of_them_would_be_deferred_as_transient():
    assert [name for name in REFUSALS if name.startswith(TRANSIENT)] == []
