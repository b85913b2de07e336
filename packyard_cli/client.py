"""HTTP client for the Packyard API: bearer token, retries with backoff, problem+json errors, exit codes.

A request is retried on connection errors, timeouts, 429 and 5xx (with exponential backoff, honouring a short
``Retry-After``), always with the same ``Idempotency-Key``: the caller generates one per command, so a retried
mutation is recognised by the service as the same request and never applied twice.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

import requests

from packyard_cli import __version__

# Exit codes: scripts can tell these apart.
EXIT_OK = 0
EXIT_ERROR = 1
EXIT_USAGE = 2
EXIT_REFUSED = 3
EXIT_CONFLICT = 4
EXIT_UNAVAILABLE = 5

REFUSED_CODES = frozenset({"archive_rejected", "needs_consent", "upload_expired"})
UNAVAILABLE_CODES = frozenset({"release_unavailable", "unavailable"})
RETRYABLE_STATUS = frozenset({429, 500, 502, 503, 504})


class CliError(Exception):
    """Anything the CLI reports and exits on: a title, optionally a code and detail, and the exit code."""

    def __init__(
        self,
        title: str,
        *,
        code: str | None = None,
        detail: str | None = None,
        exit_code: int = EXIT_ERROR,
        status: int | None = None,
        body: Any = None,
    ) -> None:
        super().__init__(title)
        self.title = title
        self.code = code
        self.detail = detail
        self.exit_code = exit_code
        self.status = status
        self.body = body

    def as_json(self) -> dict[str, Any]:
        if isinstance(self.body, dict):
            return self.body
        out: dict[str, Any] = {"title": self.title}
        for name, value in (("status", self.status), ("code", self.code), ("detail", self.detail)):
            if value is not None:
                out[name] = value
        return out


def exit_code_for(status: int, code: str | None) -> int:
    if code in UNAVAILABLE_CODES:
        return EXIT_UNAVAILABLE
    if code in REFUSED_CODES:
        return EXIT_REFUSED
    if status in (409, 412, 428):
        return EXIT_CONFLICT
    if status == 429 or status >= 500:
        return EXIT_UNAVAILABLE
    return EXIT_ERROR


class ApiError(CliError):
    """The API answered with an error (problem+json, or API Gateway's own ``{"message": …}``)."""

    def __init__(self, response: requests.Response) -> None:
        try:
            body: Any = response.json()
        except ValueError:
            body = None
        if isinstance(body, dict) and ("title" in body or "code" in body):
            title = str(body.get("title") or response.reason or "Error")
            code = body.get("code")
            detail = body.get("detail")
        else:
            title = f"HTTP {response.status_code} {response.reason or ''}".strip()
            code = None
            detail = body.get("message") if isinstance(body, dict) else (response.text[:500] or None)
        super().__init__(
            title,
            code=str(code) if code else None,
            detail=str(detail) if detail is not None else None,
            exit_code=exit_code_for(response.status_code, str(code) if code else None),
            status=response.status_code,
            body=body if isinstance(body, dict) else None,
        )
        self.response = response


@dataclass
class Reply:
    status: int
    headers: Mapping[str, str]
    body: Any

    def header(self, name: str) -> str | None:
        return self.headers.get(name)


def segment(value: str) -> str:
    """One path segment, percent-encoded (ids never smuggle a '/')."""
    return quote(value, safe="")


@dataclass
class Client:
    endpoint: str
    token: Callable[[], str | None] = lambda: None
    attempts: int = 4
    backoff: float = 0.25
    timeout: float = 30.0
    sleep: Callable[[float], None] = time.sleep
    session: requests.Session = field(default_factory=requests.Session)

    def __post_init__(self) -> None:
        self.endpoint = self.endpoint.rstrip("/")
        self.session.headers["User-Agent"] = f"packyard-cli/{__version__}"

    def request(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        params: Mapping[str, Any] | None = None,
        headers: Mapping[str, str] | None = None,
        idempotency_key: str | None = None,
        ok: tuple[int, ...] = (),
    ) -> Reply:
        """Send one API request (retried as described above); an error status raises :class:`ApiError`
        unless it is in ``ok``."""
        send_headers = {"Accept": "application/json", **(headers or {})}
        token = self.token()
        if token:
            send_headers["Authorization"] = f"Bearer {token}"
        if idempotency_key:
            send_headers["Idempotency-Key"] = idempotency_key
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            send_headers["Content-Type"] = "application/json"
        url = f"{self.endpoint}{path}"
        response = self._send(method, url, data=data, params=params, headers=send_headers)
        if response.status_code >= 400 and response.status_code not in ok:
            raise ApiError(response)
        return Reply(response.status_code, response.headers, _json_or_text(response))

    def put_bytes(self, url: str, data: Any, headers: Mapping[str, str] | None = None) -> None:
        """PUT raw bytes (a presigned upload URL: no bearer token, the URL is the credential)."""
        response = self._send("PUT", url, data=data, headers=dict(headers or {}), rewind=data)
        if response.status_code >= 300:
            raise CliError(
                "the upload was refused by storage",
                code=f"http_{response.status_code}",
                detail=response.text[:300] or None,
                exit_code=exit_code_for(response.status_code, None),
                status=response.status_code,
            )

    def _send(self, method: str, url: str, *, rewind: Any = None, **kwargs: Any) -> requests.Response:
        last_error: Exception | None = None
        for attempt in range(1, self.attempts + 1):
            if rewind is not None and hasattr(rewind, "seek"):
                rewind.seek(0)
            try:
                response = self.session.request(method, url, timeout=self.timeout, **kwargs)
            except (requests.ConnectionError, requests.Timeout) as exc:
                last_error = exc
            else:
                if response.status_code not in RETRYABLE_STATUS or attempt == self.attempts:
                    return response
                last_error = None
                retry_after = _retry_after(response)
                if retry_after is not None:
                    self.sleep(min(retry_after, 5.0))
                    continue
            if attempt < self.attempts:
                self.sleep(self.backoff * 2 ** (attempt - 1))
        assert last_error is not None
        raise CliError(
            "the service is unavailable",
            code="unavailable",
            detail=f"cannot reach {_origin(url)}: {_reason(last_error)}",
            exit_code=EXIT_UNAVAILABLE,
        )


def _json_or_text(response: requests.Response) -> Any:
    if not response.content:
        return None
    try:
        return response.json()
    except ValueError:
        return response.text


def _retry_after(response: requests.Response) -> float | None:
    value = response.headers.get("Retry-After")
    try:
        return max(0.0, float(value)) if value else None
    except ValueError:
        return None


def _origin(url: str) -> str:
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"


def _reason(exc: Exception) -> str:
    """A short reason, found by walking the exception chain (requests wraps urllib3 wraps the socket error)."""
    seen: set[int] = set()
    todo: list[Any] = [exc]
    while todo:
        current = todo.pop()
        if not isinstance(current, BaseException) or id(current) in seen:
            continue
        seen.add(id(current))
        if isinstance(current, ConnectionRefusedError):
            return "connection refused (is the service running?)"
        if isinstance(current, TimeoutError | requests.Timeout):
            return "timed out"
        todo.extend([current.__cause__, current.__context__, getattr(current, "reason", None), *current.args])
    return type(exc).__name__
