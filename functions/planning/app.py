"""Step Functions task: compute the exact next installation and record it once."""

from __future__ import annotations

from typing import Any

from packyard import operations
from packyard.observability import OPERATION_CORRELATION, lambda_entry
from packyard.tasks import parse_operation_task


@lambda_entry(OPERATION_CORRELATION)
def lambda_handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    task = parse_operation_task(event)
    return operations.plan_task(task.tenant, task.workspace, task.operation_id)
