"""Local tokens shaped like each identity provider's, and the claim mapping (template parameters) that reads them.

``packyard token --like okta`` mints a token of Okta's shape signed with the local key, and ``packyard local --idp
okta`` starts the stack with the template parameters that read it (the README's "Connect your identity provider"
values, with the local client ids). The shapes follow each provider's documentation (docs/decisions.md, "Identity
providers as issued"); ``tests/unit/test_claim_mapping.py`` holds the documented fixtures.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

# The local authorizer accepts these as ``aud``, or as ``client_id`` for a token without ``aud`` (Cognito), as
# API Gateway's JWT authorizer does with JwtAudience.
CLI_CLIENT = "packyard-cli"
MACHINE_CLIENT = "packyard-machine"
COGNITO_SCOPE_PREFIX = "https://packyard.local/"

Shape = Callable[[str, str, Sequence[str], bool], dict[str, Any]]


@dataclass(frozen=True)
class IdentityProvider:
    name: str
    parameters: dict[str, str]  # template.yaml parameters (local values)
    shape: Shape  # (tenant, subject, scopes, owner) -> claims, without iss/exp/iat/nbf


def _cognito(tenant: str, subject: str, scopes: Sequence[str], owner: bool) -> dict[str, Any]:
    client = CLI_CLIENT if owner else MACHINE_CLIENT
    return {
        "sub": subject if owner else client,
        "token_use": "access",
        "client_id": client,
        "scope": " ".join(["openid", *(COGNITO_SCOPE_PREFIX + s for s in scopes)]),
        "version": 2,
        **({"username": subject, "cognito:groups": ["packyard"]} if owner else {}),
        "tenant": tenant,  # what a pre token generation trigger adds
    }


def _auth0(tenant: str, subject: str, scopes: Sequence[str], owner: bool) -> dict[str, Any]:
    return {
        "sub": f"auth0|{subject}" if owner else f"{MACHINE_CLIENT}@clients",
        "aud": CLI_CLIENT,
        "azp": CLI_CLIENT if owner else MACHINE_CLIENT,
        "scope": " ".join(scopes),
        **({} if owner else {"gty": "client-credentials"}),
        "https://packyard.local/tenant": tenant,
    }


def _okta(tenant: str, subject: str, scopes: Sequence[str], owner: bool) -> dict[str, Any]:
    client = CLI_CLIENT if owner else MACHINE_CLIENT
    return {
        "ver": 1,
        "aud": client,
        "cid": client,
        **({"uid": "00u" + uuid.uuid5(uuid.NAMESPACE_URL, subject).hex[:17]} if owner else {}),
        "scp": list(scopes),
        "sub": subject if owner else client,
        "tenant": tenant,
    }


def _entra(tenant: str, subject: str, scopes: Sequence[str], owner: bool) -> dict[str, Any]:
    oid = str(uuid.uuid5(uuid.NAMESPACE_URL, subject))
    return {
        "aud": CLI_CLIENT,
        "azp": CLI_CLIENT if owner else MACHINE_CLIENT,
        "azpacr": "0" if owner else "1",
        "idtyp": "user" if owner else "app",
        "oid": oid,
        "sub": uuid.uuid5(uuid.NAMESPACE_DNS, subject).hex,  # pairwise per application
        "tid": tenant,
        "ver": "2.0",
        **({"scp": " ".join(scopes), "name": subject} if owner else {"roles": list(scopes)}),
    }


def _keycloak(tenant: str, subject: str, scopes: Sequence[str], owner: bool) -> dict[str, Any]:
    client = CLI_CLIENT if owner else MACHINE_CLIENT
    return {
        "aud": client,
        "sub": str(uuid.uuid5(uuid.NAMESPACE_URL, subject if owner else client)),
        "typ": "Bearer",
        "azp": client,
        "realm_access": {"roles": ["default-roles-packyard"]},
        "scope": " ".join(["profile", "email", *scopes]),
        "preferred_username": subject if owner else f"service-account-{client}",
        "tenant": tenant,
    }


PROVIDERS: dict[str, IdentityProvider] = {
    "cognito": IdentityProvider(
        "cognito",
        {
            "ScopePrefix": COGNITO_SCOPE_PREFIX,
            "ActorClaim": "client_id",
            "ActorOwnerValues": CLI_CLIENT,
            "ActorWorkflowValues": MACHINE_CLIENT,
        },
        _cognito,
    ),
    "auth0": IdentityProvider(
        "auth0",
        {
            "TenantClaim": "https://packyard.local/tenant",
            "ActorClaim": "gty",
            "ActorOwnerValues": "password,refresh_token",
            "ActorWorkflowValues": "client-credentials",
            "ActorWhenAbsent": "owner",
        },
        _auth0,
    ),
    "okta": IdentityProvider(
        "okta",
        {
            "ScopeClaim": "scp",
            "ScopeClaimForm": "array",
            "ActorClaim": "cid",
            "ActorOwnerValues": CLI_CLIENT,
            "ActorWorkflowValues": MACHINE_CLIENT,
        },
        _okta,
    ),
    "entra": IdentityProvider(
        "entra",
        {
            "TenantClaim": "tid",
            "SubjectClaim": "oid",
            "ScopeClaim": "scp,roles",
            "ScopeClaimForm": "string,array",
            "ActorClaim": "idtyp",
            "ActorOwnerValues": "user",
            "ActorWorkflowValues": "app",
        },
        _entra,
    ),
    "keycloak": IdentityProvider(
        "keycloak",
        {"ActorClaim": "azp", "ActorOwnerValues": CLI_CLIENT, "ActorWorkflowValues": MACHINE_CLIENT},
        _keycloak,
    ),
}
