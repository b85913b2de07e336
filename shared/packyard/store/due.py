"""The due index: items that need attention at a time carry ``dueShard`` and ``dueAt`` and so appear in the sparse
``DueIndex`` GSI; a sweep reads only what is due, one shard and one page at a time.

    dueShard   <kind>#<n>       n = a stable hash of the item's id, 0 <= n < SHARDS (spreads a kind over partitions)
    dueAt      %012d epoch s    a string (the GSI's range key type), zero-padded so it sorts as a number

An item leaves the index when the attributes are removed (a settled upload, a settled operation).

A failed sweep action backs its item off (``back_off``), fenced on the ``dueShard``/``dueAt`` the sweep observed:

    dueAttempts  N              failed attempts so far
    dueError     S              the last failure, short (an error class name, never AWS text)
    parkedAt     N epoch s      set when parked: ``dueShard`` becomes ``parked#<kind>``, so no sweep reads it again,
                                while ``list_parked``/``count_parked`` still find it (``packyard sweep`` reports them)

A write that moves the item on (a new state, a settled Put) sets new due attributes or removes them, and with them
the park.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from packyard.store import cursors, dynamo
from packyard.store.dynamo import key, marshal

INDEX = "DueIndex"
SHARDS = 8
SHARD_ATTRIBUTE = "dueShard"
AT_ATTRIBUTE = "dueAt"
ATTEMPTS_ATTRIBUTE = "dueAttempts"
ERROR_ATTRIBUTE = "dueError"
PARKED_ATTRIBUTE = "parkedAt"
PARKED_PREFIX = "parked#"
ERROR_MAX_LENGTH = 200
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
    return _index_page(partition, limit, cursor, due_by=now)


def cursor_after(kind: DueKind, shard: int, item: dict[str, Any]) -> str | None:
    """The cursor of the page that starts right after ``item`` (one of the page ``query`` returned for ``kind`` and
    ``shard``): a sweep that stops within a page resumes there, whatever it wrote to the items before."""
    if item.get(SHARD_ATTRIBUTE, {}).get("S") != shard_key(kind, shard):
        raise ValueError("the item is not of this shard")
    return cursors.encode({name: item[name] for name in INDEX_KEY})


def at_value(epoch: int) -> str:
    return f"{max(epoch, 0):012d}"


def parked_shard(kind: DueKind) -> str:
    """The ``dueShard`` of the parked items of ``kind``: no sweep queries it, a listing does."""
    return f"{PARKED_PREFIX}{kind}"


@dataclass(frozen=True)
class DueMark:
    """Where an item stood in the due index when a sweep read it: the fence of the sweep's writes to it."""

    pk: str
    sk: str
    shard: str
    at: str
    attempts: int
    error: str | None = None
    parked_at: int | None = None

    @property
    def due_at(self) -> int:
        return int(self.at)

    @property
    def item_name(self) -> str:
        """The item's key as one string, for logs."""
        return f"{self.pk}/{self.sk}"


def mark_of(item: dict[str, Any]) -> DueMark:
    """The due attributes of an item as read from the index (or the table)."""
    attempts = item.get(ATTEMPTS_ATTRIBUTE, {}).get("N")
    parked = item.get(PARKED_ATTRIBUTE, {}).get("N")
    return DueMark(
        pk=item["pk"]["S"],
        sk=item["sk"]["S"],
        shard=item.get(SHARD_ATTRIBUTE, {}).get("S", ""),
        at=item.get(AT_ATTRIBUTE, {}).get("S", ""),
        attempts=int(attempts) if attempts else 0,
        error=item.get(ERROR_ATTRIBUTE, {}).get("S"),
        parked_at=int(parked) if parked else None,
    )


def short_error(error: str) -> str:
    return error[:ERROR_MAX_LENGTH]


def back_off(mark: DueMark, *, kind: DueKind, retry_at: int | None, now: int, error: str) -> bool:
    """Record a failed attempt of the item at ``mark``: due again at ``retry_at``, or (None) parked. Fenced on the
    observed shard, due time and attempts, so a sweep that raced a change of the item (a new state, a settle, another
    sweep's back-off) changes nothing: False then."""
    names = {"#shard": SHARD_ATTRIBUTE, "#at": AT_ATTRIBUTE, "#n": ATTEMPTS_ATTRIBUTE, "#error": ERROR_ATTRIBUTE}
    values: dict[str, Any] = {
        ":shard": mark.shard,
        ":at": mark.at,
        ":n": mark.attempts,
        ":next": mark.attempts + 1,
        ":error": short_error(error),
    }
    if retry_at is None:
        update = "SET #n = :next, #error = :error, #shard = :parked, #at = :now, #parked = :nowN"
        names["#parked"] = PARKED_ATTRIBUTE
        values.update({":parked": parked_shard(kind), ":now": at_value(now), ":nowN": now})
    else:
        update = "SET #n = :next, #error = :error, #at = :retry"
        values[":retry"] = at_value(retry_at)
    condition = "#shard = :shard AND #at = :at AND " + (
        "#n = :n" if mark.attempts else "(attribute_not_exists(#n) OR #n = :n)"
    )
    updated = dynamo.update(
        {
            "Key": key(mark.pk, mark.sk),
            "UpdateExpression": update,
            "ConditionExpression": condition,
            "ExpressionAttributeNames": names,
            "ExpressionAttributeValues": marshal(values),
        }
    )
    return updated is not None


def list_parked(kind: DueKind, *, limit: int, cursor: str | None) -> tuple[list[DueMark], str | None]:
    """A page of the parked items of ``kind`` (oldest park first) and the cursor of the next page."""
    partition = parked_shard(kind)
    items, next_cursor = _index_page(partition, limit, cursor)
    return [mark_of(item) for item in items], next_cursor


def count_parked(kind: DueKind, *, max_pages: int = 10) -> int:
    """How many items of ``kind`` are parked (a COUNT query over their index partition; bounded)."""
    params: dict[str, Any] = {
        "TableName": dynamo.table_name(),
        "IndexName": INDEX,
        "KeyConditionExpression": "#shard = :shard",
        "ExpressionAttributeNames": {"#shard": SHARD_ATTRIBUTE},
        "ExpressionAttributeValues": {":shard": {"S": parked_shard(kind)}},
        "Select": "COUNT",
    }
    total = 0
    for _ in range(max_pages):
        try:
            response = dynamo.dynamodb().query(**params)
        except Exception as exc:
            raise dynamo.translate_error(exc) from exc
        total += int(response.get("Count", 0))
        if not response.get("LastEvaluatedKey"):
            break
        params["ExclusiveStartKey"] = response["LastEvaluatedKey"]
    return total


def _index_page(
    partition: str, limit: int, cursor: str | None, *, due_by: int | None = None
) -> tuple[list[dict[str, Any]], str | None]:
    """One page of the index's ``partition`` (oldest first; with ``due_by``, only what is due by then)."""
    condition = "#shard = :shard"
    names = {"#shard": SHARD_ATTRIBUTE}
    values: dict[str, Any] = {":shard": {"S": partition}}
    if due_by is not None:
        condition += " AND #at <= :now"
        names["#at"] = AT_ATTRIBUTE
        values[":now"] = {"S": f"{due_by:012d}"}
    params: dict[str, Any] = {
        "TableName": dynamo.table_name(),
        "IndexName": INDEX,
        "KeyConditionExpression": condition,
        "ExpressionAttributeNames": names,
        "ExpressionAttributeValues": values,
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
