"""Step Functions: start executions whose name is the id of the thing they work on, so a repeat is harmless."""

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
