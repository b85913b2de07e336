"""The parts of ``packyard sync`` on their own: the file cache (verified writes, checked reads, least recently used
eviction), the folder walk that refuses links, special files and other users' entries, and the one-step exchange."""

from __future__ import annotations

import hashlib
import io
import os
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from packyard_cli.sync_cache import CacheMismatch, FileCache
from packyard_cli.sync_disk import Disk, UnsafeFolder, exchange, open_folder, scan


def _put(cache: FileCache, data: bytes) -> str:
    digest = hashlib.sha256(data).hexdigest()
    with cache.store(digest, len(data)) as writer:
        writer.write(data)
    return digest


def _copy(cache: FileCache, digest: str, size: int, tmp_path: Path) -> tuple[bool, bytes]:
    target = tmp_path / "copy"
    target.unlink(missing_ok=True)
    fd = os.open(target, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        ok = cache.copy_to(digest, size, fd, Disk())
    finally:
        os.close(fd)
    return ok, target.read_bytes()


def test_the_cache_evicts_the_least_recently_used_entries_first_down_to_its_bound(tmp_path: Path) -> None:
    cache = FileCache(tmp_path / "cache", max_bytes=250)
    entries = [_put(cache, bytes([n]) * 100) for n in range(4)]  # 400 bytes
    # last used: entry 2 longest ago, then 0, then 3, then 1 (times set, not slept for)
    for order, index in enumerate((2, 0, 3, 1)):
        entry = cache.root / entries[index][:2] / entries[index]
        os.utime(entry, ns=(1_000_000_000 * (order + 1),) * 2)

    removed = cache.evict()

    assert removed == [entries[2], entries[0]]
    assert cache.size() == 200
    assert [cache.has(e, 100) for e in entries] == [False, True, False, True]


def test_a_use_makes_an_entry_recent(tmp_path: Path) -> None:
    cache = FileCache(tmp_path / "cache", max_bytes=100)
    old, new = _put(cache, b"a" * 100), _put(cache, b"b" * 100)
    os.utime(cache.root / old[:2] / old, ns=(1, 1))
    os.utime(cache.root / new[:2] / new, ns=(2, 2))
    assert _copy(cache, old, 100, tmp_path) == (True, b"a" * 100)  # used now: the other is the oldest
    assert cache.evict() == [new]


def test_bytes_that_do_not_hash_to_their_name_never_enter_the_cache(tmp_path: Path) -> None:
    cache = FileCache(tmp_path / "cache")
    digest = hashlib.sha256(b"expected").hexdigest()
    with pytest.raises(CacheMismatch), cache.store(digest, 8) as writer:
        writer.write(b"imposter")
    assert not cache.has(digest, 8)
    assert list((cache.root / "tmp").iterdir()) == []


def test_an_entry_changed_on_disk_is_dropped_when_used_not_copied(tmp_path: Path) -> None:
    cache = FileCache(tmp_path / "cache")
    digest = _put(cache, b"the real bytes")
    (cache.root / digest[:2] / digest).write_bytes(b"the fake bytes")
    ok, _ = _copy(cache, digest, 14, tmp_path)
    assert ok is False
    assert not cache.has(digest, 14)


def test_a_link_in_the_cache_is_not_followed(tmp_path: Path) -> None:
    cache = FileCache(tmp_path / "cache")
    secret = tmp_path / "secret"
    secret.write_bytes(b"outside")
    digest = hashlib.sha256(b"outside").hexdigest()
    (cache.root / digest[:2]).mkdir()
    (cache.root / digest[:2] / digest).symlink_to(secret)
    assert _copy(cache, digest, 7, tmp_path)[0] is False


def test_the_walk_refuses_links_special_files_and_other_users_entries_and_can_list_them(tmp_path: Path) -> None:
    root = tmp_path / "dir"
    (root / "a/b").mkdir(parents=True)
    (root / "a/b/file").write_bytes(b"x")
    (root / "a/link").symlink_to(tmp_path)
    os.mkfifo(root / "a/b/pipe")
    (root / "theirs").write_bytes(b"y")
    os.chown(root / "theirs", 4242, 4242)  # the tests run as root
    fd = open_folder(str(root))
    try:
        with pytest.raises(UnsafeFolder):
            scan(fd)
        found: list[UnsafeFolder] = []
        files = scan(fd, unsafe=found)
    finally:
        os.close(fd)
    assert set(files) == {"a/b/file"}
    assert {(p.code, p.path) for p in found} == {
        ("sync_link", "a/link"),
        ("sync_special_file", "a/b/pipe"),
        ("sync_foreign_owner", "theirs"),
    }


def test_exchange_swaps_two_folders_in_one_step(tmp_path: Path) -> None:
    (tmp_path / "live").mkdir()
    (tmp_path / "live/release").write_text("old")
    (tmp_path / "staging").mkdir()
    (tmp_path / "staging/release").write_text("new")
    fd = open_folder(str(tmp_path))
    try:
        swapped = exchange("staging", fd, "live", fd)
    finally:
        os.close(fd)
    assert swapped is True  # Linux with renameat2 (the CI's and this machine's); else sync renames aside
    assert (tmp_path / "live/release").read_text() == "new"
    assert (tmp_path / "staging/release").read_text() == "old"


def test_the_progress_bar_follows_the_installations(tmp_path: Path) -> None:
    from types import SimpleNamespace

    from rich.console import Console

    from packyard_cli.commands.sync import _TerminalProgress

    screen = io.StringIO()
    ctx = SimpleNamespace(err=Console(file=screen, force_terminal=True, width=80))
    with _TerminalProgress(ctx) as progress:  # type: ignore[arg-type]
        progress({"event": "start", "installations": 2})
        progress({"event": "installation", "installation": "weather", "index": 0})
        progress({"event": "step", "installation": "weather", "step": "download"})
        progress({"event": "done"})
    assert "2/2" in screen.getvalue()
    assert "weather: download" in screen.getvalue()


def test_the_parser_takes_every_sync_option() -> None:
    from packyard_cli.commands.sync import cmd_sync
    from packyard_cli.parser import build_parser

    args = build_parser().parse_args(
        ["sync", "ws-1", "/srv/skills", "--check", "--cache", "/c", "--cache-size", "2M", "--keys", "k.json"]
    )
    assert args.handler is cmd_sync
    assert (args.workspace_arg, args.directory, args.check, args.cache, args.cache_size, args.keys) == (
        "ws-1",
        "/srv/skills",
        True,
        "/c",
        2 << 20,
        "k.json",
    )


class _ResolvedOnly:
    """A client whose only answer is one page of a resolved view (sync asks nothing else before it refuses)."""

    def __init__(self, items: list[dict[str, object]]) -> None:
        self.items = items

    def request(self, method: str, path: str, **kwargs: object) -> object:
        from packyard_cli.client import Reply

        assert (method, path.rsplit("/", 1)[-1]) == ("GET", "resolved")
        return Reply(200, {}, {"workspace": "ws", "items": self.items, "nextCursor": None})


@pytest.mark.parametrize("hostile", ["../escape", ".packyard", "a/b", "", "UPPER"])
def test_an_installation_id_that_is_no_folder_name_is_refused_before_anything_is_written(
    tmp_path: Path, hostile: str
) -> None:
    from packyard_cli.sync import SyncError, sync_workspace

    item = {
        "installationId": hostile,
        "package": "p",
        "release": "1.0.0",
        "manifestDigest": "0" * 64,
        "manifestUrl": "http://127.0.0.1:9/m",
        "archive": {"sha256": "0" * 64, "size": 1, "url": "http://127.0.0.1:9/a"},
    }
    with pytest.raises(SyncError) as refused:
        sync_workspace("ws", tmp_path / "dir", client=_ResolvedOnly([item]), cache_dir=tmp_path / "cache")  # type: ignore[arg-type]
    assert refused.value.code == "sync_unsafe_name"
    assert not (tmp_path / "dir").exists() and not (tmp_path / "escape").exists()


def test_check_of_a_folder_that_is_a_link_says_so(tmp_path: Path) -> None:
    from packyard_cli.sync import SyncError, check_workspace

    (tmp_path / "real").mkdir()
    (tmp_path / "alias").symlink_to(tmp_path / "real")
    with pytest.raises(SyncError) as refused:
        check_workspace("ws", tmp_path / "alias", client=_ResolvedOnly([]), cache_dir=tmp_path / "cache")  # type: ignore[arg-type]
    assert refused.value.code == "sync_link"


class _ExpiringApi:
    """A resolved view of one real package (built here) whose download URLs expire after their first view: the
    first view's archive URL answers 403, as S3 answers an expired presigned URL."""

    def __init__(self) -> None:
        import json

        from packyard_cli.build import build_from_files

        self.built = build_from_files({"SKILL.md": b"# hi\n", "src/a.py": b"print(1)\n"}, modes={"src/a.py": 0o755})
        self.manifest = json.dumps(self.built.manifest, sort_keys=True, separators=(",", ":")).encode()
        self.views = 0
        self.downloads: list[str] = []

    def request(self, method: str, path: str, **kwargs: object) -> object:
        from packyard_cli.client import Reply

        self.views += 1
        item = {
            "installationId": "hi",
            "package": "hi",
            "release": "1.0.0",
            "manifestDigest": hashlib.sha256(self.manifest).hexdigest(),
            "manifestUrl": f"https://s3/manifest?view={self.views}",
            "archive": {
                "sha256": self.built.archive_sha256,
                "size": self.built.archive_size,
                "url": f"https://s3/archive?view={self.views}",
            },
        }
        return Reply(200, {}, {"workspace": "ws", "items": [item], "nextCursor": None})

    def download(self, url: str, chunk_size: int = 1 << 16) -> object:
        from packyard_cli.client import CliError

        self.downloads.append(url)
        if url == "https://s3/archive?view=1":
            raise CliError("the download was refused by storage", code="http_403", status=403)
        yield self.manifest if "manifest" in url else self.built.archive


def test_a_download_url_that_expired_during_a_sync_is_fetched_again_from_a_fresh_view(tmp_path: Path) -> None:
    from packyard_cli.sync import sync_workspace

    api = _ExpiringApi()
    result = sync_workspace("ws", tmp_path / "dir", client=api, cache_dir=tmp_path / "cache")  # type: ignore[arg-type]

    assert result.added == ["hi"]
    assert api.views == 2
    assert api.downloads == ["https://s3/manifest?view=1", "https://s3/archive?view=1", "https://s3/archive?view=2"]
    assert (tmp_path / "dir/hi/src/a.py").read_bytes() == b"print(1)\n"
    assert (tmp_path / "dir/hi/src/a.py").stat().st_mode & 0o777 == 0o755


class _InMemoryApi:
    """The resolved view of one workspace holding one real package (built here), served from memory."""

    def __init__(self, files: dict[str, bytes], modes: dict[str, int]) -> None:
        import json

        from packyard_cli.build import build_from_files

        self.built = build_from_files(files, modes=modes)
        self.manifest = json.dumps(self.built.manifest, sort_keys=True, separators=(",", ":")).encode()

    def request(self, method: str, path: str, **kwargs: object) -> object:
        from packyard_cli.client import Reply

        item = {
            "installationId": "pkg",
            "package": "pkg",
            "release": "1.0.0",
            "manifestDigest": hashlib.sha256(self.manifest).hexdigest(),
            "manifestUrl": "https://s3/manifest",
            "archive": {"sha256": self.built.archive_sha256, "size": self.built.archive_size, "url": "https://s3/a"},
        }
        return Reply(200, {}, {"workspace": "ws", "items": [item], "nextCursor": None})

    def download(self, url: str, chunk_size: int = 1 << 16) -> object:
        yield self.manifest if "manifest" in url else self.built.archive


_FILES = {"SKILL.md": b"# skill\n", "src/a.py": b"print(1)\n", "src/deep/b.txt": b"b" * 300, "run": b"#!/bin/sh\n"}
_MODES = {"run": 0o755}


def test_a_second_sync_into_the_same_folder_while_one_runs_is_refused(tmp_path: Path) -> None:
    import fcntl

    from packyard_cli.sync import SyncError, sync_workspace

    api = _InMemoryApi(_FILES, _MODES)
    sync_workspace("ws", tmp_path / "dir", client=api, cache_dir=tmp_path / "cache")  # type: ignore[arg-type]
    held = os.open(tmp_path / "dir/.packyard", os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(held, fcntl.LOCK_EX)  # another sync holds the folder
        with pytest.raises(SyncError) as busy:
            sync_workspace("ws", tmp_path / "dir", client=api, cache_dir=tmp_path / "cache")  # type: ignore[arg-type]
    finally:
        os.close(held)
    assert busy.value.code == "sync_busy"


@given(
    changed=st.sets(st.sampled_from(sorted(_FILES))),
    removed=st.sets(st.sampled_from(sorted(_FILES))),
    added=st.sets(st.sampled_from(["new.txt", "src/new.py", "src/deep/x/y.md"])),
    chmodded=st.sets(st.sampled_from(sorted(_FILES))),
)
@settings(max_examples=25, deadline=None)
def test_check_reports_exactly_the_drift_made_and_a_sync_repairs_what_paths_sizes_and_modes_show(
    changed: set[str], removed: set[str], added: set[str], chmodded: set[str]
) -> None:
    import stat
    import tempfile

    from packyard_cli.sync import check_workspace, sync_workspace

    api = _InMemoryApi(_FILES, _MODES)
    with tempfile.TemporaryDirectory() as scratch:
        root, cache = Path(scratch) / "dir", Path(scratch) / "cache"
        sync_workspace("ws", root, client=api, cache_dir=cache)  # type: ignore[arg-type]
        removed -= changed | chmodded
        expected = set()
        for path in changed:  # same size, other bytes: only a hash sees it
            data = (root / "pkg" / path).read_bytes()
            (root / "pkg" / path).write_bytes(bytes([data[0] ^ 1]) + data[1:])
            expected.add((path, "changed"))
        for path in chmodded:
            target = root / "pkg" / path
            target.chmod(stat.S_IMODE(target.stat().st_mode) ^ 0o100)
            expected.add((path, "mode"))
        for path in removed:
            (root / "pkg" / path).unlink()
            expected.add((path, "removed"))
        for path in added:
            (root / "pkg" / path).parent.mkdir(parents=True, exist_ok=True)
            (root / "pkg" / path).write_bytes(b"extra")
            expected.add((path, "added"))

        found = check_workspace("ws", root, client=api, cache_dir=cache)  # type: ignore[arg-type]
        assert {(d.path, d.kind) for d in found.drift} == expected
        assert {d.installation for d in found.drift} <= {"pkg"}

        repaired = sync_workspace("ws", root, client=api, cache_dir=cache)  # type: ignore[arg-type]
        visible = bool(chmodded or removed or added)  # a same-size change of content alone: --check's to find
        assert repaired.updated == (["pkg"] if visible else [])
        if visible:
            assert check_workspace("ws", root, client=api, cache_dir=cache).clean  # type: ignore[arg-type]
