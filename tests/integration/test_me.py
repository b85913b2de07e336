"""``GET /v1/me`` answers the principal as Packyard read it from the token (any valid token, no scope), so an
operator wiring an identity provider sees what the claim mapping made of it; a token the mapping refuses is 401
naming the claim there too."""

from __future__ import annotations

import pytest

from devstack.caller import Caller
from devstack.server import claims_as_api_gateway_passes_them
from packyard import config


def test_given_a_token_with_no_scope_then_me_answers_what_was_read(api) -> None:
    nobody = Caller(api, "t-acme", subject="jane", scopes=(), actor="workflow")

    answer = nobody.get("/v1/me")

    assert answer.status == 200, answer.body
    assert answer.body == {
        "tenant": "t-acme",
        "subject": "jane",
        "actor": "workflow",
        "scopes": [],
        "permissions": [],
    }


def test_given_an_okta_token_as_api_gateway_passes_it_then_me_shows_its_scopes(
    api, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in {"SCOPE_CLAIM": "scp", "SCOPE_CLAIM_FORM": "array", "ACTOR_CLAIM": "cid"}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("ACTOR_OWNER_VALUES", "0oacli")
    config.reset()
    try:
        claims = claims_as_api_gateway_passes_them(
            {"tenant": "acme", "sub": "jane@example.com", "cid": "0oacli", "scp": ["openid", "packages:read"]}
        )
        answer = api.request("GET", "/v1/me", claims=claims)
        refused = api.request("GET", "/v1/me", claims={**claims, "scp": "packages:read"})
    finally:
        monkeypatch.undo()
        config.reset()

    assert answer.status == 200, answer.body
    assert answer.body == {
        "tenant": "acme",
        "subject": "jane@example.com",
        "actor": "owner",
        "scopes": ["openid", "packages:read"],
        "permissions": ["packages:read"],
    }
    assert (refused.status, refused.body["code"], refused.body["claim"]) == (401, "unauthorized", "scp")


def test_given_no_tenant_claim_then_me_is_unauthorized_naming_it(api) -> None:
    answer = api.request("GET", "/v1/me", claims={"sub": "jane", "scope": ""})
    assert (answer.status, answer.body["code"], answer.body["claim"]) == (401, "unauthorized", "tenant")
