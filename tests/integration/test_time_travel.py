"""Time travel, end to end: a tenant's day goes wrong in every way maintenance exists for, then the schedule runs
two hours later (the real maintenance state machine, started with a scheduled event whose ``time`` is two hours
ahead), and usage, states and the resolved view are exactly what the design says.

What goes wrong: two upload sessions are abandoned (their reservations held); an install's Settle fails (the
operation stays committed, its installation blocked); a release nothing uses is yanked (its blobs reclaimable), and
one still held as an installation's rollback target is yanked too (kept); the archive of an installed release rots
in S3 (bytes replaced). The integrity scrub runs hourly here (``PACKYARD_SCRUB_INTERVAL_SECONDS``), so the two-hour
jump reaches the first check of every blob.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import boto3
import pytest

import devstack
from devstack.api import LocalApi
from devstack.caller import Caller
from packyard import clock, config
from packyard_cli.build import build_from_files
from tests.support.sweeping import install_with_settle_down, run_maintenance

WS = "ws-travel"
HOUR = 3600
EVENTS = devstack.ROOT / "events"


@pytest.fixture
def stack(monkeypatch: pytest.MonkeyPatch) -> Iterator[devstack.Stack]:
    monkeypatch.setenv("PACKYARD_SCRUB_INTERVAL_SECONDS", str(HOUR))
    config.reset()
    with devstack.local_aws() as created:
        yield created
    config.reset()


def _blob_objects(stack: devstack.Stack, tenant: str) -> dict[str, int]:
    """The tenant's blob objects in S3: sha256 → bytes."""
    listed = boto3.client("s3").list_objects_v2(Bucket=stack.bucket_name, Prefix=f"blobs/{tenant}/")
    return {o["Key"].rsplit("/", 1)[-1]: o["Size"] for o in listed.get("Contents", [])}


def _blobs_of(release: dict[str, Any]) -> set[str]:
    """The blobs a release holds: its archive and its manifest."""
    return {release["archive"]["sha256"], release["manifestDigest"]}


def test_two_hours_later_the_sweeps_leave_exactly_what_the_design_says(
    stack: devstack.Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    acme = Caller(LocalApi(stack), "t-travel")
    for package, version, text in [
        ("hello", "1.0.0", b"hello one\n"),
        ("hello", "1.1.0", b"hello two\n"),
        ("tools", "1.0.0", b"tools\n"),
        ("old", "1.0.0", b"old and unused\n"),
    ]:
        assert acme.publish(package, version, build_from_files({"SKILL.md": text * 40}))["state"] == "published"
    releases = {
        name: acme.get(f"/v1/packages/{name.split('@')[0]}/versions/{name.split('@')[1]}").body
        for name in ("hello@1.0.0", "hello@1.1.0", "tools@1.0.0", "old@1.0.0")
    }

    # hello: installed at 1.0.0, updated to 1.1.0 (1.0.0 is its rollback target), then 1.0.0 and old are yanked
    assert acme.wait_settled(WS, acme.install(WS, "h", "hello", "1.0.0", key="h1"))["outcome"]["result"] == "succeeded"
    updated = acme.install(WS, "h", "hello", "1.1.0", key="h2", if_match='"1"')
    assert acme.wait_settled(WS, updated)["outcome"]["result"] == "succeeded"
    assert acme.delete("/v1/packages/hello/versions/1.0.0").status == 200
    assert acme.delete("/v1/packages/old/versions/1.0.0").status == 200

    # tools: its Settle fails, so the operation stays committed and the installation blocked
    stuck, _ = install_with_settle_down(stack, acme, WS, "t", "tools", "1.0.0", key="t1")
    assert acme.get(f"/v1/workspaces/{WS}/operations/{stuck.body['operationId']}").body["state"] == "committed"

    # two sessions nobody completes
    for version in ("2.0.0", "2.0.1"):
        assert acme.request_upload("hello", version, build_from_files({"SKILL.md": b"never\n"})).status == 201
    stored = _blob_objects(stack, "t-travel")
    assert set(stored) == set().union(*(_blobs_of(r) for r in releases.values()))
    assert acme.get("/v1/usage").body["usedBytes"] > sum(stored.values())  # the sessions' reservations

    # the archive of tools@1.0.0 rots in S3
    tools_archive = releases["tools@1.0.0"]["archive"]["sha256"]
    boto3.client("s3").put_object(
        Bucket=stack.bucket_name, Key=f"blobs/t-travel/sha256/{tools_archive}", Body=b"bit rot"
    )

    later = clock.now() + 2 * HOUR
    first = run_maintenance(stack, later)
    second = run_maintenance(stack, later + 60)  # a yanked release gives its blobs back; the next run reclaims them
    swept = {name: first.get(name, 0) + second.get(name, 0) for name in {*first, *second}}

    assert swept["expired"] == 2
    assert swept["settled"] == 1
    assert swept["reclaimed"] == 2  # old@1.0.0's archive and manifest
    assert swept["corrupt"] == 1

    # the sessions ended and gave their bytes back; old@1.0.0's blobs were reclaimed and credited once
    kept = set().union(*(_blobs_of(releases[name]) for name in ("hello@1.0.0", "hello@1.1.0", "tools@1.0.0")))
    assert acme.get("/v1/usage").body["usedBytes"] == sum(stored[sha] for sha in kept)
    assert set(_blob_objects(stack, "t-travel")) == kept  # the rotten one is kept for an operator to look at
    assert acme.get("/v1/packages/old/versions/1.0.0").body["status"] == "yanked"
    # hello@1.0.0 is yanked but still the installation's previous release: kept
    assert acme.get("/v1/packages/hello/versions/1.0.0").body["status"] == "yanked"

    # the stuck operation settled (its commit had landed) and freed the installation
    settled = acme.get(f"/v1/workspaces/{WS}/operations/{stuck.body['operationId']}").body
    assert (settled["state"], settled["outcome"]) == ("settled", {"result": "succeeded"})

    # the rotten blob: its release unavailable, the installation of it needs attention, the resolved view leaves it
    # out, and installing it is refused
    assert acme.get("/v1/packages/tools/versions/1.0.0").body["status"] == "unavailable"
    assert acme.get(acme.installation_path(WS, "t")).body["status"] == "needs_attention"
    assert acme.get(acme.installation_path(WS, "h")).body["status"] == "active"
    resolved = acme.get(f"/v1/workspaces/{WS}/resolved").body
    assert [(item["package"], item["release"]) for item in resolved["items"]] == [("hello", "1.1.0")]
    refused = acme.install(WS, "t2", "tools", "1.0.0", key="t2")
    assert (refused.status, refused.body["code"]) == (409, "release_unavailable")

    # a yanked release is no rollback target (only published ones are), yet the installation still holds it: its blobs
    # stay until the installation moves off it
    rolled = acme.wait_settled(WS, acme.rollback(WS, "h", key="h3", if_match='"2"'))
    assert (rolled["outcome"]["result"], rolled["outcome"]["code"]) == ("refused", "release_unavailable")
