"""Count AWS API requests by (service, operation) with botocore event hooks.

How it reaches every client
---------------------------
botocore copies the session's event emitter into each client when the client is created, and every
``boto3.session.Session()`` builds a fresh botocore session. So a handler registered on "a session" only
sees clients that session creates later. What *every* new botocore session does see is
``botocore.handlers.BUILTIN_HANDLERS``: it is read when the session is built. Importing this module
appends one inert ``before-call`` hook there (the way moto installs its own ``before-send`` stubber), so
any client created afterwards, from any session, carries the hook, including clients the data access
layer creates and caches before a counter starts. While no counter is active the hook returns at once.

Clients created before ``devstack`` was imported lack the hook; :func:`observe` adds it to one.
``devstack/__init__`` imports this module, so importing ``devstack`` early (a conftest does) is enough.

What counts
-----------
``before-call`` fires once per API call (per page of a paginator), before retries: the count is of
requests the code made, not of HTTP attempts. Calls from any thread count (moto runs Step Functions
executions on background threads). The ``lambda:Invoke`` calls moto's Step Functions interpreter makes to
run Task states are not requests of the code under test: they go to ``counter.dispatched`` instead.
"""

from __future__ import annotations

import sys
import threading
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any

from botocore.handlers import BUILTIN_HANDLERS

_HOOK_ID = "devstack-counting"
_CONTEXT_MARK = "devstack_counted"

_lock = threading.Lock()
_active: list[RequestCounter] = []


class RequestCounter(Counter[tuple[str, str]]):
    """``Counter`` keyed by ``(service, operation)``, e.g. ``("dynamodb", "TransactWriteItems")``."""

    def __init__(self) -> None:
        super().__init__()
        self.dispatched: Counter[tuple[str, str]] = Counter()

    def by_service(self) -> Counter[str]:
        out: Counter[str] = Counter()
        for (service, _), n in self.items():
            out[service] += n
        return out

    def of(self, service: str) -> int:
        """Requests to one service, e.g. ``counter.of("dynamodb")``."""
        return self.by_service()[service]

    def table(self, title: str = "AWS requests") -> str:
        """A fixed-width table (service, operation, count) with per-service and grand totals."""
        rows = sorted(self.items())
        width = max([len(f"{s} {o}") for (s, o), _ in rows] + [len(title), 14])
        lines = [title, "-" * (width + 8)]
        for service, total in sorted(self.by_service().items()):
            for (s, operation), n in rows:
                if s == service:
                    lines.append(f"{service + ' ' + operation:<{width}} {n:>7}")
            lines.append(f"{service + ' (total)':<{width}} {total:>7}")
        lines.append("-" * (width + 8))
        lines.append(f"{'all services':<{width}} {sum(self.values()):>7}")
        return "\n".join(lines)


def _issued_by_moto() -> bool:
    """True when the caller of the client method is moto itself (its Step Functions interpreter)."""
    frame: FrameType | None = sys._getframe(2)
    for _ in range(64):
        if frame is None:
            return False
        module = str(frame.f_globals.get("__name__", ""))
        if not module.startswith(("botocore.", "boto3.", __name__)):
            return module.startswith("moto.")
        frame = frame.f_back
    return False


def _on_before_call(model: Any = None, context: Any = None, **_: Any) -> None:
    if not _active or model is None:
        return None
    if isinstance(context, dict):
        # A client may carry the hook twice (BUILTIN_HANDLERS and observe()); count each call once.
        if context.get(_CONTEXT_MARK):
            return None
        context[_CONTEXT_MARK] = True
    key = (model.service_model.service_name, model.name)
    internal = key[0] == "lambda" and _issued_by_moto()
    with _lock:
        for counter in _active:
            if internal:
                counter.dispatched[key] += 1
            else:
                counter[key] += 1
    return None


def observe(client: Any) -> Any:
    """Add the counting hook to a client created before this module was imported. Returns the client."""
    client.meta.events.register("before-call", _on_before_call, unique_id=_HOOK_ID)
    return client


@contextmanager
def count_aws_requests() -> Iterator[RequestCounter]:
    """Count every AWS API call made while the block runs (nesting and overlapping counters are fine)."""
    counter = RequestCounter()
    with _lock:
        _active.append(counter)
    try:
        yield counter
    finally:
        with _lock:
            _active.remove(counter)


if ("before-call", _on_before_call) not in BUILTIN_HANDLERS:
    BUILTIN_HANDLERS.append(("before-call", _on_before_call))
