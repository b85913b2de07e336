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

from packyard.errors import ClaimLost, NotFound, QuotaExceeded, StoredItemInvalid
from packyard.models import Package, Release, ReleaseStatus, Upload, UploadState
from packyard.store import dynamo
from packyard.store.dynamo import TransactionCancelled, from_item, key, marshal, table_name, to_item, transact

# Settled sessions are kept this long for GET /v1/uploads/{id}, then DynamoDB's TTL removes them. Live sessions
# never carry the TTL attribute: expiry must go through settle (it returns the reservation), never a silent delete.
SETTLED_UPLOAD_RETENTION = 7 * 24 * 3600


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
    return dynamo.get(*blob_key(tenant, sha256)) is not None


def get_package(tenant: str, package: str) -> Package:
    item = dynamo.get(*package_key(tenant, package), consistent=False)
    if item is None:
        raise NotFound(f"package {package} not found")
    return from_item(Package, item)


def list_packages(tenant: str, *, limit: int, cursor: dict[str, Any] | None) -> tuple[list[Package], Any]:
    items, next_key = dynamo.query(package_key(tenant, "")[0], prefix="PACKAGE#", limit=limit, cursor=cursor)
    return [from_item(Package, item) for item in items], next_key


def list_releases(tenant: str, package: str, *, limit: int, cursor: dict[str, Any] | None) -> tuple[list[Release], Any]:
    pk, _ = release_key(tenant, package, "")
    items, next_key = dynamo.query(pk, prefix="VERSION#", limit=limit, cursor=cursor)
    return [from_item(Release, item) for item in items], next_key


def get_used_bytes(tenant: str) -> int:
    item = dynamo.get(*usage_key(tenant), consistent=False)
    return int(dynamo.unmarshal(item).get("usedBytes", 0)) if item else 0


# ---- writes ------------------------------------------------------------------------------------------------------


def _usage_delta(tenant: str, delta: int) -> dict[str, Any]:
    pk, sk = usage_key(tenant)
    return {
        "Update": {
            "TableName": table_name(),
            "Key": key(pk, sk),
            "UpdateExpression": "ADD usedBytes :delta",
            "ExpressionAttributeValues": {":delta": {"N": str(delta)}},
        }
    }


def _fenced_upload_update(upload: Upload, update: str, values: dict[str, Any], names: dict[str, str]) -> dict:
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


def _mark_published(upload: Upload, now: int) -> dict[str, Any]:
    """verifying → published (fenced): the reservation is settled by the caller's ledger item."""
    return _fenced_upload_update(
        upload,
        "SET #state = :published, reservedBytes = :zero, settledAt = :now, expiresAt = :purge",
        {":published": str(UploadState.PUBLISHED), ":zero": 0, ":now": now, ":purge": now + SETTLED_UPLOAD_RETENTION},
        {},
    )


def create_upload(upload: Upload, *, quota_bytes: int) -> None:
    """Record the session and reserve its bytes against the tenant's quota, in one transaction."""
    pk, sk = upload_key(upload.tenant, upload.upload_id)
    upk, usk = usage_key(upload.tenant)
    n = upload.reserved_bytes
    if n > quota_bytes:
        # with no ledger yet, the condition below would pass: a request larger than the whole quota never fits
        raise QuotaExceeded(
            f"reserving {n} bytes exceeds the tenant quota of {quota_bytes} bytes",
            usedBytes=get_used_bytes(upload.tenant),
            limitBytes=quota_bytes,
            requestedBytes=n,
        )
    items: list[dict[str, Any]] = [
        {
            "Put": {
                "TableName": table_name(),
                "Item": to_item(pk, sk, upload),
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
                    "UpdateExpression": "ADD usedBytes :n",
                    "ConditionExpression": "attribute_not_exists(usedBytes) OR usedBytes <= :room",
                    "ExpressionAttributeValues": {":n": {"N": str(n)}, ":room": {"N": str(quota_bytes - n)}},
                    "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
                }
            }
        )
    try:
        transact(items)
    except TransactionCancelled as cancelled:
        if cancelled.failed(1):
            old = dynamo.unmarshal(cancelled.old_item(1) or {})
            raise QuotaExceeded(
                f"reserving {n} bytes would exceed the tenant quota of {quota_bytes} bytes",
                usedBytes=int(old.get("usedBytes", 0)),
                limitBytes=quota_bytes,
                requestedBytes=n,
            ) from cancelled
        raise StoredItemInvalid(f"upload id {upload.upload_id} collided") from cancelled


def start_verifying(upload: Upload, execution_arn: str) -> Upload:
    """awaiting_upload → verifying, fenced by state and token. Returns the upload as stored afterwards."""
    item = _fenced_upload_update(
        upload,
        "SET #state = :verifying, executionArn = :arn",
        {":verifying": str(UploadState.VERIFYING), ":arn": execution_arn},
        {},
    )
    try:
        transact([item])
    except TransactionCancelled as cancelled:
        raise ClaimLost(f"upload {upload.upload_id} changed state") from cancelled
    return upload.model_copy(update={"state": UploadState.VERIFYING, "execution_arn": execution_arn})


def settle_upload_without_release(
    upload: Upload, state: UploadState, rejection: dict[str, Any] | None, now: int
) -> None:
    """verifying/awaiting_upload → rejected/expired: record why and give the reservation back, atomically."""
    update = "SET #state = :final, reservedBytes = :zero, settledAt = :now, expiresAt = :purge"
    values: dict[str, Any] = {":final": str(state), ":zero": 0, ":now": now, ":purge": now + SETTLED_UPLOAD_RETENTION}
    if rejection is not None:
        update += ", rejection = :rejection"
        values[":rejection"] = rejection
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
    upload: Upload, release: Release, *, new_blobs: dict[str, int], known_blobs: list[str], now: int
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
        _mark_published(upload, now),
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
                    "Item": marshal(
                        {
                            "pk": bpk,
                            "sk": bsk,
                            "sha256": sha256,
                            "size": size,
                            "createdAt": now,
                            "schemaVersion": dynamo.SCHEMA_VERSION,
                        }
                    ),
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


def settle_upload_as_duplicate(upload: Upload, now: int) -> None:
    """The identical release already exists: the upload is published (idempotently) and its reservation returned."""
    settle_items = [_mark_published(upload, now)]
    if upload.reserved_bytes:
        settle_items.append(_usage_delta(upload.tenant, -upload.reserved_bytes))
    try:
        transact(settle_items)
    except TransactionCancelled as cancelled:
        raise ClaimLost(f"upload {upload.upload_id} changed state") from cancelled


def yank_release(tenant: str, package: str, version: str, now: int) -> Release:
    """Mark a release yanked (idempotent). The version stays used forever."""
    pk, sk = release_key(tenant, package, version)
    try:
        response = dynamo.dynamodb().update_item(
            TableName=table_name(),
            Key=key(pk, sk),
            UpdateExpression="SET #status = :yanked, yankedAt = if_not_exists(yankedAt, :now)",
            ConditionExpression="attribute_exists(pk)",
            ExpressionAttributeNames={"#status": "status"},
            ExpressionAttributeValues=marshal({":yanked": str(ReleaseStatus.YANKED), ":now": now}),
            ReturnValues="ALL_NEW",
        )
    except Exception as exc:
        from packyard.store.aws import error_code

        if error_code(exc) == "ConditionalCheckFailedException":
            raise NotFound(f"release {package}@{version} not found") from exc
        raise
    return from_item(Release, response["Attributes"])
