"""HTTP client for the Packyard API: bearer token, retries with backoff, problem+json errors, exit codes.

A request is retried on connection errors, timeouts, 429 and 5xx (with exponential backoff, honouring a short
``Retry-After``), always with the same ``Idempotency-Key``: the caller generates one per command, so a retried
mutation is recognised by the service as the same request and never applied twice.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

import requests

from packyard_cli import __version__

# Exit codes: scripts can tell these apart (README, "Exit codes"). Only 5 means "the same command may work later".
EXIT_OK = 0
EXIT_ERROR = 1  # anything else: a bug, an answer the CLI does not understand
EXIT_USAGE = 2  # bad arguments or local input (caught before anything is sent)
EXIT_REFUSED = 3  # the service said no, and repeating the request will not change that
EXIT_CONFLICT = 4  # the state is not what the command assumed (409/412/428): re-read, then decide
EXIT_UNAVAILABLE = 5  # transient: cannot connect, 5xx/429 after retries, still running, outcome unknown: retry
EXIT_NOT_FOUND = 6  # 404: no such package, version, workspace, installation or operation
EXIT_UNAUTHORIZED = 7  # 401/403: no token, a token the service refuses, or a missing scope

REFUSED_CODES = frozenset(
    {
        "archive_rejected",
        "needs_consent",
        "consent_rejected",
        "consent_expired",
        "upload_expired",
        "release_unavailable",
        "limit_exceeded",
        "quota_exceeded",
        "idempotency_key_reused",
        "idempotency_key_required",
        "invalid_request",
        "publish_failed",
    }
)
UNAVAILABLE_CODES = frozenset({"unavailable", "throttled"})
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
    """The exit code of an error answer: a throttle (429, or the ``throttled`` code) is always 5, whatever else the
    answer says; otherwise by its stable ``code`` first, then by HTTP status."""
    if status == 429 or code in UNAVAILABLE_CODES:
        return EXIT_UNAVAILABLE
    if code in REFUSED_CODES:
        return EXIT_REFUSED
    if code == "not_found" or status == 404:
        return EXIT_NOT_FOUND
    if code == "unauthorized" or status in (401, 403):
        return EXIT_UNAUTHORIZED
    if status in (409, 412, 428):
        return EXIT_CONFLICT
    if status == 429 or status >= 500:
        return EXIT_UNAVAILABLE
    if 400 <= status < 500:
        return EXIT_REFUSED
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
    log: Callable[[str], None] | None = None  # --verbose: one line per HTTP attempt, on stderr

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
            # compact UTF-8, as the service measures a manifest: \u escapes and spaces would make the body of a
            # 10,000-file manifest up to twice its canonical size (the request must fit Lambda's 6 MB payload)
            try:
                data = json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
            except UnicodeEncodeError:  # a lone surrogate (a name not in UTF-8): sent escaped, the service names it
                data = json.dumps(body, separators=(",", ":")).encode()
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

    def download(self, url: str, chunk_size: int = 1 << 16) -> Iterator[bytes]:
        """GET a presigned URL (no bearer token: the URL is the credential) and yield its body in chunks."""
        response = self._send("GET", url, stream=True)
        if response.status_code >= 300:
            raise CliError(
                "the download was refused by storage",
                code=f"http_{response.status_code}",
                detail=response.text[:300] or None,
                exit_code=exit_code_for(response.status_code, None),
                status=response.status_code,
            )
        try:
            yield from response.iter_content(chunk_size)
        except (requests.ConnectionError, requests.Timeout) as exc:
            raise CliError(
                "the download broke off", detail=_reason(exc), code="unavailable", exit_code=EXIT_UNAVAILABLE
            ) from None
        finally:
            response.close()

    def fetch(self, path: str) -> requests.Response:
        """GET an API path for its raw bytes, a redirect not followed (its target, a presigned URL, must not get the
        bearer token: read it with :meth:`download`); an error status raises :class:`ApiError`."""
        headers = {"Accept": "application/octet-stream, application/json"}
        token = self.token()
        if token:
            headers["Authorization"] = f"Bearer {token}"
        response = self._send("GET", f"{self.endpoint}{path}", headers=headers, allow_redirects=False)
        if response.status_code >= 400:
            raise ApiError(response)
        return response

    def _send(self, method: str, url: str, *, rewind: Any = None, **kwargs: Any) -> requests.Response:
        last_error: Exception | None = None
        for attempt in range(1, self.attempts + 1):
            if rewind is not None and hasattr(rewind, "seek"):
                rewind.seek(0)
            started = time.monotonic()
            try:
                response = self.session.request(method, url, timeout=self.timeout, **kwargs)
            except (requests.ConnectionError, requests.Timeout) as exc:
                last_error = exc
                self._log(f"{method} {_loggable(url)} → {_reason(exc)} (attempt {attempt})")
            else:
                elapsed = (time.monotonic() - started) * 1000
                self._log(f"{method} {_loggable(url)} → {response.status_code} ({elapsed:.0f} ms, attempt {attempt})")
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

    def _log(self, line: str) -> None:
        if self.log is not None:
            self.log(line)


def _loggable(url: str) -> str:
    """A URL without its query string when it is presigned (the signature is a credential)."""
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    if "X-Amz-Signature" in parts.query or "Signature=" in parts.query:
        return f"{parts.scheme}://{parts.netloc}{parts.path}?…(presigned)"
    return url


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
