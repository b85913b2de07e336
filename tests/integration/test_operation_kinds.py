"""Archive, restore and promote through the API and the real install state machine, and the admission rules that
came with authority: create-only over any existing installation, a promote above a grant's ceiling re-asks consent."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from devstack.caller import Caller
from packyard import config
from packyard_cli.build import build_from_files

WS = "ws-kinds"
TASK = {"kind": "task", "id": "t-1"}


@pytest.fixture
def releases(acme: Caller) -> Caller:
    """hello@1.0.0 declares api_read."""
    acme.publish("hello", "1.0.0", build_from_files({"SKILL.md": b"v1\n"}, permissions=[{"kind": "api_read"}]))
    return acme


@pytest.fixture
def one_per_workspace(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("PACKYARD_MAX_INSTALLATIONS_PER_WORKSPACE", "1")
    config.reset()
    yield
    monkeypatch.undo()
    config.reset()


def _post(caller: Caller, installation: str, action: str, key: str, version: int, body: dict | None = None):
    return caller.post(
        f"/v1/workspaces/{WS}/installations/{installation}/{action}",
        body,
        headers={"Idempotency-Key": key, "If-Match": f'"{version}"'},
    )


def _settled(caller: Caller, admitted) -> dict:
    assert admitted.status in (200, 202), admitted.body
    return caller.wait_settled(WS, admitted)


def _installation(caller: Caller, installation: str = "a") -> dict:
    return caller.get(f"/v1/workspaces/{WS}/installations/{installation}").body


def test_given_an_archived_installation_then_it_frees_its_place_and_a_restore_checks_the_limit_again(
    releases: Caller, one_per_workspace: None
) -> None:
    _settled(releases, releases.install(WS, "a", "hello", "1.0.0", key="k-a"))
    archived = _settled(releases, _post(releases, "a", "archive", "k-archive", 1))
    assert (archived["kind"], archived["outcome"]) == ("archive", {"result": "succeeded"})
    inst = _installation(releases)
    assert (inst["status"], inst["version"], inst["release"]["version"]) == ("archived", 2, "1.0.0")

    # its place is free: another installation fits under the limit of one
    assert _settled(releases, releases.install(WS, "b", "hello", "1.0.0", key="k-b"))["outcome"]["result"] == (
        "succeeded"
    )
    refused = _post(releases, "a", "restore", "k-restore", 2)
    assert (refused.status, refused.body["code"]) == (409, "limit_exceeded")
    assert _installation(releases)["status"] == "archived"


def test_given_an_archived_installation_when_restored_then_it_is_active_with_its_release_and_grants(
    releases: Caller,
) -> None:
    _settled(releases, releases.install(WS, "a", "hello", "1.0.0", key="k-a"))
    _settled(releases, _post(releases, "a", "archive", "k-archive", 1))
    restored = _settled(releases, _post(releases, "a", "restore", "k-restore", 2))

    assert (restored["kind"], restored["outcome"]) == ("restore", {"result": "succeeded"})
    inst = _installation(releases)
    assert (inst["status"], inst["version"], inst["release"]["version"]) == ("active", 3, "1.0.0")
    assert [g["kind"] for g in inst["grants"]] == ["api_read"]
    resolved = releases.get(f"/v1/workspaces/{WS}/resolved").body["items"]
    assert [item["installationId"] for item in resolved] == ["a"]


def test_given_a_task_scoped_installation_when_promoted_then_its_grants_are_asked_for_the_wider_scope(
    releases: Caller,
) -> None:
    _settled(releases, releases.install(WS, "a", "hello", "1.0.0", key="k-a", scope=TASK))
    assert [g["ceiling"] for g in _installation(releases)["grants"]] == ["task"]

    admitted = _post(releases, "a", "promote", "k-promote", 1, {"scope": {"kind": "workspace"}})
    waiting = releases.wait_for_consent(WS, admitted)
    assert waiting["state"] == "awaiting_consent"
    assert waiting["consent"]["permissions"] == [{"kind": "api_read", "resource": "*"}]

    promoted = releases.wait_settled(WS, admitted)
    assert (promoted["kind"], promoted["outcome"]) == ("promote", {"result": "succeeded"})
    inst = _installation(releases)
    assert inst["scope"] == {"kind": "workspace", "id": None}
    assert [g["ceiling"] for g in inst["grants"]] == ["workspace"]
    assert (inst["version"], inst["grantGeneration"]) == (2, 2)


def test_given_a_promote_that_does_not_widen_then_invalid_request(releases: Caller) -> None:
    _settled(releases, releases.install(WS, "a", "hello", "1.0.0", key="k-a"))
    narrower = _post(releases, "a", "promote", "k-promote", 1, {"scope": TASK})
    assert (narrower.status, narrower.body["code"]) == (400, "invalid_request")


def test_given_a_removed_installation_then_create_only_is_stale_authority(releases: Caller) -> None:
    _settled(releases, releases.install(WS, "a", "hello", "1.0.0", key="k-a"))
    _settled(releases, releases.uninstall(WS, "a", key="k-un", if_match='"1"'))
    refused = releases.install(WS, "a", "hello", "1.0.0", key="k-create", intent="create-only")
    assert (refused.status, refused.body["code"]) == (409, "stale_authority")


def test_given_a_restore_of_an_active_installation_then_stale_authority(releases: Caller) -> None:
    _settled(releases, releases.install(WS, "a", "hello", "1.0.0", key="k-a"))
    refused = _post(releases, "a", "restore", "k-restore", 1)
    assert (refused.status, refused.body["code"]) == (409, "stale_authority")


def test_given_a_scope_change_then_the_grant_generation_advances(releases: Caller) -> None:
    _settled(releases, releases.install(WS, "a", "hello", "1.0.0", key="k-a"))
    assert _installation(releases)["grantGeneration"] == 1
    _settled(releases, releases.install(WS, "a", "hello", "1.0.0", key="k-repair", if_match='"1"', scope=TASK))
    inst = _installation(releases)
    assert (inst["scope"], inst["grantGeneration"]) == (TASK, 2)


def test_given_a_pending_install_when_uninstalled_then_the_uninstall_supersedes_it(
    releases: Caller, monkeypatch: pytest.MonkeyPatch
) -> None:
    from packyard.errors import TransientStoreError
    from packyard.operations import planning

    def flaky_plan(*args: object, **kwargs: object) -> dict:
        raise TransientStoreError("DynamoDB: ThrottlingException")

    monkeypatch.setattr(planning, "plan_task", flaky_plan)
    stuck = releases.wait_settled(WS, releases.install(WS, "a", "hello", "1.0.0", key="k-stuck"))
    assert stuck["state"] == "pending"
    monkeypatch.undo()

    gone = releases.uninstall(WS, "a", key="k-uninstall")

    assert gone.status == 200, gone.body
    assert (gone.body["outcome"]["code"], gone.body["supersedes"]) == ("not_installed", stuck["operationId"])
    old = releases.get(f"/v1/workspaces/{WS}/operations/{stuck['operationId']}").body
    assert (old["state"], old["outcome"]["code"], old["supersededBy"]) == (
        "settled",
        "cancelled",
        gone.body["operationId"],
    )
    # the slot is free again: a new install is admitted at once
    assert releases.install(WS, "a", "hello", "1.0.0", key="k-again").status == 202
