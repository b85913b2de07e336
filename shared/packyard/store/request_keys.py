"""Idempotency-Keys sent with requests that are idempotent by nature (completing an upload, yanking a release): one
item per key binds it to the request it first came with, so another request under the same key is told apart.

    request key   pk TENANT#<t>#REQUEST#<sha256(key)>   sk REQUEST   requestDigest, expiresAt (the table's TTL)

The key is hashed into the partition key (any printable ASCII, up to 255 characters, one partition per key).
"""

from __future__ import annotations

import hashlib

from packyard.store import dynamo
from packyard.store.dynamo import key, marshal


def request_key(tenant: str, idempotency_key: str) -> tuple[str, str]:
    hashed = hashlib.sha256(idempotency_key.encode()).hexdigest()
    return f"TENANT#{tenant}#REQUEST#{hashed}", "REQUEST"


def bind(tenant: str, idempotency_key: str, request_digest: str, *, now: int, retain_until: int) -> bool:
    """Bind the key to ``request_digest`` until ``retain_until``: True when it is (now, or already was) bound to
    it, False when it is bound to another request. A binding past its retention (the TTL deletes it some time
    later) is free again."""
    pk, sk = request_key(tenant, idempotency_key)
    updated = dynamo.update(
        {
            "Key": key(pk, sk),
            "UpdateExpression": "SET requestDigest = :digest, schemaVersion = :schema, #ttl = :until",
            "ConditionExpression": "attribute_not_exists(pk) OR requestDigest = :digest OR #ttl <= :now",
            "ExpressionAttributeNames": {"#ttl": dynamo.TTL_ATTRIBUTE},
            "ExpressionAttributeValues": marshal(
                {":digest": request_digest, ":schema": dynamo.SCHEMA_VERSION, ":until": retain_until, ":now": now}
            ),
        }
    )
    return updated is not None
