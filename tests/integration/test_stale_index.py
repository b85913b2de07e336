"""The sweeps read the due index, a global secondary index, and every read of one is eventually consistent: a page
may show an item as it was before a write the table already holds. No sweep action may take an irreversible step on
such an image (``devstack.faults.stale_index`` answers the index's pages from an older picture of it).
"""

from __future__ import annotations

import json
from typing import Any

import boto3
import pytest

import devstack
from devstack.api import LocalApi
from devstack.caller import Caller
from devstack.faults import stale_index
from packyard import clock, config
from packyard.operations import settlement
from packyard.store import due, workflows
from packyard.store.due import DueKind
from packyard_cli.build import build_from_files
from tests.support import stacks
from tests.support.callers import used_bytes
from tests.support.sweeping import committed_not_settled, sweep_kinds

stack = stacks.stack
fresh_config = stacks.fresh_config

HOUR = 3600
WS = "ws-stale"
DAY = 24 * HOUR


def _staged(stack: devstack.Stack, tenant: str) -> list[str]:
    listed = boto3.client("s3").list_objects_v2(Bucket=stack.bucket_name, Prefix=f"uploads/{tenant}/")
    return [o["Key"] for o in listed.get("Contents", [])]


def test_the_stale_index_answers_pages_from_its_picture_while_the_table_moves_on(stack: devstack.Stack) -> None:
    # Given a session in the due index, pictured, and then completed (due again only at its check time)
    caller = Caller(LocalApi(stack), "t-stale-picture")
    built = build_from_files({"SKILL.md": b"v1\n"})
    session = caller.request_upload("hello", "1.0.0", built)
    caller.put_archive(session.body, built.archive)
    deadline = clock.now() + config.limits().upload_ttl_seconds
    shard = due.shard_of(session.body["uploadId"])
    with stale_index(stack.table_name, due.INDEX) as stale:
        with pytest.MonkeyPatch.context() as patched:
            patched.setattr(workflows, "start", lambda *args: "not started in this test")
            assert caller.post(f"/v1/uploads/{session.body['uploadId']}/complete").status == 202
        # When the index is read at the deadline
        items, _ = due.query(DueKind.UPLOAD, shard, deadline + 1, limit=50, cursor=None)
    fresh, _ = due.query(DueKind.UPLOAD, shard, deadline + 1, limit=50, cursor=None)

    # Then the stale page shows the session as it was (awaiting upload), the fresh one does not show it at all
    def states(page: list[dict[str, Any]]) -> dict[str, str]:
        return {i["uploadId"]["S"]: i["state"]["S"] for i in page if i["tenant"]["S"] == caller.tenant}

    assert states(items) == {session.body["uploadId"]: "awaiting_upload"}
    assert states(fresh) == {}
    assert stale.pages == 1


def test_a_stale_page_never_deletes_the_staging_of_an_upload_completed_before_its_deadline(
    stack: devstack.Stack,
) -> None:
    # Given a session whose client uploads and completes it just before its deadline, while the due index still
    # shows it awaiting upload (its verification has not read the staged archive yet)
    caller = Caller(LocalApi(stack), "t-stale-upload")
    built = build_from_files({"SKILL.md": b"completed in time\n"})
    session = caller.request_upload("hello", "1.0.0", built)
    upload_id = session.body["uploadId"]
    caller.put_archive(session.body, built.archive)
    deadline = clock.now() + config.limits().upload_ttl_seconds
    with stale_index(stack.table_name, due.INDEX) as stale:
        with pytest.MonkeyPatch.context() as patched:
            patched.setattr(workflows, "start", lambda *args: "started below")
            assert caller.post(f"/v1/uploads/{upload_id}/complete").status == 202
        # When the expiry sweep runs past the deadline on the stale page
        counts = sweep_kinds([DueKind.UPLOAD], deadline + 1)
    assert stale.pages > 0
    # Then it changes nothing: the session is verifying, its staged objects are there
    assert counts["raced"] == 1 and counts["expired"] == 0, counts
    assert caller.get(f"/v1/uploads/{upload_id}").body["state"] == "verifying"
    assert len(_staged(stack, caller.tenant)) == 2
    # And its verification publishes it
    final = caller.complete_and_wait(upload_id)  # the execution starts now (by name: the one complete started)
    assert final["state"] == "published", final
    assert caller.get("/v1/packages/hello/versions/1.0.0").body["status"] == "published"


def test_an_upload_expired_by_a_read_has_its_staging_deleted_by_the_next_sweep(stack: devstack.Stack) -> None:
    # Given a session past its deadline that a read expired (GET answers it expired; a read deletes nothing)
    caller = Caller(LocalApi(stack), "t-stale-read-expired")
    built = build_from_files({"SKILL.md": b"late\n"})
    session = caller.request_upload("hello", "1.0.0", built)
    caller.put_archive(session.body, built.archive)
    later = clock.now() + config.limits().upload_ttl_seconds + 1
    with pytest.MonkeyPatch.context() as patched:
        patched.setattr(clock, "now", lambda: later)
        assert caller.post(f"/v1/uploads/{session.body['uploadId']}/complete").body["code"] == "upload_expired"
    assert len(_staged(stack, caller.tenant)) == 2 and used_bytes(stack, caller.tenant) == 0
    # When the sweep runs
    counts = sweep_kinds([DueKind.UPLOAD], later + 60)
    # Then the staged objects are gone and the session left the due index
    assert counts["staging_discarded"] == 1, counts
    assert _staged(stack, caller.tenant) == []
    assert sweep_kinds([DueKind.UPLOAD], later + DAY)["staging_discarded"] == 0


def test_a_stale_page_never_marks_the_releases_of_a_blob_reclaimed_since_unavailable(
    stack: devstack.Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a yanked release whose blobs are pictured in the due index (due for their integrity check), then given
    # back and reclaimed (records and objects gone)
    monkeypatch.setenv("PACKYARD_SCRUB_INTERVAL_SECONDS", str(HOUR))
    config.reset()
    caller = Caller(LocalApi(stack), "t-stale-blob")
    caller.publish("hello", "1.0.0", build_from_files({"SKILL.md": b"given back\n" * 50}))
    assert caller.delete("/v1/packages/hello/versions/1.0.0").status == 200
    at = clock.now() + 2 * HOUR
    with stale_index(stack.table_name, due.INDEX) as picture:
        # this tenant's items only: the stack is shared, and other tests' blobs reclaimed since would race too
        pictured = [item for item in picture.items if caller.tenant in json.dumps(item)]
    sweep_kinds([DueKind.JOB], at)
    reclaimed = sweep_kinds([DueKind.BLOB], at)
    assert reclaimed["reclaimed"] == 2, reclaimed
    # When the scrub reads a stale page, which still shows the blob records due for their check
    with stale_index(stack.table_name, due.INDEX) as stale:
        stale.items = pictured
        counts = sweep_kinds([DueKind.BLOB], at)
    # Then nothing is marked: the release stays yanked, not unavailable
    assert counts["raced"] == 2, counts
    assert caller.get("/v1/packages/hello/versions/1.0.0").body["status"] == "yanked"


@pytest.mark.parametrize("commit", ["settles", "leaves it committed"])
def test_a_stale_page_of_an_operation_settles_it_as_it_is_stored_not_as_the_page_shows_it(
    stack: devstack.Stack, commit: str
) -> None:
    # Given an install waiting for consent, pictured in the due index (its lease: the consent deadline), then
    # approved and committed, its Settle failing past its retries (the workflow ended). The commit settles it (the
    # operation settled succeeded); or, as commits did before "Commit settles" (docs/decisions.md), it leaves the
    # operation committed for the sweep
    caller = Caller(LocalApi(stack), f"t-stale-operation-{commit.split()[0]}")
    caller.publish("hello", "1.0.0", build_from_files({"SKILL.md": b"v1\n"}, permissions=[{"kind": "api_read"}]))

    def settlement_is_down(*args: object, **kwargs: object) -> dict[str, Any]:
        raise RuntimeError("settlement is down")

    with pytest.MonkeyPatch.context() as patched:
        patched.setattr(settlement, "settle_task", settlement_is_down)
        if commit == "leaves it committed":
            patched.setattr(settlement, "settled_as", committed_not_settled)
        admitted = caller.install(WS, "hello", "hello", "1.0.0", key="k-stale-op")
        waiting = caller.wait_for_consent(WS, admitted)
        assert waiting["state"] == "awaiting_consent"
        with stale_index(stack.table_name, due.INDEX) as picture:
            pictured = list(picture.items)
        assert caller.decide(WS, waiting, "approve").status == 200
        machine = stack.state_machine_arns["InstallStateMachine"]
        devstack.wait_for_execution(workflows.execution_arn(machine, admitted.body["operationId"]), timeout=60)
    path = f"/v1/workspaces/{WS}/operations/{admitted.body['operationId']}"
    assert caller.get(path).body["state"] == ("settled" if commit == "settles" else "committed")
    # When the sweep runs past the consent window on a page that still shows it waiting for consent
    with stale_index(stack.table_name, due.INDEX) as stale:
        stale.items = pictured
        counts = sweep_kinds([DueKind.OPERATION], clock.now() + 8 * DAY)
    # Then it is settled as what it is (its change landed: succeeded), not as a consent that expired; one the commit
    # settled already is left as it is
    assert counts["settled"] == (0 if commit == "settles" else 1), counts
    settled = caller.get(path).body
    assert (settled["state"], settled["outcome"]) == ("settled", {"result": "succeeded"}), settled
    assert caller.get(caller.installation_path(WS, "hello")).body["status"] == "active"
