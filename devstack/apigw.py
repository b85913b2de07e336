"""API Gateway HTTP API (payload v2) events, built the way API Gateway builds them after its JWT authorizer.

Used by the tests and by the local HTTP server: the claims here stand in for a verified token's claims.
"""

from __future__ import annotations

import base64
import functools
import json
import re
import time
import uuid
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode


@dataclass(frozen=True)
class Route:
    method: str
    path: str  # as in template.yaml, e.g. /v1/uploads/{id}
    function: str  # logical id of the function serving it

    def match(self, method: str, path: str) -> dict[str, str] | None:
        if method.upper() != self.method.upper():
            return None
        found = path_pattern(self.path).match(path)
        return found.groupdict() if found else None


@functools.lru_cache(maxsize=1024)
def path_pattern(template: str) -> re.Pattern[str]:
    """A route path (``/v1/uploads/{id}``, ``/v1/{proxy+}``) as a regex with a named group per parameter; built once
    per path (every request tries the routes in turn)."""
    parts = []
    for segment in template.strip("/").split("/"):
        if segment.startswith("{") and segment.endswith("+}"):
            parts.append(f"(?P<{segment[1:-2]}>.+)")
        elif segment.startswith("{") and segment.endswith("}"):
            parts.append(f"(?P<{segment[1:-1]}>[^/]+)")
        else:
            parts.append(re.escape(segment))
    return re.compile("^/" + "/".join(parts) + "$")


def http_event(
    method: str,
    path: str,
    *,
    claims: dict[str, Any] | None,
    body: Any = None,
    headers: dict[str, str] | None = None,
    query: dict[str, str] | None = None,
    route: Route | None = None,
    path_parameters: dict[str, str] | None = None,
) -> dict[str, Any]:
    raw_body: str | None
    is_base64 = False
    if body is None:
        raw_body = None
    elif isinstance(body, bytes):
        raw_body, is_base64 = base64.b64encode(body).decode(), True
    elif isinstance(body, str):
        raw_body = body
    else:
        raw_body = json.dumps(body)
    all_headers = {"content-type": "application/json", **{k.lower(): v for k, v in (headers or {}).items()}}
    now = time.time()
    scopes = str((claims or {}).get("scope", "")).split() or None
    event: dict[str, Any] = {
        "version": "2.0",
        "routeKey": f"{method.upper()} {route.path}" if route else "$default",
        "rawPath": path,
        "rawQueryString": urlencode(query or {}),
        "headers": all_headers,
        "queryStringParameters": query or None,
        "pathParameters": path_parameters or None,
        "requestContext": {
            "accountId": "123456789012",
            "apiId": "local",
            "domainName": "localhost",
            "domainPrefix": "localhost",
            "http": {
                "method": method.upper(),
                "path": path,
                "protocol": "HTTP/1.1",
                "sourceIp": "127.0.0.1",
                "userAgent": all_headers.get("user-agent", "packyard-local"),
            },
            "requestId": uuid.uuid4().hex,
            "routeKey": f"{method.upper()} {route.path}" if route else "$default",
            "stage": "$default",
            "time": time.strftime("%d/%b/%Y:%H:%M:%S +0000", time.gmtime(now)),
            "timeEpoch": int(now * 1000),
        },
        "body": raw_body,
        "isBase64Encoded": is_base64,
    }
    if claims is not None:
        event["requestContext"]["authorizer"] = {"jwt": {"claims": claims, "scopes": scopes}}
    return event
