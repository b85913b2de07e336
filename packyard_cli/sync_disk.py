"""The file system side of ``packyard sync``: every change goes through directory file descriptors, no link is
ever followed, and a folder appears or is replaced in one rename.

Everything here is relative to an open directory (``os.open(name, ..., dir_fd=parent)`` with ``O_NOFOLLOW``): a
path from a manifest is walked one segment at a time, each opened with ``O_DIRECTORY | O_NOFOLLOW``, so a link
planted anywhere under the sync folder (or raced in) makes the open fail instead of leading outside it.

``Disk.write`` is the one place bytes are written: tests replace it to simulate a full disk (ENOSPC).
"""

from __future__ import annotations

import ctypes
import errno
import os
import shutil
import stat
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field

DIRECTORY_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
NEW_FILE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC
FOLDER_MODE = 0o755
DEFAULT_FILE_MODE = 0o644  # a manifest file without a mode
PLAIN_MODE_BITS = 0o777  # what a synced file may carry: never setuid, setgid or sticky
_RENAME_EXCHANGE = 2  # linux/fs.h


class UnsafeFolder(Exception):
    """The sync folder holds something sync must not touch: a link, a special file, an entry of another owner."""

    def __init__(self, code: str, title: str, path: str) -> None:
        super().__init__(f"{title}: {path}")
        self.code = code
        self.title = title
        self.path = path


@dataclass(frozen=True)
class Entry:
    """A regular file found on disk, relative to the folder it was found in."""

    size: int
    mode: int  # plain permission bits


@dataclass
class Disk:
    """Writes bytes to an open file. A test's subclass raises ``OSError(ENOSPC)`` to play a full disk."""

    written: int = field(default=0)

    def write(self, fd: int, data: bytes | memoryview) -> None:
        view = memoryview(data)
        while view:
            done = os.write(fd, view)
            self.written += done
            view = view[done:]


# ------------------------------------------------------------------ opening without following links


def open_folder(name: str, dir_fd: int | None = None) -> int:
    """An fd of the directory ``name`` (relative to ``dir_fd``); ``OSError(ELOOP/ENOTDIR)`` if it is a link or not
    a directory."""
    return os.open(name, DIRECTORY_FLAGS, dir_fd=dir_fd)


def ensure_folder(name: str, dir_fd: int) -> int:
    """``name`` under ``dir_fd``, created if missing, opened without following a link."""
    with suppress(FileExistsError):
        os.mkdir(name, FOLDER_MODE, dir_fd=dir_fd)
    return open_folder(name, dir_fd)


@contextmanager
def folder(name: str, dir_fd: int | None = None, *, create: bool = False) -> Iterator[int]:
    fd = ensure_folder(name, dir_fd) if create and dir_fd is not None else open_folder(name, dir_fd)
    try:
        yield fd
    finally:
        os.close(fd)


def open_root(path: str) -> int:
    """The sync folder itself (created with its parents if missing); refused if it is a link or not ours."""
    os.makedirs(path, mode=FOLDER_MODE, exist_ok=True)
    try:
        fd = os.open(path, DIRECTORY_FLAGS)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            raise UnsafeFolder("sync_link", "the sync folder is a link or not a folder", path) from None
        raise
    if os.fstat(fd).st_uid != os.geteuid():
        os.close(fd)
        raise UnsafeFolder("sync_foreign_owner", "the sync folder belongs to another user", path)
    return fd


class FolderTree:
    """Opens (and creates) the folders of a tree under one root fd, each at most once, closing them together."""

    def __init__(self, root_fd: int, *, create: bool) -> None:
        self._root = root_fd
        self._create = create
        self._open: dict[str, int] = {"": root_fd}

    def fd_of(self, parent: str) -> int:
        if parent in self._open:
            return self._open[parent]
        above, _, name = parent.rpartition("/")
        base = self.fd_of(above)
        fd = ensure_folder(name, base) if self._create else open_folder(name, base)
        self._open[parent] = fd
        return fd

    def close(self) -> None:
        for path, fd in self._open.items():
            if path:
                os.close(fd)
        self._open = {"": self._root}

    def __enter__(self) -> FolderTree:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# ------------------------------------------------------------------ reading a folder


def scan(dir_fd: int, where: str = "", unsafe: list[UnsafeFolder] | None = None) -> dict[str, Entry]:
    """Every regular file under ``dir_fd`` (relative paths); raises :class:`UnsafeFolder` on a link, a special file
    or an entry of another owner, naming it (or, given ``unsafe``, lists them there and goes on). Nothing is
    followed or changed."""
    found: dict[str, Entry] = {}

    def refuse(problem: UnsafeFolder) -> None:
        if unsafe is None:
            raise problem
        unsafe.append(problem)

    me = os.geteuid()
    with os.scandir(dir_fd) as entries:
        for entry in entries:
            path = f"{where}{entry.name}"
            info = entry.stat(follow_symlinks=False)
            if stat.S_ISLNK(info.st_mode):
                refuse(UnsafeFolder("sync_link", "the sync folder holds a link (sync follows none)", path))
            elif info.st_uid != me:
                refuse(UnsafeFolder("sync_foreign_owner", "the sync folder holds an entry of another user", path))
            elif stat.S_ISDIR(info.st_mode):
                with folder(entry.name, dir_fd) as child:
                    found.update(scan(child, f"{path}/", unsafe))
            elif stat.S_ISREG(info.st_mode):
                found[path] = Entry(size=info.st_size, mode=stat.S_IMODE(info.st_mode))
            else:
                refuse(UnsafeFolder("sync_special_file", "the sync folder holds a special file", path))
    return found


def names(dir_fd: int) -> list[str]:
    with os.scandir(dir_fd) as entries:
        return sorted(entry.name for entry in entries)


def exists(name: str, dir_fd: int) -> bool:
    try:
        os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return False
    return True


# ------------------------------------------------------------------ changing a folder


def replace_file(name: str, dir_fd: int, data: bytes, disk: Disk) -> None:
    """Write a small file (the sync state) next to ``name`` and rename it over ``name``, synced first."""
    scratch = f".{name}.new"
    with suppress(FileNotFoundError):
        os.unlink(scratch, dir_fd=dir_fd)
    fd = os.open(scratch, NEW_FILE_FLAGS, 0o644, dir_fd=dir_fd)
    try:
        disk.write(fd, data)
        os.fsync(fd)
    except BaseException:
        os.close(fd)
        os.unlink(scratch, dir_fd=dir_fd)
        raise
    os.close(fd)
    os.rename(scratch, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)


def remove_tree(name: str, dir_fd: int) -> None:
    """Remove ``name`` under ``dir_fd`` and everything in it (shutil's fd-based rmtree follows no link)."""
    info = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    if stat.S_ISDIR(info.st_mode):
        shutil.rmtree(name, dir_fd=dir_fd)
    else:
        os.unlink(name, dir_fd=dir_fd)


def _renameat2() -> object | None:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        function = libc.renameat2
    except (OSError, AttributeError):
        return None
    function.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    function.restype = ctypes.c_int
    return function


_EXCHANGE = _renameat2()


def exchange(a: str, a_fd: int, b: str, b_fd: int) -> bool:
    """Swap two folders in one step (Linux ``renameat2(RENAME_EXCHANGE)``): a reader of either name sees the old
    folder or the new one, never neither. False when the system or file system cannot (then nothing moved)."""
    if _EXCHANGE is None or os.environ.get("PACKYARD_SYNC_NO_EXCHANGE"):
        return False
    result = _EXCHANGE(a_fd, os.fsencode(a), b_fd, os.fsencode(b), _RENAME_EXCHANGE)  # type: ignore[operator]
    if result == 0:
        return True
    code = ctypes.get_errno()
    if code in (errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP):
        return False
    raise OSError(code, os.strerror(code), b)
