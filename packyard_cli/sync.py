"""``packyard sync WS DIR`` and its Python API: make ``DIR`` hold exactly what a workspace's resolved view says, one
folder per installation, the way a runtime loads it.

>>> from packyard_cli.sync import sync_workspace
>>> result = sync_workspace("ws-1", "/srv/skills", endpoint="https://…", token="…")  # doctest: +SKIP
>>> result.added, result.updated, result.removed, result.unchanged  # doctest: +SKIP

What a runtime reading ``DIR`` can rely on:

* ``DIR/<installationId>/`` holds the release's files and nothing else: regular files only, with the manifest's
  mode (0644 when it gives none; never setuid, setgid or sticky), each one's sha256 checked before its folder
  becomes visible. Paths are written one segment at a time through directory fds with ``O_NOFOLLOW``
  (:mod:`packyard_cli.sync_disk`), so nothing is written outside ``DIR`` and no link is followed.
* An installation's folder changes in one step: the new one is built in ``DIR/.packyard/staging/`` and swapped in
  with ``renameat2(RENAME_EXCHANGE)`` (one atomic step: a reader sees the old folder or the new one). Where the
  file system cannot exchange, the old folder is renamed aside, then the new one in: between those two renames the
  folder is absent (never half there). A killed sync leaves each folder as it was or as it should be; the next run
  removes what the killed one left in ``.packyard/`` and finishes.
* ``DIR/.packyard/`` is sync's own (its state, the manifests of what is installed, staging): not an installation
  (installation ids never start with a dot). Installation folders no longer in the view are removed.

Incremental: an installation whose release (manifest digest) is what sync last put there, and whose folder still
has the manifest's paths, sizes and modes, is left alone, with no request; files come from a content-addressed
cache (:mod:`packyard_cli.sync_cache`) first, and only what it lacks is fetched (:mod:`packyard_cli.sync_sources`).

Refused before anything changes: a ``DIR`` that is a link, holds a link, a special file or an entry of another
user, or holds files but was never synced. A full disk (or any write error) stops the run with its reason; what
was complete stays.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import json
import os
import stat
import uuid
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from packyard_cli.client import EXIT_CONFLICT, EXIT_ERROR, EXIT_REFUSED, EXIT_UNAVAILABLE, Client, CliError, segment
from packyard_cli.sync_cache import DEFAULT_MAX_BYTES, FileCache, default_cache_dir
from packyard_cli.sync_disk import (
    DEFAULT_FILE_MODE,
    NEW_FILE_FLAGS,
    PLAIN_MODE_BITS,
    READ_FLAGS,
    Disk,
    Entry,
    FolderTree,
    UnsafeFolder,
    ensure_folder,
    exchange,
    exists,
    folder,
    names,
    open_folder,
    open_root,
    remove_tree,
    replace_file,
    scan,
)
from packyard_cli.sync_sources import (
    ArchiveSource,
    FileRouteSource,
    FileSource,
    ReleaseRef,
    ReleaseSource,
    SourceRejected,
    download_manifest,
)

STATE_FOLDER = ".packyard"
STATE_FILE = "state.json"
STATE_SCHEMA = 1
CRASH_ENV = "PACKYARD_SYNC_CRASH_AT"  # tests: os._exit at a named point (download, build, swap, remove)
CRASH_EXIT = 86
MANIFEST_LIMIT = 64 << 20

Progress = Callable[[dict[str, Any]], None]


class SyncError(CliError):
    """Sync stopped; ``code`` says why (``sync_link``, ``sync_foreign_owner``, ``sync_disk_full`` …). What was
    complete in the folder stays as it was."""


def crash_point(name: str) -> None:
    """A deterministic kill for the tests (``PACKYARD_SYNC_CRASH_AT=name``): the process ends there at once."""
    if os.environ.get(CRASH_ENV) == name:
        os._exit(CRASH_EXIT)


# ------------------------------------------------------------------ results


@dataclass
class SyncResult:
    """What one sync changed. Installation ids in each list; bytes and requests of what was downloaded."""

    workspace: str
    directory: str
    added: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    files_from_cache: int = 0
    files_fetched: int = 0
    downloads: int = 0
    downloaded_bytes: int = 0
    evicted: int = 0

    @property
    def changed(self) -> bool:
        return bool(self.added or self.updated or self.removed)

    def as_json(self) -> dict[str, Any]:
        """camelCase, as the API's JSON is."""
        return {_camel(name): value for name, value in asdict(self).items()}


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(word.title() for word in rest)


@dataclass(frozen=True)
class Drift:
    """One difference between ``DIR`` and the resolved view: ``kind`` is changed, added, removed, mode (a file),
    missing or unexpected (an installation folder), or unsafe (a link, special file or entry of another user)."""

    installation: str
    path: str
    kind: str
    detail: str = ""


@dataclass
class CheckResult:
    workspace: str
    directory: str
    drift: list[Drift] = field(default_factory=list)
    checked_files: int = 0

    @property
    def clean(self) -> bool:
        return not self.drift

    def as_json(self) -> dict[str, Any]:
        return {
            "workspace": self.workspace,
            "directory": self.directory,
            "clean": self.clean,
            "checkedFiles": self.checked_files,
            "drift": [asdict(d) for d in self.drift],
        }


# ------------------------------------------------------------------ the resolved view


def read_resolved(client: Client, workspace: str) -> list[ReleaseRef]:
    """Every page of the workspace's resolved view."""
    path = f"/v1/workspaces/{segment(workspace)}/resolved"
    found: list[ReleaseRef] = []
    cursor: str | None = None
    while True:
        page = dict(client.request("GET", path, params={"cursor": cursor} if cursor else None).body or {})
        found.extend(ReleaseRef.of(item) for item in page.get("items") or [])
        cursor = page.get("nextCursor")
        if not cursor:
            for release in found:
                _check_folder_name(release.installation_id)
            return sorted(found, key=lambda r: r.installation_id)


def _fresh(client: Client, workspace: str, release: ReleaseRef) -> ReleaseRef:
    """The same release with the view's new download URLs; if the workspace moved on meanwhile, a retryable
    error (the next run syncs what it says then)."""
    for again in read_resolved(client, workspace):
        if again.installation_id == release.installation_id and again.manifest_digest == release.manifest_digest:
            return again
    raise SyncError(
        "the workspace changed while sync ran",
        code="sync_view_changed",
        detail=f"{release.label} is no longer what the resolved view says; run sync again",
        exit_code=EXIT_UNAVAILABLE,
    )


def _check_folder_name(installation_id: str) -> None:
    """An installation id is a folder name of ``DIR``: one segment, never ``..`` nor a dot name (the service's own
    rule). An answer naming anything else is refused before anything is written."""
    from packyard_cli.rules import INSTALLATION_ID

    if not INSTALLATION_ID.fullmatch(installation_id):
        raise SyncError(
            "the resolved view names an installation sync cannot make a folder of",
            code="sync_unsafe_name",
            detail=f"installation id {installation_id[:80]!r} is not an installation id. Nothing was changed.",
            exit_code=EXIT_REFUSED,
        )


def _client(client: Client | None, endpoint: str | None, token: str | None) -> Client:
    if client is not None:
        return client
    where = endpoint or os.environ.get("PACKYARD_ENDPOINT")
    if not where:
        raise SyncError("no endpoint", detail="pass endpoint= or set PACKYARD_ENDPOINT", exit_code=EXIT_ERROR)
    bearer = token or os.environ.get("PACKYARD_TOKEN")
    return Client(where, token=lambda: bearer)


def _manifest_of(data: bytes) -> Any:
    from packyard.config import Limits
    from packyard.publishing.manifest import parse_manifest

    return parse_manifest(data, Limits())


def file_mode(entry: Any) -> int:
    return (entry.mode if entry.mode is not None else DEFAULT_FILE_MODE) & PLAIN_MODE_BITS


# ------------------------------------------------------------------ the state folder


class SyncFolder:
    """``DIR`` while one sync holds it: the root fd, ``.packyard/`` (locked), the recorded state and manifests."""

    def __init__(self, root_fd: int, state_fd: int, disk: Disk) -> None:
        self.root_fd = root_fd
        self.state_fd = state_fd
        self.disk = disk
        self.installed: dict[str, dict[str, Any]] = self._read_state()

    def _read_state(self) -> dict[str, dict[str, Any]]:
        try:
            fd = os.open(STATE_FILE, READ_FLAGS, dir_fd=self.state_fd)
        except FileNotFoundError:
            return {}
        with os.fdopen(fd, "rb") as f:
            try:
                state = json.loads(f.read())
            except ValueError:
                return {}  # unreadable: everything is rebuilt (from the cache), which converges
        if not isinstance(state, dict) or state.get("schemaVersion") != STATE_SCHEMA:
            return {}
        installed = state.get("installations")
        return dict(installed) if isinstance(installed, dict) else {}

    def save(self, workspace: str) -> None:
        body = {"schemaVersion": STATE_SCHEMA, "workspace": workspace, "installations": self.installed}
        replace_file(STATE_FILE, self.state_fd, json.dumps(body, indent=1, sort_keys=True).encode(), self.disk)

    def manifest_bytes(self, digest: str) -> bytes | None:
        with folder("manifests", self.state_fd, create=True) as fd:
            try:
                handle = os.open(f"{digest}.json", READ_FLAGS, dir_fd=fd)
            except FileNotFoundError:
                return None
            data = _read_small(handle)
        return data if data is not None and hashlib.sha256(data).hexdigest() == digest else None

    def keep_manifest(self, digest: str, data: bytes) -> None:
        with folder("manifests", self.state_fd, create=True) as fd:
            replace_file(f"{digest}.json", fd, data, self.disk)

    def forget_manifests(self, keep: set[str]) -> None:
        with folder("manifests", self.state_fd, create=True) as fd:
            for name in names(fd):
                if name.removesuffix(".json") not in keep:
                    os.unlink(name, dir_fd=fd)

    def clear_leftovers(self) -> None:
        """What a killed run left: half-built folders, old folders on their way out, scratch files."""
        for name in ("staging", "trash"):
            if exists(name, self.state_fd):
                remove_tree(name, self.state_fd)
        for name in names(self.state_fd):
            if name.startswith(".") and name.endswith(".new"):
                os.unlink(name, dir_fd=self.state_fd)


@contextmanager
def _held_folder(directory: str, disk: Disk) -> Iterator[SyncFolder]:
    with ExitStack() as stack:
        root_fd = open_root(directory)
        stack.callback(os.close, root_fd)
        fresh = not exists(STATE_FOLDER, root_fd)
        if fresh and names(root_fd):
            raise SyncError(
                f"{directory} holds files but was never synced",
                code="sync_folder_not_empty",
                detail="sync replaces everything in its folder: give it an empty or new folder",
                exit_code=EXIT_REFUSED,
            )
        state_fd = ensure_folder(STATE_FOLDER, root_fd)
        stack.callback(os.close, state_fd)
        try:
            fcntl.flock(state_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise SyncError(
                f"another sync is running into {directory}", code="sync_busy", exit_code=EXIT_CONFLICT
            ) from None
        yield SyncFolder(root_fd, state_fd, disk)


# ------------------------------------------------------------------ one installation


@dataclass
class _Installer:
    place: SyncFolder
    cache: FileCache
    source: FileSource
    client: Client
    result: SyncResult
    progress: Progress
    keys: Any = None  # a pinned packyard_cli.attestations.KeySet: every release's envelope is checked before use

    def verify_signature(self, release: ReleaseRef) -> None:
        """The release's DSSE envelope verifies against the pinned keys, states this package and version, and
        names the archive and manifest digests of the resolved view (which the source then checks the bytes
        against): else :class:`SyncError` with the refusal's code, and nothing of this release is written."""
        if self.keys is None:
            return
        from packyard_cli import attestations

        path = str(
            release.item.get("attestation")
            or f"/v1/packages/{segment(release.package)}/versions/{segment(release.version)}/attestation"
        )
        body = self.client.request("GET", path).body
        raw = json.dumps(body).encode() if isinstance(body, dict) else str(body or "").encode()
        try:
            verified = attestations.verify_envelope(raw, self.keys, package=release.package, version=release.version)
            attestations.check_subjects(
                verified, archive_sha256=release.archive_sha256, manifest_sha256=release.manifest_digest
            )
        except attestations.VerificationRefused as refused:
            raise SyncError(
                f"the signature of {release.label} is refused",
                code=refused.code,
                detail=f"{refused.reason}. Nothing of this release was written.",
                exit_code=refused.exit_code,
            ) from None

    def manifest(self, release: ReleaseRef) -> Any:
        data = self.place.manifest_bytes(release.manifest_digest)
        data = data or self.cache.read_bytes(release.manifest_digest, MANIFEST_LIMIT)
        if data is None:
            data = download_manifest(self.client, release, MANIFEST_LIMIT)
            self.result.downloads += 1
            self.result.downloaded_bytes += len(data)
            with self.cache.store(release.manifest_digest, len(data)) as writer:
                writer.write(data)
        return data

    def install(self, release: ReleaseRef) -> None:
        self.verify_signature(release)
        data = self.manifest(release)
        manifest = _manifest_of(data)
        self._fill_cache(release, manifest)
        staging = f"{release.installation_id}.{uuid.uuid4().hex[:12]}"
        with folder("staging", self.place.state_fd, create=True) as staging_fd:
            self.progress({"event": "step", "installation": release.installation_id, "step": "build"})
            try:
                self._build(release, manifest, staging_fd, staging)
                self.place.keep_manifest(release.manifest_digest, data)
                self._swap_in(release.installation_id, staging_fd, staging)
            except BaseException:
                if exists(staging, staging_fd):  # half built, never visible: removing it frees what it took
                    remove_tree(staging, staging_fd)
                raise
        self.place.installed[release.installation_id] = {
            "manifestDigest": release.manifest_digest,
            "package": release.package,
            "release": release.version,
        }

    def _fill_cache(self, release: ReleaseRef, manifest: Any) -> None:
        wanted: dict[str, Any] = {}
        for entry in manifest.files:
            if entry.sha256 not in wanted and not self.cache.has(entry.sha256, entry.size):
                wanted[entry.sha256] = entry
        self.result.files_from_cache += len(manifest.files) - len(wanted)
        if wanted:
            self.progress({"event": "step", "installation": release.installation_id, "step": "download"})
            before = (self.source.requests, self.source.downloaded_bytes)
            self.source.fill(release, manifest, list(wanted.values()), self.cache)
            self.result.files_fetched += len(wanted)
            self.result.downloads += self.source.requests - before[0]
            self.result.downloaded_bytes += self.source.downloaded_bytes - before[1]

    def _build(self, release: ReleaseRef, manifest: Any, staging_fd: int, staging: str) -> None:
        os.mkdir(staging, 0o755, dir_fd=staging_fd)
        with folder(staging, staging_fd) as top, FolderTree(top, create=True) as tree:
            for index, entry in enumerate(manifest.files):
                parent, _, name = entry.path.rpartition("/")
                self._write(release, manifest, entry, tree.fd_of(parent), name)
                if index == 0:
                    crash_point("build")
            os.fsync(top)

    def _write(self, release: ReleaseRef, manifest: Any, entry: Any, dir_fd: int, name: str) -> None:
        fd = os.open(name, NEW_FILE_FLAGS, 0o600, dir_fd=dir_fd)
        try:
            if not self.cache.copy_to(entry.sha256, entry.size, fd, self.place.disk):
                # the entry went missing or changed on disk since it was filled: fetch it once more
                os.ftruncate(fd, 0)
                os.lseek(fd, 0, os.SEEK_SET)
                self.source.fill(release, manifest, [entry], self.cache)
                if not self.cache.copy_to(entry.sha256, entry.size, fd, self.place.disk):
                    raise SyncError(
                        f"{entry.path} of {release.label} could not be verified",
                        code="sync_digest_mismatch",
                        detail=f"its bytes do not hash to the manifest's sha256 {entry.sha256}",
                        exit_code=EXIT_REFUSED,
                    )
            os.fchmod(fd, file_mode(entry))
            os.fsync(fd)
        finally:
            os.close(fd)

    def _swap_in(self, target: str, staging_fd: int, staging: str) -> None:
        root = self.place.root_fd
        if not exists(target, root):
            os.rename(staging, target, src_dir_fd=staging_fd, dst_dir_fd=root)
            crash_point("swap")
            return
        if exchange(staging, staging_fd, target, root):
            crash_point("swap")
            remove_tree(staging, staging_fd)  # the old folder, now at the staging name
            return
        with folder("trash", self.place.state_fd, create=True) as trash_fd:
            aside = f"{target}.{uuid.uuid4().hex[:12]}"
            os.rename(target, aside, src_dir_fd=root, dst_dir_fd=trash_fd)
            crash_point("swap")
            os.rename(staging, target, src_dir_fd=staging_fd, dst_dir_fd=root)
            remove_tree(aside, trash_fd)

    def uninstall(self, name: str) -> None:
        with folder("trash", self.place.state_fd, create=True) as trash_fd:
            aside = f"{name}.{uuid.uuid4().hex[:12]}"
            os.rename(name, aside, src_dir_fd=self.place.root_fd, dst_dir_fd=trash_fd)
            crash_point("remove")
            remove_tree(aside, trash_fd)
        self.place.installed.pop(name, None)


def _matches(on_disk: dict[str, Entry], manifest: Any) -> bool:
    """The folder has exactly the manifest's paths, sizes and modes (contents: ``--check``)."""
    if len(on_disk) != len(manifest.files):
        return False
    for entry in manifest.files:
        found = on_disk.get(entry.path)
        if found is None or found.size != entry.size or found.mode != file_mode(entry):
            return False
    return True


def _by_installation(tree: dict[str, Entry]) -> dict[str, dict[str, Entry]]:
    grouped: dict[str, dict[str, Entry]] = {}
    for path, entry in tree.items():
        top, _, rest = path.partition("/")
        grouped.setdefault(top, {})[rest] = entry
    return grouped


def _failure(exc: OSError, directory: str) -> SyncError:
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return SyncError(
            f"no space left on the device of {directory}",
            code="sync_disk_full",
            detail="free some space and run sync again: what was complete is unchanged",
            exit_code=EXIT_ERROR,
        )
    if exc.errno in (errno.ELOOP, errno.ENOTDIR):
        return SyncError(
            f"a link or file appeared where sync expected a folder in {directory}",
            code="sync_link",
            detail=str(exc),
            exit_code=EXIT_REFUSED,
        )
    return SyncError(f"sync into {directory} failed", code="sync_failed", detail=str(exc), exit_code=EXIT_ERROR)


def _unsafe(problem: UnsafeFolder, directory: str) -> SyncError:
    return SyncError(
        problem.title,
        code=problem.code,
        detail=f"{os.path.join(directory, problem.path)}: remove it, or sync into another folder. Nothing was changed.",
        exit_code=EXIT_REFUSED,
    )


# ------------------------------------------------------------------ the API


def sync_workspace(
    workspace: str,
    directory: str | os.PathLike[str],
    *,
    endpoint: str | None = None,
    token: str | None = None,
    client: Client | None = None,
    cache_dir: str | os.PathLike[str] | None = None,
    cache_max_bytes: int = DEFAULT_MAX_BYTES,
    source: FileSource | None = None,
    disk: Disk | None = None,
    progress: Progress | None = None,
    keys: Any = None,
) -> SyncResult:
    """Make ``directory`` hold exactly the workspace's resolved view, one folder per installation; return what
    changed. Raises :class:`SyncError` (with a ``code``) and leaves every complete folder as it was on a link, a
    special file or an entry of another user in ``directory``, a full disk, or bytes that are not the ones the
    resolved view names. ``endpoint`` and ``token`` default to ``$PACKYARD_ENDPOINT`` and ``$PACKYARD_TOKEN``.
    ``keys`` (a pinned key set, :func:`packyard_cli.attestations.load_key_set`): each release sync writes must carry
    a signed statement those keys verify, naming its archive and manifest (refused with the refusal's code)."""
    target = os.fspath(directory)
    api = _client(client, endpoint, token)
    disk = disk or Disk()
    cache = FileCache(Path(cache_dir) if cache_dir else default_cache_dir(), cache_max_bytes, disk)
    if source is None:
        source = ReleaseSource(ArchiveSource(api, exit_point=crash_point), FileRouteSource(api, exit_point=crash_point))
    notify = progress or (lambda event: None)
    result = SyncResult(workspace=workspace, directory=target)
    releases = read_resolved(api, workspace)
    try:
        with _held_folder(target, disk) as place:
            installer = _Installer(place, cache, source, api, result, notify, keys)
            tree = _by_installation(scan(place.root_fd))  # refuses links, special files, other owners first
            place.clear_leftovers()
            wanted = {r.installation_id for r in releases}
            notify({"event": "start", "installations": len(releases)})
            for index, release in enumerate(releases):
                on_disk = _installation_files(tree, place.root_fd, release.installation_id)
                notify({"event": "installation", "installation": release.installation_id, "index": index})
                if _unchanged(place, release, on_disk):
                    result.unchanged.append(release.installation_id)
                    continue
                _install(installer, api, workspace, release)
                (result.updated if on_disk is not None else result.added).append(release.installation_id)
                place.save(workspace)
            result.removed.extend(_remove_the_rest(place, installer, wanted))
            place.save(workspace)
            place.forget_manifests({r.manifest_digest for r in releases})
            place.clear_leftovers()
            result.evicted = len(cache.evict())
    except UnsafeFolder as problem:
        raise _unsafe(problem, target) from None
    except SourceRejected as exc:
        exc.exit_code = EXIT_REFUSED
        raise
    except OSError as exc:
        raise _failure(exc, target) from exc
    notify({"event": "done"})
    return result


def _unchanged(place: SyncFolder, release: ReleaseRef, on_disk: dict[str, Entry] | None) -> bool:
    """The folder holds the release sync last swapped in, with its manifest's paths, sizes and modes."""
    recorded = place.installed.get(release.installation_id) or {}
    if on_disk is None or recorded.get("manifestDigest") != release.manifest_digest:
        return False
    data = place.manifest_bytes(release.manifest_digest)
    return data is not None and _matches(on_disk, _manifest_of(data))


def _install(installer: _Installer, api: Client, workspace: str, release: ReleaseRef) -> None:
    try:
        installer.install(release)
    except CliError as refused:
        if refused.status != 403 or isinstance(refused, SyncError):
            raise
        # the view's presigned URLs last minutes (download_url_ttl_seconds): a long sync outlives them; read the
        # view again for fresh ones, once
        installer.install(_fresh(api, workspace, release))


def _remove_the_rest(place: SyncFolder, installer: _Installer, wanted: set[str]) -> list[str]:
    """Every folder of ``DIR`` the view no longer names goes (in one rename each); returns their names."""
    removed = [name for name in names(place.root_fd) if name != STATE_FOLDER and name not in wanted]
    for name in removed:
        installer.uninstall(name)
    for name in list(place.installed):
        if name not in wanted:
            place.installed.pop(name)
    return removed


def check_workspace(
    workspace: str,
    directory: str | os.PathLike[str],
    *,
    endpoint: str | None = None,
    token: str | None = None,
    client: Client | None = None,
    cache_dir: str | os.PathLike[str] | None = None,
) -> CheckResult:
    """Compare ``directory`` with the workspace's resolved view, hashing every file; change nothing. The result
    lists every drift (a changed, added or removed file, a changed mode, a missing or unexpected installation
    folder, anything unsafe)."""
    target = os.fspath(directory)
    api = _client(client, endpoint, token)
    cache = FileCache(Path(cache_dir) if cache_dir else default_cache_dir())
    releases = read_resolved(api, workspace)
    result = CheckResult(workspace=workspace, directory=target)
    try:
        root_fd = open_folder(target)
    except FileNotFoundError:
        result.drift.extend(Drift(r.installation_id, "", "missing", "the sync folder does not exist") for r in releases)
        return result
    except OSError as exc:  # a link (ELOOP) or not a folder
        raise _failure(exc, target) from exc
    try:
        unsafe: list[UnsafeFolder] = []
        tree = _by_installation(scan(root_fd, unsafe=unsafe))
        for problem in unsafe:
            top, _, rest = problem.path.partition("/")
            result.drift.append(Drift(top, rest, "unsafe", problem.title))
        wanted = {r.installation_id for r in releases}
        for name in sorted(set(tree) - wanted - {STATE_FOLDER}):
            result.drift.append(Drift(name, "", "unexpected", "not in the resolved view"))
        for release in releases:
            on_disk = _installation_files(tree, root_fd, release.installation_id)
            if on_disk is None:
                result.drift.append(Drift(release.installation_id, "", "missing", "no folder for this installation"))
                continue
            data = _recorded_manifest(root_fd, release) or cache.read_bytes(release.manifest_digest, MANIFEST_LIMIT)
            manifest = _manifest_of(data or download_manifest(api, release, MANIFEST_LIMIT))
            result.checked_files += _check_installation(root_fd, release.installation_id, manifest, on_disk, result)
    except OSError as exc:  # changed while it was read (a folder swapped for a link): said, not a traceback
        raise _failure(exc, target) from exc
    finally:
        os.close(root_fd)
    return result


def _installation_files(tree: dict[str, dict[str, Entry]], root_fd: int, installation: str) -> dict[str, Entry] | None:
    """The files of an installation's folder as scanned; None when there is no such folder. A folder whose files
    are all gone lists nothing in the scan, and is an installation with no files (each of them removed), not a
    missing one."""
    found = tree.get(installation)
    if found is not None:
        return found
    try:
        is_folder = stat.S_ISDIR(os.stat(installation, dir_fd=root_fd, follow_symlinks=False).st_mode)
    except FileNotFoundError:
        return None
    return {} if is_folder else None


def _recorded_manifest(root_fd: int, release: ReleaseRef) -> bytes | None:
    try:
        with folder(STATE_FOLDER, root_fd) as state_fd, folder("manifests", state_fd) as fd:
            data = _read_small(os.open(f"{release.manifest_digest}.json", READ_FLAGS, dir_fd=fd))
    except OSError:
        return None
    return data if data is not None and hashlib.sha256(data).hexdigest() == release.manifest_digest else None


def _read_small(fd: int) -> bytes | None:
    """A kept manifest whole (None above MANIFEST_LIMIT); takes ``fd`` and closes it. Sized by fstat: a read of
    ``MANIFEST_LIMIT`` bytes would allocate that much for every manifest."""
    with os.fdopen(fd, "rb") as f:
        if os.fstat(f.fileno()).st_size > MANIFEST_LIMIT:
            return None
        return f.read()


def _check_installation(
    root_fd: int, installation: str, manifest: Any, on_disk: dict[str, Entry], result: CheckResult
) -> int:
    listed = {entry.path: entry for entry in manifest.files}
    for path in sorted(set(on_disk) - set(listed)):
        result.drift.append(Drift(installation, path, "added", "not in the release"))
    checked = 0
    with folder(installation, root_fd) as top, FolderTree(top, create=False) as tree:
        for path, entry in sorted(listed.items()):
            found = on_disk.get(path)
            if found is None:
                result.drift.append(Drift(installation, path, "removed", "in the release, not on disk"))
                continue
            checked += 1
            parent, _, name = path.rpartition("/")
            digest = _hash_file(tree.fd_of(parent), name)
            if found.size != entry.size or digest != entry.sha256:
                result.drift.append(
                    Drift(installation, path, "changed", f"sha256 {digest}, the release has {entry.sha256}")
                )
            if found.mode != file_mode(entry):
                result.drift.append(
                    Drift(installation, path, "mode", f"mode {found.mode:#o}, the release has {file_mode(entry):#o}")
                )
    return checked


def _hash_file(dir_fd: int, name: str) -> str:
    digest = hashlib.sha256()
    fd = os.open(name, READ_FLAGS, dir_fd=dir_fd)
    try:
        while chunk := os.read(fd, 1 << 20):
            digest.update(chunk)
    finally:
        os.close(fd)
    return digest.hexdigest()


__all__ = ["CheckResult", "Drift", "SyncError", "SyncResult", "check_workspace", "sync_workspace"]
