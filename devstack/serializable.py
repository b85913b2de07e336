"""Make moto's DynamoDB serialize item writes and transactions, as DynamoDB does.

Moto evaluates a transaction's conditions and then applies its writes without a lock, so two threads can both pass
``attribute_not_exists`` on the same item — a race DynamoDB itself never lets through (transactions are
serializable, conditional writes are atomic per item). The race tests need the real semantics, so the local runtime
runs each write (and each transaction as a whole, and consistent reads) under one process-wide lock.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from typing import Any

from moto.dynamodb.models import DynamoDBBackend

_LOCK = threading.RLock()
_METHODS = ("put_item", "update_item", "delete_item", "transact_write_items", "get_item", "query")
_originals: dict[str, Callable[..., Any]] = {}


def install() -> None:
    for name in _METHODS:
        if name in _originals:
            continue
        original = getattr(DynamoDBBackend, name)
        _originals[name] = original

        @functools.wraps(original)
        def locked(self: Any, *args: Any, __original: Callable[..., Any] = original, **kwargs: Any) -> Any:
            with _LOCK:
                return __original(self, *args, **kwargs)

        setattr(DynamoDBBackend, name, locked)


def uninstall() -> None:
    for name, original in _originals.items():
        setattr(DynamoDBBackend, name, original)
    _originals.clear()
