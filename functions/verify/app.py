"""Step Functions task: stream the stored archive once and verify every byte against the manifest."""

from __future__ import annotations

from typing import Any

from packyard import uploads
from packyard.observability import UPLOAD_CORRELATION, lambda_entry
from packyard.tasks import parse_upload_task


@lambda_entry(UPLOAD_CORRELATION)
def lambda_handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    task = parse_upload_task(event)
    return uploads.verify(task.tenant, task.upload_id, task.token)
