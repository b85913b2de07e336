"""Grants: the permissions an installation holds, and the pure rules for what a release's declared permissions
change. Widening (a permission not granted yet, or a grant used above its scope ceiling) needs an owner's consent;
a workflow may only keep or narrow what is granted."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from packyard.installations.scopes import ScopeKind, is_wider, widest

Origin = Literal["owner", "workflow"]
PermissionKey = tuple[str, str]
PermissionKind = Literal["api_read", "api_write", "events", "state", "network"]
"""The kinds a manifest declares (``publishing.manifest.PermissionKind``, the same literal, kept here too so the
workspace views need not import the manifest module)."""


class Grant(BaseModel):
    """A permission granted to an installation: kind + resource, who granted it, and the widest scope it was
    approved for (its ceiling): promoting the installation above the ceiling re-reviews the grant."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: PermissionKind
    resource: str = "*"
    origin: Origin = "owner"
    ceiling: ScopeKind = ScopeKind.WORKSPACE

    def key(self) -> PermissionKey:
        return (self.kind, self.resource)


def declared_keys(declared: list[dict[str, Any]]) -> set[PermissionKey]:
    """A release's declared permissions as (kind, resource) pairs."""
    return {(p["kind"], p.get("resource", "*")) for p in declared}


def widens(current: list[Grant], declared: list[dict[str, Any]]) -> list[PermissionKey]:
    """Permissions the release declares that the installation has not been granted."""
    granted = {g.key() for g in current}
    return sorted(declared_keys(declared) - granted)


def above_ceiling(current: list[Grant], declared: list[dict[str, Any]], scope: ScopeKind) -> list[PermissionKey]:
    """Granted permissions the release still declares whose ceiling is narrower than ``scope``."""
    wanted = declared_keys(declared)
    return sorted(g.key() for g in current if g.key() in wanted and is_wider(scope, g.ceiling))


def needing_consent(current: list[Grant], declared: list[dict[str, Any]], scope: ScopeKind) -> list[PermissionKey]:
    """What an owner must approve before the release may run with ``scope``: new permissions and grants used above
    their ceiling. Empty: the plan only keeps or narrows what is granted."""
    return sorted(set(widens(current, declared)) | set(above_ceiling(current, declared, scope)))


def next_grants(current: list[Grant], declared: list[dict[str, Any]], origin: Origin, scope: ScopeKind) -> list[Grant]:
    """Owners grant what the release declares, each up to ``scope`` (a ceiling never shrinks); a workflow may only
    keep (or narrow to) what is already granted."""
    wanted = declared_keys(declared)
    if origin == "owner":
        ceilings = {g.key(): g.ceiling for g in current}
        granted = (
            Grant.model_validate(
                {"kind": k, "resource": r, "origin": "owner", "ceiling": widest(scope, ceilings.get((k, r), scope))}
            )
            for k, r in wanted
        )
        return sorted(granted, key=lambda g: g.key())
    return sorted((g for g in current if g.key() in wanted), key=lambda g: g.key())
