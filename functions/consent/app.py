"""Step Functions task: record that the operation awaits consent (the execution then ends; a decision starts the
next one)."""

from __future__ import annotations

from typing import Any

from packyard.consent import waiting
from packyard.observability import OPERATION_CORRELATION, lambda_entry
from packyard.workflow_inputs import OperationTask, parse


@lambda_entry(OPERATION_CORRELATION, settings=("table_name",))
def lambda_handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    task = parse(OperationTask, event)
    return waiting.await_consent(task.tenant, task.workspace, task.operation_id, task.execution)
