"""Request bodies as strict JSON: what a caller sends is stored as sent or refused, never silently changed.

Refused (``400 invalid_request``, with the reason): NaN and ±Infinity; numbers DynamoDB cannot store exactly
(more than 38 significant digits, or a magnitude outside 1e-130 .. 9.99e125; ``1e400`` would become infinity and
``1e-400`` zero); objects with an empty-string key (DynamoDB map keys must not be empty) or a key given twice;
nesting deeper than ``MAX_DEPTH``; bytes that are not UTF-8.
"""

from __future__ import annotations

import json
from decimal import Decimal, InvalidOperation
from typing import Any

MAX_DEPTH = 32
MAX_DIGITS = 38
MIN_EXPONENT, MAX_EXPONENT = -130, 125


class BodyRefused(json.JSONDecodeError):
    """A body that is JSON but not one we store as sent (Powertools maps JSONDecodeError to a validation error)."""

    def __init__(self, reason: str, document: str = "") -> None:
        super().__init__(reason, document, 0)


def loads(text: str | bytes) -> Any:
    """``json.loads`` that refuses what would be stored as something else than was sent."""
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError:
            raise BodyRefused("the body is not UTF-8") from None
    try:
        value = json.loads(
            text, parse_constant=_constant, parse_float=_number, parse_int=_number, object_pairs_hook=_object
        )
    except RecursionError:
        raise BodyRefused(f"the body nests deeper than {MAX_DEPTH} levels") from None
    if _depth(value) > MAX_DEPTH:
        raise BodyRefused(f"the body nests deeper than {MAX_DEPTH} levels")
    return value


def _constant(name: str) -> Any:
    raise BodyRefused(f"{name} is not a JSON number")


def _number(text: str) -> int | float:
    try:
        exact = Decimal(text)
    except InvalidOperation:
        raise BodyRefused(f"{text[:40]} is not a number") from None
    digits = exact.as_tuple().digits
    significant = len(str(int("".join(map(str, digits))))) if any(digits) else 1
    if significant > MAX_DIGITS:
        raise BodyRefused(f"{text[:40]}… has more than {MAX_DIGITS} significant digits")
    if exact != 0 and not MIN_EXPONENT <= exact.adjusted() <= MAX_EXPONENT:
        raise BodyRefused(f"{text[:40]} is outside the range of storable numbers")
    if exact == exact.to_integral_value() and "." not in text and "e" not in text.lower():
        return int(text)
    return float(text)


def _object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for name, value in pairs:
        if name == "":
            raise BodyRefused("an object has an empty key")
        if name in result:
            raise BodyRefused(f"an object gives the key {name[:40]!r} twice")
        result[name] = value
    return result


def _depth(value: Any) -> int:
    """Nesting depth, without recursion (a deep body must not exhaust the stack here either)."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict | list):
            deepest = max(deepest, depth)
            if depth > MAX_DEPTH:
                return depth
            children = item.values() if isinstance(item, dict) else item
            stack.extend((child, depth + 1) for child in children)
    return deepest
