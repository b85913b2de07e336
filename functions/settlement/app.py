"""Step Functions task (also every Catch's target): write the terminal outcome and free the in-flight slot."""

from __future__ import annotations

from typing import Any

from packyard.observability import OPERATION_CORRELATION, lambda_entry
from packyard.operations import settlement
from packyard.workflow_inputs import OperationTask, parse


@lambda_entry(OPERATION_CORRELATION, settings=("table_name",))
def lambda_handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    task = parse(OperationTask, event)
    return settlement.settle_task(
        task.tenant,
        task.workspace,
        task.installation_id,
        task.operation_id,
        task.error,
        attempt=task.attempt,
        runner=task.execution,
    )
