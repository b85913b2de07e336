"""Times on the HTTP API: RFC 3339 UTC strings (``2026-11-30T16:50:07Z``), never epoch numbers.

The store and the domain keep epoch seconds (ints; DynamoDB's TTL needs them); only the API's JSON changes. Every
response model field that is a time is a ``Timestamp``: it holds the domain's epoch seconds, answers them as an RFC
3339 UTC string, and documents itself in the OpenAPI schema as ``type: string, format: date-time``. A rendered body
validates back (Powertools re-validates a returned model's dump), so a ``Timestamp`` also reads the string it wrote.

A time a route accepts is a ``RequestTimestamp``: an RFC 3339 string only (an epoch number, a date without a time or
a time without an offset is refused, so the route answers ``400 invalid_request``), read as epoch seconds.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Annotated, Any

from pydantic import BeforeValidator, PlainSerializer, WithJsonSchema

__all__ = ["RequestTimestamp", "Timestamp", "epoch_of", "rfc3339"]

# RFC 3339 section 5.6 date-time: full-date "T" full-time, with a fraction of a second and an offset (Z or +hh:mm)
_RFC3339 = re.compile(
    r"(?P<date>\d{4}-\d{2}-\d{2})[Tt](?P<time>\d{2}:\d{2}:\d{2})(?P<fraction>\.\d+)?"
    r"(?P<offset>[Zz]|[+-]\d{2}:\d{2})",
    re.ASCII,
)
_EXAMPLE = "2026-11-30T16:50:07Z"
_SCHEMA = {"type": "string", "format": "date-time", "examples": [_EXAMPLE]}


def rfc3339(epoch: int) -> str:
    """Epoch seconds as an RFC 3339 UTC string: ``2026-11-30T16:50:07Z``."""
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def epoch_of(text: str) -> int:
    """An RFC 3339 date-time as epoch seconds (a fraction of a second is dropped); ``ValueError`` for anything else."""
    match = _RFC3339.fullmatch(text)
    if match is None:
        raise ValueError(f"not an RFC 3339 date-time (e.g. {_EXAMPLE}): {text!r}")
    offset = match["offset"].upper().replace("Z", "+00:00")
    try:
        moment = datetime.fromisoformat(f"{match['date']}T{match['time']}{offset}")
    except ValueError:
        raise ValueError(f"not a valid date and time (e.g. {_EXAMPLE}): {text!r}") from None
    return int(moment.timestamp())


def _from_wire(value: Any) -> Any:
    """A string must be RFC 3339; anything else (the domain's epoch seconds) is left to the int validator."""
    return epoch_of(value) if isinstance(value, str) else value


def _strict_rfc3339(value: Any) -> int:
    if not isinstance(value, str):
        raise ValueError(f"a time is an RFC 3339 string (e.g. {_EXAMPLE}), not {type(value).__name__}")
    return epoch_of(value)


Timestamp = Annotated[
    int,
    BeforeValidator(_from_wire),
    PlainSerializer(rfc3339, return_type=str),
    WithJsonSchema(_SCHEMA),
]
"""A response time: epoch seconds inside, an RFC 3339 UTC string on the wire and in the schema."""

RequestTimestamp = Annotated[
    int,
    BeforeValidator(_strict_rfc3339),
    PlainSerializer(rfc3339, return_type=str),
    WithJsonSchema(_SCHEMA),
]
"""A request time: only an RFC 3339 string is accepted (anything else fails validation: 400 invalid_request)."""
