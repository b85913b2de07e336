"""Second readers of an archive: what GNU tar, libarchive's bsdtar and Python's ``tarfile`` (its default extraction
and ``filter="data"``) would put on disk, member for member, to hold against what the verifier checked.

Each reader extracts into a fresh destination inside a sandbox folder; a reading is what the destination holds
afterwards (regular files with size and sha256, directories, links and anything else, by ``lstat``), anything the
reader created in the sandbox *outside* the destination, and whether it complained (an exception, a non-zero exit
status, or anything on stderr: an archive every reader takes silently is the only kind the verifier may accept).

``tarfile``'s default extraction (``fully_trusted`` on 3.12) writes wherever a member's name points, so that reader
is driven member by member and refuses to write outside the sandbox: a target outside it is recorded as written
outside, not written. GNU tar and bsdtar are run as a consumer runs them (``-xf``, their default safety rules).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import stat
import subprocess
import tarfile
import tempfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

Entry = tuple[str, ...]
"""``("file", size, sha256)``, ``("dir",)``, ``("symlink", target)`` or ``("other", mode)``, as strings."""


@dataclass(frozen=True)
class Reading:
    reader: str
    entries: dict[str, Entry]
    outside: tuple[str, ...] = ()
    failure: str | None = None

    def files(self) -> dict[str, tuple[int, str]]:
        return {path: (int(e[1]), e[2]) for path, e in self.entries.items() if e[0] == "file"}


@dataclass(frozen=True)
class Reader:
    name: str
    read: Callable[[Path, Path], tuple[str | None, tuple[str, ...]]]
    """Extract the archive at the first path into the destination (second path); return (failure, written outside)."""


def _gnu_tar() -> str | None:
    found = shutil.which("tar")
    if found is None:
        return None
    version = subprocess.run([found, "--version"], capture_output=True, text=True, check=False).stdout
    return found if "GNU tar" in version else None


def _run(command: list[str]) -> str | None:
    done = subprocess.run(command, capture_output=True, check=False, timeout=60)
    if done.returncode or done.stderr:
        return f"exit {done.returncode}: {done.stderr.decode(errors='replace').strip()[:300]}"
    return None


def _gnu_tar_read(archive: Path, dest: Path) -> tuple[str | None, tuple[str, ...]]:
    return _run(["tar", "-xf", str(archive), "-C", str(dest)]), ()


def _bsdtar_read(archive: Path, dest: Path) -> tuple[str | None, tuple[str, ...]]:
    return _run(["bsdtar", "-xf", str(archive), "-C", str(dest)]), ()


def _within(root: Path, target: str) -> bool:
    return os.path.commonpath([str(root), target]) == str(root)


def _tarfile_default_read(archive: Path, dest: Path) -> tuple[str | None, tuple[str, ...]]:
    sandbox = dest.parent
    outside: list[str] = []
    try:
        with tarfile.open(archive) as tar:
            for member in tar:
                target = os.path.realpath(os.path.join(dest, member.name))
                link = os.path.realpath(os.path.join(dest, member.linkname)) if member.islnk() else target
                if not (_within(sandbox, target) and _within(sandbox, link)):
                    outside.append(member.name)
                    continue
                if not _within(dest, target):
                    outside.append(member.name)
                tar.extract(member, dest, filter="fully_trusted")
    except Exception as exc:  # any refusal is a reading that failed
        return f"{type(exc).__name__}: {exc}", tuple(outside)
    return None, tuple(outside)


def _tarfile_data_read(archive: Path, dest: Path) -> tuple[str | None, tuple[str, ...]]:
    try:
        with tarfile.open(archive) as tar:
            tar.extractall(dest, filter="data")
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}", ()
    return None, ()


READERS: tuple[Reader, ...] = (
    Reader("gnu-tar", _gnu_tar_read),
    Reader("bsdtar", _bsdtar_read),
    Reader("tarfile", _tarfile_default_read),
    Reader("tarfile-data", _tarfile_data_read),
)


def missing_readers() -> list[str]:
    """Readers this machine lacks, with what installs them (the tests fail on this, loudly)."""
    missing = []
    if _gnu_tar() is None:
        missing.append("GNU tar (Debian: tar; `make readers` installs it)")
    if shutil.which("bsdtar") is None:
        missing.append("bsdtar (Debian: libarchive-tools; `make readers` installs it)")
    return missing


def _entries(dest: Path) -> dict[str, Entry]:
    entries: dict[str, Entry] = {}
    for root, dirs, files in os.walk(dest):
        for name in [*dirs, *files]:
            full = Path(root, name)
            path = full.relative_to(dest).as_posix()
            info = full.lstat()
            if stat.S_ISREG(info.st_mode):
                entries[path] = ("file", str(info.st_size), hashlib.sha256(full.read_bytes()).hexdigest())
            elif stat.S_ISDIR(info.st_mode):
                entries[path] = ("dir",)
            elif stat.S_ISLNK(info.st_mode):
                entries[path] = ("symlink", os.readlink(full))
            else:
                entries[path] = ("other", oct(info.st_mode))
    return entries


def _stray(sandbox: Path, dest: Path) -> list[str]:
    """What exists in the sandbox besides the destination and the folders that lead to it."""
    leading = {dest, *dest.parents}
    found = []
    for root, dirs, files in os.walk(sandbox):
        for name in [*dirs, *files]:
            full = Path(root, name)
            if full in leading or _within(dest, str(full)):
                continue
            found.append(full.relative_to(sandbox).as_posix())
    return found


def read_all(raw: bytes, readers: Iterable[Reader] = READERS) -> list[Reading]:
    """Every reader's reading of the archive ``raw`` (gzip or plain tar: each reader detects which)."""
    readings = []
    with tempfile.TemporaryDirectory(prefix="packyard-readers-") as work:
        archive = Path(work, "archive.tar.gz")
        archive.write_bytes(raw)
        for reader in readers:
            sandbox = Path(work, reader.name)
            dest = sandbox / "a" / "b" / "c" / "dest"
            dest.mkdir(parents=True)
            failure, outside = reader.read(archive, dest)
            stray = tuple(sorted({*outside, *_stray(sandbox, dest)}))
            readings.append(Reading(reader.name, _entries(dest), stray, failure))
            _make_removable(sandbox)
    return readings


def _make_removable(root: Path) -> None:
    # members with mode 0o000 or read-only directories must not stop the temporary folder's removal
    for path in [root, *root.rglob("*")]:
        if not path.is_symlink():
            path.chmod(0o700 if path.is_dir() else 0o600)


@dataclass
class Comparison:
    """How readings differ from a manifest's files (the directories above them may exist, nothing else)."""

    problems: list[str] = field(default_factory=list)

    def __bool__(self) -> bool:
        return not self.problems


def compare(readings: Iterable[Reading], expected: dict[str, tuple[int, str]]) -> Comparison:
    allowed_dirs = {"/".join(path.split("/")[:depth]) for path in expected for depth in range(1, path.count("/") + 1)}
    result = Comparison()
    for reading in readings:
        who = reading.reader
        if reading.failure:
            result.problems.append(f"{who} complained: {reading.failure}")
        if reading.outside:
            result.problems.append(f"{who} wrote outside the destination: {list(reading.outside)[:5]}")
        files = reading.files()
        if files != expected:
            extra = sorted(set(files) - set(expected))[:5]
            missing = sorted(set(expected) - set(files))[:5]
            differ = sorted(p for p in set(files) & set(expected) if files[p] != expected[p])[:5]
            result.problems.append(f"{who} extracted other files: extra {extra}, missing {missing}, differing {differ}")
        others = {p: e for p, e in reading.entries.items() if e[0] not in ("file", "dir")}
        if others:
            result.problems.append(f"{who} created links or special files: {dict(list(others.items())[:5])}")
        dirs = {p for p, e in reading.entries.items() if e[0] == "dir"} - allowed_dirs
        if dirs:
            result.problems.append(f"{who} created directories no manifest file is under: {sorted(dirs)[:5]}")
    return result


def agree(readings: list[Reading]) -> bool:
    """All readers read the archive cleanly and extracted the same files."""
    first = readings[0]
    return all(not r.failure and not r.outside for r in readings) and all(
        r.entries == first.entries for r in readings[1:]
    )
