"""Who calls: the principal of a request comes only from the verified JWT's claims, never from a path or body."""

from __future__ import annotations

from dataclasses import dataclass

from aws_lambda_powertools.event_handler import APIGatewayHttpResolver

from packyard.config import settings
from packyard.errors import Unauthorized
from packyard.observability import logger


@dataclass(frozen=True)
class Principal:
    tenant: str
    subject: str
    scopes: tuple[str, ...]


def principal_of(app: APIGatewayHttpResolver) -> Principal:
    """The caller of the request ``app`` is resolving; its tenant is bound to the log lines that follow."""
    context = app.current_event.request_context
    claims = context.authorizer.jwt_claim if context.authorizer else {}
    tenant = claims.get(settings().tenant_claim)
    if not tenant or not isinstance(tenant, str):
        raise Unauthorized("the token carries no tenant claim")
    scopes_claim = claims.get("scope") or ""
    scopes = tuple(scopes_claim.split()) if isinstance(scopes_claim, str) else tuple(scopes_claim)
    logger.append_keys(tenant=tenant)
    return Principal(tenant=tenant, subject=str(claims.get("sub", "")), scopes=scopes)
