"""Test-only Lambda handlers for tests/integration/test_aws_limits.py (registered with devstack.lambdas)."""

from __future__ import annotations

import threading
from typing import Any

# set by a test to hold invocations of ``held`` in flight (module state is per container: keep it on a shared module)
GATES: dict[str, threading.Event] = {}


def sized(event: dict[str, Any], context: Any) -> Any:
    """Returns a JSON string whose encoding is exactly ``event["bytes"]`` bytes (two of them the quotes)."""
    return "x" * (int(event["bytes"]) - 2)


def echo(event: dict[str, Any], context: Any) -> Any:
    return {"echo": True}


def held(event: dict[str, Any], context: Any) -> Any:
    from tests.support.fake_functions import limits_app

    entered, release = limits_app.GATES["entered"], limits_app.GATES["release"]
    entered.set()
    release.wait(10)
    return {"held": True}


def fails(event: dict[str, Any], context: Any) -> Any:
    raise ValueError("refused on purpose")
