"""The counters of a workspace: live installations (of the workspace and of each task), for the installation
limits, and the bytes of the releases its installations reference, for the workspace quota.

    counters   pk TENANT#<t>#WS#<ws>   sk COUNT#WORKSPACE | COUNT#TASK#<taskId>   n = live installations
               pk TENANT#<t>#WS#<ws>   sk COUNT#BYTES                            usedBytes

A counter grows only under a condition that it stays within its limit (conditions cannot add: ``n <= limit - d``).
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


def count_change(tenant: str, workspace: str, task_id: str | None, delta: int, limit: int) -> dict[str, Any]:
    pk, sk = counter_key(tenant, workspace, task_id)
    update: dict[str, Any] = {
        "TableName": table_name(),
        "Key": key(pk, sk),
        "UpdateExpression": "SET schemaVersion = :sv ADD n :delta",
        "ExpressionAttributeValues": marshal({":delta": delta, ":sv": dynamo.SCHEMA_VERSION}),
    }
    if delta > 0:
        update["ConditionExpression"] = "attribute_not_exists(n) OR n <= :room"
        update["ExpressionAttributeValues"] = marshal(
            {":delta": delta, ":room": limit - delta, ":sv": dynamo.SCHEMA_VERSION}
        )
    return {"Update": update}


def bytes_change(tenant: str, workspace: str, delta: int, limit: int) -> dict[str, Any]:
    """``usedBytes`` of the workspace grows only while ``usedBytes <= limit - delta`` (conditions cannot add)."""
    pk, sk = bytes_key(tenant, workspace)
    update: dict[str, Any] = {
        "TableName": table_name(),
        "Key": key(pk, sk),
        "UpdateExpression": "SET schemaVersion = :sv ADD usedBytes :delta",
        "ExpressionAttributeValues": marshal({":delta": delta, ":sv": dynamo.SCHEMA_VERSION}),
    }
    if delta > 0:
        update["ConditionExpression"] = "attribute_not_exists(usedBytes) OR usedBytes <= :room"
        update["ExpressionAttributeValues"] = marshal(
            {":delta": delta, ":room": limit - delta, ":sv": dynamo.SCHEMA_VERSION}
        )
    return {"Update": update}


def read_usage(tenant: str, workspace: str) -> tuple[int, int]:
    """The workspace's live installations and the bytes of the releases they reference, in one read."""
    ckey, bkey = counter_key(tenant, workspace), bytes_key(tenant, workspace)
    found = dynamo.batch_get([ckey, bkey])
    count = from_item(Counter, found[ckey]).n if ckey in found else 0
    used = from_item(UsageLedger, found[bkey]).used_bytes if bkey in found else 0
    return count, used


def used_bytes(item: dict[str, Any] | None) -> int:
    return from_item(UsageLedger, item).used_bytes if item else 0
