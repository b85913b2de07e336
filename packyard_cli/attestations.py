"""Offline verification of a release's signed statement: a DSSE envelope checked against a pinned key set, and the
bytes a runtime holds checked against the statement's subjects. No call to Packyard: the envelope and the key set
are bytes the caller has (``packyard verify``, ``packyard sync``, or a runtime of its own).

    keys = load_key_set(Path("signing-keys.json").read_bytes())     # GET /v1/signing-keys, pinned
    release = verify_envelope(envelope_bytes, keys, package="hello", version="1.0.0")
    check_subjects(release, archive_sha256=sha256_file(archive), manifest_sha256=...)

Each refusal is its own exception with a stable ``code``, a reason and an exit code for the CLI:

* :class:`EnvelopeTampered` (``tampered_envelope``): the envelope is not intact (truncated, not JSON, base64 that
  does not decode, a signature that is not DER, another payloadType or statement type), or its signature does not
  verify over its payload with the pinned key its keyid names: it was altered after signing, or forged under that
  key's id (ECDSA cannot tell the two apart).
* :class:`WrongKey` (``wrong_key``): the pinned key that the keyid names is another key: a kid is the key's RFC 7638
  thumbprint, so a key set whose entry's thumbprint differs from its kid (or that is not an EC P-256 signing key)
  is the wrong key for this envelope. A release signed by a short-lived key is refused the same way when no pinned
  key vouches for that key: its certificate does not verify under the pinned key it names (forged or altered),
  certifies another key than the one that signed, or the release's ``publishedAt`` lies outside its window.
* :class:`UnknownKeyId` (``unknown_key_id``): no pinned key has the envelope's keyid, or for a short-lived key,
  the keyid of the key that certified it (a key the service never published, or one pinned before a rotation: pin
  again).
* :class:`SubjectMismatch` (``subject_mismatch``): the statement is authentic but about other bytes or another
  release (package, version, tenant, archive or manifest sha256).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from packyard.publishing import attestation
from packyard.publishing.attestation import Envelope, EnvelopeDamaged, KeyCertificate, ReleaseClaim, Signature

EXIT_TAMPERED = 10
EXIT_WRONG_KEY = 11
EXIT_UNKNOWN_KEY = 12
EXIT_SUBJECT_MISMATCH = 13


class VerificationRefused(Exception):
    """A refusal of offline verification: ``code`` (stable), ``reason`` (for people) and the CLI's exit code."""

    code = "verification_refused"
    exit_code = 1

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class EnvelopeTampered(VerificationRefused):
    code, exit_code = "tampered_envelope", EXIT_TAMPERED


class WrongKey(VerificationRefused):
    code, exit_code = "wrong_key", EXIT_WRONG_KEY


class UnknownKeyId(VerificationRefused):
    code, exit_code = "unknown_key_id", EXIT_UNKNOWN_KEY


class SubjectMismatch(VerificationRefused):
    code, exit_code = "subject_mismatch", EXIT_SUBJECT_MISMATCH


class KeySetInvalid(ValueError):
    """Bytes that are not a JWK Set (RFC 7517 section 5): a usage error, not a verdict about an envelope."""


@dataclass(frozen=True)
class KeySet:
    """Pinned public keys by kid, as the JWK Set gave them (checked when an envelope names one)."""

    keys: Mapping[str, Mapping[str, Any]]

    def kids(self) -> list[str]:
        return sorted(self.keys)


def load_key_set(raw: bytes) -> KeySet:
    """A JWK Set (``GET /v1/signing-keys``) as pinned keys. Entries are checked when used (:func:`verify_envelope`)."""
    try:
        document = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise KeySetInvalid("the key set is not JSON") from exc
    entries = document.get("keys") if isinstance(document, dict) else None
    if not isinstance(entries, list):
        raise KeySetInvalid('the key set is not a JWK Set (an object with a "keys" array)')
    keys: dict[str, Mapping[str, Any]] = {}
    for entry in entries:
        if not isinstance(entry, dict) or not isinstance(entry.get("kid"), str) or not entry["kid"]:
            raise KeySetInvalid("a key of the set has no kid")
        keys[entry["kid"]] = entry
    return KeySet(keys=keys)


@dataclass(frozen=True)
class VerifiedRelease:
    """An envelope whose signature verified: what it states, the pinned key behind it (``kid``: the key that signed
    it, or that certified the short-lived key that did) and that short-lived key's certificate, if any."""

    claim: ReleaseClaim
    kid: str
    certificate: KeyCertificate | None = None


def _public_key(kid: str, jwk: Mapping[str, Any], what: str = "pinned key") -> Any:
    """The key ``kid`` names, as a ``cryptography`` EC public key; WrongKey if it is not that key."""
    from cryptography.hazmat.primitives.asymmetric import ec

    if jwk.get("kty") != "EC" or jwk.get("crv") != "P-256" or jwk.get("use", "sig") != "sig":
        raise WrongKey(f"{what} {kid} is not an EC P-256 signing key (kty {jwk.get('kty')}, crv {jwk.get('crv')})")
    x, y = jwk.get("x"), jwk.get("y")
    if not isinstance(x, str) or not isinstance(y, str):
        raise WrongKey(f"{what} {kid} has no x and y")
    named = attestation.thumbprint(x, y)
    if named != kid:
        raise WrongKey(f"{what} {kid} is another key: its RFC 7638 thumbprint is {named}; the key set is wrong")
    try:
        x_bytes, y_bytes = attestation.b64url_decode(x), attestation.b64url_decode(y)
        if len(x_bytes) != attestation.P256_COORDINATE_BYTES or len(y_bytes) != attestation.P256_COORDINATE_BYTES:
            raise ValueError("coordinates are not 32 bytes")
        numbers = ec.EllipticCurvePublicNumbers(
            int.from_bytes(x_bytes, "big"), int.from_bytes(y_bytes, "big"), ec.SECP256R1()
        )
        return numbers.public_key()
    except ValueError as exc:
        raise WrongKey(f"{what} {kid} is not a point of P-256: {exc}") from exc


def _signature_holds(public_key: Any, signature: bytes, message: bytes) -> bool | None:
    """Whether a DER ECDSA P-256 / SHA-256 signature verifies over ``message`` (None: it is not DER at all)."""
    from cryptography.exceptions import InvalidSignature
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature

    try:
        decode_dss_signature(signature)
    except ValueError:
        return None
    try:
        public_key.verify(signature, message, ec.ECDSA(hashes.SHA256()))
    except InvalidSignature:
        return False
    return True


def _vouching_kid(signature: Signature, keys: KeySet) -> str | None:
    """The pinned key behind a signature: its own keyid, or (a short-lived key) the one that signed its certificate."""
    if signature.certificate is None:
        return signature.keyid if signature.keyid in keys.keys else None
    return next((s.keyid for s in signature.certificate.signatures if s.keyid in keys.keys), None)


def _certified_key(signature: Signature, certifier: str, keys: KeySet) -> tuple[Any, KeyCertificate]:
    """The short-lived key that made ``signature``, once its certificate verifies under pinned key ``certifier``."""
    certificate_envelope: Envelope = signature.certificate  # type: ignore[assignment]
    kms_signature = next(s for s in certificate_envelope.signatures if s.keyid == certifier)
    certifying_key = _public_key(certifier, keys.keys[certifier])
    if not _signature_holds(certifying_key, kms_signature.sig, certificate_envelope.signed_bytes()):
        raise WrongKey(
            f"the certificate of signing key {signature.keyid} does not verify under pinned key {certifier}: it is "
            "forged or altered, so no pinned key vouches for the key that signed"
        )
    try:
        certificate = attestation.parse_certificate(certificate_envelope.payload)
    except EnvelopeDamaged as damaged:
        raise EnvelopeTampered(f"the signed key certificate is not one: {damaged}") from damaged
    if certificate.certified_by != certifier:
        raise WrongKey(f"the certificate of {signature.keyid} names {certificate.certified_by}, not {certifier}")
    if certificate.kid != signature.keyid:
        raise WrongKey(
            f"the envelope names signing key {signature.keyid}, but its certificate certifies key {certificate.kid}"
        )
    jwk = {"kty": "EC", "crv": "P-256", "x": certificate.x, "y": certificate.y}
    return _public_key(certificate.kid, jwk, "certified key"), certificate


def verify_envelope(
    raw: bytes, keys: KeySet, *, package: str | None = None, version: str | None = None, tenant: str | None = None
) -> VerifiedRelease:
    """Check the envelope in ``raw`` against ``keys`` (and, when given, that it states ``package``@``version`` of
    ``tenant``). Returns what it states; raises one of the refusals above."""
    try:
        envelope = attestation.parse_envelope(raw)
    except EnvelopeDamaged as damaged:
        raise EnvelopeTampered(f"the envelope is damaged: {damaged}") from damaged
    vouched = [(s, kid) for s in envelope.signatures if (kid := _vouching_kid(s, keys)) is not None]
    if not vouched:
        named = ", ".join(
            s.keyid if s.certificate is None else ", ".join(c.keyid for c in s.certificate.signatures)
            for s in envelope.signatures
        )
        raise UnknownKeyId(
            f"the envelope is signed by key {named}, which the pinned key set does not hold "
            f"(pinned: {', '.join(keys.kids()) or 'none'}); if the service rotated its key, pin its keys again"
        )
    signature, kid = vouched[0]
    certificate: KeyCertificate | None = None
    if signature.certificate is None:
        public_key = _public_key(kid, keys.keys[kid])
    else:
        public_key, certificate = _certified_key(signature, kid, keys)
    holds = _signature_holds(public_key, signature.sig, envelope.signed_bytes())
    if holds is None:
        raise EnvelopeTampered("the envelope's signature is not an ASN.1 DER ECDSA signature")
    if not holds:
        raise EnvelopeTampered(
            f"the signature does not verify over the envelope's payload with pinned key {signature.keyid}: the "
            "envelope was altered after signing, or signed with another key under this key's id"
            if certificate is None
            else f"the signature does not verify over the envelope's payload with signing key {signature.keyid} "
            f"(certified by pinned key {kid}): the envelope was altered after signing"
        )
    try:
        claim = attestation.parse_claim(envelope.payload)
    except EnvelopeDamaged as damaged:
        raise EnvelopeTampered(f"the signed payload is not a release statement: {damaged}") from damaged
    if certificate is not None:
        _check_window(claim, certificate)
    expected = {"package": package, "version": version, "tenant": tenant}
    for name, wanted in expected.items():
        stated = getattr(claim, name)
        if wanted is not None and stated != wanted:
            raise SubjectMismatch(f"the envelope states {name} {stated!r}, not {wanted!r}")
    return VerifiedRelease(claim=claim, kid=kid, certificate=certificate)


def _check_window(claim: ReleaseClaim, certificate: KeyCertificate) -> None:
    """A short-lived key signs only inside its certificate's window: a statement it signed outside is refused."""
    try:
        published = attestation.epoch_of_statement_time(claim.published_at)
    except ValueError as bad:
        raise EnvelopeTampered(f"the statement's publishedAt {claim.published_at!r} is not an RFC 3339 time") from bad
    if not certificate.covers(published):
        raise WrongKey(
            f"signing key {certificate.kid} may sign from {attestation.statement_time(certificate.not_before)} to "
            f"{attestation.statement_time(certificate.not_after)}; the statement says it was published at "
            f"{claim.published_at}, outside its certificate's window"
        )


def check_subjects(
    release: VerifiedRelease, *, archive_sha256: str | None = None, manifest_sha256: str | None = None
) -> None:
    """The bytes a runtime holds are the ones the statement names (each digest that is given)."""
    for name, stated, held in (
        ("archive", release.claim.archive_sha256, archive_sha256),
        ("manifest", release.claim.manifest_sha256, manifest_sha256),
    ):
        if held is not None and held != stated:
            raise SubjectMismatch(f"the {name}'s sha256 is {held}; the signed statement names {stated}")


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as source:
        while chunk := source.read(1024 * 1024):
            digest.update(chunk)
    return digest.hexdigest()
