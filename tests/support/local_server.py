"""The local HTTP API server (devstack.server) on a free port, served on a thread for the length of a ``with``."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from devstack.server import LocalApiServer
from packyard_cli import tokens
from packyard_cli.ports import listen


@contextmanager
def serving(api: Any, key: tokens.LocalKey, **options: Any) -> Iterator[LocalApiServer]:
    """``api``: a LocalApi or anything with its ``resolve``/``call``; ``options``: LocalApiServer's keywords."""
    server = LocalApiServer(
        listen("127.0.0.1", 0, "api", "--api-port"), api, key, openapi=dict, log=lambda _: None, **options
    )
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
