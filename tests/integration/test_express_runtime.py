"""The local runtime runs Express state machines with Express semantics (devstack.express): no deduplication by name,
no execution API, a time limit, and duplicates on purpose. AWS's documented behaviour, which moto alone does not
give: the Step Functions developer guide ("Choosing workflow type": Express is at-least-once, runs at most five
minutes, and keeps no execution history in the service) and the DescribeExecution / GetExecutionHistory /
ListExecutions references ("not supported by EXPRESS state machines")."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError

import devstack
from devstack import express, faults, lambdas
from devstack.template import FunctionSpec, Stack, create_state_machine
from tests.support.fake_functions import express_app

CODE = Path(__file__).resolve().parents[1] / "support" / "fake_functions"


def register(stack: Stack, name: str, handler: str) -> str:
    spec = FunctionSpec(
        logical_id=name,
        name=name,
        arn=f"arn:aws:lambda:{stack.region}:{stack.account}:function:{name}",
        code_uri=CODE,
        handler=f"express_app.{handler}",
        timeout=30,
    )
    lambdas.register(spec)
    return spec.arn


def machine(stack: Stack, name: str, handler: str, machine_type: str) -> str:
    """Task → Pass: one Lambda task, then a state that runs only if the task's run was not stopped."""
    definition = {
        "StartAt": "Task",
        "States": {
            "Task": {
                "Type": "Task",
                "Resource": register(stack, f"{name}Fn", handler),
                "ResultPath": "$.task",
                "Next": "After",
            },
            "After": {"Type": "Pass", "Result": True, "ResultPath": "$.after", "End": True},
        },
    }
    return create_state_machine(
        boto3.client("stepfunctions"),
        name=name,
        definition=definition,
        role_arn="arn:aws:iam::123456789012:role/test",
        machine_type=machine_type,
    )


@pytest.fixture(autouse=True)
def fresh_calls() -> Iterator[None]:
    express_app.CALLS.clear()
    express_app.GATES.clear()
    yield
    for gate in express_app.GATES.values():
        gate.set()


def start(arn: str, name: str, payload: dict[str, Any]) -> str:
    started = boto3.client("stepfunctions").start_execution(stateMachineArn=arn, name=name, input=json.dumps(payload))
    return str(started["executionArn"])


def test_an_express_start_with_a_name_already_used_starts_a_second_run(stack: Stack) -> None:
    arn = machine(stack, "ExpressNames", "record", "EXPRESS")

    first = start(arn, "op-1", {"n": 1})
    second = start(arn, "op-1", {"n": 1})

    assert first != second
    assert first.split(":")[5:8] == ["express", "ExpressNames", "op-1"]
    described = devstack.wait_for_execution(first.rsplit(":", 1)[0].replace(":express:", ":execution:"))
    assert described["status"] == "SUCCEEDED"
    assert [run.status for run in devstack.express_runs("ExpressNames", "op-1")] == ["SUCCEEDED", "SUCCEEDED"]
    assert len(express_app.CALLS) == 2


def test_a_standard_start_with_the_same_name_and_input_is_still_the_same_execution(stack: Stack) -> None:
    arn = machine(stack, "StandardNames", "record", "STANDARD")

    first = start(arn, "op-1", {"n": 1})
    second = start(arn, "op-1", {"n": 1})

    assert first == second
    devstack.wait_for_execution(first)
    assert len(express_app.CALLS) == 1


def test_express_runs_have_no_describe_history_or_list(stack: Stack) -> None:
    arn = machine(stack, "ExpressNoApi", "record", "EXPRESS")
    run = start(arn, "op-1", {})
    devstack.wait_for_execution(run)
    sfn = boto3.client("stepfunctions")

    for call in (
        lambda: sfn.describe_execution(executionArn=run),
        lambda: sfn.get_execution_history(executionArn=run),
    ):
        with pytest.raises(ClientError) as refused:
            call()
        assert refused.value.response["Error"]["Code"] == "InvalidArn"
        assert "express" in refused.value.response["Error"]["Message"]
    with pytest.raises(ClientError) as refused:
        sfn.list_executions(stateMachineArn=arn)
    assert refused.value.response["Error"]["Code"] == "StateMachineTypeNotSupported"
    # a standard-form ARN of the same name names no execution at all
    with pytest.raises(ClientError) as missing:
        sfn.describe_execution(executionArn=run.rsplit(":", 1)[0].replace(":express:", ":execution:"))
    assert missing.value.response["Error"]["Code"] == "ExecutionDoesNotExist"


def test_a_run_past_the_time_limit_is_timed_out_and_runs_nothing_after_its_task(stack: Stack) -> None:
    arn = machine(stack, "ExpressLimit", "held", "EXPRESS")
    entered, release = threading.Event(), threading.Event()
    express_app.GATES.update(entered=entered, release=release)

    with express.limit(0.2):
        run = start(arn, "op-1", {})
    assert entered.wait(10)
    described = devstack.wait_for_execution(run, timeout=10)
    release.set()

    assert described["status"] == "TIMED_OUT"
    assert "output" not in described


def test_duplicate_executions_starts_every_express_run_twice(stack: Stack) -> None:
    arn = machine(stack, "ExpressTwice", "record", "EXPRESS")

    with faults.duplicate_executions() as duplicated:
        run = start(arn, "op-1", {"n": 1})

    devstack.wait_for_execution(run.rsplit(":", 1)[0].replace(":express:", ":execution:"))
    runs = devstack.express_runs("ExpressTwice", "op-1")
    assert duplicated.total == 1
    assert len(runs) == 2 and {r.input["n"] for r in runs} == {1}
    assert len(express_app.CALLS) == 2


def test_duplicate_task_runs_runs_each_task_twice_and_keeps_the_second_answer(stack: Stack) -> None:
    arn = machine(stack, "ExpressTaskTwice", "record", "EXPRESS")

    with faults.duplicate_task_runs() as duplicated:
        run = start(arn, "op-1", {})
        described = devstack.wait_for_execution(run)

    assert duplicated.counts == {"ExpressTaskTwiceFn": 1}
    assert len(express_app.CALLS) == 2
    assert json.loads(described["output"])["task"] == {"call": 2}


def test_start_sync_execution_answers_when_the_express_run_has_stopped(stack: Stack) -> None:
    arn = machine(stack, "ExpressSync", "record", "EXPRESS")

    answer = boto3.client("stepfunctions").start_sync_execution(stateMachineArn=arn, name="op-1", input='{"n": 1}')

    assert answer["status"] == "SUCCEEDED"
    assert answer["executionArn"].split(":")[5:8] == ["express", "ExpressSync", "op-1"]
    assert json.loads(answer["output"])["task"] == {"call": 1}


def test_start_sync_execution_of_a_standard_machine_is_refused(stack: Stack) -> None:
    arn = machine(stack, "StandardSync", "record", "STANDARD")

    with pytest.raises(ClientError) as refused:
        boto3.client("stepfunctions").start_sync_execution(stateMachineArn=arn, input="{}")

    assert refused.value.response["Error"]["Code"] == "StateMachineTypeNotSupported"
    assert express_app.CALLS == []
