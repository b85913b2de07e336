"""The local HTTP API serves requests concurrently: no lock around handler calls, and two concurrent invocations of one
function run on two module instances (as two Lambda execution environments would). Overlap is proven with a barrier
both requests must reach inside the handler, never by timing."""

from __future__ import annotations

import json
import sys
import threading
import types
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import requests

from devstack.api import LocalApi
from devstack.apigw import Route
from devstack.server import LocalApiServer
from devstack.template import FunctionSpec
from packyard_cli import tokens
from packyard_cli.ports import listen
from tests.support.local_server import serving

PROBE_MODULE = "_local_server_probe"
HANDLER = f"""
import json
import sys

INSTANCE = object()  # one per module instance


def handler(event, context):
    probe = sys.modules["{PROBE_MODULE}"]
    probe.barrier.wait()  # both requests are inside a handler at once, or neither gets past this line
    return {{"statusCode": 200, "headers": {{"Content-Type": "application/json"}},
            "body": json.dumps({{"instance": id(INSTANCE), "path": event["rawPath"]}})}}
"""
SAFETY_TIMEOUT = 60  # only reached if the requests were serialized (the barrier then breaks and the test fails)


@pytest.fixture
def probe() -> Iterator[types.ModuleType]:
    module = types.ModuleType(PROBE_MODULE)
    module.barrier = threading.Barrier(2, timeout=SAFETY_TIMEOUT)  # type: ignore[attr-defined]
    sys.modules[PROBE_MODULE] = module
    try:
        yield module
    finally:
        del sys.modules[PROBE_MODULE]


def two_at_once(url: str, token: str, paths: tuple[str, str]) -> list[requests.Response]:
    headers = {"Authorization": f"Bearer {token}"}
    with ThreadPoolExecutor(max_workers=2) as pool:
        futures = [
            pool.submit(requests.get, f"{url}{path}", headers=headers, timeout=2 * SAFETY_TIMEOUT) for path in paths
        ]
        return [future.result() for future in futures]


def test_the_server_calls_handlers_concurrently(tmp_path: Path) -> None:
    # Given a server whose API blocks every call until two calls are inside it
    barrier = threading.Barrier(2, timeout=SAFETY_TIMEOUT)

    class BlockingApi:
        def resolve(self, method: str, path: str) -> Any:
            return Route(method, path, "Blocking"), {}

        def call(self, event: dict[str, Any]) -> dict[str, Any]:
            barrier.wait()
            return {"statusCode": 200, "body": json.dumps({"path": event["rawPath"]})}

    key = tokens.load_or_create_key(tmp_path)
    with serving(BlockingApi(), key) as server:
        # When two requests arrive together
        responses = two_at_once(server.url, key.mint(tenant="t-1", subject="s"), ("/v1/one", "/v1/two"))
    # Then both were answered: each call waited for the other, so they overlapped
    assert [r.status_code for r in responses] == [200, 200]
    assert sorted(r.json()["path"] for r in responses) == ["/v1/one", "/v1/two"]
    assert not barrier.broken


def test_concurrent_invocations_of_one_function_run_on_their_own_module_instances(
    tmp_path: Path, probe: types.ModuleType
) -> None:
    # Given one function (a handler file keeping a module-level object) behind one route of the local API
    code = tmp_path / "fn"
    code.mkdir()
    (code / "app.py").write_text(HANDLER)
    spec = FunctionSpec(
        logical_id="ProbeFunction",
        name="ProbeFunction",
        arn="arn:aws:lambda:us-east-1:123456789012:function:ProbeFunction",
        code_uri=code,
        handler="app.handler",
        timeout=30,
    )
    stack = types.SimpleNamespace(functions={"ProbeFunction": spec})
    api = LocalApi(stack, routes=[Route("GET", "/v1/probe/{n}", "ProbeFunction")])  # type: ignore[arg-type]
    key = tokens.load_or_create_key(tmp_path / "key")
    with serving(api, key) as server:
        # When two requests for it arrive together
        responses = two_at_once(server.url, key.mint(tenant="t-1", subject="s"), ("/v1/probe/1", "/v1/probe/2"))
    # Then both were answered while both were inside the handler, each by its own module instance
    assert [r.status_code for r in responses] == [200, 200], [r.text for r in responses]
    assert len({r.json()["instance"] for r in responses}) == 2
    assert not probe.barrier.broken


def test_a_body_shorter_than_its_content_length_frees_the_worker_with_408(tmp_path: Path) -> None:
    import socket

    key = tokens.load_or_create_key(tmp_path)
    with serving(LocalApi.__new__(LocalApi), key, read_timeout=0.5) as server:
        host, port = server.server_address[:2]
        with socket.create_connection((host, port), timeout=SAFETY_TIMEOUT) as client:
            client.sendall(b'PUT /v1/x HTTP/1.1\r\nHost: local\r\nContent-Length: 100\r\n\r\n{"short":')
            answer = client.recv(65536).decode()
        assert answer.startswith("HTTP/1.1 408"), answer
        assert "application/problem+json" in answer


# ---------------------------------------------------------------- the edge: framing, deadlines, API Gateway's limits


class StubApi:
    """Two routes; ``GET /v1/slow`` blocks until ``release`` is set. Answers how many body bytes it got."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.calls = 0

    def resolve(self, method: str, path: str) -> Any:
        for route in (Route("GET", "/v1/slow", "Slow"), Route("GET", "/v1/fast", "Fast"), Route("PUT", "/v1/x", "X")):
            if route.match(method, path) is not None:
                return route, {}
        return None

    def call(self, event: dict[str, Any]) -> dict[str, Any]:
        self.calls += 1
        if event["rawPath"] == "/v1/slow":
            self.release.wait(SAFETY_TIMEOUT)
        body = event.get("body") or ""
        return {"statusCode": 200, "body": json.dumps({"bytes": len(body)})}


class Edge:
    """A running server in front of a StubApi, with a raw-socket helper."""

    def __init__(self, tmp_path: Path, **options: Any) -> None:
        import socket

        self.socket = socket
        self.api = StubApi()
        self.key = tokens.load_or_create_key(tmp_path)
        self.server = LocalApiServer(
            listen("127.0.0.1", 0, "api", "--api-port"), self.api, self.key, openapi=dict, log=lambda _: None, **options
        )
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True)
        self.thread.start()
        self.token = self.key.mint(tenant="t-1", subject="s")

    def connect(self) -> Any:
        return self.socket.create_connection(self.server.server_address[:2], timeout=SAFETY_TIMEOUT)

    def get(self, path: str) -> requests.Response:
        headers = {"Authorization": f"Bearer {self.token}"}
        return requests.get(f"{self.server.url}{path}", headers=headers, timeout=SAFETY_TIMEOUT)

    def close(self) -> None:
        self.api.release.set()
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def edge_server(tmp_path: Path) -> Iterator[Edge]:
    server = Edge(tmp_path, read_timeout=1.0, edge=None)
    yield server
    server.close()


def _answer(client: Any) -> str:
    received = b""
    while b"\r\n\r\n" not in received:
        chunk = client.recv(65536)
        if not chunk:
            break
        received += chunk
    head, _, rest = received.partition(b"\r\n\r\n")
    length = next(
        (int(line.split(b":", 1)[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length")), 0
    )
    while len(rest) < length:
        chunk = client.recv(65536)
        if not chunk:
            break
        rest += chunk
    return (head + b"\r\n\r\n" + rest).decode("utf-8", "replace")


def _problem(answer: str) -> dict[str, Any]:
    assert "content-type: application/problem+json" in answer.lower(), answer[:500]
    body: dict[str, Any] = json.loads(answer.partition("\r\n\r\n")[2])
    return body


def test_a_header_line_too_long_is_431_problem_json(edge_server: Edge) -> None:
    with edge_server.connect() as client:
        client.sendall(b"GET /v1/fast HTTP/1.1\r\nHost: local\r\nX-Big: " + b"a" * 70_000 + b"\r\n\r\n")
        answer = _answer(client)
    assert answer.startswith("HTTP/1.1 431"), answer[:200]
    assert _problem(answer)["status"] == 431


def test_too_many_headers_is_431_problem_json(edge_server: Edge) -> None:
    headers = b"".join(b"X-H%d: v\r\n" % n for n in range(150))
    with edge_server.connect() as client:
        client.sendall(b"GET /v1/fast HTTP/1.1\r\nHost: local\r\n" + headers + b"\r\n")
        answer = _answer(client)
    assert answer.startswith("HTTP/1.1 431"), answer[:200]
    assert _problem(answer)["code"] == "invalid_request"


def test_a_request_line_too_long_is_414_problem_json(edge_server: Edge) -> None:
    with edge_server.connect() as client:
        client.sendall(b"GET /v1/" + b"a" * 70_000 + b" HTTP/1.1\r\nHost: local\r\n\r\n")
        answer = _answer(client)
    assert answer.startswith("HTTP/1.1 414"), answer[:200]
    assert _problem(answer)["status"] == 414


@pytest.mark.parametrize("length", ["-1", "+5", "5, 6", "0x10", "1e3", ""])
def test_a_content_length_that_is_not_one_non_negative_integer_is_400_at_once(tmp_path: Path, length: str) -> None:
    # a read timeout far longer than the test may take: the answer must not wait for it
    server = Edge(tmp_path, read_timeout=SAFETY_TIMEOUT, edge=None)
    try:
        with server.connect() as client:
            client.settimeout(5)
            client.sendall(f"PUT /v1/x HTTP/1.1\r\nHost: local\r\nContent-Length: {length}\r\n\r\n{{}}".encode())
            answer = _answer(client)
    finally:
        server.close()
    assert answer.startswith("HTTP/1.1 400"), answer[:200]
    assert _problem(answer)["code"] == "invalid_request"
    assert server.api.calls == 0


def test_content_length_with_transfer_encoding_is_400(edge_server: Edge) -> None:
    with edge_server.connect() as client:
        client.sendall(
            b"PUT /v1/x HTTP/1.1\r\nHost: local\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"
        )
        answer = _answer(client)
    assert answer.startswith("HTTP/1.1 400"), answer[:200]


def test_a_body_trickled_a_byte_at_a_time_is_cut_off_at_the_deadline(edge_server: Edge) -> None:
    # Given a server whose whole request must arrive within 1 s, and a client that sends a byte every 0.25 s (each
    # read then returns well within any per-read timeout) of a 40-byte body, 10 s in all
    stop = threading.Event()
    answered_at: list[float] = []
    import time

    with edge_server.connect() as client:
        client.sendall(b"PUT /v1/x HTTP/1.1\r\nHost: local\r\nContent-Length: 40\r\n\r\n")
        started = time.monotonic()

        def trickle() -> None:
            for _ in range(40):
                if stop.wait(0.25):
                    return
                try:
                    client.send(b"x")
                except OSError:
                    return

        sender = threading.Thread(target=trickle, daemon=True)
        sender.start()
        answer = _answer(client)
        answered_at.append(time.monotonic() - started)
        stop.set()
        sender.join()
    # Then the server answered 408 at its deadline, long before the body could have finished, and never called the API
    assert answer.startswith("HTTP/1.1 408"), answer[:200]
    assert _problem(answer)["status"] == 408
    assert answered_at[0] < 5, answered_at
    assert edge_server.api.calls == 0


# ---- API Gateway's own limits


def _edge_template(tmp_path: Path, *, burst: int, rate: float, timeout_ms: int | None = None) -> Path:
    events: dict[str, Any] = {
        "Fast": {"Type": "HttpApi", "Properties": {"ApiId": {"Ref": "HttpApi"}, "Method": "GET", "Path": "/v1/fast"}},
        "Slow": {"Type": "HttpApi", "Properties": {"ApiId": {"Ref": "HttpApi"}, "Method": "GET", "Path": "/v1/slow"}},
        "X": {"Type": "HttpApi", "Properties": {"ApiId": {"Ref": "HttpApi"}, "Method": "PUT", "Path": "/v1/x"}},
    }
    if timeout_ms is not None:
        events["Slow"]["Properties"]["TimeoutInMillis"] = timeout_ms
    template = {
        "Resources": {
            "HttpApi": {
                "Type": "AWS::Serverless::HttpApi",
                "Properties": {"DefaultRouteSettings": {"ThrottlingBurstLimit": burst, "ThrottlingRateLimit": rate}},
            },
            "Fn": {"Type": "AWS::Serverless::Function", "Properties": {"Events": events}},
        }
    }
    path = tmp_path / "template.json"
    path.write_text(json.dumps(template))
    return path


def test_the_edge_limits_are_the_templates() -> None:
    from devstack import edge
    from devstack.api import template_routes
    from devstack.template import load_template

    settings = load_template()["Resources"]["HttpApi"]["Properties"]["DefaultRouteSettings"]
    limits = edge.from_template()
    expected = edge.Throttle(burst=settings["ThrottlingBurstLimit"], rate=settings["ThrottlingRateLimit"])
    keys = {f"{r.method} {r.path}" for r in template_routes()}
    assert set(limits.routes) == keys
    assert {route.throttle for route in limits.routes.values()} == {expected}
    # no route sets TimeoutInMillis: HTTP API's default (and maximum) integration timeout, 30 s
    assert {route.timeout_seconds for route in limits.routes.values()} == {30.0}
    assert limits.max_body_bytes == 10 * 1024 * 1024


def test_a_body_over_10_mb_is_413_as_api_gateway_answers_before_it_is_sent(tmp_path: Path) -> None:
    from devstack import edge

    server = Edge(tmp_path, read_timeout=SAFETY_TIMEOUT, edge=edge.from_template())
    try:
        with server.connect() as client:
            # only the headers: API Gateway's answer does not wait for a body it will not take
            client.sendall(b"PUT /v1/x HTTP/1.1\r\nHost: local\r\nContent-Length: %d\r\n\r\n" % (10 * 1024 * 1024 + 1))
            answer = _answer(client)
        at_the_limit = requests.put(
            f"{server.server.url}/v1/x",
            data=b"x" * (10 * 1024 * 1024),
            headers={"Authorization": f"Bearer {server.token}", "Content-Type": "text/plain"},
            timeout=SAFETY_TIMEOUT,
        )
    finally:
        server.close()
    assert answer.startswith("HTTP/1.1 413"), answer[:200]
    assert json.loads(answer.partition("\r\n\r\n")[2]) == {"message": "Request Entity Too Large"}
    assert at_the_limit.status_code == 200 and at_the_limit.json() == {"bytes": 10 * 1024 * 1024}


def test_no_answer_within_the_integration_timeout_is_503_as_api_gateway_answers(tmp_path: Path) -> None:
    from devstack import edge

    # Given a route whose TimeoutInMillis is 300 (the limit read from the template, as API Gateway reads it)
    limits = edge.from_template(_edge_template(tmp_path, burst=100, rate=100, timeout_ms=300))
    assert limits.for_route("GET /v1/slow").timeout_seconds == 0.3
    server = Edge(tmp_path, read_timeout=SAFETY_TIMEOUT, edge=limits)
    try:
        # When its function does not answer in time
        slow = server.get("/v1/slow")
        fast = server.get("/v1/fast")
    finally:
        server.close()
    # Then API Gateway's 503; another route is not affected
    assert (slow.status_code, slow.json()) == (503, {"message": "Service Unavailable"})
    assert fast.status_code == 200


def test_a_route_past_its_throttle_is_429_as_api_gateway_answers(tmp_path: Path) -> None:
    from devstack import edge

    # Given the template's route throttle (burst 3, 1 a second) and a clock that moves only when told
    now = [1000.0]
    limits = edge.from_template(_edge_template(tmp_path, burst=3, rate=1))
    limits.clock = lambda: now[0]
    server = Edge(tmp_path, read_timeout=SAFETY_TIMEOUT, edge=limits)
    try:
        # When four requests arrive at once, the fourth finds the bucket empty
        burst = [server.get("/v1/fast") for _ in range(4)]
        now[0] += 1.0  # one token back a second later
        refilled = [server.get("/v1/fast") for _ in range(2)]
    finally:
        server.close()
    assert [r.status_code for r in burst] == [200, 200, 200, 429]
    assert burst[3].json() == {"message": "Too Many Requests"}
    assert [r.status_code for r in refilled] == [200, 429]
    assert server.api.calls == 4  # a throttled request never reaches the function


def test_each_route_has_its_own_bucket() -> None:
    from devstack import edge

    limits = edge.EdgeLimits(default=edge.RouteLimits(throttle=edge.Throttle(burst=1, rate=0.001)))
    limits.clock = lambda: 0.0
    assert [limits.admit("GET /a"), limits.admit("GET /a"), limits.admit("GET /b")] == [True, False, True]


def test_the_edge_limits_switch_off(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from devstack import edge

    monkeypatch.setenv("PACKYARD_LOCAL_EDGE_LIMITS", "off")
    assert edge.configured() is None
    server = Edge(tmp_path, read_timeout=SAFETY_TIMEOUT)
    try:
        assert server.server.edge is None
        answers = [server.get("/v1/fast").status_code for _ in range(5)]
    finally:
        server.close()
    assert answers == [200] * 5
    monkeypatch.delenv("PACKYARD_LOCAL_EDGE_LIMITS")
    assert edge.configured() is not None


@pytest.mark.parametrize(
    "start", [b"GET /v1/fast HTTP/1.1\r\nHost: local\r\nX-Slow: ", b"GET /v1/fa"], ids=["headers", "request-line"]
)
def test_headers_trickled_past_the_deadline_are_408_never_a_truncated_request(edge_server: Edge, start: bytes) -> None:
    import time

    stop = threading.Event()
    with edge_server.connect() as client:
        client.sendall(start)
        started = time.monotonic()

        def trickle() -> None:
            while not stop.wait(0.25):
                try:
                    client.send(b"a")
                except OSError:
                    return

        sender = threading.Thread(target=trickle, daemon=True)
        sender.start()
        answer = _answer(client)
        elapsed = time.monotonic() - started
        stop.set()
        sender.join()
    assert answer.startswith("HTTP/1.1 408"), answer[:300]
    assert _problem(answer)["status"] == 408
    assert elapsed < 5
    assert edge_server.api.calls == 0
