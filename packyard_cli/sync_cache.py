"""The local file cache of ``packyard sync``: files by sha256, shared by every release and workspace synced on this
machine, bounded in size, evicted least recently used first, and checked on every use.

Layout: ``ROOT/ab/abcdef…`` (the file's sha256), written to ``ROOT/tmp/`` first and renamed in only once its bytes
hash to its name, so an entry is never half written. A read hashes the bytes again as it copies them out (a cache
entry changed on disk is dropped and fetched again, never used); its modification time is set on every use, which
is the order eviction follows (the oldest use goes first).
"""

from __future__ import annotations

import hashlib
import os
import stat
import uuid
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from packyard_cli.sync_disk import NEW_FILE_FLAGS, READ_FLAGS, Disk, folder

CHUNK = 1 << 20
DEFAULT_MAX_BYTES = 1 << 30


def default_cache_dir() -> Path:
    """``$PACKYARD_CACHE_DIR``, else ``$XDG_CACHE_HOME/packyard/files``, else ``~/.cache/packyard/files``."""
    explicit = os.environ.get("PACKYARD_CACHE_DIR")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "packyard" / "files"


class CacheMismatch(Exception):
    """Bytes written into the cache did not hash to the sha256 (or size) they were stored as."""


@dataclass
class FileCache:
    root: Path
    max_bytes: int = DEFAULT_MAX_BYTES
    disk: Disk | None = None

    def __post_init__(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True, mode=0o700)
        (self.root / "tmp").mkdir(exist_ok=True, mode=0o700)
        self.disk = self.disk or Disk()

    def _entry(self, sha256: str) -> Path:
        return self.root / sha256[:2] / sha256

    def has(self, sha256: str, size: int) -> bool:
        try:
            info = os.stat(self._entry(sha256), follow_symlinks=False)
        except FileNotFoundError:
            return False
        return stat.S_ISREG(info.st_mode) and info.st_size == size

    def drop(self, sha256: str) -> None:
        self._entry(sha256).unlink(missing_ok=True)

    @contextmanager
    def store(self, sha256: str, size: int) -> Iterator[CacheWriter]:
        """Write one entry: the caller writes its bytes to the writer; they enter the cache only if they hash to
        ``sha256`` (else :class:`CacheMismatch`, and nothing is kept)."""
        with folder(str(self.root / "tmp")) as tmp_fd:
            name = uuid.uuid4().hex
            fd = os.open(name, NEW_FILE_FLAGS, 0o600, dir_fd=tmp_fd)
            writer = CacheWriter(fd, self.disk or Disk())
            try:
                yield writer
                os.fsync(fd)
                if writer.size != size or writer.hash.hexdigest() != sha256:
                    raise CacheMismatch(
                        f"got {writer.size} bytes with sha256 {writer.hash.hexdigest()}, expected {size} bytes "
                        f"with sha256 {sha256}"
                    )
            except BaseException:
                os.close(fd)
                os.unlink(name, dir_fd=tmp_fd)
                raise
            os.close(fd)
            target = self._entry(sha256)
            target.parent.mkdir(exist_ok=True, mode=0o700)
            os.rename(name, target, src_dir_fd=tmp_fd)

    def copy_to(self, sha256: str, size: int, fd: int, disk: Disk) -> bool:
        """Copy an entry into the open file ``fd``, hashing it as it goes: False (and the entry dropped) when it is
        missing or no longer the bytes it was stored as."""
        try:
            source = os.open(self._entry(sha256), READ_FLAGS)
        except (FileNotFoundError, OSError):
            return False
        digest, copied = hashlib.sha256(), 0
        try:
            while chunk := os.read(source, CHUNK):
                digest.update(chunk)
                copied += len(chunk)
                if copied > size:
                    break
                disk.write(fd, chunk)
        finally:
            os.close(source)
        if copied != size or digest.hexdigest() != sha256:
            self.drop(sha256)
            return False
        os.utime(self._entry(sha256))  # the time of last use: what eviction orders by
        return True

    def read_bytes(self, sha256: str, limit: int) -> bytes | None:
        """A small entry (a manifest) whole, if present and still hashing to its name."""
        try:
            data = self._entry(sha256).read_bytes()
        except FileNotFoundError:
            return None
        if len(data) > limit or hashlib.sha256(data).hexdigest() != sha256:
            self.drop(sha256)
            return None
        os.utime(self._entry(sha256))
        return data

    def entries(self) -> Iterable[tuple[Path, os.stat_result]]:
        for shard in self.root.iterdir():
            if shard.name == "tmp" or not shard.is_dir() or shard.is_symlink():
                continue
            for entry in shard.iterdir():
                info = entry.lstat()
                if stat.S_ISREG(info.st_mode):
                    yield entry, info

    def size(self) -> int:
        return sum(info.st_size for _, info in self.entries())

    def evict(self) -> list[str]:
        """Remove entries, least recently used first, until the cache holds at most ``max_bytes``; also what a
        killed run left in ``tmp/``. Returns the sha256 of what it removed."""
        for leftover in (self.root / "tmp").iterdir():
            leftover.unlink(missing_ok=True)
        found = sorted(self.entries(), key=lambda pair: (pair[1].st_mtime_ns, pair[0].name))
        total = sum(info.st_size for _, info in found)
        removed: list[str] = []
        for path, info in found:
            if total <= self.max_bytes:
                break
            path.unlink(missing_ok=True)
            total -= info.st_size
            removed.append(path.name)
        return removed


class CacheWriter:
    """Where a :class:`~packyard_cli.sync_sources.FileSource` writes one file's bytes."""

    def __init__(self, fd: int, disk: Disk) -> None:
        self._fd = fd
        self._disk = disk
        self.hash = hashlib.sha256()
        self.size = 0

    def write(self, data: bytes) -> None:
        self.hash.update(data)
        self.size += len(data)
        self._disk.write(self._fd, data)
