"""Step Functions task: write the blobs and, in one transaction, the release, the upload's end and the ledger."""

from __future__ import annotations

from typing import Any

from packyard.observability import UPLOAD_CORRELATION, lambda_entry
from packyard.publishing import publication
from packyard.workflow_inputs import UploadTask, parse


@lambda_entry(UPLOAD_CORRELATION, settings=("table_name", "bucket_name"))
def lambda_handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    task = parse(UploadTask, event)
    return publication.publish(task.tenant, task.upload_id, task.token, task.verify or {})
