"""The HTTP side every API function shares: one resolver factory and problem+json errors.

Errors are mapped by type: one exception handler per domain error class (the base class handler covers subclasses,
each of which carries its own status and stable code).
"""

from __future__ import annotations

import json
from typing import Any

from aws_lambda_powertools.event_handler import APIGatewayHttpResolver, Response
from aws_lambda_powertools.event_handler.exceptions import NotFoundError
from aws_lambda_powertools.event_handler.openapi.exceptions import RequestValidationError

from packyard.api.principal import authorize
from packyard.errors import InvalidRequest, NotFound, PackyardError
from packyard.observability import logger

PROBLEM_JSON = "application/problem+json"


def problem_response(error: PackyardError, headers: dict[str, str] | None = None) -> Response[str]:
    return Response(
        status_code=error.status,
        content_type=PROBLEM_JSON,
        body=json.dumps(error.problem()),
        headers=headers,
    )


def json_response(status: int, body: Any, headers: dict[str, str] | None = None) -> Response[Any]:
    return Response(status_code=status, content_type="application/json", body=body, headers=headers)


def build_resolver() -> APIGatewayHttpResolver:
    app = APIGatewayHttpResolver(enable_validation=True)

    # Powertools' decorators are untyped: the handlers they register are still checked as written
    @app.exception_handler(PackyardError)  # type: ignore[untyped-decorator]
    def _domain_error(error: PackyardError) -> Response[str]:
        if error.status >= 500:
            logger.exception("request failed", extra={"code": error.code})
        return problem_response(error, headers=error.headers or None)

    @app.exception_handler(RequestValidationError)  # type: ignore[untyped-decorator]
    def _validation_error(error: RequestValidationError) -> Response[str]:
        # Powertools validates the request before the route runs; a caller without the route's scope (or without a
        # valid token) learns that, not what is wrong with its request
        try:
            authorize(app)
        except PackyardError as refused:
            return problem_response(refused, headers=refused.headers or None)
        issues = [
            {"location": ".".join(str(part) for part in issue.get("loc", ())), "type": issue.get("type", "")}
            for issue in error.errors()
        ]
        return problem_response(InvalidRequest("request failed validation", errors=issues))

    @app.not_found
    def _route_not_found(_: NotFoundError) -> Response[str]:
        return problem_response(NotFound("no such route"))

    return app
