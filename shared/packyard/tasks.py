"""Input models of the Step Functions tasks: the state input is validated before the domain sees it."""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from packyard.errors import InvalidRequest


class UploadTask(BaseModel):
    """What the publish state machine carries: the upload and its per-attempt token, plus what earlier states added."""

    model_config = ConfigDict(extra="ignore", populate_by_name=True)

    tenant: str = Field(min_length=1)
    upload_id: str = Field(alias="uploadId", min_length=1)
    token: str = Field(min_length=1)
    verify: dict[str, Any] | None = None
    error: dict[str, Any] | None = None


def parse_upload_task(event: dict[str, Any]) -> UploadTask:
    try:
        return UploadTask.model_validate(event)
    except ValidationError as exc:
        raise InvalidRequest(f"task input failed validation: {exc.error_count()} errors") from exc


class OperationTask(BaseModel):
    """What the install state machine carries, plus what earlier states added (plan, commit, error)."""

    model_config = ConfigDict(extra="ignore", populate_by_name=True)

    tenant: str = Field(min_length=1)
    workspace: str = Field(min_length=1)
    installation_id: str = Field(alias="installationId", min_length=1)
    operation_id: str = Field(alias="operationId", min_length=1)
    plan: dict[str, Any] | None = None
    commit: dict[str, Any] | None = None
    error: dict[str, Any] | None = None


def parse_operation_task(event: dict[str, Any]) -> OperationTask:
    try:
        return OperationTask.model_validate(event)
    except ValidationError as exc:
        raise InvalidRequest(f"task input failed validation: {exc.error_count()} errors") from exc


def caught_error_message(error: dict[str, Any] | None, limit: int = 1000) -> str:
    """The ``errorMessage`` inside a Catch's ``$.error.Cause`` (a Lambda error payload as JSON, or plain text)."""
    cause = (error or {}).get("Cause")
    if not isinstance(cause, str):
        return ""
    try:
        parsed = json.loads(cause)
    except ValueError:
        return cause[:limit]
    return str(parsed.get("errorMessage", ""))[:limit] if isinstance(parsed, dict) else cause[:limit]
