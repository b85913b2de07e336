"""Release attestations without AWS: DSSE's PAE and envelope against the DSSE spec's own test vector, the JWK of a
P-256 key against ``cryptography``'s reading of it, and the offline verifier's four refusals (each its own code and
exit code) on envelopes signed here with local keys."""

from __future__ import annotations

import base64
import json
from dataclasses import replace

import pytest
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.utils import encode_dss_signature

from packyard.publishing import attestation
from packyard.publishing.attestation import EnvelopeDamaged, ReleaseClaim
from packyard_cli import attestations
from packyard_cli.attestations import EnvelopeTampered, SubjectMismatch, UnknownKeyId, WrongKey

# secure-systems-lab/dsse protocol.md, "Test Vectors": ECDSA P-256 / SHA-256, signature as raw r || s
SPEC_X = 46950820868899156662930047687818585632848591499744589407958293238635476079160
SPEC_Y = 5640078356564379163099075877009565129882514886557779369047442380624545832820
SPEC_SIG = "A3JqsQGtVsJ2O2xqrI5IcnXip5GToJ3F+FnZ+O88SjtR6rDAajabZKciJTfUiHqJPcIAriEGAHTVeCUjW2JIZA=="

CLAIM = ReleaseClaim(
    tenant="t-acme",
    package="hello",
    version="1.0.0",
    archive_sha256="a" * 64,
    manifest_sha256="b" * 64,
    upload_id="u1",
    published_by="alice",
    published_at="2026-12-02T01:02:03Z",
)


def test_pae_is_the_dsse_spec_test_vector() -> None:
    assert attestation.pae("http://example.com/HelloWorld", b"hello world") == (
        b"DSSEv1 29 http://example.com/HelloWorld 11 hello world"
    )


def test_the_spec_signature_verifies_over_our_pae_with_the_spec_key() -> None:
    """A second implementation as the oracle: the DSSE reference signed these PAE bytes; our PAE must be them."""
    key = ec.EllipticCurvePublicNumbers(SPEC_X, SPEC_Y, ec.SECP256R1()).public_key()
    raw = base64.b64decode(SPEC_SIG)
    der = encode_dss_signature(int.from_bytes(raw[:32], "big"), int.from_bytes(raw[32:], "big"))
    key.verify(der, attestation.pae("http://example.com/HelloWorld", b"hello world"), ec.ECDSA(hashes.SHA256()))


def test_pae_counts_bytes_not_characters() -> None:
    assert attestation.pae("t", "é".encode()) == b"DSSEv1 1 t 2 \xc3\xa9"


def test_public_jwk_reads_the_point_cryptography_wrote() -> None:
    private = ec.generate_private_key(ec.SECP256R1())
    spki = private.public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    jwk = attestation.public_jwk(spki)
    numbers = private.public_key().public_numbers()
    assert int.from_bytes(attestation.b64url_decode(jwk["x"]), "big") == numbers.x
    assert int.from_bytes(attestation.b64url_decode(jwk["y"]), "big") == numbers.y
    assert jwk["kid"] == attestation.thumbprint(jwk["x"], jwk["y"])
    assert (jwk["kty"], jwk["crv"], jwk["alg"], jwk["use"]) == ("EC", "P-256", "ES256", "sig")


def test_public_jwk_refuses_another_curve() -> None:
    spki = (
        ec.generate_private_key(ec.SECP384R1())
        .public_key()
        .public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    )
    with pytest.raises(ValueError, match="P-256"):
        attestation.public_jwk(spki)


def test_thumbprint_is_rfc7638_over_the_required_members_in_order() -> None:
    # RFC 7638 section 3.2: {"crv","kty","x","y"} for EC, lexicographic, no whitespace, then SHA-256, base64url
    import hashlib

    expected = attestation.b64url(hashlib.sha256(b'{"crv":"P-256","kty":"EC","x":"AAA","y":"BBB"}').digest())
    assert attestation.thumbprint("AAA", "BBB") == expected


def test_the_statement_is_an_in_toto_statement_v1_with_both_subjects() -> None:
    statement = json.loads(attestation.statement_bytes(CLAIM))
    assert statement["_type"] == "https://in-toto.io/Statement/v1"
    assert statement["subject"] == [
        {"name": "archive.tar.gz", "digest": {"sha256": "a" * 64}},
        {"name": "manifest.json", "digest": {"sha256": "b" * 64}},
    ]
    assert statement["predicateType"] == attestation.PREDICATE_TYPE
    assert statement["predicate"] == {
        "tenant": "t-acme",
        "package": "hello",
        "version": "1.0.0",
        "uploadId": "u1",
        "publishedBy": "alice",
        "publishedAt": "2026-12-02T01:02:03Z",
        "verifier": attestation.VERIFIER,
    }
    assert attestation.parse_claim(attestation.statement_bytes(CLAIM)) == CLAIM


def test_statement_time_round_trips() -> None:
    assert attestation.epoch_of_statement_time(attestation.statement_time(1796172681)) == 1796172681


# ---- the offline verifier -----------------------------------------------------------------------------------------


class Signer:
    """A P-256 key of our own, signing as KMS does (DER ECDSA over SHA-256 of the PAE bytes)."""

    def __init__(self) -> None:
        self.private = ec.generate_private_key(ec.SECP256R1())
        spki = self.private.public_key().public_bytes(
            serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
        )
        self.jwk = attestation.public_jwk(spki)
        self.kid = self.jwk["kid"]

    def envelope(self, claim: ReleaseClaim = CLAIM, *, kid: str | None = None) -> bytes:
        payload = attestation.statement_bytes(claim)
        signature = self.private.sign(attestation.pae(attestation.PAYLOAD_TYPE, payload), ec.ECDSA(hashes.SHA256()))
        return attestation.envelope_bytes(attestation.envelope(payload, kid or self.kid, signature))


def key_set(*jwks: dict[str, str]) -> attestations.KeySet:
    return attestations.load_key_set(json.dumps({"keys": list(jwks)}).encode())


@pytest.fixture
def signer() -> Signer:
    return Signer()


def test_a_signed_envelope_verifies_and_states_the_release(signer: Signer) -> None:
    verified = attestations.verify_envelope(signer.envelope(), key_set(signer.jwk), package="hello", version="1.0.0")
    attestations.check_subjects(verified, archive_sha256="a" * 64, manifest_sha256="b" * 64)
    assert verified.claim == CLAIM
    assert verified.kid == signer.kid


def test_url_safe_unpadded_base64_is_accepted_as_dsse_requires(signer: Signer) -> None:
    document = json.loads(signer.envelope())
    document["payload"] = base64.urlsafe_b64encode(base64.b64decode(document["payload"])).decode().rstrip("=")
    verified = attestations.verify_envelope(json.dumps(document).encode(), key_set(signer.jwk))
    assert verified.claim == CLAIM


@pytest.mark.parametrize("cut", [1, 40, 200])
def test_a_truncated_envelope_is_refused_as_tampered(signer: Signer, cut: int) -> None:
    raw = signer.envelope()
    with pytest.raises(EnvelopeTampered, match="damaged") as refused:
        attestations.verify_envelope(raw[:-cut], key_set(signer.jwk))
    assert (refused.value.code, refused.value.exit_code) == ("tampered_envelope", 10)


def test_a_payload_changed_after_signing_is_refused_as_tampered(signer: Signer) -> None:
    document = json.loads(signer.envelope())
    forged = attestation.statement_bytes(replace(CLAIM, version="9.9.9"))
    document["payload"] = base64.b64encode(forged).decode()
    with pytest.raises(EnvelopeTampered, match="does not verify"):
        attestations.verify_envelope(json.dumps(document).encode(), key_set(signer.jwk))


def test_a_signature_over_other_bytes_is_refused_as_tampered(signer: Signer) -> None:
    other = json.loads(signer.envelope(replace(CLAIM, archive_sha256="c" * 64)))
    document = json.loads(signer.envelope())
    document["signatures"][0]["sig"] = other["signatures"][0]["sig"]
    with pytest.raises(EnvelopeTampered, match="does not verify"):
        attestations.verify_envelope(json.dumps(document).encode(), key_set(signer.jwk))


def test_a_forger_naming_the_pinned_key_is_refused(signer: Signer) -> None:
    forger = Signer()
    with pytest.raises(EnvelopeTampered, match="another key under this key's id"):
        attestations.verify_envelope(forger.envelope(kid=signer.kid), key_set(signer.jwk))


def test_a_key_set_mapping_the_kid_to_another_key_is_refused_as_wrong_key(signer: Signer) -> None:
    other = Signer()
    wrong = {**other.jwk, "kid": signer.kid}  # the kid of the signing key, the point of another key
    with pytest.raises(WrongKey, match="another key") as refused:
        attestations.verify_envelope(signer.envelope(), key_set(wrong))
    assert (refused.value.code, refused.value.exit_code) == ("wrong_key", 11)


def test_an_rsa_or_other_curve_key_under_the_kid_is_refused_as_wrong_key(signer: Signer) -> None:
    with pytest.raises(WrongKey, match="not an EC P-256"):
        attestations.verify_envelope(signer.envelope(), key_set({**signer.jwk, "crv": "P-384"}))


def test_an_unknown_key_id_is_refused(signer: Signer) -> None:
    pinned = Signer()
    with pytest.raises(UnknownKeyId, match="does not hold") as refused:
        attestations.verify_envelope(signer.envelope(), key_set(pinned.jwk))
    assert (refused.value.code, refused.value.exit_code) == ("unknown_key_id", 12)
    assert signer.kid in refused.value.reason


@pytest.mark.parametrize(
    ("asked", "held"),
    [
        ({"package": "other"}, {}),
        ({"version": "1.0.1"}, {}),
        ({"tenant": "t-globex"}, {}),
        ({}, {"archive_sha256": "f" * 64}),
        ({}, {"manifest_sha256": "f" * 64}),
    ],
)
def test_a_subject_mismatch_is_refused(signer: Signer, asked: dict[str, str], held: dict[str, str]) -> None:
    with pytest.raises(SubjectMismatch) as refused:
        verified = attestations.verify_envelope(signer.envelope(), key_set(signer.jwk), **asked)
        attestations.check_subjects(verified, **held)
    assert (refused.value.code, refused.value.exit_code) == ("subject_mismatch", 13)


def test_the_four_refusals_have_four_exit_codes() -> None:
    codes = {cls.exit_code for cls in (EnvelopeTampered, WrongKey, UnknownKeyId, SubjectMismatch)}
    assert len(codes) == 4 and not codes & set(range(8))  # none of the CLI's general exit codes


@pytest.mark.parametrize(
    "mutate",
    [
        lambda d: d.update(payloadType="application/json"),
        lambda d: d.update(signatures=[]),
        lambda d: d["signatures"][0].pop("keyid"),
        lambda d: d["signatures"][0].update(sig="not base64!"),
        lambda d: d.update(payload=base64.b64encode(b'{"_type": "https://in-toto.io/Statement/v0.1"}').decode()),
    ],
)
def test_envelopes_of_the_wrong_form_are_damaged(signer: Signer, mutate) -> None:  # type: ignore[no-untyped-def]
    document = json.loads(signer.envelope())
    mutate(document)
    raw = json.dumps(document).encode()
    with pytest.raises(EnvelopeDamaged):
        attestation.parse_claim(attestation.parse_envelope(raw).payload)


# ---- releases signed by a short-lived key, certified by the pinned key ------------------------------------------

WINDOW_START = attestation.epoch_of_statement_time(CLAIM.published_at) - 60


class Certified:
    """A short-lived key (``signer``) whose certificate the pinned key (``authority``, as KMS) signed."""

    def __init__(self, authority: Signer, *, not_before: int = WINDOW_START, seconds: int = 3600) -> None:
        self.authority = authority
        self.signer = Signer()
        self.certificate = attestation.KeyCertificate(
            kid=self.signer.kid,
            x=self.signer.jwk["x"],
            y=self.signer.jwk["y"],
            not_before=not_before,
            not_after=not_before + seconds,
            certified_by=authority.kid,
            issuer="alias/packyard-release-signing",
        )

    def certificate_document(self, *, by: Signer | None = None, certificate=None) -> dict:  # type: ignore[no-untyped-def,type-arg]
        payload = attestation.certificate_bytes(certificate or self.certificate)
        key = by or self.authority
        sig = key.private.sign(attestation.pae(attestation.CERTIFICATE_TYPE, payload), ec.ECDSA(hashes.SHA256()))
        return attestation.envelope(payload, self.authority.kid, sig, payload_type=attestation.CERTIFICATE_TYPE)

    def envelope(self, claim: ReleaseClaim = CLAIM, *, document: dict | None = None) -> bytes:  # type: ignore[type-arg]
        payload = attestation.statement_bytes(claim)
        sig = self.signer.private.sign(attestation.pae(attestation.PAYLOAD_TYPE, payload), ec.ECDSA(hashes.SHA256()))
        certificate = document if document is not None else self.certificate_document()
        return attestation.envelope_bytes(attestation.envelope(payload, self.signer.kid, sig, certificate=certificate))


@pytest.fixture
def certified(signer: Signer) -> Certified:
    return Certified(signer)


def test_a_release_signed_by_a_certified_key_verifies_and_names_the_pinned_key(certified: Certified) -> None:
    verified = attestations.verify_envelope(
        certified.envelope(), key_set(certified.authority.jwk), package="hello", version="1.0.0", tenant="t-acme"
    )
    assert verified.claim == CLAIM
    assert verified.kid == certified.authority.kid  # the key GET /v1/signing-keys lists
    assert verified.certificate == certified.certificate
    document = json.loads(certified.envelope())
    assert document["signatures"][0]["keyid"] == certified.signer.kid
    assert document["signatures"][0]["extension"]["kind"] == attestation.CERTIFICATE_KIND


def test_the_certificate_round_trips() -> None:
    authority = Signer()
    certificate = Certified(authority).certificate
    assert attestation.parse_certificate(attestation.certificate_bytes(certificate)) == certificate
    assert certificate.covers(certificate.not_before) and certificate.covers(certificate.not_after)
    assert not certificate.covers(certificate.not_after + 1)


def test_a_forged_certificate_is_refused_as_wrong_key(certified: Certified) -> None:
    """Signed by another key under the pinned key's id: no pinned key vouches for the key that signed (exit 11)."""
    forged = certified.envelope(document=certified.certificate_document(by=Signer()))
    with pytest.raises(WrongKey, match="forged or altered") as refused:
        attestations.verify_envelope(forged, key_set(certified.authority.jwk))
    assert refused.value.exit_code == 11


def test_a_certificate_altered_after_signing_is_refused_as_wrong_key(certified: Certified) -> None:
    document = certified.certificate_document()
    longer = replace(certified.certificate, not_after=certified.certificate.not_after + 86400 * 365)
    document["payload"] = base64.b64encode(attestation.certificate_bytes(longer)).decode()
    with pytest.raises(WrongKey, match="forged or altered"):
        attestations.verify_envelope(certified.envelope(document=document), key_set(certified.authority.jwk))


@pytest.mark.parametrize("offset", [-61, 3600 - 60 + 1])
def test_a_release_outside_its_keys_window_is_refused_as_wrong_key(certified: Certified, offset: int) -> None:
    """publishedAt before notBefore or after notAfter: the key was not allowed to sign then (exit 11)."""
    when = attestation.statement_time(attestation.epoch_of_statement_time(CLAIM.published_at) + offset)
    with pytest.raises(WrongKey, match="outside its certificate's window") as refused:
        attestations.verify_envelope(
            certified.envelope(replace(CLAIM, published_at=when)), key_set(certified.authority.jwk)
        )
    assert refused.value.exit_code == 11


def test_a_certificate_by_an_unpinned_key_is_refused_as_unknown_key_id(certified: Certified) -> None:
    with pytest.raises(UnknownKeyId, match="does not hold") as refused:
        attestations.verify_envelope(certified.envelope(), key_set(Signer().jwk))
    assert certified.authority.kid in refused.value.reason
    assert refused.value.exit_code == 12


def test_a_short_lived_signature_without_its_certificate_is_an_unknown_key(certified: Certified) -> None:
    document = json.loads(certified.envelope())
    document["signatures"][0].pop("extension")
    with pytest.raises(UnknownKeyId):
        attestations.verify_envelope(json.dumps(document).encode(), key_set(certified.authority.jwk))


def test_a_payload_changed_after_a_certified_key_signed_is_refused_as_tampered(certified: Certified) -> None:
    document = json.loads(certified.envelope())
    document["payload"] = base64.b64encode(attestation.statement_bytes(replace(CLAIM, version="9.9.9"))).decode()
    with pytest.raises(EnvelopeTampered, match="altered after signing") as refused:
        attestations.verify_envelope(json.dumps(document).encode(), key_set(certified.authority.jwk))
    assert refused.value.exit_code == 10


def test_a_certificate_for_another_key_is_refused_as_wrong_key(certified: Certified) -> None:
    other = Certified(certified.authority)
    with pytest.raises(WrongKey, match="certifies key"):
        attestations.verify_envelope(
            certified.envelope(document=other.certificate_document()), key_set(certified.authority.jwk)
        )


def test_a_signed_certificate_cannot_pass_for_a_release_envelope(certified: Certified) -> None:
    """PAE binds the payloadType: what the pinned key signed as a certificate is no release statement."""
    raw = attestation.canonical_json(certified.certificate_document())
    with pytest.raises(EnvelopeTampered, match="payloadType"):
        attestations.verify_envelope(raw, key_set(certified.authority.jwk))
    document = json.loads(raw)
    document["payloadType"] = attestation.PAYLOAD_TYPE
    with pytest.raises(EnvelopeTampered, match="does not verify"):
        attestations.verify_envelope(json.dumps(document).encode(), key_set(certified.authority.jwk))


@pytest.mark.parametrize(
    ("mutate", "refusal"),
    [
        (lambda c: c.update(payload="not base64!"), EnvelopeTampered),
        (lambda c: c.update(payloadType="application/json"), EnvelopeTampered),
        (lambda c: c.update(signatures=[]), EnvelopeTampered),
        # a payload replaced under KMS's signature: the certificate no longer verifies (forged or altered)
        (lambda c: c.update(payload=base64.b64encode(b'{"_type": "other"}').decode()), WrongKey),
    ],
)
def test_a_damaged_certificate_is_refused(certified: Certified, mutate, refusal) -> None:  # type: ignore[no-untyped-def]
    document = json.loads(certified.envelope())
    mutate(document["signatures"][0]["extension"]["ext"]["certificate"])
    with pytest.raises(refusal):
        attestations.verify_envelope(json.dumps(document).encode(), key_set(certified.authority.jwk))


def test_an_unknown_extension_kind_is_ignored_as_dsse_requires(signer: Signer) -> None:
    document = json.loads(signer.envelope())
    document["signatures"][0]["extension"] = {"kind": "application/vnd.example", "ext": {"x": 1}}
    verified = attestations.verify_envelope(json.dumps(document).encode(), key_set(signer.jwk))
    assert verified.certificate is None
