"""The file pack's index (issue 22, item 1) and the greedy ``<file_path>`` route parameter, table-driven."""

from __future__ import annotations

import pytest

from packyard.api.resolver import Resolver
from packyard.publishing.file_pack import MAGIC, TRAILER, PackDamaged, PackIndex, decode_index, encode_index


def test_an_index_reads_back_as_written_from_the_end_of_a_pack() -> None:
    index = PackIndex(offsets={"SKILL.md": 0, "src/ünïcode/deep/x.py": 8}, objects=frozenset({"ab" * 32}))
    pack = b"# skill\nprint()\n" + encode_index(index)

    assert decode_index(pack) == index
    assert decode_index(pack[-(len(encode_index(index))) :]) == index


@pytest.mark.parametrize(
    ("tail", "why"),
    [
        (b"short", "shorter than its trailer"),
        (b"x" * 40 + TRAILER.pack(b"NOPE", 4), "not a file pack's"),
        (b"{}" + TRAILER.pack(MAGIC, 4000), "longer than the bytes read"),
        (b"not json" + TRAILER.pack(MAGIC, 8), "does not parse"),
        (b'{"files":{},"objects":[],"v":2}' + TRAILER.pack(MAGIC, 31), "unknown file pack index version"),
        (b'{"files":[],"objects":[],"v":1}' + TRAILER.pack(MAGIC, 31), "does not parse"),
    ],
)
def test_an_end_that_is_not_a_packs_is_refused(tail: bytes, why: str) -> None:
    with pytest.raises(PackDamaged, match=why):
        decode_index(tail)


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("/v1/packages/p/versions/1.0.0/files/SKILL.md", "SKILL.md"),
        ("/v1/packages/p/versions/1.0.0/files/src/a/b/c.py", "src/a/b/c.py"),
        ("/v1/packages/p/versions/1.0.0/files/", None),
        ("/v1/packages/p/versions/1.0.0/files", None),
    ],
)
def test_a_file_path_parameter_takes_the_rest_of_the_path(path: str, expected: str | None) -> None:
    pattern = Resolver._compile_regex("/v1/packages/<package>/versions/<version>/files/<file_path>")
    found = pattern.match(path)
    assert (found["file_path"] if found else None) == expected


def test_other_parameters_stay_one_segment() -> None:
    pattern = Resolver._compile_regex("/v1/packages/<package>/versions/<version>")
    assert pattern.match("/v1/packages/p/versions/1.0.0") is not None
    assert pattern.match("/v1/packages/p/q/versions/1.0.0") is None


class _BrokenStream:
    """An archive's body whose connection breaks after the first read (what botocore raises then)."""

    def __init__(self, first: bytes) -> None:
        self._first: bytes | None = first

    def read(self, size: int = -1) -> bytes:
        from botocore.exceptions import ReadTimeoutError

        if self._first is not None:
            chunk, self._first = self._first[:size] if size > 0 else self._first, None
            return chunk
        raise ReadTimeoutError(endpoint_url="https://s3.example")

    def close(self) -> None:
        pass


def test_a_broken_archive_read_while_packing_is_transient_never_a_rejection(monkeypatch: pytest.MonkeyPatch) -> None:
    from packyard.config import Limits
    from packyard.errors import TransientStoreError
    from packyard.publishing import file_pack
    from packyard.publishing.manifest import parse_manifest
    from packyard.store import blobs, file_packs
    from packyard_cli.build import build_from_files

    built = build_from_files({"SKILL.md": b"x" * 5000})
    monkeypatch.setattr(file_packs, "exists", lambda key: False)
    monkeypatch.setattr(
        blobs, "open_stream", lambda key: blobs.OpenedObject(stream=_BrokenStream(built.archive[:20]), etag="", size=0)
    )

    with pytest.raises(TransientStoreError):
        file_pack.write_file_pack(  # an archive that gets a pack (above the size below which none is written)
            "t-x",
            built.archive_sha256,
            parse_manifest(built.manifest, Limits()),
            archive_size=file_pack.PACKED_ARCHIVE_MIN_BYTES + 1,
            replace=False,
        )
