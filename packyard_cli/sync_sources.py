"""Where ``packyard sync`` gets the bytes of the files its cache lacks: a :class:`FileSource`.

:class:`ArchiveSource` (what there is today) downloads the release's archive from the resolved view's URL, streaming
it to a temporary file (memory stays at one chunk whatever the size), checks its size and sha256 against the
resolved view, proves it with the service's own canonical verifier (``packyard.publishing.archive_verifier``: the
archive holds exactly the manifest's files, no link, no special file, no header two tar readers read differently),
and only then reads the wanted members out of it into the cache, each hashed again as it is stored.

:class:`FileRouteSource` reads single files (``GET /v1/packages/{p}/versions/{v}/files/{path}``) into the cache
instead; :class:`ReleaseSource` (the default) picks per release: the archive when it needs most of a release, the
file route when an update lacks only a few files. Passing another source to ``sync_workspace`` is the only change.
"""

from __future__ import annotations

import hashlib
import tarfile
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from packyard_cli.client import Client, CliError
from packyard_cli.sync_cache import CHUNK, CacheMismatch, FileCache

ExitPoint = Callable[[str], None]


@dataclass(frozen=True)
class ReleaseRef:
    """One entry of the resolved view, as sync needs it."""

    installation_id: str
    package: str
    version: str
    manifest_digest: str
    manifest_url: str
    archive_sha256: str
    archive_size: int
    archive_url: str
    item: dict[str, Any]

    @classmethod
    def of(cls, item: dict[str, Any]) -> ReleaseRef:
        archive = item["archive"]
        return cls(
            installation_id=str(item["installationId"]),
            package=str(item["package"]),
            version=str(item["release"]),
            manifest_digest=str(item["manifestDigest"]),
            manifest_url=str(item["manifestUrl"]),
            archive_sha256=str(archive["sha256"]),
            archive_size=int(archive["size"]),
            archive_url=str(archive["url"]),
            item=item,
        )

    @property
    def label(self) -> str:
        return f"{self.installation_id} ({self.package}@{self.version})"


class SourceRejected(CliError):
    """The bytes a source got are not the ones the resolved view or the manifest names."""


class FileSource(Protocol):
    """Puts the ``wanted`` files of a release into the cache (each verified by the cache as it is stored)."""

    @property
    def requests(self) -> int: ...  # requests sent so far (for what a sync reports)

    @property
    def downloaded_bytes(self) -> int: ...

    def fill(self, release: ReleaseRef, manifest: Any, wanted: Sequence[Any], cache: FileCache) -> None: ...


@dataclass
class ArchiveSource:
    client: Client
    exit_point: ExitPoint = lambda name: None
    requests: int = 0
    downloaded_bytes: int = 0

    def fill(self, release: ReleaseRef, manifest: Any, wanted: Sequence[Any], cache: FileCache) -> None:
        if not wanted:
            return
        scratch_dir = cache.root / "tmp"
        with tempfile.TemporaryFile(dir=scratch_dir) as archive:
            self._download(release, archive)
            archive.seek(0)
            self._verify(release, manifest, archive)
            archive.seek(0)
            self._extract(release, wanted, archive, cache)

    def _download(self, release: ReleaseRef, sink: Any) -> None:
        digest, size = hashlib.sha256(), 0
        self.requests += 1
        for chunk in self.client.download(release.archive_url, CHUNK):
            digest.update(chunk)
            size += len(chunk)
            self.downloaded_bytes += len(chunk)
            if size > release.archive_size:
                break
            sink.write(chunk)
            self.exit_point("download")
        if size != release.archive_size or digest.hexdigest() != release.archive_sha256:
            raise SourceRejected(
                f"the archive of {release.label} is not the one the resolved view names",
                code="sync_digest_mismatch",
                detail=f"got {size} bytes with sha256 {digest.hexdigest()}; expected {release.archive_size} bytes "
                f"with sha256 {release.archive_sha256}. Nothing was changed.",
            )

    @staticmethod
    def _verify(release: ReleaseRef, manifest: Any, archive: Any) -> None:
        from packyard.config import Limits
        from packyard.errors import ArchiveRejected
        from packyard.publishing.archive_verifier import verify_archive

        try:
            verify_archive(
                archive,
                manifest,
                declared_size=release.archive_size,
                declared_sha256=release.archive_sha256,
                limits=Limits(),
            )
        except ArchiveRejected as exc:
            raise SourceRejected(
                f"the archive of {release.label} does not hold exactly its manifest's files",
                code="sync_archive_rejected",
                detail=f"{exc}. Nothing was changed.",
            ) from None

    @staticmethod
    def _extract(release: ReleaseRef, wanted: Sequence[Any], archive: Any, cache: FileCache) -> None:
        # The verifier proved every tar reader reads this archive one way (the canonical-tar policy), so tarfile's
        # streaming reader sees the same members; each is hashed again on its way into the cache.
        by_path = {entry.path: entry for entry in wanted}
        with tarfile.open(fileobj=archive, mode="r|gz") as tar:
            for member in tar:
                path = member.name.removeprefix("./")
                entry = by_path.pop(path, None)
                if entry is None or not member.isreg():
                    continue
                if cache.has(entry.sha256, entry.size):
                    continue
                data = tar.extractfile(member)
                assert data is not None
                with cache.store(entry.sha256, entry.size) as writer:
                    while chunk := data.read(CHUNK):
                        writer.write(chunk)
        if by_path:
            raise SourceRejected(
                f"the archive of {release.label} lacks files of its manifest",
                code="sync_archive_rejected",
                detail=f"not found: {', '.join(sorted(by_path)[:5])}",
            )


@dataclass
class FileRouteSource:
    """One request per wanted file: ``GET /v1/packages/{p}/versions/{v}/files/{path}`` (the release's route, not
    the installation's, so an installation that moves on meanwhile cannot hand over another release's bytes). A
    small file comes inline (at most a few MiB), a large one as a redirect to exactly its bytes, streamed into the
    cache; either way the cache keeps them only if they hash to the manifest's sha256."""

    client: Client
    exit_point: ExitPoint = lambda name: None
    requests: int = 0
    downloaded_bytes: int = 0

    def fill(self, release: ReleaseRef, manifest: Any, wanted: Sequence[Any], cache: FileCache) -> None:
        from packyard_cli.files import release_file_path

        for entry in wanted:
            self.requests += 1
            response = self.client.fetch(release_file_path(release.package, release.version, entry.path))
            if response.is_redirect:
                self.requests += 1
                chunks: Any = self.client.download(response.headers["Location"], CHUNK)
            else:
                chunks = [response.content]
            try:
                with cache.store(entry.sha256, entry.size) as writer:
                    for chunk in chunks:
                        self.downloaded_bytes += len(chunk)
                        writer.write(chunk)
                        self.exit_point("download")
            except CacheMismatch as mismatch:
                raise SourceRejected(
                    f"{entry.path} of {release.label} is not the file its manifest names",
                    code="sync_digest_mismatch",
                    detail=f"{mismatch}. Nothing was changed.",
                ) from None


FILE_READS_MAX = 16
"""Most files fetched one by one for a release; more is one archive."""
FILE_READS_SHARE = 4
"""Files are fetched one by one only when they are at most 1/4 of the release's bytes: the archive would bring
mostly bytes the cache holds already."""


@dataclass
class ReleaseSource:
    """What ``sync`` uses by default: the file route for a release the cache holds most of (at most
    ``FILE_READS_MAX`` files lacking, at most 1/``FILE_READS_SHARE`` of its bytes: an update that changed a few
    files), else one archive (one request, compressed)."""

    archive: ArchiveSource
    files: FileRouteSource

    @property
    def requests(self) -> int:
        return self.archive.requests + self.files.requests

    @property
    def downloaded_bytes(self) -> int:
        return self.archive.downloaded_bytes + self.files.downloaded_bytes

    def fill(self, release: ReleaseRef, manifest: Any, wanted: Sequence[Any], cache: FileCache) -> None:
        lacking = sum(entry.size for entry in wanted)
        total = sum(entry.size for entry in manifest.files)
        few = len(wanted) <= FILE_READS_MAX and lacking * FILE_READS_SHARE <= total
        (self.files if few else self.archive).fill(release, manifest, wanted, cache)


def download_manifest(client: Client, release: ReleaseRef, limit: int) -> bytes:
    """The release's manifest bytes from the resolved view's URL, checked against ``manifestDigest``."""
    digest, data = hashlib.sha256(), bytearray()
    for chunk in client.download(release.manifest_url):
        data += chunk
        if len(data) > limit:
            break
        digest.update(chunk)
    if len(data) > limit or digest.hexdigest() != release.manifest_digest:
        raise SourceRejected(
            f"the manifest of {release.label} is not the one the resolved view names",
            code="sync_digest_mismatch",
            detail=f"sha256 {digest.hexdigest()}, expected {release.manifest_digest}. Nothing was changed.",
        )
    return bytes(data)


__all__ = [
    "ArchiveSource",
    "FileRouteSource",
    "FileSource",
    "ReleaseRef",
    "ReleaseSource",
    "SourceRejected",
    "download_manifest",
]
