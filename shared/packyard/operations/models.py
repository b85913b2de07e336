"""Operations: one per ``(tenant, workspace, Idempotency-Key)``, moving admitted → planned → (awaiting_consent →
planned) → committed → settled, or pending when deferred. Every transition is a conditional write fenced by the
operation's own ``version``."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from packyard.installations.models import Installation, ReleaseRef
from packyard.installations.scopes import Scope


class OperationKind(StrEnum):
    INSTALL = "install"
    UPDATE = "update"
    REPAIR = "repair"
    UNINSTALL = "uninstall"
    ROLLBACK = "rollback"
    ARCHIVE = "archive"
    RESTORE = "restore"
    PROMOTE = "promote"


class OperationState(StrEnum):
    ADMITTED = "admitted"
    PLANNED = "planned"
    AWAITING_CONSENT = "awaiting_consent"
    COMMITTED = "committed"
    PENDING = "pending"
    SETTLED = "settled"


class Intent(StrEnum):
    INSTALL_OR_SELECT = "install-or-select"
    CREATE_ONLY = "create-only"
    INSTALL_OR_REMINT = "install-or-remint"


class Action(StrEnum):
    """What the caller asked for, before the kind is derived from the installation's state."""

    PUT = "put"
    DELETE = "delete"
    ROLLBACK = "rollback"
    ARCHIVE = "archive"
    RESTORE = "restore"
    PROMOTE = "promote"


class Outcome(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    result: Literal["succeeded", "refused", "unconfirmed"]
    status: int | None = None
    code: str | None = None
    detail: str | None = None


class InstallRequest(BaseModel):
    """Body of ``PUT /v1/workspaces/{ws}/installations/{id}`` (and of ``…/preview``)."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True, defer_build=True)

    package: str = Field(min_length=1, max_length=64)
    version: str = Field(min_length=1, max_length=128)
    scope: Scope = Field(default_factory=Scope)
    config: dict[str, Any] = Field(
        default_factory=dict,
        description="free-form JSON object, at most Limits.max_config_bytes (16 KiB by default) as compact UTF-8 JSON",
    )
    intent: Intent = Intent.INSTALL_OR_SELECT
    origin: Literal["owner", "workflow"] = "owner"
    plan_digest: str | None = Field(default=None, alias="planDigest", pattern=r"^[0-9a-f]{64}$")

    @field_validator("config")
    @classmethod
    def _config_keys(cls, config: dict[str, Any]) -> dict[str, Any]:
        """Its size is bounded at admission (``drafting.check_copied``: 422 ``limit_exceeded``)."""
        if _has_empty_key(config):
            raise ValueError("config objects may not have an empty key")
        return config


def config_bytes(config: dict[str, Any]) -> int:
    """An install config's size as compact UTF-8 JSON (what ``Limits.max_config_bytes`` bounds)."""
    return len(json.dumps(config, separators=(",", ":"), ensure_ascii=False).encode())


def _has_empty_key(value: Any) -> bool:
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            if "" in item:
                return True
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return False


class ChangeRequest(BaseModel):
    """Body of ``DELETE …/installations/{id}`` and ``POST …/rollback`` (optional)."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True, defer_build=True)

    origin: Literal["owner", "workflow"] = "owner"
    plan_digest: str | None = Field(default=None, alias="planDigest", pattern=r"^[0-9a-f]{64}$")


class PromoteRequest(BaseModel):
    """Body of ``POST …/installations/{id}/promote``: the wider scope the installation moves to."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True, defer_build=True)

    scope: Scope
    origin: Literal["owner", "workflow"] = "owner"
    plan_digest: str | None = Field(default=None, alias="planDigest", pattern=r"^[0-9a-f]{64}$")


Decision = Literal["approve", "reject"]


class AskedPermission(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)

    kind: str
    resource: str = "*"


class Consent(BaseModel):
    """What an owner-origin operation asks approval for: the exact plan (by digest) and the permissions it adds;
    then, once decided, who decided what and when."""

    model_config = ConfigDict(populate_by_name=True, frozen=True, defer_build=True)

    permissions: list[AskedPermission]
    plan_digest: str = Field(alias="planDigest")
    requested_at: int | None = Field(default=None, alias="requestedAt")
    deadline: int | None = None
    decision: Decision | None = None
    decided_by: str | None = Field(default=None, alias="decidedBy")
    decided_at: int | None = Field(default=None, alias="decidedAt")


class Operation(BaseModel):
    model_config = ConfigDict(populate_by_name=True, frozen=True, defer_build=True)

    tenant: str
    workspace: str
    operation_id: str = Field(alias="operationId")
    installation_id: str = Field(alias="installationId")
    action: Action
    kind: OperationKind
    state: OperationState
    version: int = Field(ge=1, description="fencing token: every write is conditional on it")
    request_digest: str = Field(alias="requestDigest")
    intent_digest: str = Field(alias="intentDigest")
    intent: Intent = Intent.INSTALL_OR_SELECT
    origin: Literal["owner", "workflow"] = "owner"
    request: dict[str, Any] = Field(default_factory=dict)
    baseline: Installation | None = None
    target: ReleaseRef | None = None
    target_permissions: list[dict[str, Any]] = Field(default_factory=list, alias="targetPermissions")
    # False: the target came from the installation (rollback/restore/promote) and planning still checks that the
    # release is published and reads its permissions (one read it gets for free beside the operation's)
    target_checked: bool = Field(default=True, alias="targetChecked")
    plan: Installation | None = None
    outcome: Outcome | None = None
    note: str | None = None
    phase: str | None = None
    error_code: str | None = Field(default=None, alias="errorCode", max_length=120)
    attempt: int = 0
    # the execution (its ``$$.Execution.Id``) that claimed the operation in its Plan step; cleared when a new one is
    # to claim it (a resume, a decision, a sweep restart). Express does not deduplicate executions by name, so this
    # claim, fenced on ``version``, is what makes one execution the operation's.
    runner: str | None = Field(default=None, max_length=2048)
    # how many times the stuck-operation sweep started a new execution for it (at most ``sweeps.MAX_RESTARTS``)
    restarts: int = Field(default=0, ge=0)
    lease_until: int = Field(alias="leaseUntil")
    created_at: int = Field(alias="createdAt")
    updated_at: int = Field(alias="updatedAt")
    settled_at: int | None = Field(default=None, alias="settledAt")
    superseded_by: str | None = Field(default=None, alias="supersededBy")
    supersedes: str | None = None
    requested_by: str | None = Field(default=None, alias="requestedBy")
    consent: Consent | None = None

    @property
    def in_flight(self) -> bool:
        return self.state is not OperationState.SETTLED

    def execution_name(self) -> str:
        return self.operation_id if self.attempt == 0 else f"{self.operation_id}-{self.attempt}"


class Slot(BaseModel):
    """The installation's single in-flight slot. ``claim`` counts claims, so a takeover is a compare-and-set."""

    model_config = ConfigDict(populate_by_name=True, frozen=True, defer_build=True)

    operation_id: str | None = Field(default=None, alias="operationId")
    claim: int = 0
    lease_until: int = Field(default=0, alias="leaseUntil")
    intent_digest: str | None = Field(default=None, alias="intentDigest")
    pending: bool = False
    last_settled: str | None = Field(default=None, alias="lastSettled")
    last_settled_at: int | None = Field(default=None, alias="lastSettledAt")
    # the installation's version as the last commit that freed the slot left it (0: none yet); None on slots
    # written before it was kept. Admission tells a stale read of the installation by it (docs/decisions.md,
    # "Commit settles; ...; admission without the installation check")
    installation_version: int | None = Field(default=None, alias="installationVersion")


class Supersession(BaseModel):
    """The decision to settle the slot's holder in favour of a new operation: how it settles, and until when the
    settled holder is retained."""

    model_config = ConfigDict(frozen=True, defer_build=True)

    operation_id: str
    outcome: Outcome
    retain_until: int


@dataclass(frozen=True)
class Preview:
    """What an operation would do now: its kind and plan, or (settled at admission) why there is none."""

    kind: OperationKind
    plan: Installation | None
    plan_digest: str | None
    note: str | None = None
    # permissions (kind, resource) the plan would ask an owner to approve
    consent: list[tuple[str, str]] = field(default_factory=list)
