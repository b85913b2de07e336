"""Step Functions task: claim the operation for this execution, compute the exact next installation and record it
once."""

from __future__ import annotations

from typing import Any

from packyard.observability import OPERATION_CORRELATION, lambda_entry
from packyard.operations import planning
from packyard.workflow_inputs import OperationTask, parse


@lambda_entry(OPERATION_CORRELATION, settings=("table_name",))
def lambda_handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    task = parse(OperationTask, event)
    release = (task.release.package, task.release.version) if task.release else None
    return planning.plan_task(
        task.tenant, task.workspace, task.operation_id, release, runner=task.execution, attempt=task.attempt
    )
