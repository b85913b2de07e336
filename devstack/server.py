"""The local HTTP API: real requests in, API Gateway HTTP API (payload v2) events to the handlers, responses out.

What API Gateway does in front of the deployed functions, in the same order:

1. match the route against template.yaml's HttpApi events (:class:`devstack.api.LocalApi`); no route → 404;
2. the JWT authorizer: ``Authorization: Bearer <jwt>`` checked against the local key (signature, ``iss``,
   ``aud``, ``exp``) → ``401`` problem+json when missing or invalid, else the claims go to
   ``requestContext.authorizer.jwt.claims`` (as strings, as API Gateway passes them);
3. invoke the function with the event and return its response unchanged (status, headers, cookies, body,
   base64 bodies decoded); a handler that raises is API Gateway's ``500 {"message": "Internal Server Error"}``.

Under ``/oidc`` it serves the local OpenID Connect issuer (:mod:`devstack.oidc`) when given one; the JWT check then
trusts its issuer as well as ``packyard token``'s.

Besides the API it serves ``GET /openapi.json`` (generated from the handlers, see :mod:`devstack.openapi`) and a
Swagger UI at ``GET /docs`` whose assets come from Powertools' bundled copy (no CDN, works offline).

Requests are served concurrently, one thread per connection, with no lock around the handlers: a Powertools resolver
keeps the current event on its module-level ``app``, so each invocation runs on a module instance of its own
(:func:`devstack.lambdas.invoke_handler` keeps a pool per function and imports another instance when all are busy,
as Lambda starts another execution environment). Step Functions tasks run concurrently on moto's threads the same way.
"""

from __future__ import annotations

import base64
import contextlib
import json
import re
import socket
import sys
import threading
import time
import traceback
from collections.abc import Callable, Mapping
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal
from urllib.parse import parse_qsl, urlsplit

from devstack import edge as edge_limits
from devstack.api import LocalApi
from devstack.apigw import http_event
from packyard_cli.tokens import ISSUER, InvalidToken, LocalKey

if TYPE_CHECKING:
    from devstack.oidc import LocalIssuer

TEXT_TYPES = ("application/json", "application/problem+json", "application/xml", "application/x-www-form-urlencoded")
# how long a request (its line, headers and whole body) may take to arrive, however it trickles in
READ_TIMEOUT_SECONDS = 10.0
# API Gateway's 10 MB (devstack.edge); with the edge limits off, what this server still reads at most
MAX_BODY_BYTES = edge_limits.MAX_BODY_BYTES
UNLIMITED_BODY_BYTES = 64 * 1024 * 1024
_CONTENT_LENGTH = re.compile(r"[0-9]{1,20}")


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


def aws_message(answer: tuple[int, bytes]) -> tuple[int, dict[str, str], bytes]:
    """One of API Gateway's own answers (``{"message": ...}``, not problem+json: the function never ran)."""
    return answer[0], {"Content-Type": "application/json"}, answer[1]


class BadRequestFraming(ValueError):
    """The request's framing (Content-Length, Transfer-Encoding) cannot be read: 400, answered at once."""


class BodyTooLarge(ValueError):
    pass


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
        edge: edge_limits.EdgeLimits | Literal["template"] | None = "template",
        oidc: Callable[[str], LocalIssuer] | None = None,
    ) -> None:
        super().__init__(sock.getsockname()[:2], ApiRequestHandler, bind_and_activate=False)
        self.read_timeout = read_timeout
        # API Gateway's body limit, integration timeout and route throttles (None: off; PACKYARD_LOCAL_EDGE_LIMITS)
        self.edge = edge_limits.configured() if edge == "template" else edge
        self.socket.close()
        self.socket = sock
        self.server_address = sock.getsockname()[:2]
        self.api = api
        self.key = key
        self.log = log or (lambda line: print(line, file=sys.stderr, flush=True))
        self._openapi = openapi
        self._openapi_cache: bytes | None = None
        self._openapi_lock = threading.Lock()
        # the local OpenID Connect issuer at <url>/oidc (its factory takes this server's URL)
        self.oidc = oidc(self.url) if oidc is not None else None
        self.issuers = (ISSUER, self.oidc.issuer) if self.oidc is not None else (ISSUER,)

    @property
    def url(self) -> str:
        host, port = self.socket.getsockname()[:2]
        return f"http://{host}:{port}"

    def openapi_document(self) -> bytes:
        with self._openapi_lock:
            if self._openapi_cache is None:
                self._openapi_cache = json.dumps(self._openapi(), indent=2).encode()
            return self._openapi_cache


def console_log() -> Callable[[str], None]:
    """The access line ``packyard local`` writes (rich, to stderr, with the time), from either of its processes."""
    from rich.console import Console

    console = Console(stderr=True, highlight=False)
    return lambda line: console.print(f"[dim]{time.strftime('%H:%M:%S')}[/] {line}", soft_wrap=True)


def start_api_server(
    sock: Any,
    stack: Any,
    key: LocalKey,
    *,
    state_dir: str | Path,
    idp: str | None,
    log: Callable[[str], None] | None,
) -> LocalApiServer:
    """The local HTTP API on ``sock`` (already listening) for ``stack`` (a ``devstack.template.Stack``), serving on a
    thread of its own, with the OpenAPI document built in the background (it imports the handlers' code, so the first
    API request does not pay for those imports) and the local OpenID Connect issuer (``packyard login``'s) at
    ``/oidc``."""
    from devstack.oidc import issuer_for
    from devstack.openapi import generate

    host, port = sock.getsockname()[:2]
    api_url = f"http://{host}:{port}"
    server = LocalApiServer(
        sock,
        LocalApi(stack),
        key,
        openapi=lambda: generate(server_url=api_url),
        log=log,
        oidc=lambda url: issuer_for(key, url, state_dir=state_dir, idp=idp),
    )
    threading.Thread(target=server.serve_forever, args=(0.1,), name="packyard-api", daemon=True).start()
    threading.Thread(target=server.openapi_document, name="packyard-warmup", daemon=True).start()
    return server


class ApiRequestHandler(BaseHTTPRequestHandler):
    server: LocalApiServer
    protocol_version = "HTTP/1.1"
    server_version = "packyard-local"
    sys_version = ""

    # ---------------------------------------------------------------- plumbing

    def setup(self) -> None:
        # a client that goes quiet frees its worker after the read timeout (and one that trickles, by the deadline)
        self.request.settimeout(self.server.read_timeout)
        self._watchdog: threading.Timer | None = None
        self._expired = threading.Event()
        super().setup()

    def handle_one_request(self) -> None:
        # One deadline for the whole request to arrive (line, headers, body): a per-read timeout alone is reset by
        # every byte, so a body trickled a byte every few seconds would hold this worker for as long as it likes.
        # At the deadline the socket's read side is shut: the blocked read returns, and the answer is 408.
        self._expired.clear()
        self._watchdog = threading.Timer(self.server.read_timeout, self._expire)
        self._watchdog.daemon = True
        self._watchdog.start()
        try:
            super().handle_one_request()
        finally:
            self._disarm()

    def _expire(self) -> None:
        self._expired.set()
        with contextlib.suppress(OSError):
            self.request.shutdown(socket.SHUT_RD)

    def _disarm(self) -> None:
        if self._watchdog is not None:
            self._watchdog.cancel()
            self._watchdog = None

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        # http.server's own refusals (414 request line too long, 431 header too long or too many, 400 bad request
        # line, 505): problem+json like every other answer, not its HTML page
        self.close_connection = True
        if self._expired.is_set():  # the request line or headers were cut off by the deadline, not malformed
            code, message, explain = 408, None, "the request did not arrive in time"
            self.request_version = self.protocol_version
        title = message or HTTPStatus(code).phrase
        error_code = "invalid_request" if code < 500 else "internal_error"
        status, headers, payload = problem(code, error_code, HTTPStatus(code).phrase, explain or title)
        self._send(status, headers, payload)

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

    def _read_exactly(self, size: int) -> bytes:
        data = self.rfile.read(size)
        if len(data) < size:  # the client closed, or the deadline shut the read side
            raise TimeoutError("the request body ended before its length")
        return data

    def _read_body(self, limit: int) -> bytes | None:
        """The body, at most ``limit`` bytes (BodyTooLarge past it; BadRequestFraming when its framing is wrong;
        TimeoutError when it did not arrive by the deadline)."""
        lengths = self.headers.get_all("Content-Length") or []
        encoding = (self.headers.get("Transfer-Encoding") or "").strip().lower()
        if encoding and lengths:
            raise BadRequestFraming("both Content-Length and Transfer-Encoding")  # RFC 9112 6.1: smuggling
        if encoding == "chunked":
            chunks: list[bytes] = []
            total = 0
            while True:
                line = self.rfile.readline(1024)
                if not line.endswith(b"\n"):
                    raise TimeoutError("the chunked body ended early")
                size_text = line.split(b";", 1)[0].strip()
                if not re.fullmatch(rb"[0-9A-Fa-f]{1,16}", size_text):
                    raise BadRequestFraming("a chunk size is not hexadecimal")
                size = int(size_text, 16)
                if size == 0:
                    while self.rfile.readline(1024) not in (b"\r\n", b"\n", b""):
                        pass
                    return b"".join(chunks)
                total += size
                if total > limit:
                    raise BodyTooLarge()
                chunks.append(self._read_exactly(size))
                self.rfile.readline(3)
        if encoding:
            raise BadRequestFraming(f"Transfer-Encoding {encoding!r} is not supported")
        if not lengths:
            return None
        if len(set(lengths)) != 1 or not _CONTENT_LENGTH.fullmatch(lengths[0].strip()):
            # RFC 9110 8.6: Content-Length = 1*DIGIT; -1 used to be read as "until the client closes" (408 after 10 s)
            raise BadRequestFraming(f"Content-Length must be one non-negative integer, got {', '.join(lengths)!r}")
        length = int(lengths[0])
        if length > limit:
            raise BodyTooLarge()
        return self._read_exactly(length) if length else None

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
        limit = self.server.edge.max_body_bytes if self.server.edge is not None else UNLIMITED_BODY_BYTES
        if self._expired.is_set():
            # the deadline cut the headers short: what arrived is not the request the client is sending (a request
            # line cut short reads as HTTP/0.9, which would get no status line)
            self._disarm()
            self.request_version = self.protocol_version
            detail = "the request's headers did not arrive in time"
            self._refuse(*problem(408, "invalid_request", "Request timeout", detail))
            return
        try:
            body = self._read_body(limit)
        except BodyTooLarge:
            # API Gateway's answer past its 10 MB payload quota; the rest of the body is still on the wire
            self._refuse(*aws_message(edge_limits.TOO_LARGE))
            return
        except BadRequestFraming as exc:
            self._refuse(*problem(400, "invalid_request", "Bad request framing", str(exc)))
            return
        except (TimeoutError, OSError):
            detail = "the request did not arrive in time (a body shorter than its Content-Length, or trickled)"
            self._refuse(*problem(408, "invalid_request", "Request timeout", detail))
            return
        finally:
            self._disarm()
        if self._expired.is_set():
            self.close_connection = True  # it arrived just as the deadline shut the read side: answer, then close
        split = urlsplit(self.path)
        path = split.path or "/"
        cookies: list[str] = []
        if self.command in ("GET", "HEAD") and (path in ("/openapi.json", "/docs", "/docs/") or path in SWAGGER_ASSETS):
            wants_json = path.startswith("/docs") and ("format", "json") in parse_qsl(split.query)
            status, headers, payload = self._serve_docs("/openapi.json" if wants_json else path)
        elif self.server.oidc is not None and self.server.oidc.handles(path):
            status, headers, payload = self.server.oidc.serve(
                self.command, path, split.query, body, self.headers.get("Authorization") or ""
            )
        else:
            status, headers, payload, cookies = self._serve_api(path, split.query, body)
        self._send(status, headers, payload, cookies)
        elapsed = (time.monotonic() - started) * 1000
        self.server.log(f"{self.command} {self.path} → {status} ({elapsed:.0f} ms)")

    def _refuse(self, status: int, headers: dict[str, str], payload: bytes) -> None:
        self.close_connection = True  # whatever is left of the request is still on the wire
        self._send(status, headers, payload)
        self.server.log(f"{self.command} {self.path} → {status}")

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
        found = api.resolve(self.command, path)
        if found is None:
            # API Gateway answers an unknown route before it runs the authorizer; LocalApi says 404 the same way
            response = api.call(http_event(self.command, path, claims=None))
            return self._from_lambda(response)
        route_key = f"{found[0].method} {found[0].path}"
        edge = self.server.edge
        if edge is not None and not edge.admit(route_key):
            return (*aws_message(edge_limits.THROTTLED), [])  # the route's token bucket is empty

        authorization = self.headers.get("Authorization") or ""
        scheme, _, token = authorization.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            status, headers, payload = problem(
                401, "unauthorized", "Missing or invalid credentials", "send Authorization: Bearer <token>"
            )
            return status, {**headers, "WWW-Authenticate": "Bearer"}, payload, []
        try:
            claims = self.server.key.verify(token.strip(), issuers=self.server.issuers)
        except InvalidToken as exc:
            status, headers, payload = problem(401, "unauthorized", "Missing or invalid credentials", str(exc))
            return status, {**headers, "WWW-Authenticate": 'Bearer error="invalid_token"'}, payload, []

        event = self._event(path, query, body, claims_as_api_gateway_passes_them(claims))
        timeout = edge.for_route(route_key).timeout_seconds if edge is not None else None
        outcome = self._invoke(event, timeout)  # no lock: each concurrent invocation gets its own module instance
        if outcome is None:
            self.server.log(f"{self.command} {path}: no answer within the integration timeout ({timeout} s)")
            return (*aws_message(edge_limits.TIMED_OUT), [])
        if isinstance(outcome, BaseException):
            trace = "".join(traceback.format_exception(outcome))
            self.server.log(f"{self.command} {path}: the handler raised\n{trace}")
            return 500, {"Content-Type": "application/json"}, b'{"message":"Internal Server Error"}', []
        return self._from_lambda(outcome)

    def _invoke(self, event: dict[str, Any], timeout: float | None) -> dict[str, Any] | BaseException | None:
        """The function's answer, the exception it raised, or None when it did not answer within ``timeout`` (it
        goes on running on its own thread, as a Lambda invocation goes on after API Gateway gave up on it)."""
        if timeout is None:
            try:
                return self.server.api.call(event)
            except Exception as exc:
                return exc
        outcome: list[dict[str, Any] | BaseException] = []
        done = threading.Event()

        def run() -> None:
            try:
                outcome.append(self.server.api.call(event))
            except Exception as exc:
                outcome.append(exc)
            finally:
                done.set()

        threading.Thread(target=run, name="packyard-invoke", daemon=True).start()
        return outcome[0] if done.wait(timeout) else None

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
