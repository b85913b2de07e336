"""Items of reclamation: who holds a release, a yanked release giving its blobs back, and reclaiming a blob.

    holder    pk TENANT#<t>#PACKAGE#<p>   sk HOLDER#<v>#<ws>#<installationId>   one per (release, installation)
    release   holdGeneration   ADD 1 by every change of its holders (the fence of giving its blobs back)
              blobsReleased    epoch s: its blobs were given back; nothing may hold it as its active release again
              dueShard/dueAt   (job) from its yank until its blobs are given back; a holder letting go sets dueAt now
    blob      refs, generation, reclaiming, reclaimUntil, orphan  (store/records.BlobRecord)

Holders are items, not a counter: adding one is an idempotent Put, removing one an unconditional Delete (a no-op for
installations committed before holders existed), and "nobody holds it" is a strongly consistent one-item query
fenced by ``holdGeneration``: every hold change bumps it in the same transaction that changes the installation.
"""

from __future__ import annotations

import secrets
from typing import Any

from packyard.publishing.models import Release, ReleaseStatus
from packyard.store import catalog, due, dynamo
from packyard.store.dynamo import TransactionCancelled, from_item, key, marshal, table_name, to_item, transact
from packyard.store.records import BlobRecord, ReleaseHolder


def holder_key(holder: ReleaseHolder) -> tuple[str, str]:
    pk, _ = catalog.release_key(holder.tenant, holder.package, holder.version)
    return pk, f"{catalog.holder_prefix(holder.version)}{holder.workspace}#{holder.installation_id}"


def release_due(release: Release, at: int) -> dict[str, str]:
    return due.attributes(
        due.DueKind.JOB, catalog.release_identity(release.tenant, release.package, release.version), at
    )


# ---- holding a release (items of the commit transaction) ---------------------------------------------------------


def hold(holder: ReleaseHolder, *, strict: bool) -> list[dict[str, Any]]:
    """The holder item and the release's ``holdGeneration`` bump. ``strict`` (the active release): only while the
    release still has its blobs and they passed their integrity checks (not ``unavailable``: the scrub marks the
    release before it walks the holders, so a commit either lands before and is found, or is cancelled here); a
    commit cancelled there is ``release_unavailable``."""
    pk, sk = holder_key(holder)
    rpk, rsk = catalog.release_key(holder.tenant, holder.package, holder.version)
    values: dict[str, Any] = {":one": 1}
    condition = "attribute_exists(pk)"
    if strict:
        condition += " AND attribute_not_exists(blobsReleased) AND #status <> :unavailable"
        values[":unavailable"] = str(ReleaseStatus.UNAVAILABLE)
    update: dict[str, Any] = {
        "TableName": table_name(),
        "Key": key(rpk, rsk),
        "UpdateExpression": "ADD holdGeneration :one",
        "ConditionExpression": condition,
        "ExpressionAttributeValues": marshal(values),
    }
    if strict:
        update["ExpressionAttributeNames"] = {"#status": "status"}
    return [{"Put": {"TableName": table_name(), "Item": to_item(pk, sk, holder)}}, {"Update": update}]


def let_go(holder: ReleaseHolder, now: int) -> list[dict[str, Any]]:
    """The holder item goes and the release's ``holdGeneration`` moves; a yanked release (in the due index) is due
    at once, to give its blobs back if that was its last holder (``dueAt`` alone indexes nothing otherwise)."""
    pk, sk = holder_key(holder)
    rpk, rsk = catalog.release_key(holder.tenant, holder.package, holder.version)
    at = due.attributes(due.DueKind.JOB, "", now)[due.AT_ATTRIBUTE]
    return [
        {"Delete": {"TableName": table_name(), "Key": key(pk, sk)}},
        {
            "Update": {
                "TableName": table_name(),
                "Key": key(rpk, rsk),
                "UpdateExpression": "SET #at = :at ADD holdGeneration :one",
                "ConditionExpression": "attribute_exists(pk)",
                "ExpressionAttributeNames": {"#at": due.AT_ATTRIBUTE},
                "ExpressionAttributeValues": marshal({":one": 1, ":at": at}),
            }
        },
    ]


def list_holders(
    tenant: str, package: str, version: str, *, limit: int, cursor: str | None, consistent: bool = False
) -> tuple[list[ReleaseHolder], str | None]:
    pk, _ = catalog.release_key(tenant, package, version)
    items, next_cursor = dynamo.query(
        pk, prefix=catalog.holder_prefix(version), limit=limit, cursor=cursor, consistent=consistent
    )
    return [from_item(ReleaseHolder, item) for item in items], next_cursor


def has_holders(tenant: str, package: str, version: str) -> bool:
    holders, _ = list_holders(tenant, package, version, limit=1, cursor=None, consistent=True)
    return bool(holders)


# ---- a yanked release giving its blobs back ----------------------------------------------------------------------


def is_release_item(item: dict[str, Any]) -> bool:
    """A release in the due index (its blobs to give back), among the cleanup jobs."""
    return str(item.get("sk", {}).get("S", "")).startswith("VERSION#")


def release_from_due(item: dict[str, Any]) -> Release:
    return from_item(Release, item)


def read_release(tenant: str, package: str, version: str) -> Release | None:
    return catalog.find_release(tenant, package, version, consistent=True)


def _fenced_on_holders(release: Release) -> tuple[str, dict[str, Any]]:
    condition = (
        "attribute_exists(yankedAt) AND attribute_not_exists(blobsReleased) "
        "AND (attribute_not_exists(holdGeneration) OR holdGeneration = :g)"
    )
    return condition, {":g": release.hold_generation}


def postpone_release(release: Release, at: int) -> bool:
    """Still held: look again at ``at`` (a holder letting go makes it due sooner). Fenced on the holders read."""
    pk, sk = catalog.release_key(release.tenant, release.package, release.version)
    condition, values = _fenced_on_holders(release)
    return (
        dynamo.update(
            {
                "Key": key(pk, sk),
                "UpdateExpression": "SET #at = :at",
                "ConditionExpression": condition,
                "ExpressionAttributeNames": {"#at": due.AT_ATTRIBUTE},
                "ExpressionAttributeValues": marshal({**values, ":at": release_due(release, at)[due.AT_ATTRIBUTE]}),
            }
        )
        is not None
    )


def drop_release_due(release: Release) -> None:
    """Nothing to give back (never yanked, or given back already): out of the due index."""
    pk, sk = catalog.release_key(release.tenant, release.package, release.version)
    dynamo.update(
        {
            "Key": key(pk, sk),
            "UpdateExpression": f"REMOVE {due.SHARD_ATTRIBUTE}, {due.AT_ATTRIBUTE}",
            "ConditionExpression": "attribute_exists(pk) AND (attribute_exists(blobsReleased) OR "
            "attribute_not_exists(yankedAt))",
        }
    )


def read_blobs(tenant: str, shas: list[str]) -> dict[str, BlobRecord]:
    """The blob records of ``shas`` that exist, strongly consistent, in one request."""
    keys = {sha: catalog.blob_key(tenant, sha) for sha in dict.fromkeys(shas)}
    found = dynamo.batch_get(list(keys.values()))
    return {sha: from_item(BlobRecord, found[k]) for sha, k in keys.items() if k in found}


def release_blobs(release: Release, blobs: dict[str, BlobRecord], now: int) -> bool:
    """In one transaction: the yanked release nobody holds marks its blobs given back (out of the due index), and
    each counted blob loses the reference (``refs - 1``, ``generation + 1``), due for reclamation now when that was
    its last. Fenced on the holders read and each blob's observed ``refs``; False when either moved."""
    pk, sk = catalog.release_key(release.tenant, release.package, release.version)
    condition, values = _fenced_on_holders(release)
    items: list[dict[str, Any]] = [
        {
            "Update": {
                "TableName": table_name(),
                "Key": key(pk, sk),
                "UpdateExpression": f"SET blobsReleased = :now REMOVE {due.SHARD_ATTRIBUTE}, {due.AT_ATTRIBUTE}",
                "ConditionExpression": condition,
                "ExpressionAttributeValues": marshal({**values, ":now": now}),
            }
        }
    ]
    for blob in blobs.values():
        if blob.refs is None or blob.refs == 0:
            continue  # uncounted (older than reference counting: kept for good), or nothing left to give back
        bpk, bsk = catalog.blob_key(release.tenant, blob.sha256)
        update = "ADD refs :minus, generation :one"
        names: dict[str, str] = {}
        blob_values: dict[str, Any] = {":minus": -1, ":one": 1, ":refs": blob.refs}
        if blob.refs == 1:
            reclaim_at = due.attributes(due.DueKind.BLOB, catalog.blob_identity(release.tenant, blob.sha256), now)
            update = "SET #shard = :shard, #at = :at " + update
            names = {"#shard": due.SHARD_ATTRIBUTE, "#at": due.AT_ATTRIBUTE}
            blob_values.update({":shard": reclaim_at[due.SHARD_ATTRIBUTE], ":at": reclaim_at[due.AT_ATTRIBUTE]})
        change: dict[str, Any] = {
            "TableName": table_name(),
            "Key": key(bpk, bsk),
            "UpdateExpression": update,
            "ConditionExpression": "refs = :refs",
            "ExpressionAttributeValues": marshal(blob_values),
        }
        if names:
            change["ExpressionAttributeNames"] = names
        items.append({"Update": change})
    try:
        transact(items, step="release.give_back_blobs")
    except TransactionCancelled:
        return False
    return True


# ---- reclaiming a blob -------------------------------------------------------------------------------------------


def claim_blob(blob: BlobRecord, *, now: int, until: int) -> bool:
    """Claim an unreferenced blob for reclamation at the generation the decision saw (a publish that took a
    reference meanwhile moved it: False). The claim is held until ``until`` (when the record is due again, so a
    crashed reclaim is finished by a later sweep; no other sweep takes it before)."""
    tenant = _tenant_of(blob)
    pk, sk = catalog.blob_key(tenant, blob.sha256)
    at = due.attributes(due.DueKind.BLOB, catalog.blob_identity(tenant, blob.sha256), until)[due.AT_ATTRIBUTE]
    return (
        dynamo.update(
            {
                "Key": key(pk, sk),
                "UpdateExpression": "SET reclaiming = :g, reclaimUntil = :until, #at = :at",
                "ConditionExpression": "refs = :zero AND generation = :g "
                "AND (attribute_not_exists(reclaimUntil) OR reclaimUntil <= :now)",
                "ExpressionAttributeNames": {"#at": due.AT_ATTRIBUTE},
                "ExpressionAttributeValues": marshal(
                    {":g": blob.generation, ":until": until, ":at": at, ":zero": 0, ":now": now}
                ),
            }
        )
        is not None
    )


def finish_reclaim(blob: BlobRecord, now: int, *, tombstone_until: int) -> bool:
    """The claimed blob's object is gone: its record goes and the tenant's ledger is credited its size, in one
    transaction conditional on the claim (so exactly once). An orphan's record (its bytes were never counted)
    stays as a tombstone until ``tombstone_until`` (the table's TTL), its generation moved, credited nothing. False
    when the claim is not ours."""
    tenant = _tenant_of(blob)
    pk, sk = catalog.blob_key(tenant, blob.sha256)
    if blob.orphan:
        updated = dynamo.update(
            {
                "Key": key(pk, sk),
                "UpdateExpression": f"SET {dynamo.TTL_ATTRIBUTE} = :purge ADD generation :one "
                f"REMOVE reclaiming, reclaimUntil, {due.SHARD_ATTRIBUTE}, {due.AT_ATTRIBUTE}",
                "ConditionExpression": "reclaiming = :g AND orphan = :true",
                "ExpressionAttributeValues": marshal(
                    {":g": blob.generation, ":one": 1, ":true": True, ":purge": tombstone_until}
                ),
            }
        )
        return updated is not None
    items: list[dict[str, Any]] = [
        {
            "Delete": {
                "TableName": table_name(),
                "Key": key(pk, sk),
                "ConditionExpression": "reclaiming = :g AND refs = :zero",
                "ExpressionAttributeValues": marshal({":g": blob.generation, ":zero": 0}),
            }
        }
    ]
    if blob.size:
        items.append(catalog._usage_delta(tenant, -blob.size))
    try:
        transact(items, step="blob.finish_reclaim", attempt=_claim_attempt(blob))
    except TransactionCancelled:
        return False
    return True


def mark_orphan(tenant: str, sha256: str, size: int, now: int) -> bool:
    """An object a publish may have written before it failed, with no record: record it as an orphan (its bytes
    never counted), due for reclamation now. False when a record exists (a release holds it, or it is marked)."""
    pk, sk = catalog.blob_key(tenant, sha256)
    record = BlobRecord(sha256=sha256, size=size, created_at=now, tenant=tenant, refs=0, generation=1, orphan=True)
    try:
        transact(
            [
                {
                    "Put": {
                        "TableName": table_name(),
                        "Item": to_item(
                            pk,
                            sk,
                            record,
                            **due.attributes(due.DueKind.BLOB, catalog.blob_identity(tenant, sha256), now),
                        ),
                        "ConditionExpression": "attribute_not_exists(pk)",
                    }
                }
            ],
            step="blob.mark_orphan",
        )
    except TransactionCancelled:
        return False
    return True


def _claim_attempt(blob: BlobRecord) -> str:
    """What tells one reclaim of a blob from another: a record reclaimed, published again and given back within
    minutes can be claimed at the same generation again, and its finishing transaction would then be the same
    items. The claim's end (``reclaimUntil``, set by each claim) differs; without it, a fresh token per call."""
    return str(blob.reclaim_until) if blob.reclaim_until is not None else secrets.token_hex(8)


def _tenant_of(blob: BlobRecord) -> str:
    if blob.tenant is None:
        raise ValueError(f"blob {blob.sha256} was read without its tenant")
    return blob.tenant
