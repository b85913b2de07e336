"""DynamoDB items of a workspace: operations, installations, in-flight slots and installation counters.

    operation      pk TENANT#<t>#WS#<ws>   sk OP#<operationId>      (its written-once fields packed: PACKED_FIELDS)
    installation   pk TENANT#<t>#WS#<ws>   sk INST#<installationId>
    slot           pk TENANT#<t>#WS#<ws>   sk SLOT#<installationId>     (one in-flight operation per installation)
    counters       pk TENANT#<t>#WS#<ws>   sk COUNT#WORKSPACE | COUNT#TASK#<taskId>   (live installations)
                                           sk COUNT#BYTES   (bytes of the releases its installations reference)
    consent wait   pk TENANT#<t>#WS#<ws>   sk CONSENT#<installationId>  (an operation awaiting approval; task token)
    approval       pk TENANT#<t>#WS#<ws>   sk APPROVAL#<approvalId>     (one decision per Idempotency-Key)

Every operation write is conditional on the operation's own ``version`` (and state): a stale worker's write fails
and it learns ClaimLost. The slot carries a ``claim`` counter so taking it over is a compare-and-set.
Retention (when a settled operation's TTL falls due) is decided by the domain and handed in; this module only
writes it.

The publish side (releases, the catalogue, blob holds) is imported by the functions that read or hold a release,
not at import: the workspace reads (QueriesFunction: installations, operations, resolved) never touch it, and its
models and modules are about 7 ms of their cold start (issue 11).

Why one module of ~450 lines: admission, commit and settlement are each one transaction across the operation, the
installation, the slot and the counters; their item builders live together so each transaction reads in one place.
"""

from __future__ import annotations

import base64
import json
import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from packyard.consent.models import ConsentWait
from packyard.errors import ClaimLost, StoredItemInvalid
from packyard.installations.models import Installation, InstallationStatus
from packyard.operations.models import Operation, OperationState, Slot, Supersession
from packyard.store import counters, due, dynamo
from packyard.store.counters import bytes_key, counter_key, workspace_pk
from packyard.store.dynamo import (
    TransactionCancelled,
    from_item,
    from_values,
    key,
    marshal,
    table_name,
    to_item,
    transact,
    unmarshal,
)
from packyard.store.records import Counter, ReleaseHolder

if TYPE_CHECKING:
    from packyard.publishing.models import Release

# operations in these states have a workflow that should settle them: they are due at their lease
DUE_STATES = frozenset(
    {OperationState.ADMITTED, OperationState.PLANNED, OperationState.AWAITING_CONSENT, OperationState.COMMITTED}
)


def operation_key(tenant: str, workspace: str, operation_id: str) -> tuple[str, str]:
    return workspace_pk(tenant, workspace), f"OP#{operation_id}"


def installation_key(tenant: str, workspace: str, installation_id: str) -> tuple[str, str]:
    return workspace_pk(tenant, workspace), f"INST#{installation_id}"


def slot_key(tenant: str, workspace: str, installation_id: str) -> tuple[str, str]:
    return workspace_pk(tenant, workspace), f"SLOT#{installation_id}"


def consent_key(tenant: str, workspace: str, installation_id: str) -> tuple[str, str]:
    return workspace_pk(tenant, workspace), f"CONSENT#{installation_id}"


def approval_key(tenant: str, workspace: str, approval_id: str) -> tuple[str, str]:
    return workspace_pk(tenant, workspace), f"APPROVAL#{approval_id}"


@dataclass(frozen=True)
class AdmissionView:
    """Everything admission decides on, read in one strongly consistent BatchGetItem."""

    operation: Operation | None
    installation: Installation | None
    slot: Slot | None
    workspace_count: int
    task_count: int
    release: Release | None
    consent: ConsentWait | None = None
    workspace_bytes: int = 0


def read_for_admission(
    tenant: str,
    workspace: str,
    installation_id: str,
    operation_id: str,
    release: tuple[str, str] | None,
    task_id: str | None,
) -> AdmissionView:
    from packyard.publishing.models import Release
    from packyard.store import catalog

    keys = {
        "operation": operation_key(tenant, workspace, operation_id),
        "installation": installation_key(tenant, workspace, installation_id),
        "slot": slot_key(tenant, workspace, installation_id),
        "workspace_count": counter_key(tenant, workspace),
        "consent": consent_key(tenant, workspace, installation_id),
        "workspace_bytes": bytes_key(tenant, workspace),
    }
    if task_id:
        keys["task_count"] = counter_key(tenant, workspace, task_id)
    if release:
        keys["release"] = catalog.release_key(tenant, *release)
    found = dynamo.batch_get(list(keys.values()))

    def item(name: str) -> dict[str, Any] | None:
        return found.get(keys[name]) if name in keys else None

    def count(name: str) -> int:
        raw = item(name)
        return from_item(Counter, raw).n if raw else 0

    workspace_count, workspace_bytes = counters.workspace_usage(item("workspace_count"), item("workspace_bytes"))

    op, inst, slot, rel, wait = (
        item("operation"),
        item("installation"),
        item("slot"),
        item("release"),
        item("consent"),
    )
    return AdmissionView(
        operation=operation_of(op) if op else None,
        installation=from_item(Installation, inst) if inst else None,
        slot=from_item(Slot, slot) if slot else None,
        workspace_count=workspace_count,
        task_count=count("task_count"),
        release=from_item(Release, rel) if rel else None,
        consent=from_item(ConsentWait, wait) if wait else None,
        workspace_bytes=workspace_bytes,
    )


def get_operation(tenant: str, workspace: str, operation_id: str) -> Operation | None:
    item = dynamo.get(*operation_key(tenant, workspace, operation_id))
    return operation_of(item) if item else None


def get_installation(
    tenant: str, workspace: str, installation_id: str, *, consistent: bool = True
) -> Installation | None:
    item = dynamo.get(*installation_key(tenant, workspace, installation_id), consistent=consistent)
    return from_item(Installation, item) if item else None


def get_slot(tenant: str, workspace: str, installation_id: str) -> Slot | None:
    item = dynamo.get(*slot_key(tenant, workspace, installation_id))
    return from_item(Slot, item) if item else None


def read_operation_and_slot(
    tenant: str, workspace: str, installation_id: str, operation_id: str
) -> tuple[Operation | None, Slot | None]:
    okey = operation_key(tenant, workspace, operation_id)
    skey = slot_key(tenant, workspace, installation_id)
    found = dynamo.batch_get([okey, skey])
    return (
        operation_of(found[okey]) if okey in found else None,
        from_item(Slot, found[skey]) if skey in found else None,
    )


def read_for_commit(
    tenant: str, workspace: str, operation_id: str, installation_id: str
) -> tuple[Operation | None, Slot | None, int]:
    """The operation, its installation's slot and the bytes of the workspace's ``COUNT#BYTES`` item (written before
    it was part of the counter item; 0 once moved in), in one strongly consistent read. An operation stored for
    another installation reads as absent."""
    okey = operation_key(tenant, workspace, operation_id)
    skey, bkey = slot_key(tenant, workspace, installation_id), bytes_key(tenant, workspace)
    found_items = dynamo.batch_get([okey, skey, bkey])
    op = operation_of(found_items[okey]) if okey in found_items else None
    if op is not None and op.installation_id != installation_id:
        return None, None, 0
    slot = from_item(Slot, found_items[skey]) if skey in found_items else None
    return op, slot, counters.used_bytes(found_items.get(bkey))


def retire(tenant: str, workspace: str, operation_id: str, retain_until: int) -> None:
    """Start the retention clock (TTL) of a settled operation that is no longer the installation's latest: one
    idempotent write, not part of any transaction (a missing operation is fine)."""
    dynamo.update(_retirement(tenant, workspace, operation_id, retain_until))


def _retirement(tenant: str, workspace: str, operation_id: str, retain_until: int) -> dict[str, Any]:
    """The UpdateItem (no table name) that starts a settled operation's retention clock, if it still exists."""
    return {
        "Key": key(*operation_key(tenant, workspace, operation_id)),
        "UpdateExpression": f"SET {dynamo.TTL_ATTRIBUTE} = :purge",
        "ConditionExpression": "attribute_exists(pk)",
        "ExpressionAttributeValues": marshal({":purge": retain_until}),
    }


def read_operation_and_release(
    tenant: str, workspace: str, operation_id: str, release: tuple[str, str] | None
) -> tuple[Operation | None, Release | None]:
    """The operation and (if named) a release of the tenant, in one strongly consistent read."""
    from packyard.publishing.models import Release
    from packyard.store import catalog

    okey = operation_key(tenant, workspace, operation_id)
    rkey = catalog.release_key(tenant, *release) if release else None
    found = dynamo.batch_get([okey] + ([rkey] if rkey else []))
    return (
        operation_of(found[okey]) if okey in found else None,
        from_item(Release, found[rkey]) if rkey and rkey in found else None,
    )


def list_installations(
    tenant: str, workspace: str, *, limit: int, cursor: str | None
) -> tuple[list[Installation], str | None]:
    """A page of the workspace's installations and the opaque cursor of the next page."""
    items, next_cursor = dynamo.query(
        workspace_pk(tenant, workspace), prefix="INST#", limit=limit, cursor=cursor, answered=True
    )
    return [from_item(Installation, item) for item in items], next_cursor


# ---- transaction items ---------------------------------------------------------------------------------------------


# ---- the operation item: hot attributes and one packed attribute ---------------------------------------------------
#
# Every phase of an operation rewrites its item, and DynamoDB bills a write by the whole item's size (1 KB units, 2x
# in a transaction), so the item is kept under 1 KB: the fields a phase changes, or that a condition, an update
# expression, the due index or the TTL name, are plain attributes ("hot"); the fields written once at admission or
# planning (the request, the baseline and the plan, each an installation with its grants and config, the target and
# the digests) are one binary attribute, compact JSON compressed with zlib (docs/decisions.md, "A smaller operation
# item"). A field added to Operation is hot unless it is listed here. Items written before this packing (all plain)
# read as they always did.

PACKED_ATTRIBUTE = "packed"
PACKED_FIELDS = frozenset(
    {
        "tenant",
        "workspace",
        "operationId",
        "action",
        "requestDigest",
        "intentDigest",
        "intent",
        "origin",
        "request",
        "baseline",
        "target",
        "targetPermissions",
        "targetChecked",
        "plan",
        "requestedBy",
        "supersedes",
    }
)


# The packing's format, its first byte: 1 = raw DEFLATE (zlib, level 9) with PRESET_V1 as its preset dictionary.
# A preset dictionary primes the compressor with what every packed operation repeats (the field names of the
# operation, its request and its installations, and their common values), which is most of a small payload: about
# 270 bytes less per operation than plain zlib (measured on the capacity model's operations: 569-719 → 326-451
# bytes). It is part of the stored format: never edit PRESET_V1; a better dictionary is format 2, beside it.
FORMAT_V1 = 1
PRESET_V1 = (
    b'{"action":"put","baseline":{"config":{},"creation":"fresh","grantGeneration":1,"grants":[{"kind":"network",'
    b'"resource":"*"}],"installationId":"","instanceId":"inst-","lastOperationId":"op-","package":"","previous":'
    b'{"archiveSha256":"","archiveSize":1,"manifestDigest":"","package":"","version":"1.0.0"},"release":'
    b'{"archiveSha256":"","archiveSize":1,"manifestDigest":"","package":"","version":""},"scope":{"kind":"workspace"},'
    b'"status":"active","tenant":"","updatedAt":1,"version":1,"workspace":""},"intent":"install-or-select",'
    b'"intentDigest":"","operationId":"op-","origin":"owner","plan":{"config":{},"creation":"replacement","request":'
    b'{"action":"delete","body":{"origin":"workflow","package":"","scope":{"kind":"task","id":""},"version":"",'
    b'"config":{},"intent":"create-only"},"installationId":""},"requestDigest":"","requestedBy":"","supersedes":"op-",'
    b'"target":{"archiveSha256":"","archiveSize":1,"manifestDigest":"","package":"","version":""},'
    b'"targetChecked":true,"targetPermissions":[],"tenant":"","workspace":""}'
)
_RAW_DEFLATE = -15  # zlib's wbits for a raw stream: no header or checksum (DynamoDB keeps the bytes intact)


def pack(values: Mapping[str, Any]) -> bytes:
    """Compact JSON of ``values`` (JSON-mode dumps of the model), compressed (format 1)."""
    text = json.dumps(values, separators=(",", ":"), sort_keys=True, ensure_ascii=False, allow_nan=False)
    compressor = zlib.compressobj(9, zlib.DEFLATED, _RAW_DEFLATE, 9, zlib.Z_DEFAULT_STRATEGY, PRESET_V1)
    return bytes([FORMAT_V1]) + compressor.compress(text.encode("utf-8")) + compressor.flush()


def unpack(packed: bytes | str) -> dict[str, Any]:
    """The inverse of :func:`pack`. A string is the packed bytes in base64 (how moto's own item view shows a binary
    attribute). Numbers read back as a DynamoDB number does: an integral one as int (1.0 → 1)."""
    raw = base64.b64decode(packed) if isinstance(packed, str) else bytes(packed)
    if not raw or raw[0] != FORMAT_V1:
        raise StoredItemInvalid(f"packed operation fields in an unknown format {raw[:1]!r}")
    decompressor = zlib.decompressobj(_RAW_DEFLATE, PRESET_V1)
    try:
        text = decompressor.decompress(raw[1:]) + decompressor.flush()
        values: dict[str, Any] = json.loads(text, parse_float=_number)
    except (zlib.error, ValueError) as exc:
        raise StoredItemInvalid("packed operation fields do not decode") from exc
    if not isinstance(values, dict):
        raise StoredItemInvalid("packed operation fields are not an object")
    return values


def _number(text: str) -> int | float:
    number = Decimal(text)
    return int(number) if number == number.to_integral_value() else float(number)


def unpacked(values: dict[str, Any]) -> dict[str, Any]:
    """A stored operation's plain values (``dynamo.unmarshal`` of its item) with its packed fields in place."""
    if PACKED_ATTRIBUTE not in values:
        return values
    rest = {name: value for name, value in values.items() if name != PACKED_ATTRIBUTE}
    return {**unpack(values[PACKED_ATTRIBUTE]), **rest}


def operation_of(item: Mapping[str, Any]) -> Operation:
    """The operation a stored item holds (packed or, written before the packing, all plain), validated."""
    return from_values(Operation, unpacked(unmarshal(item)))


def operation_item(op: Operation, retain_until: int | None = None) -> dict[str, Any]:
    """The stored operation (hot attributes plain, the rest packed). A running one is in the due index at its
    lease, so a sweep finds it if its workflow stops without settling it; a settled one may carry its retention
    deadline (TTL)."""
    pk, sk = operation_key(op.tenant, op.workspace, op.operation_id)
    values = op.model_dump(by_alias=True, mode="json", exclude_none=True)
    cold = {name: values.pop(name) for name in sorted(PACKED_FIELDS) if name in values}
    values.update(pk=pk, sk=sk, schemaVersion=dynamo.SCHEMA_VERSION)
    values[PACKED_ATTRIBUTE] = pack(cold)
    if retain_until is not None:
        values[dynamo.TTL_ATTRIBUTE] = retain_until
    if op.state in DUE_STATES:
        values.update(due.attributes(due.DueKind.OPERATION, op.operation_id, op.lease_until))
    return marshal(values)


def operation_put(
    op: Operation, *, new: bool, expected_version: int | None = None, retain_until: int | None = None
) -> dict[str, Any]:
    put: dict[str, Any] = {"TableName": table_name(), "Item": operation_item(op, retain_until)}
    if new:
        put["ConditionExpression"] = "attribute_not_exists(pk)"
        put["ReturnValuesOnConditionCheckFailure"] = "ALL_OLD"
    else:
        put["ConditionExpression"] = "version = :v AND #state <> :settled"
        put["ExpressionAttributeNames"] = {"#state": "state"}
        put["ExpressionAttributeValues"] = marshal({":v": expected_version, ":settled": str(OperationState.SETTLED)})
        put["ReturnValuesOnConditionCheckFailure"] = "ALL_OLD"
    return {"Put": put}


def _claim_slot(op: Operation, observed: Slot | None, new: Slot) -> dict[str, Any]:
    """Take the slot if it is still as observed (free, or held by the operation we supersede)."""
    pk, sk = slot_key(op.tenant, op.workspace, op.installation_id)
    put: dict[str, Any] = {"TableName": table_name(), "Item": to_item(pk, sk, new)}
    if observed is None:
        put["ConditionExpression"] = "attribute_not_exists(pk)"
    else:
        put["ConditionExpression"] = "claim = :claim"
        put["ExpressionAttributeValues"] = marshal({":claim": observed.claim})
    put["ReturnValuesOnConditionCheckFailure"] = "ALL_OLD"
    return {"Put": put}


def _held_slot(op: Operation, update: str, values: dict[str, Any]) -> dict[str, Any]:
    pk, sk = slot_key(op.tenant, op.workspace, op.installation_id)
    return {
        "Update": {
            "TableName": table_name(),
            "Key": key(pk, sk),
            "UpdateExpression": update,
            "ConditionExpression": "operationId = :op",
            "ExpressionAttributeValues": marshal({":op": op.operation_id, **values}),
            "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
        }
    }


def _supersede(op: Operation, supersession: Supersession, now: int) -> dict[str, Any]:
    pk, sk = operation_key(op.tenant, op.workspace, supersession.operation_id)
    return {
        "Update": {
            "TableName": table_name(),
            "Key": key(pk, sk),
            "UpdateExpression": "SET #state = :settled, outcome = :outcome, supersededBy = :by, settledAt = :now, "
            f"updatedAt = :now, {dynamo.TTL_ATTRIBUTE} = :purge ADD version :one "
            f"REMOVE {due.SHARD_ATTRIBUTE}, {due.AT_ATTRIBUTE}",
            "ConditionExpression": "attribute_exists(pk) AND #state <> :settled",
            "ExpressionAttributeNames": {"#state": "state"},
            "ExpressionAttributeValues": marshal(
                {
                    ":settled": str(OperationState.SETTLED),
                    ":outcome": supersession.outcome.model_dump(exclude_none=True),
                    ":by": op.operation_id,
                    ":now": now,
                    ":purge": supersession.retain_until,
                    ":one": 1,
                }
            ),
        }
    }


# ---- writes ----------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class AdmissionConflict:
    existing_operation: Operation | None
    slot_changed: bool


def admit(
    op: Operation,
    *,
    observed_slot: Slot | None,
    claimed_slot: Slot | None,
    superseding: Supersession | None,
    now: int,
    retain_until: int | None = None,
) -> AdmissionConflict | None:
    """Record the operation and claim the slot (superseding its holder if given), in one transaction. The slot's
    claim stands for the installation's version: every commit moves it (the commit frees the slot), so a slot still
    as observed is an installation still at the version read with it (``admission.read_installation_behind`` tells
    a read of the installation older than the slot's). ``claimed_slot`` None: the operation takes no slot (it was
    settled at admission, and ``retain_until`` starts its retention clock)."""
    items = [operation_put(op, new=True, retain_until=retain_until)]
    if claimed_slot is not None:
        items.append(_claim_slot(op, observed_slot, claimed_slot))
        if superseding is not None:
            items.append(_supersede(op, superseding, now))
            # a superseded operation's consent wait (if any) goes with it: no decision can reach it any more
            cpk, csk = consent_key(op.tenant, op.workspace, op.installation_id)
            items.append({"Delete": {"TableName": table_name(), "Key": key(cpk, csk)}})
    try:
        transact(items, step="operation.admit")
    except TransactionCancelled as cancelled:
        old = cancelled.old_item(0) if cancelled.failed(0) else None
        return AdmissionConflict(
            existing_operation=operation_of(old) if old else None,
            slot_changed=cancelled.failed(1) or (superseding is not None and cancelled.failed(2)),
        )
    return None


def transition(
    op: Operation,
    updated: Operation,
    *,
    slot_lease: int | None = None,
    slot_pending: bool | None = None,
    drop_consent_wait: bool = False,
) -> Operation:
    """Write ``updated`` over ``op``, fenced by op.version. With ``slot_lease`` (and ``slot_pending``) the slot is
    updated in the same transaction, fenced by this operation still holding it; with ``drop_consent_wait`` its
    consent wait (if it is this operation's) goes too."""
    items = [operation_put(updated, new=False, expected_version=op.version)]
    if slot_lease is not None:
        items.append(slot_renewal(op, slot_lease, slot_pending))
    if drop_consent_wait:
        items.append(consent_wait_deletion(op))
    try:
        transact(items, step="operation.transition")
    except TransactionCancelled as cancelled:
        raise ClaimLost(f"operation {op.operation_id} lost its claim (version {op.version})") from cancelled
    return updated


def record(op: Operation, updated: Operation) -> Operation:
    """Write ``updated`` over ``op`` alone: one conditional PutItem fenced by op.version as :func:`transition` is,
    for a phase that changes nothing but the operation (1 write unit where a transaction with the slot is 4). A
    write that failed its fence because it had landed (an answer lost, botocore's retry meeting its own write) is
    the success it was: the stored operation is ``updated``."""
    put = operation_put(updated, new=False, expected_version=op.version)["Put"]
    put.pop("TableName")
    put.pop("ReturnValuesOnConditionCheckFailure")
    old = dynamo.put_if(put)
    if old is not None and not (old and operation_of(old) == updated):
        raise ClaimLost(f"operation {op.operation_id} lost its claim (version {op.version})")
    return updated


def consent_wait_deletion(op: Operation) -> dict[str, Any]:
    """Delete the installation's consent wait if it is ``op``'s (an absent one is fine)."""
    cpk, csk = consent_key(op.tenant, op.workspace, op.installation_id)
    return {
        "Delete": {
            "TableName": table_name(),
            "Key": key(cpk, csk),
            "ConditionExpression": "attribute_not_exists(pk) OR operationId = :op",
            "ExpressionAttributeValues": marshal({":op": op.operation_id}),
        }
    }


def slot_renewal(op: Operation, lease_until: int, pending: bool | None) -> dict[str, Any]:
    if pending is None:
        return _held_slot(op, "SET leaseUntil = :lease", {":lease": lease_until})
    return _held_slot(op, "SET pending = :pending, leaseUntil = :lease", {":pending": pending, ":lease": lease_until})


@dataclass(frozen=True)
class CommitConflict:
    operation_changed: bool
    installation_changed: bool
    limit_reached: bool
    slot_lost: bool
    quota_reached: bool = False
    release_unavailable: bool = False
    counters_moved: bool = False  # the workspace's COUNT#BYTES moved into its counter meanwhile: commit again


def commit(
    op: Operation,
    committed: Operation,
    plan: Installation,
    *,
    baseline_version: int | None,
    counts: list[tuple[str | None, int, int]],
    lease_until: int,
    bytes_change: tuple[int, int] | None = None,
    legacy_bytes: int = 0,
    holds: list[tuple[str, str, bool]] | None = None,
) -> CommitConflict | None:
    """Compare-and-put the planned installation on the baseline version, with the operation's transition, the slot
    (still ours), the live-installation counters and (``bytes_change``: delta, limit) the workspace's referenced bytes
    (``legacy_bytes``: those of its ``COUNT#BYTES`` item as read, moved into its counter item), in one transaction.
    ``committed`` settled (the commit settles the operation: docs/decisions.md, "Commit settles"): the slot is freed
    as settlement frees it; otherwise its lease is renewed to ``lease_until``. The releases the plan newly holds
    (``holds``: package, version, strict; their holders put by ``hold_before_commit``) have their generation bumped
    in it (``reclaims.hold_fence``): a strict one (the active release) that gave its blobs back or is unavailable,
    or one that is gone, cancels it (``release_unavailable``)."""
    from packyard.store import reclaims

    ipk, isk = installation_key(plan.tenant, plan.workspace, plan.installation_id)
    put_installation: dict[str, Any] = {"TableName": table_name(), "Item": to_item(ipk, isk, plan)}
    if baseline_version is None:
        put_installation["ConditionExpression"] = "attribute_not_exists(pk)"
    else:
        put_installation["ConditionExpression"] = "version = :v"
        put_installation["ExpressionAttributeValues"] = marshal({":v": baseline_version})
    slot = (
        _freed_slot(op, committed, installation_version=plan.version)
        if committed.state is OperationState.SETTLED
        else slot_renewal(op, lease_until, None)
    )
    items: list[dict[str, Any]] = [
        {"Put": put_installation},
        operation_put(committed, new=False, expected_version=op.version),
        slot,
    ]
    items.extend(
        counters.count_change(plan.tenant, plan.workspace, task, delta, limit)
        for task, delta, limit in counts
        if task is not None
    )
    counted = len(items)
    workspace_count = next(((delta, limit) for task, delta, limit in counts if task is None), None)
    items.extend(
        counters.workspace_change(
            plan.tenant, plan.workspace, count=workspace_count, used=bytes_change, legacy_bytes=legacy_bytes
        )
    )
    quota_end = len(items)
    items.extend(
        reclaims.hold_fence(_holder(op, package, version, plan.version), strict=strict)
        for package, version, strict in holds or []
    )
    try:
        transact(items, step="operation.commit")
    except TransactionCancelled as cancelled:
        bounded = counted < quota_end and cancelled.failed(counted)
        exceeded = counters.limit_exceeded(cancelled.old_item(counted), workspace_count) if bounded else None
        return CommitConflict(
            installation_changed=cancelled.failed(0),
            operation_changed=cancelled.failed(1),
            slot_lost=cancelled.failed(2),
            limit_reached=any(cancelled.failed(i) for i in range(3, counted)) or exceeded == "installations",
            quota_reached=exceeded == "bytes",
            counters_moved=any(cancelled.failed(i) for i in range(counted + 1, quota_end)),
            release_unavailable=any(cancelled.failed(i) for i in range(quota_end, len(items))),
        )
    return None


def _holder(op: Operation, package: str, version: str, planned_version: int) -> ReleaseHolder:
    """The holder of ``package@version`` by ``op``'s installation, made before the commit of ``planned_version``."""
    return ReleaseHolder(
        tenant=op.tenant,
        package=package,
        version=version,
        workspace=op.workspace,
        installation_id=op.installation_id,
        held_by=op.operation_id,
        held_at=planned_version,
    )


def hold_before_commit(op: Operation, planned_version: int, holds: list[tuple[str, str, bool]]) -> None:
    """Put the holders of the releases the plan newly holds (package, version, strict), before its commit (one
    single-item write each, ``reclaims.put_holder``); the commit bumps their generation. Holders of a commit that is
    refused stay for the refusal's ``drop_holds``."""
    from packyard.store import reclaims

    for package, version, _ in holds:
        reclaims.put_holder(_holder(op, package, version, planned_version))


def let_go_after_commit(op: Operation, committed_version: int, let_go: list[tuple[str, str]], now: int) -> None:
    """After the commit of ``committed_version``: the installation's holders of the releases it stopped holding go
    (``reclaims.let_go_now``), a yanked one (read in one request) due at once. One lost here (the run died) is a
    stale holder the reclaimer drops."""
    if not let_go:
        return
    from packyard.store import catalog, reclaims

    releases = catalog.read_releases(op.tenant, let_go)
    for package, version in let_go:
        release = releases.get((package, version))
        reclaims.let_go_now(
            _holder(op, package, version, committed_version),
            through_version=committed_version,
            yanked=release is not None and release.yanked_at is not None,
            now=now,
        )


def drop_holds(op: Operation, planned_version: int, holds: list[tuple[str, str, bool]]) -> None:
    """A refused operation takes back the holds ``hold_before_commit`` may have made (``reclaims.drop_hold``; one
    not made, or another operation's, stays). Call it once the refusal is recorded."""
    from packyard.store import reclaims

    for package, version, _ in holds:
        reclaims.drop_hold(_holder(op, package, version, planned_version), held_by=op.operation_id)


def _freed_slot(op: Operation, settled: Operation, *, installation_version: int | None = None) -> dict[str, Any]:
    """The slot freed by ``op`` settling (as ``settled``): it records the installation's latest settled operation
    (and, freed by a commit, the ``installation_version`` it wrote), and its claim moves on (a compare-and-set for
    whoever takes it next)."""
    sets = "lastSettled = :op, lastSettledAt = :now, pending = :false"
    values: dict[str, Any] = {":now": settled.settled_at, ":false": False, ":one": 1}
    if installation_version is not None:
        sets += ", installationVersion = :iv"
        values[":iv"] = installation_version
    return _held_slot(op, f"SET {sets} ADD claim :one REMOVE operationId", values)


def settle(
    op: Operation,
    settled: Operation,
    *,
    slot: Slot | None,
    confirm_installation: tuple[int, str] | None,
    retire: tuple[str, int] | None,
    drop_consent_wait: bool = False,
) -> bool:
    """Write the terminal outcome and free the slot; with ``confirm_installation`` (version, operation id) only if
    the committed row still is what this operation planned. ``retire`` (operation id, retain until) starts the
    retention clock of the installation's previously settled operation. Returns False if the installation check
    failed (nothing written)."""
    items = [operation_put(settled, new=False, expected_version=op.version)]
    holds_slot = slot is not None and slot.operation_id == op.operation_id
    if holds_slot:
        items.append(_freed_slot(op, settled))
        if retire is not None:
            items.append({"Update": {"TableName": table_name(), **_retirement(op.tenant, op.workspace, *retire)}})
    if drop_consent_wait:
        items.append(consent_wait_deletion(op))
    if confirm_installation is not None:
        version, operation_id = confirm_installation
        pk, sk = installation_key(op.tenant, op.workspace, op.installation_id)
        items.append(
            {
                "ConditionCheck": {
                    "TableName": table_name(),
                    "Key": key(pk, sk),
                    "ConditionExpression": "version = :v AND lastOperationId = :op",
                    "ExpressionAttributeValues": marshal({":v": version, ":op": operation_id}),
                }
            }
        )
    try:
        transact(items, step="operation.settle")
    except TransactionCancelled as cancelled:
        if cancelled.failed(0) or (holds_slot and cancelled.failed(1)):
            raise ClaimLost(f"operation {op.operation_id} lost its claim while settling") from cancelled
        if confirm_installation is not None and cancelled.failed(len(items) - 1):
            return False
        raise ClaimLost(f"operation {op.operation_id}: retention update raced") from cancelled
    return True


def mark_needs_attention(tenant: str, workspace: str, installation_id: str, release: tuple[str, str], now: int) -> bool:
    """An active installation of ``release`` (package, version), whose stored bytes failed an integrity check:
    ``needs_attention`` (its version moves on: an operation planned on the old one no longer commits). False when
    it is not (or no longer) an active installation of that release."""
    return _move_attention(tenant, workspace, installation_id, release, now, attention=True)


def mark_attended(tenant: str, workspace: str, installation_id: str, release: tuple[str, str], now: int) -> bool:
    """The reverse of ``mark_needs_attention``, once the release's stored bytes were replaced by verified ones (a
    healing publish): ``needs_attention`` → ``active`` (its version moves on again). False when it is not (or no
    longer) an installation of that release needing attention."""
    return _move_attention(tenant, workspace, installation_id, release, now, attention=False)


def _move_attention(
    tenant: str, workspace: str, installation_id: str, release: tuple[str, str], now: int, *, attention: bool
) -> bool:
    """``active`` → ``needs_attention`` (``attention``) or back, conditioned on the installation's release."""
    pk, sk = installation_key(tenant, workspace, installation_id)
    package, version = release
    to, from_ = (":attention", ":active") if attention else (":active", ":attention")
    updated = dynamo.update(
        {
            "Key": key(pk, sk),
            "UpdateExpression": f"SET #status = {to}, updatedAt = :now ADD #version :one",
            "ConditionExpression": f"#status = {from_} AND #release.#package = :package "
            "AND #release.#version = :version",
            "ExpressionAttributeNames": {
                "#status": "status",
                "#version": "version",
                "#release": "release",
                "#package": "package",
            },
            "ExpressionAttributeValues": marshal(
                {
                    ":attention": str(InstallationStatus.NEEDS_ATTENTION),
                    ":active": str(InstallationStatus.ACTIVE),
                    ":package": package,
                    ":version": version,
                    ":now": now,
                    ":one": 1,
                }
            ),
        }
    )
    return updated is not None


def operation_from_due(item: dict[str, Any]) -> Operation:
    return operation_of(item)
