"""Reclamation: yanked releases nothing holds give their blobs back, unreferenced blobs are removed ("remove if
unreferenced"), the ledger is credited exactly once, a publish racing the sweep wins, crashes converge, orphans go."""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections import Counter
from datetime import UTC, datetime
from typing import Any

import boto3
import pytest

import devstack
from devstack import lambdas
from devstack.caller import Caller
from devstack.faults import InjectedCrash, crash_after
from packyard import clock
from packyard.errors import ReleaseUnavailable
from packyard.maintenance import reclaim
from packyard.publishing import publication
from packyard.store import catalog, reclaims, workflows
from packyard_cli.build import build_from_files
from tests.support.callers import all_keys, used_bytes
from tests.support.sweeping import sweep_by_function

WS = "ws-reclaim"
TENANT = "t-acme"
EVENTS = devstack.ROOT / "events"
HOUR = 3600


def _iso(at: int) -> str:
    return datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _sweep(stack, at: int, kinds: tuple[str, ...] = ("job", "blob")) -> Counter[str]:
    return sweep_by_function(stack, at, kinds)


def _sweep_machine(stack, at: int) -> None:
    """The real maintenance state machine, as the schedule starts it."""
    event = json.loads((EVENTS / "schedule_sweep.json").read_text())
    event["time"] = _iso(at)
    sfn = boto3.client("stepfunctions")
    started = sfn.start_execution(
        stateMachineArn=stack.state_machine_arns["MaintenanceStateMachine"], input=json.dumps(event)
    )
    assert devstack.wait_for_execution(started["executionArn"], timeout=60)["status"] == "SUCCEEDED"


def _blob_item(stack, sha256: str) -> dict[str, Any] | None:
    item = boto3.client("dynamodb").get_item(
        TableName=stack.table_name,
        Key={"pk": {"S": f"TENANT#{TENANT}#BLOB#{sha256}"}, "sk": {"S": "BLOB"}},
        ConsistentRead=True,
    )
    found: dict[str, Any] | None = item.get("Item")
    return found


def _stored(stack, sha256: str) -> bool:
    return f"blobs/{TENANT}/sha256/{sha256}" in all_keys(stack, f"blobs/{TENANT}/")


def _blob_bytes(stack) -> int:
    s3 = boto3.client("s3")
    return sum(
        s3.head_object(Bucket=stack.bucket_name, Key=key)["ContentLength"]
        for key in all_keys(stack, f"blobs/{TENANT}/")
    )


def _shas(acme: Caller, package: str, version: str) -> tuple[str, str]:
    release = acme.get(f"/v1/packages/{package}/versions/{version}").body
    return release["archive"]["sha256"], release["manifestDigest"]


def _yank(acme: Caller, package: str, version: str) -> None:
    assert acme.delete(f"/v1/packages/{package}/versions/{version}").status == 200


def _settled(acme: Caller, admitted) -> dict[str, Any]:
    assert admitted.status == 202, admitted.body
    return acme.wait_settled(WS, admitted)


def _etag(acme: Caller, installation: str) -> str:
    return str(acme.get(f"/v1/workspaces/{WS}/installations/{installation}").headers["etag"])


def _files(tag: str) -> dict[str, bytes]:
    return {"SKILL.md": f"{tag}\n".encode(), "data.txt": tag.encode() * 50}


def test_given_a_yanked_release_nothing_holds_when_swept_then_its_blobs_go_and_the_ledger_is_credited_once(
    stack, acme: Caller
) -> None:
    acme.publish("gone", "1.0.0", build_from_files(_files("gone")))
    acme.publish("kept", "1.0.0", build_from_files(_files("kept")))
    gone, kept = _shas(acme, "gone", "1.0.0"), _shas(acme, "kept", "1.0.0")
    assert used_bytes(stack, TENANT) == _blob_bytes(stack) > 0
    _yank(acme, "gone", "1.0.0")

    _sweep_machine(stack, clock.now() + 60)
    _sweep_machine(stack, clock.now() + 120)  # swept twice: the second run finds nothing more to do

    assert not any(_stored(stack, sha) for sha in gone) and all(_stored(stack, sha) for sha in kept)
    assert [_blob_item(stack, sha) for sha in gone] == [None, None]
    assert used_bytes(stack, TENANT) == _blob_bytes(stack)  # credited exactly once: the kept release's bytes
    assert acme.get("/v1/packages/gone/versions/1.0.0").body["status"] == "yanked"  # the version stays used
    assert _sweep(stack, clock.now() + 180) == Counter()  # nothing is due any more


def test_given_a_yanked_release_an_installation_holds_then_it_is_kept_until_the_installation_moves_off_it(
    stack, acme: Caller
) -> None:
    for version in ("1.0.0", "1.1.0", "1.2.0"):
        acme.publish("held", version, build_from_files(_files(f"held {version}")))
    first = _shas(acme, "held", "1.0.0")
    assert _settled(acme, acme.install(WS, "held", "held", "1.0.0", key="k-install"))["outcome"]["result"] == (
        "succeeded"
    )
    assert catalog.release_holders(TENANT, "held", "1.0.0", limit=10, cursor=None) == ([(WS, "held")], None)
    _yank(acme, "held", "1.0.0")

    swept = _sweep(stack, clock.now() + 60)
    assert swept["held"] == 1 and all(_stored(stack, sha) for sha in first)  # the active release

    update = acme.install(WS, "held", "held", "1.1.0", key="k-update", if_match=_etag(acme, "held"))
    assert _settled(acme, update)["outcome"]["result"] == "succeeded"
    _sweep(stack, clock.now() + 120)
    assert all(_stored(stack, sha) for sha in first)  # still the previous one (the rollback target)

    moved = acme.install(WS, "held", "held", "1.2.0", key="k-update-2", if_match=_etag(acme, "held"))
    assert _settled(acme, moved)["outcome"]["result"] == "succeeded"
    assert catalog.release_holders(TENANT, "held", "1.0.0", limit=10, cursor=None) == ([], None)
    swept = _sweep(stack, clock.now() + 180) + _sweep(stack, clock.now() + 240)

    assert swept["released"] == 1 and swept["reclaimed"] == 2
    assert not any(_stored(stack, sha) for sha in first)
    assert all(_stored(stack, sha) for version in ("1.1.0", "1.2.0") for sha in _shas(acme, "held", version))
    assert used_bytes(stack, TENANT) == _blob_bytes(stack)


def test_given_an_uninstalled_installation_then_it_holds_nothing_and_its_yanked_release_is_reclaimed(
    stack, acme: Caller
) -> None:
    acme.publish("solo", "1.0.0", build_from_files(_files("solo")))
    _settled(acme, acme.install(WS, "solo", "solo", "1.0.0", key="k-install"))
    _yank(acme, "solo", "1.0.0")
    assert _sweep(stack, clock.now() + 60)["held"] == 1

    _settled(acme, acme.uninstall(WS, "solo", key="k-uninstall", if_match=_etag(acme, "solo")))
    _sweep(stack, clock.now() + 120)
    _sweep(stack, clock.now() + 180)

    assert all_keys(stack, f"blobs/{TENANT}/") == [] and used_bytes(stack, TENANT) == 0


def _unreferenced_archive(stack, acme: Caller, package: str, files: dict[str, bytes]) -> tuple[str, dict[str, Any]]:
    """``package``@1.0.0 published then yanked and given back: its archive unreferenced and due. Its due item."""
    acme.publish(package, "1.0.0", build_from_files(files))
    archive, _ = _shas(acme, package, "1.0.0")
    _yank(acme, package, "1.0.0")
    assert _sweep(stack, clock.now() + 60, kinds=("job",))["released"] == 1
    item = _blob_item(stack, archive)
    assert item is not None and item["refs"]["N"] == "0"
    return archive, item


def test_given_a_publish_of_identical_content_before_the_claim_then_the_publish_wins(stack, acme: Caller) -> None:
    files = _files("race before")
    archive, stale = _unreferenced_archive(stack, acme, "racy", files)
    blob_as_swept = catalog.blob_from_due(stale)  # what the sweep read, before its claim

    acme.publish("racy", "2.0.0", build_from_files(files))  # the same archive bytes: a reference again

    assert reclaim.reclaim_blob(blob_as_swept, clock.now() + 60) == "kept"
    assert _stored(stack, archive) and _blob_item(stack, archive)["refs"]["N"] == "1"  # type: ignore[index]
    _sweep(stack, clock.now() + 120)
    assert _stored(stack, archive)
    installed = _settled(acme, acme.install(WS, "racy", "racy", "2.0.0", key="k-install"))
    assert installed["outcome"] == {"result": "succeeded"}
    assert used_bytes(stack, TENANT) == _blob_bytes(stack)


def test_given_a_publish_of_identical_content_after_the_claim_then_it_waits_and_writes_the_blob_anew(
    stack, acme: Caller, monkeypatch: pytest.MonkeyPatch
) -> None:
    files = _files("race after")
    archive, stale = _unreferenced_archive(stack, acme, "racy", files)
    publish_waits = threading.Event()
    outcome: dict[str, Any] = {}

    class _Clock:
        @staticmethod
        def sleep(seconds: float) -> None:
            publish_waits.set()  # the publish met the claimed record and waits for the reclaim to finish
            time.sleep(seconds)

    monkeypatch.setattr(publication, "time", _Clock)
    delete = reclaim.blobs.delete

    def delete_once_the_publish_waits(key: str) -> None:
        def publish() -> None:
            try:
                outcome["release"] = acme.publish("racy", "2.0.0", build_from_files(files))
            except BaseException as exc:  # reported below
                outcome["error"] = exc

        worker = threading.Thread(target=publish)
        worker.start()
        outcome["worker"] = worker
        assert publish_waits.wait(60), "the publish never met the claimed blob"
        delete(key)

    monkeypatch.setattr(reclaim.blobs, "delete", delete_once_the_publish_waits)
    assert reclaim.reclaim_blob(catalog.blob_from_due(stale), clock.now() + 60) == "reclaimed"
    outcome["worker"].join(120)

    assert "error" not in outcome, outcome.get("error")
    assert outcome["release"]["state"] == "published"
    assert _stored(stack, archive) and _blob_item(stack, archive)["refs"]["N"] == "1"  # type: ignore[index]
    installed = _settled(acme, acme.install(WS, "racy", "racy", "2.0.0", key="k-install"))
    assert installed["outcome"] == {"result": "succeeded"}
    assert used_bytes(stack, TENANT) == _blob_bytes(stack)


@pytest.fixture
def shared_keeper(acme: Caller):
    """A release never yanked: its blobs must survive every sweep below."""
    acme.publish("keeper", "1.0.0", build_from_files(_files("keeper")))
    return _shas(acme, "keeper", "1.0.0")


def test_a_crash_at_every_aws_call_of_the_reclaim_actions_converges_and_never_deletes_a_referenced_blob(
    stack, acme: Caller, shared_keeper: tuple[str, str]
) -> None:
    k, crashed = 0, True
    while crashed:
        k += 1
        version = f"{k}.0.0"
        files = _files(f"crash {k}")
        acme.publish("doomed", version, build_from_files(files))
        # the same files (so doomed's archive) with another manifest (a permission more)
        acme.publish("sharer", version, build_from_files(files, permissions=[{"kind": "api_read"}]))
        doomed_archive, doomed_manifest = _shas(acme, "doomed", version)
        _yank(acme, "doomed", version)
        now = clock.now()
        release = catalog.find_release(TENANT, "doomed", version)
        assert release is not None

        with crash_after(k) as plan, contextlib.suppress(InjectedCrash):
            reclaim.release_blobs(release, now)
            for sha in (doomed_archive, doomed_manifest):
                item = _blob_item(stack, sha)
                if item is not None:
                    reclaim.reclaim_blob(catalog.blob_from_due(item), now)
        crashed = plan.crashed
        # a crash leaves everything referenced in place
        assert all(_stored(stack, sha) for sha in (*shared_keeper, doomed_archive, *_shas(acme, "sharer", version)))

        for later in (HOUR, 2 * HOUR):  # re-runs, past any claim
            _sweep(stack, now + later)

        assert not _stored(stack, doomed_manifest) and _blob_item(stack, doomed_manifest) is None
        assert _stored(stack, doomed_archive) and _blob_item(stack, doomed_archive)["refs"]["N"] == "1"  # type: ignore[index]
        assert all(_stored(stack, sha) for sha in shared_keeper)
        assert used_bytes(stack, TENANT) == _blob_bytes(stack)
    assert k > 6  # the actions made that many calls, each crashed once


@pytest.fixture
def no_executions(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str]]:
    """complete() records the execution it starts; here the test plays the state machine itself."""
    started: list[tuple[str, str]] = []
    monkeypatch.setattr(workflows, "start", lambda arn, name, payload: started.append((name, payload)) or name)
    return started


def _crashed_publish(stack, acme: Caller, package: str, files: dict[str, bytes], monkeypatch) -> dict[str, Any]:
    """A publish that wrote its blobs and died before its transaction, then was rejected (as its Catch does)."""
    built = build_from_files(files)
    session = acme.request_upload(package, "1.0.0", built).body
    acme.put_archive(session, built.archive)
    assert acme.post(f"/v1/uploads/{session['uploadId']}/complete").status == 202
    token = boto3.client("dynamodb").get_item(
        TableName=stack.table_name,
        Key={"pk": {"S": f"TENANT#{TENANT}#UPLOAD#{session['uploadId']}"}, "sk": {"S": "UPLOAD"}},
    )["Item"]["token"]["S"]
    event: dict[str, Any] = {"tenant": TENANT, "uploadId": session["uploadId"], "token": token}
    event["verify"] = lambdas.invoke_handler(stack.functions["VerifyFunction"], event)
    with monkeypatch.context() as patched:
        patched.setattr(catalog, "publish_release", _die)
        with pytest.raises(RuntimeError):
            lambdas.invoke_handler(stack.functions["PublishFunction"], event)
    event["error"] = {"Error": "RuntimeError", "Cause": json.dumps({"errorMessage": "the task died"})}
    assert lambdas.invoke_handler(stack.functions["RejectFunction"], event)["rejected"] is True
    return session


def _die(*args: Any, **kwargs: Any) -> None:
    raise RuntimeError("the task died before its transaction")


def test_given_an_orphan_blob_left_by_a_crashed_and_rejected_publish_when_swept_then_it_is_removed(
    stack, acme: Caller, no_executions, monkeypatch: pytest.MonkeyPatch
) -> None:
    _crashed_publish(stack, acme, "orphaned", _files("orphan"), monkeypatch)
    assert len(all_keys(stack, f"blobs/{TENANT}/")) == 2  # the manifest and the archive, no record
    assert used_bytes(stack, TENANT) == 0  # the reservation went back; the orphans were never counted

    swept = _sweep(stack, clock.now() + 60, kinds=("blob",))
    _sweep(stack, clock.now() + 120, kinds=("blob",))

    assert swept["orphan_reclaimed"] == 2
    assert all_keys(stack, f"blobs/{TENANT}/") == []
    assert used_bytes(stack, TENANT) == 0


def test_given_an_orphan_blob_then_a_publish_of_the_same_content_adopts_it_and_counts_its_bytes(
    stack, acme: Caller, no_executions, monkeypatch: pytest.MonkeyPatch
) -> None:
    files = _files("adopted")
    _crashed_publish(stack, acme, "adopter", files, monkeypatch)
    monkeypatch.undo()  # executions run again
    acme.publish("adopter", "1.0.1", build_from_files(files))
    archive, _ = _shas(acme, "adopter", "1.0.1")
    record = _blob_item(stack, archive)
    assert record is not None and (record["refs"]["N"], record["orphan"]["BOOL"]) == ("1", False)

    _sweep(stack, clock.now() + 60)

    assert _stored(stack, archive)
    assert used_bytes(stack, TENANT) == _blob_bytes(stack)  # the adopted blobs are counted


def test_a_publish_meeting_a_record_older_than_reference_counting_keeps_it_uncounted(stack, acme: Caller) -> None:
    files = _files("legacy")
    acme.publish("legacy", "1.0.0", build_from_files(files))
    archive, _ = _shas(acme, "legacy", "1.0.0")
    ddb = boto3.client("dynamodb")
    key = {"pk": {"S": f"TENANT#{TENANT}#BLOB#{archive}"}, "sk": {"S": "BLOB"}}
    ddb.update_item(TableName=stack.table_name, Key=key, UpdateExpression="REMOVE refs, generation")
    acme.publish("legacy", "1.0.1", build_from_files(files))
    _yank(acme, "legacy", "1.0.0")
    _yank(acme, "legacy", "1.0.1")

    _sweep(stack, clock.now() + 60)
    _sweep(stack, clock.now() + 120)

    assert _stored(stack, archive) and "refs" not in (_blob_item(stack, archive) or {})  # unknown: never reclaimed


def test_holders_list_by_page(stack, acme: Caller) -> None:
    acme.publish("popular", "1.0.0", build_from_files(_files("popular")))
    for n in range(3):
        _settled(acme, acme.install(WS, f"popular-{n}", "popular", "1.0.0", key=f"k-{n}"))

    first, cursor = catalog.release_holders(TENANT, "popular", "1.0.0", limit=2, cursor=None)
    rest, end = catalog.release_holders(TENANT, "popular", "1.0.0", limit=2, cursor=cursor)

    assert sorted(first + rest) == [(WS, f"popular-{n}") for n in range(3)] and end is None
    assert reclaims.has_holders(TENANT, "popular", "1.0.0")


def test_given_a_release_whose_blobs_were_given_back_when_an_earlier_admitted_install_commits_then_it_is_refused(
    stack, acme: Caller, monkeypatch: pytest.MonkeyPatch
) -> None:
    acme.publish("late", "1.0.0", build_from_files(_files("late")))
    monkeypatch.setattr(workflows, "start", lambda arn, name, payload: name)  # the test plays the install workflow
    admitted = acme.install(WS, "late", "late", "1.0.0", key="k-late")  # admitted; its workflow has not run yet
    assert admitted.status == 202, admitted.body
    _yank(acme, "late", "1.0.0")
    assert _sweep(stack, clock.now() + 60, kinds=("job",))["released"] == 1  # nothing held it: blobs given back
    task = {"tenant": TENANT, "workspace": WS, "installationId": "late", "operationId": admitted.body["operationId"]}
    planned = lambdas.invoke_handler(stack.functions["PlanningFunction"], task)

    with pytest.raises(ReleaseUnavailable) as refused:
        lambdas.invoke_handler(stack.functions["CommitFunction"], {**task, "plan": planned})
    # the workflow's Catch routes the refusal to Settle, which records it and takes back the commit's hold (its
    # holder was put before the commit: docs/decisions.md, "Commit settles")
    error = {"Error": "ReleaseUnavailable", "Cause": json.dumps({"errorMessage": str(refused.value)})}
    lambdas.invoke_handler(stack.functions["SettlementFunction"], {**task, "error": error})

    assert acme.get(f"/v1/workspaces/{WS}/installations/late").status == 404
    assert acme.get(f"/v1/workspaces/{WS}/operations/{admitted.body['operationId']}").body["state"] == "settled"
    assert catalog.release_holders(TENANT, "late", "1.0.0", limit=10, cursor=None) == ([], None)
