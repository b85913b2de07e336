"""Throttling is a retry, never a refusal (issue 20, item 3): a publish whose Verify is throttled (its reserved
concurrency in use by other publishes) ends published once the throttle clears, through the real publish state
machine; a throttle that outlasts the retries leaves the upload verifying, and the sweep starts verification again;
no Step Functions Cause, AWS error text or exception class reaches an answer."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

import devstack
from devstack import limits
from devstack.api import LocalApi
from devstack.caller import Caller
from devstack.template import Stack
from packyard import clock
from packyard.publishing import publication, resumption
from packyard.publishing.rejection import PUBLISH_FAILED_DETAIL
from packyard.store import workflows
from packyard.store.due import DueKind
from packyard_cli.build import build_from_files
from tests.support.callers import used_bytes
from tests.support.sweeping import sweep_kinds

RESERVED = 50  # the figure the template documents for VerifyReservedConcurrency on an account with room
HOUR = 3600


@pytest.fixture
def stack() -> Iterator[Stack]:
    with devstack.local_aws(parameters={"VerifyReservedConcurrency": str(RESERVED)}) as created:
        yield created


@pytest.fixture
def acme(stack: Stack) -> Caller:
    return Caller(LocalApi(stack), "t-acme")


BUILT = build_from_files({"SKILL.md": b"# throttled\n"})


def start_publish(acme: Caller) -> dict[str, Any]:
    session = acme.request_upload("hello", "1.0.0", BUILT)
    acme.put_archive(session.body, BUILT.archive)
    completed = acme.post(f"/v1/uploads/{session.body['uploadId']}/complete")
    assert completed.status == 202, completed.body
    body: dict[str, Any] = completed.body
    return body


def test_a_throttled_verify_ends_published_after_the_throttle_clears(stack: Stack, acme: Caller) -> None:
    assert stack.functions["VerifyFunction"].reserved_concurrency == RESERVED
    clock_ = devstack.retry_clock()
    assert clock_ is not None
    # 50 publishes verify at once: the 51st is throttled; they finish while Step Functions waits to retry it
    with limits.occupied("VerifyFunction", RESERVED) as others:
        clock_.on_wait = lambda seconds: others.release()
        started = start_publish(acme)
        execution = devstack.wait_for_execution(started["executionArn"], timeout=60)

    assert execution["status"] == "SUCCEEDED"
    assert limits.throttles("VerifyFunction") == 1
    (wait,) = clock_.waits
    assert 0 <= wait <= 1  # IntervalSeconds 1, full jitter
    upload = acme.get(f"/v1/uploads/{started['uploadId']}").body
    assert upload["state"] == "published"


def test_a_throttle_past_the_retries_is_not_a_rejection_and_the_sweep_resumes_it(stack: Stack, acme: Caller) -> None:
    with limits.occupied("VerifyFunction", RESERVED):
        started = start_publish(acme)
        deferred = devstack.wait_for_execution(started["executionArn"], timeout=60)

        assert (deferred["status"], deferred["error"]) == ("FAILED", "Deferred")
        assert limits.throttles("VerifyFunction") == 7  # the first call and 6 retries
        waiting = acme.get(f"/v1/uploads/{started['uploadId']}").body
        assert waiting["state"] == "verifying"  # not rejected: its reservation is still held
        assert "rejection" not in waiting
        assert used_bytes(stack, "t-acme") > 0

    swept = sweep_kinds([DueKind.UPLOAD], clock.now() + HOUR)  # past the reservation window

    assert swept["resumed"] == 1
    machine = stack.state_machine_arns["PublishStateMachine"]
    again = workflows.execution_arn(machine, resumption.attempt_names(started["uploadId"])[1])
    assert devstack.wait_for_execution(again, timeout=60)["status"] == "SUCCEEDED"
    assert acme.get(f"/v1/uploads/{started['uploadId']}").body["state"] == "published"


def test_an_unexpected_failure_is_rejected_in_packyards_words_only(
    stack: Stack, acme: Caller, monkeypatch: pytest.MonkeyPatch
) -> None:
    secret = "AccessDeniedException: User: arn:aws:sts::123456789012:assumed-role/PublishRole is not authorized"

    def denied(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError(secret)

    monkeypatch.setattr(publication, "publish", denied)
    started = start_publish(acme)
    devstack.wait_for_execution(started["executionArn"], timeout=60)

    answer = acme.get(f"/v1/uploads/{started['uploadId']}")
    assert answer.body["state"] == "rejected"
    assert answer.body["rejection"] == {"code": "publish_failed", "detail": PUBLISH_FAILED_DETAIL}
    for leaked in ("RuntimeError", "arn:aws:sts", "assumed-role", "AccessDenied", "errorType", "stackTrace"):
        assert leaked not in answer.raw
