"""Crash injection: make the k-th AWS call of the code under test "die" right after AWS answered it.

The hook runs on botocore's ``after-call`` event, so the request's side effect has happened (the item is written,
the object stored) when the injected crash raises: exactly what a Lambda killed between two calls leaves behind.
Installed the same way as the request counter (``BUILTIN_HANDLERS``), so it reaches every client.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from botocore.handlers import BUILTIN_HANDLERS

from devstack.counting import _issued_by_moto


class InjectedCrash(Exception):
    """Raised in place of the process dying. Not a domain error: nothing in the code catches it by type."""


@dataclass
class CrashPlan:
    after_call: int
    calls: list[tuple[str, str]] = field(default_factory=list)
    crashed: bool = False


_lock = threading.Lock()
_plan: CrashPlan | None = None


def _on_after_call(model: Any = None, **_: Any) -> None:
    global _plan
    if _plan is None or model is None:
        return
    key = (model.service_model.service_name, model.name)
    if key[0] == "lambda" and _issued_by_moto():
        return
    with _lock:
        plan = _plan
        if plan is None or plan.crashed:
            return
        plan.calls.append(key)
        if len(plan.calls) == plan.after_call:
            plan.crashed = True
            raise InjectedCrash(f"injected crash after call {plan.after_call}: {key[0]}.{key[1]}")


@contextmanager
def crash_after(k: int) -> Iterator[CrashPlan]:
    """Crash once, right after the k-th AWS call made inside the block (any thread). ``plan.crashed`` tells
    whether the code made that many calls at all."""
    global _plan
    plan = CrashPlan(after_call=k)
    with _lock:
        _plan = plan
    try:
        yield plan
    finally:
        with _lock:
            _plan = None


if ("after-call", _on_after_call) not in BUILTIN_HANDLERS:
    BUILTIN_HANDLERS.append(("after-call", _on_after_call))
