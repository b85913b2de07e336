"""Wall-clock seconds, in one place so tests can move time (upload expiry, leases) without sleeping."""

from __future__ import annotations

import time


def now() -> int:
    return int(time.time())
