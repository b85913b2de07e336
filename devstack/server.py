"""The local HTTP API: real requests in, API Gateway HTTP API (payload v2) events to the handlers, responses out.

What API Gateway does in front of the deployed functions, in the same order:

1. match the route against template.yaml's HttpApi events (:class:`devstack.api.LocalApi`); no route → 404;
2. the JWT authorizer: ``Authorization: Bearer <jwt>`` checked against the local key (signature, ``iss``,
   ``aud``, ``exp``) → ``401`` problem+json when missing or invalid, else the claims go to
   ``requestContext.authorizer.jwt.claims`` (as strings, as API Gateway passes them);
3. invoke the function with the event and return its response unchanged (status, headers, cookies, body,
   base64 bodies decoded); a handler that raises is API Gateway's ``500 {"message": "Internal Server Error"}``.

Besides the API it serves ``GET /openapi.json`` (generated from the handlers, see :mod:`devstack.openapi`) and a
Swagger UI at ``GET /docs`` whose assets come from Powertools' bundled copy (no CDN, works offline).

Requests are served concurrently, one thread per connection, with no lock around the handlers: a Powertools resolver
keeps the current event on its module-level ``app``, so each invocation runs on a module instance of its own
(:func:`devstack.lambdas.invoke_handler` keeps a pool per function and imports another instance when all are busy,
as Lambda starts another execution environment). Step Functions tasks run concurrently on moto's threads the same way.
"""

from __future__ import annotations

import base64
import json
import sys
import threading
import time
import traceback
from collections.abc import Callable, Mapping
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from devstack.api import LocalApi
from devstack.apigw import http_event
from packyard_cli.tokens import InvalidToken, LocalKey

TEXT_TYPES = ("application/json", "application/problem+json", "application/xml", "application/x-www-form-urlencoded")
READ_TIMEOUT_SECONDS = 10.0  # how long a request may take to arrive (API Gateway's own limit is 30 s)
MAX_BODY_BYTES = 10 * 1024 * 1024  # API Gateway HTTP APIs refuse larger payloads (413)


def _swagger_asset_dir() -> Path:
    import aws_lambda_powertools.event_handler.openapi.swagger_ui as swagger_ui

    return Path(swagger_ui.__file__).parent


SWAGGER_ASSETS = {
    "/docs/swagger-ui-bundle.min.js": ("swagger-ui-bundle.min.js", "application/javascript; charset=utf-8"),
    "/docs/swagger-ui.min.css": ("swagger-ui.min.css", "text/css; charset=utf-8"),
}


def claims_as_api_gateway_passes_them(claims: Mapping[str, Any]) -> dict[str, str]:
    """API Gateway hands the function every claim as a string; arrays look like ``[a b]``."""
    out: dict[str, str] = {}
    for key, value in claims.items():
        if isinstance(value, str):
            out[key] = value
        elif isinstance(value, list):
            out[key] = "[" + " ".join(str(v) for v in value) + "]"
        elif isinstance(value, bool):
            out[key] = "true" if value else "false"
        elif isinstance(value, dict):
            out[key] = json.dumps(value, separators=(",", ":"))
        else:
            out[key] = str(value)
    return out


def problem(status: int, code: str, title: str, detail: str) -> tuple[int, dict[str, str], bytes]:
    body = {"type": f"https://packyard.dev/problems/{code}", "title": title, "status": status, "code": code}
    body["detail"] = detail
    return status, {"Content-Type": "application/problem+json"}, json.dumps(body).encode()


class LocalApiServer(ThreadingHTTPServer):
    """A threading HTTP server bound to an already-listening socket (so 'port in use' is found before start)."""

    daemon_threads = True
    block_on_close = False

    def __init__(
        self,
        sock: Any,
        api: LocalApi,
        key: LocalKey,
        *,
        openapi: Callable[[], dict[str, Any]],
        log: Callable[[str], None] | None = None,
        read_timeout: float = READ_TIMEOUT_SECONDS,
    ) -> None:
        super().__init__(sock.getsockname()[:2], ApiRequestHandler, bind_and_activate=False)
        self.read_timeout = read_timeout
        self.socket.close()
        self.socket = sock
        self.server_address = sock.getsockname()[:2]
        self.api = api
        self.key = key
        self.log = log or (lambda line: print(line, file=sys.stderr, flush=True))
        self._openapi = openapi
        self._openapi_cache: bytes | None = None
        self._openapi_lock = threading.Lock()

    @property
    def url(self) -> str:
        host, port = self.socket.getsockname()[:2]
        return f"http://{host}:{port}"

    def openapi_document(self) -> bytes:
        with self._openapi_lock:
            if self._openapi_cache is None:
                self._openapi_cache = json.dumps(self._openapi(), indent=2).encode()
            return self._openapi_cache


class ApiRequestHandler(BaseHTTPRequestHandler):
    server: LocalApiServer
    protocol_version = "HTTP/1.1"
    server_version = "packyard-local"
    sys_version = ""

    # ---------------------------------------------------------------- plumbing

    def setup(self) -> None:
        # a client that sends less than its Content-Length (or goes quiet) frees its worker after the read timeout
        self.request.settimeout(self.server.read_timeout)
        super().setup()

    def do_GET(self) -> None:
        self._handle()

    def do_POST(self) -> None:
        self._handle()

    def do_PUT(self) -> None:
        self._handle()

    def do_DELETE(self) -> None:
        self._handle()

    def do_PATCH(self) -> None:
        self._handle()

    def do_HEAD(self) -> None:
        self._handle()

    def do_OPTIONS(self) -> None:
        self._handle()

    def __getattr__(self, name: str) -> Any:
        # any other method (TRACE, QUERY, ...) reaches the router too, which answers 404 problem+json as API Gateway
        # answers a route it does not have; http.server alone would answer 501 with an HTML page
        if name.startswith("do_"):
            return self._handle
        raise AttributeError(name)

    def log_message(self, format: str, *args: Any) -> None:  # the access line is written by _handle
        pass

    def _read_body(self) -> bytes | None:
        if (self.headers.get("Transfer-Encoding") or "").lower() == "chunked":
            chunks = []
            while True:
                size = int(self.rfile.readline().split(b";", 1)[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    break
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
            return b"".join(chunks)
        length = int(self.headers.get("Content-Length") or 0)
        if length > MAX_BODY_BYTES:
            raise ValueError("request body too large")
        return self.rfile.read(length) if length else None

    def _send(self, status: int, headers: Mapping[str, str], body: bytes, cookies: list[str] | None = None) -> None:
        self.send_response(status)
        for name, value in headers.items():
            if name.lower() not in ("content-length", "connection", "transfer-encoding"):
                self.send_header(name, value)
        for cookie in cookies or []:
            self.send_header("Set-Cookie", cookie)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    # ---------------------------------------------------------------- one request

    def _handle(self) -> None:
        started = time.monotonic()
        try:
            body = self._read_body()
        except TimeoutError:
            self.close_connection = True
            status, headers, payload = problem(
                408,
                "invalid_request",
                "Request timeout",
                "the request body did not arrive in time (shorter than its Content-Length?)",
            )
            self._send(status, headers, payload)
            return
        except (ValueError, OSError):
            self.close_connection = True  # the rest of the body is still on the wire
            status, headers, payload = problem(
                413, "invalid_request", "Payload too large", "unreadable request body, or one over 10 MiB"
            )
            self._send(status, headers, payload)
            return
        split = urlsplit(self.path)
        path = split.path or "/"
        cookies: list[str] = []
        if body is not None and len(body) > MAX_BODY_BYTES:
            status, headers, payload = problem(413, "invalid_request", "Payload too large", "request body over 10 MiB")
            self.close_connection = True
        elif self.command in ("GET", "HEAD") and (
            path in ("/openapi.json", "/docs", "/docs/") or path in SWAGGER_ASSETS
        ):
            wants_json = path.startswith("/docs") and ("format", "json") in parse_qsl(split.query)
            status, headers, payload = self._serve_docs("/openapi.json" if wants_json else path)
        else:
            status, headers, payload, cookies = self._serve_api(path, split.query, body)
        self._send(status, headers, payload, cookies)
        elapsed = (time.monotonic() - started) * 1000
        self.server.log(f"{self.command} {self.path} → {status} ({elapsed:.0f} ms)")

    def _serve_docs(self, path: str) -> tuple[int, dict[str, str], bytes]:
        if path == "/openapi.json":
            return 200, {"Content-Type": "application/json"}, self.server.openapi_document()
        if path in SWAGGER_ASSETS:
            name, content_type = SWAGGER_ASSETS[path]
            data = (_swagger_asset_dir() / name).read_bytes()
            return 200, {"Content-Type": content_type, "Cache-Control": "max-age=3600"}, data
        from aws_lambda_powertools.event_handler.openapi.swagger_ui.html import generate_swagger_html

        spec = self.server.openapi_document().decode().replace("</", "<\\/")
        page = generate_swagger_html(
            spec,
            swagger_js="/docs/swagger-ui-bundle.min.js",
            swagger_css="/docs/swagger-ui.min.css",
            swagger_base_url="/docs",
            oauth2_config=None,
            persist_authorization=True,
        )
        return 200, {"Content-Type": "text/html; charset=utf-8"}, page.encode()

    def _serve_api(self, path: str, query: str, body: bytes | None) -> tuple[int, dict[str, str], bytes, list[str]]:
        api = self.server.api
        if api.resolve(self.command, path) is None:
            # API Gateway answers an unknown route before it runs the authorizer; LocalApi says 404 the same way
            response = api.call(http_event(self.command, path, claims=None))
            return self._from_lambda(response)

        authorization = self.headers.get("Authorization") or ""
        scheme, _, token = authorization.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            status, headers, payload = problem(
                401, "unauthorized", "Missing or invalid credentials", "send Authorization: Bearer <token>"
            )
            return status, {**headers, "WWW-Authenticate": "Bearer"}, payload, []
        try:
            claims = self.server.key.verify(token.strip())
        except InvalidToken as exc:
            status, headers, payload = problem(401, "unauthorized", "Missing or invalid credentials", str(exc))
            return status, {**headers, "WWW-Authenticate": 'Bearer error="invalid_token"'}, payload, []

        event = self._event(path, query, body, claims_as_api_gateway_passes_them(claims))
        try:
            response = api.call(event)  # no lock: each concurrent invocation gets its own module instance
        except Exception:
            self.server.log(f"{self.command} {path}: the handler raised\n{traceback.format_exc()}")
            return 500, {"Content-Type": "application/json"}, b'{"message":"Internal Server Error"}', []
        return self._from_lambda(response)

    def _event(self, path: str, query: str, body: bytes | None, claims: dict[str, str]) -> dict[str, Any]:
        headers: dict[str, str] = {}
        cookies: list[str] = []
        for name, value in self.headers.items():
            lower = name.lower()
            if lower == "cookie":
                cookies.extend(part.strip() for part in value.split(";") if part.strip())
            elif lower in headers:
                headers[lower] = f"{headers[lower]},{value}"  # API Gateway joins repeated headers with commas
            else:
                headers[lower] = value
        headers.setdefault("x-forwarded-proto", "http")
        headers.setdefault("x-forwarded-port", str(self.server.server_address[1]))
        headers.setdefault("x-forwarded-for", self.client_address[0])

        content_type = headers.get("content-type", "").split(";", 1)[0].strip().lower()
        payload: str | bytes | None = None
        if body is not None:
            textual = content_type.startswith("text/") or content_type in TEXT_TYPES or content_type.endswith("+json")
            try:
                payload = body.decode("utf-8") if textual else body
            except UnicodeDecodeError:
                payload = body
        query_parameters: dict[str, str] = {}
        for name, value in parse_qsl(query, keep_blank_values=True):
            # API Gateway v2 joins repeated query parameters with commas
            query_parameters[name] = f"{query_parameters[name]},{value}" if name in query_parameters else value

        event = http_event(self.command, path, claims=claims, body=payload, query=query_parameters or None)
        event["headers"] = headers
        event["rawQueryString"] = query
        if cookies:
            event["cookies"] = cookies
        context = event["requestContext"]
        context["authorizer"]["jwt"]["scopes"] = None  # routes declare no AuthorizationScopes
        context["domainName"] = headers.get("host", "127.0.0.1").split(":", 1)[0]
        context["domainPrefix"] = context["domainName"].split(".", 1)[0]
        context["http"]["sourceIp"] = self.client_address[0]
        context["http"]["userAgent"] = headers.get("user-agent", "")
        context["http"]["protocol"] = self.request_version
        return event

    @staticmethod
    def _from_lambda(response: Mapping[str, Any]) -> tuple[int, dict[str, str], bytes, list[str]]:
        headers = {str(k): str(v) for k, v in (response.get("headers") or {}).items()}
        for name, values in (response.get("multiValueHeaders") or {}).items():
            headers[name] = ",".join(str(v) for v in values)
        raw = response.get("body") or ""
        payload = base64.b64decode(raw) if response.get("isBase64Encoded") else str(raw).encode("utf-8")
        status = int(response.get("statusCode", 200))
        if status not in HTTPStatus._value2member_map_ and not 100 <= status <= 599:
            return 502, {"Content-Type": "application/json"}, b'{"message":"Internal Server Error"}', []
        return status, headers, payload, list(response.get("cookies") or [])
