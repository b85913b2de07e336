"""How much one list page may carry, so no list answer can pass Lambda's 6 MB response payload.

DynamoDB stops a Query page at 1 MB of items read; an answer renders what it reads, and JSON can take up to 7 bytes
for one stored byte (a control character is ``\\u0001`` in the body and ``\\\\u0001`` once Lambda encodes the proxy
response around it). So a list page also stops before its items pass ``PAGE_BYTES`` as DynamoDB counts them: at
most 7 x 640 KiB = 4.4 MiB of JSON, plus what a route adds per item (two presigned URLs in ``resolved``, about
3.6 KB each item once encoded: 0.36 MB for 100), under 6,291,556 bytes. docs/architecture.md, "What one request may
copy", has the whole arithmetic.
"""

from __future__ import annotations

import base64
from typing import Any

PAGE_BYTES = 640 * 1024


def number_bytes(text: str) -> int:
    """DynamoDB's size of a number: 1 byte per two significant digits, plus 1."""
    digits = text.strip().lstrip("+-").lower().split("e")[0].replace(".", "").strip("0") or "0"
    return (len(digits) + 1) // 2 + 1


def value_bytes(value: dict[str, Any]) -> int:
    """DynamoDB's size of one low-level attribute value (Developer Guide, "DynamoDB item sizes and formats")."""
    (kind, inner), *_ = value.items()
    if kind == "S":
        return len(inner.encode("utf-8"))
    if kind == "N":
        return number_bytes(inner)
    if kind == "B":
        return len(inner) if isinstance(inner, bytes | bytearray) else len(base64.b64decode(inner))
    if kind in ("BOOL", "NULL"):
        return 1
    if kind == "SS":
        return sum(len(member.encode("utf-8")) for member in inner)
    if kind == "NS":
        return sum(number_bytes(member) for member in inner)
    if kind == "BS":
        return sum(len(member) for member in inner)
    if kind == "L":
        return 3 + sum(1 + value_bytes(element) for element in inner)
    if kind == "M":
        return 3 + sum(1 + len(name.encode("utf-8")) + value_bytes(element) for name, element in inner.items())
    raise ValueError(f"unknown DynamoDB type {kind!r}")


def item_bytes(item: dict[str, Any]) -> int:
    return sum(len(name.encode("utf-8")) + value_bytes(value) for name, value in item.items())


def within_budget(items: list[dict[str, Any]], budget: int = PAGE_BYTES) -> int:
    """How many of ``items`` (at least one) a page keeps before their sizes pass ``budget``."""
    total = 0
    for index, item in enumerate(items):
        total += item_bytes(item)
        if total > budget and index:
            return index
    return len(items)
