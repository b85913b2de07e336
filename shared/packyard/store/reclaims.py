"""Items of reclamation: who holds a release, a yanked release giving its blobs back, and reclaiming a blob.

    holder    pk TENANT#<t>#PACKAGE#<p>   sk HOLDER#<v>#<ws>#<installationId>   one per (release, installation)
              heldBy/heldAt    a hold made before the commit: the operation that made it and the installation
                               version it planned (holders written in the commit transaction have neither)
    release   holdGeneration   ADD 1 by every change of its holders (the fence of giving its blobs back)
              blobsReleased    epoch s: its blobs were given back; nothing may hold it as its active release again
              dueShard/dueAt   (job) from its yank until its blobs are given back; a holder letting go sets dueAt now
    blob      refs, generation, reclaiming, reclaimUntil, orphan  (store/records.BlobRecord)

Holders are items, not a counter: adding one is an idempotent Put, removing one a Delete (a no-op for installations
committed before holders existed), and "nobody holds it" is a strongly consistent query fenced by
``holdGeneration``: every hold bumps it. Two ways of holding:

- **In the commit transaction** (``hold``/``let_go``): the holder item and the bump are items of the transaction that
  changes the installation, so a holder always agrees with its installation.
- **Before it** (what the commit does: ``put_holder`` before the commit, the commit carrying ``hold_fence``, the
  generation bump; ``let_go_now`` after it, ``drop_hold`` when the commit was refused). ``hold_now`` is the same
  hold in two plain writes (the holder, then the bump), and ``holdable`` a ConditionCheck of the strict hold's
  condition, for callers outside a commit. The reclaimer reads the generation, queries the holders and gives back
  fenced on the generation: a holder put before its query is seen; one put after is followed by the bump (in the
  commit, or ``hold_now``'s), which fails the fence, or the give-back lands before the bump, and the bump (strict)
  sees ``blobsReleased`` and refuses. ``let_go_now`` deletes a holder only up to the committed version (a later
  operation's hold has a larger ``heldAt``, and a put never lowers one); ``drop_hold`` only its own operation's,
  and only while nothing committed its version and no other operation holds the slot (a stale run may have put its
  holder over a hold another operation relies on). A let-go or a drop that was lost (the execution died before it)
  leaves a stale holder: the reclaimer judges each holder against its installation and slot and drops the stale ones
  (``holder_states``, ``drop_stale_holder``, maintenance/reclaim.py).
"""

from __future__ import annotations

import secrets
from typing import TYPE_CHECKING, Any

from packyard.publishing.models import Release, ReleaseStatus
from packyard.store import catalog, due, dynamo
from packyard.store.aws import error_code
from packyard.store.dynamo import TransactionCancelled, from_item, key, marshal, table_name, to_item, transact
from packyard.store.records import BlobRecord, ReleaseHolder

if TYPE_CHECKING:
    from packyard.installations.models import Installation
    from packyard.operations.models import Slot


def holder_key(holder: ReleaseHolder) -> tuple[str, str]:
    pk, _ = catalog.release_key(holder.tenant, holder.package, holder.version)
    return pk, f"{catalog.holder_prefix(holder.version)}{holder.workspace}#{holder.installation_id}"


def release_due(release: Release, at: int) -> dict[str, str]:
    return due.attributes(
        due.DueKind.JOB, catalog.release_identity(release.tenant, release.package, release.version), at
    )


# ---- holding a release (items of the commit transaction) ---------------------------------------------------------


def _hold_condition(*, strict: bool) -> tuple[str, dict[str, str], dict[str, Any]]:
    """The condition on the release of a hold (expression, names, values): it exists; ``strict`` (the active release):
    it still has its blobs and they passed their integrity checks."""
    if not strict:
        return "attribute_exists(pk)", {}, {}
    return (
        "attribute_exists(pk) AND attribute_not_exists(blobsReleased) AND #status <> :unavailable",
        {"#status": "status"},
        {":unavailable": str(ReleaseStatus.UNAVAILABLE)},
    )


def _generation_bump(holder: ReleaseHolder, *, strict: bool) -> dict[str, Any]:
    rpk, rsk = catalog.release_key(holder.tenant, holder.package, holder.version)
    condition, names, values = _hold_condition(strict=strict)
    update: dict[str, Any] = {
        "Key": key(rpk, rsk),
        "UpdateExpression": "ADD holdGeneration :one",
        "ConditionExpression": condition,
        "ExpressionAttributeValues": marshal({":one": 1, **values}),
    }
    if names:
        update["ExpressionAttributeNames"] = names
    return update


def hold(holder: ReleaseHolder, *, strict: bool) -> list[dict[str, Any]]:
    """The holder item and the release's ``holdGeneration`` bump. ``strict`` (the active release): only while the
    release still has its blobs and they passed their integrity checks (not ``unavailable``: the scrub marks the
    release before it walks the holders, so a commit either lands before and is found, or is cancelled here); a
    commit cancelled there is ``release_unavailable``."""
    pk, sk = holder_key(holder)
    return [{"Put": {"TableName": table_name(), "Item": to_item(pk, sk, holder)}}, hold_fence(holder, strict=strict)]


def hold_fence(holder: ReleaseHolder, *, strict: bool) -> dict[str, Any]:
    """The release's ``holdGeneration`` bump of a hold, a transaction item, under ``hold``'s condition: the commit of
    a holder put before it (``put_holder``) carries it, so the commit lands only while the release may be held (a
    commit cancelled by it is ``release_unavailable``) and a give-back that read the holders before the holder was
    put fails its fence."""
    return {"Update": {"TableName": table_name(), **_generation_bump(holder, strict=strict)}}


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


# ---- holding a release outside the commit transaction (see the module's docstring) --------------------------------


def hold_now(holder: ReleaseHolder, *, strict: bool) -> bool:
    """Before the commit: put the holder (``heldBy``/``heldAt`` set by the caller; idempotent), then bump the
    release's ``holdGeneration`` under ``hold``'s condition, two writes outside any transaction, in this order. False
    when the bump's condition failed (the release is gone, or ``strict`` and it gave its blobs back or is
    unavailable); the holder item stays then, for the refused operation's ``drop_hold``.

    The put never lowers a holder's ``heldAt``: a holder with a larger one is a later operation's hold (this
    operation planned on an older version, so its commit cannot land), and lowering it would let a let-go of a
    version in between delete a hold the installation relies on. The put is skipped then; the bump is still made."""
    put_holder(holder)
    return dynamo.update(_generation_bump(holder, strict=strict)) is not None


def put_holder(holder: ReleaseHolder) -> None:
    """Before the commit: put the holder (``heldBy``/``heldAt`` set by the caller; idempotent), one write outside
    any transaction; the commit carries the generation bump (``hold_fence``). Never lowers a holder's ``heldAt``
    (see ``hold_now``): the put is skipped then."""
    if holder.held_by is None or holder.held_at is None:
        raise ValueError("a hold made before the commit names its operation and planned version (heldBy, heldAt)")
    pk, sk = holder_key(holder)
    dynamo.put_if(  # a later hold (a larger heldAt) stays as it is
        {
            "Item": to_item(pk, sk, holder),
            "ConditionExpression": "attribute_not_exists(heldAt) OR heldAt <= :at",
            "ExpressionAttributeValues": marshal({":at": holder.held_at}),
        }
    )


def holdable(tenant: str, package: str, version: str) -> dict[str, Any]:
    """A transaction's check of a release held by ``hold_now`` (for callers outside a commit; the commit carries
    ``hold_fence`` instead: a ConditionCheck is billed as a transactional write, docs/decisions.md): the release
    exists, has its blobs and is not ``unavailable`` (the strict hold's condition). A transaction cancelled by it
    refuses as ``release_unavailable`` would."""
    pk, sk = catalog.release_key(tenant, package, version)
    condition, names, values = _hold_condition(strict=True)
    return {
        "ConditionCheck": {
            "TableName": table_name(),
            "Key": key(pk, sk),
            "ConditionExpression": condition,
            "ExpressionAttributeNames": names,
            "ExpressionAttributeValues": marshal(values),
        }
    }


def let_go_now(holder: ReleaseHolder, *, through_version: int, yanked: bool, now: int) -> None:
    """After the commit of installation version ``through_version``: delete the holder unless a later operation
    holds the release again (its ``heldAt`` is larger; a holder without ``heldAt`` goes); a holder already gone is
    fine. ``yanked`` (the caller read the release yanked): the release is due at once and its ``holdGeneration``
    moves, as ``let_go`` does, so that its last holder letting go gives its blobs back soon."""
    pk, sk = holder_key(holder)
    _delete_if(pk, sk, "attribute_not_exists(heldAt) OR heldAt <= :v", values={":v": through_version})
    if not yanked:
        return
    rpk, rsk = catalog.release_key(holder.tenant, holder.package, holder.version)
    at = due.attributes(due.DueKind.JOB, "", now)[due.AT_ATTRIBUTE]
    dynamo.update(
        {
            "Key": key(rpk, rsk),
            "UpdateExpression": "SET #at = :at ADD holdGeneration :one",
            "ConditionExpression": "attribute_exists(pk)",
            "ExpressionAttributeNames": {"#at": due.AT_ATTRIBUTE},
            "ExpressionAttributeValues": marshal({":one": 1, ":at": at}),
        }
    )


def drop_hold(holder: ReleaseHolder, *, held_by: str) -> None:
    """A refused operation takes back the hold it made before its commit (``holder`` as it was held: its ``heldAt``).
    Call it once the refusal is recorded: the operation can no longer commit, in this run or any other. The holder
    goes only if ``held_by`` made it (another operation's hold of the same key stays), nothing committed at or past
    the hold's version (``heldAt``: a stale run of the operation may have put its holder over the hold of another
    operation that committed that version, or the operation's other run committed it), and no other operation holds
    the installation's slot (it may have planned the same version and rely on this key). One transaction (the delete
    and two checks; refusals only). Anything left is the reclaimer's to judge (maintenance/reclaim.py); a holder
    already gone is fine."""
    if holder.held_at is None:
        raise ValueError("a hold made before the commit names its planned version (heldAt)")
    from packyard.store import workspace

    pk, sk = holder_key(holder)
    ipk, isk = workspace.installation_key(holder.tenant, holder.workspace, holder.installation_id)
    spk, ssk = workspace.slot_key(holder.tenant, holder.workspace, holder.installation_id)
    items: list[dict[str, Any]] = [
        {
            "Delete": {
                "TableName": table_name(),
                "Key": key(pk, sk),
                "ConditionExpression": "heldBy = :op",
                "ExpressionAttributeValues": marshal({":op": held_by}),
            }
        },
        {
            "ConditionCheck": {
                "TableName": table_name(),
                "Key": key(ipk, isk),
                "ConditionExpression": "attribute_not_exists(version) OR version < :at",
                "ExpressionAttributeValues": marshal({":at": holder.held_at}),
            }
        },
        {
            "ConditionCheck": {
                "TableName": table_name(),
                "Key": key(spk, ssk),
                "ConditionExpression": "attribute_not_exists(operationId) OR operationId = :op",
                "ExpressionAttributeValues": marshal({":op": held_by}),
            }
        },
    ]
    try:
        transact(items, step="holder.drop_hold")
    except TransactionCancelled:
        return  # not this operation's hold any more, or it may be relied on: left to the reclaimer


def _delete_if(pk: str, sk: str, condition: str, *, values: dict[str, Any]) -> bool:
    """DeleteItem under ``condition``; False when it failed (a missing item fails any condition on its attributes)."""
    params: dict[str, Any] = {"TableName": table_name(), "Key": key(pk, sk), "ConditionExpression": condition}
    if values:
        params["ExpressionAttributeValues"] = marshal(values)
    try:
        dynamo.dynamodb().delete_item(**params)
    except Exception as exc:
        if error_code(exc) == "ConditionalCheckFailedException":
            return False
        raise dynamo.translate_error(exc) from exc
    return True


# ---- who holds a release -----------------------------------------------------------------------------------------


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


def holder_states(holders: list[ReleaseHolder]) -> list[tuple[Installation | None, Slot | None]]:
    """Each holder's installation and slot (None: missing), strongly consistent, in one BatchGetItem (a page of at
    most 50 holders). The items are read one by one, not as a snapshot of each other."""
    from packyard.installations.models import Installation
    from packyard.operations.models import Slot
    from packyard.store import workspace

    wanted = [
        (
            workspace.installation_key(h.tenant, h.workspace, h.installation_id),
            workspace.slot_key(h.tenant, h.workspace, h.installation_id),
        )
        for h in holders
    ]
    found = dynamo.batch_get([k for pair in wanted for k in pair]) if wanted else {}
    return [
        (
            from_item(Installation, found[ikey]) if ikey in found else None,
            from_item(Slot, found[skey]) if skey in found else None,
        )
        for ikey, skey in wanted
    ]


def read_installation(holder: ReleaseHolder) -> Installation | None:
    """The holder's installation, strongly consistent (read again after its slot, see maintenance/reclaim.py)."""
    from packyard.store import workspace

    return workspace.get_installation(holder.tenant, holder.workspace, holder.installation_id)


def drop_stale_holder(holder: ReleaseHolder) -> bool:
    """Delete a holder judged stale, only if it is still as read (the same ``heldBy`` and ``heldAt``, or still
    without them). False when it changed (held again) or went (let go) meanwhile."""
    pk, sk = holder_key(holder)
    terms: list[str] = []
    values: dict[str, Any] = {}
    for attribute, name, value in (("heldBy", ":by", holder.held_by), ("heldAt", ":at", holder.held_at)):
        if value is None:
            terms.append(f"attribute_not_exists({attribute})")
        else:
            terms.append(f"{attribute} = {name}")
            values[name] = value
    return _delete_if(pk, sk, "attribute_exists(pk) AND " + " AND ".join(terms), values=values)


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
