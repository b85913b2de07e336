"""Release signing's stores: the KMS key (Sign, GetPublicKey), the record of every key that signed (DynamoDB), the
certificates of the short-lived keys KMS certified (DynamoDB) and the envelope objects of older releases (S3).

    signing key   pk SIGNING#KEYS                   sk KEY#<kms key id>    (kid, keyArn, x, y, firstSignedAt)
    certificate   pk SIGNING#CERTIFICATE#<kid>      sk CERTIFICATE         (kid, certificate, notAfter)
    envelope      attestations/<tenant>/<package>/<version>/<uploadId>.dsse.json   (releases signed by KMS itself)

A release signed by a short-lived key keeps no envelope object: its release item holds the signature and the
short-lived key's kid, and the envelope is rebuilt from the release and the certificate (docs/decisions.md, "A
short-lived signing key").

The key records are the service's memory of its keys: a key that signed once is listed by ``GET /v1/signing-keys``
from then on, whichever key the alias names today (docs/decisions.md, "Signed releases"). Envelopes live outside
``blobs/``: they are not content-addressed blobs and not counted in the usage ledger (about 1.5 KB each).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

from packyard.config import required, settings
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


def signing_key_alias() -> str:
    """The ``SIGNING_KEY_ID`` setting: the alias that names the key signing now (rotation points it at a new key)."""
    return required("signing_key_id").signing_key_id


def signing_context() -> tuple[object, object]:
    """What a short-lived key is held for: the KMS client this process signs through and the settings it read. A
    reset of either (another endpoint, credentials or stack: tests and the local stack reset them when they start
    a stack) certifies a new key; in a Lambda they last as long as the process."""
    return _kms(), settings()


def current_public_key() -> tuple[str, bytes]:
    """The key the alias names now: its id (an ARN on AWS) and public part (DER SubjectPublicKeyInfo)."""
    try:
        answer = _kms().get_public_key(KeyId=signing_key_alias())
    except Exception as exc:
        raise _translate(exc) from exc
    return str(answer["KeyId"]), bytes(answer["PublicKey"])


def sign(message: bytes) -> Signed:
    """ECDSA P-256 / SHA-256 over ``message`` (at most 4096 bytes: MessageType RAW) with the key the
    ``SIGNING_KEY_ID`` setting names (an alias: rotation points it at a new key)."""
    key_id = signing_key_alias()
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


# ---- certificates of short-lived keys -------------------------------------------------------------------------------

CERTIFICATE_PARTITION = "SIGNING#CERTIFICATE#"
CERTIFICATE_SORT_KEY = "CERTIFICATE"


def _certificate_item_key(kid: str) -> tuple[str, str]:
    return CERTIFICATE_PARTITION + kid, CERTIFICATE_SORT_KEY


def put_certificate(kid: str, certificate: bytes, not_after: int) -> None:
    """Record a short-lived key's certificate (its DSSE envelope, as KMS signed it) before the key signs anything.
    A kid names one random key: a record already there is this one (a retried put)."""
    pk, sk = _certificate_item_key(kid)
    item = dynamo.marshal(
        {"pk": pk, "sk": sk, "kid": kid, "certificate": certificate.decode("utf-8"), "notAfter": not_after}
    )
    try:
        dynamo.dynamodb().put_item(
            TableName=dynamo.table_name(), Item=item, ConditionExpression="attribute_not_exists(pk)"
        )
    except Exception as exc:
        if error_code(exc) == "ConditionalCheckFailedException":
            return
        raise dynamo.translate_error(exc) from exc


def find_certificate(kid: str) -> bytes | None:
    """A short-lived key's certificate, as recorded (None: no such key was ever certified here)."""
    # written before any release names it; an eventually consistent read just after may not see it yet
    item = dynamo.get(*_certificate_item_key(kid), consistent=False) or dynamo.get(*_certificate_item_key(kid))
    if not item:
        return None
    return str(dynamo.unmarshal(item)["certificate"]).encode("utf-8")


# ---- envelopes ------------------------------------------------------------------------------------------------------


def envelope_key(tenant: str, package: str, version: str, upload_id: str) -> str:
    return f"attestations/{tenant}/{package}/{version}/{upload_id}.dsse.json"


def read_envelope(object_key: str, *, at_most: int) -> bytes | None:
    return blobs.read_bytes(object_key, at_most=at_most)


def put_envelope(object_key: str, data: bytes) -> bool:
    """Write the envelope unless one is there already (False then: another attempt of the same upload wrote it)."""
    return blobs.put_bytes(object_key, data, hashlib.sha256(data).hexdigest(), if_absent=True)
