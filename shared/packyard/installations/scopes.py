"""Scopes: where an installation applies, and how wide each kind is (a grant's ceiling is a scope kind)."""

from __future__ import annotations

from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field, model_validator


class ScopeKind(StrEnum):
    """From narrowest to widest: task, session, repository, workspace."""

    WORKSPACE = "workspace"
    TASK = "task"
    SESSION = "session"
    REPOSITORY = "repository"


class Scope(BaseModel):
    """Where an installation applies. ``workspace`` takes no id; the others take exactly one."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: ScopeKind = ScopeKind.WORKSPACE
    id: str | None = Field(default=None, min_length=1, max_length=128, pattern=r"^[A-Za-z0-9._:-]+$")

    @model_validator(mode="after")
    def _ids_match_kind(self) -> Scope:
        if self.kind is ScopeKind.WORKSPACE and self.id is not None:
            raise ValueError("a workspace scope takes no id")
        if self.kind is not ScopeKind.WORKSPACE and self.id is None:
            raise ValueError(f"a {self.kind} scope needs an id")
        return self


BREADTH = {ScopeKind.TASK: 0, ScopeKind.SESSION: 1, ScopeKind.REPOSITORY: 2, ScopeKind.WORKSPACE: 3}


def is_wider(kind: ScopeKind, than: ScopeKind) -> bool:
    return BREADTH[kind] > BREADTH[than]


def widest(*kinds: ScopeKind) -> ScopeKind:
    return max(kinds, key=lambda kind: BREADTH[kind])
