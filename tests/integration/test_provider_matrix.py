"""The provider matrix: tokens of each identity provider's documented shape (tests/unit/test_claim_mapping.py,
sources in docs/decisions.md), their claims flattened exactly as API Gateway's HTTP API JWT authorizer passes them
(devstack.server.claims_as_api_gateway_passes_them, what the local server does), with the provider's claim mapping
as the template would set it: every route is allowed with its scope (never 401/403) and 403 ``forbidden`` without
it, and the owner/workflow distinction is what the provider's actor claim says."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from devstack.api import LocalApi, template_routes
from devstack.caller import ALL_SCOPES
from devstack.server import claims_as_api_gateway_passes_them
from packyard import config
from tests.integration.test_scopes import AUTHENTICATED_ONLY, IDS, ROUTES, _path, route_body

PREFIX = "https://packyard.example/"
ENTRA_TENANT = "72f988bf-86f1-41af-91ab-2d7cd011db47"


def _cognito(scopes: list[str], owner: bool) -> dict[str, Any]:
    client = "1example23456789cliclient0" if owner else "2example23456789machine000"
    return {
        "sub": "aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee" if owner else client,
        "token_use": "access",
        "client_id": client,
        "scope": " ".join(["openid", *(PREFIX + s for s in scopes)]),
        **({"username": "jane", "cognito:groups": ["admins"]} if owner else {}),
        "tenant": "acme",  # added by the pre token generation trigger
        "exp": 1_900_000_000,
    }


def _auth0(scopes: list[str], owner: bool) -> dict[str, Any]:
    return {
        "sub": "auth0|5fe435b5cbbc85006b071eba" if owner else "FT6TMjfHI2lkxjpAbG5tCjEdiEkyvMCA@clients",
        "aud": ["https://packyard.example", "https://example.eu.auth0.com/userinfo"] if owner else PREFIX,
        "azp": "FT6TMjfHI2lkxjpAbG5tCjEdiEkyvMCA",
        "scope": " ".join(scopes),
        **({} if owner else {"gty": "client-credentials"}),
        "https://packyard.example/tenant": "acme",
    }


def _okta(scopes: list[str], owner: bool) -> dict[str, Any]:
    return {
        "ver": 1,
        "cid": "0oacli" if owner else "0oamachine",
        **({"uid": "00uid4BxXw6I6TV4m0g3"} if owner else {}),
        "scp": scopes,
        "sub": "jane@example.com" if owner else "0oamachine",
        "tenant": "acme",
    }


def _entra(scopes: list[str], owner: bool) -> dict[str, Any]:
    granted = {"scp": " ".join(scopes)} if owner else {"roles": scopes}
    return {
        "aud": "api://packyard",
        "idtyp": "user" if owner else "app",
        "oid": "690222be-ff1a-4d56-abd1-7e4f7d38e474",
        "sub": "pairwise-subject-per-app",
        "tid": ENTRA_TENANT,
        "ver": "2.0",
        **granted,
    }


def _keycloak(scopes: list[str], owner: bool) -> dict[str, Any]:
    return {
        "sub": "f:1c2a:jane" if owner else "5b7e2c1d-0000-4000-8000-00000000beef",
        "azp": "packyard-cli" if owner else "packyard-ci",
        "realm_access": {"roles": ["default-roles-packyard"]},
        "scope": " ".join(["profile", "email", *scopes]),
        "preferred_username": "jane" if owner else "service-account-packyard-ci",
        "tenant": "acme",
    }


PROVIDERS: dict[str, tuple[dict[str, str], Callable[[list[str], bool], dict[str, Any]], str]] = {
    "cognito": (
        {
            "SCOPE_PREFIX": PREFIX,
            "ACTOR_CLAIM": "client_id",
            "ACTOR_OWNER_VALUES": "1example23456789cliclient0",
            "ACTOR_WORKFLOW_VALUES": "2example23456789machine000",
        },
        _cognito,
        "acme",
    ),
    "auth0": (
        {
            "TENANT_CLAIM": "https://packyard.example/tenant",
            "ACTOR_CLAIM": "gty",
            "ACTOR_OWNER_VALUES": "password,refresh_token",
            "ACTOR_WORKFLOW_VALUES": "client-credentials",
            "ACTOR_WHEN_ABSENT": "owner",
        },
        _auth0,
        "acme",
    ),
    "okta": (
        {
            "SCOPE_CLAIM": "scp",
            "SCOPE_CLAIM_FORM": "array",
            "ACTOR_CLAIM": "cid",
            "ACTOR_OWNER_VALUES": "0oacli",
            "ACTOR_WORKFLOW_VALUES": "0oamachine",
        },
        _okta,
        "acme",
    ),
    "entra": (
        {
            "TENANT_CLAIM": "tid",
            "SUBJECT_CLAIM": "oid",
            "SCOPE_CLAIM": "scp,roles",
            "SCOPE_CLAIM_FORM": "string,array",
            "ACTOR_CLAIM": "idtyp",
            "ACTOR_OWNER_VALUES": "user",
            "ACTOR_WORKFLOW_VALUES": "app",
        },
        _entra,
        ENTRA_TENANT,
    ),
    "keycloak": (
        {"ACTOR_CLAIM": "azp", "ACTOR_OWNER_VALUES": "packyard-cli", "ACTOR_WORKFLOW_VALUES": "packyard-ci"},
        _keycloak,
        "acme",
    ),
}


@pytest.fixture(params=sorted(PROVIDERS))
def provider(request: pytest.FixtureRequest, api: LocalApi, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    mapping, _, _ = PROVIDERS[request.param]
    for name, value in mapping.items():
        monkeypatch.setenv(name, value)
    config.reset()
    yield request.param
    monkeypatch.undo()
    config.reset()


def _request(api: LocalApi, method: str, path: str, claims: dict[str, Any]) -> Any:
    headers = {"Idempotency-Key": "k-matrix", "If-Match": '"1"'}
    return api.request(
        method, _path(path), claims=claims_as_api_gateway_passes_them(claims), body=route_body(path), headers=headers
    )


def _shape(path: str) -> str:
    return re.sub(r"\{[^}]+\}", "{}", path)


def test_the_matrix_covers_every_route_the_api_serves() -> None:
    # ROUTES is read from the OpenAPI document; the served routes are template.yaml's HttpApi events: a route added
    # to either (GET files of a release, the signing keys, an attestation...) is driven below or fails here
    routes = template_routes()
    served = {(route.method, _shape(route.path)) for route in routes}
    cased = {(method, _shape(path)) for method, path, _ in ROUTES} | {(m, _shape(p)) for m, p in AUTHENTICATED_ONLY}
    assert served == cased
    for method, path, _ in ROUTES:  # each case's request reaches its route (every path parameter has a value)
        matched = [route for route in routes if route.match(method, _path(path)) is not None]
        assert [_shape(route.path) for route in matched[:1]] == [_shape(path)], (method, path)


def test_every_route_is_allowed_with_its_scope_and_forbidden_without_it(provider: str, api: LocalApi) -> None:
    _, shape, _ = PROVIDERS[provider]
    assert IDS and len(ROUTES) >= 20
    for owner in (True, False):
        for method, path, scope in ROUTES:
            allowed = _request(api, method, path, shape([scope], owner))
            assert allowed.status not in (401, 403), (provider, owner, method, path, allowed.body)
            others = [s for s in ALL_SCOPES if s != scope]
            lacking = _request(api, method, path, shape(others, owner))
            assert lacking.status == 403, (provider, owner, method, path, lacking.body)
            assert (lacking.body["code"], lacking.body["requiredScope"]) == ("forbidden", scope)


def test_the_actor_is_what_the_providers_claim_says(provider: str, api: LocalApi) -> None:
    _, shape, tenant = PROVIDERS[provider]
    person = api.request("GET", "/v1/me", claims=claims_as_api_gateway_passes_them(shape(["packages:read"], True)))
    machine = api.request("GET", "/v1/me", claims=claims_as_api_gateway_passes_them(shape(["packages:read"], False)))
    assert (person.status, machine.status) == (200, 200), (person.body, machine.body)
    assert (person.body["actor"], machine.body["actor"]) == ("owner", "workflow")
    assert person.body["tenant"] == machine.body["tenant"] == tenant
    assert person.body["permissions"] == machine.body["permissions"] == ["packages:read"]


@pytest.mark.parametrize("provider", ["cognito"], indirect=True)
def test_a_cognito_token_without_a_pre_token_trigger_is_401_naming_the_tenant_claim_on_every_route(
    provider: str, api: LocalApi
) -> None:
    # a user pool with no trigger issues access tokens with no tenant claim: refused, never a default tenant
    for owner in (True, False):
        untenanted = {k: v for k, v in _cognito(list(ALL_SCOPES), owner).items() if k != "tenant"}
        for method, path in [(m, p) for m, p, _ in ROUTES] + AUTHENTICATED_ONLY:
            answer = _request(api, method, path, untenanted)
            assert (answer.status, answer.body["code"], answer.body["claim"]) == (401, "unauthorized", "tenant"), (
                owner,
                method,
                path,
                answer.body,
            )
