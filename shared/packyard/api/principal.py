"""Who calls, and may they: the principal of a request comes only from the verified JWT's claims (never from a
path or body), and each route's declared permission is checked before anything is read."""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.event_handler import APIGatewayHttpResolver

from packyard.authority import ActorKind, Permission, Principal, is_tenant_id
from packyard.config import settings
from packyard.errors import Forbidden, Unauthorized
from packyard.observability import logger

BEARER_SCHEME = "bearerAuth"


def principal_of(app: APIGatewayHttpResolver) -> Principal:
    """The caller of the request ``app`` is resolving; its tenant and subject are bound to the log lines that
    follow."""
    context = app.current_event.request_context
    claims: dict[str, Any] = context.authorizer.jwt_claim if context.authorizer else {}
    config = settings()
    tenant = claims.get(config.tenant_claim)
    if not isinstance(tenant, str) or not tenant:
        raise Unauthorized("the token carries no tenant claim")
    if not is_tenant_id(tenant):
        raise Unauthorized("the token's tenant claim is not a valid tenant id")
    subject = str(claims.get("sub", ""))
    actor = ActorKind.OWNER if claims.get(config.actor_claim) == ActorKind.OWNER.value else ActorKind.WORKFLOW
    logger.append_keys(tenant=tenant, subject=subject)
    return Principal(tenant=tenant, subject=subject, scopes=_scopes(claims.get(config.scope_claim)), actor=actor)


def _scopes(claim: Any) -> frozenset[str]:
    """API Gateway passes the scope claim as one space-separated string; some IdPs send a list."""
    if isinstance(claim, str):
        return frozenset(claim.split())
    if isinstance(claim, list | tuple):
        return frozenset(str(item) for item in claim)
    return frozenset()


def authorize(app: APIGatewayHttpResolver) -> Principal:
    """The caller, if it holds every permission the current route declares (its OpenAPI ``security``); a route that
    declares none is refused, so forgetting to declare one fails closed."""
    route = app.context.get("_route")
    declared = [
        Permission(scope)
        for requirement in (getattr(route, "security", None) or [])
        for scope in requirement.get(BEARER_SCHEME, [])
    ]
    if not declared:
        raise Forbidden("this route declares no permission")
    principal = principal_of(app)
    for permission in declared:
        principal.require(permission)
    return principal
