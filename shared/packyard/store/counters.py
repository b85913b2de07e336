"""The counters of a workspace: live installations (of the workspace and of each task), for the installation
limits, and the bytes of the releases its installations reference, for the workspace quota; and the tenant's usage
ledger, for its storage quota (written by the publish side, ``store.catalog``; read here so that workspace reads of
usage do not import the publish side).

    counters   pk TENANT#<t>#WS#<ws>   sk COUNT#WORKSPACE | COUNT#TASK#<taskId>   n = live installations
               pk TENANT#<t>#WS#<ws>   sk COUNT#BYTES                            usedBytes
    usage      pk TENANT#<t>           sk USAGE       usedBytes = retained blobs + live upload reservations

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


def usage_key(tenant: str) -> tuple[str, str]:
    """The tenant's usage ledger."""
    return f"TENANT#{tenant}", "USAGE"


def count_change(tenant: str, workspace: str, task_id: str | None, delta: int, limit: int) -> dict[str, Any]:
    return _bounded_add(counter_key(tenant, workspace, task_id), "n", delta, limit)


def bytes_change(tenant: str, workspace: str, delta: int, limit: int) -> dict[str, Any]:
    """``usedBytes`` of the workspace grows only while ``usedBytes <= limit - delta`` (conditions cannot add)."""
    return _bounded_add(bytes_key(tenant, workspace), "usedBytes", delta, limit)


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
    count = from_item(Counter, found[ckey]).n if ckey in found else 0
    used = from_item(UsageLedger, found[bkey]).used_bytes if bkey in found else 0
    return count, used


def used_bytes(item: dict[str, Any] | None) -> int:
    return from_item(UsageLedger, item).used_bytes if item else 0


def tenant_used_bytes(tenant: str) -> int:
    """The tenant's stored bytes (retained blobs plus live upload reservations), eventually consistent."""
    return used_bytes(dynamo.get(*usage_key(tenant), consistent=False))
