"""Crash at every AWS call of a healing publish, then retry (issue 19, Bad input): whatever call it dies after, the
release is either still ``unavailable`` or published with both blobs reading as their digests, never a release that
reads as published over a missing or corrupt blob; the retry (Step Functions' Retry, and the sweep for the
installations) converges on the healed release, its installation active and the ledger equal to the stored bytes.

The Publish handler is called directly (no state machine, so no real Retry waits), as in test_publish_crashes.py.
"""

from __future__ import annotations

import contextlib
import hashlib
from typing import Any

import boto3
import pytest

from devstack import lambdas
from devstack.caller import Caller
from devstack.faults import InjectedCrash, crash_after
from packyard import clock
from packyard.maintenance import scrub
from packyard.store import workflows
from packyard.store.due import DueKind
from packyard_cli.build import build_from_files
from tests.support.callers import all_keys, used_bytes
from tests.support.sweeping import sweep_kinds

MAX_CALLS = 40
WS = "ws-heal-crash"
TENANT = "t-acme"


def _object_sha(stack, sha256: str) -> str | None:
    s3 = boto3.client("s3", region_name=stack.region)
    try:
        body = s3.get_object(Bucket=stack.bucket_name, Key=f"blobs/{TENANT}/sha256/{sha256}")["Body"].read()
    except s3.exceptions.NoSuchKey:
        return None
    return hashlib.sha256(body).hexdigest()


def _item(stack, pk: str, sk: str) -> dict[str, Any]:
    item: dict[str, Any] = boto3.client("dynamodb", region_name=stack.region).get_item(
        TableName=stack.table_name, Key={"pk": {"S": pk}, "sk": {"S": sk}}, ConsistentRead=True
    )["Item"]
    return item


def _stored_blob_bytes(stack) -> int:
    s3 = boto3.client("s3", region_name=stack.region)
    keys = all_keys(stack, f"blobs/{TENANT}/")
    return sum(s3.head_object(Bucket=stack.bucket_name, Key=key)["ContentLength"] for key in keys)


def _rotted_release(stack, acme: Caller, version: str, built: Any) -> dict[str, Any]:
    """crashy@<version> published and installed (real state machines), then its archive rotted and was found."""
    published = acme.publish("crashy", version, built)
    installed = acme.wait_settled(WS, acme.install(WS, f"i-{version}", "crashy", version, key=f"k-{version}"))
    assert installed["outcome"] == {"result": "succeeded"}
    sha = published["archive"]["sha256"]
    boto3.client("s3", region_name=stack.region).put_object(
        Bucket=stack.bucket_name, Key=f"blobs/{TENANT}/sha256/{sha}", Body=b"rotted"
    )
    scrub.found_unusable(TENANT, sha, clock.now(), found=("0" * 64, 6), release=("crashy", version), found_by="test")
    assert acme.get(f"/v1/packages/crashy/versions/{version}").body["status"] == "unavailable"
    return published


def _verified_heal(stack, acme: Caller, version: str, built: Any, mp: pytest.MonkeyPatch) -> dict[str, Any]:
    """A heal session of the same bytes, uploaded, completed and verified: the Publish task's input."""
    session = acme.request_upload("crashy", version, built).body
    acme.put_archive(session, built.archive)
    with mp.context() as patched:
        patched.setattr(workflows, "start", lambda arn, name, payload: name)  # the test plays the state machine
        assert acme.post(f"/v1/uploads/{session['uploadId']}/complete").status == 202
    token = _item(stack, f"TENANT#{TENANT}#UPLOAD#{session['uploadId']}", "UPLOAD")["token"]["S"]
    event: dict[str, Any] = {"tenant": TENANT, "uploadId": session["uploadId"], "token": token}
    event["verify"] = lambdas.invoke_handler(stack.functions["VerifyFunction"], event)
    assert event["verify"]["verdict"] == "accepted"
    return event


def _never_published_over_a_bad_blob(stack, version: str, published: dict[str, Any]) -> None:
    status = _item(stack, "TENANT#t-acme#PACKAGE#crashy", f"VERSION#{version}")["status"]["S"]
    if status == "unavailable":
        return
    assert status == "published"
    assert _object_sha(stack, published["archive"]["sha256"]) == published["archive"]["sha256"]
    assert _object_sha(stack, published["manifestDigest"]) == published["manifestDigest"]


def test_a_healing_publish_converges_after_a_crash_at_every_call(stack, acme: Caller) -> None:
    mp = pytest.MonkeyPatch()
    for k in range(1, MAX_CALLS):
        version = f"1.0.{k}"
        built = build_from_files({"SKILL.md": f"heal after crash point {k}\n".encode()})
        published = _rotted_release(stack, acme, version, built)
        event = _verified_heal(stack, acme, version, built, mp)

        with crash_after(k) as plan, contextlib.suppress(InjectedCrash):
            lambdas.invoke_handler(stack.functions["PublishFunction"], event)
        _never_published_over_a_bad_blob(stack, version, published)
        result = lambdas.invoke_handler(stack.functions["PublishFunction"], event)  # Step Functions' Retry
        again = lambdas.invoke_handler(stack.functions["PublishFunction"], event)  # a duplicate delivery
        sweep_kinds((DueKind.JOB,), clock.now() + 60)  # the restore job, for a crash after the transaction

        assert result["release"]["version"] == version == again["release"]["version"]
        assert acme.get(f"/v1/uploads/{event['uploadId']}").body["state"] == "published"
        assert acme.get(f"/v1/packages/crashy/versions/{version}").body["status"] == "published"
        _never_published_over_a_bad_blob(stack, version, published)
        blob = _item(stack, f"TENANT#{TENANT}#BLOB#{published['archive']['sha256']}", "BLOB")
        assert "corruptAt" not in blob
        assert acme.get(f"/v1/workspaces/{WS}/installations/i-{version}").body["status"] == "active"
        assert used_bytes(stack, TENANT) == _stored_blob_bytes(stack)
        if not plan.crashed:
            break  # k exceeded the number of calls a heal makes: every crash point is covered
    assert k > 5, "a healing publish made suspiciously few AWS calls"
