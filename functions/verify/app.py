"""Step Functions task: stream the stored archive once and verify every byte against the manifest."""

from __future__ import annotations

from typing import Any

from packyard.observability import UPLOAD_CORRELATION, lambda_entry
from packyard.publishing import verification
from packyard.workflow_inputs import UploadTask, parse


@lambda_entry(UPLOAD_CORRELATION, settings=("table_name", "bucket_name"))
def lambda_handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    task = parse(UploadTask, event)
    return verification.verify(task.tenant, task.upload_id, task.token)
