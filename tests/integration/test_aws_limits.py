"""The AWS limits the local runtime enforces (devstack.limits): each reached, with AWS's number and error name, and
each switched off by ``limits.relaxed``."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError

import devstack
from devstack import lambdas, limits
from devstack.api import LocalApi
from devstack.template import FunctionSpec, Stack
from tests.support.fake_functions import limits_app

CODE = Path(limits_app.__file__).parent


@pytest.fixture
def stack() -> Iterator[Stack]:
    with devstack.local_aws() as created:
        yield created


def fake(stack: Stack, name: str, handler: str, reserved: int | None = None) -> FunctionSpec:
    spec = FunctionSpec(
        logical_id=name,
        name=name,
        arn=f"arn:aws:lambda:{stack.region}:{stack.account}:function:{name}",
        code_uri=CODE,
        handler=f"limits_app.{handler}",
        timeout=30,
        reserved_concurrency=reserved,
    )
    lambdas.register(spec)
    return spec


def invoke(name: str, payload: Any, invocation_type: str = "RequestResponse") -> dict[str, Any]:
    client = boto3.client("lambda", config=Config(retries={"total_max_attempts": 1}))  # one call, as a Task makes
    answer: dict[str, Any] = client.invoke(
        FunctionName=name, InvocationType=invocation_type, Payload=json.dumps(payload).encode()
    )
    return answer


def machine(name: str, definition: dict[str, Any]) -> str:
    sfn = boto3.client("stepfunctions")
    arn: str = sfn.create_state_machine(
        name=name, definition=json.dumps(definition), roleArn="arn:aws:iam::123456789012:role/test"
    )["stateMachineArn"]
    return arn


def run(machine_arn: str, execution_input: Any, timeout: float = 30) -> dict[str, Any]:
    sfn = boto3.client("stepfunctions")
    started = sfn.start_execution(stateMachineArn=machine_arn, input=json.dumps(execution_input))
    return devstack.wait_for_execution(started["executionArn"], timeout=timeout)


def history(execution_arn: str) -> list[dict[str, Any]]:
    sfn = boto3.client("stepfunctions")
    events: list[dict[str, Any]] = []
    kwargs: dict[str, Any] = {}
    while True:
        page = sfn.get_execution_history(executionArn=execution_arn, maxResults=1000, **kwargs)
        events += page["events"]
        if not page.get("nextToken"):
            return events
        kwargs = {"nextToken": page["nextToken"]}


# ------------------------------------------------------------------ Lambda payloads


def test_a_synchronous_response_over_6291556_bytes_is_function_response_size_too_large(stack: Stack) -> None:
    fake(stack, "Sized", "sized")

    answer = invoke("Sized", {"bytes": limits.LAMBDA_SYNC_RESPONSE_BYTES + 1})

    assert answer["FunctionError"] == "Unhandled"
    error = json.loads(answer["Payload"].read())
    assert error["errorType"] == "Function.ResponseSizeTooLarge"
    assert "(6291556 bytes)" in error["errorMessage"]


def test_the_direct_path_refuses_a_response_past_6291556_bytes_and_passes_one_at_it(stack: Stack) -> None:
    spec = fake(stack, "Sized", "sized")

    assert len(lambdas.invoke_handler(spec, {"bytes": limits.LAMBDA_SYNC_RESPONSE_BYTES})) == 6_291_554
    with pytest.raises(limits.LambdaLimitError) as refused:
        lambdas.invoke_handler(spec, {"bytes": limits.LAMBDA_SYNC_RESPONSE_BYTES + 1})
    assert refused.value.error_type == "Function.ResponseSizeTooLarge"
    with limits.relaxed("lambda_payload"):
        assert len(lambdas.invoke_handler(spec, {"bytes": limits.LAMBDA_SYNC_RESPONSE_BYTES + 1})) == 6_291_555


def test_a_synchronous_request_over_6291456_bytes_is_request_entity_too_large(stack: Stack) -> None:
    fake(stack, "Echo", "echo")
    payload = "x" * (limits.LAMBDA_SYNC_REQUEST_BYTES - 1)  # + 2 quotes: one byte past

    with pytest.raises(ClientError) as refused:
        invoke("Echo", payload)

    assert refused.value.response["Error"]["Code"] == "RequestEntityTooLargeException"
    assert refused.value.response["ResponseMetadata"]["HTTPStatusCode"] == 413
    assert invoke("Echo", payload[:-1])["StatusCode"] == 200  # at the limit


def test_an_asynchronous_request_over_1_mb_is_request_entity_too_large(stack: Stack) -> None:
    fake(stack, "Echo", "echo")

    with pytest.raises(ClientError) as refused:
        invoke("Echo", "x" * (limits.LAMBDA_ASYNC_REQUEST_BYTES - 1), "Event")

    assert refused.value.response["Error"]["Code"] == "RequestEntityTooLargeException"
    assert invoke("Echo", "x" * (limits.LAMBDA_ASYNC_REQUEST_BYTES - 2), "Event")["StatusCode"] == 202


# ------------------------------------------------------------------ reserved concurrency


def test_a_call_above_reserved_concurrency_is_too_many_requests(stack: Stack) -> None:
    fake(stack, "Held", "held", reserved=1)
    limits_app.GATES.update(entered=threading.Event(), release=threading.Event())
    first = threading.Thread(target=invoke, args=("Held", {}))
    first.start()
    try:
        assert limits_app.GATES["entered"].wait(10)

        with pytest.raises(ClientError) as throttled:
            invoke("Held", {})

        assert throttled.value.response["Error"]["Code"] == "TooManyRequestsException"
        assert throttled.value.response["ResponseMetadata"]["HTTPStatusCode"] == 429
        assert limits.throttles("Held") == 1
    finally:
        limits_app.GATES["release"].set()
        first.join(10)
    assert json.loads(invoke("Held", {})["Payload"].read()) == {"held": True}  # the slot is free again


def test_reserved_concurrency_comes_from_the_template_and_can_be_relaxed(stack: Stack) -> None:
    with _restarted({"VerifyReservedConcurrency": "3"}) as strict:
        verify = strict.functions["VerifyFunction"]
        assert verify.reserved_concurrency == 3
        with limits.occupied("VerifyFunction", 3), pytest.raises(ClientError) as throttled:
            invoke("VerifyFunction", {})
        assert throttled.value.response["Error"]["Code"] == "TooManyRequestsException"
    assert stack.functions["VerifyFunction"].reserved_concurrency is None  # the default reserves nothing


def _restarted(parameters: dict[str, str]) -> Any:
    """The local stack again with ``parameters`` (the fixture's one is stopped first)."""
    import contextlib

    @contextlib.contextmanager
    def restarted() -> Iterator[Stack]:
        devstack.stop_local_aws()
        try:
            with devstack.local_aws(parameters=parameters) as created:
                yield created
        finally:
            devstack.start_local_aws()

    return restarted()


def test_a_throttled_task_fails_with_lambda_too_many_requests_and_relaxed_it_runs(stack: Stack) -> None:
    spec = fake(stack, "Echo", "echo", reserved=1)
    definition = {
        "StartAt": "Call",
        "States": {
            "Call": {
                "Type": "Task",
                "Resource": spec.arn,
                "Catch": [{"ErrorEquals": ["Lambda.TooManyRequestsException"], "ResultPath": "$.error", "Next": "No"}],
                "End": True,
            },
            "No": {"Type": "Pass", "End": True},
        },
    }
    arn = machine("throttled", definition)

    with limits.occupied("Echo", 1):
        caught = run(arn, {})
        with limits.relaxed("concurrency"):
            ran = run(arn, {})

    assert caught["status"] == "SUCCEEDED"
    assert json.loads(caught["output"])["error"]["Error"] == "Lambda.TooManyRequestsException"
    assert json.loads(ran["output"]) == {"echo": True}


# ------------------------------------------------------------------ Step Functions payload


def test_a_state_output_over_262144_bytes_is_states_data_limit_exceeded(stack: Stack) -> None:
    arn = machine("payload", {"StartAt": "Same", "States": {"Same": {"Type": "Pass", "End": True}}})
    at_limit = "x" * (limits.SFN_PAYLOAD_BYTES - 2)

    assert run(arn, at_limit)["status"] == "SUCCEEDED"
    past = run(arn, at_limit + "x")
    assert (past["status"], past["error"]) == ("FAILED", "States.DataLimitExceeded")
    with limits.relaxed("sfn_payload"):
        assert run(arn, at_limit + "x")["status"] == "SUCCEEDED"


def test_a_lambda_task_result_over_262144_bytes_is_states_data_limit_exceeded(stack: Stack) -> None:
    spec = fake(stack, "Sized", "sized")
    call = {"Type": "Task", "Resource": spec.arn, "End": True}
    arn = machine("result", {"StartAt": "Call", "States": {"Call": call}})

    failed = run(arn, {"bytes": limits.SFN_PAYLOAD_BYTES + 1})

    assert (failed["status"], failed["error"]) == ("FAILED", "States.DataLimitExceeded")


# ------------------------------------------------------------------ Step Functions history

LOOP = {
    "StartAt": "Count",
    "States": {
        "Count": {"Type": "Pass", "Parameters": {"n.$": "States.MathAdd($.n, 1)", "stop.$": "$.stop"}, "Next": "More"},
        "More": {
            "Type": "Choice",
            "Choices": [{"Variable": "$.n", "NumericLessThanPath": "$.stop", "Next": "Count"}],
            "Default": "Done",
        },
        "Done": {"Type": "Succeed"},
    },
}


def test_an_execution_fails_when_its_history_reaches_25000_events(stack: Stack) -> None:
    # 4 events a round (2 states entered and exited): 6,300 rounds need 25,204 events
    arn = machine("loop", LOOP)

    failed = run(arn, {"n": 0, "stop": 6300}, timeout=240)

    assert (failed["status"], failed["error"]) == ("FAILED", "States.Runtime")
    assert "25000" in failed["cause"]
    events = history(failed["executionArn"])
    assert len(events) == 25_000
    assert events[-1]["type"] == "ExecutionFailed"


def test_the_history_limit_can_be_relaxed(stack: Stack, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(limits, "SFN_HISTORY_EVENTS", 100)  # the same check at a smaller number, to run it fast
    arn = machine("loop", LOOP)

    assert run(arn, {"n": 0, "stop": 30})["status"] == "FAILED"
    with limits.relaxed("sfn_history"):
        succeeded = run(arn, {"n": 0, "stop": 30})
    assert succeeded["status"] == "SUCCEEDED"
    # started, 30 rounds, Done entered and exited, succeeded
    assert len(history(succeeded["executionArn"])) == 4 * 30 + 4


def test_an_execution_within_the_history_limit_is_untouched(stack: Stack) -> None:
    arn = machine("loop", LOOP)

    succeeded = run(arn, {"n": 0, "stop": 20})

    assert succeeded["status"] == "SUCCEEDED"
    assert len(history(succeeded["executionArn"])) == 4 * 20 + 4


# ------------------------------------------------------------------ the HTTP API path


def test_a_throttled_api_function_is_an_internal_server_error_at_the_edge(stack: Stack) -> None:
    api = LocalApi(stack)
    route = next(r for r in api.routes if r.method == "GET" and r.path == "/v1/packages")
    with limits.occupied(route.function, 1), pytest.raises(limits.LambdaLimitError) as throttled:
        lambdas.invoke_handler(_with_reserved(stack, route.function, 1), {})
    assert throttled.value.error_type == "TooManyRequestsException"


def _with_reserved(stack: Stack, logical_id: str, reserved: int) -> FunctionSpec:
    from dataclasses import replace

    return replace(stack.functions[logical_id], reserved_concurrency=reserved)
