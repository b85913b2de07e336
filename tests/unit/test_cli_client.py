"""The CLI's HTTP client with a fake session: retries keep the Idempotency-Key, problems map to exit codes."""

from __future__ import annotations

import json
from typing import Any

import pytest
import requests

from packyard_cli.arguments import package_at_version, scope_value
from packyard_cli.client import (
    EXIT_CONFLICT,
    EXIT_NOT_FOUND,
    EXIT_REFUSED,
    EXIT_UNAUTHORIZED,
    EXIT_UNAVAILABLE,
    ApiError,
    Client,
    CliError,
    exit_code_for,
)
from packyard_cli.parser import build_parser


def response(status: int, body: Any = None, headers: dict[str, str] | None = None) -> requests.Response:
    made = requests.Response()
    made.status_code = status
    made._content = json.dumps(body).encode() if body is not None else b""
    made.headers.update(headers or {})
    if body is not None:
        made.headers.setdefault("Content-Type", "application/json")
    return made


class FakeSession:
    """Answers from a script; records what was sent."""

    def __init__(self, *answers: requests.Response | Exception) -> None:
        self.answers = list(answers)
        self.sent: list[dict[str, Any]] = []
        self.headers: dict[str, str] = {}

    def request(self, method: str, url: str, **kwargs: Any) -> requests.Response:
        self.sent.append({"method": method, "url": url, **kwargs})
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer


def client(session: FakeSession, sleeps: list[float]) -> Client:
    return Client("http://api.test/", token=lambda: "tok", sleep=sleeps.append, session=session)  # type: ignore[arg-type]


def test_retries_keep_the_same_idempotency_key_and_back_off() -> None:
    # Given a service that drops the connection, then answers 503, then accepts
    session = FakeSession(
        requests.ConnectionError("reset"),
        response(503, {"title": "Unavailable", "code": "unavailable"}),
        response(202, {"operationId": "op-1"}),
    )
    sleeps: list[float] = []

    # When one mutation is sent
    reply = client(session, sleeps).request("PUT", "/v1/x", body={"a": 1}, idempotency_key="key-1")

    # Then all three attempts carried the same key and body, with exponential backoff between them
    assert reply.status == 202 and reply.body == {"operationId": "op-1"}
    assert [sent["headers"]["Idempotency-Key"] for sent in session.sent] == ["key-1"] * 3
    assert {sent["data"] for sent in session.sent} == {b'{"a":1}'}
    assert all(sent["headers"]["Authorization"] == "Bearer tok" for sent in session.sent)
    assert sleeps == [0.25, 0.5]


def test_bodies_are_sent_as_compact_utf8() -> None:
    # Given a body with a non-ASCII path (a manifest is measured by the service as compact UTF-8)
    session = FakeSession(response(201, {"ok": True}))
    # When sent, Then it is compact UTF-8, not \u escapes (which would be up to six bytes for one character)
    client(session, []).request("POST", "/v1/x", body={"path": "é/日本.md"})
    assert session.sent[0]["data"] == '{"path":"é/日本.md"}'.encode()


def test_retry_after_is_honoured_for_429() -> None:
    session = FakeSession(response(429, {"code": "throttled"}, {"Retry-After": "2"}), response(200, {"ok": True}))
    sleeps: list[float] = []

    client(session, sleeps).request("GET", "/v1/x")

    assert sleeps == [2.0]


def test_conflicts_are_not_retried_and_map_to_exit_code_4() -> None:
    problem = {"title": "Version conflict", "status": 412, "code": "version_conflict", "detail": "at 2, not 1"}
    session = FakeSession(response(412, problem, {"Content-Type": "application/problem+json"}))

    with pytest.raises(ApiError) as raised:
        client(session, []).request("PUT", "/v1/x", idempotency_key="k")

    assert len(session.sent) == 1
    assert (raised.value.title, raised.value.code, raised.value.detail) == (
        "Version conflict",
        "version_conflict",
        "at 2, not 1",
    )
    assert raised.value.exit_code == EXIT_CONFLICT


def test_an_unreachable_service_is_unavailable_after_the_last_attempt() -> None:
    session = FakeSession(*[requests.ConnectionError("refused")] * 4)

    with pytest.raises(CliError) as raised:
        client(session, []).request("GET", "/v1/x")

    assert raised.value.exit_code == EXIT_UNAVAILABLE
    assert raised.value.code == "unavailable"
    assert len(session.sent) == 4


@pytest.mark.parametrize(
    ("status", "code", "exit_code"),
    [
        (422, "archive_rejected", EXIT_REFUSED),
        (403, "needs_consent", EXIT_REFUSED),
        (409, "release_unavailable", EXIT_REFUSED),
        (409, "operation_in_progress", EXIT_CONFLICT),
        (409, "version_exists", EXIT_CONFLICT),
        (412, "version_conflict", EXIT_CONFLICT),
        (428, "version_required", EXIT_CONFLICT),
        (503, "unavailable", EXIT_UNAVAILABLE),
        (500, None, EXIT_UNAVAILABLE),
        (401, "unauthorized", EXIT_UNAUTHORIZED),
        (404, "not_found", EXIT_NOT_FOUND),
        (422, "idempotency_key_reused", EXIT_REFUSED),
    ],
)
def test_exit_codes_distinguish_refused_conflict_and_unavailable(status: int, code: str | None, exit_code: int) -> None:
    assert exit_code_for(status, code) == exit_code


@pytest.mark.parametrize(
    ("status", "code"),
    [
        (429, None),  # API Gateway's route throttle: {"message": "Too Many Requests"}
        (429, "quota_exceeded"),  # a throttle is 5 even when the answer names a refusal's code
        (429, "publish_failed"),
        (503, "throttled"),
        (409, "throttled"),
    ],
)
def test_any_throttle_exits_5(status: int, code: str | None) -> None:
    assert exit_code_for(status, code) == EXIT_UNAVAILABLE


def test_api_gateway_messages_without_a_problem_body_still_read_well() -> None:
    error = ApiError(response(500, {"message": "Internal Server Error"}))

    assert error.title == "HTTP 500"
    assert error.detail == "Internal Server Error"
    assert error.exit_code == EXIT_UNAVAILABLE


def test_arguments_parse_releases_and_scopes() -> None:
    args = build_parser().parse_args(
        ["install", "weather@1.2.0", "--workspace", "ws-1", "--scope", "task:t-9", "--json", "--endpoint", "http://x"]
    )

    assert tuple(args.release) == ("weather", "1.2.0")
    assert args.scope == {"kind": "task", "id": "t-9"}
    assert args.json is True and args.endpoint == "http://x"
    assert package_at_version("a@1.0.0-rc.1") == ("a", "1.0.0-rc.1")
    assert scope_value("workspace") == {"kind": "workspace"}
    with pytest.raises(Exception, match="exact version"):
        package_at_version("weather")
    with pytest.raises(Exception, match="needs an id"):
        scope_value("session")
