"""The publish capability end to end: API → S3 → real Step Functions execution → handlers → DynamoDB."""

from __future__ import annotations

import hashlib

import pytest

from packyard.api.times import epoch_of
from packyard_cli.build import build_from_files
from tests.support.callers import all_keys, release_items, used_bytes

FILES = {"SKILL.md": b"# Hello\nA tiny skill.\n", "src/main.py": b"print('hello')\n"}


@pytest.fixture
def built():
    return build_from_files(FILES, permissions=[{"kind": "api_read", "resource": "calendar"}])


def test_publish_through_the_state_machine_yields_a_release_with_a_receipt(acme, built, stack):
    final = acme.publish("hello-skill", "1.0.0", built)

    assert final["state"] == "published"
    version = acme.get("/v1/packages/hello-skill/versions/1.0.0")
    assert version.status == 200
    assert version.body["status"] == "published"
    assert version.body["receipt"]["archive"] == {"sha256": built.archive_sha256, "size": built.archive_size}
    assert [f["path"] for f in version.body["manifest"]["files"]] == sorted(FILES)
    assert version.body["permissions"] == [{"kind": "api_read", "resource": "calendar"}]
    assert f"blobs/t-acme/sha256/{built.archive_sha256}" in all_keys(stack, "blobs/")


def test_publish_leaves_no_staging_reservation_only_retained_blob_bytes(acme, built, stack):
    acme.publish("hello-skill", "1.0.0", built)

    manifest_size = acme.get("/v1/packages/hello-skill/versions/1.0.0").body
    blob_keys = all_keys(stack, "blobs/t-acme/")
    assert len(blob_keys) == 2  # archive + manifest
    assert used_bytes(stack, "t-acme") == built.archive_size + _manifest_blob_size(stack, manifest_size)


def _manifest_blob_size(stack, version_body):
    import boto3

    key = f"blobs/t-acme/sha256/{version_body['manifestDigest']}"
    return boto3.client("s3", region_name=stack.region).head_object(Bucket=stack.bucket_name, Key=key)["ContentLength"]


def test_downloaded_archive_is_byte_identical_to_the_published_one(acme, built):
    import requests

    acme.publish("hello-skill", "1.0.0", built)
    link = acme.get("/v1/packages/hello-skill/versions/1.0.0/archive")

    assert link.status == 200
    downloaded = requests.get(link.body["url"], timeout=30).content
    assert hashlib.sha256(downloaded).hexdigest() == built.archive_sha256 == link.body["sha256"]


def test_republishing_identical_content_is_an_idempotent_success_returning_the_release(acme, built):
    acme.publish("hello-skill", "1.0.0", built)

    again = acme.request_upload("hello-skill", "1.0.0", built)

    assert again.status == 200
    assert again.body["uploadRequired"] is False
    assert again.body["release"]["receipt"]["archive"]["sha256"] == built.archive_sha256


def test_publishing_different_content_to_a_used_version_is_version_exists(acme, built):
    acme.publish("hello-skill", "1.0.0", built)
    other = build_from_files({**FILES, "SKILL.md": b"# Changed\n"})

    refused = acme.request_upload("hello-skill", "1.0.0", other)

    assert refused.status == 409
    assert refused.code == "version_exists"


def test_a_yanked_version_is_never_reused(acme, built):
    acme.publish("hello-skill", "1.0.0", built)
    yanked = acme.delete("/v1/packages/hello-skill/versions/1.0.0")
    assert yanked.status == 200 and yanked.body["status"] == "yanked"

    other = build_from_files({"SKILL.md": b"# new content\n"})
    refused = acme.request_upload("hello-skill", "1.0.0", other)

    assert refused.code == "version_exists"
    assert acme.get("/v1/packages/hello-skill/versions/1.0.0").body["status"] == "yanked"


def test_content_the_tenant_already_holds_needs_no_upload(acme, built):
    acme.publish("hello-skill", "1.0.0", built)

    session = acme.request_upload("hello-skill", "1.0.1", built)

    assert session.status == 201
    assert session.body["uploadRequired"] is False
    assert "upload" not in session.body
    final = acme.complete_and_wait(session.body["uploadId"])
    assert final["state"] == "published"


def test_tampered_archive_is_rejected_publishes_nothing_and_releases_the_reservation(acme, built, stack):
    session = acme.request_upload("hello-skill", "1.0.0", built).body
    assert used_bytes(stack, "t-acme") > 0
    tampered = build_from_files({**FILES, "src/main.py": b"print('pwned')\n"}).archive

    acme.put_archive(session, tampered)
    final = acme.complete_and_wait(session["uploadId"])

    assert final["state"] == "rejected"
    assert final["rejection"]["code"] == "archive_rejected"
    assert final["rejection"]["subCode"] in ("digest_mismatch", "size_mismatch")
    assert release_items(stack, "t-acme") == []
    assert all_keys(stack, "blobs/") == []
    assert used_bytes(stack, "t-acme") == 0
    assert acme.get("/v1/packages/hello-skill/versions/1.0.0").code == "not_found"


def test_complete_twice_returns_the_same_execution(acme, built):
    session = acme.request_upload("hello-skill", "1.0.0", built).body
    acme.put_archive(session, built.archive)

    first = acme.post(f"/v1/uploads/{session['uploadId']}/complete")
    second = acme.post(f"/v1/uploads/{session['uploadId']}/complete")

    assert first.body["executionArn"] == second.body["executionArn"]
    assert first.body["executionArn"].endswith(f":{session['uploadId']}")


def test_complete_before_the_archive_is_uploaded_is_a_clear_conflict(acme, built):
    session = acme.request_upload("hello-skill", "1.0.0", built).body

    early = acme.post(f"/v1/uploads/{session['uploadId']}/complete")

    assert early.status == 409
    assert early.code == "upload_incomplete"
    assert acme.get(f"/v1/uploads/{session['uploadId']}").body["state"] == "awaiting_upload"


def test_expired_session_is_refused_with_upload_expired_and_gives_back_its_reservation(acme, built, stack, monkeypatch):
    from packyard import clock

    session = acme.request_upload("hello-skill", "1.0.0", built).body
    acme.put_archive(session, built.archive)
    monkeypatch.setattr(clock, "now", lambda: epoch_of(session["expiresAt"]) + 1)

    late = acme.post(f"/v1/uploads/{session['uploadId']}/complete")

    assert late.status == 410
    assert late.code == "upload_expired"
    assert acme.get(f"/v1/uploads/{session['uploadId']}").body["state"] == "expired"
    assert used_bytes(stack, "t-acme") == 0


def test_listing_shows_packages_and_versions_newest_first(acme):
    for version, body in (("1.0.0", b"a"), ("1.10.0", b"b"), ("1.2.0", b"c")):
        acme.publish("hello-skill", version, build_from_files({"SKILL.md": body}))

    packages = acme.get("/v1/packages").body["items"]
    versions = acme.get("/v1/packages/hello-skill/versions").body["items"]

    assert [(p["package"], p["versionCount"]) for p in packages] == [("hello-skill", 3)]
    assert [v["version"] for v in versions] == ["1.10.0", "1.2.0", "1.0.0"]


def test_quota_exceeded_refuses_the_session_and_reserves_nothing(acme, built, stack, monkeypatch):
    monkeypatch.setenv("PACKYARD_TENANT_QUOTA_BYTES", str(built.archive_size))
    from packyard import config

    config.reset()

    refused = acme.request_upload("hello-skill", "1.0.0", built)

    assert refused.status == 409
    assert refused.code == "quota_exceeded"
    assert used_bytes(stack, "t-acme") == 0
    config.reset()
