"""Signing a release (inside the publish task, before the release transaction): a DSSE envelope over the release's
in-toto Statement, signed by a short-lived key that KMS certified, and the KMS key that certified it recorded as a
JWK (docs/decisions.md, "A short-lived signing key").

The short-lived key: the first publish of a process (and again once its certificate has less than
:data:`RENEW_BEFORE_SECONDS` left, or the process's KMS client changed) makes an ECDSA P-256 key pair in memory and
has KMS sign its **certificate** (the key's JWK, a window of :data:`CERTIFICATE_SECONDS`, the certifying key's kid,
the stack); the certificate is recorded before the key signs anything. Each release is then signed here, with no
KMS request: one KMS Sign per process per hour, not per publish. The private key never leaves this process's memory
(never logged, never stored): a process that dies takes it along, and the next one certifies its own.

Crash-safe and idempotent: nothing is stored before the release transaction. The release item records the signature
and the short-lived key's kid (``AttestationRef``), in the same write that creates the release, so a retried publish
(Step Functions' Retry, a lost answer, a duplicate run) simply signs again (ECDSA signatures are randomised: each
attempt's differs) and only the attempt whose transaction commits is recorded. The envelope is rebuilt from the
release and the certificate when it is read, and checked against the sha256 recorded at signing.
"""

from __future__ import annotations

import base64
import hashlib
import json
import threading
from dataclasses import dataclass
from typing import Any

from packyard import clock
from packyard.errors import NotFound, ReleaseUnavailable, StoredItemInvalid, StoreFailure
from packyard.publishing import attestation
from packyard.publishing.attestation import Envelope, EnvelopeDamaged, KeyCertificate, ReleaseClaim
from packyard.publishing.models import AttestationRef, Release, SigningKey, Upload, check_package_name, check_version
from packyard.store import catalog, signing

CERTIFICATE_SECONDS = 3600
"""How long a short-lived key may sign: its certificate's window (notBefore … notAfter)."""
RENEW_BEFORE_SECONDS = 300
"""A key whose certificate has less than this left is replaced before it signs again."""
CERTIFY_ATTEMPTS = 2
"""A rotation between reading the alias's public key and signing the certificate: certify once more."""

_known_keys: dict[str, str] = {}
"""key ARN → kid of the keys this process has seen recorded (a key's public part never changes)."""
_knowing = threading.Lock()


@dataclass(frozen=True)
class ShortLivedKey:
    """A signing key of this process, certified by KMS: the private half lives only here, in memory."""

    private: Any
    """``cryptography``'s EllipticCurvePrivateKey (never serialised, logged or stored)."""
    certificate: KeyCertificate
    certificate_document: dict[str, Any]
    """The certificate's DSSE envelope (KMS's signature), as recorded: what each envelope carries."""
    context: tuple[object, object]
    """The KMS client and settings it was certified through (``store.signing.signing_context``)."""

    def signs_at(self, now: int) -> bool:
        held, current = self.context, signing.signing_context()
        return self.certificate.not_before <= now <= self.certificate.not_after - RENEW_BEFORE_SECONDS and all(
            a is b for a, b in zip(held, current, strict=True)
        )

    def sign(self, message: bytes) -> bytes:
        from cryptography.hazmat.primitives import hashes
        from cryptography.hazmat.primitives.asymmetric import ec

        signature: bytes = self.private.sign(message, ec.ECDSA(hashes.SHA256()))
        return signature

    def __repr__(self) -> str:  # never the private key, whatever prints this
        return f"ShortLivedKey(kid={self.certificate.kid!r}, notAfter={self.certificate.not_after})"


_short_lived: ShortLivedKey | None = None
_certifying = threading.Lock()


@dataclass(frozen=True)
class Attested:
    """A release's signed statement: how its release records it (``ref``) and when it says it was published."""

    ref: AttestationRef
    published_at: int
    claim: ReleaseClaim


def attest(upload: Upload, now: int) -> Attested:
    """The upload's statement, signed now by this process's short-lived key (certified first if it has none)."""
    claim = claim_of(upload, now)
    key = short_lived_key(now)
    payload = attestation.statement_bytes(claim)
    signature = key.sign(attestation.pae(attestation.PAYLOAD_TYPE, payload))
    raw = _envelope_bytes(payload, key.certificate.kid, signature, key.certificate_document)
    ref = AttestationRef(
        sha256=hashlib.sha256(raw).hexdigest(),
        size=len(raw),
        key_id=key.certificate.certified_by,
        sig=base64.b64encode(signature).decode("ascii"),
        signer=key.certificate.kid,
        verifier=claim.verifier,
    )
    return Attested(ref=ref, published_at=attestation.epoch_of_statement_time(claim.published_at), claim=claim)


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


def released_claim(release: Release, verifier: str) -> ReleaseClaim:
    """The statement a release was signed over, from the release item (the same fields :func:`claim_of` took from
    its upload: the release is written from the upload it signed)."""
    return ReleaseClaim(
        tenant=release.tenant,
        package=release.package,
        version=release.version,
        archive_sha256=release.archive_sha256,
        manifest_sha256=release.manifest_digest,
        upload_id=release.upload_id,
        published_by=release.published_by,
        published_at=attestation.statement_time(release.published_at),
        verifier=verifier,
    )


def _envelope_bytes(payload: bytes, signer: str, signature: bytes, certificate: dict[str, Any]) -> bytes:
    return attestation.envelope_bytes(attestation.envelope(payload, signer, signature, certificate=certificate))


# ---- the short-lived key ------------------------------------------------------------------------------------------


def short_lived_key(now: int) -> ShortLivedKey:
    """This process's short-lived key, certified anew when it has none that may sign at ``now``."""
    global _short_lived
    with _certifying:
        current = _short_lived
        if current is None or not current.signs_at(now):
            current = _certified_key(now)
            _short_lived = current
        return current


def _certified_key(now: int) -> ShortLivedKey:
    """A new key pair, its certificate signed by the KMS key the alias names and recorded before it is used."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    private = ec.generate_private_key(ec.SECP256R1())
    public = attestation.public_jwk(
        private.public_key().public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    )
    alias = signing.signing_key_alias()
    for _ in range(CERTIFY_ATTEMPTS):
        named_key, der = signing.current_public_key()
        certifier = attestation.public_jwk(der)
        certificate = KeyCertificate(
            kid=public["kid"],
            x=public["x"],
            y=public["y"],
            not_before=now,
            not_after=now + CERTIFICATE_SECONDS,
            certified_by=certifier["kid"],
            issuer=alias,
        )
        payload = attestation.certificate_bytes(certificate)
        signed = signing.sign(attestation.pae(attestation.CERTIFICATE_TYPE, payload))
        if signing.kms_key_id(signed.key_arn) != signing.kms_key_id(named_key):
            continue  # the alias moved to another key between the two calls: certify under the one it names now
        kid_of(signed.key_arn, der)  # recorded (once) before anything it certified is published
        document = attestation.envelope(
            payload, certifier["kid"], signed.signature, payload_type=attestation.CERTIFICATE_TYPE
        )
        signing.put_certificate(certificate.kid, attestation.canonical_json(document), certificate.not_after)
        return ShortLivedKey(
            private=private,
            certificate=certificate,
            certificate_document=document,
            context=signing.signing_context(),
        )
    raise StoreFailure(f"the key behind {alias} kept changing while a signing key was being certified")


def kid_of(key_arn: str, der: bytes | None = None) -> str:
    """The key id (JWK thumbprint) of a KMS key, recorded (once, the first time it signs) in the key list; ``der``:
    its public part, when the caller has it already (else read from KMS, once)."""
    with _knowing:
        known = _known_keys.get(key_arn)
    if known is not None:
        return known
    recorded = signing.find_key(key_arn)
    if recorded is None:
        jwk = attestation.public_jwk(der if der is not None else signing.public_key_der(key_arn))
        recorded = signing.record_key(
            SigningKey(kid=jwk["kid"], key_arn=key_arn, x=jwk["x"], y=jwk["y"], first_signed_at=clock.now())
        )
    with _knowing:
        _known_keys[key_arn] = recorded.kid
    return recorded.kid


def forget_keys() -> None:
    """Forget the keys this process has seen and its short-lived key (as a new process would: tests that rotate
    or recreate keys on a fresh stack)."""
    global _short_lived
    with _knowing:
        _known_keys.clear()
    with _certifying:
        _short_lived = None


# ---- reads: a release's envelope, the keys ----------------------------------------------------------------------


def release_envelope(tenant: str, package: str, version: str) -> Envelope:
    """The release's DSSE envelope as stored, checked against the sha256 its release recorded. Served for yanked
    and unavailable releases too: it states what was published, and a runtime that holds the bytes verifies them."""
    release = catalog.get_release(tenant, check_package_name(package), check_version(version))
    if release.attestation is None:
        raise NotFound(f"{package}@{version} was published before releases were signed: it has no attestation")
    raw = _stored_envelope(release, release.attestation)
    if raw is None or hashlib.sha256(raw).hexdigest() != release.attestation.sha256:
        raise ReleaseUnavailable(f"the attestation of {package}@{version} is missing or altered in storage")
    try:
        return attestation.parse_envelope(raw)
    except EnvelopeDamaged as damaged:  # the bytes are the ones recorded: this code wrote something it cannot read
        raise StoredItemInvalid(f"the stored envelope of {package}@{version} is damaged: {damaged}") from damaged


def _stored_envelope(release: Release, ref: AttestationRef) -> bytes | None:
    """The release's envelope bytes: rebuilt from the release item and its key's certificate, or (a release signed
    by KMS itself, before short-lived keys) the object stored beside it. None: something it needs is missing."""
    if ref.signer is None or ref.sig is None or ref.verifier is None:
        object_key = signing.envelope_key(release.tenant, release.package, release.version, release.upload_id)
        return signing.read_envelope(object_key, at_most=attestation.MAX_ENVELOPE_BYTES)
    certificate = certificate_document(ref.signer)
    if certificate is None:
        return None
    payload = attestation.statement_bytes(released_claim(release, ref.verifier))
    return _envelope_bytes(payload, ref.signer, base64.b64decode(ref.sig), certificate)


_certificates: dict[str, dict[str, Any]] = {}
"""kid → certificate document of the short-lived keys this process has read (a certificate never changes)."""
_reading = threading.Lock()


def certificate_document(kid: str) -> dict[str, Any] | None:
    """The recorded certificate of short-lived key ``kid`` (read once per process)."""
    with _reading:
        known = _certificates.get(kid)
    if known is not None:
        return known
    raw = signing.find_certificate(kid)
    if raw is None:
        return None
    try:
        document: dict[str, Any] = json.loads(raw)
    except ValueError as bad:
        raise StoredItemInvalid(f"the recorded certificate of signing key {kid} is not JSON") from bad
    with _reading:
        _certificates[kid] = document
    return document


def published_keys() -> list[SigningKey]:
    """Every key that signed a release: the one signing now and every one rotated out since."""
    return signing.list_keys()
