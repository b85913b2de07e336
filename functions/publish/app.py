"""Step Functions task: write the blobs and, in one transaction, the release, the upload's end and the ledger."""

from __future__ import annotations

from typing import Any

from packyard import uploads
from packyard.observability import UPLOAD_CORRELATION, lambda_entry
from packyard.tasks import parse_upload_task


@lambda_entry(UPLOAD_CORRELATION)
def lambda_handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    task = parse_upload_task(event)
    return uploads.publish(task.tenant, task.upload_id, task.token, task.verify or {})
