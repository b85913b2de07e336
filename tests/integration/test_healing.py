"""Healing a rotted release (issue 19, item 4): an upload of the identical content to a release the integrity scrub
made ``unavailable`` (or of the same content under a new version) takes the bytes again, verifies them, writes the
bad blob again, and the release is ``published`` again; installations the scrub set ``needs_attention`` come back
to ``active`` (at once, or through the cleanup job a sweep runs, or on their next operation). End to end through the
real publish and install state machines on moto; a refused heal changes nothing but returning its reservation."""

from __future__ import annotations

import hashlib
from collections import Counter
from typing import Any

import boto3
import pytest

from devstack.caller import Caller
from packyard import clock
from packyard.maintenance import scrub
from packyard.publishing import publication
from packyard.store.due import DueKind
from packyard_cli.build import build_from_files
from tests.support.callers import all_keys, used_bytes
from tests.support.sweeping import run_maintenance, sweep_kinds

WS = "ws-heal"
DAY = 24 * 3600
INTERVAL = 7 * DAY


def _s3(stack) -> Any:
    return boto3.client("s3", region_name=stack.region)


def _object(stack, tenant: str, sha256: str) -> bytes | None:
    try:
        data: bytes = (
            _s3(stack).get_object(Bucket=stack.bucket_name, Key=f"blobs/{tenant}/sha256/{sha256}")["Body"].read()
        )
    except _s3(stack).exceptions.NoSuchKey:
        return None
    return data


def _damage(stack, tenant: str, sha256: str, how: str) -> None:
    key = f"blobs/{tenant}/sha256/{sha256}"
    if how == "missing":
        _s3(stack).delete_object(Bucket=stack.bucket_name, Key=key)
    else:
        _s3(stack).put_object(Bucket=stack.bucket_name, Key=key, Body=b"rotted bytes")


def _blob_item(stack, tenant: str, sha256: str) -> dict[str, Any]:
    item: dict[str, Any] = boto3.client("dynamodb", region_name=stack.region).get_item(
        TableName=stack.table_name,
        Key={"pk": {"S": f"TENANT#{tenant}#BLOB#{sha256}"}, "sk": {"S": "BLOB"}},
        ConsistentRead=True,
    )["Item"]
    return item


def _stored_blob_bytes(stack, tenant: str) -> int:
    return sum(
        _s3(stack).head_object(Bucket=stack.bucket_name, Key=key)["ContentLength"]
        for key in all_keys(stack, f"blobs/{tenant}/")
    )


def _installed(acme: Caller, ws: str, installation: str, version: str, key: str) -> None:
    settled = acme.wait_settled(ws, acme.install(ws, installation, "hello", version, key=key))
    assert settled["outcome"] == {"result": "succeeded"}, settled


def _rotted(stack, acme: Caller, built: Any, how: str = "corrupt", blob: str = "archive") -> dict[str, Any]:
    """hello@1.0.0 published and installed in WS, then its blob rotted and the scrub a week later marked it."""
    published = acme.publish("hello", "1.0.0", built)
    _installed(acme, WS, "hello", "1.0.0", "k-install")
    sha = published["archive"]["sha256"] if blob == "archive" else published["manifestDigest"]
    _damage(stack, "t-acme", sha, how)
    assert run_maintenance(stack, clock.now() + INTERVAL + DAY)[how] == 1
    assert acme.get("/v1/packages/hello/versions/1.0.0").body["status"] == "unavailable"
    installed = acme.get(f"/v1/workspaces/{WS}/installations/hello")
    assert (installed.body["status"], installed.headers["etag"]) == ("needs_attention", '"2"')
    return published


@pytest.mark.parametrize(("how", "blob"), [("corrupt", "archive"), ("missing", "archive"), ("corrupt", "manifest")])
def test_given_a_release_the_scrub_made_unavailable_when_its_bytes_are_uploaded_again_then_it_is_published_again(
    stack, acme: Caller, how: str, blob: str
) -> None:
    built = build_from_files({"SKILL.md": b"worth keeping\n"})
    published = _rotted(stack, acme, built, how, blob)
    archive, manifest = published["archive"]["sha256"], published["manifestDigest"]

    session = acme.request_upload("hello", "1.0.0", built)
    assert session.status == 201, session.body  # not the unavailable release: a session that takes the bytes
    assert session.body["uploadRequired"] is True
    acme.put_archive(session.body, built.archive)
    upload = acme.complete_and_wait(session.body["uploadId"])

    assert upload["state"] == "published", upload
    release = acme.get("/v1/packages/hello/versions/1.0.0").body
    assert release["status"] == "published"
    assert release["manifest"]["files"][0]["path"] == "SKILL.md"
    assert hashlib.sha256(_object(stack, "t-acme", archive) or b"").hexdigest() == archive
    assert hashlib.sha256(_object(stack, "t-acme", manifest) or b"").hexdigest() == manifest
    for sha in (archive, manifest):
        assert "corruptAt" not in _blob_item(stack, "t-acme", sha)
    installed = acme.get(f"/v1/workspaces/{WS}/installations/hello")
    assert (installed.body["status"], installed.headers["etag"]) == ("active", '"3"')
    assert [e["installationId"] for e in acme.get(f"/v1/workspaces/{WS}/resolved").body["items"]] == ["hello"]
    assert acme.get("/v1/packages/hello/versions/1.0.0/archive").status == 200
    _installed(acme, "ws-other", "hello", "1.0.0", "k-other")
    assert used_bytes(stack, "t-acme") == _stored_blob_bytes(stack, "t-acme")  # the reservation became nothing new
    # the next checks find both blobs healthy (due one interval after the heal)
    assert sweep_kinds((DueKind.BLOB,), clock.now() + 2 * INTERVAL + 2 * DAY) == Counter({"healthy": 2})
    # and the same content again is the idempotent success it was before the rot
    assert acme.request_upload("hello", "1.0.0", built).status == 200


def test_given_the_same_content_under_a_new_version_when_its_blob_is_unavailable_then_the_bytes_are_taken_again(
    stack, acme: Caller
) -> None:
    built = build_from_files({"SKILL.md": b"shared bytes\n"})
    published = _rotted(stack, acme, built)
    archive = published["archive"]["sha256"]

    session = acme.request_upload("hello", "1.0.1", built).body
    assert session["uploadRequired"] is True  # not "no upload needed" for bytes that failed their check
    acme.put_archive(session, built.archive)
    upload = acme.complete_and_wait(session["uploadId"])

    assert upload["state"] == "published", upload
    assert acme.get("/v1/packages/hello/versions/1.0.1").body["status"] == "published"
    assert hashlib.sha256(_object(stack, "t-acme", archive) or b"").hexdigest() == archive
    assert "corruptAt" not in _blob_item(stack, "t-acme", archive)
    assert set(_blob_item(stack, "t-acme", archive)["releases"]["SS"]) == {"hello@1.0.0", "hello@1.0.1"}
    _installed(acme, "ws-other", "hello", "1.0.1", "k-new")
    assert used_bytes(stack, "t-acme") == _stored_blob_bytes(stack, "t-acme")


def test_given_a_heal_whose_bytes_do_not_verify_then_it_is_refused_and_changes_nothing_but_the_reservation(
    stack, acme: Caller
) -> None:
    built = build_from_files({"SKILL.md": b"honest\n"})
    published = _rotted(stack, acme, built)
    before = used_bytes(stack, "t-acme")

    session = acme.request_upload("hello", "1.0.0", built).body
    acme.put_archive(session, build_from_files({"SKILL.md": b"tampered\n"}).archive)
    upload = acme.complete_and_wait(session["uploadId"])

    assert (upload["state"], upload["rejection"]["code"]) == ("rejected", "archive_rejected")
    assert acme.get("/v1/packages/hello/versions/1.0.0").body["status"] == "unavailable"
    assert _object(stack, "t-acme", published["archive"]["sha256"]) == b"rotted bytes"  # nothing written over it
    assert "corruptAt" in _blob_item(stack, "t-acme", published["archive"]["sha256"])
    assert acme.get(f"/v1/workspaces/{WS}/installations/hello").body["status"] == "needs_attention"
    assert used_bytes(stack, "t-acme") == before  # the reservation is returned


def test_given_a_heal_whose_installations_were_not_restored_then_the_sweep_or_their_next_operation_restores_them(
    stack, acme: Caller, monkeypatch: pytest.MonkeyPatch
) -> None:
    built = build_from_files({"SKILL.md": b"later\n"})
    _rotted(stack, acme, built)
    # the publish dies right after its transaction, before it brings the installations back itself
    monkeypatch.setattr(publication.scrub, "restore_holders", lambda *args: 0)

    assert acme.publish("hello", "1.0.0", built)["state"] == "published"
    assert acme.get(f"/v1/workspaces/{WS}/installations/hello").body["status"] == "needs_attention"
    monkeypatch.undo()

    swept = run_maintenance(stack, clock.now() + 60)

    assert swept["done"] >= 1
    installed = acme.get(f"/v1/workspaces/{WS}/installations/hello")
    assert (installed.body["status"], installed.headers["etag"]) == ("active", '"3"')


def test_given_an_installation_needing_attention_after_a_heal_then_its_next_operation_makes_it_active(
    stack, acme: Caller, monkeypatch: pytest.MonkeyPatch
) -> None:
    built = build_from_files({"SKILL.md": b"repair me\n"})
    _rotted(stack, acme, built)
    monkeypatch.setattr(publication.scrub, "restore_holders", lambda *args: 0)
    assert acme.publish("hello", "1.0.0", built)["state"] == "published"
    monkeypatch.undo()

    repaired = acme.wait_settled(WS, acme.install(WS, "hello", "hello", "1.0.0", key="k-repair", if_match='"2"'))

    assert repaired["outcome"] == {"result": "succeeded"}, repaired
    assert repaired["kind"] == "repair"
    assert acme.get(f"/v1/workspaces/{WS}/installations/hello").body["status"] == "active"
    assert scrub.restore_holders("t-acme", "hello", "1.0.0", clock.now()) == 0  # nothing left to restore
