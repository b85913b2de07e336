"""Step Functions task: compare-and-put the planned installation on its baseline version."""

from __future__ import annotations

from typing import Any

from packyard import operations
from packyard.errors import InvalidRequest
from packyard.observability import OPERATION_CORRELATION, lambda_entry
from packyard.tasks import parse_operation_task


@lambda_entry(OPERATION_CORRELATION)
def lambda_handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    task = parse_operation_task(event)
    if not task.plan or "version" not in task.plan:
        raise InvalidRequest("commit needs the planning step's output at $.plan")
    return operations.commit_task(task.tenant, task.workspace, task.operation_id, int(task.plan["version"]))
