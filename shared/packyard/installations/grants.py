"""Grants: the permissions an installation holds, and the pure rules for what a release's declared permissions
change (widening needs consent; a workflow may only keep or narrow)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

Origin = Literal["owner", "workflow"]


class Grant(BaseModel):
    """A permission granted to an installation: kind + resource, with where it came from."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: Literal["api_read", "api_write", "events", "state", "network"]
    resource: str = "*"
    origin: Origin = "owner"

    def key(self) -> tuple[str, str]:
        return (self.kind, self.resource)


def declared_keys(declared: list[dict[str, Any]]) -> set[tuple[str, str]]:
    """A release's declared permissions as (kind, resource) pairs."""
    return {(p["kind"], p.get("resource", "*")) for p in declared}


def next_grants(current: list[Grant], declared: list[dict[str, Any]], origin: Origin) -> list[Grant]:
    """Owners grant what the release declares; a workflow may only keep (or narrow to) what is already granted."""
    wanted = declared_keys(declared)
    if origin == "owner":
        granted = (Grant.model_validate({"kind": k, "resource": r, "origin": "owner"}) for k, r in wanted)
        return sorted(granted, key=lambda g: g.key())
    return sorted((g for g in current if g.key() in wanted), key=lambda g: g.key())


def widens(current: list[Grant], declared: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """Permissions the release declares that the installation has not been granted."""
    granted = {g.key() for g in current}
    return sorted(declared_keys(declared) - granted)
