"""Step Functions task: compare-and-put the planned installation on its baseline version, settling the operation."""

from __future__ import annotations

from typing import Any

from packyard.observability import OPERATION_CORRELATION, lambda_entry
from packyard.operations import commit
from packyard.workflow_inputs import CommitTask, parse


@lambda_entry(OPERATION_CORRELATION, settings=("table_name",))
def lambda_handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    task = parse(CommitTask, event)
    return commit.commit_task(
        task.tenant, task.workspace, task.operation_id, task.plan.version, installation_id=task.installation_id
    )
