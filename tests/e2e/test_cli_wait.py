"""The CLI waits for an operation without polling: the mutation asks ``Prefer: wait=N`` and an operation that comes
to rest within it takes no read of the operation at all; ``status --wait`` and a service that did not wait on the
mutation take one ``GET …/operations/{op}?wait=N``; a service that waits for nothing is still polled to the end.

The requests are counted by a proxy in front of the local stack's API, which sees every request the CLI sends."""

from __future__ import annotations

import re
import threading
import uuid
from collections.abc import Iterator
from urllib.parse import parse_qsl, urlencode, urlsplit

import pytest
import requests

from tests.e2e.helpers import Cli, Stack, write_skill
from tests.support.proxies import Forward, ForwardingProxy, running

pytestmark = pytest.mark.xdist_group("e2e")


class CountingProxy(ForwardingProxy):
    """Forwards every request to the stack's API and records (method, path, query, status). ``strip``: the waits
    it takes out of requests before forwarding them ("prefer": the ``Prefer`` header, "query": ``?wait=``), as a
    service that ignores them would."""

    def __init__(self, upstream: str, strip: frozenset[str] = frozenset()) -> None:
        super().__init__(upstream, _Forward)
        self.strip = strip
        self.seen: list[tuple[str, str, dict[str, str], int]] = []
        self.lock = threading.Lock()

    def operation_reads(self) -> list[dict[str, str]]:
        return [query for method, path, query, _ in self.seen if method == "GET" and "/operations/" in path]

    def mutations(self) -> list[tuple[str, str, int]]:
        return [(m, p, s) for m, p, _, s in self.seen if m in ("PUT", "POST", "DELETE") and "/installations/" in p]


class _Forward(Forward):
    server: CountingProxy

    def outgoing_headers(self) -> dict[str, str]:
        headers = super().outgoing_headers()
        if "prefer" in self.server.strip:
            return {k: v for k, v in headers.items() if k.lower() != "prefer"}
        return headers

    def outgoing_path(self) -> str:
        parts = urlsplit(self.path)
        query = dict(parse_qsl(parts.query))
        if "query" in self.server.strip:
            query.pop("wait", None)
        return parts.path + (f"?{urlencode(query)}" if query else "")

    def answered(self, answer: requests.Response) -> None:
        parts = urlsplit(self.path)
        with self.server.lock:
            self.server.seen.append((self.command, parts.path, dict(parse_qsl(parts.query)), answer.status_code))
        self.relay(answer)


def _proxy(stack: Stack, strip: frozenset[str] = frozenset()) -> Iterator[CountingProxy]:
    with running(CountingProxy(stack.api, strip)) as proxy:
        yield proxy


@pytest.fixture(scope="module")
def tenant_cli(stack: Stack, tmp_path_factory: pytest.TempPathFactory) -> Cli:
    """One tenant with weather-skill 1.0.0 and 1.1.0 published."""
    cli = Cli(stack, f"t-{uuid.uuid4().hex[:10]}")
    folder = write_skill(tmp_path_factory.mktemp("skills") / "weather-skill")
    for version, marker in (("1.0.0", "v1"), ("1.1.0", "v2")):
        write_skill(folder, marker)
        published = cli("publish", str(folder), "-p", "weather-skill", "--version", version)
        assert published.code == 0, published.output
    return cli


@pytest.fixture
def ws() -> str:
    return f"ws-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def proxy(stack: Stack) -> Iterator[CountingProxy]:
    yield from _proxy(stack)


def test_install_update_rollback_uninstall_make_no_poll_requests(
    tenant_cli: Cli, proxy: CountingProxy, ws: str
) -> None:
    cli = Cli(tenant_cli.stack, tenant_cli.tenant, endpoint=proxy.url)

    for command in (
        ("install", "weather-skill@1.0.0"),
        ("update", "weather-skill@1.1.0"),
        ("rollback", "weather-skill"),
        ("uninstall", "weather-skill"),
    ):
        done = cli("--json", *command, "--workspace", ws)
        assert done.code == 0, done.output
        assert (done.json()["state"], done.json()["outcome"]["result"]) == ("settled", "succeeded"), command

    # each mutation was answered settled (200, not 202), and no operation was read
    assert [status for _, _, status in proxy.mutations()] == [200, 200, 200, 200]
    assert proxy.operation_reads() == []


def test_status_wait_takes_one_read(tenant_cli: Cli, proxy: CountingProxy, ws: str) -> None:
    cli = Cli(tenant_cli.stack, tenant_cli.tenant, endpoint=proxy.url)
    admitted = cli("--json", "install", "weather-skill@1.0.0", "--workspace", ws, "--no-wait")
    assert admitted.code == 0, admitted.output
    assert [status for _, _, status in proxy.mutations()] == [202]  # --no-wait asks for no wait

    settled = cli("--json", "status", admitted.json()["operationId"], "--workspace", ws, "--wait")

    assert settled.code == 0, settled.output
    assert settled.json()["state"] == "settled"
    reads = proxy.operation_reads()
    assert len(reads) == 1 and re.fullmatch(r"\d+", reads[0]["wait"]) and 1 <= int(reads[0]["wait"]) <= 20


def test_a_service_that_did_not_wait_on_the_mutation_is_read_once_with_wait(tenant_cli: Cli, stack: Stack, ws: str):
    for proxy in _proxy(stack, frozenset({"prefer"})):
        cli = Cli(stack, tenant_cli.tenant, endpoint=proxy.url)
        done = cli("--json", "install", "weather-skill@1.0.0", "--workspace", ws)
        assert done.code == 0, done.output
        assert done.json()["state"] == "settled"
        assert [status for _, _, status in proxy.mutations()] == [202]
        assert len(proxy.operation_reads()) == 1


def test_a_service_that_waits_for_nothing_is_polled_until_it_settles(tenant_cli: Cli, stack: Stack, ws: str):
    """The fallback loop: neither wait reaches the service, so the CLI reads the operation again (with pauses)
    until it settles."""
    for proxy in _proxy(stack, frozenset({"prefer", "query"})):
        cli = Cli(stack, tenant_cli.tenant, endpoint=proxy.url)
        done = cli("--json", "install", "weather-skill@1.0.0", "--workspace", ws)
        assert done.code == 0, done.output
        assert done.json()["state"] == "settled"
        reads = proxy.operation_reads()
        assert len(reads) >= 1 and all("wait" in read for read in reads)


def test_publish_makes_no_poll_requests(stack: Stack, proxy: CountingProxy, tmp_path) -> None:
    cli = Cli(stack, f"t-{uuid.uuid4().hex[:10]}", endpoint=proxy.url)
    folder = write_skill(tmp_path / "weather-skill")

    published = cli("--json", "publish", str(folder), "-p", "weather-skill", "--version", "1.0.0")

    assert published.code == 0, published.output
    completes = [status for method, path, _, status in proxy.seen if method == "POST" and path.endswith("/complete")]
    upload_reads = [path for method, path, _, _ in proxy.seen if method == "GET" and path.startswith("/v1/uploads/")]
    assert completes == [200]  # answered published within Prefer: wait
    assert upload_reads == []
