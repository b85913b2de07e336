"""The counters of a workspace: live installations (of the workspace and of each task), for the installation
limits, and the bytes of the releases its installations reference, for the workspace quota; and the tenant's usage
ledger, for its storage quota (written by the publish side, ``store.catalog``; read here so that workspace reads of
usage do not import the publish side).

    counters   pk TENANT#<t>#WS#<ws>   sk COUNT#WORKSPACE   n = live installations, usedBytes = referenced bytes
               pk TENANT#<t>#WS#<ws>   sk COUNT#TASK#<taskId>   n = live installations of the task
               pk TENANT#<t>#WS#<ws>   sk COUNT#BYTES       usedBytes (written before the two were one item: read,
                                                            and folded into COUNT#WORKSPACE by the next bytes change)
    usage      pk TENANT#<t>           sk USAGE       usedBytes = retained blobs + live upload reservations

A counter grows only under a condition that it stays within its limit (conditions cannot add: ``n <= limit - d``).
The workspace's two counters are one item because an install and an uninstall change both in the commit
transaction, and each item of a transaction is billed 2 write units (docs/decisions.md, "Commit settles").
"""

from __future__ import annotations

from typing import Any

from packyard.store import dynamo
from packyard.store.dynamo import from_item, key, marshal, table_name
from packyard.store.records import Counter, UsageLedger


def workspace_pk(tenant: str, workspace: str) -> str:
    return f"TENANT#{tenant}#WS#{workspace}"


def counter_key(tenant: str, workspace: str, task_id: str | None = None) -> tuple[str, str]:
    return workspace_pk(tenant, workspace), f"COUNT#TASK#{task_id}" if task_id else "COUNT#WORKSPACE"


def bytes_key(tenant: str, workspace: str) -> tuple[str, str]:
    """The bytes of the releases the workspace's installations reference (its quota)."""
    return workspace_pk(tenant, workspace), "COUNT#BYTES"


def usage_key(tenant: str) -> tuple[str, str]:
    """The tenant's usage ledger."""
    return f"TENANT#{tenant}", "USAGE"


def count_change(tenant: str, workspace: str, task_id: str | None, delta: int, limit: int) -> dict[str, Any]:
    return _bounded_add(counter_key(tenant, workspace, task_id), "n", delta, limit)


def workspace_change(
    tenant: str,
    workspace: str,
    *,
    count: tuple[int, int] | None,
    used: tuple[int, int] | None,
    legacy_bytes: int = 0,
) -> list[dict[str, Any]]:
    """The transaction items that move the workspace's counter item: its live installations (``count``: delta,
    limit) and the bytes its installations reference (``used``: delta, limit), each growing only within its limit
    (``n <= limit - d``, ``usedBytes <= limit - d``: conditions cannot add). ``legacy_bytes``: the ``usedBytes`` of
    a ``COUNT#BYTES`` item as read (written before the two counters were one item); the first bytes change moves
    them in and deletes that item in the same transaction, conditional on it still holding them. The update
    returns the old item when its condition fails (``limit_exceeded``: which bound it was)."""
    count = count if count and count[0] else None
    used = used if used and used[0] else None
    if count is None and used is None:
        return []
    adds: list[str] = []
    conditions: list[str] = []
    values: dict[str, Any] = {":sv": dynamo.SCHEMA_VERSION}
    if count is not None:
        delta, limit = count
        adds.append("n :dn")
        values[":dn"] = delta
        if delta > 0:
            conditions.append("(attribute_not_exists(n) OR n <= :nroom)")
            values[":nroom"] = limit - delta
    moved = legacy_bytes if used is not None else 0
    if used is not None:
        delta, limit = used
        adds.append("usedBytes :db")
        values[":db"] = delta + moved
        if delta > 0:
            conditions.append("(attribute_not_exists(usedBytes) OR usedBytes <= :broom)")
            values[":broom"] = limit - delta - moved
    update: dict[str, Any] = {
        "TableName": table_name(),
        "Key": key(*counter_key(tenant, workspace)),
        "UpdateExpression": "SET schemaVersion = :sv ADD " + ", ".join(adds),
        "ExpressionAttributeValues": marshal(values),
        "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
    }
    if conditions:
        update["ConditionExpression"] = " AND ".join(conditions)
    items: list[dict[str, Any]] = [{"Update": update}]
    if moved:
        items.append(
            {
                "Delete": {
                    "TableName": table_name(),
                    "Key": key(*bytes_key(tenant, workspace)),
                    "ConditionExpression": "usedBytes = :moved",
                    "ExpressionAttributeValues": marshal({":moved": moved}),
                }
            }
        )
    return items


def limit_exceeded(old: dict[str, Any] | None, count: tuple[int, int] | None) -> str:
    """Which bound cancelled a :func:`workspace_change` whose old item was ``old``: ``installations`` (the live
    installations at their limit) or ``bytes`` (the workspace quota)."""
    if count is not None and count[0] > 0 and from_item(Counter, old or {}).n > count[1] - count[0]:
        return "installations"
    return "bytes"


def _bounded_add(item_key: tuple[str, str], attribute: str, delta: int, limit: int) -> dict[str, Any]:
    """ADD ``delta`` to ``attribute``; a growth only under the condition that it stays within ``limit``."""
    update: dict[str, Any] = {
        "TableName": table_name(),
        "Key": key(*item_key),
        "UpdateExpression": f"SET schemaVersion = :sv ADD {attribute} :delta",
        "ExpressionAttributeValues": marshal({":delta": delta, ":sv": dynamo.SCHEMA_VERSION}),
    }
    if delta > 0:
        update["ConditionExpression"] = f"attribute_not_exists({attribute}) OR {attribute} <= :room"
        update["ExpressionAttributeValues"] = marshal(
            {":delta": delta, ":room": limit - delta, ":sv": dynamo.SCHEMA_VERSION}
        )
    return {"Update": update}


def read_usage(tenant: str, workspace: str) -> tuple[int, int]:
    """The workspace's live installations and the bytes of the releases they reference, in one read."""
    ckey, bkey = counter_key(tenant, workspace), bytes_key(tenant, workspace)
    found = dynamo.batch_get([ckey, bkey])
    return workspace_usage(found.get(ckey), found.get(bkey))


def workspace_usage(counter: dict[str, Any] | None, legacy: dict[str, Any] | None) -> tuple[int, int]:
    """Live installations and referenced bytes from the workspace's counter item and (if still there) its
    ``COUNT#BYTES`` item written before the two were one."""
    stored = from_item(Counter, counter) if counter else Counter()
    return stored.n, stored.used_bytes + used_bytes(legacy)


def used_bytes(item: dict[str, Any] | None) -> int:
    return from_item(UsageLedger, item).used_bytes if item else 0


def tenant_used_bytes(tenant: str) -> int:
    """The tenant's stored bytes (retained blobs plus live upload reservations), eventually consistent."""
    return used_bytes(dynamo.get(*usage_key(tenant), consistent=False))
