"""Authority: who calls (the principal, read only from the verified JWT), which permission each route needs, and
the origin an operation runs with (a body may lower its own authority, never raise it)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum
from typing import Literal

from packyard.config import scope_names
from packyard.errors import Forbidden

Origin = Literal["owner", "workflow"]
# keys are built from it: no '#', '/', whitespace or anything outside ASCII letters, digits, '.', '_', '-'
TENANT_ID = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9._-]{0,126}[A-Za-z0-9])?", re.ASCII)


class Permission(StrEnum):
    """What a route needs. The value is the default scope name (what the OpenAPI document shows); the scope a
    deployment actually checks is configurable (``config.ScopeNames``, ``PACKYARD_SCOPE_<NAME>``)."""

    READ_PACKAGES = "packages:read"
    PUBLISH = "packages:publish"
    YANK = "packages:yank"
    READ_WORKSPACES = "workspaces:read"
    CHANGE_INSTALLATIONS = "installations:write"
    APPROVE = "approvals:write"
    READ_USAGE = "usage:read"

    @property
    def scope(self) -> str:
        return str(getattr(scope_names(), self.name.lower()))


class ActorKind(StrEnum):
    OWNER = "owner"
    WORKFLOW = "workflow"


@dataclass(frozen=True)
class Principal:
    """The caller: its tenant, subject, scopes and whether it is a person (owner) or an automation (workflow)."""

    tenant: str
    subject: str
    scopes: frozenset[str]
    actor: ActorKind

    def require(self, permission: Permission) -> Principal:
        """This principal, if it holds ``permission``'s scope; else 403 ``forbidden`` (before anything is read, so
        the answer is the same whether or not the addressed thing exists)."""
        if permission.scope not in self.scopes:
            raise Forbidden(f"this route needs the scope {permission.scope!r}", requiredScope=permission.scope)
        return self

    def origin(self, asked: Origin = "owner") -> Origin:
        """The origin an operation runs with: a workflow principal's operations are workflow-origin whatever the
        body says; an owner may lower itself to workflow."""
        if self.actor is ActorKind.WORKFLOW:
            return "workflow"
        return asked


def is_tenant_id(value: str) -> bool:
    return TENANT_ID.fullmatch(value) is not None
