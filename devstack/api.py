"""The HTTP API in-process: routes read from template.yaml's HttpApi events, requests turned into API Gateway v2
events with the caller's claims (what the JWT authorizer would pass), answered by the handler that serves the route.

Tests use it directly; the local HTTP server puts a socket in front of the same call.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from devstack import lambdas
from devstack.apigw import Route, http_event
from devstack.template import DEFAULT_TEMPLATE, Stack, load_template


def template_routes(template: str | Path = DEFAULT_TEMPLATE) -> list[Route]:
    """Every (method, path) → function the template's HttpApi events declare."""
    resources = load_template(template).get("Resources", {})
    found: list[Route] = []
    for logical_id, resource in resources.items():
        if resource.get("Type") != "AWS::Serverless::Function":
            continue
        for event in (resource.get("Properties", {}).get("Events") or {}).values():
            if event.get("Type") == "HttpApi":
                props = event.get("Properties", {})
                found.append(Route(method=str(props["Method"]).upper(), path=str(props["Path"]), function=logical_id))
    # literal segments before parameters, so /v1/packages/{p}/versions wins over a catch-all
    return sorted(found, key=lambda r: (r.path.count("{"), -len(r.path)))


@dataclass
class ApiResponse:
    status: int
    headers: dict[str, str]
    body: Any
    raw: str = ""

    @property
    def code(self) -> str | None:
        return self.body.get("code") if isinstance(self.body, dict) else None


@dataclass
class LocalApi:
    stack: Stack
    routes: list[Route] = field(default_factory=template_routes)

    def resolve(self, method: str, path: str) -> tuple[Route, dict[str, str]] | None:
        for route in self.routes:
            params = route.match(method, path)
            if params is not None:
                return route, params
        return None

    def call(self, event: dict[str, Any]) -> dict[str, Any]:
        """Invoke the function serving the event's route with an API Gateway v2 event; returns its raw response."""
        method = event["requestContext"]["http"]["method"]
        found = self.resolve(method, event["rawPath"])
        if found is None:
            body = {
                "type": "about:blank",
                "title": "Not found",
                "status": 404,
                "code": "not_found",
                "detail": f"no route for {method} {event['rawPath']}",
            }
            return {
                "statusCode": 404,
                "headers": {"Content-Type": "application/problem+json"},
                "body": json.dumps(body),
            }
        route, params = found
        event["routeKey"] = event["requestContext"]["routeKey"] = f"{route.method} {route.path}"
        event["pathParameters"] = params or None
        spec = self.stack.functions[route.function]
        answer: dict[str, Any] = lambdas.invoke_handler(spec, event)
        return answer

    def request(
        self,
        method: str,
        path: str,
        *,
        claims: dict[str, Any] | None,
        body: Any = None,
        headers: dict[str, str] | None = None,
        query: dict[str, str] | None = None,
    ) -> ApiResponse:
        response = self.call(http_event(method, path, claims=claims, body=body, headers=headers, query=query))
        raw = response.get("body") or ""
        if response.get("isBase64Encoded"):
            raw = base64.b64decode(raw).decode()
        try:
            parsed = json.loads(raw) if raw else None
        except ValueError:
            parsed = raw
        headers_out = {k.lower(): v for k, v in (response.get("headers") or {}).items()}
        for k, values in (response.get("multiValueHeaders") or {}).items():
            headers_out[k.lower()] = ", ".join(values)
        return ApiResponse(status=int(response["statusCode"]), headers=headers_out, body=parsed, raw=raw)
