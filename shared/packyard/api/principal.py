"""Who calls, and may they: the principal of a request comes only from the verified JWT's claims (never from a
path or body), and each route's declared permission is checked before anything is read."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from aws_lambda_powertools.event_handler import APIGatewayHttpResolver

from packyard.authority import ActorKind, Permission, Principal, is_tenant_id
from packyard.config import Settings, settings
from packyard.errors import Forbidden, MissingSetting, Unauthorized
from packyard.observability import logger

# the OpenAPI security scheme every route names with the scope it needs (an OAuth 2.0 scheme: devstack.openapi)
SECURITY_SCHEME = "oauth2"


def principal_of(app: APIGatewayHttpResolver) -> Principal:
    """The caller of the request ``app`` is resolving; its tenant and subject are bound to the log lines that
    follow."""
    context = app.current_event.request_context
    claims: dict[str, Any] = context.authorizer.jwt_claim if context.authorizer else {}
    principal = principal_from_claims(claims or {}, settings())
    logger.append_keys(tenant=principal.tenant, subject=principal.subject)
    return principal


def principal_from_claims(claims: Mapping[str, Any], config: Settings) -> Principal:
    """The principal the claim mapping (``config``) reads from ``claims`` as API Gateway's HTTP API JWT authorizer
    passes them (every value a string, an array as ``"[a b]"``; a real JSON value is read too). A missing or
    malformed claim is 401 ``unauthorized`` naming the claim: never a default tenant, never a 500."""
    tenant = claims.get(config.tenant_claim)
    if not isinstance(tenant, str) or not tenant:
        raise Unauthorized(f"the token carries no tenant claim ({config.tenant_claim!r})", claim=config.tenant_claim)
    if not is_tenant_id(tenant):
        raise Unauthorized(
            f"the token's tenant claim ({config.tenant_claim!r}) is not a valid tenant id", claim=config.tenant_claim
        )
    subject = claims.get(config.subject_claim)
    if isinstance(subject, int | float) and not isinstance(subject, bool):
        subject = str(subject)
    if not isinstance(subject, str) or not subject:
        raise Unauthorized(f"the token carries no subject claim ({config.subject_claim!r})", claim=config.subject_claim)
    return Principal(tenant=tenant, subject=subject, scopes=_scopes(claims, config), actor=_actor(claims, config))


def _names(value: str) -> list[str]:
    return [part.strip() for part in value.split(",") if part.strip()]


def _scopes(claims: Mapping[str, Any], config: Settings) -> frozenset[str]:
    """The union of the scope claims' scopes (absent claims hold none), each stripped of the scope prefix."""
    names = _names(config.scope_claim)
    forms = _names(config.scope_claim_form) or ["string"]
    if len(forms) not in (1, len(names)):
        raise MissingSetting(
            f"SCOPE_CLAIM_FORM names {len(forms)} forms for {len(names)} scope claims", settings=["SCOPE_CLAIM_FORM"]
        )
    found: set[str] = set()
    for index, name in enumerate(names):
        if name not in claims:
            continue
        form = forms[index] if len(forms) > 1 else forms[0]
        found.update(_read_scope_claim(name, claims[name], form))
    if not config.scope_prefix:
        return frozenset(found)
    prefix = config.scope_prefix
    return frozenset(scope[len(prefix) :] for scope in found if scope.startswith(prefix) and len(scope) > len(prefix))


def _read_scope_claim(name: str, value: Any, form: str) -> list[str]:
    if form == "array":
        if isinstance(value, list | tuple) and all(isinstance(item, str) for item in value):
            return [item for item in value if item]
        if isinstance(value, str) and value.startswith("[") and value.endswith("]"):
            # API Gateway's HTTP API JWT authorizer flattens an array claim to "[a b c]" (docs/decisions.md)
            return value[1:-1].split()
        raise Unauthorized(f"the token's scope claim ({name!r}) is not an array", claim=name)
    if form == "string":
        if isinstance(value, str) and not (value.startswith("[") and value.endswith("]")):
            return value.split()
        raise Unauthorized(
            f"the token's scope claim ({name!r}) is not a space-separated string (an array? set ScopeClaimForm to "
            "array)",
            claim=name,
        )
    raise MissingSetting(f"SCOPE_CLAIM_FORM {form!r} is neither string nor array", settings=["SCOPE_CLAIM_FORM"])


def _actor(claims: Mapping[str, Any], config: Settings) -> ActorKind:
    """Owner or workflow, by the actor claim's value; an unknown value is refused rather than guessed."""
    if config.actor_claim not in claims:
        return ActorKind(config.actor_when_absent)
    value = claims[config.actor_claim]
    if isinstance(value, str):
        if value in _names(config.actor_workflow_values):
            return ActorKind.WORKFLOW
        if value in _names(config.actor_owner_values):
            return ActorKind.OWNER
    raise Unauthorized(
        f"the token's actor claim ({config.actor_claim!r}) has a value that is neither an owner's nor a workflow's",
        claim=config.actor_claim,
    )


def authorize(app: APIGatewayHttpResolver) -> Principal:
    """The caller, if it holds every permission the current route declares (its OpenAPI ``security``); a route that
    declares none is refused, so forgetting to declare one fails closed."""
    route = app.context.get("_route")
    requirements = getattr(route, "security", None) or []
    declared = [Permission(scope) for requirement in requirements for scope in requirement.get(SECURITY_SCHEME, [])]
    # a route that declares the scheme with no scope (GET /v1/me) needs only a valid token
    authenticated_only = any(requirement.get(SECURITY_SCHEME) == [] for requirement in requirements)
    if not declared and not authenticated_only:
        raise Forbidden("this route declares no permission")
    principal = principal_of(app)
    for permission in declared:
        principal.require(permission)
    return principal
