"""What CPython's cycle collector finds after some work: the objects a piece of code leaves as reference cycles
instead of freeing them when their last reference goes."""

from __future__ import annotations

import gc
from collections.abc import Callable
from typing import Any


def cyclic_garbage(act: Callable[[], object]) -> list[Any]:
    """Every object ``act`` left for the collector (``gc.DEBUG_SAVEALL``): garbage made before it is collected first."""
    gc.collect()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        act()
        gc.collect()
    finally:
        gc.set_debug(0)
        garbage, gc.garbage[:] = list(gc.garbage), []
    return garbage
