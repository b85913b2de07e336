"""The due index: items that need attention at a time carry ``dueShard`` and ``dueAt`` and so appear in the sparse
``DueIndex`` GSI; a sweep reads only what is due, one shard and one page at a time.

    dueShard   <kind>#<n>       n = a stable hash of the item's id, 0 <= n < SHARDS (spreads a kind over partitions)
    dueAt      %012d epoch s    a string (the GSI's range key type), zero-padded so it sorts as a number

An item leaves the index when the attributes are removed (a settled upload, a settled operation).
"""

from __future__ import annotations

import hashlib
from enum import StrEnum
from typing import Any

from packyard.store import cursors, dynamo

INDEX = "DueIndex"
SHARDS = 8
SHARD_ATTRIBUTE = "dueShard"
AT_ATTRIBUTE = "dueAt"
# what the index's LastEvaluatedKey holds: the table's key and the index's
INDEX_KEY = ("pk", "sk", SHARD_ATTRIBUTE, AT_ATTRIBUTE)


class DueKind(StrEnum):
    UPLOAD = "upload"
    OPERATION = "operation"
    BLOB = "blob"  # a blob record: reclaimed once nothing references it, else re-hashed at its next integrity check
    JOB = "job"  # a cleanup job (maintenance.jobs): claimed, retried with backoff, parked after its last attempt


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
    start = cursors.decode(cursor, partition, names=INDEX_KEY, partition_name=SHARD_ATTRIBUTE)
    if start:
        params["ExclusiveStartKey"] = start
    try:
        response = dynamo.dynamodb().query(**params)
    except Exception as exc:
        raise dynamo.translate_error(exc) from exc
    return response.get("Items", []), cursors.encode(response.get("LastEvaluatedKey"))
