"""Usage and the workspace quota: the bytes of the releases a workspace's installations reference, checked at
admission and again at commit (``quota_exceeded``), and read back with the tenant's own usage."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from devstack.caller import Caller
from packyard import config
from packyard.store import workflows
from packyard_cli.build import build_from_files

WS = "ws-usage"


@pytest.fixture
def archive_size(acme: Caller) -> int:
    """hello@1.0.0 published; the size of its archive."""
    built = build_from_files({"SKILL.md": b"v1\n"})
    acme.publish("hello", "1.0.0", built)
    return len(built.archive)


@pytest.fixture
def room_for_one(archive_size: int, monkeypatch: pytest.MonkeyPatch) -> Iterator[int]:
    size = archive_size
    monkeypatch.setenv("PACKYARD_WORKSPACE_QUOTA_BYTES", str(size + size // 2))
    config.reset()
    yield size
    monkeypatch.undo()
    config.reset()


def test_given_installations_then_the_workspace_usage_counts_them_and_their_release_bytes(
    acme: Caller, archive_size: int
) -> None:
    size = archive_size
    for name in ("a", "b"):
        acme.wait_settled(WS, acme.install(WS, name, "hello", "1.0.0", key=f"k-{name}"))
    usage = acme.get(f"/v1/workspaces/{WS}/usage").body
    assert (usage["installations"], usage["usedBytes"], usage["limitBytes"]) == (2, 2 * size, 2 * 1024**3)

    acme.wait_settled(WS, acme.uninstall(WS, "a", key="k-un", if_match='"1"'))
    assert acme.get(f"/v1/workspaces/{WS}/usage").body["usedBytes"] == size
    tenant = acme.get("/v1/usage").body
    assert tenant["usedBytes"] > 0 and tenant["limitBytes"] == 10 * 1024**3


def test_given_a_full_workspace_then_another_install_is_quota_exceeded_at_admission(
    acme: Caller, room_for_one: int
) -> None:
    acme.wait_settled(WS, acme.install(WS, "a", "hello", "1.0.0", key="k-a"))
    refused = acme.install(WS, "b", "hello", "1.0.0", key="k-b")
    assert (refused.status, refused.body["code"]) == (409, "quota_exceeded")
    assert (refused.body["usedBytes"], refused.body["requestedBytes"]) == (room_for_one, room_for_one)


def test_given_two_admissions_that_each_fit_then_the_second_commit_is_refused_quota_exceeded(
    acme: Caller, room_for_one: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    held: list[tuple] = []
    real_start = workflows.start
    monkeypatch.setattr(workflows, "start", lambda *args: held.append(args) or "held")
    first = acme.install(WS, "a", "hello", "1.0.0", key="k-a")
    second = acme.install(WS, "b", "hello", "1.0.0", key="k-b")
    monkeypatch.setattr(workflows, "start", real_start)
    assert first.status == second.status == 202  # neither committed yet: both fit at admission
    for args in held:
        real_start(*args)

    outcomes = sorted((acme.wait_settled(WS, admitted)["outcome"].get("code") or "ok") for admitted in (first, second))
    assert outcomes == ["ok", "quota_exceeded"]
    assert acme.get(f"/v1/workspaces/{WS}/usage").body["usedBytes"] == room_for_one
