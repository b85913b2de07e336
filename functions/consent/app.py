"""Step Functions task (``.waitForTaskToken``): record that the operation awaits consent, with its task token."""

from __future__ import annotations

from typing import Any

from packyard.consent import waiting
from packyard.observability import OPERATION_CORRELATION, lambda_entry
from packyard.workflow_inputs import ConsentTask, parse


@lambda_entry(OPERATION_CORRELATION, settings=("table_name",))
def lambda_handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    task = parse(ConsentTask, event)
    return waiting.await_consent(task.tenant, task.workspace, task.operation_id, task.task_token)
