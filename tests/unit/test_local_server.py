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


def serve(api: Any, key: tokens.LocalKey) -> Iterator[str]:
    server = LocalApiServer(listen("127.0.0.1", 0, "api", "--api-port"), api, key, openapi=dict, log=lambda _: None)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield server.url
    finally:
        server.shutdown()
        server.server_close()


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
    for url in serve(BlockingApi(), key):
        # When two requests arrive together
        responses = two_at_once(url, key.mint(tenant="t-1", subject="s"), ("/v1/one", "/v1/two"))
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
    for url in serve(api, key):
        # When two requests for it arrive together
        responses = two_at_once(url, key.mint(tenant="t-1", subject="s"), ("/v1/probe/1", "/v1/probe/2"))
    # Then both were answered while both were inside the handler, each by its own module instance
    assert [r.status_code for r in responses] == [200, 200], [r.text for r in responses]
    assert len({r.json()["instance"] for r in responses}) == 2
    assert not probe.barrier.broken


def test_a_body_shorter_than_its_content_length_frees_the_worker_with_408(tmp_path: Path) -> None:
    import socket

    key = tokens.load_or_create_key(tmp_path)
    server = LocalApiServer(
        listen("127.0.0.1", 0, "api", "--api-port"),
        LocalApi.__new__(LocalApi),
        key,
        openapi=dict,
        log=lambda _: None,
        read_timeout=0.5,
    )
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        host, port = server.server_address[:2]
        with socket.create_connection((host, port), timeout=SAFETY_TIMEOUT) as client:
            client.sendall(b'PUT /v1/x HTTP/1.1\r\nHost: local\r\nContent-Length: 100\r\n\r\n{"short":')
            answer = client.recv(65536).decode()
        assert answer.startswith("HTTP/1.1 408"), answer
        assert "application/problem+json" in answer
    finally:
        server.shutdown()
        server.server_close()
