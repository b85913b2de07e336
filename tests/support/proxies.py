"""A local HTTP proxy in front of the stack's API, for the e2e tests that watch or change what the CLI sends and hears.

:class:`Forward` forwards each request as it came (less the hop-by-hop headers) and relays the answer; a test's
handler changes the request (:meth:`Forward.outgoing_path`, :meth:`Forward.outgoing_headers`) or what becomes of the
answer (:meth:`Forward.answered`). :func:`running` serves a proxy on a thread for the length of a ``with`` block."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, TypeVar

import requests

NOT_FORWARDED = frozenset({"host", "content-length", "connection"})
NOT_RELAYED = frozenset({"content-length", "content-encoding", "transfer-encoding", "connection"})


class ForwardingProxy(ThreadingHTTPServer):
    """Listens on a free local port; its handler forwards to ``upstream``."""

    def __init__(self, upstream: str, handler: type[Forward]) -> None:
        super().__init__(("127.0.0.1", 0), handler)
        self.upstream = upstream

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class Forward(BaseHTTPRequestHandler):
    server: ForwardingProxy

    def forward(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else None
        url = self.server.upstream + self.outgoing_path()
        answer = requests.request(self.command, url, data=body, headers=self.outgoing_headers(), timeout=60)
        self.answered(answer)

    def outgoing_path(self) -> str:
        return self.path

    def outgoing_headers(self) -> dict[str, str]:
        return {k: v for k, v in self.headers.items() if k.lower() not in NOT_FORWARDED}

    def answered(self, answer: requests.Response) -> None:
        self.relay(answer)

    def relay(self, answer: requests.Response) -> None:
        self.send_response(answer.status_code)
        for name, value in answer.headers.items():
            if name.lower() not in NOT_RELAYED:
                self.send_header(name, value)
        self.send_header("Content-Length", str(len(answer.content)))
        self.end_headers()
        self.wfile.write(answer.content)

    do_GET = do_POST = do_PUT = do_DELETE = forward

    def log_message(self, format: str, *args: Any) -> None:
        return None


Proxy = TypeVar("Proxy", bound=ForwardingProxy)


@contextmanager
def running(proxy: Proxy) -> Iterator[Proxy]:
    threading.Thread(target=proxy.serve_forever, daemon=True).start()
    try:
        yield proxy
    finally:
        proxy.shutdown()
        proxy.server_close()
