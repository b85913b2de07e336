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
