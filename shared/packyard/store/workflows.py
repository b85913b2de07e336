"""Step Functions: start executions whose name is the id of the thing they work on, so a repeat is harmless; and
resume (or fail) an execution that waits on a task token."""

from __future__ import annotations

import json
from typing import Any

from packyard.store.aws import client, error_code, translate


def execution_arn(state_machine_arn: str, name: str) -> str:
    """The ARN an execution named ``name`` has (or will have): known before it starts."""
    prefix, _, machine = state_machine_arn.partition(":stateMachine:")
    return f"{prefix}:execution:{machine}:{name}"


def start(state_machine_arn: str, name: str, payload: dict[str, Any]) -> str:
    """StartExecution is idempotent for the same name and input; a finished one with that name already ran."""
    try:
        response = client("stepfunctions").start_execution(
            stateMachineArn=state_machine_arn, name=name, input=json.dumps(payload, sort_keys=True)
        )
    except Exception as exc:
        if error_code(exc) == "ExecutionAlreadyExists":
            return execution_arn(state_machine_arn, name)
        raise translate(exc, "Step Functions") from exc
    return str(response["executionArn"])


# a task token that no longer waits: the execution moved on, timed out or ended
SPENT_TOKEN_CODES = frozenset({"InvalidToken", "TaskTimedOut", "TaskDoesNotExist"})


def send_task_success(task_token: str, output: dict[str, Any]) -> bool:
    """Resume the execution waiting on ``task_token``; False when nothing waits on it any more."""
    try:
        client("stepfunctions").send_task_success(taskToken=task_token, output=json.dumps(output, sort_keys=True))
    except Exception as exc:
        if error_code(exc) in SPENT_TOKEN_CODES:
            return False
        raise translate(exc, "Step Functions") from exc
    return True


def send_task_failure(task_token: str, error: str, cause: str) -> bool:
    """Fail the task waiting on ``task_token`` with ``error`` (its Catch routes on it); False when nothing waits."""
    try:
        client("stepfunctions").send_task_failure(taskToken=task_token, error=error, cause=cause[:32768])
    except Exception as exc:
        if error_code(exc) in SPENT_TOKEN_CODES:
            return False
        raise translate(exc, "Step Functions") from exc
    return True


def execution_status(execution: str) -> str | None:
    """RUNNING, SUCCEEDED, FAILED, TIMED_OUT or ABORTED; None when no execution of that ARN was ever started."""
    try:
        response = client("stepfunctions").describe_execution(executionArn=execution)
    except Exception as exc:
        if error_code(exc) == "ExecutionDoesNotExist":
            return None
        raise translate(exc, "Step Functions") from exc
    return str(response["status"])


def execution_outcome(execution: str) -> tuple[str | None, str | None]:
    """(status, error) of an execution: the error is the name it failed with (None unless FAILED); (None, None) when
    no execution of that ARN was ever started."""
    try:
        response = client("stepfunctions").describe_execution(executionArn=execution)
    except Exception as exc:
        if error_code(exc) == "ExecutionDoesNotExist":
            return None, None
        raise translate(exc, "Step Functions") from exc
    error = response.get("error")
    return str(response["status"]), str(error) if error is not None else None
