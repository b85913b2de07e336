"""Manifests are checked on every read (issue 19, item 3): the staged manifest is re-hashed against the session's
``manifestDigest`` before anything is published, and every later reader of a stored manifest (the version route,
planning, the resolved view) compares its sha256 with the release first. A manifest missing or altered in storage
makes its release ``unavailable`` at once, with the scrub's own marking (installations ``needs_attention``,
``corruptAt`` on the blob record, ``BlobsCorrupt``), and the altered permissions are never served."""

from __future__ import annotations

import hashlib
import json
from typing import Any

import boto3
import pytest

from devstack import lambdas
from devstack.caller import Caller
from packyard.maintenance import scrub
from packyard.publishing import verification
from packyard.store import workflows
from packyard_cli.build import build_from_files
from tests.support.callers import release_items, used_bytes

WS = "ws-integrity"
WIDENED = {"kind": "network", "resource": "*"}


@pytest.fixture
def emitted(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    names: list[str] = []
    real = scrub.metrics.add_metric

    def record(*, name: str, **kwargs: Any) -> None:
        names.append(name)
        real(name=name, **kwargs)

    monkeypatch.setattr(scrub.metrics, "add_metric", record)
    return names


def _s3(stack) -> Any:
    return boto3.client("s3", region_name=stack.region)


def _widened(manifest_bytes: bytes) -> bytes:
    """The same manifest asking for every network destination: what an attacker with bucket access would write."""
    manifest = json.loads(manifest_bytes)
    manifest["permissions"] = [*manifest.get("permissions", []), WIDENED]
    return json.dumps(manifest, sort_keys=True, separators=(",", ":")).encode()


def _alter_blob(stack, tenant: str, sha256: str, how: str = "widened") -> None:
    key = f"blobs/{tenant}/sha256/{sha256}"
    if how == "missing":
        _s3(stack).delete_object(Bucket=stack.bucket_name, Key=key)
        return
    original = _s3(stack).get_object(Bucket=stack.bucket_name, Key=key)["Body"].read()
    _s3(stack).put_object(Bucket=stack.bucket_name, Key=key, Body=_widened(original))


def _item(stack, pk: str, sk: str) -> dict[str, Any]:
    item: dict[str, Any] = boto3.client("dynamodb", region_name=stack.region).get_item(
        TableName=stack.table_name, Key={"pk": {"S": pk}, "sk": {"S": sk}}, ConsistentRead=True
    )["Item"]
    return item


def _installed(acme: Caller, installation: str, package: str, version: str, key: str) -> None:
    settled = acme.wait_settled(WS, acme.install(WS, installation, package, version, key=key))
    assert settled["outcome"]["result"] == "succeeded", settled


def _upload_token(stack, upload_id: str) -> str:
    return str(_item(stack, f"TENANT#t-acme#UPLOAD#{upload_id}", "UPLOAD")["token"]["S"])


# ---- before anything is published: the staged manifest --------------------------------------------------------------


def test_given_a_staged_manifest_altered_before_verification_then_the_upload_is_rejected_and_nothing_published(
    stack, acme: Caller
) -> None:
    built = build_from_files({"SKILL.md": b"honest\n"}, permissions=[{"kind": "api_read"}])
    session = acme.request_upload("hello", "1.0.0", built).body
    upload_id = session["uploadId"]
    staged = f"uploads/t-acme/{upload_id}/{_upload_token(stack, upload_id)}/manifest.json"
    original = _s3(stack).get_object(Bucket=stack.bucket_name, Key=staged)["Body"].read()
    # moto does not check ChecksumSHA256, and S3 would take a new PUT with its own checksum: only our hash catches it
    _s3(stack).put_object(Bucket=stack.bucket_name, Key=staged, Body=_widened(original))
    acme.put_archive(session, built.archive)

    upload = acme.complete_and_wait(upload_id)

    assert upload["state"] == "rejected"
    assert (upload["rejection"]["code"], upload["rejection"]["subCode"]) == ("archive_rejected", "digest_mismatch")
    assert "manifest" in upload["rejection"]["detail"]
    assert release_items(stack, "t-acme") == []
    assert used_bytes(stack, "t-acme") == 0  # the reservation is returned
    assert acme.get("/v1/packages/hello/versions/1.0.0").status == 404


def test_given_a_staged_manifest_altered_between_verify_and_publish_then_publish_refuses_and_reject_returns_all(
    stack, acme: Caller, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(workflows, "start", lambda arn, name, payload: name)  # the test plays the state machine
    # a manifest too large to ride in Verify's answer (every manifest, here): Publish reads the staged object again
    monkeypatch.setattr(verification, "MANIFEST_CARRIED_MAX_BYTES", 0)
    built = build_from_files({"SKILL.md": b"honest\n"})
    session = acme.request_upload("hello", "1.0.0", built).body
    acme.put_archive(session, built.archive)
    assert acme.post(f"/v1/uploads/{session['uploadId']}/complete").status == 202
    event = {"tenant": "t-acme", "uploadId": session["uploadId"], "token": _upload_token(stack, session["uploadId"])}
    event["verify"] = lambdas.invoke_handler(stack.functions["VerifyFunction"], event)
    assert event["verify"]["verdict"] == "accepted" and "manifest" not in event["verify"]
    staged = f"uploads/t-acme/{session['uploadId']}/{event['token']}/manifest.json"
    original = _s3(stack).get_object(Bucket=stack.bucket_name, Key=staged)["Body"].read()
    _s3(stack).put_object(Bucket=stack.bucket_name, Key=staged, Body=_widened(original))

    with pytest.raises(Exception) as raised:
        lambdas.invoke_handler(stack.functions["PublishFunction"], event)
    assert type(raised.value).__name__ == "ArchiveRejected"  # the errorType the Catch routes to Reject
    event["error"] = {"Error": "ArchiveRejected", "Cause": json.dumps({"errorMessage": str(raised.value)})}
    lambdas.invoke_handler(stack.functions["RejectFunction"], event)

    upload = acme.get(f"/v1/uploads/{session['uploadId']}").body
    assert (upload["state"], upload["rejection"]["subCode"]) == ("rejected", "digest_mismatch")
    assert release_items(stack, "t-acme") == []
    assert used_bytes(stack, "t-acme") == 0
    assert not [k for k in _keys(stack, "blobs/t-acme/") if k.endswith(built.manifest_digest)]


def test_given_a_staged_manifest_altered_after_verify_carried_it_then_publish_writes_the_verified_manifest(
    stack, acme: Caller, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A small manifest rides in Verify's answer (publishing.verification.carried_manifest), so Publish does not read
    the staged object again: whatever happened to it since, the manifest blob and the release are the declared
    manifest, re-hashed against the session's digest before they are written."""
    monkeypatch.setattr(workflows, "start", lambda arn, name, payload: name)  # the test plays the state machine
    built = build_from_files({"SKILL.md": b"honest\n"})
    session = acme.request_upload("hello", "1.0.0", built).body
    acme.put_archive(session, built.archive)
    assert acme.post(f"/v1/uploads/{session['uploadId']}/complete").status == 202
    event = {"tenant": "t-acme", "uploadId": session["uploadId"], "token": _upload_token(stack, session["uploadId"])}
    event["verify"] = lambdas.invoke_handler(stack.functions["VerifyFunction"], event)
    staged = f"uploads/t-acme/{session['uploadId']}/{event['token']}/manifest.json"
    original = _s3(stack).get_object(Bucket=stack.bucket_name, Key=staged)["Body"].read()
    assert event["verify"]["manifest"].encode() == original
    _s3(stack).put_object(Bucket=stack.bucket_name, Key=staged, Body=_widened(original))

    lambdas.invoke_handler(stack.functions["PublishFunction"], event)

    digest = hashlib.sha256(original).hexdigest()
    blob = f"blobs/t-acme/sha256/{digest}"
    assert _s3(stack).get_object(Bucket=stack.bucket_name, Key=blob)["Body"].read() == original
    release = acme.get("/v1/packages/hello/versions/1.0.0").body
    assert release["manifestDigest"] == digest and WIDENED not in release["permissions"]


def test_given_a_carried_manifest_that_is_not_the_sessions_then_publish_reads_the_staged_one(
    stack, acme: Caller, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Verify's answer is re-hashed too: a carried manifest that is not the declared one is not used (the staged
    object, checked the same way, is)."""
    monkeypatch.setattr(workflows, "start", lambda arn, name, payload: name)
    built = build_from_files({"SKILL.md": b"honest\n"})
    session = acme.request_upload("hello", "1.0.0", built).body
    acme.put_archive(session, built.archive)
    assert acme.post(f"/v1/uploads/{session['uploadId']}/complete").status == 202
    event = {"tenant": "t-acme", "uploadId": session["uploadId"], "token": _upload_token(stack, session["uploadId"])}
    event["verify"] = lambdas.invoke_handler(stack.functions["VerifyFunction"], event)
    declared = event["verify"]["manifest"].encode()
    event["verify"]["manifest"] = _widened(declared).decode()

    lambdas.invoke_handler(stack.functions["PublishFunction"], event)

    release = acme.get("/v1/packages/hello/versions/1.0.0").body
    assert release["manifestDigest"] == hashlib.sha256(declared).hexdigest()
    assert WIDENED not in release["permissions"]


def _keys(stack, prefix: str) -> list[str]:
    listed = _s3(stack).list_objects_v2(Bucket=stack.bucket_name, Prefix=prefix)
    return [obj["Key"] for obj in listed.get("Contents", [])]


# ---- after publish: every reader checks ------------------------------------------------------------------------------


@pytest.mark.parametrize("how", ["widened", "missing"])
def test_given_a_manifest_altered_in_storage_when_its_version_is_read_then_the_release_is_unavailable_at_once(
    stack, acme: Caller, emitted: list[str], how: str
) -> None:
    published = acme.publish("hello", "1.0.0", build_from_files({"SKILL.md": b"v1\n"}))
    _installed(acme, "hello", "hello", "1.0.0", "k-1")
    digest = published["manifestDigest"]
    _alter_blob(stack, "t-acme", digest, how)

    read = acme.get("/v1/packages/hello/versions/1.0.0")

    assert read.status == 200
    assert read.body["status"] == "unavailable"
    assert read.body.get("manifest", {}) == {}  # the altered manifest is not served
    assert WIDENED not in read.body["permissions"]
    assert acme.get("/v1/packages/hello/versions/1.0.0").body["status"] == "unavailable"  # stored, not only answered
    assert _item(stack, "TENANT#t-acme#PACKAGE#hello", "VERSION#1.0.0")["status"]["S"] == "unavailable"
    assert acme.get(f"/v1/workspaces/{WS}/installations/hello").body["status"] == "needs_attention"
    assert "corruptAt" in _item(stack, f"TENANT#t-acme#BLOB#{digest}", "BLOB")
    assert emitted.count("BlobsCorrupt") == 1
    refused = acme.install("ws-other", "hello", "hello", "1.0.0", key="k-2")
    assert (refused.status, refused.body["code"]) == (409, "release_unavailable")
    assert acme.get("/v1/packages/hello/versions/1.0.0/archive").body["code"] == "release_unavailable"


def test_given_a_manifest_altered_in_storage_when_an_install_is_planned_then_it_is_refused_release_unavailable(
    stack, acme: Caller, emitted: list[str]
) -> None:
    published = acme.publish("hello", "1.0.0", build_from_files({"SKILL.md": b"v1\n"}))
    _installed(acme, "first", "hello", "1.0.0", "k-1")
    _alter_blob(stack, "t-acme", published["manifestDigest"])

    settled = acme.wait_settled(WS, acme.install(WS, "second", "hello", "1.0.0", key="k-2"))

    assert settled["outcome"]["result"] == "refused"
    assert settled["outcome"]["code"] == "release_unavailable"
    assert acme.get(f"/v1/workspaces/{WS}/installations/second").status == 404
    assert acme.get("/v1/packages/hello/versions/1.0.0").body["status"] == "unavailable"
    assert acme.get(f"/v1/workspaces/{WS}/installations/first").body["status"] == "needs_attention"
    assert emitted.count("BlobsCorrupt") == 1


def test_given_a_manifest_altered_in_storage_when_the_workspace_is_resolved_then_its_installation_is_left_out(
    stack, acme: Caller, emitted: list[str]
) -> None:
    hello = acme.publish("hello", "1.0.0", build_from_files({"SKILL.md": b"hello\n"}))
    acme.publish("other", "1.0.0", build_from_files({"SKILL.md": b"other\n"}))
    _installed(acme, "hello", "hello", "1.0.0", "k-1")
    _installed(acme, "other", "other", "1.0.0", "k-2")
    before = acme.get(f"/v1/workspaces/{WS}/resolved").body
    assert sorted(entry["installationId"] for entry in before["items"]) == ["hello", "other"]
    _alter_blob(stack, "t-acme", hello["manifestDigest"])

    resolved = acme.get(f"/v1/workspaces/{WS}/resolved")

    assert resolved.status == 200
    assert [entry["installationId"] for entry in resolved.body["items"]] == ["other"]
    assert hello["manifestDigest"] not in json.dumps(resolved.body)  # no URL of the altered manifest handed out
    assert acme.get(f"/v1/workspaces/{WS}/installations/hello").body["status"] == "needs_attention"
    assert acme.get("/v1/packages/hello/versions/1.0.0").body["status"] == "unavailable"
    assert acme.get("/v1/packages/other/versions/1.0.0").body["status"] == "published"
    assert emitted.count("BlobsCorrupt") == 1
    again = acme.get(f"/v1/workspaces/{WS}/resolved").body  # found once: read again, nothing more is marked
    assert [entry["installationId"] for entry in again["items"]] == ["other"]
    assert emitted.count("BlobsCorrupt") == 1


def test_given_an_intact_manifest_then_every_reader_serves_it_unchanged(stack, acme: Caller) -> None:
    built = build_from_files({"SKILL.md": b"v1\n"}, permissions=[{"kind": "api_read"}])
    acme.publish("hello", "1.0.0", built)
    _installed(acme, "hello", "hello", "1.0.0", "k-1")

    read = acme.get("/v1/packages/hello/versions/1.0.0").body
    resolved = acme.get(f"/v1/workspaces/{WS}/resolved").body

    assert read["status"] == "published"
    assert read["manifest"]["permissions"] == [{"kind": "api_read", "resource": "*"}]
    assert [entry["installationId"] for entry in resolved["items"]] == ["hello"]
