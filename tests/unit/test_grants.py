"""Grants: what a release's declared permissions grant (owner: exactly those; workflow: only keep or narrow), and
which declared permissions widen what is granted."""

from __future__ import annotations

from typing import Any

import pytest

from packyard.installations.grants import Grant, next_grants, widens
from packyard.installations.scopes import ScopeKind


def grant(kind: Any, resource: str = "*", origin: Any = "owner") -> Grant:
    return Grant(kind=kind, resource=resource, origin=origin)


def perm(kind: str, resource: str | None = None) -> dict[str, Any]:
    return {"kind": kind} if resource is None else {"kind": kind, "resource": resource}


@pytest.mark.parametrize(
    ("current", "declared", "origin", "expected"),
    [
        pytest.param(
            [],
            [perm("state"), perm("network", "b.example"), perm("api_read"), perm("network", "a.example")],
            "owner",
            [grant("api_read"), grant("network", "a.example"), grant("network", "b.example"), grant("state")],
            id="owner: exactly what is declared, sorted by kind then resource",
        ),
        pytest.param(
            [grant("events"), grant("api_write")],
            [perm("api_read")],
            "owner",
            [grant("api_read")],
            id="owner: undeclared current grants are dropped",
        ),
        pytest.param(
            [grant("api_read", origin="workflow")],
            [perm("api_read")],
            "owner",
            [grant("api_read", origin="owner")],
            id="owner: every grant it makes has origin owner",
        ),
        pytest.param(
            [], [perm("api_read"), perm("api_read", "*")], "owner", [grant("api_read")], id="owner: duplicates collapse"
        ),
        pytest.param([], [perm("events")], "owner", [grant("events", "*")], id="owner: resource defaults to *"),
        pytest.param([grant("state")], [], "owner", [], id="owner: nothing declared grants nothing"),
        pytest.param(
            [grant("state"), grant("api_read")],
            [perm("api_read")],
            "workflow",
            [grant("api_read")],
            id="workflow: keeps only the granted ones still declared",
        ),
        pytest.param(
            [grant("state"), grant("api_read")],
            [perm("state"), perm("api_read")],
            "workflow",
            [grant("api_read"), grant("state")],
            id="workflow: keeps all when all still declared, sorted",
        ),
        pytest.param([], [perm("api_read")], "workflow", [], id="workflow: never adds a grant"),
        pytest.param(
            [grant("network", "a.example")],
            [perm("network", "b.example")],
            "workflow",
            [],
            id="workflow: another resource of the same kind is not kept",
        ),
        pytest.param(
            [grant("api_read", origin="workflow")],
            [perm("api_read")],
            "workflow",
            [grant("api_read", origin="workflow")],
            id="workflow: a kept grant keeps its origin",
        ),
    ],
)
def test_given_current_grants_when_a_release_declares_permissions_then_next_grants_are(
    current, declared, origin, expected
):
    assert next_grants(current, declared, origin, ScopeKind.WORKSPACE) == expected


@pytest.mark.parametrize(
    ("current", "declared", "expected"),
    [
        pytest.param(
            [],
            [perm("state"), perm("api_read")],
            [("api_read", "*"), ("state", "*")],
            id="nothing granted: all, sorted",
        ),
        pytest.param([grant("api_read"), grant("state")], [perm("state"), perm("api_read")], [], id="all granted"),
        pytest.param(
            [grant("api_read")],
            [perm("api_read"), perm("network", "a.example")],
            [("network", "a.example")],
            id="partly granted: only the missing one",
        ),
        pytest.param([grant("api_read"), grant("state")], [perm("api_read")], [], id="narrowing is not widening"),
        pytest.param([grant("api_read", "*")], [perm("api_read")], [], id="undeclared resource means *"),
        pytest.param(
            [grant("api_read", "*")],
            [perm("api_read", "repo-1")],
            [("api_read", "repo-1")],
            id="a * grant does not cover a named resource (exact match)",
        ),
        pytest.param(
            [], [perm("events"), perm("events", "*"), perm("events")], [("events", "*")], id="duplicates listed once"
        ),
        pytest.param([grant("api_read")], [], [], id="nothing declared"),
    ],
)
def test_given_current_grants_when_a_release_declares_permissions_then_widens_lists_the_ungranted(
    current, declared, expected
):
    assert widens(current, declared) == expected
