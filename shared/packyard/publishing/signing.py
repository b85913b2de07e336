"""Signing a release (inside the publish task, before the release transaction): a DSSE envelope over the release's
in-toto Statement, signed by the KMS key, stored once per upload, and the key that signed it recorded as a JWK.

Crash-safe and idempotent: the envelope's object is named by the upload (``attestations/…/<uploadId>.dsse.json``)
and written only if absent. A retried publish (Step Functions' Retry, a lost answer, a sweep's re-run) finds the
envelope an earlier attempt stored, checks that it is this upload's statement, and uses it: one envelope per
release, however many attempts signed (ECDSA signatures are randomised, so each attempt's signature differs; only
the first stored one counts, and the release records its sha256). An upload whose publish is refused afterwards
(another upload won the version) leaves its envelope unreferenced: no release points at it.
"""

from __future__ import annotations

import hashlib
import threading
from dataclasses import dataclass

from packyard import clock
from packyard.errors import NotFound, ReleaseUnavailable, StoredItemInvalid, StoreFailure
from packyard.publishing import attestation
from packyard.publishing.attestation import Envelope, EnvelopeDamaged, ReleaseClaim
from packyard.publishing.models import AttestationRef, SigningKey, Upload, check_package_name, check_version
from packyard.store import catalog, signing

_known_keys: dict[str, str] = {}
"""key ARN → kid of the keys this process has seen recorded (a key's public part never changes)."""
_knowing = threading.Lock()


@dataclass(frozen=True)
class Attested:
    """A release's stored envelope: where it is recorded (``ref``) and when the statement says it was published."""

    ref: AttestationRef
    published_at: int
    claim: ReleaseClaim


def attest(upload: Upload, now: int) -> Attested:
    """The upload's signed statement, stored: the one an earlier attempt stored, else a new one signed now."""
    object_key = signing.envelope_key(upload.tenant, upload.package, upload.version, upload.upload_id)
    stored = signing.read_envelope(object_key, at_most=attestation.MAX_ENVELOPE_BYTES)
    if stored is None:
        claim = claim_of(upload, now)
        fresh = signed_envelope(claim)
        if signing.put_envelope(object_key, fresh):
            return _attested(fresh, claim, now)
        # a concurrent attempt of the same upload stored its envelope between our read and our write: use it
        stored = signing.read_envelope(object_key, at_most=attestation.MAX_ENVELOPE_BYTES)
        if stored is None:
            raise StoreFailure(f"envelope of upload {upload.upload_id} vanished after a conditional write")
    return _stored_attestation(upload, stored)


def claim_of(upload: Upload, now: int) -> ReleaseClaim:
    return ReleaseClaim(
        tenant=upload.tenant,
        package=upload.package,
        version=upload.version,
        archive_sha256=upload.archive_sha256,
        manifest_sha256=upload.manifest_digest,
        upload_id=upload.upload_id,
        published_by=upload.created_by,
        published_at=attestation.statement_time(now),
    )


def signed_envelope(claim: ReleaseClaim) -> bytes:
    """The envelope's bytes: KMS signs the PAE of the statement; the key id is the signing key's JWK thumbprint."""
    payload = attestation.statement_bytes(claim)
    message = attestation.pae(attestation.PAYLOAD_TYPE, payload)
    if len(message) > attestation.MAX_SIGNED_BYTES:
        raise StoreFailure(
            f"the statement of {claim.package}@{claim.version} is {len(message)} bytes signed, more than KMS signs "
            f"as a message ({attestation.MAX_SIGNED_BYTES}): the publishing subject is too long"
        )
    signed = signing.sign(message)
    return attestation.envelope_bytes(attestation.envelope(payload, kid_of(signed.key_arn), signed.signature))


def kid_of(key_arn: str) -> str:
    """The key id (JWK thumbprint) of a KMS key, recorded (once, the first time it signs) in the key list."""
    with _knowing:
        known = _known_keys.get(key_arn)
    if known is not None:
        return known
    recorded = signing.find_key(key_arn)
    if recorded is None:
        jwk = attestation.public_jwk(signing.public_key_der(key_arn))
        recorded = signing.record_key(
            SigningKey(kid=jwk["kid"], key_arn=key_arn, x=jwk["x"], y=jwk["y"], first_signed_at=clock.now())
        )
    with _knowing:
        _known_keys[key_arn] = recorded.kid
    return recorded.kid


def forget_keys() -> None:
    """Forget the keys this process has seen (tests that rotate or recreate keys on a fresh stack)."""
    with _knowing:
        _known_keys.clear()


def _attested(raw: bytes, claim: ReleaseClaim, published_at: int) -> Attested:
    envelope = attestation.parse_envelope(raw)
    ref = AttestationRef(sha256=hashlib.sha256(raw).hexdigest(), size=len(raw), key_id=envelope.signatures[0].keyid)
    return Attested(ref=ref, published_at=published_at, claim=claim)


def _stored_attestation(upload: Upload, raw: bytes) -> Attested:
    """An envelope an earlier attempt stored: it must be this upload's statement (else the store is not what this
    code wrote, and nothing is guessed)."""
    try:
        envelope = attestation.parse_envelope(raw)
        claim = attestation.parse_claim(envelope.payload)
    except EnvelopeDamaged as damaged:
        raise StoredItemInvalid(f"the stored envelope of upload {upload.upload_id} is damaged: {damaged}") from damaged
    expected = claim_of(upload, 0)
    if (claim.tenant, claim.package, claim.version, claim.upload_id, claim.archive_sha256, claim.manifest_sha256) != (
        expected.tenant,
        expected.package,
        expected.version,
        expected.upload_id,
        expected.archive_sha256,
        expected.manifest_sha256,
    ):
        raise StoredItemInvalid(f"the stored envelope of upload {upload.upload_id} states another release")
    try:
        published_at = attestation.epoch_of_statement_time(claim.published_at)
    except ValueError as bad:
        raise StoredItemInvalid(f"the stored envelope of upload {upload.upload_id} has no valid time") from bad
    return _attested(raw, claim, published_at)


# ---- reads: a release's envelope, the keys ----------------------------------------------------------------------


def release_envelope(tenant: str, package: str, version: str) -> Envelope:
    """The release's DSSE envelope as stored, checked against the sha256 its release recorded. Served for yanked
    and unavailable releases too: it states what was published, and a runtime that holds the bytes verifies them."""
    release = catalog.get_release(tenant, check_package_name(package), check_version(version))
    if release.attestation is None:
        raise NotFound(f"{package}@{version} was published before releases were signed: it has no attestation")
    object_key = signing.envelope_key(tenant, release.package, release.version, release.upload_id)
    raw = signing.read_envelope(object_key, at_most=attestation.MAX_ENVELOPE_BYTES)
    if raw is None or hashlib.sha256(raw).hexdigest() != release.attestation.sha256:
        raise ReleaseUnavailable(f"the attestation of {package}@{version} is missing or altered in storage")
    try:
        return attestation.parse_envelope(raw)
    except EnvelopeDamaged as damaged:  # the bytes are the ones recorded: this code wrote something it cannot read
        raise StoredItemInvalid(f"the stored envelope of {package}@{version} is damaged: {damaged}") from damaged


def published_keys() -> list[SigningKey]:
    """Every key that signed a release: the one signing now and every one rotated out since."""
    return signing.list_keys()
