"""The archive verifier: one streaming pass over a stored tar.gz, checked against its manifest.

Nothing is extracted and nothing is held in memory beyond one read chunk, one inflate chunk and a few tar header
blocks, so peak memory does not depend on the package size. The tar stream is walked by a small parser of our own
(ustar, GNU long names, pax extended headers), not ``tarfile``: it hashes member data straight out of the inflate
buffer without copying, and it bounds the size of every metadata header (``tarfile`` would read a pax header of any
size into memory). It accepts only archives every extractor reads one way (GNU tar, bsdtar, ``tarfile`` with and
without ``filter="data"``): any header feature on which they differ is refused ``AMBIGUOUS_HEADER``
(tests/unit/test_tar_readers.py holds the verifier against all four).

Inflate runs on ISA-L (the ``isal`` package: same deflate, about twice zlib's speed) when it is importable, else on
the standard library's zlib; both inflate raw deflate through the same ``decompressobj`` interface with the same
bounded output per call, and the gzip header and trailer are read here, so the verdict and its sub-code do not depend
on which one ran (tests/unit/test_archive_backends.py: the hostile corpus identically, damaged streams by verdict and
sub-code). A corrupt stream's detail names no library message; the two may notice some malformed deflate data at
different points (ISA-L holds a few input bytes back and is laxer about malformed Huffman tables until they are used).

With two CPUs the tar walk and member hashing run on a second thread, fed the inflated pieces through a small bounded
queue, while the calling thread reads, hashes and inflates: zlib, ISA-L and hashlib all release the GIL, so the two
halves overlap. Errors still come out in stream order (see ``_Pipeline``).

Why one module of ~800 lines: the gzip member loop, the tar block parser and the per-entry checks share one
streaming state (buffer, offsets, running hashes, limits); split apart, each piece would need the others' internals
and the one-pass guarantee would be harder to see.
"""

from __future__ import annotations

import hashlib
import os
import queue
import re
import threading
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol, cast

from packyard.config import Limits, MiB
from packyard.errors import ArchiveRejectCode, ArchiveRejected, InvalidRequest
from packyard.publishing.manifest import SPECIAL_MODE_BITS, Manifest, ManifestFile, check_path, fold_path, show_path

READ_CHUNK = 1 * MiB
"""Compressed bytes asked of the stream per read."""
INFLATE_CHUNK = 2 * MiB
"""Most decompressed bytes produced per zlib call: a gzip bomb never lands in memory in one piece."""
METADATA_HEADER_MAX = 1 * MiB
"""Largest pax / GNU long-name header accepted."""
METADATA_TOTAL_MAX = 64 * MiB
"""Largest sum of pax / GNU long-name headers in one archive."""
METADATA_HEADERS_PER_MEMBER = 8
"""Most metadata headers in a row before a real member."""
END_PADDING_MAX = 8 * MiB
"""Most zero bytes accepted after the tar end-of-archive block (tar pads to its record size)."""
PIPELINE_DEPTH = 3
"""Inflated pieces (each at most ``INFLATE_CHUNK``) waiting for the walker thread: bounds the memory of the pipeline."""
PIPELINE_MIN_BYTES = 8 * MiB
"""Archives smaller than this are verified on the calling thread alone: they take a few tens of milliseconds, and
the reader stays exactly one read ahead of the walker (a refusal found in a header costs one read at most)."""

GZIP_HEADER_MAX = 1 * MiB
"""Largest gzip member header accepted (its optional name, comment and extra field included)."""

_BLOCK = 512
_RAW_DEFLATE = -15  # the libraries inflate raw deflate; the gzip header and trailer are read here (see _Verifier)
_FHCRC, _FEXTRA, _FNAME, _FCOMMENT, _FRESERVED = 0x02, 0x04, 0x08, 0x10, 0xE0
_SHA256_HEX = re.compile(r"[0-9a-f]{64}")

_REGULAR = (b"0", b"\0")
_CONTIGUOUS = b"7"  # GNU tar warns "Extracting contiguous files as regular files": not every reader is silent
_DIRECTORY = b"5"
_LINKS = {b"1": "hard link", b"2": "symbolic link"}
_SPECIAL = {
    b"3": "character device",
    b"4": "block device",
    b"6": "fifo",
    b"S": "GNU sparse file",
    b"D": "GNU dump directory",
    b"M": "GNU multi-volume continuation",
    b"V": "GNU volume label",
}
_PAX_LOCAL, _PAX_GLOBAL, _GNU_LONGNAME, _GNU_LONGLINK = b"x", b"g", b"L", b"K"
_METADATA = (_PAX_LOCAL, _PAX_GLOBAL, _GNU_LONGNAME, _GNU_LONGLINK)
_MAGIC_POSIX, _MAGIC_GNU, _MAGIC_V7 = b"ustar\x0000", b"ustar  \x00", b"\0" * 8
_ZEROS = bytes(_BLOCK)
_ZEROS_TAIL, _ZEROS_GNU_AREA, _ZEROS_V7_AREA = bytes(12), bytes(167), bytes(80)

C = ArchiveRejectCode


class ReadableStream(Protocol):
    def read(self, size: int = ..., /) -> bytes: ...


class _Decompressor(Protocol):
    @property
    def eof(self) -> bool: ...
    @property
    def unused_data(self) -> bytes: ...
    @property
    def unconsumed_tail(self) -> bytes: ...
    def decompress(self, data: bytes, max_length: int = ..., /) -> bytes: ...


@dataclass(frozen=True)
class InflateBackend:
    """A deflate implementation behind zlib's ``decompressobj`` interface, and its CRC-32."""

    name: str
    decompressobj: Callable[[int], _Decompressor]
    crc32: Callable[[bytes, int], int]
    errors: tuple[type[Exception], ...]


ZLIB = InflateBackend("zlib", zlib.decompressobj, zlib.crc32, (zlib.error,))


def _isal_backend() -> InflateBackend | None:
    try:
        from isal import isal_zlib
    except ImportError:  # no wheel for this platform: zlib gives the same verdicts, slower
        return None
    # the stub types ``error`` as an instance; it is the exception class
    return InflateBackend("isal", isal_zlib.decompressobj, isal_zlib.crc32, (cast(type[Exception], isal_zlib.error),))


ISAL = _isal_backend()
"""ISA-L's inflate, or None where the ``isal`` package is not importable."""
DEFAULT_BACKEND = ISAL or ZLIB


def available_cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


@dataclass(frozen=True)
class VerifiedArchive:
    """What the verifier measured. ``unpacked_size`` and ``file_count`` count regular files only."""

    archive_size: int
    archive_sha256: str
    unpacked_size: int
    file_count: int


def verify_archive(
    stream: ReadableStream,
    manifest: Manifest,
    *,
    declared_size: int,
    declared_sha256: str,
    limits: Limits,
    clock: Callable[[], float] = time.monotonic,
    backend: InflateBackend | None = None,
    threads: int | None = None,
) -> VerifiedArchive:
    """Read ``stream`` once (a tar.gz) and prove it holds exactly the files ``manifest`` lists.

    ``manifest`` must already have passed ``parse_manifest`` with the same limits. ``backend`` is the inflate
    implementation (default: ISA-L when importable, else zlib); ``threads`` is 1 (everything on the calling thread)
    or 2 (the tar walk on a second thread); by default 2 when this process may use two CPUs and the archive is at
    least ``PIPELINE_MIN_BYTES``. Neither changes the result, only the speed.

    **Error order.** Problems found while streaming are raised at once, in stream order (the first wins):

    - ``declared_size`` above ``limits.max_archive_bytes`` → ``TOO_LARGE`` before anything is read; more compressed
      bytes than ``declared_size`` or ``limits.max_archive_bytes`` → ``TOO_LARGE`` (reading stops; an archive
      *longer* than declared is therefore ``TOO_LARGE``, not ``SIZE_MISMATCH``);
    - verification running longer than ``limits.verify_time_limit_seconds`` → ``TOO_LARGE``; a tar extended
      header (pax, GNU long name) above ``METADATA_HEADER_MAX``, or above ``METADATA_TOTAL_MAX`` in total
      → ``TOO_LARGE``;
    - decompressed/compressed ratio above ``limits.max_compression_ratio`` once more than
      ``limits.compression_ratio_floor_bytes`` are decompressed → ``COMPRESSION_RATIO``;
    - not gzip, bad deflate data, bad tar headers, non-zero bytes after the gzip member (including a second gzip
      member) or after the tar end-of-archive block → ``CORRUPT_ARCHIVE``;
    - a header feature extractors read differently (the canonical-tar policy, docs/decisions.md "One reading per
      archive": GNU/V7 headers with ustar-prefix bytes, unknown magic, more than one GNU long name or pax header
      before a member or both, a GNU long link name, pax records outside the allowlist, duplicated, empty or holding
      NUL, a pax size contradicting the header, base-256 size or mode, contiguous-file entries, a regular-file entry
      named with a trailing ``/``) → ``AMBIGUOUS_HEADER``, raised at the member it applies to and naming it;
    - per member, in this order: count above ``limits.max_files`` (regular files and directories, the root
      ``.`` entry excepted) → ``TOO_MANY_FILES``; name not UTF-8 or failing ``check_path`` (after removing one
      leading ``./`` and, for a directory, one trailing ``/``) → ``UNSAFE_PATH``; link → ``LINK_NOT_ALLOWED``;
      anything but a regular file or directory, or setuid/setgid/sticky bits → ``SPECIAL_FILE``; path already seen,
      equal under NFC + case folding to one seen, or a directory where the manifest has a file → ``DUPLICATE_ENTRY``;
      a directory no manifest file is under, or a file not in the manifest → ``UNEXPECTED_FILE``; header size
      differs from the manifest → ``SIZE_MISMATCH``;
      manifest ``mode`` given and ``member mode & 0o777`` differs → ``DIGEST_MISMATCH`` (detail "mode differs":
      the mode is part of what the manifest pins, like the content); running total of sizes above
      ``limits.max_unpacked_bytes`` → ``TOO_LARGE`` (before any data is read); sha256 of the data differs
      → ``DIGEST_MISMATCH``.

    Then, once the stream is exhausted: archive size differs from ``declared_size`` → ``SIZE_MISMATCH``; archive
    sha256 differs from ``declared_sha256`` → ``DIGEST_MISMATCH``; gzip stream or tar stream incomplete →
    ``CORRUPT_ARCHIVE`` (also when the end-of-archive marker is a lone zero block); a manifest file never seen
    → ``MISSING_FILE``. (When the bytes are not the ones declared,
    that is the root cause, so it is reported before what the truncation looks like.)
    """
    if declared_size < 0:
        raise InvalidRequest(f"declared archive size must be >= 0, got {declared_size}")
    if not _SHA256_HEX.fullmatch(declared_sha256):
        raise InvalidRequest("declared archive sha256 must be 64 lowercase hex digits")
    if declared_size > limits.max_archive_bytes:
        raise ArchiveRejected(
            C.TOO_LARGE, f"archive is declared as {declared_size} bytes, limit is {limits.max_archive_bytes}"
        )
    if threads is None:
        threads = 2 if declared_size >= PIPELINE_MIN_BYTES and available_cpus() >= 2 else 1
    if threads not in (1, 2):
        raise ValueError(f"threads must be 1 or 2, got {threads}")
    verifier = _Verifier(manifest, declared_size, limits, clock, backend or DEFAULT_BACKEND)
    return verifier.run(stream, declared_sha256, pipelined=threads == 2)


class _Verifier:
    """The compressed layer: count and hash what is read, inflate it in bounded pieces, feed the tar walker."""

    def __init__(
        self,
        manifest: Manifest,
        declared_size: int,
        limits: Limits,
        clock: Callable[[], float],
        backend: InflateBackend,
    ) -> None:
        self._declared_size = declared_size
        self._limits = limits
        self._clock = clock
        self._deadline = clock() + limits.verify_time_limit_seconds
        self._walker = _TarWalker(manifest, limits)
        self._feed: Callable[[bytes], None] = self._walker.feed
        self._inflater = backend.decompressobj(_RAW_DEFLATE)
        self._inflate_errors = backend.errors
        self._crc32 = backend.crc32
        self._crc = 0
        self._phase = _GZIP_HEADER
        self._pending = bytearray()  # a gzip header or trailer split across reads
        self._inflated = 0
        self._read = 0
        self._gzip_ended = False

    def run(self, stream: ReadableStream, declared_sha256: str, *, pipelined: bool) -> VerifiedArchive:
        if not pipelined:
            archive_hash = hashlib.sha256()
            self._stream(stream, archive_hash.update)
            return self._finish(archive_hash.hexdigest(), declared_sha256)
        pipeline = _Pipeline(self._walker, self._check_clock)
        self._feed = pipeline.feed
        try:
            # the compressed bytes are hashed on the walker's thread too: this one only reads and inflates (on
            # source-like content with thousands of small members, hashing here instead measured no faster)
            self._stream(stream, pipeline.hash_compressed)
        except BaseException:
            walker_error = pipeline.close()
            if walker_error is not None:  # found in bytes inflated before the reader's error: it comes first
                raise walker_error from None
            raise
        walker_error = pipeline.close()
        if walker_error is not None:
            raise walker_error
        return self._finish(pipeline.archive_hash.hexdigest(), declared_sha256)

    def _stream(self, stream: ReadableStream, hash_compressed: Callable[[bytes], None]) -> None:
        """Read, hash and inflate the whole stream."""
        budget = self._declared_size
        while True:
            # Ask for one byte past the budget at most: enough to know it was exceeded, no more.
            chunk = stream.read(min(READ_CHUNK, budget - self._read + 1))
            if not chunk:
                break
            self._read += len(chunk)
            if self._read > budget:
                raise ArchiveRejected(C.TOO_LARGE, self._over_budget())
            hash_compressed(chunk)
            self._take(chunk)
            self._check_clock()

    def _finish(self, archive_sha256: str, declared_sha256: str) -> VerifiedArchive:
        if self._read != self._declared_size:
            raise ArchiveRejected(
                C.SIZE_MISMATCH, f"archive is {self._read} bytes, {self._declared_size} were declared"
            )
        if archive_sha256 != declared_sha256:
            raise ArchiveRejected(
                C.DIGEST_MISMATCH, f"archive sha256 is {archive_sha256}, {declared_sha256} was declared"
            )
        if not self._gzip_ended:
            raise ArchiveRejected(
                C.CORRUPT_ARCHIVE,
                "empty archive" if self._read == 0 else f"gzip stream truncated after {self._read} bytes",
            )
        self._walker.finish()
        return VerifiedArchive(
            archive_size=self._read,
            archive_sha256=archive_sha256,
            unpacked_size=self._walker.unpacked,
            file_count=self._walker.files,
        )

    def _over_budget(self) -> str:
        if self._read > self._limits.max_archive_bytes:
            return f"archive is larger than the limit of {self._limits.max_archive_bytes} bytes"
        return f"archive is larger than the declared {self._declared_size} bytes"

    # The gzip member. The header and trailer are read here, the same way whichever library inflates: zlib checks a
    # trailer's CRC before its length has arrived, ISA-L waits for both, and a verdict must not depend on that.

    def _take(self, data: bytes) -> None:
        """One read's bytes, through the member's phases: header, deflate data, trailer, then zero padding only."""
        while data:
            phase = self._phase
            if phase == _DEFLATE:
                data = self._inflate(data)
            elif phase == _GZIP_HEADER:
                data = self._gzip_header(data)
            elif phase == _GZIP_TRAILER:
                data = self._gzip_trailer(data)
            else:
                self._check_after_gzip(data)
                return

    def _gzip_header(self, data: bytes) -> bytes:
        pending = self._pending
        pending += data
        length = _gzip_header_length(pending)
        if length is None:
            if len(pending) > GZIP_HEADER_MAX:
                raise ArchiveRejected(C.TOO_LARGE, f"gzip header longer than {GZIP_HEADER_MAX} bytes")
            return b""
        rest = bytes(pending[length:])
        pending.clear()
        self._phase = _DEFLATE
        return rest

    def _gzip_trailer(self, data: bytes) -> bytes:
        pending = self._pending
        take = 8 - len(pending)
        pending += data[:take]
        if len(pending) < 8:
            return b""
        crc, size = int.from_bytes(pending[:4], "little"), int.from_bytes(pending[4:], "little")
        pending.clear()
        if crc != self._crc:
            raise _corrupt("gzip trailer: the CRC-32 of the inflated data differs")
        if size != self._inflated & 0xFFFFFFFF:
            raise _corrupt("gzip trailer: the length of the inflated data differs")
        self._phase = _GZIP_ENDED
        self._gzip_ended = True
        return data[take:]

    def _inflate(self, data: bytes) -> bytes:
        """Inflate ``data`` in bounded pieces; return what follows the deflate stream once it ended."""
        inflater, feed, crc32 = self._inflater, self._feed, self._crc32
        limits = self._limits
        while True:
            try:
                out = inflater.decompress(data, INFLATE_CHUNK)
            except self._inflate_errors:
                # No library message in the detail: zlib and ISA-L word the same fault differently.
                raise _corrupt("not a valid deflate stream") from None
            self._inflated += len(out)
            if (
                self._inflated > limits.compression_ratio_floor_bytes
                and self._inflated > limits.max_compression_ratio * self._read
            ):
                raise ArchiveRejected(
                    C.COMPRESSION_RATIO,
                    f"{self._inflated} bytes inflated from {self._read}: ratio above {limits.max_compression_ratio}",
                )
            self._crc = crc32(out, self._crc)
            feed(out)
            if inflater.eof:
                self._phase = _GZIP_TRAILER
                return inflater.unused_data
            data = inflater.unconsumed_tail
            # A full output buffer may leave output pending inside the inflater even when all input was taken.
            if not data and len(out) < INFLATE_CHUNK:
                return b""
            self._check_clock()

    def _check_after_gzip(self, data: bytes) -> None:
        # Zero padding after the gzip member is tolerated (block devices and some tools pad); anything else would
        # be bytes nobody verified, and a second gzip member is content tar tools would silently read.
        if data and data.count(0) != len(data):
            what = "a second gzip member" if data.lstrip(b"\0").startswith(b"\x1f\x8b") else "non-zero bytes"
            raise ArchiveRejected(C.CORRUPT_ARCHIVE, f"{what} after the end of the gzip stream")

    def _check_clock(self) -> None:
        if self._clock() > self._deadline:
            raise ArchiveRejected(
                C.TOO_LARGE,
                f"verification time limit of {self._limits.verify_time_limit_seconds} s exceeded "
                f"after {self._read} archive bytes",
            )


class _Pipeline:
    """The tar walker on a second thread, fed inflated pieces through a queue of at most ``PIPELINE_DEPTH``; the
    compressed chunks' sha256 may run there too (``hash_compressed``), so that the reading thread does nothing but
    read and inflate: the bound for two cores is inflate alone on one, both hashes on the other.

    Stream order is kept: the walker's error is raised by the next ``feed`` (nothing the reader found later can
    come first), and when the reader fails, ``close`` first lets the walker finish the pieces queued before the
    failure, so an error in those bytes still wins, as it would on one thread.
    """

    _POLL_SECONDS = 0.05

    def __init__(self, walker: _TarWalker, check_clock: Callable[[], None]) -> None:
        self._walker = walker
        self._check_clock = check_clock
        self._queue: queue.Queue[tuple[bytes, bool] | None] = queue.Queue(maxsize=PIPELINE_DEPTH)
        self.archive_hash = hashlib.sha256()  # of the compressed bytes; complete once ``close`` returned
        self._error: BaseException | None = None
        self._failed = threading.Event()
        self._thread = threading.Thread(target=self._walk, name="archive-walker", daemon=True)
        self._thread.start()

    def _walk(self) -> None:
        try:
            feed, hash_compressed = self._walker.feed, self.archive_hash.update
            while (item := self._queue.get()) is not None:
                piece, compressed = item
                if compressed:
                    hash_compressed(piece)
                else:
                    feed(piece)
        except BaseException as exc:  # handed to the reading thread, which raises it
            self._error = exc
            self._failed.set()

    def feed(self, piece: bytes) -> None:
        self._send((piece, False))

    def hash_compressed(self, chunk: bytes) -> None:
        self._send((chunk, True))

    def _send(self, item: tuple[bytes, bool]) -> None:
        while not self._put(item):
            self._check_clock()  # the walker is behind: the time limit still holds while we wait for it
        if self._error is not None:
            raise self._error

    def _put(self, item: tuple[bytes, bool] | None) -> bool:
        """Queue ``item``; False after a wait with the queue still full. Gives up at once if the walker failed."""
        if self._failed.is_set():
            return True
        try:
            self._queue.put(item, timeout=self._POLL_SECONDS)
        except queue.Full:
            return self._failed.is_set()
        return True

    def close(self) -> BaseException | None:
        """Wait for the walker to take every queued piece; return its error, if it failed."""
        while not self._put(None):
            pass
        self._thread.join()
        return self._error


_GZIP_HEADER, _DEFLATE, _GZIP_TRAILER, _GZIP_ENDED = range(4)


def _gzip_header_length(data: bytes | bytearray) -> int | None:
    """The length of the gzip member header ``data`` starts with (RFC 1952), or None while it is incomplete.

    Refuses what zlib refuses: another magic number or method, reserved flags, a header CRC that differs."""
    if data[:2] != b"\x1f\x8b"[: len(data[:2])]:
        raise _corrupt("not a gzip stream")
    if len(data) < 10:
        return None
    if data[2] != 8:
        raise _corrupt(f"gzip compression method {data[2]} is not deflate")
    flags = data[3]
    if flags & _FRESERVED:
        raise _corrupt("reserved gzip header flags are set")
    end = 10
    if flags & _FEXTRA:
        if len(data) < end + 2:
            return None
        end += 2 + int.from_bytes(data[end : end + 2], "little")
        if len(data) < end:
            return None
    for flag in (_FNAME, _FCOMMENT):
        if flags & flag:
            terminator = data.find(0, end)
            if terminator < 0:
                return None
            end = terminator + 1
    if flags & _FHCRC:
        if len(data) < end + 2:
            return None
        if int.from_bytes(data[end : end + 2], "little") != zlib.crc32(data[:end]) & 0xFFFF:
            raise _corrupt("gzip header CRC mismatch")
        end += 2
    return end


# --- Tar -------------------------------------------------------------------------------------------------------------

_HEADER, _DATA, _PADDING, _METADATA_DATA, _END = range(5)


def _corrupt(detail: str) -> ArchiveRejected:
    return ArchiveRejected(C.CORRUPT_ARCHIVE, detail)


def _nts(field: bytes) -> bytes:
    """A NUL-terminated string field."""
    return field.split(b"\0", 1)[0]


def _number(field: bytes, what: str) -> int:
    """A numeric header field: octal ASCII, NUL/space padded. GNU base-256 is refused (``AMBIGUOUS_HEADER``): no
    size or mode below our limits needs it, and readers disagree on its negative and oversized forms."""
    if field[0] & 0x80:
        raise ArchiveRejected(C.AMBIGUOUS_HEADER, f"base-256 {what} in a tar header (octal is the canonical form)")
    end = field.find(0)
    digits = (field if end < 0 else field[:end]).strip(b" ")
    if digits.isdigit():  # ASCII digits only (bytes), so int() sees no sign, space or underscore; 8 and 9 raise
        try:
            return int(digits, 8)
        except ValueError:
            pass
    elif not digits:
        return 0
    raise _corrupt(f"invalid {what} {field!r} in tar header")


def _byte_sum(data: bytes) -> int:
    """The sum of the bytes of a 512-byte block, in C: Adler-32's first half is 1 + the byte sum modulo 65521, exact
    for 256 bytes (at most 65280), so two halves give the block's sum (per member, this is much cheaper than sum())."""
    return (zlib.adler32(data[:256]) & 0xFFFF) + (zlib.adler32(data[256:]) & 0xFFFF) - 2


def _header_form(magic: bytes) -> str:
    if magic == _MAGIC_POSIX:
        return "a POSIX ustar header with bytes after its prefix field (star's layout: readers split it differently)"
    if magic in (_MAGIC_GNU, _MAGIC_V7):
        kind = "GNU" if magic == _MAGIC_GNU else "V7"
        return (
            f"a {kind} header with bytes in the ustar prefix area (tarfile prepends them to the name, GNU tar does not)"
        )
    return f"tar header magic {magic!r} is none of POSIX ustar, GNU or V7"


def _member_form(magic: bytes, odd: bool, typeflag: bytes, raw_name: bytes) -> str | None:
    """Why readers would read this member's own header differently, or None."""
    if odd:
        return _header_form(magic)
    if typeflag == _CONTIGUOUS:
        return "a contiguous-file entry (type 7): GNU tar extracts it with a warning"
    if typeflag == b"0" and raw_name.endswith(b"/"):
        return "a regular-file entry whose name ends in '/' (some readers make it a directory)"
    return None


def _check_checksum(block: bytes) -> None:
    field = block[148:156]
    stored = _number(field, "checksum")
    unsigned = _byte_sum(block) - sum(field) + 8 * 0x20
    if stored == unsigned:
        return
    # Some old tars summed signed chars; tarfile accepts both, so do we.
    high = sum(1 for byte in block[:148] + block[156:] if byte & 0x80)
    if stored != unsigned - 256 * high:
        raise _corrupt("tar header checksum mismatch")


_PAX_NUMBER = re.compile(rb"[0-9]{1,18}")
_PAX_TIME = re.compile(rb"-?[0-9]{1,18}(\.[0-9]{1,9})?")
_PAX_CHARSET = re.compile(rb"BINARY|ISO-IR 10646 2000 UTF-8")
_PAX_HARMLESS = {
    "mtime": _PAX_TIME,
    "atime": _PAX_TIME,
    "ctime": _PAX_TIME,
    "uid": _PAX_NUMBER,
    "gid": _PAX_NUMBER,
    "uname": None,
    "gname": None,
    "comment": None,
}
"""pax keys every reader reads alike and that change nothing extracted but times and owners (validated so that no
reader warns); ``path`` and ``size`` are also accepted in a member's own header, nothing else anywhere."""


def _parse_pax(data: bytes) -> dict[str, bytes]:
    """pax extended header records: ``"<length> <key>=<value>\\n"``, length counting the whole record. A key given
    twice is ``AMBIGUOUS_HEADER`` (readers keep one or the other)."""
    records: dict[str, bytes] = {}
    pos, size = 0, len(data)
    while pos < size:
        if data[pos] == 0:
            if data.count(0, pos) != size - pos:
                raise _corrupt("garbage after pax records")
            break
        space = data.find(b" ", pos, pos + 21)
        length_text = data[pos:space] if space > pos else b""
        if not length_text.isdigit():
            raise _corrupt("malformed pax record length")
        end = pos + int(length_text)
        if end <= space + 1 or end > size or data[end - 1] != 0x0A:
            raise _corrupt("malformed pax record")
        key, equals, value = data[space + 1 : end - 1].partition(b"=")
        if not equals or not key:
            raise _corrupt("malformed pax record")
        try:
            name = key.decode("utf-8")
        except UnicodeDecodeError:
            raise _corrupt(f"pax record key {key!r} is not UTF-8") from None
        if name in records:
            raise ArchiveRejected(C.AMBIGUOUS_HEADER, f"pax record {name!r} given twice in one header")
        records[name] = value
        pos = end
    return records


def _pax_problem(records: dict[str, bytes], *, local: bool) -> str | None:
    """Why some reader would read these pax records differently from another, or None. ``GNU.sparse.*`` is left to
    the member check (a sparse file is a ``SPECIAL_FILE``)."""
    for key, value in records.items():
        if key.startswith("GNU.sparse."):
            continue
        if local and key in ("path", "size"):
            pattern = _PAX_NUMBER if key == "size" else None
        elif local and key == "hdrcharset":
            # tarfile writes BINARY for a name that is not UTF-8; either value leaves a UTF-8 path's bytes alone,
            # and a name that is not UTF-8 is refused as UNSAFE_PATH
            pattern = _PAX_CHARSET
        elif key in _PAX_HARMLESS:
            pattern = _PAX_HARMLESS[key]
        else:
            where = "pax" if local else "pax global"
            return f"{where} record {key[:60]!r} (extractors apply it differently or not at all)"
        if not value:
            return f"empty pax record {key!r} (an unset: readers fall back to different fields)"
        if b"\0" in value:
            return f"pax record {key!r} holds a NUL byte (C readers cut the value there, tarfile does not)"
        if pattern is not None and not pattern.fullmatch(value):
            return f"pax record {key!r} is not a number ({value[:40]!r}); readers read it differently"
    return None


class _TarWalker:
    """Walks a tar stream fed in arbitrary pieces; checks each member as its header arrives, hashes its data."""

    def __init__(self, manifest: Manifest, limits: Limits) -> None:
        self._limits = limits
        self._expected: dict[str, ManifestFile] = {entry.path: entry for entry in manifest.files}
        # Manifest paths passed check_path when the manifest was parsed (same limits): a member named exactly like
        # one needs neither that check again nor a second fold, the per-member cost that counts in many small files.
        self._folded = {path: fold_path(path) for path in self._expected}
        self._manifest_keys = set(self._folded.values())
        self._seen_keys: dict[str, str] = {}
        self._seen_files: set[str] = set()
        self._state = _HEADER
        self._partial = bytearray()  # a header block or metadata split across pieces
        self._remaining = 0
        self._padding = 0
        self._hasher = hashlib.sha256()
        self._current: ManifestFile | None = None
        self._metadata_type = b""
        self._metadata_headers = 0
        self._metadata_total = 0
        self._pax_global: dict[str, bytes] = {}
        self._pax_local: dict[str, bytes] | None = None  # None: no pax header before the member to come
        self._longname: bytes | None = None
        self._ambiguity: str | None = None  # found in the extended headers of the member to come
        self._manifest_dirs = {path.rpartition("/")[0] for path in self._expected} - {""}
        for parent in list(self._manifest_dirs):
            while (parent := parent.rpartition("/")[0]) and parent not in self._manifest_dirs:
                self._manifest_dirs.add(parent)
        self._end_padding = 0
        self.members = 0
        self.files = 0
        self.unpacked = 0

    # Feeding ------------------------------------------------------------------------------------------------------

    def feed(self, data: bytes) -> None:
        view = memoryview(data)
        pos, size = 0, len(data)
        while pos < size:
            state = self._state
            if state == _DATA:
                take = min(self._remaining, size - pos)
                self._hasher.update(view[pos : pos + take])
                pos += take
                self._remaining -= take
                if not self._remaining:
                    self._finish_file()
            elif state == _HEADER:
                partial = self._partial
                if not partial and size - pos >= _BLOCK:
                    block = data[pos : pos + _BLOCK]
                    pos += _BLOCK
                else:
                    take = min(_BLOCK - len(partial), size - pos)
                    partial += view[pos : pos + take]
                    pos += take
                    if len(partial) < _BLOCK:
                        continue
                    block = bytes(partial)
                    partial.clear()
                self._on_header(block)
            elif state == _PADDING:
                take = min(self._padding, size - pos)
                pos += take
                self._padding -= take
                if not self._padding:
                    self._state = _HEADER
            elif state == _METADATA_DATA:
                take = min(self._remaining, size - pos)
                self._partial += view[pos : pos + take]
                pos += take
                self._remaining -= take
                if not self._remaining:
                    self._on_metadata(bytes(self._partial))
                    self._partial.clear()
            else:  # _END: only zero padding may follow the end-of-archive block
                if data.count(0, pos) != size - pos:
                    raise _corrupt("non-zero data after the tar end-of-archive block")
                self._end_padding += size - pos
                if self._end_padding > END_PADDING_MAX:
                    raise _corrupt(f"more than {END_PADDING_MAX} bytes of padding after the tar end-of-archive block")
                return

    def finish(self) -> None:
        if self._state == _END and self._end_padding < _BLOCK:
            # GNU tar warns "A lone zero block"; the end of an archive is two zero blocks
            raise _corrupt("tar stream ends after one zero block: the end-of-archive marker is two")
        if self._state != _END:
            if self._state == _DATA and self._current is not None:
                raise _corrupt(f"tar stream ends inside member {show_path(self._current.path)}")
            raise _corrupt("tar stream ends without an end-of-archive block")
        missing = sorted(path for path in self._expected if path not in self._seen_files)
        if missing:
            shown = ", ".join(repr(path) for path in missing[:5])
            more = f" and {len(missing) - 5} more" if len(missing) > 5 else ""
            raise ArchiveRejected(C.MISSING_FILE, f"not in the archive: {shown}{more}")

    def _after_data(self, size: int) -> None:
        self._padding = -size % _BLOCK
        self._state = _PADDING if self._padding else _HEADER

    # Headers ------------------------------------------------------------------------------------------------------

    def _on_header(self, block: bytes) -> None:
        if block == _ZEROS:
            if self._metadata_headers:
                raise _corrupt("end-of-archive block right after an extended header")
            if self._ambiguity:
                raise ArchiveRejected(C.AMBIGUOUS_HEADER, f"at the end of the archive: {self._ambiguity}")
            self._state = _END
            return
        _check_checksum(block)
        typeflag = block[156:157]
        size = _number(block[124:136], "size")
        magic = block[257:265]
        if magic == _MAGIC_POSIX:
            prefix = _nts(block[345:500]) if block[345] else b""
            odd = block[500:512] != _ZEROS_TAIL  # star keeps times there and GNU tar then reads a shorter prefix
        else:
            # tarfile honours the ustar prefix whatever the magic; GNU tar and bsdtar read it only for POSIX magic
            prefix = b""
            odd = magic not in (_MAGIC_GNU, _MAGIC_V7) or block[345:512] != _ZEROS_GNU_AREA
            odd = odd or (magic == _MAGIC_V7 and block[265:345] != _ZEROS_V7_AREA)
        if typeflag in _METADATA:
            if odd:
                raise ArchiveRejected(C.AMBIGUOUS_HEADER, f"extended header {typeflag!r}: {_header_form(magic)}")
            self._start_metadata(typeflag, size)
            return

        self._metadata_headers = 0
        if self._pax_local is None and self._longname is None and self._ambiguity is None and not self._pax_global:
            # the common member: no extended header applies (the same checks as below, fewer steps)
            end = block.find(0, 0, 100)
            raw_name = block[:end] if end >= 0 else block[:100]
            if prefix:
                raw_name = prefix + b"/" + raw_name
            if odd or typeflag == _CONTIGUOUS or (typeflag == b"0" and raw_name.endswith(b"/")):
                self._refuse_member(raw_name, _member_form(magic, odd, typeflag, raw_name))
            self._on_member(raw_name, typeflag, _number(block[100:108], "mode") & 0o7777, size)
            return
        pax = self._pax_global
        local = self._pax_local
        if local is not None:
            pax = {**pax, **local}
            self._pax_local = None
        else:
            local = {}
        raw_name = _nts(block[0:100])
        if prefix:
            raw_name = prefix + b"/" + raw_name
        longname, self._longname = self._longname, None
        if longname is not None:
            raw_name = longname
        if "path" in pax:
            raw_name = pax["path"]
        ambiguity, self._ambiguity = self._ambiguity, None
        if not ambiguity and "size" in local and int(local["size"]) != size:
            ambiguity = f"pax size {int(local['size'])} contradicts the header's size {size}"
        ambiguity = ambiguity or _member_form(magic, odd, typeflag, raw_name)
        if ambiguity:
            self._refuse_member(raw_name, ambiguity)
        if pax and any(key.startswith("GNU.sparse.") for key in pax):
            typeflag = b"S"
        mode = _number(block[100:108], "mode") & 0o7777
        self._on_member(raw_name, typeflag, mode, size)

    @staticmethod
    def _refuse_member(raw_name: bytes, why: str | None) -> None:
        shown = raw_name[:200].decode("utf-8", "backslashreplace")
        raise ArchiveRejected(C.AMBIGUOUS_HEADER, f"member {shown!r}: {why}")

    def _start_metadata(self, typeflag: bytes, size: int) -> None:
        self._metadata_headers += 1
        if self._metadata_headers > METADATA_HEADERS_PER_MEMBER:
            raise _corrupt(f"more than {METADATA_HEADERS_PER_MEMBER} extended headers in a row")
        if size > METADATA_HEADER_MAX:
            raise ArchiveRejected(C.TOO_LARGE, f"tar extended header of {size} bytes, limit is {METADATA_HEADER_MAX}")
        self._metadata_total += size
        if self._metadata_total > METADATA_TOTAL_MAX:
            raise ArchiveRejected(C.TOO_LARGE, f"tar extended headers add up to more than {METADATA_TOTAL_MAX} bytes")
        self._metadata_type = typeflag
        if size:
            self._remaining = size
            self._state = _METADATA_DATA
            self._partial.clear()
        else:
            self._on_metadata(b"")

    def _on_metadata(self, data: bytes) -> None:
        # One member's extended headers: at most one GNU long name or one pax header, never both, no GNU long link
        # name, and a global header only before them. Readers resolve every other sequence differently (tarfile
        # lets a long name beat a pax path, GNU tar the other way round), so any other is refused at the member.
        kind = self._metadata_type
        pending = self._longname is not None or self._pax_local is not None
        problem: str | None = None
        if kind == _PAX_LOCAL:
            records = _parse_pax(data)
            if pending:
                problem = "more than one extended header (GNU long name or pax) before one member"
            else:
                problem = _pax_problem(records, local=True)
            self._pax_local = records
        elif kind == _PAX_GLOBAL:
            records = _parse_pax(data)
            if pending:
                problem = "a pax global header between a member's extended headers and the member"
            else:
                problem = _pax_problem(records, local=False)
            self._pax_global.update(records)
        elif kind == _GNU_LONGNAME:
            name = _nts(data)
            if pending:
                problem = "more than one extended header (GNU long name or pax) before one member"
            elif not name or data.count(0, len(name)) != len(data) - len(name):
                problem = "a GNU long name that is empty or has bytes after its terminating NUL"
            self._longname = name
        else:
            problem = "a GNU long link name (type K): links are not allowed and readers apply it differently"
        if problem and not self._ambiguity:
            self._ambiguity = problem
        self._after_data(len(data))

    # Members ------------------------------------------------------------------------------------------------------

    def _on_member(self, raw_name: bytes, typeflag: bytes, mode: int, size: int) -> None:
        is_dir = typeflag == _DIRECTORY or (typeflag == b"\0" and raw_name.endswith(b"/"))  # V7 directories
        if is_dir and raw_name in (b".", b"./"):  # the root of `tar -C dir .`
            self._check_empty_directory(".", size)
            self._state = _HEADER
            return

        self.members += 1
        if self.members > self._limits.max_files:
            raise ArchiveRejected(
                C.TOO_MANY_FILES, f"archive has more than {self._limits.max_files} files and directories"
            )
        try:
            name = raw_name.decode("utf-8")
        except UnicodeDecodeError:
            raise ArchiveRejected(C.UNSAFE_PATH, f"member name {raw_name[:120]!r} is not valid UTF-8") from None
        path = name.removeprefix("./")
        if is_dir:
            path = path.removesuffix("/")
        folded = self._folded.get(path)
        if folded is None:
            check_path(path, self._limits)

        if typeflag in _LINKS:
            raise ArchiveRejected(C.LINK_NOT_ALLOWED, f"{show_path(path)} is a {_LINKS[typeflag]}")
        if not is_dir and typeflag not in _REGULAR:
            what = _SPECIAL.get(typeflag, f"tar entry of type {typeflag!r}")
            raise ArchiveRejected(C.SPECIAL_FILE, f"{show_path(path)} is a {what}")
        if mode & SPECIAL_MODE_BITS:
            raise ArchiveRejected(C.SPECIAL_FILE, f"{show_path(path)} has setuid/setgid/sticky bits (mode {mode:#o})")

        key = folded if folded is not None else fold_path(path)
        if key in self._seen_keys:
            seen = self._seen_keys[key]
            same = "appears twice" if seen == path else f"collides with {show_path(seen)} (case-insensitively)"
            raise ArchiveRejected(C.DUPLICATE_ENTRY, f"{show_path(path)} {same}")
        self._seen_keys[key] = path

        if is_dir:
            self._check_empty_directory(path, size)
            self._check_directory_against_files(path, key)
            if path not in self._manifest_dirs:
                # every reader would create it: something on disk the manifest does not list
                raise ArchiveRejected(
                    C.UNEXPECTED_FILE, f"directory {show_path(path)}: no file of the manifest is under it"
                )
            self._state = _HEADER
            return

        entry = self._expected.get(path)
        if entry is None:
            raise ArchiveRejected(C.UNEXPECTED_FILE, f"{show_path(path)} is not in the manifest")
        if size != entry.size:
            raise ArchiveRejected(C.SIZE_MISMATCH, f"{show_path(path)} is {size} bytes, the manifest says {entry.size}")
        if entry.mode is not None and mode & 0o777 != entry.mode:
            raise ArchiveRejected(
                C.DIGEST_MISMATCH,
                f"{show_path(path)}: mode differs ({mode & 0o777:#o}, the manifest says {entry.mode:#o})",
            )
        if self.unpacked + size > self._limits.max_unpacked_bytes:
            raise ArchiveRejected(
                C.TOO_LARGE, f"files add up to more than the limit of {self._limits.max_unpacked_bytes} bytes"
            )
        self.unpacked += size
        self.files += 1
        self._current = entry
        self._hasher = hashlib.sha256()
        if size:
            self._remaining = size
            self._state = _DATA
        else:
            self._finish_file()

    def _check_empty_directory(self, path: str, size: int) -> None:
        if size:
            raise _corrupt(f"directory {show_path(path)} carries {size} bytes of data")

    def _check_directory_against_files(self, path: str, key: str) -> None:
        # A directory where the manifest has a file (itself or one of its parents) could not be installed.
        parent = key
        while parent:
            if parent in self._manifest_keys:
                raise ArchiveRejected(
                    C.DUPLICATE_ENTRY, f"directory {show_path(path)} conflicts with a file in the manifest"
                )
            parent = parent.rpartition("/")[0]

    def _finish_file(self) -> None:
        entry = self._current
        assert entry is not None
        digest = self._hasher.hexdigest()
        if digest != entry.sha256:
            raise ArchiveRejected(
                C.DIGEST_MISMATCH, f"{show_path(entry.path)}: sha256 is {digest}, the manifest says {entry.sha256}"
            )
        self._seen_files.add(entry.path)
        self._current = None
        self._after_data(entry.size)
