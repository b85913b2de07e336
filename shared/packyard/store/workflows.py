"""Step Functions: start executions named after the thing they work on. The workflows are Express: a start is never
deduplicated by name (every call is a new run) and no run can be looked up, so the domain fences every run on its
own records instead (see ``operations.workflow``)."""

from __future__ import annotations

import json
from typing import Any

from packyard.store.aws import client, error_code, translate


def execution_arn(state_machine_arn: str, name: str) -> str:
    """The standard-form ARN of the runs named ``name`` (known before any starts; an Express run's own ARN is
    ``…:express:<machine>:<name>:<uuid>``)."""
    prefix, _, machine = state_machine_arn.partition(":stateMachine:")
    return f"{prefix}:execution:{machine}:{name}"


def start(state_machine_arn: str, name: str, payload: dict[str, Any]) -> str:
    """Start a run named ``name`` (an Express machine starts a new one on every call; a Standard one would answer
    ExecutionAlreadyExists for a name it ran, read here as the run it is)."""
    try:
        response = client("stepfunctions").start_execution(
            stateMachineArn=state_machine_arn, name=name, input=json.dumps(payload, sort_keys=True)
        )
    except Exception as exc:
        if error_code(exc) == "ExecutionAlreadyExists":
            return execution_arn(state_machine_arn, name)
        raise translate(exc, "Step Functions") from exc
    return str(response["executionArn"])
