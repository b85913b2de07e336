"""What a mutation must carry before anything is decided: an Idempotency-Key, and If-Match for existing rows.

Pure functions: no I/O. The operation id is derived from the key, so a replay is found with one read.
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any

from packyard.errors import IdempotencyKeyRequired, InvalidRequest, VersionConflict

MAX_IDEMPOTENCY_KEY = 255
_STRONG_VERSION_TAG = re.compile(r'"([0-9]+)"', re.ASCII)


def check_idempotency_key(value: str | None) -> str:
    if value is None or value == "":
        raise IdempotencyKeyRequired("mutations need an Idempotency-Key header (1-255 printable ASCII characters)")
    if len(value) > MAX_IDEMPOTENCY_KEY or not all(0x20 <= ord(c) < 0x7F for c in value):
        raise InvalidRequest("Idempotency-Key must be 1-255 printable ASCII characters")
    return value


def parse_if_match(value: str | None) -> int | None:
    """The installation version an If-Match names (``"3"``), or None when the header is absent."""
    if value is None:
        return None
    raw = value.strip()
    if raw.startswith("W/"):
        # RFC 9110: If-Match compares strongly, and a weak entity tag never matches
        raise VersionConflict(f'If-Match {value!r} is a weak entity tag, which never matches; send "<version>"')
    # RFC 9110 8.8.3: entity-tag = [ "W/" ] DQUOTE *etagc DQUOTE. Exactly one strong tag, the quotes included: an
    # unquoted 3, an unbalanced "3 or doubled ""3"" is not an entity tag (400), never a match
    matched = _STRONG_VERSION_TAG.fullmatch(raw)
    if matched is None:
        raise InvalidRequest(f'If-Match must be an installation version in quotes such as "3", got {value!r}')
    return int(matched.group(1))


def operation_id_for(tenant: str, workspace_id: str, key: str) -> str:
    """Deterministic: the same (tenant, workspace, key) always names the same operation, so replay is one read."""
    return "op-" + hashlib.sha256(f"{tenant}\x00{workspace_id}\x00{key}".encode()).hexdigest()[:32]


def digest(value: Any) -> str:
    """sha256 of canonical JSON: how requests and intents are compared."""
    return hashlib.sha256(json.dumps(value, sort_keys=True, separators=(",", ":")).encode()).hexdigest()
