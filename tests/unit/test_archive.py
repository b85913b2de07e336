"""verify_archive: one streaming pass over a tar.gz, checked against its manifest.

Why one module of ~620 lines: one table of archive shapes per verifier rule, sharing the tar/gzip builders.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import random
import tarfile
import zlib
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from packyard.config import Limits, MiB
from packyard.errors import ArchiveRejectCode, ArchiveRejected, InvalidRequest
from packyard.publishing.archive_verifier import READ_CHUNK, VerifiedArchive, verify_archive
from packyard.publishing.manifest import Manifest, parse_manifest

C = ArchiveRejectCode
LIMITS = Limits()


# --- Builders ---------------------------------------------------------------------------------------------------------


@dataclass
class M:
    """A tar member to build."""

    name: str
    content: bytes = b""
    kind: bytes = tarfile.REGTYPE
    mode: int = 0o644
    linkname: str = ""


def tar(members: list[M], fmt: int = tarfile.PAX_FORMAT, **open_args: Any) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=fmt, **open_args) as archive:
        for member in members:
            info = tarfile.TarInfo(member.name)
            info.type, info.mode, info.mtime, info.linkname = member.kind, member.mode, 1_700_000_000, member.linkname
            if member.kind == tarfile.REGTYPE:
                info.size = len(member.content)
                archive.addfile(info, io.BytesIO(member.content))
            else:
                archive.addfile(info)
    return out.getvalue()


def gz(data: bytes) -> bytes:
    return gzip.compress(data, compresslevel=6, mtime=0)


def targz(members: list[M], fmt: int = tarfile.PAX_FORMAT, **open_args: Any) -> bytes:
    return gz(tar(members, fmt, **open_args))


def manifest(files: dict[str, bytes], modes: dict[str, int] | None = None, limits: Limits = LIMITS) -> Manifest:
    modes = modes or {}
    return parse_manifest(
        {
            "files": [
                {"path": path, "size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
                | ({"mode": modes[path]} if path in modes else {})
                for path, data in files.items()
            ]
        },
        limits,
    )


class Stream:
    """A readable stream that counts what was taken and may return fewer bytes than asked (like a socket)."""

    def __init__(self, data: bytes, max_piece: int | None = None) -> None:
        self._data, self._max_piece, self.taken, self.reads = data, max_piece, 0, 0

    def read(self, size: int = -1) -> bytes:
        self.reads += 1
        size = len(self._data) - self.taken if size < 0 else size
        if self._max_piece:
            size = min(size, self._max_piece)
        piece = self._data[self.taken : self.taken + size]
        self.taken += len(piece)
        return piece


def verify(
    raw: bytes,
    expected: Manifest,
    *,
    limits: Limits = LIMITS,
    declared_size: int | None = None,
    declared_sha256: str | None = None,
    stream: Stream | None = None,
    **kwargs: Any,
) -> VerifiedArchive:
    return verify_archive(
        stream or Stream(raw),
        expected,
        declared_size=len(raw) if declared_size is None else declared_size,
        declared_sha256=hashlib.sha256(raw).hexdigest() if declared_sha256 is None else declared_sha256,
        limits=limits,
        **kwargs,
    )


def rejection(raw: bytes, expected: Manifest, **kwargs: Any) -> ArchiveRejected:
    with pytest.raises(ArchiveRejected) as caught:
        verify(raw, expected, **kwargs)
    return caught.value


FILES = {"README.md": b"# readme\n", "src/app.py": b"print('hi')\n" * 100, "empty.txt": b""}


def good_members() -> list[M]:
    return [
        M("src/", kind=tarfile.DIRTYPE, mode=0o755),
        *[M(path, data) for path, data in FILES.items()],
    ]


# --- Accepted archives ------------------------------------------------------------------------------------------------


def test_good_archive_is_verified_and_measured() -> None:
    # Given an archive holding exactly the manifest's files (plus a directory entry)
    raw = targz(good_members())
    # When verified
    result = verify(raw, manifest(FILES))
    # Then its size, digest, unpacked size and file count are reported
    assert result == VerifiedArchive(
        archive_size=len(raw),
        archive_sha256=hashlib.sha256(raw).hexdigest(),
        unpacked_size=sum(len(data) for data in FILES.values()),
        file_count=len(FILES),
    )


@pytest.mark.parametrize("fmt", [tarfile.PAX_FORMAT, tarfile.GNU_FORMAT, tarfile.USTAR_FORMAT])
def test_long_names_in_every_tar_format_are_read(fmt: int) -> None:
    # Given a 180-byte path: a pax header, a GNU long name or a ustar prefix, depending on the format
    files = {"d" * 60 + "/" + "e" * 60 + "/" + "f" * 58: b"deep\n", "tiny": b"t"}
    raw = targz([M(path, data) for path, data in files.items()], fmt)
    # When verified, Then the long name is matched to the manifest
    assert verify(raw, manifest(files)).file_count == 2


def test_non_ascii_utf8_names_are_read_from_pax_and_gnu() -> None:
    # Given a UTF-8 name outside ASCII
    files = {"données/café.txt": b"x"}
    for fmt in (tarfile.PAX_FORMAT, tarfile.GNU_FORMAT):
        # When verified, Then it is matched
        assert verify(targz([M(p, d) for p, d in files.items()], fmt), manifest(files)).file_count == 1


def test_tar_c_dot_style_leading_dot_slash_and_root_entry_are_accepted() -> None:
    # Given an archive as `tar -C dir -czf x.tgz .` writes it: a "./" root entry and "./"-prefixed names
    raw = targz([M("./", kind=tarfile.DIRTYPE, mode=0o755), M("./sub/", kind=tarfile.DIRTYPE), M("./sub/a", b"a")])
    # When verified, Then the prefix is stripped and the root entry ignored
    assert verify(raw, manifest({"sub/a": b"a"}), limits=Limits(max_files=2)).file_count == 1


def test_pieces_of_any_size_from_the_stream_give_the_same_result() -> None:
    # Given a stream that hands out at most 7 bytes per read (headers split across pieces)
    raw = targz(good_members())
    # When verified, Then the result equals the one from whole reads
    assert verify(raw, manifest(FILES), stream=Stream(raw, max_piece=7)) == verify(raw, manifest(FILES))


def test_file_larger_than_one_inflate_chunk_is_hashed_across_chunks() -> None:
    # Given a 5 MiB file of pseudo-random bytes (several read and inflate chunks)
    data = random.Random(1).randbytes(5 * MiB)
    # When verified, Then its digest matches
    assert verify(targz([M("big.bin", data)]), manifest({"big.bin": data})).unpacked_size == 5 * MiB


def test_pax_global_header_is_accepted() -> None:
    # Given an archive with a pax global header (a comment)
    raw = targz([M("a", b"a")], pax_headers={"comment": "built by ci"})
    # When verified, Then it passes
    assert verify(raw, manifest({"a": b"a"})).file_count == 1


def test_matching_manifest_mode_is_accepted() -> None:
    # Given a member with mode 0o755 and a manifest that pins 0o755, Then it passes
    raw = targz([M("tool", b"#!", mode=0o755)])
    assert verify(raw, manifest({"tool": b"#!"}, {"tool": 0o755})).file_count == 1


def test_zero_padding_after_the_gzip_stream_is_accepted() -> None:
    # Given a gzip stream followed by zero padding (as block devices write it)
    raw = targz(good_members()) + bytes(4096)
    # When verified, Then it passes and the padding counts in the archive size
    assert verify(raw, manifest(FILES)).archive_size == len(raw)


def test_compressible_archive_below_the_ratio_floor_is_accepted() -> None:
    # Given 2 MiB of zeros (ratio ~1000) and the default 64 MiB floor
    zeros = bytes(2 * MiB)
    # When verified, Then the ratio is not checked yet and it passes
    assert verify(targz([M("z", zeros)]), manifest({"z": zeros})).unpacked_size == 2 * MiB


# --- Paths ------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["../escape", "a/../../b", "/etc/passwd", "a//b", "a/./b", "a\\b", "ctl\x01", "././x"])
def test_unsafe_member_path_is_unsafe_path(name: str) -> None:
    # Given a member with an unsafe name
    raw = targz([M(name, b"x")])
    # When verified, Then UNSAFE_PATH
    assert rejection(raw, manifest({"ok": b"x"})).sub_code == C.UNSAFE_PATH


def test_member_path_longer_than_the_limit_is_unsafe_path() -> None:
    # Given a member path of 30 bytes and a limit of 20
    raw = targz([M("a" * 30, b"x")])
    error = rejection(raw, manifest({"ok": b"x"}), limits=Limits(max_path_length=20))
    # Then UNSAFE_PATH, with the length
    assert error.sub_code == C.UNSAFE_PATH
    assert "30 bytes" in error.detail


@pytest.mark.parametrize("fmt", [tarfile.GNU_FORMAT, tarfile.PAX_FORMAT])
def test_non_utf8_member_name_is_unsafe_path(fmt: int) -> None:
    # Given a member whose raw name is Latin-1 (0xE9), in a plain header or a pax path
    raw = targz([M("caf\udce9", b"x")], fmt, encoding="utf-8", errors="surrogateescape")
    # When verified, Then UNSAFE_PATH naming the raw bytes
    error = rejection(raw, manifest({"café": b"x"}))
    assert error.sub_code == C.UNSAFE_PATH
    assert "caf\\xe9" in error.detail


# --- Entry types and modes --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", [tarfile.SYMTYPE, tarfile.LNKTYPE])
def test_links_are_refused(kind: bytes) -> None:
    # Given a symbolic or hard link
    raw = targz([M("a", b"a"), M("link", kind=kind, linkname="a")])
    # When verified, Then LINK_NOT_ALLOWED naming it
    error = rejection(raw, manifest({"a": b"a", "link": b"a"}))
    assert error.sub_code == C.LINK_NOT_ALLOWED
    assert "'link'" in error.detail


@pytest.mark.parametrize(
    ("kind", "what"),
    [(tarfile.CHRTYPE, "character device"), (tarfile.BLKTYPE, "block device"), (tarfile.FIFOTYPE, "fifo")],
)
def test_devices_and_fifos_are_special_files(kind: bytes, what: str) -> None:
    # Given a device or fifo entry, When verified, Then SPECIAL_FILE saying what it is
    error = rejection(targz([M("dev", kind=kind)]), manifest({"ok": b""}))
    assert error.sub_code == C.SPECIAL_FILE
    assert what in error.detail


def test_gnu_sparse_file_is_a_special_file() -> None:
    # Given a GNU sparse entry (type 'S'), When verified, Then SPECIAL_FILE
    info = tarfile.TarInfo("sparse")
    info.type = b"S"
    raw = gz(info.tobuf(format=tarfile.GNU_FORMAT) + bytes(1024))
    assert rejection(raw, manifest({"sparse": b""})).sub_code == C.SPECIAL_FILE


@pytest.mark.parametrize("mode", [0o4755, 0o2755, 0o1755])
@pytest.mark.parametrize("kind", [tarfile.REGTYPE, tarfile.DIRTYPE])
def test_setuid_setgid_sticky_bits_are_special_files(mode: int, kind: bytes) -> None:
    # Given a file or directory with setuid, setgid or the sticky bit
    raw = targz([M("x", b"", kind=kind, mode=mode)])
    # When verified, Then SPECIAL_FILE with the mode
    error = rejection(raw, manifest({"x": b""}))
    assert error.sub_code == C.SPECIAL_FILE
    assert oct(mode) in error.detail


def test_mode_differing_from_the_manifest_is_digest_mismatch() -> None:
    # Given a manifest that pins 0o644 and a member with 0o755
    raw = targz([M("tool", b"#!", mode=0o755)])
    # When verified, Then DIGEST_MISMATCH "mode differs" (the mode is pinned content)
    error = rejection(raw, manifest({"tool": b"#!"}, {"tool": 0o644}))
    assert error.sub_code == C.DIGEST_MISMATCH
    assert "mode differs" in error.detail


def test_directory_carrying_data_is_corrupt() -> None:
    # Given a directory header that claims 512 bytes of data
    info = tarfile.TarInfo("d")
    info.type, info.size = tarfile.DIRTYPE, 512
    raw = gz(info.tobuf(format=tarfile.USTAR_FORMAT) + bytes(512) + bytes(1024))
    # When verified, Then CORRUPT_ARCHIVE (no hidden data in directories)
    assert rejection(raw, manifest({})).sub_code == C.CORRUPT_ARCHIVE


# --- Duplicates -------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("first", "second"),
    [("a", "a"), ("README", "readme"), ("./a", "a"), ("Straße", "STRASSE"), ("d/", "D/"), ("x/", "X")],
)
def test_same_path_twice_or_case_fold_collision_is_duplicate(first: str, second: str) -> None:
    # Given two entries a case-insensitive file system would merge
    # (a directory entry needs a manifest file under it: an empty directory is an unexpected entry of its own)
    kind = {True: tarfile.DIRTYPE, False: tarfile.REGTYPE}
    members = [M(name, b"", kind=kind[name.endswith("/")]) for name in (first, second)]
    files = {name.removeprefix("./"): b"" for name in (first, second) if not name.endswith("/")}
    if first.endswith("/"):
        files = {first + "inside": b"", **files}
        members.append(M(first + "inside", b""))
    # When verified, Then DUPLICATE_ENTRY
    assert rejection(targz(members), manifest(dict(list(files.items())[:1]))).sub_code == C.DUPLICATE_ENTRY


@pytest.mark.parametrize("directory", ["a.txt/", "A.TXT/", "a.txt/sub/"])
def test_directory_where_the_manifest_has_a_file_is_duplicate(directory: str) -> None:
    # Given a manifest file "a.txt" and a directory entry that would have to be (or sit under) it
    raw = targz([M(directory, kind=tarfile.DIRTYPE), M("a.txt", b"a")])
    # When verified, Then DUPLICATE_ENTRY
    assert rejection(raw, manifest({"a.txt": b"a"})).sub_code == C.DUPLICATE_ENTRY


# --- Against the manifest ---------------------------------------------------------------------------------------------


def test_file_not_in_manifest_is_unexpected() -> None:
    # Given an extra file, When verified, Then UNEXPECTED_FILE naming it
    error = rejection(targz([*good_members(), M("extra.sh", b"evil")]), manifest(FILES))
    assert error.sub_code == C.UNEXPECTED_FILE
    assert "'extra.sh'" in error.detail


def test_manifest_file_never_seen_is_missing() -> None:
    # Given a manifest with one more file than the archive, When verified, Then MISSING_FILE naming it
    error = rejection(targz(good_members()), manifest({**FILES, "docs/guide.md": b"guide"}))
    assert error.sub_code == C.MISSING_FILE
    assert "'docs/guide.md'" in error.detail


def test_member_size_differing_from_manifest_is_size_mismatch() -> None:
    # Given a member of 5 bytes where the manifest says 4
    error = rejection(targz([M("a", b"12345")]), manifest({"a": b"1234"}))
    # Then SIZE_MISMATCH with both numbers
    assert error.sub_code == C.SIZE_MISMATCH
    assert "5 bytes" in error.detail and "4" in error.detail


def test_member_content_differing_from_manifest_is_digest_mismatch() -> None:
    # Given same-size content that differs, When verified, Then DIGEST_MISMATCH naming the path
    error = rejection(targz([M("a", b"evil")]), manifest({"a": b"good"}))
    assert error.sub_code == C.DIGEST_MISMATCH
    assert "'a'" in error.detail


# --- Counts, sizes, bombs, time ---------------------------------------------------------------------------------------


def test_more_members_than_max_files_counting_directories_is_too_many_files() -> None:
    # Given 2 files and 2 directories and a limit of 3
    raw = targz([M("d1/", kind=tarfile.DIRTYPE), M("d2/", kind=tarfile.DIRTYPE), M("d1/a", b"a"), M("d2/b", b"b")])
    # When verified, Then TOO_MANY_FILES
    expected = manifest({"d1/a": b"a", "d2/b": b"b"})
    assert rejection(raw, expected, limits=Limits(max_files=3)).sub_code == C.TOO_MANY_FILES
    # And with a limit of 4 it passes
    assert verify(raw, expected, limits=Limits(max_files=4)).file_count == 2


def test_unpacked_total_over_limit_is_refused_before_the_data_is_read() -> None:
    # Given a 3 MiB incompressible file and a 1 MiB unpacked limit at verification
    data = random.Random(2).randbytes(3 * MiB)
    raw = targz([M("big", data)])
    stream = Stream(raw)
    # When verified
    error = rejection(raw, manifest({"big": data}), limits=Limits(max_unpacked_bytes=1 * MiB), stream=stream)
    # Then TOO_LARGE, found from the header after the first read
    assert error.sub_code == C.TOO_LARGE
    assert stream.taken <= READ_CHUNK < len(raw)


def test_gzip_bomb_is_stopped_while_inflating() -> None:
    # Given 32 MiB of zeros (~32 KiB compressed), a 1 MiB ratio floor, and a stream handing out 1 KiB per read
    zeros = bytes(32 * MiB)
    raw = targz([M("zeros", zeros)])
    stream = Stream(raw, max_piece=1024)
    # When verified
    error = rejection(
        raw, manifest({"zeros": zeros}), limits=Limits(compression_ratio_floor_bytes=1 * MiB), stream=stream
    )
    # Then COMPRESSION_RATIO, long before the end of the archive
    assert error.sub_code == C.COMPRESSION_RATIO
    assert stream.taken < len(raw) // 4


def test_archive_longer_than_declared_is_too_large_and_reading_stops() -> None:
    # Given an archive declared 100 bytes shorter than it is
    raw = targz(good_members())
    stream = Stream(raw)
    # When verified
    error = rejection(raw, manifest(FILES), declared_size=len(raw) - 100, stream=stream)
    # Then TOO_LARGE, having read at most one byte past the declared size
    assert error.sub_code == C.TOO_LARGE
    assert stream.taken <= len(raw) - 100 + 1


def test_archive_longer_than_the_limit_is_too_large() -> None:
    # Given an archive larger than max_archive_bytes though declared within it
    raw = targz([M("r", random.Random(3).randbytes(4096))])
    error = rejection(raw, manifest({"r": b""}), declared_size=1000, limits=Limits(max_archive_bytes=1000))
    # Then TOO_LARGE naming the limit
    assert error.sub_code == C.TOO_LARGE
    assert "1000" in error.detail


def test_declared_size_over_the_limit_is_too_large_without_reading() -> None:
    # Given a declared size above max_archive_bytes
    raw = targz(good_members())
    stream = Stream(raw)
    # When verified, Then TOO_LARGE and nothing is read
    error = rejection(raw, manifest(FILES), limits=Limits(max_archive_bytes=len(raw) - 1), stream=stream)
    assert error.sub_code == C.TOO_LARGE
    assert stream.taken == 0


def test_verification_over_the_time_limit_is_too_large() -> None:
    # Given a clock that jumps 10 s per reading and a 5 s limit
    ticks = iter(range(0, 10_000, 10))
    raw = targz(good_members())
    # When verified
    error = rejection(raw, manifest(FILES), limits=Limits(verify_time_limit_seconds=5), clock=lambda: next(ticks))
    # Then TOO_LARGE "verification time limit"
    assert error.sub_code == C.TOO_LARGE
    assert "verification time limit" in error.detail


def test_oversized_pax_header_is_refused_from_its_header() -> None:
    # Given a pax header claiming 2 MiB of records
    info = tarfile.TarInfo("PaxHeader")
    info.type, info.size = tarfile.XHDTYPE, 2 * MiB
    raw = gz(info.tobuf(format=tarfile.USTAR_FORMAT) + bytes(1024))
    # When verified, Then TOO_LARGE
    assert rejection(raw, manifest({})).sub_code == C.TOO_LARGE


# --- Declared size and digest, and the error order --------------------------------------------------------------------


def test_archive_shorter_than_declared_is_size_mismatch() -> None:
    # Given an archive declared 10 bytes longer than it is
    raw = targz(good_members())
    # When verified, Then SIZE_MISMATCH with both sizes
    error = rejection(raw, manifest(FILES), declared_size=len(raw) + 10)
    assert error.sub_code == C.SIZE_MISMATCH
    assert str(len(raw) + 10) in error.detail


def test_archive_digest_differing_from_declared_is_digest_mismatch() -> None:
    # Given a declared sha256 of other bytes, When verified, Then DIGEST_MISMATCH
    raw = targz(good_members())
    error = rejection(raw, manifest(FILES), declared_sha256=hashlib.sha256(b"other").hexdigest())
    assert error.sub_code == C.DIGEST_MISMATCH
    assert "archive sha256" in error.detail


def test_member_errors_found_while_streaming_come_before_the_archive_digest() -> None:
    # Given an archive with an unexpected file AND a wrong declared digest
    raw = targz([M("extra", b"x")])
    # When verified, Then the member error (found first, in stream order) is reported
    error = rejection(raw, manifest({}), declared_sha256=hashlib.sha256(b"other").hexdigest())
    assert error.sub_code == C.UNEXPECTED_FILE


def test_archive_size_mismatch_comes_before_truncation_and_missing_files() -> None:
    # Given the first half of an archive, declared at its full size
    whole = targz(good_members())
    half = whole[: len(whole) // 2]
    # When verified, Then SIZE_MISMATCH (the root cause), not CORRUPT_ARCHIVE or MISSING_FILE
    error = rejection(
        half, manifest(FILES), declared_size=len(whole), declared_sha256=hashlib.sha256(whole).hexdigest()
    )
    assert error.sub_code == C.SIZE_MISMATCH


def test_bad_declared_digest_format_is_invalid_request() -> None:
    # Given a declared digest that is not 64 lowercase hex digits, When verified, Then InvalidRequest
    raw = targz(good_members())
    with pytest.raises(InvalidRequest):
        verify(raw, manifest(FILES), declared_sha256=hashlib.sha256(raw).hexdigest().upper())


# --- Corrupt archives -------------------------------------------------------------------------------------------------


def _fix_checksum(block: bytearray, *, signed: bool = False) -> None:
    """Rewrite the checksum of the header at the start of ``block`` after editing it."""
    block[148:156] = b" " * 8
    total = sum(b - 256 if signed and b >= 128 else b for b in block[:512])
    block[148:156] = b"%06o\0 " % total


def _content_end(plain_tar: bytes) -> int:
    """Offset just past the last non-zero block: where the end-of-archive blocks begin."""
    blocks = [i for i in range(0, len(plain_tar), 512) if plain_tar[i : i + 512].strip(b"\0")]
    return blocks[-1] + 512


def corrupt_cases() -> dict[str, tuple[bytes, dict[str, bytes]]]:
    """name -> (archive bytes, the files its manifest lists)."""
    good = targz(good_members())
    plain_tar = tar(good_members())
    bad_checksum = bytearray(plain_tar)
    bad_checksum[0] ^= 0x01
    bad_size = bytearray(tar([M("a", b"a")], tarfile.USTAR_FORMAT))
    bad_size[124:136] = b"0000000009x\0"
    _fix_checksum(bad_size)
    long_name = "a" * 120
    bad_pax = tar([M(long_name, b"a")], tarfile.PAX_FORMAT).replace(b"path=", b"path ", 1)
    wide_name = "é" * 80
    return {
        "empty": (b"", FILES),
        "not gzip": (plain_tar, FILES),
        "zip magic": (b"PK\x03\x04" + bytes(100), FILES),
        "truncated gzip": (good[: len(good) - 5], FILES),
        "gzip header only": (good[:10], FILES),
        "trailing garbage": (good + b"junk", FILES),
        "second gzip member": (good + gz(tar([M("smuggled", b"x")])), FILES),
        "bad header checksum": (gz(bytes(bad_checksum)), FILES),
        "bad octal size": (gz(bytes(bad_size)), {"a": b"a"}),
        "malformed pax record": (gz(bad_pax), {long_name: b"a"}),
        "no end-of-archive block": (gz(plain_tar[: _content_end(plain_tar)]), FILES),
        "tar ends inside a member": (gz(tar([M("a", b"a" * 2000)])[:1024]), {"a": b"a" * 2000}),
        "data after the end-of-archive block": (gz(plain_tar + b"hidden" + bytes(506)), FILES),
        "extended header then end": (gz(tar([M(wide_name, b"a")])[:1024] + bytes(1024)), {wide_name: b"a"}),
    }


@pytest.mark.parametrize("name", list(corrupt_cases()))
def test_corrupt_archives_are_corrupt_archive(name: str) -> None:
    # Given a broken gzip or tar stream
    raw, files = corrupt_cases()[name]
    # When verified, Then CORRUPT_ARCHIVE
    error = rejection(raw, manifest(files))
    assert error.sub_code == C.CORRUPT_ARCHIVE, error.detail


def test_signed_checksum_of_old_tars_is_accepted() -> None:
    # Given a header whose checksum was computed over signed chars (old tars; name holds bytes >= 0x80)
    block = bytearray(tar([M("é", b"a")], tarfile.GNU_FORMAT))
    _fix_checksum(block, signed=True)
    # When verified, Then it is read like any other header
    assert verify(gz(bytes(block)), manifest({"é": b"a"})).file_count == 1


# --- Properties -------------------------------------------------------------------------------------------------------

_names = st.text(alphabet="abcXYZ019_-.", min_size=1, max_size=8).filter(lambda s: s not in (".", ".."))
_packages = st.dictionaries(
    st.lists(_names, min_size=1, max_size=3).map("/".join),
    st.binary(max_size=3000),
    min_size=1,
    max_size=6,
)


def _safe(files: dict[str, bytes]) -> dict[str, bytes]:
    """Drop paths that collide under case folding or as file-and-directory: not what these properties test."""
    kept: dict[str, bytes] = {}
    for path, data in files.items():
        keys = {p.casefold() for p in kept}
        prefixes = {k.rsplit("/", i)[0] for k in keys for i in range(1, k.count("/") + 1)}
        if path.casefold() not in keys | prefixes and not any(path.casefold().startswith(k + "/") for k in keys):
            kept[path] = data
    return kept


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_packages, st.integers(1, 4096), st.sampled_from([tarfile.PAX_FORMAT, tarfile.GNU_FORMAT]))
def test_property_any_valid_package_verifies_whatever_the_read_size(
    files: dict[str, bytes], piece: int, fmt: int
) -> None:
    # Given any package of safe, distinct paths, in either tar format, read in pieces of any size
    files = _safe(files)
    raw = targz([M(path, data) for path, data in files.items()], fmt)
    # When verified
    result = verify(raw, manifest(files), stream=Stream(raw, max_piece=piece))
    # Then every file was checked
    assert result.file_count == len(files)
    assert result.unpacked_size == sum(len(d) for d in files.values())


_GOOD = targz(good_members())


@settings(max_examples=200, deadline=None)
@given(st.integers(0, len(_GOOD) - 1), st.integers(1, 255))
def test_property_a_flipped_byte_is_refused_or_harmless_never_a_crash(position: int, flip: int) -> None:
    # Given the good archive with one byte changed (declared digest = the changed bytes, as an honest client would)
    raw = bytearray(_GOOD)
    raw[position] ^= flip
    # When verified
    try:
        result = verify(bytes(raw), manifest(FILES))
    except ArchiveRejected:
        return  # Then either a domain refusal...
    # ...or the byte changed nothing that is unpacked (gzip header mtime/OS, an unused Huffman code length),
    # and every file still matched
    assert result.file_count == len(FILES)
    assert zlib.decompressobj(31).decompress(bytes(raw)) == zlib.decompressobj(31).decompress(_GOOD)


@settings(max_examples=100, deadline=None)
@given(st.integers(0, len(_GOOD) - 1))
def test_property_every_strict_prefix_is_corrupt(cut: int) -> None:
    # Given the archive cut short anywhere (and declared as what was stored)
    # When verified, Then CORRUPT_ARCHIVE
    assert rejection(_GOOD[:cut], manifest(FILES)).sub_code == C.CORRUPT_ARCHIVE
