"""Tar streams built field by field, for the differential tests: every header byte is the test's choice.

``tarfile`` (used by tests/unit/test_archive.py to build archives) only writes what it considers well formed; the
archives extractors disagree on are exactly the ones it will not write. Here a header is a dict of raw fields, so a
test can put bytes in the ustar prefix of a GNU header, follow a GNU long name with a pax path, encode a size in
base-256, or sum the checksum as signed chars.
"""

from __future__ import annotations

import gzip
import itertools
import zlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

BLOCK = 512

POSIX = b"ustar\x0000"
GNU = b"ustar  \x00"
V7 = b"\x00" * 8


@dataclass
class Header:
    """One 512-byte tar header; numbers are written as octal unless ``size_field`` gives the raw bytes."""

    name: bytes
    size: int = 0
    typeflag: bytes = b"0"
    mode: int = 0o644
    magic: bytes = POSIX
    prefix: bytes = b""
    linkname: bytes = b""
    size_field: bytes | None = None
    signed_checksum: bool = False
    uname: bytes = b""
    tail: bytes = b""  # bytes 500..512 (star's atime/ctime and "tar\0" live there)

    def block(self) -> bytes:
        raw = bytearray(BLOCK)
        raw[0:100] = self.name[:100].ljust(100, b"\0")
        raw[100:108] = b"%07o\x00" % self.mode
        raw[108:116] = b"0000000\x00"
        raw[116:124] = b"0000000\x00"
        raw[124:136] = self.size_field if self.size_field is not None else b"%011o\x00" % self.size
        raw[136:148] = b"14500000000\x00"
        raw[156:157] = self.typeflag
        raw[157:257] = self.linkname[:100].ljust(100, b"\0")
        raw[257:265] = self.magic
        if self.magic != V7:
            raw[265:297] = self.uname[:32].ljust(32, b"\0")
        raw[345:500] = self.prefix[:155].ljust(155, b"\0")
        raw[500:512] = self.tail[:12].ljust(12, b"\0")
        raw[148:156] = b" " * 8
        signed = self.signed_checksum
        total = sum(byte - 256 if signed and byte & 0x80 else byte for byte in raw)
        raw[148:156] = b"%06o\x00 " % (total & 0o777777)
        return bytes(raw)


def padded(data: bytes) -> bytes:
    return data + b"\0" * (-len(data) % BLOCK)


def pax_records(records: Iterable[tuple[bytes, bytes]]) -> bytes:
    """``"<length> <key>=<value>\\n"`` records, each length counting its whole record."""
    out = bytearray()
    for key, value in records:
        body = b" " + key + b"=" + value + b"\n"
        length = len(body) + 1
        while len(str(length)) + len(body) != length:
            length += 1
        out += str(length).encode() + body
    return bytes(out)


@dataclass
class Member:
    """A member and the metadata headers written before it (GNU ``L``/``K``, pax ``x``/``g``), in order."""

    header: Header
    data: bytes = b""
    before: Sequence[tuple[bytes, bytes]] = field(default_factory=list)  # (typeflag, payload)

    def blocks(self) -> bytes:
        out = bytearray()
        for typeflag, payload in self.before:
            name = b"././@LongLink" if typeflag in (b"L", b"K") else b"PaxHeaders/x"
            magic = GNU if typeflag in (b"L", b"K") else POSIX
            out += Header(name, len(payload), typeflag, magic=magic).block() + padded(payload)
        out += self.header.block() + padded(self.data)
        return bytes(out)


def archive(members: Sequence[Member], end: bytes = b"\0" * (2 * BLOCK)) -> bytes:
    return b"".join(member.blocks() for member in members) + end


def file(name: str | bytes, data: bytes, **header: object) -> Member:
    raw = name.encode() if isinstance(name, str) else name
    return Member(Header(raw, len(data), **header), data)  # type: ignore[arg-type]


def gzipped(
    tar: bytes,
    *,
    members: int = 1,
    fname: bytes | None = None,
    comment: bytes | None = None,
    extra: bytes | None = None,
    trailer: bytes = b"",
) -> bytes:
    """``tar`` as gzip: in ``members`` concatenated gzip members, with optional header fields and bytes after."""
    cut = [len(tar) * i // members for i in range(members + 1)]
    out = bytearray()
    for start, stop in itertools.pairwise(cut):
        out += _member(tar[start:stop], fname=fname, comment=comment, extra=extra)
    return bytes(out) + trailer


def _member(data: bytes, *, fname: bytes | None, comment: bytes | None, extra: bytes | None) -> bytes:
    if fname is None and comment is None and extra is None:
        return gzip.compress(data, mtime=0)
    flags = (
        (0x04 if extra is not None else 0) | (0x08 if fname is not None else 0) | (0x10 if comment is not None else 0)
    )
    head = bytearray(b"\x1f\x8b\x08" + bytes([flags]) + b"\0\0\0\0\x00\x03")
    if extra is not None:
        head += len(extra).to_bytes(2, "little") + extra
    if fname is not None:
        head += fname + b"\0"
    if comment is not None:
        head += comment + b"\0"
    deflate = zlib.compressobj(6, zlib.DEFLATED, -15)
    body = deflate.compress(data) + deflate.flush()
    return bytes(head) + body + zlib.crc32(data).to_bytes(4, "little") + (len(data) & 0xFFFFFFFF).to_bytes(4, "little")
