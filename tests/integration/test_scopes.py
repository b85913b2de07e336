"""Scopes gate every route: a token without the route's scope gets 403 ``forbidden`` (problem+json) before anything
is read or written, the same answer whether or not the addressed thing exists."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from devstack.caller import ALL_SCOPES, Caller
from packyard_cli.build import build_from_files

DOCUMENT = json.loads((Path(__file__).resolve().parents[2] / "docs" / "openapi.json").read_text())
ROUTES = [
    (method.upper(), path, operation["security"][0]["oauth2"][0])
    for path, operations in DOCUMENT["paths"].items()
    for method, operation in operations.items()
    if operation["security"][0]["oauth2"]  # GET /v1/me needs a valid token only (test_me.py)
]
AUTHENTICATED_ONLY = [
    (method.upper(), path)
    for path, operations in DOCUMENT["paths"].items()
    for method, operation in operations.items()
    if operation["security"] == [{"oauth2": []}]
]
IDS = {
    "package": "hello",
    "version": "1.0.0",
    "upload_id": "0" * 32,
    "workspace": "ws-1",
    "installation_id": "hello",
    "operation_id": "op-" + "0" * 32,
    "file_path": "SKILL.md",
}


def route_body(template: str) -> dict[str, Any]:
    """A body the route's validation accepts, so that only the scope check can refuse the call."""
    if template.endswith("/uploads"):
        return {"manifest": {"files": []}, "archive": {"size": 1, "sha256": "0" * 64}}
    if template.endswith("/promote"):
        return {"scope": {"kind": "workspace"}}
    return {"package": "hello", "version": "1.0.0", "decision": "approve", "planDigest": "0" * 64}


def _path(template: str) -> str:
    """The documented path with every parameter filled from ``IDS``; a parameter ``IDS`` lacks (a new route's) fails
    here rather than being sent as the literal ``{name}``."""
    for name, value in IDS.items():
        template = template.replace("{" + name + "}", value)
    assert "{" not in template, f"{template}: add its path parameter to IDS"
    return template


def test_every_route_declares_exactly_one_scope() -> None:
    assert len(ROUTES) >= 20
    assert {scope for _, _, scope in ROUTES} <= set(ALL_SCOPES)
    assert AUTHENTICATED_ONLY == [("GET", "/v1/me")]  # the only route without a scope


@pytest.mark.parametrize(("method", "path", "scope"), ROUTES, ids=[f"{m} {p}" for m, p, _ in ROUTES])
def test_given_a_token_without_the_routes_scope_then_forbidden_and_nothing_changes(
    api, acme: Caller, method: str, path: str, scope: str
) -> None:
    acme.publish("hello", "1.0.0", build_from_files({"SKILL.md": b"v1\n"}))
    before = acme.get("/v1/packages/hello/versions/1.0.0").body
    lacking = Caller(api, "t-acme", scopes=tuple(s for s in ALL_SCOPES if s != scope))
    headers = {"Idempotency-Key": "k-scope", "If-Match": '"1"'}

    answer = lacking.api.request(method, _path(path), claims=lacking.claims, body=route_body(path), headers=headers)

    assert answer.status == 403, answer.body
    assert answer.headers["content-type"] == "application/problem+json"
    assert (answer.body["code"], answer.body["requiredScope"]) == ("forbidden", scope)
    assert acme.get("/v1/packages/hello/versions/1.0.0").body == before
    assert acme.get("/v1/workspaces/ws-1/installations").body["items"] == []


def test_given_a_missing_id_without_the_scope_then_the_same_forbidden_answer(api, acme: Caller) -> None:
    acme.publish("hello", "1.0.0", build_from_files({"SKILL.md": b"v1\n"}))
    reader = Caller(api, "t-acme", scopes=("workspaces:read",))
    existing = reader.delete("/v1/packages/hello/versions/1.0.0")
    missing = reader.delete("/v1/packages/nope/versions/9.9.9")
    assert existing.status == missing.status == 403
    assert existing.body == missing.body


def test_given_a_tenant_claim_that_is_not_a_tenant_id_then_unauthorized(api) -> None:
    for tenant in ("a#b", "x/y", " t ", "t\\n", "é"):
        answer = Caller(api, tenant).get("/v1/packages")
        assert (answer.status, answer.body["code"]) == (401, "unauthorized"), tenant
