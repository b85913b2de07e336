"""Release signing's stores: the KMS key (Sign, GetPublicKey), the record of every key that signed (DynamoDB) and the
envelope objects (S3).

    signing key   pk SIGNING#KEYS                   sk KEY#<kms key id>    (kid, keyArn, x, y, firstSignedAt)
    envelope      attestations/<tenant>/<package>/<version>/<uploadId>.dsse.json

The key records are the service's memory of its keys: a key that signed once is listed by ``GET /v1/signing-keys``
from then on, whichever key the alias names today (docs/decisions.md, "Signed releases"). Envelopes live outside
``blobs/``: they are not content-addressed blobs and not counted in the usage ledger (about 1.5 KB each).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

from packyard.config import required
from packyard.publishing.models import SigningKey
from packyard.store import blobs, dynamo
from packyard.store.aws import client, error_code, translate
from packyard.store.dynamo import from_item, to_item

KEYS_PARTITION = "SIGNING#KEYS"
KEY_PREFIX = "KEY#"
# a service has a handful of keys over its life (one per rotation): one page holds them all
MAX_KEYS = 100


def _kms() -> Any:
    return client("kms")


def _translate(exc: Exception) -> Exception:
    return translate(exc, "KMS")


@dataclass(frozen=True)
class Signed:
    key_arn: str
    signature: bytes
    """ASN.1 DER ECDSA signature (KMS's answer for ECDSA_SHA_256)."""


def sign(message: bytes) -> Signed:
    """ECDSA P-256 / SHA-256 over ``message`` (at most 4096 bytes: MessageType RAW) with the key the
    ``SIGNING_KEY_ID`` setting names (an alias: rotation points it at a new key)."""
    key_id = required("signing_key_id").signing_key_id
    try:
        answer = _kms().sign(KeyId=key_id, Message=message, MessageType="RAW", SigningAlgorithm="ECDSA_SHA_256")
    except Exception as exc:
        raise _translate(exc) from exc
    return Signed(key_arn=str(answer["KeyId"]), signature=bytes(answer["Signature"]))


def public_key_der(key_arn: str) -> bytes:
    """The key's public part as DER SubjectPublicKeyInfo."""
    try:
        answer = _kms().get_public_key(KeyId=key_arn)
    except Exception as exc:
        raise _translate(exc) from exc
    # the key's spec is in the DER itself (attestation.p256_point refuses anything but an uncompressed P-256 key)
    return bytes(answer["PublicKey"])


def kms_key_id(key_arn: str) -> str:
    """The key id (a UUID) of a key ARN (``arn:aws:kms:<region>:<account>:key/<id>``)."""
    return key_arn.rsplit("/", 1)[-1]


def _key_item_key(key_arn: str) -> tuple[str, str]:
    return KEYS_PARTITION, KEY_PREFIX + kms_key_id(key_arn)


def find_key(key_arn: str) -> SigningKey | None:
    item = dynamo.get(*_key_item_key(key_arn), consistent=False)
    return from_item(SigningKey, item) if item else None


def record_key(signing_key: SigningKey) -> SigningKey:
    """Record a key that signs (once: a record already there wins, and is returned)."""
    pk, sk = _key_item_key(signing_key.key_arn)
    try:
        dynamo.dynamodb().put_item(
            TableName=dynamo.table_name(),
            Item=to_item(pk, sk, signing_key),
            ConditionExpression="attribute_not_exists(pk)",
        )
    except Exception as exc:
        if error_code(exc) == "ConditionalCheckFailedException":
            item = dynamo.get(pk, sk)
            if item:
                return from_item(SigningKey, item)
        raise dynamo.translate_error(exc) from exc
    return signing_key


def list_keys() -> list[SigningKey]:
    """Every key that ever signed a release, oldest key id first."""
    items, _ = dynamo.query(KEYS_PARTITION, prefix=KEY_PREFIX, limit=MAX_KEYS)
    return [from_item(SigningKey, item) for item in items]


# ---- envelopes ------------------------------------------------------------------------------------------------------


def envelope_key(tenant: str, package: str, version: str, upload_id: str) -> str:
    return f"attestations/{tenant}/{package}/{version}/{upload_id}.dsse.json"


def read_envelope(object_key: str, *, at_most: int) -> bytes | None:
    return blobs.read_bytes(object_key, at_most=at_most)


def put_envelope(object_key: str, data: bytes) -> bool:
    """Write the envelope unless one is there already (False then: another attempt of the same upload wrote it)."""
    return blobs.put_bytes(object_key, data, hashlib.sha256(data).hexdigest(), if_absent=True)
