"""Step Functions task (the Catch target): record why, release the reservation, publish nothing."""

from __future__ import annotations

from typing import Any

from packyard.observability import UPLOAD_CORRELATION, lambda_entry
from packyard.publishing import rejection
from packyard.workflow_inputs import UploadTask, parse


@lambda_entry(UPLOAD_CORRELATION, settings=("table_name", "bucket_name"))
def lambda_handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    task = parse(UploadTask, event)
    return rejection.reject(task.tenant, task.upload_id, task.token, task.verify, task.error)
