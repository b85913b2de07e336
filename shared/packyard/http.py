"""The HTTP side every API function shares: one resolver factory, problem+json errors, the caller's identity.

Errors are mapped by type: one exception handler per domain error class (the base class handler covers subclasses,
each of which carries its own status and stable code).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from aws_lambda_powertools.event_handler import APIGatewayHttpResolver, Response
from aws_lambda_powertools.event_handler.exceptions import NotFoundError
from aws_lambda_powertools.event_handler.openapi.exceptions import RequestValidationError

from packyard.config import settings
from packyard.errors import InvalidRequest, NotFound, PackyardError, Unauthorized
from packyard.observability import logger

PROBLEM_JSON = "application/problem+json"


def problem_response(error: PackyardError, headers: dict[str, str] | None = None) -> Response:
    return Response(
        status_code=error.status,
        content_type=PROBLEM_JSON,
        body=json.dumps(error.problem()),
        headers=headers,
    )


def json_response(status: int, body: dict[str, Any], headers: dict[str, str] | None = None) -> Response:
    return Response(status_code=status, content_type="application/json", body=body, headers=headers)


@dataclass(frozen=True)
class Principal:
    """Who calls: the tenant always comes from the verified JWT claims, never from the path or body."""

    tenant: str
    subject: str
    scopes: tuple[str, ...]


def build_resolver() -> APIGatewayHttpResolver:
    app = APIGatewayHttpResolver(enable_validation=True)

    @app.exception_handler(PackyardError)
    def _domain_error(error: PackyardError) -> Response:
        if error.status >= 500:
            logger.exception("request failed", extra={"code": error.code})
        return problem_response(error, headers=getattr(error, "headers", None))

    @app.exception_handler(RequestValidationError)
    def _validation_error(error: RequestValidationError) -> Response:
        issues = [
            {"location": ".".join(str(part) for part in issue.get("loc", ())), "type": issue.get("type", "")}
            for issue in error.errors()
        ]
        return problem_response(InvalidRequest("request failed validation", errors=issues))

    @app.not_found
    def _route_not_found(_: NotFoundError) -> Response:
        return problem_response(NotFound("no such route"))

    return app


def principal_of(app: APIGatewayHttpResolver) -> Principal:
    context = app.current_event.request_context
    claims = context.authorizer.jwt_claim if context.authorizer else {}
    tenant = claims.get(settings().tenant_claim)
    if not tenant or not isinstance(tenant, str):
        raise Unauthorized("the token carries no tenant claim")
    scopes_claim = claims.get("scope") or ""
    scopes = tuple(scopes_claim.split()) if isinstance(scopes_claim, str) else tuple(scopes_claim)
    return Principal(tenant=tenant, subject=str(claims.get("sub", "")), scopes=scopes)
