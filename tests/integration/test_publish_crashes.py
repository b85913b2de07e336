"""Crash at every AWS call of each publish-flow handler, then retry: every run converges.

The handlers are called directly (no state machine, so no real Retry waits); the retry is what Step Functions'
Retry or a resending client would do. After convergence: one release, the upload settled, the ledger equal to the
bytes of retained blobs, and no reservation left behind.
"""

from __future__ import annotations

import contextlib

import boto3
import pytest

from devstack import lambdas
from devstack.faults import InjectedCrash, crash_after
from packyard.store import workflows
from packyard_cli.build import build_from_files
from tests.support.callers import all_keys, release_items, used_bytes

MAX_CALLS = 40


@pytest.fixture
def no_executions(monkeypatch):
    """complete() records the execution it starts; here the test plays the state machine itself."""
    started: list[tuple[str, str]] = []
    monkeypatch.setattr(workflows, "start", lambda arn, name, payload: started.append((name, payload)) or name)
    return started


def _blob_bytes(stack, tenant):
    s3 = boto3.client("s3", region_name=stack.region)
    return sum(
        s3.head_object(Bucket=stack.bucket_name, Key=key)["ContentLength"]
        for key in all_keys(stack, f"blobs/{tenant}/")
    )


def _task(stack, name, event):
    return lambdas.invoke_handler(stack.functions[name], event)


def _verifying_upload(acme, version, built):
    session = acme.request_upload("crashy", version, built).body
    acme.put_archive(session, built.archive)
    assert acme.post(f"/v1/uploads/{session['uploadId']}/complete").status == 202
    return session["uploadId"]


def _state_input(acme, upload_id, stack):
    item = boto3.client("dynamodb", region_name=stack.region).get_item(
        TableName=stack.table_name,
        Key={"pk": {"S": f"TENANT#t-acme#UPLOAD#{upload_id}"}, "sk": {"S": "UPLOAD"}},
    )["Item"]
    return {"tenant": "t-acme", "uploadId": upload_id, "token": item["token"]["S"]}


def _assert_converged(acme, stack, versions):
    releases = release_items(stack, "t-acme")
    assert sorted(i["sk"]["S"] for i in releases) == sorted(f"VERSION#{v}" for v in versions)
    assert used_bytes(stack, "t-acme") == _blob_bytes(stack, "t-acme")


def test_publish_task_converges_after_a_crash_at_every_call(acme, stack, no_executions):
    published = []
    for k in range(1, MAX_CALLS):
        version = f"1.0.{k}"
        built = build_from_files({"SKILL.md": f"crash point {k}\n".encode()})
        upload_id = _verifying_upload(acme, version, built)
        event = _state_input(acme, upload_id, stack)
        event["verify"] = _task(stack, "VerifyFunction", event)
        assert event["verify"]["verdict"] == "accepted"

        with crash_after(k) as plan, contextlib.suppress(InjectedCrash):
            _task(stack, "PublishFunction", event)
        result = _task(stack, "PublishFunction", event)  # Step Functions' Retry
        again = _task(stack, "PublishFunction", event)  # and a duplicate delivery for good measure

        published.append(version)
        assert result["release"]["version"] == version == again["release"]["version"]
        assert acme.get(f"/v1/uploads/{upload_id}").body["state"] == "published"
        _assert_converged(acme, stack, published)
        if not plan.crashed:
            break  # k exceeded the number of calls publish makes: every crash point is covered
    assert k > 3, "publish made suspiciously few AWS calls"


def test_reject_task_converges_after_a_crash_at_every_call(acme, stack, no_executions):
    for k in range(1, MAX_CALLS):
        built = build_from_files({"SKILL.md": f"honest {k}\n".encode()})
        tampered = build_from_files({"SKILL.md": f"tampered {k}\n".encode()}).archive
        session = acme.request_upload("crashy", f"2.0.{k}", built).body
        acme.put_archive(session, tampered)
        acme.post(f"/v1/uploads/{session['uploadId']}/complete")
        event = _state_input(acme, session["uploadId"], stack)
        event["verify"] = _task(stack, "VerifyFunction", event)
        assert event["verify"]["verdict"] == "rejected"

        with crash_after(k) as plan, contextlib.suppress(InjectedCrash):
            _task(stack, "RejectFunction", event)
        _task(stack, "RejectFunction", event)

        upload = acme.get(f"/v1/uploads/{session['uploadId']}").body
        assert upload["state"] == "rejected"
        assert upload["rejection"]["subCode"] in ("digest_mismatch", "size_mismatch")
        assert release_items(stack, "t-acme") == []
        assert used_bytes(stack, "t-acme") == 0
        if not plan.crashed:
            break
    assert k > 2


def test_complete_converges_after_a_crash_at_every_call_when_the_client_resends(acme, stack, no_executions):
    for k in range(1, MAX_CALLS):
        built = build_from_files({"SKILL.md": f"complete {k}\n".encode()})
        session = acme.request_upload("crashy", f"3.0.{k}", built).body
        acme.put_archive(session, built.archive)
        no_executions.clear()

        with crash_after(k) as plan, contextlib.suppress(InjectedCrash):
            acme.post(f"/v1/uploads/{session['uploadId']}/complete")
        resent = acme.post(f"/v1/uploads/{session['uploadId']}/complete")

        assert resent.status == 202
        assert resent.body["state"] == "verifying"
        assert no_executions and all(name == session["uploadId"] for name, _ in no_executions)
        if not plan.crashed:
            break
    assert k > 2


def test_create_upload_crash_leaves_no_reservation_without_a_session(acme, stack):
    built = build_from_files({"SKILL.md": b"create crash\n"})
    for k in range(1, MAX_CALLS):
        with crash_after(k) as plan, contextlib.suppress(InjectedCrash):
            acme.request_upload("crashy", "4.0.0", built)
        if not plan.crashed:
            break
    # every session that exists holds exactly its reservation; nothing else is reserved
    ddb = boto3.client("dynamodb", region_name=stack.region)
    sessions = [i for i in ddb.scan(TableName=stack.table_name)["Items"] if i["sk"]["S"] == "UPLOAD"]
    assert used_bytes(stack, "t-acme") == sum(int(i["reservedBytes"]["N"]) for i in sessions)


def test_the_file_pack_is_complete_whatever_call_the_publish_crashed_at(acme, stack, no_executions, monkeypatch):
    """Issue 22, item 1: the file pack (and a large file's own object) is written with the archive blob; a crash at
    any call of Publish, then its retry, leaves a pack from which every file reads byte-identical, and nothing under
    files/ but the objects of published archives."""
    from packyard.publishing import file_pack, files

    monkeypatch.setattr(file_pack, "INLINE_MAX_BYTES", 64)  # a large file without megabytes of test data
    published: dict[str, dict[str, bytes]] = {}
    for k in range(1, MAX_CALLS):
        version = f"5.0.{k}"
        content = {"SKILL.md": f"pack {k}\n".encode(), "data/large.bin": f"{k:08d}".encode() * 16}
        built = build_from_files(content)
        upload_id = _verifying_upload(acme, version, built)
        event = _state_input(acme, upload_id, stack)
        event["verify"] = _task(stack, "VerifyFunction", event)

        with crash_after(k) as plan, contextlib.suppress(InjectedCrash):
            _task(stack, "PublishFunction", event)
        _task(stack, "PublishFunction", event)

        published[built.archive_sha256] = content
        files.forget_cached()
        for path, data in content.items():
            found = files.release_file("t-acme", "crashy", version, path)
            got = found.content if found.content is not None else _fetch(found.url)
            assert got == data, (k, path)
        derived = {key.split("/")[2] for key in all_keys(stack, "files/t-acme/")}
        assert derived == set(published)
        if not plan.crashed:
            break
    assert k > 5


def _fetch(url: str | None) -> bytes:
    import requests

    assert url is not None
    return requests.get(url, timeout=30).content
