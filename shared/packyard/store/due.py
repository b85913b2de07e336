"""The due index: items that need attention at a time carry ``dueShard`` and ``dueAt`` and so appear in the sparse
``DueIndex`` GSI; a sweep reads only what is due, one shard and one page at a time.

    dueShard   <kind>#<n>       n = a stable hash of the item's id, 0 <= n < SHARDS (spreads a kind over partitions)
    dueAt      %012d epoch s    a string (the GSI's range key type), zero-padded so it sorts as a number

An item leaves the index when the attributes are removed (a settled upload, a settled operation).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
from enum import StrEnum
from typing import Any

from packyard.errors import InvalidRequest
from packyard.store import dynamo

INDEX = "DueIndex"
SHARDS = 8
SHARD_ATTRIBUTE = "dueShard"
AT_ATTRIBUTE = "dueAt"


class DueKind(StrEnum):
    UPLOAD = "upload"
    OPERATION = "operation"


def shard_of(identity: str) -> int:
    return int(hashlib.sha256(identity.encode()).hexdigest()[:8], 16) % SHARDS


def shard_key(kind: DueKind, shard: int) -> str:
    return f"{kind}#{shard}"


def attributes(kind: DueKind, identity: str, due_at: int) -> dict[str, str]:
    """The attributes that put an item in the due index (merge them into its Put)."""
    return {SHARD_ATTRIBUTE: shard_key(kind, shard_of(identity)), AT_ATTRIBUTE: f"{max(due_at, 0):012d}"}


def query(
    kind: DueKind, shard: int, now: int, *, limit: int, cursor: str | None
) -> tuple[list[dict[str, Any]], str | None]:
    """One page of the items of ``kind`` in ``shard`` due at or before ``now`` (oldest first), and the cursor of
    the next page (None when the shard has nothing more due)."""
    partition = shard_key(kind, shard)
    params: dict[str, Any] = {
        "TableName": dynamo.table_name(),
        "IndexName": INDEX,
        "KeyConditionExpression": "#shard = :shard AND #at <= :now",
        "ExpressionAttributeNames": {"#shard": SHARD_ATTRIBUTE, "#at": AT_ATTRIBUTE},
        "ExpressionAttributeValues": {":shard": {"S": partition}, ":now": {"S": f"{now:012d}"}},
        "Limit": limit,
    }
    start = _decode(cursor, partition)
    if start:
        params["ExclusiveStartKey"] = start
    try:
        response = dynamo.dynamodb().query(**params)
    except Exception as exc:
        raise dynamo.translate_error(exc) from exc
    return response.get("Items", []), _encode(response.get("LastEvaluatedKey"))


def _encode(last_key: dict[str, Any] | None) -> str | None:
    if not last_key:
        return None
    return base64.urlsafe_b64encode(json.dumps(last_key, sort_keys=True).encode()).decode()


def _decode(cursor: str | None, partition: str) -> dict[str, Any] | None:
    """A sweep cursor: the index's LastEvaluatedKey, only for the shard it came from."""
    if not cursor:
        return None
    try:
        decoded = json.loads(base64.urlsafe_b64decode(cursor.encode("ascii")))
    except (ValueError, UnicodeError, binascii.Error) as exc:
        raise InvalidRequest("sweep cursor is not valid") from exc
    names = {"pk", "sk", SHARD_ATTRIBUTE, AT_ATTRIBUTE}
    if (
        not isinstance(decoded, dict)
        or set(decoded) != names
        or not all(isinstance(v, dict) and set(v) == {"S"} and isinstance(v["S"], str) for v in decoded.values())
        or decoded[SHARD_ATTRIBUTE]["S"] != partition
    ):
        raise InvalidRequest("sweep cursor is not valid")
    return {name: {"S": decoded[name]["S"]} for name in names}
