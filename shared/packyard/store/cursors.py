"""Opaque list cursors: a DynamoDB ``LastEvaluatedKey`` that callers carry back without seeing inside.

A cursor is accepted only for the very partition it was minted for (so never for another tenant's), and only in
the exact shape DynamoDB returned; anything else is ``invalid_request``, never a store error.
"""

from __future__ import annotations

import base64
import binascii
import json
from typing import Any

from packyard.errors import InvalidRequest

MAX_CURSOR_LENGTH = 2048


def encode(last_key: dict[str, Any] | None) -> str | None:
    if not last_key:
        return None
    return base64.urlsafe_b64encode(json.dumps(last_key, sort_keys=True).encode()).decode()


TABLE_KEY = ("pk", "sk")


def decode(
    cursor: str | None, partition: str, *, names: tuple[str, ...] = TABLE_KEY, partition_name: str = "pk"
) -> dict[str, Any] | None:
    """The start key a cursor names, if it names one in ``partition``: exactly the string attributes ``names``
    (the table's key; an index's key adds the index's own), with ``partition_name`` equal to ``partition``."""
    if not cursor:
        return None
    invalid = InvalidRequest("cursor is not valid")
    if len(cursor) > MAX_CURSOR_LENGTH:
        raise invalid
    try:
        decoded = json.loads(base64.urlsafe_b64decode(cursor.encode("ascii")))
    except (ValueError, UnicodeError, binascii.Error) as exc:
        raise invalid from exc
    if not isinstance(decoded, dict) or set(decoded) != set(names):
        raise invalid
    if not all(_string(decoded[name]) for name in names) or decoded[partition_name]["S"] != partition:
        raise invalid
    return {name: {"S": decoded[name]["S"]} for name in names}


def _string(attribute: Any) -> bool:
    return isinstance(attribute, dict) and set(attribute) == {"S"} and isinstance(attribute["S"], str)
