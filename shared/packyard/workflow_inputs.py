"""What the state machines hand their Lambda tasks: the state input, validated before the domain sees it.

(Step Functions "tasks", not the ``task`` scope of an installation.)
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from packyard.errors import InvalidRequest

Input = TypeVar("Input", bound=BaseModel)


def parse(model: type[Input], event: dict[str, Any]) -> Input:
    """The state input as ``model``; an input that does not fit is ``invalid_request`` (a bug in the ASL)."""
    try:
        return model.model_validate(event)
    except ValidationError as exc:
        raise InvalidRequest(f"state input failed validation as {model.__name__}: {exc.error_count()} errors") from exc


class UploadTask(BaseModel):
    """What the publish state machine carries: the upload and its per-attempt token, plus what earlier states added."""

    model_config = ConfigDict(extra="ignore", populate_by_name=True)

    tenant: str = Field(min_length=1)
    upload_id: str = Field(alias="uploadId", min_length=1)
    token: str = Field(min_length=1)
    verify: dict[str, Any] | None = None
    error: dict[str, Any] | None = None


class ReleaseKey(BaseModel):
    model_config = ConfigDict(extra="forbid")

    package: str = Field(min_length=1, max_length=64)
    version: str = Field(min_length=1, max_length=128)


class Runner(BaseModel):
    """Which execution runs the task (``$.runner``, set from ``$$.Execution.Id`` by the first state)."""

    model_config = ConfigDict(extra="ignore")

    execution: str = Field(min_length=1, max_length=2048)


class OperationTask(BaseModel):
    """What the install state machine carries (earlier states add their results, e.g. ``plan``, ``error``)."""

    model_config = ConfigDict(extra="ignore", populate_by_name=True)

    tenant: str = Field(min_length=1)
    workspace: str = Field(min_length=1)
    installation_id: str = Field(alias="installationId", min_length=1)
    operation_id: str = Field(alias="operationId", min_length=1)
    attempt: int | None = Field(
        default=None,
        ge=0,
        description="the operation's attempt this execution runs (absent: started before it was set)",
    )
    release: ReleaseKey | None = Field(default=None, description="a target release planning still has to check")
    runner: Runner | None = Field(default=None, description="the execution running it (absent: invoked directly)")
    error: dict[str, Any] | None = None

    @property
    def execution(self) -> str | None:
        """The id of the execution running this task, which claims the operation (None: not run by one)."""
        return self.runner.execution if self.runner else None


class PlanningResult(BaseModel):
    """What the planning task returned (at ``$.plan``): the operation version the plan was recorded at."""

    model_config = ConfigDict(extra="ignore")

    version: int = Field(ge=1)


class CommitTask(OperationTask):
    """Commit needs the planning step's output at ``$.plan``."""

    plan: PlanningResult


class SweepTask(BaseModel):
    """One page of one shard of a sweep (the maintenance state machine's Map item): ``time`` is the scheduled
    event's time (RFC 3339), the sweep's "now"; ``cursor``, ``counts`` and ``pages`` come from the previous page."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    kind: Literal["upload", "operation", "blob", "job"]
    shard: int = Field(ge=0, lt=1024)
    time: datetime
    cursor: str | None = Field(default=None, max_length=4096)
    counts: dict[str, int] = Field(default_factory=dict)
    pages: int = Field(default=0, ge=0)  # pages this item swept in this run (the state machine bounds it)

    @property
    def now(self) -> int:
        moment = self.time if self.time.tzinfo else self.time.replace(tzinfo=UTC)
        return int(moment.timestamp())


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
