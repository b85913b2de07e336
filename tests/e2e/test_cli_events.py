"""`packyard events [--follow]`: the change events the local stack's bus received, through the CLI against a real
`packyard local` (moto's EventBridge, the recorder's rule to a log group)."""

from __future__ import annotations

import json
import select
import subprocess
import sys
import time

import pytest

from tests.e2e.helpers import ROOT, Cli, write_skill

pytestmark = pytest.mark.xdist_group("e2e")


def _mine(events: list[dict], tenant: str) -> list[dict]:
    return [e for e in events if e["detail"]["tenant"] == tenant]  # other tests share this stack's bus


def test_a_publish_and_a_yank_are_listed_in_order_with_their_event_ids(cli: Cli, tmp_path) -> None:
    folder = write_skill(tmp_path / "skill")
    assert cli("publish", str(folder), "-p", "weather-skill", "--version", "1.0.0").code == 0
    assert cli("yank", "weather-skill@1.0.0").code == 0

    listed = cli("events", "--output", "json")

    assert listed.code == 0, listed.output
    mine = _mine(listed.json()["items"], cli.tenant)
    assert [e["detail-type"] for e in mine] == ["Release Published", "Release Yanked"]
    assert all(e["source"] == "packyard" and e["detail"]["eventId"] for e in mine)
    assert {(e["detail"]["package"], e["detail"]["version"]) for e in mine} == {("weather-skill", "1.0.0")}
    only = cli("events", "--type", "Release Yanked", "--output", "json")
    assert [e["detail-type"] for e in _mine(only.json()["items"], cli.tenant)] == ["Release Yanked"]


def test_follow_prints_an_event_that_arrives_after_it_started(cli: Cli, tmp_path) -> None:
    follower = subprocess.Popen(
        [sys.executable, "-m", "packyard_cli", "events", "--follow", "--output", "json"],
        cwd=ROOT,
        env=cli.env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        folder = write_skill(tmp_path / "skill", marker="follow")
        assert cli("publish", str(folder), "-p", "follow-skill", "--version", "1.0.0").code == 0
        deadline = time.monotonic() + 30
        seen: list[dict] = []
        assert follower.stdout is not None
        while time.monotonic() < deadline and not _mine(seen, cli.tenant):
            ready, _, _ = select.select([follower.stdout], [], [], deadline - time.monotonic())
            line = follower.stdout.readline() if ready else ""
            if line:
                seen.append(json.loads(line))
        (published,) = _mine(seen, cli.tenant)
        assert (published["detail-type"], published["detail"]["package"]) == ("Release Published", "follow-skill")
    finally:
        follower.terminate()
        follower.wait(timeout=10)
