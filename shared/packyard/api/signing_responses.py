"""API response models of release signing: a release's DSSE envelope (``GET …/versions/{v}/attestation``), the
reference to it the version route and ``resolved`` carry, and the public keys as a JWK Set (``GET /v1/signing-keys``,
RFC 7517 section 5; EC members RFC 7518 section 6.2).

Field names here are the formats' own (DSSE's ``payloadType`` and ``keyid``, JWK's ``kty``/``crv``), not camelCase
renderings of ours.
"""

from __future__ import annotations

import base64
from typing import Literal, Self

from pydantic import Field

from packyard.api.base import ApiModel

# Domain types
from packyard.publishing import attestation
from packyard.publishing.models import AttestationRef, SigningKey


def attestation_path(package: str, version: str) -> str:
    return f"/v1/packages/{package}/versions/{version}/attestation"


class AttestationLinkView(ApiModel):
    """Where a release's signed statement is, and what it is: fetch ``href`` and verify it offline."""

    href: str = Field(description="GET this for the DSSE envelope")
    key_id: str = Field(
        alias="keyId",
        description="the kid (RFC 7638 thumbprint), in GET /v1/signing-keys, of the key behind the signature: the one "
        "that certified the short-lived key that signed it (or, for older releases, signed it itself)",
    )

    @classmethod
    def of(cls, package: str, version: str, ref: AttestationRef) -> Self:
        return cls(href=attestation_path(package, version), key_id=ref.key_id)


class KeyCertificateSignatureView(ApiModel):
    keyid: str = Field(description="kid of the KMS key in GET /v1/signing-keys that certified the short-lived key")
    sig: str = Field(description="base64 of KMS's ASN.1 DER ECDSA P-256 / SHA-256 signature over the PAE bytes")


class KeyCertificateView(ApiModel):
    """A short-lived signing key's certificate: a DSSE envelope whose payload (canonical JSON, type
    ``https://packyard.dev/attestations/signing-key/v1``) names the key (JWK), its window (``notBefore``,
    ``notAfter``), the certifying key's kid (``certifiedBy``) and the stack (``issuer``), signed by that KMS key."""

    payload: str = Field(description="base64 of the certificate statement's bytes (canonical JSON)")
    payload_type: Literal["application/vnd.packyard.signing-key+json"] = Field(alias="payloadType")
    signatures: list[KeyCertificateSignatureView]


class KeyCertificateExtView(ApiModel):
    certificate: KeyCertificateView


class SignatureExtensionView(ApiModel):
    """A DSSE signature extension (envelope.proto ``Extension``): here, the signing key's certificate."""

    # fields in canonical (sorted) order, as in every view here: the body is the envelope's canonical bytes, whose
    # sha256 the release records (and Release Published carries)
    ext: KeyCertificateExtView
    kind: Literal["application/vnd.packyard.signing-key-certificate;version=1"]


class DsseSignatureView(ApiModel):
    extension: SignatureExtensionView | None = Field(
        default=None, description="the short-lived signing key's certificate (absent: signed by a listed key itself)"
    )
    keyid: str = Field(
        description="kid (RFC 7638 JWK thumbprint) of the key that signed: a short-lived key certified by the "
        "extension's certificate, or (releases signed before short-lived keys) a key in GET /v1/signing-keys"
    )
    sig: str = Field(description="base64 of the ASN.1 DER ECDSA P-256 / SHA-256 signature over the PAE bytes")


class DsseEnvelopeView(ApiModel):
    """A DSSE v1 envelope (https://github.com/secure-systems-lab/dsse/blob/master/envelope.md) whose payload is an
    in-toto Statement v1 with the predicate ``https://packyard.dev/attestations/release/v1``."""

    payload: str = Field(description="base64 of the statement's bytes (canonical JSON)")
    payload_type: Literal["application/vnd.in-toto+json"] = Field(alias="payloadType")
    signatures: list[DsseSignatureView]

    @classmethod
    def of(cls, envelope: attestation.Envelope) -> Self:
        return cls(
            payload=_b64(envelope.payload),
            payload_type=attestation.PAYLOAD_TYPE,
            signatures=[
                DsseSignatureView(keyid=s.keyid, sig=_b64(s.sig), extension=_extension(s.certificate))
                for s in envelope.signatures
            ],
        )


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _extension(certificate: attestation.Envelope | None) -> SignatureExtensionView | None:
    if certificate is None:
        return None
    view = KeyCertificateView(
        payload=_b64(certificate.payload),
        payload_type=attestation.CERTIFICATE_TYPE,
        signatures=[KeyCertificateSignatureView(keyid=s.keyid, sig=_b64(s.sig)) for s in certificate.signatures],
    )
    return SignatureExtensionView(kind=attestation.CERTIFICATE_KIND, ext=KeyCertificateExtView(certificate=view))


class JwkView(ApiModel):
    """One public signing key (RFC 7517 JWK, EC members of RFC 7518 section 6.2)."""

    kty: Literal["EC"]
    crv: Literal["P-256"]
    x: str = Field(description="base64url of the X coordinate (32 bytes)")
    y: str = Field(description="base64url of the Y coordinate (32 bytes)")
    kid: str = Field(description="the key's RFC 7638 thumbprint: what an envelope's keyid names")
    alg: Literal["ES256"] = Field(description="ECDSA P-256 with SHA-256 (DSSE signatures are DER-encoded)")
    use: Literal["sig"]

    @classmethod
    def of(cls, key: SigningKey) -> Self:
        return cls(kty="EC", crv="P-256", x=key.x, y=key.y, kid=key.kid, alg="ES256", use="sig")


class SigningKeySetView(ApiModel):
    """``GET /v1/signing-keys``: every key that signed releases (the current one and the rotated-out ones)."""

    keys: list[JwkView]

    @classmethod
    def of(cls, keys: list[SigningKey]) -> Self:
        return cls(keys=[JwkView.of(k) for k in keys])
