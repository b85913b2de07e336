"""DynamoDB items of the publish side: upload sessions, releases, packages, blobs and the tenant's usage ledger.

Key layout (single table, partitioned by tenant):

    upload    pk TENANT#<t>#UPLOAD#<id>       sk UPLOAD
    release   pk TENANT#<t>#PACKAGE#<p>       sk VERSION#<v>
    package   pk TENANT#<t>#PACKAGES          sk PACKAGE#<p>
    blob      pk TENANT#<t>#BLOB#<sha256>     sk BLOB
    usage     pk TENANT#<t>                   sk USAGE        (usedBytes = retained blobs + live reservations)

Quota checks have no arithmetic in conditions: the ledger keeps one ``usedBytes`` and the condition is
``usedBytes <= limit - n``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from packyard.errors import ClaimLost, NotFound, QuotaExceeded
from packyard.publishing.models import Package, Release, ReleaseStatus, Upload, UploadState
from packyard.store import counters, due, dynamo
from packyard.store.counters import usage_key
from packyard.store.dynamo import TransactionCancelled, from_item, key, marshal, table_name, to_item, transact
from packyard.store.records import BlobRecord

# Settled sessions carry the TTL attribute (``retain_until``, decided by the domain) so GET /v1/uploads/{id} works
# for a while. Live sessions never carry it: expiry must go through settle (it returns the reservation), never a
# silent delete.


def upload_key(tenant: str, upload_id: str) -> tuple[str, str]:
    return f"TENANT#{tenant}#UPLOAD#{upload_id}", "UPLOAD"


def release_key(tenant: str, package: str, version: str) -> tuple[str, str]:
    return f"TENANT#{tenant}#PACKAGE#{package}", f"VERSION#{version}"


def package_key(tenant: str, package: str) -> tuple[str, str]:
    return f"TENANT#{tenant}#PACKAGES", f"PACKAGE#{package}"


def blob_key(tenant: str, sha256: str) -> tuple[str, str]:
    return f"TENANT#{tenant}#BLOB#{sha256}", "BLOB"


# ---- reads -------------------------------------------------------------------------------------------------------


def find_upload(tenant: str, upload_id: str) -> Upload | None:
    item = dynamo.get(*upload_key(tenant, upload_id))
    return from_item(Upload, item) if item else None


def get_upload(tenant: str, upload_id: str) -> Upload:
    item = dynamo.get(*upload_key(tenant, upload_id))
    if item is None:
        raise NotFound(f"upload {upload_id} not found")
    return from_item(Upload, item)


def find_release(tenant: str, package: str, version: str, *, consistent: bool = True) -> Release | None:
    item = dynamo.get(*release_key(tenant, package, version), consistent=consistent)
    return from_item(Release, item) if item else None


def read_releases(tenant: str, releases: list[tuple[str, str]]) -> dict[tuple[str, str], Release]:
    """The releases (package, version) of the tenant that exist, strongly consistent, in one request."""
    keys = {release: release_key(tenant, *release) for release in dict.fromkeys(releases)}
    found = dynamo.batch_get(list(keys.values()))
    return {release: from_item(Release, found[k]) for release, k in keys.items() if k in found}


def get_release(tenant: str, package: str, version: str) -> Release:
    release = find_release(tenant, package, version, consistent=False)
    if release is None:
        raise NotFound(f"release {package}@{version} not found")
    return release


def blob_exists(tenant: str, sha256: str) -> bool:
    """The tenant holds these bytes: a record some release references (or one older than reference counting), not
    an orphan, not being reclaimed and not marked missing or corrupt."""
    item = dynamo.get(*blob_key(tenant, sha256))
    if item is None:
        return False
    record = from_item(BlobRecord, item)
    return (
        record.sha256 == sha256
        and not record.orphan
        and record.reclaiming is None
        and (record.refs is None or record.refs > 0)
        and record.corrupt_at is None  # found missing or corrupt: its bytes must be uploaded again (healing)
    )


def holder_prefix(version: str) -> str:
    """The sort keys of a release's holders (``HOLDER#<v>#<ws>#<installationId>``, store/reclaims.py)."""
    return f"HOLDER#{version}#"


def release_holders(
    tenant: str, package: str, version: str, *, limit: int, cursor: str | None
) -> tuple[list[tuple[str, str]], str | None]:
    """A page of the installations holding a release (its active or previous one), as (workspace, installation
    id), and the cursor of the next page."""
    pk, _ = release_key(tenant, package, version)
    items, next_cursor = dynamo.query(pk, prefix=holder_prefix(version), limit=limit, cursor=cursor)
    return [(item["workspace"]["S"], item["installationId"]["S"]) for item in items], next_cursor


def get_package(tenant: str, package: str) -> Package:
    item = dynamo.get(*package_key(tenant, package), consistent=False)
    if item is None:
        raise NotFound(f"package {package} not found")
    return from_item(Package, item)


def list_packages(tenant: str, *, limit: int, cursor: str | None) -> tuple[list[Package], str | None]:
    """A page of the tenant's packages and the opaque cursor of the next page."""
    items, next_cursor = dynamo.query(
        package_key(tenant, "")[0], prefix="PACKAGE#", limit=limit, cursor=cursor, answered=True
    )
    return [from_item(Package, item) for item in items], next_cursor


def list_releases(tenant: str, package: str, *, limit: int, cursor: str | None) -> tuple[list[Release], str | None]:
    """A page of a package's releases (in sort-key order) and the opaque cursor of the next page."""
    pk, _ = release_key(tenant, package, "")
    items, next_cursor = dynamo.query(pk, prefix="VERSION#", limit=limit, cursor=cursor, answered=True)
    return [from_item(Release, item) for item in items], next_cursor


# ---- writes ------------------------------------------------------------------------------------------------------


def _usage_delta(tenant: str, delta: int) -> dict[str, Any]:
    pk, sk = usage_key(tenant)
    return {
        "Update": {
            "TableName": table_name(),
            "Key": key(pk, sk),
            "UpdateExpression": "SET schemaVersion = :sv ADD usedBytes :delta",
            "ExpressionAttributeValues": marshal({":delta": delta, ":sv": dynamo.SCHEMA_VERSION}),
        }
    }


def _fenced_upload_update(upload: Upload, update: str, values: dict[str, Any], names: dict[str, str]) -> dict[str, Any]:
    """An update of the upload conditional on its state and per-attempt token: a stale worker changes nothing."""
    pk, sk = upload_key(upload.tenant, upload.upload_id)
    return {
        "Update": {
            "TableName": table_name(),
            "Key": key(pk, sk),
            "UpdateExpression": update,
            "ConditionExpression": "#state = :expected AND #token = :token",
            "ExpressionAttributeNames": {"#state": "state", "#token": "token", **names},
            "ExpressionAttributeValues": marshal({":expected": str(upload.state), ":token": upload.token, **values}),
            "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
        }
    }


def _mark_published(upload: Upload, now: int, retain_until: int) -> dict[str, Any]:
    """verifying → published (fenced): the reservation is settled by the caller's ledger item."""
    return _fenced_upload_update(
        upload,
        f"SET #state = :published, reservedBytes = :zero, settledAt = :now, {dynamo.TTL_ATTRIBUTE} = :purge "
        f"REMOVE {due.SHARD_ATTRIBUTE}, {due.AT_ATTRIBUTE}",
        {":published": str(UploadState.PUBLISHED), ":zero": 0, ":now": now, ":purge": retain_until},
        {},
    )


def create_upload(upload: Upload, *, quota_bytes: int) -> bool:
    """Record the session and reserve its bytes against the tenant's quota, in one transaction: the ledger may
    only grow while ``usedBytes <= quota - reserved`` (conditions cannot add)."""
    pk, sk = upload_key(upload.tenant, upload.upload_id)
    upk, usk = usage_key(upload.tenant)
    n = upload.reserved_bytes
    items: list[dict[str, Any]] = [
        {
            "Put": {
                "TableName": table_name(),
                # in the due index until settled: a sweep expires it at its deadline if nobody completes it
                "Item": to_item(
                    pk, sk, upload, **due.attributes(due.DueKind.UPLOAD, upload.upload_id, upload.expires_at)
                ),
                "ConditionExpression": "attribute_not_exists(pk)",
            }
        }
    ]
    if n > 0:
        items.append(
            {
                "Update": {
                    "TableName": table_name(),
                    "Key": key(upk, usk),
                    "UpdateExpression": "SET schemaVersion = :sv ADD usedBytes :n",
                    "ConditionExpression": "attribute_not_exists(usedBytes) OR usedBytes <= :room",
                    "ExpressionAttributeValues": marshal(
                        {":n": n, ":room": quota_bytes - n, ":sv": dynamo.SCHEMA_VERSION}
                    ),
                    "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
                }
            }
        )
    try:
        transact(items, step="upload.create")
    except TransactionCancelled as cancelled:
        if cancelled.failed(1):
            old = cancelled.old_item(1)
            raise QuotaExceeded(
                f"reserving {n} bytes would exceed the tenant quota of {quota_bytes} bytes",
                usedBytes=counters.used_bytes(old),
                limitBytes=quota_bytes,
                requestedBytes=n,
            ) from cancelled
        return False  # a session of this id exists already (a retry of the same Idempotency-Key)
    return True


def start_verifying(upload: Upload, execution_arn: str, *, check_by: int) -> Upload:
    """awaiting_upload → verifying, fenced by state and token; due again at ``check_by`` (a sweep then looks at the
    execution if the session is still verifying). Returns the upload as stored afterwards."""
    due_at = due.attributes(due.DueKind.UPLOAD, upload.upload_id, check_by)
    item = _fenced_upload_update(
        upload,
        "SET #state = :verifying, executionArn = :arn, #shard = :shard, #at = :at",
        {
            ":verifying": str(UploadState.VERIFYING),
            ":arn": execution_arn,
            ":shard": due_at[due.SHARD_ATTRIBUTE],
            ":at": due_at[due.AT_ATTRIBUTE],
        },
        {"#shard": due.SHARD_ATTRIBUTE, "#at": due.AT_ATTRIBUTE},
    )
    try:
        transact([item], step="upload.start_verifying")
    except TransactionCancelled as cancelled:
        raise ClaimLost(f"upload {upload.upload_id} changed state") from cancelled
    return upload.model_copy(update={"state": UploadState.VERIFYING, "execution_arn": execution_arn})


def settle_upload_without_release(
    upload: Upload,
    state: UploadState,
    rejection: dict[str, Any] | None,
    now: int,
    *,
    retain_until: int,
    keep_due: bool = False,
) -> None:
    """verifying/awaiting_upload → rejected/expired: record why and give the reservation back, atomically. With
    ``keep_due`` the session stays in the due index (where it is) until :func:`drop_upload_due`: its staged objects
    are deleted after this write, and a crash before that leaves the expiry sweep a session to finish."""
    update = f"SET #state = :final, reservedBytes = :zero, settledAt = :now, {dynamo.TTL_ATTRIBUTE} = :purge"
    values: dict[str, Any] = {":final": str(state), ":zero": 0, ":now": now, ":purge": retain_until}
    if rejection is not None:
        update += ", rejection = :rejection"
        values[":rejection"] = rejection
    if not keep_due:
        update += f" REMOVE {due.SHARD_ATTRIBUTE}, {due.AT_ATTRIBUTE}"
    items = [_fenced_upload_update(upload, update, values, {})]
    if upload.reserved_bytes:
        items.append(_usage_delta(upload.tenant, -upload.reserved_bytes))
    try:
        transact(items, step="upload.settle")
    except TransactionCancelled as cancelled:
        raise ClaimLost(f"upload {upload.upload_id} changed state") from cancelled


def drop_upload_due(upload: Upload) -> bool:
    """A settled session whose staged objects are gone (or handed to a cleanup job) leaves the due index. Fenced on
    its state and token as read; False when it is not (any more) that session in that state."""
    pk, sk = upload_key(upload.tenant, upload.upload_id)
    updated = dynamo.update(
        {
            "Key": key(pk, sk),
            "UpdateExpression": f"REMOVE {due.SHARD_ATTRIBUTE}, {due.AT_ATTRIBUTE}, {due.ATTEMPTS_ATTRIBUTE}, "
            f"{due.ERROR_ATTRIBUTE}",
            "ConditionExpression": "#state = :state AND #token = :token",
            "ExpressionAttributeNames": {"#state": "state", "#token": "token"},
            "ExpressionAttributeValues": marshal({":state": str(upload.state), ":token": upload.token}),
        }
    )
    return updated is not None


@dataclass(frozen=True)
class PublishOutcome:
    """Why a publish transaction was cancelled, read from ReturnValuesOnConditionCheckFailure."""

    existing_release: Release | None
    upload_changed: bool
    blob_race: bool


def publish_release(
    upload: Upload,
    release: Release,
    *,
    new_blobs: dict[str, int],
    known_blobs: list[BlobRecord],
    now: int,
    retain_until: int,
    check_blobs_at: int | None = None,
    replaced_blobs: frozenset[str] = frozenset(),
) -> PublishOutcome | None:
    """In one transaction: the release (version unused), the upload's final state (fenced by its token), blob
    records and the usage ledger (the reservation becomes retained bytes for new blobs and is returned for shared
    ones). Every blob record gains the release in its ``releases`` set (what the integrity scrub marks unavailable
    if the blob rots); a new one is due for its first integrity check at ``check_blobs_at``. A known blob (as read
    before) gains a reference (``refs + 1``, ``generation + 1``) unless a reclaim claimed it meanwhile; an orphan is
    adopted (counted from now on: its bytes join the ledger) if still at the generation read; a record older than
    reference counting only gains the release. A blob in ``replaced_blobs`` (found missing or corrupt, and
    written again by this publish) loses its ``corruptAt``. Returns None on success, or what blocked it."""
    used_by = {f"{release.package}@{release.version}"}
    rpk, rsk = release_key(release.tenant, release.package, release.version)
    ppk, psk = package_key(release.tenant, release.package)
    items: list[dict[str, Any]] = [
        {
            "Put": {
                "TableName": table_name(),
                "Item": to_item(rpk, rsk, release),
                "ConditionExpression": "attribute_not_exists(pk)",
                "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
            }
        },
        _mark_published(upload, now, retain_until),
        {
            "Update": {
                "TableName": table_name(),
                "Key": key(ppk, psk),
                "UpdateExpression": "SET createdAt = if_not_exists(createdAt, :now), latestVersion = :v, "
                "schemaVersion = :sv, tenant = :t, package = :p ADD versionCount :one",
                "ExpressionAttributeValues": marshal(
                    {
                        ":now": now,
                        ":v": release.version,
                        ":sv": dynamo.SCHEMA_VERSION,
                        ":t": release.tenant,
                        ":p": release.package,
                        ":one": 1,
                    }
                ),
            }
        },
    ]
    items += [
        _new_blob(release.tenant, sha256, size, now, used_by, check_blobs_at) for sha256, size in new_blobs.items()
    ]
    adopted = 0
    for known in known_blobs:
        items.append(
            _known_blob_reference(
                release.tenant, known, used_by, check_blobs_at, replaced=known.sha256 in replaced_blobs
            )
        )
        adopted += known.size if known.orphan else 0
    returned = upload.reserved_bytes - sum(new_blobs.values()) - adopted
    if returned:
        items.append(_usage_delta(upload.tenant, -returned))
    try:
        transact(items, step="upload.publish")
    except TransactionCancelled as cancelled:
        return _publish_outcome(cancelled, blobs=range(3, len(items)))
    return None


def _new_blob(tenant: str, sha256: str, size: int, now: int, used_by: set[str], check_at: int | None) -> dict[str, Any]:
    """The publish (or heal) transaction's item for a blob record read absent: written with one reference, due for
    its first integrity check at ``check_at`` (when given)."""
    bpk, bsk = blob_key(tenant, sha256)
    record = BlobRecord(sha256=sha256, size=size, created_at=now, tenant=tenant, refs=1, generation=1)
    checks = due.attributes(due.DueKind.BLOB, blob_identity(tenant, sha256), check_at) if check_at is not None else {}
    return {
        "Put": {
            "TableName": table_name(),
            "Item": to_item(bpk, bsk, record, releases=used_by, **checks),
            "ConditionExpression": "attribute_not_exists(pk)",
        }
    }


def _known_blob_reference(
    tenant: str, known: BlobRecord, used_by: set[str], check_at: int | None, *, replaced: bool = False
) -> dict[str, Any]:
    """The publish transaction's item for a blob record that existed when read (see ``publish_release``).
    ``replaced``: its object was found missing or corrupt (``corruptAt``) and this publish wrote it again from bytes
    it verified: the mark goes, and the next check is one interval on. A record read healthy must still be so (a
    scrub that marks it meanwhile cancels the transaction, and the publish reads again and replaces it)."""
    bpk, bsk = blob_key(tenant, known.sha256)
    sets: list[str] = []
    removes: list[str] = []
    adds = ["releases :used_by"]
    values: dict[str, Any] = {":used_by": used_by}
    names: dict[str, str] = {}
    if known.refs is None:
        condition = "attribute_exists(pk) AND attribute_not_exists(refs)"
    elif known.orphan:
        sets += ["refs = :one", "orphan = :false"]
        removes.append(dynamo.TTL_ATTRIBUTE)
        adds.append("generation :one")
        condition = "orphan = :true AND generation = :g AND attribute_not_exists(reclaiming)"
        values.update({":one": 1, ":true": True, ":false": False, ":g": known.generation})
    else:
        adds += ["refs :one", "generation :one"]
        condition = (
            "attribute_exists(refs) AND attribute_not_exists(reclaiming) "
            "AND (attribute_not_exists(orphan) OR orphan = :false)"
        )
        values.update({":one": 1, ":false": False})
    if replaced:
        removes.append("corruptAt")
    else:
        condition += " AND attribute_not_exists(corruptAt)"
    if check_at is not None and (known.orphan or replaced):
        next_check = due.attributes(due.DueKind.BLOB, blob_identity(tenant, known.sha256), check_at)
        sets += ["#shard = :shard", "#at = :at"]
        names = {"#shard": due.SHARD_ATTRIBUTE, "#at": due.AT_ATTRIBUTE}
        values.update({":shard": next_check[due.SHARD_ATTRIBUTE], ":at": next_check[due.AT_ATTRIBUTE]})
    clauses = (("SET", sets), ("REMOVE", removes), ("ADD", adds))
    update = " ".join(f"{verb} {', '.join(parts)}" for verb, parts in clauses if parts)
    change: dict[str, Any] = {
        "TableName": table_name(),
        "Key": key(bpk, bsk),
        "UpdateExpression": update,
        "ConditionExpression": condition,
        "ExpressionAttributeValues": marshal(values),
    }
    if names:
        change["ExpressionAttributeNames"] = names
    return {"Update": change}


def heal_release(
    upload: Upload,
    release: Release,
    *,
    restored: ReleaseStatus,
    new_blobs: dict[str, int],
    known_blobs: list[BlobRecord],
    now: int,
    retain_until: int,
    check_blobs_at: int,
    restore_job: dict[str, Any],
) -> PublishOutcome | None:
    """In one transaction: an ``unavailable`` release whose blobs this upload wrote again (verified) is ``restored``
    (published, or yanked if it was), fenced on its status and digest; the upload's final state (fenced); each
    blob record loses its ``corruptAt`` and is due for its next check one interval on (a record absent is written
    as publish writes a new one); the usage ledger (the reservation is returned but for new blobs); and the job
    that brings back the installations the scrub set ``needs_attention`` (``restore_job``). The release already
    counted its references: no ``refs`` change. Returns None on success, or what blocked it."""
    used_by = {f"{release.package}@{release.version}"}
    rpk, rsk = release_key(release.tenant, release.package, release.version)
    items: list[dict[str, Any]] = [
        {
            "Update": {
                "TableName": table_name(),
                "Key": key(rpk, rsk),
                "UpdateExpression": "SET #status = :restored, healedAt = :now, healedBy = :upload REMOVE unavailableAt",
                "ConditionExpression": "#status = :unavailable AND manifestDigest = :digest",
                "ExpressionAttributeNames": {"#status": "status"},
                "ExpressionAttributeValues": marshal(
                    {
                        ":restored": str(restored),
                        ":unavailable": str(ReleaseStatus.UNAVAILABLE),
                        ":digest": release.manifest_digest,
                        ":now": now,
                        ":upload": upload.upload_id,
                    }
                ),
                "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
            }
        },
        _mark_published(upload, now, retain_until),
    ]
    items += [
        _new_blob(release.tenant, sha256, size, now, used_by, check_blobs_at) for sha256, size in new_blobs.items()
    ]
    for known in known_blobs:
        next_check = due.attributes(due.DueKind.BLOB, blob_identity(release.tenant, known.sha256), check_blobs_at)
        bpk, bsk = blob_key(release.tenant, known.sha256)
        items.append(
            {
                "Update": {
                    "TableName": table_name(),
                    "Key": key(bpk, bsk),
                    "UpdateExpression": "SET checkedAt = :now, #shard = :shard, #at = :at REMOVE corruptAt "
                    "ADD releases :used_by",
                    "ConditionExpression": "attribute_exists(pk) AND attribute_not_exists(reclaiming)",
                    "ExpressionAttributeNames": {"#shard": due.SHARD_ATTRIBUTE, "#at": due.AT_ATTRIBUTE},
                    "ExpressionAttributeValues": marshal(
                        {
                            ":now": now,
                            ":shard": next_check[due.SHARD_ATTRIBUTE],
                            ":at": next_check[due.AT_ATTRIBUTE],
                            ":used_by": used_by,
                        }
                    ),
                }
            }
        )
    items.append(restore_job)
    returned = upload.reserved_bytes - sum(new_blobs.values())
    if returned:
        items.append(_usage_delta(upload.tenant, -returned))
    try:
        transact(items, step="upload.heal")
    except TransactionCancelled as cancelled:
        return _publish_outcome(cancelled, blobs=range(2, len(items)))
    return None


def _publish_outcome(cancelled: TransactionCancelled, *, blobs: range) -> PublishOutcome:
    """What blocked a publish or heal transaction: item 0 is the release, item 1 the upload, ``blobs`` the rest."""
    old_release = cancelled.old_item(0) if cancelled.failed(0) else None
    return PublishOutcome(
        existing_release=from_item(Release, old_release) if old_release else None,
        upload_changed=cancelled.failed(1),
        blob_race=any(cancelled.failed(i) for i in blobs),
    )


def settle_upload_as_duplicate(upload: Upload, now: int, *, retain_until: int) -> None:
    """The identical release already exists: the upload is published (idempotently) and its reservation returned."""
    settle_items = [_mark_published(upload, now, retain_until)]
    if upload.reserved_bytes:
        settle_items.append(_usage_delta(upload.tenant, -upload.reserved_bytes))
    try:
        transact(settle_items, step="upload.publish_duplicate")
    except TransactionCancelled as cancelled:
        raise ClaimLost(f"upload {upload.upload_id} changed state") from cancelled


def yank_release(tenant: str, package: str, version: str, now: int) -> Release:
    """Mark a release yanked (idempotent). The version stays used forever. Until it has given its blobs back it is
    in the due index (a cleanup job: maintenance/reclaim.release_blobs gives them back once nothing holds it)."""
    pk, sk = release_key(tenant, package, version)
    job = due.attributes(due.DueKind.JOB, release_identity(tenant, package, version), now)
    updated = dynamo.update(
        {
            "Key": key(pk, sk),
            "UpdateExpression": "SET #status = :yanked, yankedAt = if_not_exists(yankedAt, :now), "
            "#shard = :shard, #at = :at",
            "ConditionExpression": "attribute_exists(pk)",
            "ExpressionAttributeNames": {"#status": "status", "#shard": due.SHARD_ATTRIBUTE, "#at": due.AT_ATTRIBUTE},
            "ExpressionAttributeValues": marshal(
                {
                    ":yanked": str(ReleaseStatus.YANKED),
                    ":now": now,
                    ":shard": job[due.SHARD_ATTRIBUTE],
                    ":at": job[due.AT_ATTRIBUTE],
                }
            ),
        }
    )
    if updated is None:
        raise NotFound(f"release {package}@{version} not found")
    return from_item(Release, updated)


def mark_release_unavailable(tenant: str, package: str, version: str, now: int) -> bool:
    """A release whose stored bytes failed an integrity check: ``unavailable`` (from published or yanked; the
    version stays used). False when it already was, or does not exist."""
    pk, sk = release_key(tenant, package, version)
    updated = dynamo.update(
        {
            "Key": key(pk, sk),
            "UpdateExpression": "SET #status = :unavailable, unavailableAt = :now",
            "ConditionExpression": "attribute_exists(pk) AND #status <> :unavailable",
            "ExpressionAttributeNames": {"#status": "status"},
            "ExpressionAttributeValues": marshal({":unavailable": str(ReleaseStatus.UNAVAILABLE), ":now": now}),
        }
    )
    return updated is not None


def record_blob_check(blob: BlobRecord, *, now: int, next_check_at: int, corrupt: bool) -> None:
    """The integrity scrub checked ``blob``: when, (``corrupt``) that it failed (the first time is kept), and when it
    is due again. Fenced on the due time the sweep read it at: a sweep that raced this one, or a writer that moved
    the record meanwhile (reclamation), wins and this one learns ClaimLost."""
    if blob.tenant is None or blob.due_at is None:
        raise ClaimLost(f"blob {blob.sha256} was not read from the due index")
    pk, sk = blob_key(blob.tenant, blob.sha256)
    update = "SET checkedAt = :now, #at = :next"
    if corrupt:
        update += ", corruptAt = if_not_exists(corruptAt, :now)"
    # a check that ran ends any back-off of earlier failed attempts
    update += f" REMOVE {due.ATTEMPTS_ATTRIBUTE}, {due.ERROR_ATTRIBUTE}"
    next_due = due.attributes(due.DueKind.BLOB, blob_identity(blob.tenant, blob.sha256), next_check_at)
    updated = dynamo.update(
        {
            "Key": key(pk, sk),
            "UpdateExpression": update,
            "ConditionExpression": "#at = :observed",
            "ExpressionAttributeNames": {"#at": due.AT_ATTRIBUTE},
            "ExpressionAttributeValues": marshal(
                {":now": now, ":next": next_due[due.AT_ATTRIBUTE], ":observed": blob.due_at}
            ),
        }
    )
    if updated is None:
        raise ClaimLost(f"blob {blob.sha256} changed since it was found due")


def record_blob_corrupt(tenant: str, sha256: str, now: int) -> None:
    """A read outside the scrub found the blob's object missing or altered: ``corruptAt`` (the first time is kept).
    Its due time is left to the scrub (its next check reports the blob ``still_…``)."""
    pk, sk = blob_key(tenant, sha256)
    dynamo.update(
        {
            "Key": key(pk, sk),
            "UpdateExpression": "SET corruptAt = if_not_exists(corruptAt, :now)",
            "ConditionExpression": "attribute_exists(pk)",
            "ExpressionAttributeValues": marshal({":now": now}),
        }
    )


def renew_verification(upload: Upload, check_by: int) -> Upload:
    """A verifying session past its reservation window starts verification again: ``resumes`` + 1 and the window
    renewed to ``check_by``, fenced on its state, token and the ``resumes`` the caller read (of two sweeps that read
    the same session, one renews it; the other's ClaimLost). The session as stored afterwards."""
    due_at = due.attributes(due.DueKind.UPLOAD, upload.upload_id, check_by)
    item = _fenced_upload_update(
        upload,
        "SET resumes = :next, #at = :at",
        {":next": upload.resumes + 1, ":read": upload.resumes, ":at": due_at[due.AT_ATTRIBUTE]},
        {"#at": due.AT_ATTRIBUTE},
    )
    # a session stored before ``resumes`` existed has none: it was never renewed
    unrenewed = " OR attribute_not_exists(resumes)" if upload.resumes == 0 else ""
    item["Update"]["ConditionExpression"] += f" AND (resumes = :read{unrenewed})"
    try:
        transact([item], step="upload.renew_verification")
    except TransactionCancelled as cancelled:
        raise ClaimLost(f"upload {upload.upload_id} changed state or was renewed meanwhile") from cancelled
    return upload.model_copy(update={"resumes": upload.resumes + 1})


def upload_from_due(item: dict[str, Any]) -> Upload:
    return from_item(Upload, item)


def release_identity(tenant: str, package: str, version: str) -> str:
    """What a yanked release's due shard is a hash of."""
    return f"{tenant}/{package}@{version}"


def blob_identity(tenant: str, sha256: str) -> str:
    """What a blob record's due shard is a hash of."""
    return f"{tenant}/{sha256}"


def blob_from_due(item: dict[str, Any]) -> BlobRecord:
    """The blob record a sweep found due, with its tenant (from the key) and the due time it was read at."""
    record = from_item(BlobRecord, item)
    tenant = item["pk"]["S"].removeprefix("TENANT#").rpartition("#BLOB#")[0]
    due_at = item.get(due.AT_ATTRIBUTE, {}).get("S")
    return record.model_copy(update={"tenant": record.tenant or tenant, "due_at": due_at})
