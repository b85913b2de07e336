"""Release holders outside the commit transaction (store/reclaims.hold_now, holdable, let_go_now, drop_hold) and the
reclaimer that tolerates stale holders (maintenance/reclaim.holds_release): each race is driven step by step through
the store functions, in the order it names."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

import boto3
import pytest

from devstack.caller import Caller
from packyard import clock
from packyard.maintenance import reclaim
from packyard.publishing.models import Release
from packyard.store import catalog, dynamo, reclaims, workflows
from packyard.store.dynamo import TransactionCancelled
from packyard.store.records import ReleaseHolder
from packyard_cli.build import build_from_files
from tests.support.callers import all_keys
from tests.support.metrics import emitted_metrics
from tests.support.sweeping import sweep_by_function

WS = "ws-holders"
TENANT = "t-acme"


def _files(tag: str) -> dict[str, bytes]:
    return {"SKILL.md": f"{tag}\n".encode(), "data.txt": tag.encode() * 50}


def _publish(acme: Caller, package: str, version: str = "1.0.0") -> tuple[str, str]:
    acme.publish(package, version, build_from_files(_files(f"{package} {version}")))
    body = acme.get(f"/v1/packages/{package}/versions/{version}").body
    return body["archive"]["sha256"], body["manifestDigest"]


def _yank(acme: Caller, package: str, version: str = "1.0.0") -> Release:
    assert acme.delete(f"/v1/packages/{package}/versions/{version}").status == 200
    release = reclaims.read_release(TENANT, package, version)
    assert release is not None and release.yanked_at is not None
    return release


def _settled(acme: Caller, admitted: Any) -> dict[str, Any]:
    assert admitted.status == 202, admitted.body
    op = acme.wait_settled(WS, admitted)
    assert op["outcome"] == {"result": "succeeded"}, op
    return op


def _etag(acme: Caller, installation: str) -> str:
    return str(acme.get(f"/v1/workspaces/{WS}/installations/{installation}").headers["etag"])


def _holder(
    package: str, installation: str, *, held_by: str | None = None, held_at: int | None = None, version: str = "1.0.0"
) -> ReleaseHolder:
    return ReleaseHolder(
        tenant=TENANT,
        package=package,
        version=version,
        workspace=WS,
        installation_id=installation,
        held_by=held_by,
        held_at=held_at,
    )


def _stored_holder(holder: ReleaseHolder) -> dict[str, Any] | None:
    """The holder item as stored (its plain values), or None."""
    pk, sk = reclaims.holder_key(holder)
    item = dynamo.get(pk, sk)
    return dynamo.unmarshal(item) if item else None


def _leave_holder(holder: ReleaseHolder) -> None:
    """A holder item left behind, as a let-go lost between the commit and it leaves one (written as is)."""
    pk, sk = reclaims.holder_key(holder)
    boto3.client("dynamodb").put_item(TableName=dynamo.table_name(), Item=dynamo.to_item(pk, sk, holder))


def _stored(stack: Any, sha256: str) -> bool:
    return f"blobs/{TENANT}/sha256/{sha256}" in all_keys(stack, f"blobs/{TENANT}/")


def _give_back_and_reclaim(release: Release, now: int) -> str:
    """The reclaimer on the yanked release, then (if it gave its blobs back) on each of its blobs."""
    outcome = reclaim.release_blobs(release, now)
    if outcome == "released":
        for blob in reclaims.read_blobs(TENANT, [release.archive_sha256, release.manifest_digest]).values():
            assert reclaim.reclaim_blob(blob, now) == "reclaimed"
    return outcome


@pytest.fixture
def in_flight(acme: Caller, monkeypatch: pytest.MonkeyPatch) -> Callable[[str, str], str]:
    """A function (installation, package) → operation id: an install admitted whose workflow does not run, so its
    operation holds the installation's slot (workflows start again after it)."""

    def admit(installation: str, package: str) -> str:
        with monkeypatch.context() as patched:
            patched.setattr(workflows, "start", lambda arn, name, payload: name)
            admitted = acme.install(WS, installation, package, "1.0.0", key=f"k-{installation}")
        assert admitted.status == 202, admitted.body
        return str(admitted.body["operationId"])

    return admit


# ---- hold_now against a give-back racing it ----------------------------------------------------------------------


def test_a_hold_put_after_the_reclaimers_query_fails_its_fence_by_the_bump(
    stack: Any, acme: Caller, in_flight: Callable[[str, str], str]
) -> None:
    archive, manifest = _publish(acme, "racing")
    op = in_flight("racer", "racing")
    release = _yank(acme, "racing")
    now = clock.now()
    read = reclaims.read_release(TENANT, "racing", "1.0.0")  # the reclaimer reads the release (its generation) ...
    assert read is not None
    assert reclaim.holds_release(read) == "free"  # ... and finds nobody holding it

    assert reclaims.hold_now(_holder("racing", "racer", held_by=op, held_at=1), strict=True)  # put, then the bump

    assert not reclaims.release_blobs(read, reclaims.read_blobs(TENANT, [archive, manifest]), now)  # fence failed
    assert _stored(stack, archive) and _stored(stack, manifest)
    assert reclaim.release_blobs(release, now) == "held"  # read again: the holder's operation is in flight
    current = reclaims.read_release(TENANT, "racing", "1.0.0")
    assert current is not None and current.blobs_released_at is None


def test_a_hold_put_after_the_release_was_read_is_seen_by_the_holders_query(
    stack: Any, acme: Caller, in_flight: Callable[[str, str], str]
) -> None:
    _publish(acme, "seen")
    op = in_flight("seer", "seen")
    _yank(acme, "seen")
    read = reclaims.read_release(TENANT, "seen", "1.0.0")  # the reclaimer reads the generation first
    assert read is not None

    holder = _holder("seen", "seer", held_by=op, held_at=1)
    pk, sk = reclaims.holder_key(holder)
    boto3.client("dynamodb").put_item(TableName=dynamo.table_name(), Item=dynamo.to_item(pk, sk, holder))  # (1)

    assert reclaim.holds_release(read) == "held"  # the query after the put sees it
    assert reclaims.hold_now(holder, strict=True)  # (1) again and (2): idempotent


def test_a_give_back_before_the_hold_refuses_the_strict_bump_and_cancels_a_commit_built_with_holdable(
    stack: Any, acme: Caller, in_flight: Callable[[str, str], str]
) -> None:
    _publish(acme, "late")
    op = in_flight("latecomer", "late")
    release = _yank(acme, "late")
    assert reclaim.release_blobs(release, clock.now()) == "released"  # nobody held it yet: blobs given back

    holder = _holder("late", "latecomer", held_by=op, held_at=1)
    assert not reclaims.hold_now(holder, strict=True)  # the bump's condition: blobsReleased
    assert _stored_holder(holder) is not None  # the holder stays, for the refusal's drop_hold
    assert reclaims.hold_now(holder, strict=False)  # a non-active hold only needs the release to exist

    marker = {"pk": {"S": f"TENANT#{TENANT}#TEST#holdable"}, "sk": {"S": "MARKER"}, "schemaVersion": {"N": "1"}}
    with pytest.raises(TransactionCancelled) as cancelled:
        dynamo.transact(
            [reclaims.holdable(TENANT, "late", "1.0.0"), {"Put": {"TableName": dynamo.table_name(), "Item": marker}}],
            step="test.holdable",
        )
    assert cancelled.value.failed(0) and not cancelled.value.failed(1)
    assert dynamo.get(marker["pk"]["S"], marker["sk"]["S"]) is None  # nothing of the transaction landed

    reclaims.drop_hold(holder, held_by=op)
    assert _stored_holder(holder) is None


def test_holdable_lets_a_transaction_through_while_the_release_has_its_blobs(stack: Any, acme: Caller) -> None:
    _publish(acme, "fine")
    marker = {"pk": {"S": f"TENANT#{TENANT}#TEST#holdable"}, "sk": {"S": "OK"}, "schemaVersion": {"N": "1"}}

    dynamo.transact(
        [reclaims.holdable(TENANT, "fine", "1.0.0"), {"Put": {"TableName": dynamo.table_name(), "Item": marker}}],
        step="test.holdable",
    )

    assert dynamo.get(marker["pk"]["S"], marker["sk"]["S"]) is not None
    with pytest.raises(TransactionCancelled):  # a release that does not exist is not holdable either
        dynamo.transact(
            [reclaims.holdable(TENANT, "fine", "9.9.9"), {"Put": {"TableName": dynamo.table_name(), "Item": marker}}],
            step="test.holdable.missing",
        )


def test_hold_now_stores_who_held_and_at_which_version_and_moves_the_generation(stack: Any, acme: Caller) -> None:
    _publish(acme, "counted")
    before = reclaims.read_release(TENANT, "counted", "1.0.0")
    assert before is not None
    holder = _holder("counted", "c-1", held_by="op-1", held_at=3)

    assert reclaims.hold_now(holder, strict=True)

    stored = _stored_holder(holder)
    assert stored is not None and (stored["heldBy"], stored["heldAt"]) == ("op-1", 3)
    after = reclaims.read_release(TENANT, "counted", "1.0.0")
    assert after is not None and after.hold_generation == before.hold_generation + 1
    with pytest.raises(ValueError):  # a hold before the commit must say whose it is
        reclaims.hold_now(_holder("counted", "c-2"), strict=True)


# ---- let_go_now and drop_hold ------------------------------------------------------------------------------------


def test_let_go_now_leaves_a_holder_a_later_operation_established(stack: Any, acme: Caller) -> None:
    _publish(acme, "again")
    newer = _holder("again", "a-1", held_by="op-later", held_at=5)
    assert reclaims.hold_now(newer, strict=True)

    reclaims.let_go_now(newer, through_version=4, yanked=False, now=clock.now())  # the commit of version 4

    assert _stored_holder(newer) is not None
    reclaims.let_go_now(newer, through_version=5, yanked=False, now=clock.now())
    assert _stored_holder(newer) is None
    reclaims.let_go_now(newer, through_version=5, yanked=False, now=clock.now())  # gone already: fine


def test_let_go_now_removes_a_holder_written_in_the_commit_transaction(stack: Any, acme: Caller) -> None:
    _publish(acme, "old")
    legacy = _holder("old", "old-1")
    # the items a commit transaction wrote before holds moved out of it (reclaims.hold: the holder and the bump)
    dynamo.transact(reclaims.hold(legacy, strict=True), step="test.legacy_hold")
    assert _stored_holder(legacy) == {
        "pk": f"TENANT#{TENANT}#PACKAGE#old",
        "sk": f"HOLDER#1.0.0#{WS}#old-1",
        "schemaVersion": 1,
        "tenant": TENANT,
        "package": "old",
        "version": "1.0.0",
        "workspace": WS,
        "installationId": "old-1",
    }  # no heldBy, no heldAt

    reclaims.let_go_now(legacy, through_version=2, yanked=False, now=clock.now())

    assert _stored_holder(legacy) is None


def test_let_go_now_of_a_yanked_release_makes_it_due_and_moves_its_generation(stack: Any, acme: Caller) -> None:
    _publish(acme, "due")
    holder = _holder("due", "d-1", held_by="op-1", held_at=1)
    assert reclaims.hold_now(holder, strict=True)
    yanked = _yank(acme, "due")
    now = clock.now() + 3600

    reclaims.let_go_now(holder, through_version=2, yanked=True, now=now)

    after = reclaims.read_release(TENANT, "due", "1.0.0")
    item = dynamo.get(*catalog.release_key(TENANT, "due", "1.0.0"))
    assert after is not None and item is not None
    assert after.hold_generation == yanked.hold_generation + 1
    assert item["dueAt"]["S"] == reclaims.release_due(after, now)["dueAt"]
    assert _stored_holder(holder) is None


def test_drop_hold_leaves_another_operations_hold(stack: Any, acme: Caller) -> None:
    _publish(acme, "shared")
    theirs = _holder("shared", "s-1", held_by="op-b", held_at=2)
    assert reclaims.hold_now(theirs, strict=True)

    reclaims.drop_hold(theirs, held_by="op-a")  # op-a's commit did not land; op-b holds the key now

    stored = _stored_holder(theirs)
    assert stored is not None and stored["heldBy"] == "op-b"
    reclaims.drop_hold(theirs, held_by="op-b")
    assert _stored_holder(theirs) is None
    reclaims.drop_hold(theirs, held_by="op-b")  # gone already: fine


def test_drop_hold_leaves_a_hold_whose_version_was_committed(stack: Any, acme: Caller) -> None:
    """A stale run of an operation put its holder over the hold of the one that committed that version (or its own
    other run committed it): its drop must not take the hold the installation relies on."""
    archive, _ = _publish(acme, "relied")
    _settled(acme, acme.install(WS, "rl-1", "relied", "1.0.0", key="k-install"))  # version 1 holds 1.0.0
    clobbered = _holder("relied", "rl-1", held_by="op-stale", held_at=1)
    assert reclaims.hold_now(clobbered, strict=True)  # the stale run's put, over the live holder

    reclaims.drop_hold(clobbered, held_by="op-stale")  # its commit was refused

    assert _stored_holder(clobbered) is not None
    release = _yank(acme, "relied")
    assert reclaim.release_blobs(release, clock.now()) == "held" and _stored(stack, archive)


def test_drop_hold_leaves_a_hold_while_another_operation_holds_the_slot(
    stack: Any, acme: Caller, in_flight: Callable[[str, str], str]
) -> None:
    """The slot's operation planned the same version and may rely on the key a stale run put its holder over."""
    archive, _ = _publish(acme, "planned")
    op = in_flight("p-1", "planned")
    assert reclaims.hold_now(_holder("planned", "p-1", held_by=op, held_at=1), strict=True)
    clobbered = _holder("planned", "p-1", held_by="op-stale", held_at=1)
    assert reclaims.hold_now(clobbered, strict=True)

    reclaims.drop_hold(clobbered, held_by="op-stale")

    assert _stored_holder(clobbered) is not None
    release = _yank(acme, "planned")  # and the reclaimer keeps it too: another operation is in the slot
    assert reclaim.release_blobs(release, clock.now()) == "held" and _stored(stack, archive)


def test_drop_hold_takes_back_the_hold_of_an_operation_refused_while_it_held_the_slot(
    stack: Any, acme: Caller, in_flight: Callable[[str, str], str]
) -> None:
    _publish(acme, "mine")
    op = in_flight("mi-1", "mine")
    holder = _holder("mine", "mi-1", held_by=op, held_at=1)
    assert reclaims.hold_now(holder, strict=True)

    reclaims.drop_hold(holder, held_by=op)

    assert _stored_holder(holder) is None


def test_hold_now_never_lowers_a_holders_version(stack: Any, acme: Caller) -> None:
    _publish(acme, "higher")
    later = _holder("higher", "hi-1", held_by="op-later", held_at=5)
    assert reclaims.hold_now(later, strict=True)
    before = reclaims.read_release(TENANT, "higher", "1.0.0")
    assert before is not None

    assert reclaims.hold_now(_holder("higher", "hi-1", held_by="op-older", held_at=2), strict=True)

    stored = _stored_holder(later)
    assert stored is not None and (stored["heldBy"], stored["heldAt"]) == ("op-later", 5)
    after = reclaims.read_release(TENANT, "higher", "1.0.0")
    assert after is not None and after.hold_generation == before.hold_generation + 1  # the bump was still made
    reclaims.let_go_now(later, through_version=4, yanked=False, now=clock.now())  # a let-go in between
    assert _stored_holder(later) is not None


# ---- the reclaimer and stale holders -----------------------------------------------------------------------------


def _sweep(stack: Any, at: int) -> Counter[str]:
    return sweep_by_function(stack, at)


def test_a_holder_of_an_installation_removed_since_is_dropped_and_the_blobs_are_given_back(
    stack: Any, acme: Caller
) -> None:
    archive, manifest = _publish(acme, "removed")
    install = _settled(acme, acme.install(WS, "r-1", "removed", "1.0.0", key="k-install"))
    _settled(acme, acme.uninstall(WS, "r-1", key="k-uninstall", if_match=_etag(acme, "r-1")))
    stale = _holder("removed", "r-1", held_by=install["operationId"], held_at=1)
    _leave_holder(stale)  # the uninstall's let-go was lost
    _yank(acme, "removed")

    with emitted_metrics() as seen:
        swept = _sweep(stack, clock.now() + 60)  # the sweeper function, as the schedule runs it

    assert (swept["released"], swept["reclaimed"], seen["StaleHoldersDropped"]) == (1, 2, 1)
    assert _stored_holder(stale) is None
    assert not _stored(stack, archive) and not _stored(stack, manifest)


def test_a_holder_of_an_installation_moved_to_other_releases_is_dropped(stack: Any, acme: Caller) -> None:
    shas = {version: _publish(acme, "moved", version) for version in ("1.0.0", "1.1.0", "1.2.0")}
    install = _settled(acme, acme.install(WS, "m-1", "moved", "1.0.0", key="k-install"))
    for n, version in enumerate(("1.1.0", "1.2.0")):
        _settled(acme, acme.install(WS, "m-1", "moved", version, key=f"k-update-{n}", if_match=_etag(acme, "m-1")))
    stale = _holder("moved", "m-1", held_by=install["operationId"], held_at=1)
    _leave_holder(stale)  # version 3 holds 1.2.0 and 1.1.0 (its previous); 1.0.0's let-go was lost
    release = _yank(acme, "moved")

    with emitted_metrics() as seen:
        assert _give_back_and_reclaim(release, clock.now()) == "released"

    assert seen["StaleHoldersDropped"] == 1
    assert not any(_stored(stack, sha) for sha in shas["1.0.0"])
    assert all(_stored(stack, sha) for version in ("1.1.0", "1.2.0") for sha in shas[version])


def test_a_holder_whose_operation_holds_the_slot_is_kept(
    stack: Any, acme: Caller, in_flight: Callable[[str, str], str]
) -> None:
    archive, _ = _publish(acme, "flying")
    op = in_flight("f-1", "flying")  # admitted, not yet committed: no installation, the slot is the operation's
    holder = _holder("flying", "f-1", held_by=op, held_at=1)
    assert reclaims.hold_now(holder, strict=True)
    release = _yank(acme, "flying")

    with emitted_metrics() as seen:
        assert reclaim.release_blobs(release, clock.now()) == "held"

    assert seen["StaleHoldersDropped"] == 0
    assert _stored_holder(holder) is not None and _stored(stack, archive)


def test_a_holder_of_another_operation_is_kept_while_an_operation_holds_the_slot(
    stack: Any, acme: Caller, in_flight: Callable[[str, str], str]
) -> None:
    """The slot's operation planned the version of the holder (a stale run's, put over its own): it may commit on
    that key, so the installation being older than ``heldAt`` keeps the holder."""
    archive, _ = _publish(acme, "overlaid")
    in_flight("o-1", "overlaid")
    overlaid = _holder("overlaid", "o-1", held_by="op-stale", held_at=1)
    _leave_holder(overlaid)
    release = _yank(acme, "overlaid")

    assert reclaim.release_blobs(release, clock.now()) == "held"

    assert _stored_holder(overlaid) is not None and _stored(stack, archive)


def test_a_holder_of_an_installation_that_holds_the_release_is_kept(stack: Any, acme: Caller) -> None:
    archive, _ = _publish(acme, "active")
    _publish(acme, "active", "2.0.0")
    install = _settled(acme, acme.install(WS, "h-1", "active", "1.0.0", key="k-install"))
    update = acme.install(WS, "h-1", "active", "2.0.0", key="k-update", if_match=_etag(acme, "h-1"))
    _settled(acme, update)  # 1.0.0 is the previous release now: still held (the rollback target)
    held_before = _holder("active", "h-1", held_by=install["operationId"], held_at=1)
    _leave_holder(held_before)  # as a hold made before the commit leaves it (the slot is free: settled)
    release = _yank(acme, "active")

    with emitted_metrics() as seen:
        assert reclaim.release_blobs(release, clock.now()) == "held"

    assert seen["StaleHoldersDropped"] == 0
    assert _stored_holder(held_before) is not None and _stored(stack, archive)


def test_a_holder_written_before_heldBy_of_an_installation_not_holding_the_release_is_stale(
    stack: Any, acme: Caller
) -> None:
    archive, _ = _publish(acme, "legacy")
    _settled(acme, acme.install(WS, "l-1", "legacy", "1.0.0", key="k-install"))
    _settled(acme, acme.uninstall(WS, "l-1", key="k-uninstall", if_match=_etag(acme, "l-1")))
    legacy = _holder("legacy", "l-1")  # no heldBy, no heldAt
    _leave_holder(legacy)
    release = _yank(acme, "legacy")

    with emitted_metrics() as seen:
        assert _give_back_and_reclaim(release, clock.now()) == "released"

    assert seen["StaleHoldersDropped"] == 1 and not _stored(stack, archive)


def test_a_holder_written_before_heldBy_of_an_installation_holding_the_release_is_kept(
    stack: Any, acme: Caller
) -> None:
    archive, _ = _publish(acme, "kept")
    _settled(acme, acme.install(WS, "k-1", "kept", "1.0.0", key="k-install"))
    _leave_holder(_holder("kept", "k-1"))  # as a commit before heldBy wrote it: no heldBy/heldAt
    release = _yank(acme, "kept")

    assert reclaim.release_blobs(release, clock.now()) == "held"
    assert _stored_holder(_holder("kept", "k-1")) is not None and _stored(stack, archive)


def test_a_holder_whose_operation_never_committed_and_left_the_slot_is_stale(stack: Any, acme: Caller) -> None:
    """A refused first install whose drop_hold was lost: no installation (version 0 < heldAt 1) and no slot of its
    operation. The installation is read again after the slot (a commit, had it landed, would show): still none."""
    archive, _ = _publish(acme, "refused")
    stale = _holder("refused", "never", held_by="op-refused", held_at=1)
    assert reclaims.hold_now(stale, strict=True)
    release = _yank(acme, "refused")

    with emitted_metrics() as seen:
        assert _give_back_and_reclaim(release, clock.now()) == "released"

    assert seen["StaleHoldersDropped"] == 1 and not _stored(stack, archive)


def test_an_installation_read_before_the_holders_commit_is_read_again_after_the_slot(
    stack: Any, acme: Caller, monkeypatch: pytest.MonkeyPatch
) -> None:
    archive, _ = _publish(acme, "reread")
    install = _settled(acme, acme.install(WS, "rr-1", "reread", "1.0.0", key="k-install"))
    holder = _holder("reread", "rr-1", held_by=install["operationId"], held_at=1)
    _leave_holder(holder)
    release = _yank(acme, "reread")
    real = reclaims.holder_states

    def installation_read_before_the_commit(holders: list[ReleaseHolder]) -> list[tuple[Any, Any]]:
        # the batch read the installation before the commit landed (absent) and the slot after it settled (free)
        return [(None, slot) for _, slot in real(holders)]

    monkeypatch.setattr(reclaims, "holder_states", installation_read_before_the_commit)
    reads: list[ReleaseHolder] = []
    read_installation = reclaims.read_installation

    def counted_read(holder: ReleaseHolder) -> Any:
        reads.append(holder)
        return read_installation(holder)

    monkeypatch.setattr(reclaims, "read_installation", counted_read)

    assert reclaim.release_blobs(release, clock.now()) == "held"

    assert reads == [holder] and _stored_holder(holder) is not None and _stored(stack, archive)


def test_a_stale_holder_held_again_before_it_is_dropped_stays_and_the_release_stays_due(
    stack: Any, acme: Caller, monkeypatch: pytest.MonkeyPatch
) -> None:
    archive, _ = _publish(acme, "rehold")
    stale = _holder("rehold", "rh-1", held_by="op-gone", held_at=1)
    _leave_holder(stale)
    release = _yank(acme, "rehold")
    real = reclaims.holder_states

    def held_again_after_the_read(holders: list[ReleaseHolder]) -> list[tuple[Any, Any]]:
        states = real(holders)
        _leave_holder(_holder("rehold", "rh-1", held_by="op-new", held_at=1))  # another operation's hold_now
        return states

    monkeypatch.setattr(reclaims, "holder_states", held_again_after_the_read)
    release_key = catalog.release_key(TENANT, "rehold", "1.0.0")
    due_before = dynamo.get(*release_key)

    assert reclaim.release_blobs(release, clock.now()) == "raced"

    stored = _stored_holder(stale)
    assert stored is not None and stored["heldBy"] == "op-new" and _stored(stack, archive)
    due_after = dynamo.get(*release_key)
    assert due_before is not None and due_after is not None
    assert due_after["dueAt"] == due_before["dueAt"]  # not postponed: the next sweep looks again


def test_stale_holders_are_dropped_page_after_page(stack: Any, acme: Caller) -> None:
    archive, _ = _publish(acme, "crowd")
    stale = [_holder("crowd", f"c-{n:02d}", held_by=f"op-{n}", held_at=1) for n in range(reclaim.HOLDERS_PAGE + 3)]
    for holder in stale:
        _leave_holder(holder)
    release = _yank(acme, "crowd")

    with emitted_metrics() as seen:
        assert _give_back_and_reclaim(release, clock.now()) == "released"

    assert seen["StaleHoldersDropped"] == len(stale)
    assert all(_stored_holder(h) is None for h in stale) and not _stored(stack, archive)


def test_the_first_live_holder_ends_the_walk(stack: Any, acme: Caller, monkeypatch: pytest.MonkeyPatch) -> None:
    archive, _ = _publish(acme, "queue")
    _settled(acme, acme.install(WS, "q-live", "queue", "1.0.0", key="k-install"))  # sorts after the stale ones
    before = [_holder("queue", f"a-{n:02d}", held_by=f"op-{n}", held_at=1) for n in range(reclaim.HOLDERS_PAGE - 1)]
    after = [_holder("queue", f"z-{n}", held_by="op-z", held_at=1) for n in range(3)]  # the next page
    for holder in before + after:
        _leave_holder(holder)
    release = _yank(acme, "queue")
    pages: list[int] = []
    real = reclaims.holder_states

    def counted_page(holders: list[ReleaseHolder]) -> Any:
        pages.append(len(holders))
        return real(holders)

    monkeypatch.setattr(reclaims, "holder_states", counted_page)

    with emitted_metrics() as seen:
        assert reclaim.release_blobs(release, clock.now()) == "held"

    assert pages == [reclaim.HOLDERS_PAGE]  # one page, ending with the live holder: the next is never read
    assert seen["StaleHoldersDropped"] == len(before)
    assert all(_stored_holder(h) is None for h in before)
    assert all(_stored_holder(h) is not None for h in after) and _stored(stack, archive)
