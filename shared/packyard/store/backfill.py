"""Items of the one-off integrity-scrub backfill (``maintenance/backfill.py``): a page of a table Scan, and the two
idempotent writes that bring a blob record written before the scrub into it.

A Scan is used here and nowhere else: this is an operator's one-off pass over the whole table, never a request path.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from packyard.store import catalog, due, dynamo
from packyard.store.dynamo import key, marshal


@dataclass(frozen=True)
class ScannedBlob:
    """A blob record. ``reclaimed``: an orphan, or its tombstone (reclamation's, not the scrub's)."""

    tenant: str
    sha256: str
    reclaimed: bool


@dataclass(frozen=True)
class ScannedRelease:
    """A release: the blobs it is made of (its archive and its manifest)."""

    tenant: str
    package: str
    version: str
    digests: frozenset[str]


def scan_page(*, limit: int, start: dict[str, Any] | None) -> tuple[list[ScannedBlob | ScannedRelease], Any]:
    """One page of release and blob items, read from their keys and attributes, and where the next page starts
    (opaque; None: done)."""
    raw, next_start = _scan(limit=limit, start=start)
    scanned: list[ScannedBlob | ScannedRelease] = []
    for values in (dynamo.unmarshal(item) for item in raw):
        tenant = str(values["pk"]).removeprefix("TENANT#").partition("#")[0]
        if values["sk"] == "BLOB":
            reclaimed = bool(values.get("orphan")) or values.get(dynamo.TTL_ATTRIBUTE) is not None
            scanned.append(ScannedBlob(tenant, str(values["sha256"]), reclaimed))
        else:
            digests = frozenset({str(values["archiveSha256"]), str(values["manifestDigest"])})
            scanned.append(ScannedRelease(tenant, str(values["package"]), str(values["version"]), digests))
    return scanned, next_start


def _scan(*, limit: int, start: dict[str, Any] | None) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
    """One page of release and blob items (by sort key), and the raw key to start the next page at (None: done)."""
    params: dict[str, Any] = {
        "TableName": dynamo.table_name(),
        "Limit": limit,
        "FilterExpression": "begins_with(sk, :version) OR sk = :blob",
        "ExpressionAttributeValues": {":version": {"S": "VERSION#"}, ":blob": {"S": "BLOB"}},
    }
    if start:
        params["ExclusiveStartKey"] = start
    try:
        response = dynamo.dynamodb().scan(**params)
    except Exception as exc:
        raise dynamo.translate_error(exc) from exc
    last: dict[str, Any] | None = response.get("LastEvaluatedKey")
    return response.get("Items", []), last


def add_release_to_blob(tenant: str, sha256: str, release: str) -> bool:
    """``ADD releases`` on an existing blob record (a set: twice is once). False when there is no record."""
    pk, sk = catalog.blob_key(tenant, sha256)
    updated = dynamo.update(
        {
            "Key": key(pk, sk),
            "UpdateExpression": "ADD releases :release",
            "ConditionExpression": "attribute_exists(pk)",
            "ExpressionAttributeValues": marshal({":release": {release}}),
        }
    )
    return updated is not None


def schedule_first_check(tenant: str, sha256: str, at: int) -> bool:
    """Put a blob record that has no due time into the due index at ``at``; False when it has one already (a
    publish, a check, a reclamation or an earlier backfill set it: theirs stands)."""
    pk, sk = catalog.blob_key(tenant, sha256)
    attributes = due.attributes(due.DueKind.BLOB, catalog.blob_identity(tenant, sha256), at)
    updated = dynamo.update(
        {
            "Key": key(pk, sk),
            "UpdateExpression": "SET #shard = :shard, #at = :at",
            "ConditionExpression": "attribute_exists(pk) AND attribute_not_exists(#shard)",
            "ExpressionAttributeNames": {"#shard": due.SHARD_ATTRIBUTE, "#at": due.AT_ATTRIBUTE},
            "ExpressionAttributeValues": marshal(
                {":shard": attributes[due.SHARD_ATTRIBUTE], ":at": attributes[due.AT_ATTRIBUTE]}
            ),
        }
    )
    return updated is not None
