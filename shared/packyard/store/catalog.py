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
from packyard.store import due, dynamo
from packyard.store.dynamo import TransactionCancelled, from_item, key, marshal, table_name, to_item, transact
from packyard.store.records import BlobRecord, UsageLedger

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


def usage_key(tenant: str) -> tuple[str, str]:
    return f"TENANT#{tenant}", "USAGE"


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


def get_release(tenant: str, package: str, version: str) -> Release:
    release = find_release(tenant, package, version, consistent=False)
    if release is None:
        raise NotFound(f"release {package}@{version} not found")
    return release


def blob_exists(tenant: str, sha256: str) -> bool:
    item = dynamo.get(*blob_key(tenant, sha256))
    return item is not None and from_item(BlobRecord, item).sha256 == sha256


def get_package(tenant: str, package: str) -> Package:
    item = dynamo.get(*package_key(tenant, package), consistent=False)
    if item is None:
        raise NotFound(f"package {package} not found")
    return from_item(Package, item)


def list_packages(tenant: str, *, limit: int, cursor: str | None) -> tuple[list[Package], str | None]:
    """A page of the tenant's packages and the opaque cursor of the next page."""
    items, next_cursor = dynamo.query(package_key(tenant, "")[0], prefix="PACKAGE#", limit=limit, cursor=cursor)
    return [from_item(Package, item) for item in items], next_cursor


def list_releases(tenant: str, package: str, *, limit: int, cursor: str | None) -> tuple[list[Release], str | None]:
    """A page of a package's releases (in sort-key order) and the opaque cursor of the next page."""
    pk, _ = release_key(tenant, package, "")
    items, next_cursor = dynamo.query(pk, prefix="VERSION#", limit=limit, cursor=cursor)
    return [from_item(Release, item) for item in items], next_cursor


def get_used_bytes(tenant: str) -> int:
    item = dynamo.get(*usage_key(tenant), consistent=False)
    return from_item(UsageLedger, item).used_bytes if item else 0


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
        transact(items)
    except TransactionCancelled as cancelled:
        if cancelled.failed(1):
            old = cancelled.old_item(1)
            raise QuotaExceeded(
                f"reserving {n} bytes would exceed the tenant quota of {quota_bytes} bytes",
                usedBytes=from_item(UsageLedger, old).used_bytes if old else 0,
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
        transact([item])
    except TransactionCancelled as cancelled:
        raise ClaimLost(f"upload {upload.upload_id} changed state") from cancelled
    return upload.model_copy(update={"state": UploadState.VERIFYING, "execution_arn": execution_arn})


def settle_upload_without_release(
    upload: Upload, state: UploadState, rejection: dict[str, Any] | None, now: int, *, retain_until: int
) -> None:
    """verifying/awaiting_upload → rejected/expired: record why and give the reservation back, atomically."""
    update = f"SET #state = :final, reservedBytes = :zero, settledAt = :now, {dynamo.TTL_ATTRIBUTE} = :purge"
    values: dict[str, Any] = {":final": str(state), ":zero": 0, ":now": now, ":purge": retain_until}
    if rejection is not None:
        update += ", rejection = :rejection"
        values[":rejection"] = rejection
    update += f" REMOVE {due.SHARD_ATTRIBUTE}, {due.AT_ATTRIBUTE}"
    items = [_fenced_upload_update(upload, update, values, {})]
    if upload.reserved_bytes:
        items.append(_usage_delta(upload.tenant, -upload.reserved_bytes))
    try:
        transact(items)
    except TransactionCancelled as cancelled:
        raise ClaimLost(f"upload {upload.upload_id} changed state") from cancelled


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
    known_blobs: list[str],
    now: int,
    retain_until: int,
) -> PublishOutcome | None:
    """In one transaction: the release (version unused), the upload's final state (fenced by its token), blob
    records and the usage ledger (the reservation becomes retained bytes for new blobs and is returned for shared
    ones). Returns None on success, or what blocked it."""
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
    for sha256, size in new_blobs.items():
        bpk, bsk = blob_key(release.tenant, sha256)
        items.append(
            {
                "Put": {
                    "TableName": table_name(),
                    "Item": to_item(bpk, bsk, BlobRecord(sha256=sha256, size=size, created_at=now)),
                    "ConditionExpression": "attribute_not_exists(pk)",
                }
            }
        )
    for sha256 in known_blobs:
        bpk, bsk = blob_key(release.tenant, sha256)
        items.append(
            {
                "ConditionCheck": {
                    "TableName": table_name(),
                    "Key": key(bpk, bsk),
                    "ConditionExpression": "attribute_exists(pk)",
                }
            }
        )
    returned = upload.reserved_bytes - sum(new_blobs.values())
    if returned:
        items.append(_usage_delta(upload.tenant, -returned))
    try:
        transact(items)
    except TransactionCancelled as cancelled:
        old_release = cancelled.old_item(0) if cancelled.failed(0) else None
        return PublishOutcome(
            existing_release=from_item(Release, old_release) if old_release else None,
            upload_changed=cancelled.failed(1),
            blob_race=any(cancelled.failed(i) for i in range(3, len(items))),
        )
    return None


def settle_upload_as_duplicate(upload: Upload, now: int, *, retain_until: int) -> None:
    """The identical release already exists: the upload is published (idempotently) and its reservation returned."""
    settle_items = [_mark_published(upload, now, retain_until)]
    if upload.reserved_bytes:
        settle_items.append(_usage_delta(upload.tenant, -upload.reserved_bytes))
    try:
        transact(settle_items)
    except TransactionCancelled as cancelled:
        raise ClaimLost(f"upload {upload.upload_id} changed state") from cancelled


def yank_release(tenant: str, package: str, version: str, now: int) -> Release:
    """Mark a release yanked (idempotent). The version stays used forever."""
    pk, sk = release_key(tenant, package, version)
    updated = dynamo.update(
        {
            "Key": key(pk, sk),
            "UpdateExpression": "SET #status = :yanked, yankedAt = if_not_exists(yankedAt, :now)",
            "ConditionExpression": "attribute_exists(pk)",
            "ExpressionAttributeNames": {"#status": "status"},
            "ExpressionAttributeValues": marshal({":yanked": str(ReleaseStatus.YANKED), ":now": now}),
        }
    )
    if updated is None:
        raise NotFound(f"release {package}@{version} not found")
    return from_item(Release, updated)


def postpone_upload_check(upload: Upload, check_by: int) -> None:
    """A verifying session whose execution still runs: look again at ``check_by`` (fenced by state and token)."""
    due_at = due.attributes(due.DueKind.UPLOAD, upload.upload_id, check_by)
    item = _fenced_upload_update(upload, "SET #at = :at", {":at": due_at[due.AT_ATTRIBUTE]}, {"#at": due.AT_ATTRIBUTE})
    try:
        transact([item])
    except TransactionCancelled as cancelled:
        raise ClaimLost(f"upload {upload.upload_id} changed state") from cancelled


def upload_from_due(item: dict[str, Any]) -> Upload:
    return from_item(Upload, item)


def blob_from_due(item: dict[str, Any]) -> BlobRecord:
    return from_item(BlobRecord, item)
