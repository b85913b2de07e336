"""Test-only Lambda handlers for tests/integration/test_express_runtime.py (registered with devstack.lambdas)."""

from __future__ import annotations

import threading
from typing import Any

# module state lives here, not in the handler's container (each container imports the handler file anew)
CALLS: list[dict[str, Any]] = []
GATES: dict[str, threading.Event] = {}


def record(event: dict[str, Any], context: Any) -> Any:
    from tests.support.fake_functions import express_app

    express_app.CALLS.append(event)
    return {"call": len(express_app.CALLS)}


def held(event: dict[str, Any], context: Any) -> Any:
    from tests.support.fake_functions import express_app

    express_app.GATES["entered"].set()
    express_app.GATES["release"].wait(10)
    return {"held": True}
