"""The integrity scrub (issue 8): blob records are due for a re-hash a scrub interval after their publish, then after
each check; a missing or corrupt blob makes its releases unavailable and their installations need attention, within
a bytes-per-page budget, safely twice."""

from __future__ import annotations

from collections import Counter
from typing import Any

import boto3
import pytest

import devstack
from devstack.caller import Caller
from packyard import clock, config
from packyard.errors import ClaimLost
from packyard.maintenance import scrub, sweeps
from packyard.store import catalog, due
from packyard.store.due import DueKind
from packyard_cli.build import build_from_files
from tests.support.sweeping import run_maintenance, sweep_kinds

WS = "ws-scrub"
DAY = 24 * 3600
INTERVAL = 7 * DAY
EVENTS = devstack.ROOT / "events"


def _blob_item(stack, tenant: str, sha256: str) -> dict[str, Any]:
    item: dict[str, Any] = boto3.client("dynamodb").get_item(
        TableName=stack.table_name, Key={"pk": {"S": f"TENANT#{tenant}#BLOB#{sha256}"}, "sk": {"S": "BLOB"}}
    )["Item"]
    return item


@pytest.fixture
def emitted(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    names: list[str] = []
    real = scrub.metrics.add_metric

    def record(*, name: str, **kwargs: Any) -> None:
        names.append(name)
        real(name=name, **kwargs)

    monkeypatch.setattr(scrub.metrics, "add_metric", record)
    return names


def test_given_a_published_release_then_its_blobs_are_due_for_a_check_one_interval_later_and_after_each_check(
    stack, acme: Caller
) -> None:
    published = acme.publish("hello", "1.0.0", build_from_files({"SKILL.md": b"v1\n"}))
    blobs = [published["archive"]["sha256"], published["manifestDigest"]]
    at_publish = {sha: _blob_item(stack, "t-acme", sha) for sha in blobs}
    for item in at_publish.values():
        assert item["releases"] == {"SS": ["hello@1.0.0"]}
        assert int(item["dueAt"]["S"]) - clock.now() in range(INTERVAL - 60, INTERVAL + 1)

    assert sweep_kinds((DueKind.BLOB,), clock.now() + DAY) == Counter()  # not due yet: nothing read
    later = clock.now() + INTERVAL + DAY
    assert sweep_kinds((DueKind.BLOB,), later)["healthy"] == 2

    for sha in blobs:
        item = _blob_item(stack, "t-acme", sha)
        assert (int(item["dueAt"]["S"]), int(item["checkedAt"]["N"])) == (later + INTERVAL, later)
        assert "corruptAt" not in item
    assert sweep_kinds((DueKind.BLOB,), later) == Counter()  # checked: due again only an interval later
    assert acme.get("/v1/packages/hello/versions/1.0.0").body["status"] == "published"


def test_given_the_same_archive_published_twice_then_its_blob_lists_both_releases(stack, acme: Caller) -> None:
    built = build_from_files({"SKILL.md": b"shared bytes\n"})
    first = acme.publish("hello", "1.0.0", built)
    acme.publish("other", "2.0.0", built)

    assert set(_blob_item(stack, "t-acme", first["archive"]["sha256"])["releases"]["SS"]) == {
        "hello@1.0.0",
        "other@2.0.0",
    }


def _damage(stack, tenant: str, sha256: str, how: str) -> None:
    s3 = boto3.client("s3")
    key = f"blobs/{tenant}/sha256/{sha256}"
    if how == "missing":
        s3.delete_object(Bucket=stack.bucket_name, Key=key)
    else:
        s3.put_object(Bucket=stack.bucket_name, Key=key, Body=b"rotted bytes of the same story")


@pytest.mark.parametrize("how", ["corrupt", "missing"])
def test_given_a_blob_that_rotted_in_s3_when_swept_then_its_release_is_unavailable_and_installs_of_it_need_attention(
    stack, acme: Caller, emitted: list[str], how: str
) -> None:
    v1 = acme.publish("hello", "1.0.0", build_from_files({"SKILL.md": b"v1\n"}))
    acme.publish("hello", "1.1.0", build_from_files({"SKILL.md": b"v1.1\n"}))
    assert acme.wait_settled(WS, acme.install(WS, "hello", "hello", "1.0.0", key="k-1"))["outcome"]["result"] == (
        "succeeded"
    )
    moved = acme.wait_settled(WS, acme.install(WS, "moved", "hello", "1.0.0", key="k-2"))
    assert moved["outcome"]["result"] == "succeeded"
    acme.wait_settled(WS, acme.install(WS, "moved", "hello", "1.1.0", key="k-3", if_match='"1"'))
    _damage(stack, "t-acme", v1["archive"]["sha256"], how)

    swept = run_maintenance(stack, clock.now() + INTERVAL + DAY)

    assert (swept[how], swept["healthy"]) == (1, 3)
    release = acme.get("/v1/packages/hello/versions/1.0.0")
    assert (release.status, release.body["status"]) == (200, "unavailable")
    assert acme.get("/v1/packages/hello/versions/1.1.0").body["status"] == "published"
    installed = acme.get(f"/v1/workspaces/{WS}/installations/hello")
    assert (installed.body["status"], installed.headers.get("etag")) == ("needs_attention", '"2"')
    assert acme.get(f"/v1/workspaces/{WS}/installations/moved").body["status"] == "active"  # on 1.1.0 now
    resolved = acme.get(f"/v1/workspaces/{WS}/resolved").body
    assert [entry["installationId"] for entry in resolved["items"]] == ["moved"]
    refused = acme.install("ws-other", "hello", "hello", "1.0.0", key="k-4")
    assert (refused.status, refused.body["code"]) == (409, "release_unavailable")
    assert refused.headers["content-type"].startswith("application/problem+json")
    assert acme.get("/v1/packages/hello/versions/1.0.0/archive").body["code"] == "release_unavailable"
    back = acme.wait_settled(WS, acme.rollback(WS, "moved", key="k-5", if_match='"2"'))
    assert back["outcome"]["code"] == "release_unavailable"
    assert emitted.count("BlobsCorrupt") == 1
    item = _blob_item(stack, "t-acme", v1["archive"]["sha256"])
    assert "corruptAt" in item

    # the next check finds it as bad as before: nothing more changes, no second alarm
    again = sweep_kinds((DueKind.BLOB,), clock.now() + 2 * INTERVAL + 2 * DAY)
    assert again[f"still_{how}"] == 1
    assert acme.get(f"/v1/workspaces/{WS}/installations/hello").headers.get("etag") == '"2"'
    assert _blob_item(stack, "t-acme", v1["archive"]["sha256"])["corruptAt"] == item["corruptAt"]
    assert emitted.count("BlobsCorrupt") == 1


def test_given_a_read_budget_then_a_page_stops_when_it_is_spent_and_the_next_page_resumes_after_it(
    stack, acme: Caller, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(due, "shard_of", lambda identity: 0)  # every blob in shard 0: one page would hold them all
    for n in range(3):
        acme.publish(f"pkg-{n}", "1.0.0", build_from_files({"SKILL.md": f"package {n}\n".encode()}))
    monkeypatch.setenv("PACKYARD_SCRUB_BYTES_PER_PAGE", "1")  # less than any blob: one check per page
    config.reset()
    at = clock.now() + INTERVAL + DAY
    try:
        pages = []
        cursor = None
        while True:
            page = sweeps.sweep(DueKind.BLOB, 0, at, cursor)
            pages.append(dict(page.counts))
            cursor = page.cursor
            if not cursor:
                break
    finally:
        monkeypatch.delenv("PACKYARD_SCRUB_BYTES_PER_PAGE")
        config.reset()

    assert pages == [{"healthy": 1, "deferred": 5 - n} for n in range(5)] + [{"healthy": 1}]
    assert sweeps.sweep(DueKind.BLOB, 0, at).counts == Counter()  # every blob checked exactly once


def test_given_two_sweeps_checking_the_same_blob_then_only_one_reschedules_it(stack, acme: Caller) -> None:
    published = acme.publish("hello", "1.0.0", build_from_files({"SKILL.md": b"v1\n"}))
    item = _blob_item(stack, "t-acme", published["archive"]["sha256"])
    blob = catalog.blob_from_due(item)
    at = clock.now() + INTERVAL + DAY

    assert scrub.check_blob(blob, at) == "healthy"
    with pytest.raises(ClaimLost):
        scrub.check_blob(blob, at + 60)  # read at the same due time: the first one moved it on
    assert int(_blob_item(stack, "t-acme", blob.sha256)["dueAt"]["S"]) == at + INTERVAL


def test_given_a_corrupt_blob_recorded_before_the_scrub_then_it_is_marked_and_logged_without_releases(
    stack, acme: Caller
) -> None:
    published = acme.publish("hello", "1.0.0", build_from_files({"SKILL.md": b"v1\n"}))
    sha = published["archive"]["sha256"]
    boto3.client("dynamodb").update_item(
        TableName=stack.table_name,
        Key={"pk": {"S": f"TENANT#t-acme#BLOB#{sha}"}, "sk": {"S": "BLOB"}},
        UpdateExpression="REMOVE releases",
    )
    _damage(stack, "t-acme", sha, "corrupt")

    assert scrub.check_blob(catalog.blob_from_due(_blob_item(stack, "t-acme", sha)), clock.now()) == "corrupt"
    assert "corruptAt" in _blob_item(stack, "t-acme", sha)
    assert acme.get("/v1/packages/hello/versions/1.0.0").body["status"] == "published"  # nothing to mark: logged


def test_given_a_release_marked_unavailable_after_an_install_was_planned_then_its_commit_is_refused(
    stack, acme: Caller, monkeypatch: pytest.MonkeyPatch
) -> None:
    from packyard.errors import ReleaseUnavailable
    from packyard.operations import commit, planning
    from packyard.store import workflows

    acme.publish("hello", "1.0.0", build_from_files({"SKILL.md": b"v1\n"}))
    monkeypatch.setattr(workflows, "start", lambda *args: "the workflow is run by hand below")
    op_id = acme.install(WS, "hello", "hello", "1.0.0", key="k-race").body["operationId"]
    planned = planning.plan_task("t-acme", WS, op_id)

    # the scrub marks the release between Plan and Commit (before it walks the release's holders)
    assert catalog.mark_release_unavailable("t-acme", "hello", "1.0.0", clock.now())
    with pytest.raises(ReleaseUnavailable):
        commit.commit_task("t-acme", WS, op_id, planned["version"], "hello")
    assert acme.get(f"/v1/workspaces/{WS}/installations/hello").status == 404


def test_given_blob_records_written_before_the_scrub_when_backfilled_then_they_are_checked_and_know_their_releases(
    stack, acme: Caller
) -> None:
    from packyard.maintenance import backfill

    built = build_from_files({"SKILL.md": b"old bytes\n"})
    first = acme.publish("hello", "1.0.0", built)
    acme.publish("other", "1.0.0", built)  # shares both blobs
    blobs = [first["archive"]["sha256"], first["manifestDigest"]]
    for sha in blobs:  # as a record written before the scrub: no releases, no due time
        boto3.client("dynamodb").update_item(
            TableName=stack.table_name,
            Key={"pk": {"S": f"TENANT#t-acme#BLOB#{sha}"}, "sk": {"S": "BLOB"}},
            UpdateExpression="REMOVE releases, dueShard, dueAt",
        )
    now = clock.now()

    done = backfill.backfill_all(now, limit=3)
    again = backfill.backfill_all(now, limit=3)

    for sha in blobs:  # the manifest (files, permissions, metadata) is shared too
        assert set(_blob_item(stack, "t-acme", sha)["releases"]["SS"]) == {"hello@1.0.0", "other@1.0.0"}
    for sha in blobs:
        assert int(_blob_item(stack, "t-acme", sha)["dueAt"]["S"]) == backfill.first_check_at(sha, now)
    assert done["blob_scheduled"] == 2 and again["blob_scheduled"] == 0  # the second pass changes nothing
    _damage(stack, "t-acme", blobs[0], "corrupt")
    assert sweep_kinds((DueKind.BLOB,), now + INTERVAL)["corrupt"] == 1
    assert acme.get("/v1/packages/other/versions/1.0.0").body["status"] == "unavailable"
