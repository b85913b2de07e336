"""``packyard sync WS DIR`` against the local stack: one verified folder per installation, incremental, atomic
under a kill at any named point, refusing links, entries of another user and a full disk, and ``--check``.

Kills are deterministic: the CLI runs as a subprocess with ``PACKYARD_SYNC_CRASH_AT=<point>`` and ends with
``os._exit`` exactly there (during the archive download, during the build of the new folder, right after the
rename, during the removal of an uninstalled folder); the next run must converge and ``--check`` be clean.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import stat
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
import requests

from packyard_cli.client import Client
from packyard_cli.sync import CRASH_EXIT, SyncError, check_workspace, sync_workspace
from packyard_cli.sync_disk import Disk
from tests.e2e.helpers import ROOT, Cli, CliResult, Stack

pytestmark = pytest.mark.xdist_group("e2e")

DEEP = "src/tools/weather/forecast/deep/model.py"
NON_ASCII = "docs/météo-天気.md"
SHARED = "LICENSE"


def write_package(folder: Path, marker: str) -> dict[str, bytes]:
    """A package folder: a shared file (the same in every version), a deep one, a non-ASCII name, an executable."""
    files = {
        "SKILL.md": f"# weather {marker}\n".encode(),
        SHARED: b"MIT License\n" + b"permission is granted " * 200,
        DEEP: f"MODEL = {marker!r}\n".encode(),
        NON_ASCII: f"prévisions {marker}\n".encode(),
        "bin/run": f"#!/bin/sh\necho {marker}\n".encode(),
    }
    for path, data in files.items():
        target = folder / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
    (folder / "bin/run").chmod(0o755)
    return files


@pytest.fixture(scope="module")
def cli(stack: Stack) -> Cli:
    return Cli(stack, f"t-{uuid.uuid4().hex[:10]}")


@pytest.fixture(scope="module")
def contents(cli: Cli, tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, bytes]]:
    """weather 1.0.0 and 1.1.0, notes 1.0.0 (sharing LICENSE with weather), published once for the module."""
    found: dict[str, dict[str, bytes]] = {}
    for package, version, marker in (("weather", "1.0.0", "v1"), ("weather", "1.1.0", "v2"), ("notes", "1.0.0", "n")):
        folder = tmp_path_factory.mktemp(f"{package}-{version}")
        found[f"{package}@{version}"] = write_package(folder, marker)
        published = cli("--json", "publish", str(folder), "-p", package, "--version", version)
        assert published.code == 0, published.output
    return found


@pytest.fixture
def ws(cli: Cli, contents: dict[str, dict[str, bytes]]) -> str:
    """A workspace with weather@1.0.0 and notes@1.0.0 installed."""
    name = f"ws-{uuid.uuid4().hex[:8]}"
    for release in ("weather@1.0.0", "notes@1.0.0"):
        installed = cli("install", release, "--workspace", name)
        assert installed.code == 0, installed.output
    return name


@pytest.fixture
def cache(tmp_path: Path) -> Path:
    return tmp_path / "cache"


def sync(cli: Cli, ws: str, target: Path, cache: Path, *extra: str, env: dict[str, str] | None = None) -> CliResult:
    """``packyard --output json sync WS DIR --cache CACHE …`` as a subprocess (so a crash point can end it)."""
    command = ["--output", "json", "sync", ws, str(target), "--cache", str(cache), *extra]
    done = subprocess.run(
        [sys.executable, "-m", "packyard_cli", *command],
        cwd=ROOT,
        env={**cli.env(), **(env or {})},
        capture_output=True,
        text=True,
        timeout=120,
    )
    return CliResult(done.returncode, done.stdout, done.stderr)


def tree(folder: Path) -> dict[str, bytes]:
    return {
        p.relative_to(folder).as_posix(): p.read_bytes()
        for p in sorted(folder.rglob("*"))
        if p.is_file() and ".packyard" not in p.relative_to(folder).parts
    }


def assert_holds(target: Path, expected: dict[str, dict[str, bytes]]) -> None:
    """``target`` holds exactly one folder per installation, each with exactly its release's bytes."""
    assert sorted(p.name for p in target.iterdir() if p.name != ".packyard") == sorted(expected)
    for installation, files in expected.items():
        assert tree(target / installation) == files, installation


class CountingSession(requests.Session):
    def __init__(self) -> None:
        super().__init__()
        self.sent: list[tuple[str, str]] = []

    def request(self, method: str, url: str, *args: Any, **kwargs: Any) -> requests.Response:  # type: ignore[override]
        self.sent.append((method, url.split("?")[0]))
        return super().request(method, url, *args, **kwargs)


def api(cli: Cli) -> tuple[Client, CountingSession]:
    session = CountingSession()
    token = cli.token()
    return Client(cli.stack.api, token=lambda: token, session=session), session


# ------------------------------------------------------------------ what a sync writes


def test_sync_writes_each_installation_verified_with_its_modes_and_check_is_clean(
    cli: Cli, contents: dict[str, dict[str, bytes]], ws: str, tmp_path: Path, cache: Path
) -> None:
    # Given a workspace with two installations; When it is synced into a new folder
    target = tmp_path / "skills"
    synced = sync(cli, ws, target, cache)

    # Then each installation is a folder with exactly its release's bytes (the deepest, non-ASCII file included)
    assert synced.code == 0, synced.output
    assert sorted(synced.json()["added"]) == ["notes", "weather"]
    assert_holds(target, {"weather": contents["weather@1.0.0"], "notes": contents["notes@1.0.0"]})
    # the manifest's modes (the executable stays executable, nothing else is), regular files only
    assert stat.S_IMODE((target / "weather/bin/run").lstat().st_mode) == 0o755
    assert stat.S_IMODE((target / "weather" / NON_ASCII).lstat().st_mode) == 0o644
    # LICENSE is the same in both releases: it came from the cache the second time
    assert synced.json()["filesFromCache"] >= 1
    # notes (synced first, nothing cached) as its archive; weather, whose big LICENSE is cached by then, as its other
    # 4 small files one by one: two manifests, one archive, four file reads
    assert synced.json()["downloads"] == 7
    checked = sync(cli, ws, target, cache, "--check")
    assert checked.code == 0, checked.output
    assert checked.json()["clean"] is True
    assert checked.json()["checkedFiles"] == 10


def test_an_unchanged_workspace_syncs_with_no_download_and_an_update_fetches_only_what_changed(
    cli: Cli, contents: dict[str, dict[str, bytes]], ws: str, tmp_path: Path, cache: Path
) -> None:
    target = tmp_path / "skills"
    client, session = api(cli)
    first = sync_workspace(ws, target, client=client, cache_dir=cache)
    assert sorted(first.added) == ["notes", "weather"]

    # When nothing changed: only the resolved view is read, nothing is downloaded
    session.sent.clear()
    again = sync_workspace(ws, target, client=client, cache_dir=cache)
    assert (again.added, again.updated, again.removed, sorted(again.unchanged)) == ([], [], [], ["notes", "weather"])
    assert [path.rsplit("/", 1)[-1] for _, path in session.sent] == ["resolved"]
    assert again.downloads == again.downloaded_bytes == 0

    # When one installation moves to another release: its manifest, then only the 4 files that changed, one by one
    # through the release's file route (not the archive); LICENSE, the same in both, from the cache
    assert cli("update", "weather@1.1.0", "--workspace", ws).code == 0
    session.sent.clear()
    updated = sync_workspace(ws, target, client=client, cache_dir=cache)
    assert (updated.updated, updated.unchanged) == (["weather"], ["notes"])
    assert updated.files_from_cache == 1  # LICENSE
    assert updated.files_fetched == 4
    assert updated.downloads == 5  # the manifest and 4 files
    file_reads = [path for _, path in session.sent if "/versions/1.1.0/files/" in path]
    assert len(file_reads) == 4 and len(session.sent) == 6  # resolved, the manifest, 4 files
    assert_holds(target, {"weather": contents["weather@1.1.0"], "notes": contents["notes@1.0.0"]})

    # When an installation is uninstalled, its folder goes
    assert cli("uninstall", "notes", "--workspace", ws).code == 0
    removed = sync_workspace(ws, target, client=client, cache_dir=cache)
    assert removed.removed == ["notes"]
    assert_holds(target, {"weather": contents["weather@1.1.0"]})


def test_a_second_folder_is_served_from_the_cache_without_downloading_archives(
    cli: Cli, ws: str, tmp_path: Path, cache: Path
) -> None:
    client, session = api(cli)
    sync_workspace(ws, tmp_path / "one", client=client, cache_dir=cache)
    session.sent.clear()
    other = sync_workspace(ws, tmp_path / "two", client=client, cache_dir=cache)
    assert sorted(other.added) == ["notes", "weather"]
    assert other.downloads == 0 and other.files_fetched == 0
    assert [path.rsplit("/", 1)[-1] for _, path in session.sent] == ["resolved"]
    assert tree(tmp_path / "one") == tree(tmp_path / "two")


def test_a_bounded_cache_evicts_and_a_changed_cache_entry_is_never_used(
    cli: Cli, contents: dict[str, dict[str, bytes]], ws: str, tmp_path: Path, cache: Path
) -> None:
    client, _ = api(cli)
    # a cache of 1 KiB cannot keep LICENSE (4 KiB): it is evicted at the end of the sync
    small = sync_workspace(ws, tmp_path / "one", client=client, cache_dir=cache, cache_max_bytes=1024)
    assert small.evicted > 0
    kept = sum(p.stat().st_size for p in cache.glob("??/*"))
    assert kept <= 1024
    # every entry left is changed on disk: a sync into a new folder refetches instead of copying bad bytes
    for entry in cache.glob("??/*"):
        entry.write_bytes(b"tampered")
    second = sync_workspace(ws, tmp_path / "two", client=client, cache_dir=cache)
    assert second.files_fetched > 0
    assert_holds(tmp_path / "two", {"weather": contents["weather@1.0.0"], "notes": contents["notes@1.0.0"]})


# ------------------------------------------------------------------ --check


def test_check_lists_a_changed_an_added_and_a_removed_file_and_a_changed_mode(
    cli: Cli, ws: str, tmp_path: Path, cache: Path
) -> None:
    target = tmp_path / "skills"
    assert sync(cli, ws, target, cache).code == 0
    (target / "weather/SKILL.md").write_bytes(b"# changed by hand\n")
    (target / "weather/extra.txt").write_bytes(b"not in the release\n")
    (target / "notes" / DEEP).unlink()
    (target / "notes/bin/run").chmod(0o700)
    before = tree(target)

    checked = sync(cli, ws, target, cache, "--check")

    assert checked.code == 4, checked.output
    drift = {(d["installation"], d["path"], d["kind"]) for d in checked.json()["drift"]}
    assert drift == {
        ("weather", "SKILL.md", "changed"),
        ("weather", "extra.txt", "added"),
        ("notes", DEEP, "removed"),
        ("notes", "bin/run", "mode"),
    }
    assert tree(target) == before  # --check changed nothing
    human = cli("sync", ws, str(target), "--check", "--cache", str(cache))
    assert human.code == 4, human.output
    assert "extra.txt" in human.stdout and "4 differences" in human.stdout

    # and a sync repairs it: the folders whose paths, sizes or modes drifted are rebuilt
    repaired = sync(cli, ws, target, cache)
    assert repaired.code == 0, repaired.output
    assert sorted(repaired.json()["updated"]) == ["notes", "weather"]
    assert sync(cli, ws, target, cache, "--check").code == 0


# ------------------------------------------------------------------ kills


@pytest.mark.parametrize(
    ("point", "env"),
    [
        ("download", {}),
        ("build", {}),
        ("swap", {}),
        ("swap", {"PACKYARD_SYNC_NO_EXCHANGE": "1"}),
    ],
    ids=["during-download", "during-build", "during-rename", "during-rename-without-exchange"],
)
def test_a_sync_killed_during_an_update_leaves_a_complete_state_and_the_next_run_converges(
    cli: Cli,
    contents: dict[str, dict[str, bytes]],
    ws: str,
    tmp_path: Path,
    cache: Path,
    point: str,
    env: dict[str, str],
) -> None:
    target = tmp_path / "skills"
    assert sync(cli, ws, target, cache).code == 0
    assert cli("update", "weather@1.1.0", "--workspace", ws).code == 0
    cache_fresh = tmp_path / "cache-2"  # a cold cache: the update must download (the kill during download)

    killed = sync(cli, ws, target, cache_fresh, env={"PACKYARD_SYNC_CRASH_AT": point, **env})

    assert killed.code == CRASH_EXIT, killed.output
    weather = tree(target / "weather") if (target / "weather").exists() else None
    # the folder is the old release or the new one, whole; absent only in the documented window of the fallback
    allowed = [contents["weather@1.0.0"], contents["weather@1.1.0"]]
    if env and point == "swap":
        allowed.append(None)  # type: ignore[arg-type]
    assert weather in allowed
    assert tree(target / "notes") == contents["notes@1.0.0"]

    again = sync(cli, ws, target, cache_fresh, env=env)
    assert again.code == 0, again.output
    assert_holds(target, {"weather": contents["weather@1.1.0"], "notes": contents["notes@1.0.0"]})
    assert sorted(p.name for p in (target / ".packyard").iterdir()) == ["manifests", "state.json"]
    assert sync(cli, ws, target, cache_fresh, "--check").code == 0


def test_a_sync_killed_while_removing_an_uninstalled_folder_finishes_next_time(
    cli: Cli, contents: dict[str, dict[str, bytes]], ws: str, tmp_path: Path, cache: Path
) -> None:
    target = tmp_path / "skills"
    assert sync(cli, ws, target, cache).code == 0
    assert cli("uninstall", "notes", "--workspace", ws).code == 0
    killed = sync(cli, ws, target, cache, env={"PACKYARD_SYNC_CRASH_AT": "remove"})
    assert killed.code == CRASH_EXIT, killed.output
    assert not (target / "notes").exists()  # renamed away in one step, then removed
    assert sync(cli, ws, target, cache).code == 0
    assert_holds(target, {"weather": contents["weather@1.0.0"]})
    assert sorted(p.name for p in (target / ".packyard").iterdir()) == ["manifests", "state.json"]


# ------------------------------------------------------------------ bad input


def test_a_folder_holding_a_link_is_refused_and_left_as_it_was(
    cli: Cli, contents: dict[str, dict[str, bytes]], ws: str, tmp_path: Path, cache: Path
) -> None:
    target = tmp_path / "skills"
    assert sync(cli, ws, target, cache).code == 0
    assert cli("update", "weather@1.1.0", "--workspace", ws).code == 0
    outside = tmp_path / "outside.txt"
    outside.write_bytes(b"not sync's")
    (target / "weather/src/link").symlink_to(outside)
    before = {**tree(target)}

    refused = sync(cli, ws, target, cache)

    assert refused.code == 3, refused.output
    assert json.loads(refused.stdout)["code"] == "sync_link"
    assert "weather/src/link" in refused.output
    assert tree(target) == before and outside.read_bytes() == b"not sync's"
    assert (target / "weather/src/link").is_symlink()

    # a sync folder that is itself a link is refused too
    alias = tmp_path / "alias"
    alias.symlink_to(target)
    assert sync(cli, ws, alias, cache).code == 3
    checked = sync(cli, ws, target, cache, "--check")
    assert checked.code == 4
    assert ("weather", "src/link", "unsafe") in {
        (d["installation"], d["path"], d["kind"]) for d in checked.json()["drift"]
    }


def test_a_folder_holding_a_file_of_another_user_or_files_never_synced_is_refused(
    cli: Cli, contents: dict[str, dict[str, bytes]], ws: str, tmp_path: Path, cache: Path
) -> None:
    target = tmp_path / "skills"
    assert sync(cli, ws, target, cache).code == 0
    foreign = target / "notes/SKILL.md"
    os.chown(foreign, 4242, 4242)  # the tests run as root (a non-root user cannot give a file away)
    refused = sync(cli, ws, target, cache)
    assert refused.code == 3, refused.output
    assert json.loads(refused.stdout)["code"] == "sync_foreign_owner"
    assert foreign.stat().st_uid == 4242 and tree(target / "notes") == contents["notes@1.0.0"]

    home = tmp_path / "home"
    home.mkdir()
    (home / "notes.txt").write_text("mine")
    never = sync(cli, ws, home, cache)
    assert never.code == 3, never.output
    assert json.loads(never.stdout)["code"] == "sync_folder_not_empty"
    assert sorted(p.name for p in home.iterdir()) == ["notes.txt"]


class FullDisk(Disk):
    """A disk that fills up after ``room`` bytes."""

    def __init__(self, room: int) -> None:
        super().__init__()
        self.room = room

    def write(self, fd: int, data: bytes | memoryview) -> None:
        if self.written + len(data) > self.room:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        super().write(fd, data)


def test_a_full_disk_stops_the_sync_with_its_reason_and_keeps_the_last_complete_state(
    cli: Cli, contents: dict[str, dict[str, bytes]], ws: str, tmp_path: Path, cache: Path
) -> None:
    target = tmp_path / "skills"
    client, _ = api(cli)
    sync_workspace(ws, target, client=client, cache_dir=cache)
    assert cli("update", "weather@1.1.0", "--workspace", ws).code == 0

    with pytest.raises(SyncError) as failed:
        sync_workspace(ws, target, client=client, cache_dir=tmp_path / "cold", disk=FullDisk(room=300))

    assert failed.value.code == "sync_disk_full"
    assert "no space left" in failed.value.title
    assert_holds(target, {"weather": contents["weather@1.0.0"], "notes": contents["notes@1.0.0"]})
    assert not (target / ".packyard/staging").exists() or not list((target / ".packyard/staging").iterdir())
    after = sync_workspace(ws, target, client=client, cache_dir=tmp_path / "cold")
    assert after.updated == ["weather"]
    assert check_workspace(ws, target, client=client, cache_dir=tmp_path / "cold").clean


def test_every_synced_file_matches_the_manifest_the_resolved_view_names(
    cli: Cli, ws: str, tmp_path: Path, cache: Path
) -> None:
    """The oracle is the service's own manifest (fetched here over HTTP), not the sync's."""
    target = tmp_path / "skills"
    assert sync(cli, ws, target, cache).code == 0
    token = cli.token()
    resolved = requests.get(
        f"{cli.stack.api}/v1/workspaces/{ws}/resolved", headers={"Authorization": f"Bearer {token}"}, timeout=30
    ).json()
    for item in resolved["items"]:
        manifest = requests.get(item["manifestUrl"], timeout=30).json()
        on_disk = {p: hashlib.sha256(b).hexdigest() for p, b in tree(target / item["installationId"]).items()}
        assert on_disk == {f["path"]: f["sha256"] for f in manifest["files"]}


def test_the_readme_runtime_example_runs_and_reports_what_changed(
    cli: Cli, contents: dict[str, dict[str, bytes]], ws: str, tmp_path: Path, cache: Path
) -> None:
    """The README's Python example, verbatim (between its runtime-example markers), as a runtime would run it."""
    text = (ROOT / "README.md").read_text("utf-8")
    block = text.split("<!-- runtime-example:start -->", 1)[1].split("<!-- runtime-example:end -->", 1)[0]
    code = block.split("```python\n", 1)[1].split("```", 1)[0]
    target = tmp_path / "skills"
    env = {
        **cli.env(),
        "PACKYARD_TOKEN": cli.token(),
        "PACKYARD_CACHE_DIR": str(cache),
        "WORKSPACE": ws,
        "SKILLS_DIR": str(target),
    }

    def run() -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
        )

    first = run()
    assert first.returncode == 0, first.stderr
    assert sorted(first.stdout.splitlines()) == [
        f"load notes from {target / 'notes'}",
        f"load weather from {target / 'weather'}",
    ]
    assert_holds(target, {"weather": contents["weather@1.0.0"], "notes": contents["notes@1.0.0"]})
    assert cli("uninstall", "notes", "--workspace", ws).code == 0
    second = run()
    assert second.returncode == 0, second.stderr
    assert second.stdout.splitlines() == ["unload notes"]


def test_with_pinned_keys_every_release_is_verified_and_one_signed_by_an_unpinned_key_is_refused(
    cli: Cli, contents: dict[str, dict[str, bytes]], ws: str, tmp_path: Path, cache: Path
) -> None:
    pinned = tmp_path / "keys.json"
    pin = cli("keys", "pin", "--out", str(pinned))
    assert pin.code == 0, pin.output
    target = tmp_path / "skills"

    # Given the service's keys pinned: each release's envelope verifies, and the folders are written
    verified = sync(cli, ws, target, cache, "--keys", str(pinned))
    assert verified.code == 0, verified.output
    assert "signatures are not checked" not in verified.stderr
    assert_holds(target, {"weather": contents["weather@1.0.0"], "notes": contents["notes@1.0.0"]})

    # When weather moves on and the pinned set holds none of the service's keys (pinned before a rotation)
    assert cli("update", "weather@1.1.0", "--workspace", ws).code == 0
    other = json.loads(pinned.read_text())
    for key in other["keys"]:
        key["kid"] = "not-" + key["kid"]
    stale = tmp_path / "stale.json"
    stale.write_text(json.dumps(other))
    refused = sync(cli, ws, target, cache, "--keys", str(stale))

    # Then the new release is refused with the reason, nothing of it is written, the last complete state stays
    assert refused.code == 12, refused.output
    assert json.loads(refused.stdout)["code"] == "unknown_key_id"
    assert_holds(target, {"weather": contents["weather@1.0.0"], "notes": contents["notes@1.0.0"]})

    # a key set whose entry is another key under the right kid: wrong_key
    wrong = json.loads(pinned.read_text())
    for key in wrong["keys"]:
        key["x"], key["y"] = key["y"], key["x"]
    (tmp_path / "wrong.json").write_text(json.dumps(wrong))
    mismatched = sync(cli, ws, target, cache, "--keys", str(tmp_path / "wrong.json"))
    assert mismatched.code == 11, mismatched.output
    assert json.loads(mismatched.stdout)["code"] == "wrong_key"

    # and with the right keys the update goes through
    assert sync(cli, ws, target, cache, "--keys", str(pinned)).code == 0
    assert_holds(target, {"weather": contents["weather@1.1.0"], "notes": contents["notes@1.0.0"]})


@pytest.mark.parametrize("point", ["download", "build", "swap"])
def test_a_first_sync_killed_leaves_only_whole_folders_and_the_next_run_converges(
    cli: Cli, contents: dict[str, dict[str, bytes]], ws: str, tmp_path: Path, cache: Path, point: str
) -> None:
    target = tmp_path / "skills"
    killed = sync(cli, ws, target, cache, env={"PACKYARD_SYNC_CRASH_AT": point})
    assert killed.code == CRASH_EXIT, killed.output
    # every installation folder there is whole: the first one renamed in (swap), or none yet
    expected = {"notes": contents["notes@1.0.0"], "weather": contents["weather@1.0.0"]}
    present = sorted(p.name for p in target.iterdir() if p.name != ".packyard")
    assert present == (["notes"] if point == "swap" else [])
    for name in present:
        assert tree(target / name) == expected[name]

    again = sync(cli, ws, target, cache)
    assert again.code == 0, again.output
    assert_holds(target, expected)
    assert sync(cli, ws, target, cache, "--check").code == 0
