"""Release attestations: the in-toto Statement a release is signed over, DSSE's envelope around it, and the public
keys that verify it as JWKs. Pure functions on bytes and dicts (no AWS, no cryptography library): the signer
(``publishing.signing``, through KMS) and the offline verifier (``packyard_cli.attestations``) share them, so both
sides encode the signed bytes with one function.

* DSSE v1 (https://github.com/secure-systems-lab/dsse, protocol.md and envelope.md): the signature is over
  ``PAE(payloadType, payload) = "DSSEv1" SP LEN(type) SP type SP LEN(body) SP body`` (LEN: ASCII decimal byte
  length, no leading zeros); the envelope is ``{"payload": b64(body), "payloadType": type, "signatures":
  [{"keyid": kid, "sig": b64(sig)}]}``; verifiers accept standard and URL-safe base64.
* in-toto Statement v1 (https://github.com/in-toto/attestation, spec/v1/statement.md): ``_type``
  ``https://in-toto.io/Statement/v1``, ``subject`` (name + digest), ``predicateType`` (a URI), ``predicate``;
  payloadType ``application/vnd.in-toto+json``.
* The signature is ECDSA P-256 over SHA-256 of the PAE bytes, ASN.1 DER encoded (what KMS's Sign returns for
  ``ECDSA_SHA_256``); the key id is the key's RFC 7638 JWK thumbprint, so a pinned key names itself.
* A release is signed by a short-lived key of the publish process, which KMS certified (docs/decisions.md, "A
  short-lived signing key"): its signature carries, as a DSSE signature extension (envelope.proto ``Extension``:
  ``kind`` + ``ext``), a **key certificate**: a DSSE envelope of its own (payloadType :data:`CERTIFICATE_TYPE`)
  whose payload names the short-lived key (JWK), its validity window and the KMS key that certifies it, signed by
  that KMS key. Releases signed before carry no certificate: their signature is KMS's own, as it always was.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

PAYLOAD_TYPE = "application/vnd.in-toto+json"
STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
PREDICATE_TYPE = "https://packyard.dev/attestations/release/v1"
"""Our predicate (README, "Signed releases", documents its fields)."""
VERIFIER = "packyard-archive-verifier/1"
"""The verifier whose verdict the statement records: the archive verifier's rules (one reading per archive,
bounded streaming pass) at this version; bumped when what it accepts changes."""

CERTIFICATE_TYPE = "application/vnd.packyard.signing-key+json"
"""payloadType of a key certificate: never a release statement's, so no signature over one can pass for the other
(PAE binds the type)."""
CERTIFICATE_STATEMENT_TYPE = "https://packyard.dev/attestations/signing-key/v1"
CERTIFICATE_KIND = "application/vnd.packyard.signing-key-certificate;version=1"
"""The DSSE signature extension's ``kind`` under which a signature carries its key's certificate."""

ARCHIVE_SUBJECT = "archive.tar.gz"
MANIFEST_SUBJECT = "manifest.json"
# KMS signs a RAW message of at most 4096 bytes (API_Sign: Message, Length Constraints)
MAX_SIGNED_BYTES = 4096
# an envelope is a few KB; anything much larger is not one of ours (read bounds, refusal of a stuffed object)
MAX_ENVELOPE_BYTES = 64 * 1024

# RFC 5480 SubjectPublicKeyInfo of an id-ecPublicKey on secp256r1 (prime256v1), uncompressed point: this fixed
# 27-byte prefix, then X and Y (32 bytes each). KMS's GetPublicKey answers an ECC_NIST_P256 key in exactly this form.
P256_SPKI_PREFIX = bytes.fromhex("3059301306072a8648ce3d020106082a8648ce3d030107034200" + "04")
P256_COORDINATE_BYTES = 32


TIME_FORMAT = "%Y-%m-%dT%H:%M:%SZ"
"""How the predicate writes its time: RFC 3339 UTC, whole seconds (as the HTTP API writes times)."""


def statement_time(epoch: int) -> str:
    return datetime.fromtimestamp(epoch, UTC).strftime(TIME_FORMAT)


def epoch_of_statement_time(text: str) -> int:
    return int(datetime.strptime(text, TIME_FORMAT).replace(tzinfo=UTC).timestamp())


class EnvelopeDamaged(ValueError):
    """Bytes that are not a well-formed envelope of a release statement (truncated, not JSON, a field missing or of
    the wrong type, base64 that does not decode, another payloadType, a payload that is not our statement)."""


def pae(payload_type: str, body: bytes) -> bytes:
    """DSSE's Pre-Authentication Encoding: the exact bytes a signature covers."""
    kind = payload_type.encode("utf-8")
    return b"DSSEv1 %d %b %d %b" % (len(kind), kind, len(body), body)


def canonical_json(value: Any) -> bytes:
    """Compact JSON, keys sorted, UTF-8: one byte sequence per statement."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


@dataclass(frozen=True)
class ReleaseClaim:
    """What a release's statement says: the two subjects and our predicate's fields."""

    tenant: str
    package: str
    version: str
    archive_sha256: str
    manifest_sha256: str
    upload_id: str
    published_by: str | None
    published_at: str
    """RFC 3339 UTC, seconds (``2026-12-02T01:02:03Z``)."""
    verifier: str = VERIFIER


def statement(claim: ReleaseClaim) -> dict[str, Any]:
    """The in-toto Statement v1 of a release."""
    return {
        "_type": STATEMENT_TYPE,
        "subject": [
            {"name": ARCHIVE_SUBJECT, "digest": {"sha256": claim.archive_sha256}},
            {"name": MANIFEST_SUBJECT, "digest": {"sha256": claim.manifest_sha256}},
        ],
        "predicateType": PREDICATE_TYPE,
        "predicate": {
            "tenant": claim.tenant,
            "package": claim.package,
            "version": claim.version,
            "uploadId": claim.upload_id,
            "publishedBy": claim.published_by,
            "publishedAt": claim.published_at,
            "verifier": claim.verifier,
        },
    }


def statement_bytes(claim: ReleaseClaim) -> bytes:
    return canonical_json(statement(claim))


def envelope(
    payload: bytes,
    keyid: str,
    signature: bytes,
    *,
    certificate: dict[str, Any] | None = None,
    payload_type: str = PAYLOAD_TYPE,
) -> dict[str, Any]:
    """A DSSE envelope with one signature; ``certificate`` (a key certificate's envelope) rides on the signature as
    its extension: the short-lived key ``keyid`` names is the one the certificate certifies."""
    entry: dict[str, Any] = {"keyid": keyid, "sig": base64.b64encode(signature).decode("ascii")}
    if certificate is not None:
        entry["extension"] = {"kind": CERTIFICATE_KIND, "ext": {"certificate": certificate}}
    return {"payload": base64.b64encode(payload).decode("ascii"), "payloadType": payload_type, "signatures": [entry]}


def envelope_bytes(value: dict[str, Any]) -> bytes:
    return canonical_json(value)


@dataclass(frozen=True)
class Signature:
    keyid: str
    sig: bytes
    certificate: Envelope | None = None
    """The key certificate the signature carries (its extension): None for a signature by a pinned key itself."""


@dataclass(frozen=True)
class Envelope:
    payload_type: str
    payload: bytes
    signatures: tuple[Signature, ...]

    def signed_bytes(self) -> bytes:
        return pae(self.payload_type, self.payload)


def _b64(text: Any, what: str) -> bytes:
    """Standard or URL-safe base64, padded or not (DSSE: verifiers MUST accept either alphabet)."""
    if not isinstance(text, str) or not text:
        raise EnvelopeDamaged(f"{what} is not a base64 string")
    standard = text.replace("-", "+").replace("_", "/")
    try:
        return base64.b64decode(standard + "=" * (-len(standard) % 4), validate=True)
    except (binascii.Error, ValueError) as exc:
        raise EnvelopeDamaged(f"{what} is not valid base64") from exc


def parse_envelope(raw: bytes) -> Envelope:
    """The envelope in ``raw``, checked for form only (no signature check: that needs a key)."""
    if len(raw) > MAX_ENVELOPE_BYTES:
        raise EnvelopeDamaged(f"the envelope is {len(raw)} bytes, more than any release envelope")
    try:
        document = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise EnvelopeDamaged(f"the envelope is not JSON (truncated or garbled): {exc.__class__.__name__}") from exc
    return _envelope_of(document, PAYLOAD_TYPE, "the envelope")


def _envelope_of(document: Any, payload_type: str, what: str) -> Envelope:
    if not isinstance(document, dict):
        raise EnvelopeDamaged(f"{what} is not a JSON object")
    stated_type = document.get("payloadType")
    if stated_type != payload_type:
        raise EnvelopeDamaged(f"{what}'s payloadType is {stated_type!r}, not {payload_type!r}")
    payload = _b64(document.get("payload"), f"{what}'s payload")
    entries = document.get("signatures")
    if not isinstance(entries, list) or not entries:
        raise EnvelopeDamaged(f"{what} carries no signatures")
    signatures = []
    for index, entry in enumerate(entries):
        if not isinstance(entry, dict) or not isinstance(entry.get("keyid"), str) or not entry["keyid"]:
            raise EnvelopeDamaged(f"{what}'s signature {index} names no keyid")
        signatures.append(
            Signature(
                keyid=entry["keyid"],
                sig=_b64(entry.get("sig"), f"{what}'s signature {index}"),
                certificate=_certificate_of(entry.get("extension"), payload_type, what),
            )
        )
    return Envelope(payload_type=stated_type, payload=payload, signatures=tuple(signatures))


def _certificate_of(extension: Any, payload_type: str, what: str) -> Envelope | None:
    """The key certificate a signature's extension carries; another kind of extension is ignored (DSSE: consumers
    ignore what they do not recognise); a certificate's own signature carries none (KMS signed it)."""
    if extension is None:
        return None
    if not isinstance(extension, dict) or not isinstance(extension.get("kind"), str):
        raise EnvelopeDamaged(f"{what} has a signature extension without a kind")
    if extension["kind"] != CERTIFICATE_KIND:
        return None
    if payload_type == CERTIFICATE_TYPE:
        raise EnvelopeDamaged("a key certificate's signature carries a certificate of its own")
    ext = extension.get("ext")
    if not isinstance(ext, dict) or "certificate" not in ext:
        raise EnvelopeDamaged(f"{what}'s signature extension holds no certificate")
    return _envelope_of(ext["certificate"], CERTIFICATE_TYPE, "the key certificate")


def parse_claim(payload: bytes) -> ReleaseClaim:
    """The release claim of a statement payload; anything else (another statement or predicate type, a field
    missing or of the wrong type, subjects other than the archive and the manifest) is refused."""
    try:
        document = json.loads(payload)
    except (ValueError, UnicodeDecodeError) as exc:
        raise EnvelopeDamaged("the payload is not JSON") from exc
    if not isinstance(document, dict) or document.get("_type") != STATEMENT_TYPE:
        raise EnvelopeDamaged(f"the payload is not an in-toto Statement v1 ({STATEMENT_TYPE})")
    if document.get("predicateType") != PREDICATE_TYPE:
        raise EnvelopeDamaged(f"predicateType is {document.get('predicateType')!r}, not {PREDICATE_TYPE!r}")
    digests: dict[str, str] = {}
    for subject in document.get("subject") or []:
        name = subject.get("name") if isinstance(subject, dict) else None
        digest = subject.get("digest") if isinstance(subject, dict) else None
        sha256 = digest.get("sha256") if isinstance(digest, dict) else None
        if not isinstance(name, str) or not isinstance(sha256, str) or name in digests:
            raise EnvelopeDamaged("a subject has no name or sha256 digest, or is named twice")
        digests[name] = sha256
    if set(digests) != {ARCHIVE_SUBJECT, MANIFEST_SUBJECT}:
        raise EnvelopeDamaged(f"the subjects are {sorted(digests)}, not the archive and the manifest")
    predicate = document.get("predicate")
    if not isinstance(predicate, dict):
        raise EnvelopeDamaged("the statement has no predicate")
    text_fields = ("tenant", "package", "version", "uploadId", "publishedAt", "verifier")
    if any(not isinstance(predicate.get(name), str) for name in text_fields):
        raise EnvelopeDamaged(f"the predicate lacks one of {', '.join(text_fields)}")
    published_by = predicate.get("publishedBy")
    if published_by is not None and not isinstance(published_by, str):
        raise EnvelopeDamaged("the predicate's publishedBy is not a string")
    return ReleaseClaim(
        tenant=predicate["tenant"],
        package=predicate["package"],
        version=predicate["version"],
        archive_sha256=digests[ARCHIVE_SUBJECT],
        manifest_sha256=digests[MANIFEST_SUBJECT],
        upload_id=predicate["uploadId"],
        published_by=published_by,
        published_at=predicate["publishedAt"],
        verifier=predicate["verifier"],
    )


# ---- key certificates: a short-lived key, certified by the KMS key --------------------------------------------------


@dataclass(frozen=True)
class KeyCertificate:
    """What a key certificate states: the short-lived key (its JWK members and kid), the window in which it may
    sign (epoch seconds, both ends included), the KMS key that certifies it, and the stack (the key's alias)."""

    kid: str
    x: str
    y: str
    not_before: int
    not_after: int
    certified_by: str
    """kid (RFC 7638 thumbprint) of the KMS key, as ``GET /v1/signing-keys`` lists it."""
    issuer: str
    """The stack whose key certified it (the name of its signing key's alias)."""

    def covers(self, epoch: int) -> bool:
        return self.not_before <= epoch <= self.not_after


def certificate_bytes(certificate: KeyCertificate) -> bytes:
    """The certificate's payload (canonical JSON): what KMS signs, once per short-lived key."""
    return canonical_json(
        {
            "_type": CERTIFICATE_STATEMENT_TYPE,
            "key": {"kty": "EC", "crv": "P-256", "x": certificate.x, "y": certificate.y, "kid": certificate.kid},
            "notBefore": statement_time(certificate.not_before),
            "notAfter": statement_time(certificate.not_after),
            "certifiedBy": certificate.certified_by,
            "issuer": certificate.issuer,
        }
    )


def parse_certificate(payload: bytes) -> KeyCertificate:
    """The key certificate of a certificate payload; anything else is refused (EnvelopeDamaged)."""
    try:
        document = json.loads(payload)
    except (ValueError, UnicodeDecodeError) as exc:
        raise EnvelopeDamaged("the key certificate's payload is not JSON") from exc
    if not isinstance(document, dict) or document.get("_type") != CERTIFICATE_STATEMENT_TYPE:
        raise EnvelopeDamaged(f"the key certificate is not a {CERTIFICATE_STATEMENT_TYPE} statement")
    key = document.get("key")
    if not isinstance(key, dict) or (key.get("kty"), key.get("crv")) != ("EC", "P-256"):
        raise EnvelopeDamaged("the key certificate does not name an EC P-256 key")
    texts = (key.get("x"), key.get("y"), key.get("kid"), document.get("certifiedBy"))
    if not all(isinstance(t, str) and t for t in texts) or not isinstance(document.get("issuer"), str):
        raise EnvelopeDamaged("the key certificate lacks the key's x, y or kid, its certifier or its issuer")
    try:
        not_before = epoch_of_statement_time(str(document.get("notBefore")))
        not_after = epoch_of_statement_time(str(document.get("notAfter")))
    except ValueError as exc:
        raise EnvelopeDamaged("the key certificate's window is not two RFC 3339 times") from exc
    return KeyCertificate(
        kid=key["kid"],
        x=key["x"],
        y=key["y"],
        not_before=not_before,
        not_after=not_after,
        certified_by=document["certifiedBy"],
        issuer=document["issuer"],
    )


# ---- public keys as JWKs (RFC 7517, RFC 7518 section 6.2, RFC 7638) -------------------------------------------------


def b64url(data: bytes) -> str:
    """base64url without padding (RFC 7515 section 2), as JWK members are written."""
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def b64url_decode(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def p256_point(spki_der: bytes) -> tuple[bytes, bytes]:
    """X and Y of a P-256 public key given as DER SubjectPublicKeyInfo (uncompressed point)."""
    if len(spki_der) != len(P256_SPKI_PREFIX) + 2 * P256_COORDINATE_BYTES or not spki_der.startswith(P256_SPKI_PREFIX):
        raise ValueError("not a DER SubjectPublicKeyInfo of an uncompressed P-256 key")
    point = spki_der[len(P256_SPKI_PREFIX) :]
    return point[:P256_COORDINATE_BYTES], point[P256_COORDINATE_BYTES:]


def thumbprint(x: str, y: str) -> str:
    """RFC 7638 JWK thumbprint of an EC P-256 key: base64url(sha256 of the required members, sorted, compact)."""
    required = json.dumps({"crv": "P-256", "kty": "EC", "x": x, "y": y}, sort_keys=True, separators=(",", ":"))
    return b64url(hashlib.sha256(required.encode("ascii")).digest())


def public_jwk(spki_der: bytes) -> dict[str, str]:
    """The JWK (RFC 7517/7518) of a P-256 signing key, its kid the RFC 7638 thumbprint."""
    x_bytes, y_bytes = p256_point(spki_der)
    x, y = b64url(x_bytes), b64url(y_bytes)
    return {"kty": "EC", "crv": "P-256", "x": x, "y": y, "kid": thumbprint(x, y), "alg": "ES256", "use": "sig"}
