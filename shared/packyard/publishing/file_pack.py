"""The file pack: a release's files laid out so that one of them is one ranged read (docs/decisions.md, "One file,
verified: a file pack beside the archive").

Derived from the archive (which stays the source of truth) when the publish writes the archive blob: one pass over
the verified archive puts every small file's bytes, as they are, back to back into one object in archive order,
followed by the index (canonical JSON: each small file's offset by path, the sha256 of each large file) and a
12-byte trailer (``PYFP`` and the index's length, big-endian). A file above ``INLINE_MAX_BYTES`` is its own object
instead, written with its sha256 as S3's checksum, so that a presigned URL serves exactly its bytes. A file's size
and sha256 come from the manifest, never from the pack: every read is checked against them.
"""

from __future__ import annotations

import hashlib
import json
import struct
import tarfile
import tempfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import IO

from packyard.config import MiB
from packyard.errors import ArchiveRejectCode, ArchiveRejected
from packyard.publishing.manifest import Manifest, ManifestFile, canonical_json, show_path
from packyard.store import blobs, file_packs

INLINE_MAX_BYTES = 4 * MiB
"""Largest file kept in the pack and answered inline: base64 makes it 5.6 MB, under Lambda's 6 MB response."""
PACKED_ARCHIVE_MIN_BYTES = 1 * MiB
"""An archive at most this large, with no file above ``INLINE_MAX_BYTES``, gets no pack: a file read streams the archive
up to the member in one GET (as for a release from before packs), which for such a size costs no more than the
pack's index and ranged read, and the publish saves the pack's PUT and its re-read of the archive."""
INDEX_VERSION = 1
TRAILER = struct.Struct(">4sQ")
MAGIC = b"PYFP"
COPY_CHUNK = 1 * MiB
SPOOL_IN_MEMORY = 8 * MiB


@dataclass(frozen=True)
class PackIndex:
    """Where each small file's bytes start in the pack (their length is the manifest's size), and the sha256 of
    each file stored as its own object."""

    offsets: dict[str, int]
    objects: frozenset[str]


def encode_index(index: PackIndex) -> bytes:
    body = canonical_json({"v": INDEX_VERSION, "files": index.offsets, "objects": sorted(index.objects)})
    return body + TRAILER.pack(MAGIC, len(body))


class PackDamaged(Exception):
    """The pack's trailer or index does not parse: the pack is not what the publish wrote."""


def index_length(tail: bytes) -> int:
    """The index's length, from the pack's last bytes."""
    if len(tail) < TRAILER.size:
        raise PackDamaged("the pack is shorter than its trailer")
    magic, length = TRAILER.unpack(tail[-TRAILER.size :])
    if magic != MAGIC:
        raise PackDamaged("the pack's trailer is not a file pack's")
    return int(length)


def decode_index(tail: bytes) -> PackIndex:
    """The index from the pack's last ``index_length + TRAILER.size`` bytes (or more)."""
    length = index_length(tail)
    if len(tail) < length + TRAILER.size:
        raise PackDamaged("the pack's index is longer than the bytes read")
    try:
        document = json.loads(tail[-TRAILER.size - length : -TRAILER.size])
        offsets = {str(path): int(offset) for path, offset in document["files"].items()}
        objects = frozenset(str(sha) for sha in document["objects"])
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise PackDamaged(f"the pack's index does not parse ({type(exc).__name__})") from None
    if document.get("v") != INDEX_VERSION:
        raise PackDamaged(f"unknown file pack index version {document.get('v')!r}")
    return PackIndex(offsets=offsets, objects=objects)


def packs(archive_size: int, file_sizes: Iterable[int]) -> bool:
    """Whether an archive of this size with files of these sizes has a file pack (publish and the file routes decide
    alike): one above ``PACKED_ARCHIVE_MIN_BYTES``, or holding a file too large to answer inline."""
    return archive_size > PACKED_ARCHIVE_MIN_BYTES or any(size > INLINE_MAX_BYTES for size in file_sizes)


def write_file_pack(tenant: str, archive_sha256: str, manifest: Manifest, *, archive_size: int, replace: bool) -> bool:
    """Write the pack and the large-file objects of the stored archive blob (already verified and copied), unless the
    archive is one that has none (``packs``). Without ``replace``, a pack already stored is kept (its writer crashed
    after it, or another release has the same archive): the pack object is written last, so its presence means the
    large files are in too. True when written.

    The archive's members are re-hashed against the manifest as they are copied: what the pack holds is what the
    manifest pins, whatever happened to the stored object since verification."""
    if not packs(archive_size, (entry.size for entry in manifest.files)):
        return False
    key = file_packs.pack_key(tenant, archive_sha256)
    if not replace and file_packs.exists(key):
        return False
    opened = blobs.open_stream(blobs.blob_key(tenant, archive_sha256))
    if opened is None:
        raise ArchiveRejected(ArchiveRejectCode.MISSING_FILE, "the archive blob vanished before its files were packed")
    expected = {entry.path: entry for entry in manifest.files}
    writer = file_packs.PackWriter(key)
    offsets: dict[str, int] = {}
    objects: set[str] = set()
    seen: set[str] = set()
    try:
        with file_packs.reading_objects(), tarfile.open(fileobj=opened.stream, mode="r|gz") as archive:
            for member in archive:
                if not member.isfile():
                    continue
                entry = expected.get(member.name.removeprefix("./"))
                source = archive.extractfile(member)
                if entry is None or source is None:
                    raise ArchiveRejected(
                        ArchiveRejectCode.UNEXPECTED_FILE, f"{show_path(member.name)} is not in the manifest"
                    )
                seen.add(entry.path)
                if entry.size > INLINE_MAX_BYTES:
                    _store_large_file(tenant, archive_sha256, entry, source)
                    objects.add(entry.sha256)
                else:
                    offsets[entry.path] = writer.size
                    _copy_checked(entry, source, writer.write)
        if len(seen) != len(expected):
            raise ArchiveRejected(ArchiveRejectCode.MISSING_FILE, "the archive lacks files of its manifest")
        writer.write(encode_index(PackIndex(offsets=offsets, objects=frozenset(objects))))
        writer.finish()
    except (tarfile.TarError, EOFError, OSError) as exc:
        raise ArchiveRejected(ArchiveRejectCode.CORRUPT_ARCHIVE, f"the stored archive does not read: {exc}") from None
    finally:
        opened.stream.close()
    return True


def _copy_checked(entry: ManifestFile, source: IO[bytes], write: Callable[[bytes], object]) -> None:
    """Copy one member's bytes to ``write``, hashing them; refuse bytes other than the manifest's."""
    digest = hashlib.sha256()
    copied = 0
    try:
        while chunk := source.read(COPY_CHUNK):
            digest.update(chunk)
            copied += len(chunk)
            write(chunk)
    except (tarfile.TarError, OSError, EOFError) as exc:
        raise ArchiveRejected(ArchiveRejectCode.CORRUPT_ARCHIVE, f"reading {show_path(entry.path)}: {exc}") from None
    if copied != entry.size or digest.hexdigest() != entry.sha256:
        raise ArchiveRejected(
            ArchiveRejectCode.DIGEST_MISMATCH, f"{show_path(entry.path)} differs from its manifest entry"
        )


def _store_large_file(tenant: str, archive_sha256: str, entry: ManifestFile, source: IO[bytes]) -> None:
    """A file above ``INLINE_MAX_BYTES`` as its own object (spooled to memory, then to disk past 8 MiB)."""
    with tempfile.SpooledTemporaryFile(max_size=SPOOL_IN_MEMORY) as spool:
        _copy_checked(entry, source, spool.write)
        spool.seek(0)
        file_packs.put_file_object(
            file_packs.file_object_key(tenant, archive_sha256, entry.sha256), spool, entry.size, entry.sha256
        )


def pack_object_keys(tenant: str, archive_sha256: str, index: PackIndex | None) -> list[str]:
    """Every object derived from one archive: its large files, then the pack (deleted last: while it exists, its
    index still names the large files)."""
    large = [file_packs.file_object_key(tenant, archive_sha256, sha) for sha in sorted(index.objects)] if index else []
    return [*large, file_packs.pack_key(tenant, archive_sha256)]


TAIL_READ_BYTES = 16 * 1024
"""What the first read of a pack's end asks for: the whole index of a package of about 300 files (an entry is
about 50 bytes); a longer index costs a second ranged GET."""


def read_index(tenant: str, archive_sha256: str) -> tuple[PackIndex, int] | None:
    """The pack's index and the pack's size (one suffix-ranged GET, a second one for an index longer than
    ``TAIL_READ_BYTES``); None when there is no pack. ``PackDamaged`` when its end is not a pack's."""
    key = file_packs.pack_key(tenant, archive_sha256)
    found = file_packs.read_tail(key, TAIL_READ_BYTES)
    if found is None:
        return None
    tail, size = found
    needed = index_length(tail) + TRAILER.size
    if needed > size:
        raise PackDamaged("the pack's index is longer than the pack")
    if needed > len(tail):
        longer = file_packs.read_range(key, size - needed, size - 1)
        if longer is None:
            return None
        tail = longer
    return decode_index(tail), size


def delete_file_pack(tenant: str, archive_sha256: str) -> None:
    """Delete what ``write_file_pack`` wrote for an archive (nothing when there is no pack: any blob's sha256 may be
    given, a manifest's included)."""
    try:
        found = read_index(tenant, archive_sha256)
    except PackDamaged:
        found = None
    blobs.delete_prefix_objects(pack_object_keys(tenant, archive_sha256, found[0] if found else None))
