"""Signed releases through the real publish state machine on moto: the KMS key the template declares signs each
release's statement, the envelope is stored once and served, the keys are listed as a JWK Set, and the offline
verifier (packyard_cli.attestations) accepts what the service signed, before and after a key rotation."""

from __future__ import annotations

import contextlib
import hashlib
import json

import boto3
import pytest

from devstack import lambdas
from devstack.faults import InjectedCrash, crash_after
from packyard.api.times import epoch_of
from packyard.publishing import signing as release_signing
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


def test_a_rotated_key_keeps_old_releases_verifiable(acme, stack) -> None:
    # Given a release signed by the template's key
    _published(acme, "hello", "1.0.0", b"# one\n")
    kms = boto3.client("kms", region_name=stack.region)
    old_kid = json.loads(_envelope(acme, "hello", "1.0.0"))["signatures"][0]["keyid"]

    # When the alias is pointed at a new key (rotation) and a new release is published
    new_key = kms.create_key(KeySpec="ECC_NIST_P256", KeyUsage="SIGN_VERIFY")["KeyMetadata"]["Arn"]
    kms.update_alias(AliasName=stack.aliases["ReleaseSigningKeyAlias"], TargetKeyId=new_key)
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


def test_an_envelope_altered_in_storage_is_not_served(acme, stack) -> None:
    _published(acme, "hello", "1.0.0", b"# hello\n")
    (key,) = all_keys(stack, "attestations/t-acme/hello/1.0.0/")
    s3 = boto3.client("s3", region_name=stack.region)
    stored = json.loads(s3.get_object(Bucket=stack.bucket_name, Key=key)["Body"].read())
    stored["signatures"][0]["keyid"] = "someone-else"
    s3.put_object(Bucket=stack.bucket_name, Key=key, Body=json.dumps(stored).encode())

    answer = acme.get("/v1/packages/hello/versions/1.0.0/attestation")

    assert answer.status == 409
    assert answer.body["code"] == "release_unavailable"


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
    Functions' Retry and a duplicate delivery): one envelope object per release, the one the release records,
    and it verifies. Each round starts with an unknown key (the first signature of a key records it)."""
    s3 = boto3.client("s3", region_name=stack.region)
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

        (key,) = all_keys(stack, f"attestations/t-acme/crashy/{version}/")
        stored = s3.get_object(Bucket=stack.bucket_name, Key=key)["Body"].read()
        envelope = _envelope(acme, "crashy", version)
        verified = attestations.verify_envelope(envelope, _key_set(acme), package="crashy", version=version)
        attestations.check_subjects(verified, archive_sha256=built.archive_sha256)
        assert json.loads(stored) == json.loads(envelope)
        item = boto3.client("dynamodb", region_name=stack.region).get_item(
            TableName=stack.table_name,
            Key={"pk": {"S": "TENANT#t-acme#PACKAGE#crashy"}, "sk": {"S": f"VERSION#{version}"}},
        )["Item"]
        assert item["attestation"]["M"]["sha256"]["S"] == hashlib.sha256(stored).hexdigest()
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
    """A second verifier as the oracle: KMS's own Verify (moto's, with the key's private half) accepts the stored
    signature over the PAE bytes our verifier checks, and refuses it over the bare payload."""
    from packyard.publishing import attestation

    _published(acme, "hello", "1.0.0", b"# hello\n")
    envelope = attestation.parse_envelope(_envelope(acme, "hello", "1.0.0"))
    kms = boto3.client("kms", region_name=stack.region)

    def valid(message: bytes) -> bool:
        return bool(
            kms.verify(
                KeyId=stack.keys["ReleaseSigningKey"],
                Message=message,
                MessageType="RAW",
                Signature=envelope.signatures[0].sig,
                SigningAlgorithm="ECDSA_SHA_256",
            )["SignatureValid"]
        )

    assert valid(envelope.signed_bytes())
    assert not valid(envelope.payload)


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
