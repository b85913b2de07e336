"""The claim mapping (deploy parameters) reads tokens of each identity provider's documented shape as API Gateway's
HTTP API JWT authorizer passes them to the function: every claim a string, an array flattened to "[a b c]"
(devstack.server.claims_as_api_gateway_passes_them; sources in docs/decisions.md). A missing or malformed claim is
401 naming the claim."""

from __future__ import annotations

from typing import Any

import pytest

from devstack.server import claims_as_api_gateway_passes_them
from packyard.api.principal import principal_from_claims
from packyard.authority import ActorKind, Permission
from packyard.config import Settings
from packyard.errors import Unauthorized

EXP = 1_900_000_000
COGNITO_ISS = "https://cognito-idp.eu-west-1.amazonaws.com/eu-west-1_EXAMPLE"
COGNITO_CLI = "1example23456789cliclient0"
COGNITO_MACHINE = "2example23456789machine000"
COGNITO = Settings(
    TENANT_CLAIM="tenant",
    SCOPE_PREFIX="https://packyard.example/",
    ACTOR_CLAIM="client_id",
    ACTOR_OWNER_VALUES=COGNITO_CLI,
    ACTOR_WORKFLOW_VALUES=COGNITO_MACHINE,
)
AUTH0 = Settings(
    TENANT_CLAIM="https://packyard.example/tenant",
    ACTOR_CLAIM="gty",
    ACTOR_OWNER_VALUES="password,refresh_token",
    ACTOR_WORKFLOW_VALUES="client-credentials",
    ACTOR_WHEN_ABSENT="owner",
)
OKTA = Settings(
    TENANT_CLAIM="tenant",
    SCOPE_CLAIM="scp",
    SCOPE_CLAIM_FORM="array",
    ACTOR_CLAIM="cid",
    ACTOR_OWNER_VALUES="0oacli",
    ACTOR_WORKFLOW_VALUES="0oamachine",
)
ENTRA = Settings(
    TENANT_CLAIM="tid",
    SUBJECT_CLAIM="oid",
    SCOPE_CLAIM="scp,roles",
    SCOPE_CLAIM_FORM="string,array",
    ACTOR_CLAIM="idtyp",
    ACTOR_OWNER_VALUES="user",
    ACTOR_WORKFLOW_VALUES="app",
)
KEYCLOAK = Settings(
    TENANT_CLAIM="tenant",
    ACTOR_CLAIM="azp",
    ACTOR_OWNER_VALUES="packyard-cli",
    ACTOR_WORKFLOW_VALUES="packyard-ci",
)
PACKYARD_SCOPES = {permission.value for permission in Permission}
ENTRA_TENANT = "72f988bf-86f1-41af-91ab-2d7cd011db47"

# Token payloads in each provider's documented shape (docs/decisions.md, "Identity providers as issued").
CASES: dict[str, tuple[Settings, dict[str, Any], str, str, ActorKind]] = {
    # a user pool access token, tenant added by a V2_0 pre token generation trigger; custom scopes carry the
    # resource server identifier; cognito:groups is an array
    "cognito-user-with-trigger": (
        COGNITO,
        {
            "sub": "aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee",
            "cognito:groups": ["admins"],
            "iss": COGNITO_ISS,
            "version": 2,
            "client_id": COGNITO_CLI,
            "origin_jti": "aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee",
            "token_use": "access",
            "scope": "openid https://packyard.example/packages:read https://packyard.example/packages:publish",
            "auth_time": EXP - 3600,
            "exp": EXP,
            "iat": EXP - 3600,
            "jti": "aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee",
            "username": "jane",
            "tenant": "acme",
        },
        "acme",
        "aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee",
        ActorKind.OWNER,
    ),
    # client credentials: sub is the app client id, no username; tenant added by a V3_0 trigger
    "cognito-client-credentials": (
        COGNITO,
        {
            "sub": COGNITO_MACHINE,
            "token_use": "access",
            "scope": "https://packyard.example/packages:read",
            "auth_time": EXP - 3600,
            "iss": COGNITO_ISS,
            "exp": EXP,
            "iat": EXP - 3600,
            "version": 2,
            "jti": "bbbbbbbb-bbbb-cccc-dddd-eeeeeeeeeeee",
            "client_id": COGNITO_MACHINE,
            "tenant": "acme",
        },
        "acme",
        COGNITO_MACHINE,
        ActorKind.WORKFLOW,
    ),
    "auth0-user": (
        AUTH0,
        {
            "iss": "https://example.eu.auth0.com/",
            "sub": "auth0|5fe435b5cbbc85006b071eba",
            "aud": ["https://packyard.example", "https://example.eu.auth0.com/userinfo"],
            "iat": EXP - 3600,
            "exp": EXP,
            "azp": "FT6TMjfHI2lkxjpAbG5tCjEdiEkyvMCA",
            "scope": "openid profile packages:read packages:publish",
            "https://packyard.example/tenant": "acme",
        },
        "acme",
        "auth0|5fe435b5cbbc85006b071eba",
        ActorKind.OWNER,
    ),
    "auth0-m2m": (
        AUTH0,
        {
            "iss": "https://example.eu.auth0.com/",
            "sub": "FT6TMjfHI2lkxjpAbG5tCjEdiEkyvMCA@clients",
            "aud": "https://packyard.example",
            "iat": EXP - 3600,
            "exp": EXP,
            "gty": "client-credentials",
            "azp": "FT6TMjfHI2lkxjpAbG5tCjEdiEkyvMCA",
            "scope": "packages:read packages:publish",
            "https://packyard.example/tenant": "acme",
        },
        "acme",
        "FT6TMjfHI2lkxjpAbG5tCjEdiEkyvMCA@clients",
        ActorKind.WORKFLOW,
    ),
    "okta-user": (
        OKTA,
        {
            "ver": 1,
            "jti": "AT.0mP4JKAZX1iACIT4vbEDF7LpvDVjxypPMf0D7uX39RE",
            "iss": "https://example.okta.com/oauth2/default",
            "aud": "api://packyard",
            "iat": EXP - 3600,
            "exp": EXP,
            "cid": "0oacli",
            "uid": "00uid4BxXw6I6TV4m0g3",
            "scp": ["packages:read", "packages:publish"],
            "sub": "jane@example.com",
            "tenant": "acme",
        },
        "acme",
        "jane@example.com",
        ActorKind.OWNER,
    ),
    "okta-client-credentials": (
        OKTA,
        {
            "ver": 1,
            "iss": "https://example.okta.com/oauth2/default",
            "aud": "api://packyard",
            "iat": EXP - 3600,
            "exp": EXP,
            "cid": "0oamachine",
            "scp": ["packages:read"],
            "sub": "0oamachine",
            "tenant": "acme",
        },
        "acme",
        "0oamachine",
        ActorKind.WORKFLOW,
    ),
    "entra-user": (
        ENTRA,
        {
            "aud": "api://packyard",
            "iss": f"https://login.microsoftonline.com/{ENTRA_TENANT}/v2.0",
            "iat": EXP - 3600,
            "nbf": EXP - 3600,
            "exp": EXP,
            "azp": "6e74172b-be56-4843-9ff4-e66a39bb12e3",
            "azpacr": "0",
            "idtyp": "user",
            "name": "Jane Doe",
            "oid": "690222be-ff1a-4d56-abd1-7e4f7d38e474",
            "scp": "packages:read packages:publish",
            "sub": "pairwise-subject-per-app",
            "tid": ENTRA_TENANT,
            "ver": "2.0",
        },
        ENTRA_TENANT,
        "690222be-ff1a-4d56-abd1-7e4f7d38e474",
        ActorKind.OWNER,
    ),
    # an app-only token: application permissions arrive as the roles array, there is no scp
    "entra-app": (
        ENTRA,
        {
            "aud": "api://packyard",
            "iss": f"https://login.microsoftonline.com/{ENTRA_TENANT}/v2.0",
            "iat": EXP - 3600,
            "nbf": EXP - 3600,
            "exp": EXP,
            "azp": "6e74172b-be56-4843-9ff4-e66a39bb12e3",
            "azpacr": "1",
            "idtyp": "app",
            "oid": "2b1e4b4c-0000-4000-8000-00000000aaaa",
            "roles": ["packages:read", "packages:publish"],
            "sub": "2b1e4b4c-0000-4000-8000-00000000aaaa",
            "tid": ENTRA_TENANT,
            "ver": "2.0",
        },
        ENTRA_TENANT,
        "2b1e4b4c-0000-4000-8000-00000000aaaa",
        ActorKind.WORKFLOW,
    ),
    "keycloak-user": (
        KEYCLOAK,
        {
            "exp": EXP,
            "iat": EXP - 300,
            "jti": "onrtac:3b6f",
            "iss": "https://keycloak.example/realms/packyard",
            "aud": "packyard",
            "sub": "f:1c2a:jane",
            "typ": "Bearer",
            "azp": "packyard-cli",
            "sid": "0e3f",
            "realm_access": {"roles": ["default-roles-packyard"]},
            "scope": "openid profile email packages:read packages:publish",
            "preferred_username": "jane",
            "tenant": "acme",
        },
        "acme",
        "f:1c2a:jane",
        ActorKind.OWNER,
    ),
    "keycloak-service-account": (
        KEYCLOAK,
        {
            "exp": EXP,
            "iat": EXP - 300,
            "iss": "https://keycloak.example/realms/packyard",
            "aud": "packyard",
            "sub": "5b7e2c1d-0000-4000-8000-00000000beef",
            "typ": "Bearer",
            "azp": "packyard-ci",
            "scope": "profile email packages:read packages:publish",
            "preferred_username": "service-account-packyard-ci",
            "client_id": "packyard-ci",
            "tenant": "acme",
        },
        "acme",
        "5b7e2c1d-0000-4000-8000-00000000beef",
        ActorKind.WORKFLOW,
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_providers_token_as_api_gateway_passes_it_gives_its_principal(case: str) -> None:
    config, payload, tenant, subject, actor = CASES[case]
    scopes = {"packages:read", "packages:publish"} if "packages:publish" in str(payload) else {"packages:read"}

    principal = principal_from_claims(claims_as_api_gateway_passes_them(payload), config)

    assert (principal.tenant, principal.subject, principal.actor) == (tenant, subject, actor)
    assert principal.scopes & PACKYARD_SCOPES == scopes  # openid, profile … stay, and grant nothing


def test_an_array_scope_claim_as_api_gateway_flattens_it_keeps_every_scope() -> None:
    passed = claims_as_api_gateway_passes_them({"tenant": "acme", "sub": "s", "scp": ["packages:read"]})
    assert passed["scp"] == "[packages:read]"
    assert principal_from_claims(passed, OKTA).scopes == {"packages:read"}
    three = claims_as_api_gateway_passes_them({"tenant": "acme", "sub": "s", "scp": ["a", "packages:read", "c"]})
    assert principal_from_claims(three, OKTA).scopes == {"a", "packages:read", "c"}


def test_a_prefixed_scope_loses_its_prefix_and_a_scope_of_another_resource_server_is_ignored() -> None:
    claims = {
        "tenant": "acme",
        "sub": "s",
        "client_id": COGNITO_CLI,
        "scope": "https://packyard.example/packages:read https://other.example/packages:yank packages:publish",
    }
    assert principal_from_claims(claims, COGNITO).scopes == {"packages:read"}


def test_a_cognito_token_without_a_pre_token_trigger_is_refused_naming_the_tenant_claim() -> None:
    _, payload, *_ = CASES["cognito-user-with-trigger"]
    without = {name: value for name, value in payload.items() if name != "tenant"}
    with pytest.raises(Unauthorized) as refused:
        principal_from_claims(claims_as_api_gateway_passes_them(without), COGNITO)
    assert "'tenant'" in refused.value.detail
    assert refused.value.extra == {"claim": "tenant"}


def test_a_namespaced_tenant_claim_that_is_not_a_tenant_id_is_refused_naming_it() -> None:
    claims = {"https://packyard.example/tenant": "a#b", "sub": "s"}
    with pytest.raises(Unauthorized) as refused:
        principal_from_claims(claims, AUTH0)
    assert refused.value.extra == {"claim": "https://packyard.example/tenant"}
    assert "not a valid tenant id" in refused.value.detail


@pytest.mark.parametrize(
    ("config", "claims", "claim"),
    [
        (Settings(), {"tenant": "acme"}, "sub"),
        (ENTRA, {"tid": ENTRA_TENANT, "sub": "s"}, "oid"),
        (OKTA, {"tenant": "acme", "sub": "s", "cid": "0oacli", "scp": "packages:read"}, "scp"),
        (Settings(), {"tenant": "acme", "sub": "s", "scope": "[packages:read]"}, "scope"),
        (Settings(), {"tenant": "acme", "sub": "s", "scope": ["packages:read"]}, "scope"),
        (Settings(), {"tenant": "acme", "sub": "s", "actor": "admin"}, "actor"),
        (AUTH0, {"https://packyard.example/tenant": "acme", "sub": "s", "gty": "device_code"}, "gty"),
        (COGNITO, {"tenant": "acme", "sub": "s", "client_id": "someone-elses-client"}, "client_id"),
    ],
    ids=["no-sub", "no-oid", "scp-not-array", "scope-is-array", "scope-is-list", "actor", "gty", "client-id"],
)
def test_a_missing_or_malformed_claim_is_unauthorized_naming_it(
    config: Settings, claims: dict[str, Any], claim: str
) -> None:
    with pytest.raises(Unauthorized) as refused:
        principal_from_claims(claims, config)
    assert refused.value.extra == {"claim": claim}
    assert repr(claim) in refused.value.detail


def test_the_defaults_read_the_local_stacks_tokens() -> None:
    claims = {"tenant": "local", "sub": "me", "scope": "packages:read usage:read", "actor": "owner"}
    principal = principal_from_claims(claims_as_api_gateway_passes_them(claims), Settings())
    assert (principal.tenant, principal.subject, principal.actor) == ("local", "me", ActorKind.OWNER)
    assert principal.scopes == {"packages:read", "usage:read"}
    no_actor = principal_from_claims({"tenant": "local", "sub": "me"}, Settings())
    assert (no_actor.actor, no_actor.scopes) == (ActorKind.WORKFLOW, frozenset())
