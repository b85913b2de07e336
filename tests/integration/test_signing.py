"""Signed releases through the real publish state machine on moto: the KMS key the template declares certifies the
publish process's short-lived key, which signs each release's statement (no KMS request per publish); the envelope
is recorded with the release and served, the keys are listed as a JWK Set, and the offline verifier
(packyard_cli.attestations) accepts what the service signed, before and after a key rotation, and releases signed
by KMS itself before short-lived keys still verify."""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json

import boto3
import pytest

from devstack import lambdas
from devstack.faults import InjectedCrash, crash_after
from packyard import clock
from packyard.api.times import epoch_of
from packyard.publishing import attestation
from packyard.publishing import signing as release_signing
from packyard.store import signing as signing_store
from packyard.store import workflows
from packyard_cli import attestations
from packyard_cli.build import build_from_files
from tests.support.callers import all_keys

MAX_CALLS = 40


def _published(acme, package: str, version: str, text: bytes):  # type: ignore[no-untyped-def]
    built = build_from_files({"SKILL.md": text, "src/main.py": b"print('hi')\n"})
    final = acme.publish(package, version, built)
    assert final["state"] == "published", final
    return built


def _key_set(acme) -> attestations.KeySet:  # type: ignore[no-untyped-def]
    answer = acme.get("/v1/signing-keys")
    assert answer.status == 200, answer.body
    return attestations.load_key_set(json.dumps(answer.body).encode())


def _envelope(acme, package: str, version: str) -> bytes:  # type: ignore[no-untyped-def]
    answer = acme.get(f"/v1/packages/{package}/versions/{version}/attestation")
    assert answer.status == 200, answer.body
    return json.dumps(answer.body).encode()


def test_a_published_release_carries_an_envelope_that_verifies_offline(acme, stack) -> None:
    # Given a release published through the state machine
    built = _published(acme, "hello", "1.0.0", b"# hello\n")

    # When a runtime reads it, its envelope and the keys
    release = acme.get("/v1/packages/hello/versions/1.0.0").body
    envelope = _envelope(acme, "hello", "1.0.0")
    keys = _key_set(acme)

    # Then the envelope verifies with the listed key and names exactly the verified bytes and the release
    verified = attestations.verify_envelope(envelope, keys, package="hello", version="1.0.0", tenant="t-acme")
    attestations.check_subjects(
        verified, archive_sha256=built.archive_sha256, manifest_sha256=release["manifestDigest"]
    )
    claim = verified.claim
    assert claim.upload_id == release["receipt"]["uploadId"]
    assert claim.published_by == release["publishedBy"] == "user-1"
    assert epoch_of(claim.published_at) == epoch_of(release["publishedAt"])
    assert claim.verifier.startswith("packyard-archive-verifier/")
    assert release["attestation"] == {"href": "/v1/packages/hello/versions/1.0.0/attestation", "keyId": verified.kid}
    assert [k["kid"] for k in acme.get("/v1/signing-keys").body["keys"]] == [verified.kid]
    document = json.loads(envelope)
    assert document["payloadType"] == "application/vnd.in-toto+json"


def test_the_key_set_is_the_kms_keys_public_part(acme, stack) -> None:
    _published(acme, "hello", "1.0.0", b"# hello\n")
    kms = boto3.client("kms", region_name=stack.region)
    der = kms.get_public_key(KeyId=stack.keys["ReleaseSigningKey"])["PublicKey"]
    from packyard.publishing import attestation

    expected = attestation.public_jwk(der)
    (listed,) = acme.get("/v1/signing-keys").body["keys"]
    assert listed == expected


def test_the_resolved_view_points_at_the_attestation(acme, stack) -> None:
    _published(acme, "hello", "1.0.0", b"# hello\n")
    admitted = acme.install("ws1", "hello", "hello", "1.0.0", key="k1")
    assert acme.wait_settled("ws1", admitted)["outcome"]["result"] == "succeeded"

    (item,) = acme.get("/v1/workspaces/ws1/resolved").body["items"]

    assert item["attestation"] == "/v1/packages/hello/versions/1.0.0/attestation"
    envelope = json.dumps(acme.get(item["attestation"]).body).encode()
    verified = attestations.verify_envelope(envelope, _key_set(acme), package="hello", version="1.0.0")
    attestations.check_subjects(
        verified, archive_sha256=item["archive"]["sha256"], manifest_sha256=item["manifestDigest"]
    )


def _certifier(envelope: bytes) -> str:
    """The kid of the KMS key that certified the short-lived key an envelope is signed with."""
    (signature,) = json.loads(envelope)["signatures"]
    (certified,) = signature["extension"]["ext"]["certificate"]["signatures"]
    return str(certified["keyid"])


def _next_certificate(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """Move the clock to where the process's short-lived key must be replaced (its certificate nearly over)."""
    later = clock.now() + release_signing.CERTIFICATE_SECONDS - release_signing.RENEW_BEFORE_SECONDS + 1
    monkeypatch.setattr(clock, "now", lambda: later)


def test_a_rotated_key_keeps_old_releases_verifiable(acme, stack, monkeypatch) -> None:
    # Given a release signed by the template's key
    _published(acme, "hello", "1.0.0", b"# one\n")
    kms = boto3.client("kms", region_name=stack.region)
    old_kid = _certifier(_envelope(acme, "hello", "1.0.0"))

    # When the alias is pointed at a new key (rotation) and a new release is published once the process certifies
    # its next short-lived key (a certificate lasts an hour; a new process certifies at once)
    new_key = kms.create_key(KeySpec="ECC_NIST_P256", KeyUsage="SIGN_VERIFY")["KeyMetadata"]["Arn"]
    kms.update_alias(AliasName=stack.aliases["ReleaseSigningKeyAlias"], TargetKeyId=new_key)
    _next_certificate(monkeypatch)
    _published(acme, "hello", "2.0.0", b"# two\n")
    # the old key may even be disabled (moto's DisableKey takes the key id, not the ARN)
    kms.disable_key(KeyId=stack.keys["ReleaseSigningKey"].rsplit("/", 1)[1])

    # Then both keys are listed and both releases verify against the key set pinned now
    keys = _key_set(acme)
    old = attestations.verify_envelope(_envelope(acme, "hello", "1.0.0"), keys, version="1.0.0")
    new = attestations.verify_envelope(_envelope(acme, "hello", "2.0.0"), keys, version="2.0.0")
    assert old.kid == old_kid != new.kid
    assert sorted(keys.kids()) == sorted([old.kid, new.kid])
    # and a key set pinned before the rotation refuses the new release by its unknown key id
    before = attestations.KeySet(keys={old.kid: keys.keys[old.kid]})
    with pytest.raises(attestations.UnknownKeyId):
        attestations.verify_envelope(_envelope(acme, "hello", "2.0.0"), before)


def test_a_key_certified_within_the_hour_keeps_signing_and_a_new_one_follows(acme, stack, monkeypatch) -> None:
    # Given two releases published by one process within its short-lived key's hour
    _published(acme, "hello", "1.0.0", b"# one\n")
    _published(acme, "hello", "1.1.0", b"# one one\n")
    # and a third once that key's certificate is nearly over
    _next_certificate(monkeypatch)
    _published(acme, "hello", "2.0.0", b"# two\n")

    keys = _key_set(acme)
    verified = {v: attestations.verify_envelope(_envelope(acme, "hello", v), keys) for v in ("1.0.0", "1.1.0", "2.0.0")}

    # Then the first two share a short-lived key, the third has its own, and one KMS key certified both
    signer = {v: r.certificate.kid for v, r in verified.items() if r.certificate is not None}
    assert signer["1.0.0"] == signer["1.1.0"] != signer["2.0.0"]
    assert {r.kid for r in verified.values()} == set(keys.kids()) and len(keys.kids()) == 1
    for release in verified.values():
        assert release.certificate is not None
        certificate = release.certificate
        assert certificate.not_after - certificate.not_before == release_signing.CERTIFICATE_SECONDS
        assert certificate.covers(epoch_of(release.claim.published_at))
        assert certificate.issuer == stack.aliases["ReleaseSigningKeyAlias"]


def test_an_alias_moving_while_a_key_is_certified_certifies_under_the_key_it_names_now(
    acme, stack, monkeypatch
) -> None:
    """GetPublicKey read the old key, then the alias moved before Sign: the certificate would name a key that did
    not sign it, so certifying starts over under the key the alias names now."""
    kms = boto3.client("kms", region_name=stack.region)
    old = signing_store.current_public_key()
    new_key = kms.create_key(KeySpec="ECC_NIST_P256", KeyUsage="SIGN_VERIFY")["KeyMetadata"]["Arn"]
    kms.update_alias(AliasName=stack.aliases["ReleaseSigningKeyAlias"], TargetKeyId=new_key)
    reads = iter([old])
    real = signing_store.current_public_key
    monkeypatch.setattr(signing_store, "current_public_key", lambda: next(reads, None) or real())

    _published(acme, "hello", "1.0.0", b"# hello\n")

    new_kid = attestation.public_jwk(kms.get_public_key(KeyId=new_key)["PublicKey"])["kid"]
    verified = attestations.verify_envelope(_envelope(acme, "hello", "1.0.0"), _key_set(acme))
    assert verified.kid == new_kid != attestation.public_jwk(old[1])["kid"]
    assert [k["kid"] for k in acme.get("/v1/signing-keys").body["keys"]] == [new_kid]


class _Calls:
    """AWS calls the process's own clients make (botocore's before-call event), by service and operation."""

    def __init__(self) -> None:
        self.made: list[tuple[str, str, dict]] = []  # type: ignore[type-arg]

    def __call__(self, model, params, **_: object) -> None:  # type: ignore[no-untyped-def]
        self.made.append((model.service_model.service_name, model.name, params))


def test_a_warm_publish_makes_no_kms_request_and_keeps_no_envelope_object(acme, stack) -> None:
    from packyard.store.aws import client

    # Given a process that has published once (its short-lived key is certified)
    _published(acme, "hello", "1.0.0", b"# one\n")
    calls = _Calls()
    for service in ("kms", "s3", "dynamodb"):
        client(service).meta.events.register("before-call", calls)

    # When it publishes again
    _published(acme, "hello", "1.1.0", b"# two\n")

    # Then no KMS request was made, no envelope object was read or written, and the release verifies
    assert [c for c in calls.made if c[0] == "kms"] == []
    assert [c for c in calls.made if str(c[2].get("Key", "")).startswith("attestations/")] == []
    assert all_keys(stack, "attestations/") == []
    verified = attestations.verify_envelope(_envelope(acme, "hello", "1.1.0"), _key_set(acme), version="1.1.0")
    assert verified.certificate is not None


def test_the_short_lived_private_key_is_never_stored_or_logged(acme, stack, capsys, caplog) -> None:
    _published(acme, "hello", "1.0.0", b"# hello\n")
    key = release_signing.short_lived_key(clock.now())
    scalar = key.private.private_numbers().private_value.to_bytes(32, "big")
    forms = {scalar.hex(), attestation.b64url(scalar), str(int.from_bytes(scalar, "big"))}
    stored = json.dumps(boto3.client("dynamodb", region_name=stack.region).scan(TableName=stack.table_name)["Items"])
    s3 = boto3.client("s3", region_name=stack.region)
    objects = [s3.get_object(Bucket=stack.bucket_name, Key=k)["Body"].read().hex() for k in all_keys(stack, "")]
    printed = capsys.readouterr()
    seen = "\n".join([stored, *objects, printed.out, printed.err, caplog.text, repr(key)])
    assert key.certificate.kid in stored  # the certificate is recorded
    assert not [form for form in forms if form in seen]


def _release_key(package: str, version: str) -> dict:  # type: ignore[type-arg]
    return {"pk": {"S": f"TENANT#t-acme#PACKAGE#{package}"}, "sk": {"S": f"VERSION#{version}"}}


@pytest.mark.parametrize("altered", ["signature", "certificate", "release"])
def test_an_envelope_altered_in_storage_is_not_served(acme, stack, altered: str) -> None:
    _published(acme, "hello", "1.0.0", b"# hello\n")
    dynamodb = boto3.client("dynamodb", region_name=stack.region)
    item = dynamodb.get_item(TableName=stack.table_name, Key=_release_key("hello", "1.0.0"))["Item"]
    signer = item["attestation"]["M"]["signer"]["S"]
    if altered == "signature":  # another valid-looking signature recorded on the release
        other = base64.b64encode(b"\x30\x06\x02\x01\x01\x02\x01\x01").decode()
        dynamodb.update_item(
            TableName=stack.table_name,
            Key=_release_key("hello", "1.0.0"),
            UpdateExpression="SET attestation.sig = :sig",
            ExpressionAttributeValues={":sig": {"S": other}},
        )
    elif altered == "certificate":  # the short-lived key's recorded certificate names another window
        certificate_key = {"pk": {"S": f"SIGNING#CERTIFICATE#{signer}"}, "sk": {"S": "CERTIFICATE"}}
        recorded = dynamodb.get_item(TableName=stack.table_name, Key=certificate_key)["Item"]["certificate"]["S"]
        document = json.loads(recorded)
        document["signatures"][0]["keyid"] = "someone-else"
        dynamodb.update_item(
            TableName=stack.table_name,
            Key=certificate_key,
            UpdateExpression="SET certificate = :c",
            ExpressionAttributeValues={":c": {"S": json.dumps(document)}},
        )
    else:  # the release item states another publisher than the one signed for
        dynamodb.update_item(
            TableName=stack.table_name,
            Key=_release_key("hello", "1.0.0"),
            UpdateExpression="SET publishedBy = :who",
            ExpressionAttributeValues={":who": {"S": "mallory"}},
        )

    answer = acme.get("/v1/packages/hello/versions/1.0.0/attestation")

    assert answer.status == 409
    assert answer.body["code"] == "release_unavailable"


def _kms_signed_envelope(stack, release: dict) -> bytes:  # type: ignore[type-arg]
    """An envelope as releases were signed before short-lived keys: KMS's own signature over the statement."""
    claim = attestation.ReleaseClaim(
        tenant="t-acme",
        package=release["package"],
        version=release["version"],
        archive_sha256=release["archive"]["sha256"],
        manifest_sha256=release["manifestDigest"],
        upload_id=release["receipt"]["uploadId"],
        published_by=release["publishedBy"],
        published_at=attestation.statement_time(epoch_of(release["publishedAt"])),
    )
    payload = attestation.statement_bytes(claim)
    signed = boto3.client("kms", region_name=stack.region).sign(
        KeyId=stack.aliases["ReleaseSigningKeyAlias"],
        Message=attestation.pae(attestation.PAYLOAD_TYPE, payload),
        MessageType="RAW",
        SigningAlgorithm="ECDSA_SHA_256",
    )
    kid = release_signing.kid_of(signed["KeyId"])
    return attestation.envelope_bytes(attestation.envelope(payload, kid, signed["Signature"]))


def test_a_release_signed_by_kms_itself_before_short_lived_keys_still_verifies(acme, stack) -> None:
    # Given a release as they were stored before short-lived keys: a KMS-signed envelope object in S3, and the
    # release recording its sha256, size and key id only
    built = _published(acme, "hello", "1.0.0", b"# hello\n")
    release = acme.get("/v1/packages/hello/versions/1.0.0").body
    old = _kms_signed_envelope(stack, release)
    object_key = signing_store.envelope_key("t-acme", "hello", "1.0.0", release["receipt"]["uploadId"])
    boto3.client("s3", region_name=stack.region).put_object(Bucket=stack.bucket_name, Key=object_key, Body=old)
    kid = json.loads(old)["signatures"][0]["keyid"]
    boto3.client("dynamodb", region_name=stack.region).update_item(
        TableName=stack.table_name,
        Key=_release_key("hello", "1.0.0"),
        UpdateExpression="SET attestation = :a",
        ExpressionAttributeValues={
            ":a": {
                "M": {
                    "sha256": {"S": hashlib.sha256(old).hexdigest()},
                    "size": {"N": str(len(old))},
                    "keyId": {"S": kid},
                }
            }
        },
    )

    # When a runtime reads its envelope
    served = _envelope(acme, "hello", "1.0.0")

    # Then it is that object, signed by the listed key itself, and it verifies as it always did
    assert json.loads(served) == json.loads(old)
    verified = attestations.verify_envelope(served, _key_set(acme), package="hello", version="1.0.0")
    attestations.check_subjects(verified, archive_sha256=built.archive_sha256)
    assert (verified.kid, verified.certificate) == (kid, None)


def test_another_tenant_sees_no_attestation(acme, globex, stack) -> None:
    _published(acme, "hello", "1.0.0", b"# hello\n")

    answer = globex.get("/v1/packages/hello/versions/1.0.0/attestation")

    assert answer.status == 404
    assert answer.body["code"] == "not_found"


def test_a_missing_scope_is_forbidden_on_both_routes(api, stack) -> None:
    from devstack.caller import Caller

    no_read = Caller(api, "t-acme", scopes=("workspaces:read",))
    for path in ("/v1/signing-keys", "/v1/packages/hello/versions/1.0.0/attestation"):
        answer = no_read.get(path)
        assert answer.status == 403, (path, answer.body)
        assert answer.body["code"] == "forbidden"


# ---- crash-safe and idempotent ------------------------------------------------------------------------------------


@pytest.fixture
def no_executions(monkeypatch):  # type: ignore[no-untyped-def]
    monkeypatch.setattr(workflows, "start", lambda arn, name, payload: name)


def _verifying(acme, stack, version: str, built) -> dict[str, str]:  # type: ignore[no-untyped-def]
    session = acme.request_upload("crashy", version, built).body
    acme.put_archive(session, built.archive)
    assert acme.post(f"/v1/uploads/{session['uploadId']}/complete").status == 202
    item = boto3.client("dynamodb", region_name=stack.region).get_item(
        TableName=stack.table_name,
        Key={"pk": {"S": f"TENANT#t-acme#UPLOAD#{session['uploadId']}"}, "sk": {"S": "UPLOAD"}},
    )["Item"]
    return {"tenant": "t-acme", "uploadId": session["uploadId"], "token": item["token"]["S"]}


def test_a_publish_crashing_at_any_call_stores_one_envelope_that_verifies(acme, stack, no_executions) -> None:
    """Crash the publish task after its k-th AWS call (k = 1, 2, …, past the last), then retry it twice (Step
    Functions' Retry and a duplicate delivery): the release records one envelope, it verifies, and nothing else
    is stored for it. Each round starts as a new process would: no short-lived key, an unknown KMS key (its first
    certificate records it), so the crash points include certifying."""
    dynamodb = boto3.client("dynamodb", region_name=stack.region)
    for k in range(1, MAX_CALLS):
        release_signing.forget_keys()
        version = f"1.0.{k}"
        built = build_from_files({"SKILL.md": f"crash point {k}\n".encode()})
        event = _verifying(acme, stack, version, built)
        event["verify"] = lambdas.invoke_handler(stack.functions["VerifyFunction"], event)

        with crash_after(k) as plan, contextlib.suppress(InjectedCrash):
            lambdas.invoke_handler(stack.functions["PublishFunction"], event)
        lambdas.invoke_handler(stack.functions["PublishFunction"], event)
        lambdas.invoke_handler(stack.functions["PublishFunction"], event)

        envelope = _envelope(acme, "crashy", version)
        verified = attestations.verify_envelope(envelope, _key_set(acme), package="crashy", version=version)
        attestations.check_subjects(verified, archive_sha256=built.archive_sha256)
        item = dynamodb.get_item(TableName=stack.table_name, Key=_release_key("crashy", version))["Item"]
        recorded = item["attestation"]["M"]
        assert recorded["sha256"]["S"] == hashlib.sha256(attestation.envelope_bytes(json.loads(envelope))).hexdigest()
        assert verified.certificate is not None and recorded["signer"]["S"] == verified.certificate.kid
        assert all_keys(stack, f"attestations/t-acme/crashy/{version}/") == []
        assert len(acme.get("/v1/signing-keys").body["keys"]) == 1
        if not plan.crashed:
            break
    assert k > 5, "publish made suspiciously few AWS calls"


def test_only_the_publish_function_may_sign_and_the_key_is_p256_sign_verify() -> None:
    """The template, read as the local stack reads it: one ECC_NIST_P256 SIGN_VERIFY key, its key policy grants
    kms:Sign only under a condition naming the publish role, and no role but PublishFunction's allows kms:Sign."""
    import devstack

    resources = devstack.load_template(devstack.DEFAULT_TEMPLATE)["Resources"]
    key = resources["ReleaseSigningKey"]["Properties"]
    assert (key["KeySpec"], key["KeyUsage"]) == ("ECC_NIST_P256", "SIGN_VERIFY")
    signing_statements = [s for s in key["KeyPolicy"]["Statement"] if "kms:Sign" in s["Action"]]
    (only,) = signing_statements
    assert "PublishFunctionRole" in json.dumps(only["Condition"])

    def actions(resource: dict) -> set[str]:  # type: ignore[type-arg]
        statements = [s for p in resource["Properties"].get("Policies", []) for s in p.get("Statement", [])]
        return {a for s in statements for a in ([s["Action"]] if isinstance(s["Action"], str) else s["Action"])}

    signers = sorted(
        name
        for name, resource in resources.items()
        if resource["Type"] == "AWS::Serverless::Function" and "kms:Sign" in actions(resource)
    )
    assert signers == ["PublishFunction"]


def test_kms_itself_verifies_the_envelope_signature_over_the_pae(acme, stack) -> None:
    """A second verifier as the oracle: KMS's own Verify (moto's, with the key's private half) accepts the signature
    over the PAE bytes our verifier checks, and refuses it over the bare payload. What KMS signed is the short-lived
    key's certificate; the release's own signature verifies under the certified key (``cryptography``)."""
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import ec

    _published(acme, "hello", "1.0.0", b"# hello\n")
    envelope = attestation.parse_envelope(_envelope(acme, "hello", "1.0.0"))
    (signature,) = envelope.signatures
    assert signature.certificate is not None
    certificate = signature.certificate
    kms = boto3.client("kms", region_name=stack.region)

    def valid(message: bytes) -> bool:
        return bool(
            kms.verify(
                KeyId=stack.keys["ReleaseSigningKey"],
                Message=message,
                MessageType="RAW",
                Signature=certificate.signatures[0].sig,
                SigningAlgorithm="ECDSA_SHA_256",
            )["SignatureValid"]
        )

    assert valid(certificate.signed_bytes())
    assert not valid(certificate.payload)
    certified = attestation.parse_certificate(certificate.payload)
    public = ec.EllipticCurvePublicNumbers(
        int.from_bytes(attestation.b64url_decode(certified.x), "big"),
        int.from_bytes(attestation.b64url_decode(certified.y), "big"),
        ec.SECP256R1(),
    ).public_key()
    public.verify(signature.sig, envelope.signed_bytes(), ec.ECDSA(hashes.SHA256()))
    assert certified.kid == signature.keyid == attestation.thumbprint(certified.x, certified.y)


def test_a_release_published_before_signing_has_no_attestation(acme, stack) -> None:
    """A release item without ``attestation`` (published before releases were signed) reads as before, without the
    link, and its attestation is 404 naming why."""
    _published(acme, "hello", "1.0.0", b"# hello\n")
    boto3.client("dynamodb", region_name=stack.region).update_item(
        TableName=stack.table_name,
        Key={"pk": {"S": "TENANT#t-acme#PACKAGE#hello"}, "sk": {"S": "VERSION#1.0.0"}},
        UpdateExpression="REMOVE attestation",
    )

    release = acme.get("/v1/packages/hello/versions/1.0.0")
    answer = acme.get("/v1/packages/hello/versions/1.0.0/attestation")

    assert release.status == 200
    assert "attestation" not in release.body
    assert answer.status == 404
    assert "before releases were signed" in answer.body["detail"]
