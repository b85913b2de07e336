"""One file of a release, verified: its bytes (a small file) or a short-lived link to exactly them (a large one).

A read costs the release's item, its manifest (hash-checked against ``manifestDigest``, then kept per process: it
is immutable) and one ranged GET of the file's bytes in the release's file pack (``file_pack``; the pack's index
is kept per process too) or one HEAD of a large file's own object. The bytes answered are checked against the
manifest's size and sha256 first: bytes that differ (a pack or an object altered or missing in storage) make the
release ``unavailable`` and its installations ``needs_attention`` exactly as the integrity scrub would
(``scrub.found_unusable``), and the read is refused 409 ``release_unavailable``. A release published before file
packs existed has no pack: its small files are read from the archive (one streamed GET up to the member).

Every refusal that could tell whether something exists answers the same 404 ``not_found``: no such release or
installation, another tenant's, a path not in the manifest, a directory, ``..`` or an encoded slash.
"""

from __future__ import annotations

import hashlib
import json
import tarfile
import threading
from collections import OrderedDict
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, NoReturn

from aws_lambda_powertools.metrics import MetricUnit

from packyard import clock
from packyard.config import limits
from packyard.errors import InvalidRequest, NotFound, ReleaseUnavailable
from packyard.installations.models import InstallationStatus, check_installation_id, check_workspace_id
from packyard.observability import logger, metrics
from packyard.publishing import file_pack, integrity
from packyard.publishing.models import Release, ReleaseStatus, check_package_name, check_version
from packyard.store import blobs, catalog, file_packs, workspace

NO_SUCH_FILE = "no such file"
# an installation whose release a runtime loads (one needing attention: its release is unavailable, answered 409)
SERVED = frozenset({InstallationStatus.ACTIVE, InstallationStatus.NEEDS_ATTENTION})
CACHED_RELEASES = 64


@dataclass(frozen=True)
class FileEntry:
    path: str
    size: int
    sha256: str
    mode: int | None = None


@dataclass(frozen=True)
class ReleaseFile:
    """A verified file: ``content`` when it is answered inline, else ``url`` (expiring at ``expires_at``) serving
    exactly its bytes."""

    package: str
    version: str
    path: str
    size: int
    sha256: str
    content: bytes | None = None
    url: str | None = None
    expires_at: int | None = None
    not_modified: bool = False  # the caller holds these bytes already (its If-None-Match named their sha256)


@dataclass(frozen=True)
class Held:
    """What a conditional read's caller holds: file sha256s, or anything (``If-None-Match: *``)."""

    sha256s: frozenset[str] = frozenset()
    anything: bool = False

    def holds(self, sha256: str) -> bool:
        return self.anything or sha256 in self.sha256s


NOTHING_HELD = Held()


class _Cache:
    """A small per-process LRU of immutable things (manifests by digest, pack indexes by archive)."""

    def __init__(self, size: int) -> None:
        self._size = size
        self._items: OrderedDict[Any, Any] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: Any) -> Any:
        with self._lock:
            found = self._items.get(key)
            if found is not None:
                self._items.move_to_end(key)
            return found

    def put(self, key: Any, value: Any) -> None:
        with self._lock:
            self._items[key] = value
            self._items.move_to_end(key)
            while len(self._items) > self._size:
                self._items.popitem(last=False)

    def drop(self, key: Any) -> None:
        with self._lock:
            self._items.pop(key, None)


_manifests = _Cache(CACHED_RELEASES)
_indexes = _Cache(CACHED_RELEASES)


def forget_cached() -> None:
    """Tests point the process at a fresh stack."""
    global _manifests, _indexes
    _manifests, _indexes = _Cache(CACHED_RELEASES), _Cache(CACHED_RELEASES)


@contextmanager
def _names_no_file() -> Iterator[None]:
    """An ill-formed name or id in a file's path names no file: the same 404 as one that does not exist."""
    try:
        yield
    except InvalidRequest:
        raise NotFound(NO_SUCH_FILE) from None


def installation_file(
    tenant: str, workspace_id: str, installation_id: str, path: str, *, held: Held = NOTHING_HELD
) -> ReleaseFile:
    """A file of the installation's active release."""
    with _names_no_file():
        check_workspace_id(workspace_id)
        check_installation_id(installation_id)
    found = workspace.get_installation(tenant, workspace_id, installation_id, consistent=False)
    if found is None or found.release is None or found.status not in SERVED:
        raise NotFound(NO_SUCH_FILE)
    release = catalog.find_release(tenant, found.release.package, found.release.version, consistent=False)
    if release is None or release.manifest_digest != found.release.manifest_digest:
        raise NotFound(NO_SUCH_FILE)
    return _release_file(tenant, release, path, held)


def release_file(tenant: str, package: str, version: str, path: str, *, held: Held = NOTHING_HELD) -> ReleaseFile:
    """A file of the release ``package@version``. ``held``: the sha256s the caller holds (``If-None-Match``); a file
    whose sha256 is one of them is answered ``not_modified`` without reading its bytes (the manifest says them)."""
    with _names_no_file():
        check_package_name(package)
        check_version(version)
    release = catalog.find_release(tenant, package, version, consistent=False)
    if release is None:
        raise NotFound(NO_SUCH_FILE)
    return _release_file(tenant, release, path, held)


def _release_file(tenant: str, release: Release, path: str, held: Held = NOTHING_HELD) -> ReleaseFile:
    subject = f"{release.package}@{release.version}"
    if release.blobs_released_at is not None:
        raise ReleaseUnavailable(f"{subject} was yanked and its stored bytes reclaimed")
    if release.status is ReleaseStatus.UNAVAILABLE:
        raise ReleaseUnavailable(f"{subject} is unavailable: its stored bytes failed integrity checks")
    entry = _files_of(tenant, release).get(path)
    if entry is None:  # not a file of the release: a directory, '..', an encoded slash, a path it does not hold
        raise NotFound(NO_SUCH_FILE)
    if held.holds(entry.sha256):
        return ReleaseFile(release.package, release.version, entry.path, entry.size, entry.sha256, not_modified=True)
    if entry.size > file_pack.INLINE_MAX_BYTES:
        return _large_file(tenant, release, entry)
    packed = file_pack.packs(release.archive_size, (known.size for known in _files_of(tenant, release).values()))
    content = _small_file_bytes(tenant, release, entry, packed=packed)
    return ReleaseFile(release.package, release.version, entry.path, entry.size, entry.sha256, content=content)


def _files_of(tenant: str, release: Release) -> dict[str, FileEntry]:
    """The release's files by path, from its manifest (hash-checked on first use in this process)."""
    cached: dict[str, FileEntry] | None = _manifests.get(release.manifest_digest)
    if cached is not None:
        return cached
    raw = integrity.read_manifest(tenant, release, found_by="file_route")
    if raw is None:
        raise ReleaseUnavailable(f"{release.package}@{release.version} is unavailable: its manifest failed its check")
    document = json.loads(raw)
    files = {
        f["path"]: FileEntry(path=f["path"], size=int(f["size"]), sha256=f["sha256"], mode=f.get("mode"))
        for f in document["files"]
    }
    _manifests.put(release.manifest_digest, files)
    return files


def _small_file_bytes(tenant: str, release: Release, entry: FileEntry, *, packed: bool) -> bytes:
    """``packed``: the release's archive has a pack by the publish's rule (a small archive has none: it is read)."""
    if entry.size == 0:
        return _checked(tenant, release, entry, b"")
    if not packed:
        return _checked(tenant, release, entry, _from_archive(tenant, release, entry))
    located = _pack_index(tenant, release)
    if located is None:
        return _checked(tenant, release, entry, _from_archive(tenant, release, entry))
    index, pack_size = located
    offset = index.offsets.get(entry.path)
    if offset is None or offset < 0 or offset + entry.size > pack_size:
        _indexes.drop((tenant, release.archive_sha256))
        _unusable(tenant, release, found=None, why=f"the file pack does not hold {entry.path!r}")
    data = file_packs.read_range(file_packs.pack_key(tenant, release.archive_sha256), offset, offset + entry.size - 1)
    if data is None:
        _indexes.drop((tenant, release.archive_sha256))
        _unusable(tenant, release, found=None, why="the file pack is missing")
    return _checked(tenant, release, entry, data)


def _pack_index(tenant: str, release: Release) -> tuple[file_pack.PackIndex, int] | None:
    key = (tenant, release.archive_sha256)
    cached: tuple[file_pack.PackIndex, int] | None = _indexes.get(key)
    if cached is not None:
        return cached
    try:
        found = file_pack.read_index(tenant, release.archive_sha256)
    except file_pack.PackDamaged as damaged:
        _unusable(tenant, release, found=None, why=str(damaged))
    if found is None:
        metrics.add_metric(name="FilePackMissing", unit=MetricUnit.Count, value=1)
        logger.warning("no file pack: the file is read from the archive", extra={"archive": release.archive_sha256})
        return None
    _indexes.put(key, found)
    return found


def _from_archive(tenant: str, release: Release, entry: FileEntry) -> bytes:
    """The file's bytes streamed out of the archive (a release without a pack): up to the member, no further."""
    opened = blobs.open_stream(blobs.blob_key(tenant, release.archive_sha256))
    if opened is None:
        _unusable(tenant, release, found=None, why="the archive is missing")
    try:
        with file_packs.reading_objects(), tarfile.open(fileobj=opened.stream, mode="r|gz") as archive:
            for member in archive:
                if member.isfile() and member.name.removeprefix("./") == entry.path:
                    source = archive.extractfile(member)
                    return source.read(entry.size + 1) if source is not None else b""
    except (tarfile.TarError, EOFError, OSError):
        pass
    finally:
        opened.stream.close()
    _unusable(tenant, release, found=None, why=f"the archive does not hold {entry.path!r}")


def _large_file(tenant: str, release: Release, entry: FileEntry) -> ReleaseFile:
    """A link to the file's own object, once its sha256 and length are the manifest's: S3's stored SHA-256 checksum
    (S3 checks it on receipt and keeps it) when the object has one, else the object's bytes hashed here."""
    key = file_packs.file_object_key(tenant, release.archive_sha256, entry.sha256)
    stored = file_packs.stored_checksum(key)
    if stored is None:
        if _pack_index(tenant, release) is None:
            raise ReleaseUnavailable(
                f"{release.package}@{release.version} was published before file packs: download its archive"
            )
        _unusable(tenant, release, found=None, why=f"the object of {entry.path!r} is missing")
    checksum, size = stored
    if checksum is None and size == entry.size:
        # no checksum kept by the store (moto keeps none; an object overwritten without one): hash the object, its
        # bytes only, never the archive
        hashed = blobs.sha256_of(key, stop_after=entry.size)
        checksum, size = hashed if hashed is not None else (None, 0)
    if checksum != entry.sha256 or size != entry.size:
        _unusable(tenant, release, found=(checksum or "", size), why=f"the object of {entry.path!r} differs")
    ttl = limits().download_url_ttl_seconds
    url = file_packs.presigned_get(key, ttl, filename=entry.path.rpartition("/")[2])
    return ReleaseFile(
        release.package, release.version, entry.path, entry.size, entry.sha256, url=url, expires_at=clock.now() + ttl
    )


def _checked(tenant: str, release: Release, entry: FileEntry, data: bytes) -> bytes:
    if len(data) == entry.size:
        digest = hashlib.sha256(data).hexdigest()
        if digest == entry.sha256:
            return data
    else:
        digest = hashlib.sha256(data).hexdigest()
    _indexes.drop((tenant, release.archive_sha256))
    _unusable(tenant, release, found=(digest, len(data)), why=f"the stored bytes of {entry.path!r} differ")


def _unusable(tenant: str, release: Release, *, found: tuple[str, int] | None, why: str) -> NoReturn:
    """Mark the release as the scrub marks a corrupt archive (the pack is the archive's stored form), then refuse."""
    from packyard.maintenance import scrub  # the marking's imports only when something failed

    logger.error("a file read found stored bytes that differ", extra={"release": release.version, "why": why})
    scrub.found_unusable(
        tenant,
        release.archive_sha256,
        clock.now(),
        found=found,
        release=(release.package, release.version),
        found_by="file_route",
    )
    raise ReleaseUnavailable(f"{release.package}@{release.version} is unavailable: {why}")
