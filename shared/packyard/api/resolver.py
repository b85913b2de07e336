"""The HTTP side every API function shares: one resolver factory and problem+json errors.

Errors are mapped by type: one exception handler per domain error class (the base class handler covers subclasses,
each of which carries its own status and stable code).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any, cast
from urllib.parse import unquote

from aws_lambda_powertools.event_handler import APIGatewayHttpResolver, Response
from aws_lambda_powertools.event_handler.exceptions import NotFoundError
from aws_lambda_powertools.event_handler.openapi.exceptions import (
    RequestUnsupportedContentType,
    RequestValidationError,
)
from aws_lambda_powertools.utilities.data_classes import APIGatewayProxyEventV2

from packyard.api import json_body
from packyard.api.principal import authorize
from packyard.errors import InvalidRequest, NotFound, PackyardError, UnsupportedMediaType
from packyard.observability import logger

PROBLEM_JSON = "application/problem+json"
# C0 controls, DEL and C1 controls (after percent-decoding)
_CONTROL_CHARACTER = re.compile("[\x00-\x1f\x7f-\x9f]")
# the one path parameter that may hold slashes (a file's path in a release), always a route's last segment
GREEDY_PARAMETER = "file_path"


def problem_response(error: PackyardError, headers: dict[str, str] | None = None) -> Response[str]:
    return Response(
        status_code=error.status,
        content_type=PROBLEM_JSON,
        body=json.dumps(error.problem()),
        headers=headers,
    )


def json_response(status: int, body: Any, headers: dict[str, str] | None = None) -> Response[Any]:
    return Response(status_code=status, content_type="application/json", body=body, headers=headers)


def _issue(issue: Any) -> dict[str, str]:
    """A validation issue as the problem body lists it: where, what kind, and (for a body that is not acceptable
    JSON) why."""
    described = {"location": ".".join(str(part) for part in issue.get("loc", ())), "type": str(issue.get("type", ""))}
    reason = (issue.get("ctx") or {}).get("error")
    if issue.get("type") == "json_invalid" and reason:
        described["reason"] = str(reason)
    return described


def _refusal(app: APIGatewayHttpResolver) -> Response[str] | None:
    """Powertools reads and validates the request before the route runs: a caller without a valid token or the
    route's scope learns that (401/403), not what is wrong with its request."""
    try:
        authorize(app)
    except PackyardError as refused:
        return problem_response(refused, headers=refused.headers or None)
    return None


class Resolver(APIGatewayHttpResolver):
    """Powertools' HTTP API resolver, holding the event it resolves on itself.

    Powertools keeps the current event and Lambda context as attributes of the ``BaseRouter`` *class*, shared by every
    resolver in the process. On Lambda one process serves one invocation at a time, but the local stack serves
    concurrent requests in one process (each with its own handler module): there two requests read each other's
    event, body included. Set on the instance first, the event shadows the class attribute for this resolver."""

    @staticmethod
    def _compile_regex(rule: str, base_regex: str = "^{}$") -> re.Pattern[str]:
        """A route ending in ``<file_path>`` takes the rest of the path there, slashes included (the template's
        ``{path+}``, a greedy parameter); every other parameter is one segment, as Powertools matches it."""
        compiled: re.Pattern[str] = APIGatewayHttpResolver._compile_regex(rule, base_regex)
        if not rule.endswith(f"/<{GREEDY_PARAMETER}>"):
            return compiled
        start = compiled.pattern.rindex(f"(?P<{GREEDY_PARAMETER}>")
        return re.compile(compiled.pattern[:start] + f"(?P<{GREEDY_PARAMETER}>.+)$")

    def resolve(self, event: Mapping[str, Any], context: Any) -> dict[str, Any]:
        # as Powertools builds it (with this resolver's strict JSON deserializer)
        self.current_event = cast(APIGatewayProxyEventV2, self._to_proxy_event(dict(event)))
        self.lambda_context = context
        return super().resolve(event, context)


def build_resolver() -> APIGatewayHttpResolver:
    app = Resolver(enable_validation=True, json_body_deserializer=json_body.loads)

    # Powertools' decorators are untyped: the handlers they register are still checked as written
    @app.exception_handler(PackyardError)  # type: ignore[untyped-decorator]
    def _domain_error(error: PackyardError) -> Response[str]:
        if error.status >= 500:
            logger.exception("request failed", extra={"code": error.code})
        return problem_response(error, headers=error.headers or None)

    @app.exception_handler(RequestValidationError)  # type: ignore[untyped-decorator]
    def _validation_error(error: RequestValidationError) -> Response[str]:
        refused = _refusal(app)
        if refused is not None:
            return refused
        issues = [_issue(issue) for issue in error.errors()]
        return problem_response(InvalidRequest("request failed validation", errors=issues))

    @app.exception_handler(RequestUnsupportedContentType)  # type: ignore[untyped-decorator]
    def _unsupported_media_type(error: RequestUnsupportedContentType) -> Response[str]:
        refused = _refusal(app)
        if refused is not None:
            return refused
        return problem_response(UnsupportedMediaType("request bodies are JSON: send Content-Type: application/json"))

    @app.exception_handler(UnicodeDecodeError)  # type: ignore[untyped-decorator]
    def _not_utf8(_: UnicodeDecodeError) -> Response[str]:
        return problem_response(InvalidRequest("the body is not UTF-8"))

    @app.not_found
    def _route_not_found(_: NotFoundError) -> Response[str]:
        route_key = app.current_event.raw_event.get("routeKey")
        if route_key and route_key != "$default":
            # API Gateway matched a route (its parameters take any segment) that this function's id patterns do not:
            # a path parameter holds characters no id, name or version has
            return problem_response(InvalidRequest(f"a path parameter of {route_key} is not a valid id"))
        return problem_response(NotFound("no such route"))

    return app


def serve(app: APIGatewayHttpResolver, event: dict[str, Any], context: Any) -> dict[str, Any]:
    """Resolve an HTTP API event. Path parameters are matched on the percent-decoded path, as API Gateway decodes
    them (``1.0.1%2Bbuild.5`` is version ``1.0.1+build.5``); a decoded ``/`` matches no route (ids never hold one)."""
    raw_path = event.get("rawPath")
    if isinstance(raw_path, str) and "%" in raw_path:
        event = {**event, "rawPath": unquote(raw_path)}
    path = event.get("rawPath")
    if isinstance(path, str) and _CONTROL_CHARACTER.search(path):
        # before routing: a route pattern ending in ``$`` matches before a trailing newline, so ``…/pkg%0A`` would
        # reach the installation ``pkg``; no id, name or version holds a control character
        refused = InvalidRequest("the path holds a control character")
        return {
            "statusCode": refused.status,
            "headers": {"Content-Type": PROBLEM_JSON},
            "body": json.dumps(refused.problem()),
        }
    headers = event.get("headers") or {}
    content_type = str(headers.get("content-type", ""))
    media_type, separator, parameters = content_type.partition(";")
    media_type = media_type.strip().lower()  # RFC 9110 8.3.1: type and subtype are case-insensitive
    if event.get("body") and media_type and media_type != "application/json" and not media_type.endswith("+json"):
        # bodies are JSON only: Powertools would try to parse forms and multipart (and fail on a missing boundary);
        # an unknown type makes it refuse with 415, answered as problem+json once the caller is authorized
        event = {**event, "headers": {**headers, "content-type": "application/x-packyard-refused"}}
    elif media_type:
        # Powertools compares the media type case-sensitively: hand it the lower-case form (parameters kept)
        event = {**event, "headers": {**headers, "content-type": media_type + separator + parameters}}
    answer: dict[str, Any] = app.resolve(event, context)
    return answer
