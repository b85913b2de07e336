"""One reading per published archive: what the verifier accepts, GNU tar, bsdtar and ``tarfile`` (its default
extraction and ``filter="data"``) extract identically, member for member, and nothing else.

The property, for any archive and any manifest: the verifier accepts ⇒ every reader extracts exactly the manifest's
files with exactly their bytes, no link, no special file, no directory no manifest file is under, nothing outside the
destination, and no complaint. Manifests to try come from what the archive meant to hold *and from each reader's own
reading*, so an archive two readers read differently is caught whichever reading its manifest declares.

Inputs: hand-made archives of every header feature of the canonical-tar policy (docs/decisions.md), the hostile corpus,
archives written by real tools, and a hypothesis generator of tar streams built field by field
(``tests/support/tar_forge.py``). ``make test`` runs the generator deterministically; ``make fuzz`` runs it longer
(``PACKYARD_TAR_EXAMPLES``, ``PACKYARD_TAR_SEED``).
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import subprocess
import tarfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st

from packyard.config import Limits
from packyard.errors import ArchiveRejectCode, ArchiveRejected, InvalidRequest
from packyard.publishing.archive_verifier import verify_archive
from packyard.publishing.manifest import Manifest, parse_manifest
from tests.support import tar_forge as forge
from tests.support.tar_readers import READERS, Reading, agree, compare, missing_readers, read_all

C = ArchiveRejectCode
LIMITS = Limits()
CORPUS = Path(__file__).resolve().parent.parent / "data" / "hostile"
SKILL = b"# skill\n\nDoes one thing.\n"
EVIL = b"#!/bin/sh\nrm -rf ~\n"


@pytest.fixture(scope="module", autouse=True)
def _every_reader_is_installed() -> None:
    # Never pass silently without a second reader: a machine without one fails here, saying what to install.
    missing = missing_readers()
    if missing:
        pytest.fail("the differential tests need every reader; missing: " + "; ".join(missing))


def _manifest_of(files: dict[str, tuple[int, str]]) -> Manifest | None:
    try:
        return parse_manifest(
            {"files": [{"path": path, "size": size, "sha256": sha} for path, (size, sha) in sorted(files.items())]},
            LIMITS,
        )
    except (ArchiveRejected, InvalidRequest):
        return None


def _files(contents: dict[str, bytes]) -> dict[str, tuple[int, str]]:
    return {path: (len(data), hashlib.sha256(data).hexdigest()) for path, data in contents.items()}


def verdict(raw: bytes, manifest: Manifest) -> ArchiveRejected | None:
    """None when the verifier accepts ``raw`` against ``manifest``, else its refusal."""
    try:
        verify_archive(
            io.BytesIO(raw),
            manifest,
            declared_size=len(raw),
            declared_sha256=hashlib.sha256(raw).hexdigest(),
            limits=LIMITS,
        )
    except ArchiveRejected as refusal:
        return refusal
    return None


def check_one_reading(raw: bytes, meant: dict[str, tuple[int, str]] | None = None) -> tuple[list[Reading], bool]:
    """Assert the property for ``raw`` against every candidate manifest; return the readings and whether any
    candidate was accepted."""
    readings = read_all(raw)
    candidates = [files for files in [meant, *(r.files() for r in readings)] if files is not None]
    accepted = False
    for files in {json.dumps(c, sort_keys=True): c for c in candidates}.values():
        manifest = _manifest_of(files)
        if manifest is None or verdict(raw, manifest) is not None:
            continue
        accepted = True
        comparison = compare(readings, files)
        assert comparison, (
            f"the verifier accepted an archive the readers do not all extract as its manifest {sorted(files)}: "
            + "; ".join(comparison.problems)
        )
    return readings, accepted


def refusal_of(raw: bytes, files: dict[str, tuple[int, str]]) -> ArchiveRejected:
    manifest = _manifest_of(files)
    assert manifest is not None
    refusal = verdict(raw, manifest)
    assert refusal is not None, "accepted"
    return refusal


# --- The two archives of the issue: three readers, two answers --------------------------------------------------------


def test_gnu_magic_with_bytes_in_the_ustar_prefix_is_refused_as_ambiguous() -> None:
    # Given a GNU-magic header for SKILL.md whose ustar prefix field holds ../../tmp/pwn (tarfile honours the
    # prefix whatever the magic, GNU tar and bsdtar ignore it)
    raw = forge.gzipped(forge.archive([forge.file("SKILL.md", SKILL, magic=forge.GNU, prefix=b"../../tmp/pwn")]))
    readings = read_all(raw)
    # Then the readers really disagree: tarfile writes outside the destination
    assert not agree(readings)
    assert next(r for r in readings if r.reader == "tarfile").outside
    # And the verifier refuses it, naming the member, whichever reading the manifest declares
    refusal = refusal_of(raw, _files({"SKILL.md": SKILL}))
    assert refusal.sub_code == C.AMBIGUOUS_HEADER, refusal.detail
    assert "SKILL.md" in refusal.detail
    check_one_reading(raw, _files({"SKILL.md": SKILL}))


def test_v7_header_with_bytes_in_the_prefix_is_refused_as_ambiguous() -> None:
    raw = forge.gzipped(forge.archive([forge.file("SKILL.md", SKILL, magic=forge.V7, prefix=b"../../tmp/pwn")]))
    assert not agree(read_all(raw))
    assert refusal_of(raw, _files({"SKILL.md": SKILL})).sub_code == C.AMBIGUOUS_HEADER
    check_one_reading(raw, _files({"SKILL.md": SKILL}))


def test_gnu_long_name_followed_by_a_pax_path_is_refused_as_ambiguous() -> None:
    # Given a GNU long name "evil.sh" then a pax header path=SKILL.md before one member (GNU tar: SKILL.md,
    # tarfile even with filter="data" and bsdtar: evil.sh)
    member = forge.file("SKILL.md", SKILL)
    member.before = [(b"L", b"evil.sh\0"), (b"x", forge.pax_records([(b"path", b"SKILL.md")]))]
    raw = forge.gzipped(forge.archive([member]))
    readings = read_all(raw)
    assert {tuple(r.files()) for r in readings} == {("SKILL.md",), ("evil.sh",)}
    for meant in ({"SKILL.md": SKILL}, {"evil.sh": SKILL}):
        refusal = refusal_of(raw, _files(meant))
        assert refusal.sub_code == C.AMBIGUOUS_HEADER, refusal.detail
    check_one_reading(raw)


# --- The canonical-tar policy, feature by feature (docs/decisions.md) -------------------------------------------------


def _refused_as(raw: bytes, files: dict[str, bytes], code: ArchiveRejectCode) -> None:
    refusal = refusal_of(raw, _files(files))
    assert refusal.sub_code == code, refusal.detail
    check_one_reading(raw, _files(files))


def _accepted(raw: bytes, files: dict[str, bytes]) -> None:
    manifest = _manifest_of(_files(files))
    assert manifest is not None
    refusal = verdict(raw, manifest)
    assert refusal is None, refusal.detail
    readings, accepted = check_one_reading(raw, _files(files))
    assert accepted and agree(readings)


def _with(before: list[tuple[bytes, bytes]], member: forge.Member) -> forge.Member:
    member.before = before
    return member


def _tgz(*members: forge.Member, end: bytes = b"\0" * 1024) -> bytes:
    return forge.gzipped(forge.archive(list(members), end=end))


def test_posix_ustar_prefix_is_honoured_by_every_reader() -> None:
    _accepted(_tgz(forge.file("SKILL.md", SKILL, prefix=b"docs")), {"docs/SKILL.md": SKILL})


def test_gnu_magic_and_v7_headers_without_prefix_bytes_are_accepted() -> None:
    _accepted(_tgz(forge.file("SKILL.md", SKILL, magic=forge.GNU)), {"SKILL.md": SKILL})
    _accepted(_tgz(forge.file("SKILL.md", SKILL, magic=forge.V7)), {"SKILL.md": SKILL})


def test_unknown_magic_is_ambiguous() -> None:
    _refused_as(_tgz(forge.file("SKILL.md", SKILL, magic=b"ustar\x00  ")), {"SKILL.md": SKILL}, C.AMBIGUOUS_HEADER)


def test_star_style_tail_after_a_posix_prefix_is_ambiguous() -> None:
    # GNU tar reads a 131-byte prefix when bytes 508..512 are "tar\0" (star); tarfile reads 155
    member = forge.file("SKILL.md", SKILL, prefix=b"p" * 140, tail=b"\0" * 8 + b"tar\0")
    _refused_as(_tgz(member), {"p" * 140 + "/SKILL.md": SKILL}, C.AMBIGUOUS_HEADER)


def test_gnu_long_name_alone_is_accepted() -> None:
    long = "d" * 90 + "/" + "f" * 90 + ".md"
    _accepted(_tgz(_with([(b"L", long.encode() + b"\0")], forge.file("short", SKILL, magic=forge.GNU))), {long: SKILL})


def test_pax_path_alone_is_accepted() -> None:
    long = "d" * 90 + "/" + "f" * 90 + ".md"
    member = _with([(b"x", forge.pax_records([(b"path", long.encode())]))], forge.file("short", SKILL))
    _accepted(_tgz(member), {long: SKILL})


@pytest.mark.parametrize(
    "before",
    [
        [(b"L", b"a.md\0"), (b"L", b"b.md\0")],
        [(b"x", forge.pax_records([(b"path", b"a.md")])), (b"x", forge.pax_records([(b"path", b"b.md")]))],
        [(b"x", forge.pax_records([(b"path", b"a.md")])), (b"L", b"b.md\0")],
        [(b"L", b"b.md\0"), (b"g", forge.pax_records([(b"comment", b"x")]))],
    ],
    ids=["two-L", "two-x", "x-then-L", "L-then-g"],
)
def test_repeated_or_mixed_extended_headers_before_one_member_are_ambiguous(before: list[tuple[bytes, bytes]]) -> None:
    raw = _tgz(_with(before, forge.file("c.md", SKILL)))
    for meant in ("a.md", "b.md", "c.md"):
        assert refusal_of(raw, _files({meant: SKILL})).sub_code == C.AMBIGUOUS_HEADER
    check_one_reading(raw)


def test_gnu_long_link_is_ambiguous() -> None:
    raw = _tgz(_with([(b"K", b"target\0")], forge.file("SKILL.md", SKILL)))
    _refused_as(raw, {"SKILL.md": SKILL}, C.AMBIGUOUS_HEADER)


@pytest.mark.parametrize(
    "records",
    [
        [(b"path", b"SKILL.md"), (b"path", b"evil.sh")],
        [(b"linkpath", b"evil.sh")],
        [(b"hdrcharset", b"ISO-8859-1")],
        [(b"SCHILY.xattr.security.capability", b"\x01\x00\x00\x02")],
        [(b"LIBARCHIVE.symlinktype", b"dir")],
        [(b"vendor.unknown", b"1")],
        [(b"path", b"SKILL.md\0evil.sh")],
        [(b"path", b"")],
        [(b"mtime", b"soon")],
        [(b"uid", b"-1x")],
    ],
    ids=["duplicate", "linkpath", "hdrcharset", "xattr", "libarchive", "unknown", "nul", "empty", "mtime", "uid"],
)
def test_pax_records_some_reader_reads_differently_are_ambiguous(records: list[tuple[bytes, bytes]]) -> None:
    raw = _tgz(_with([(b"x", forge.pax_records(records))], forge.file("SKILL.md", SKILL)))
    _refused_as(raw, {"SKILL.md": SKILL}, C.AMBIGUOUS_HEADER)


def test_pax_size_that_contradicts_the_header_is_ambiguous() -> None:
    member = _with([(b"x", forge.pax_records([(b"size", b"3")]))], forge.file("SKILL.md", SKILL))
    _refused_as(_tgz(member), {"SKILL.md": SKILL[:3]}, C.AMBIGUOUS_HEADER)


def test_pax_records_that_do_not_change_what_is_extracted_are_accepted() -> None:
    records = [
        (b"mtime", b"1700000000.5"),
        (b"atime", b"1700000000"),
        (b"uid", b"1000"),
        (b"uname", b"dev"),
        (b"size", str(len(SKILL)).encode()),
        (b"comment", b"built by hand"),
    ]
    _accepted(_tgz(_with([(b"x", forge.pax_records(records))], forge.file("SKILL.md", SKILL))), {"SKILL.md": SKILL})


def test_git_archive_global_header_is_accepted() -> None:
    comment = forge.pax_records([(b"comment", b"4b825dc642cb6eb9a060e54bf8d69288fbee4904")])
    global_header = forge.Member(forge.Header(b"pax_global_header", len(comment), b"g"), comment)
    _accepted(_tgz(global_header, forge.file("SKILL.md", SKILL)), {"SKILL.md": SKILL})


@pytest.mark.parametrize("key", [b"path", b"size", b"linkpath"])
def test_global_header_that_names_or_sizes_members_is_ambiguous(key: bytes) -> None:
    records = forge.pax_records([(key, b"SKILL.md" if key != b"size" else b"3")])
    global_header = forge.Member(forge.Header(b"pax_global_header", len(records), b"g"), records)
    _refused_as(_tgz(global_header, forge.file("SKILL.md", SKILL)), {"SKILL.md": SKILL}, C.AMBIGUOUS_HEADER)


def test_base_256_size_is_ambiguous() -> None:
    field = b"\x80" + len(SKILL).to_bytes(11, "big")
    _refused_as(_tgz(forge.file("SKILL.md", SKILL, size_field=field)), {"SKILL.md": SKILL}, C.AMBIGUOUS_HEADER)


def test_signed_checksum_is_accepted_like_every_reader_does() -> None:
    name = "caf\u00e9.md"
    _accepted(_tgz(forge.file(name, SKILL, signed_checksum=True)), {name: SKILL})


def test_regular_file_named_with_a_trailing_slash_is_refused() -> None:
    refusal = refusal_of(_tgz(forge.file("SKILL.md/", SKILL)), _files({"SKILL.md": SKILL}))
    assert refusal.sub_code in (C.AMBIGUOUS_HEADER, C.UNSAFE_PATH)
    check_one_reading(_tgz(forge.file("SKILL.md/", SKILL)))


def test_directory_no_manifest_file_is_under_is_unexpected() -> None:
    raw = _tgz(forge.Member(forge.Header(b"empty/", 0, b"5", mode=0o755)), forge.file("SKILL.md", SKILL))
    _refused_as(raw, {"SKILL.md": SKILL}, C.UNEXPECTED_FILE)


def test_directories_above_manifest_files_are_accepted() -> None:
    raw = _tgz(forge.Member(forge.Header(b"docs/", 0, b"5", mode=0o755)), forge.file("docs/SKILL.md", SKILL))
    _accepted(raw, {"docs/SKILL.md": SKILL})


def test_contiguous_file_type_is_ambiguous() -> None:
    # GNU tar extracts it as a regular file, with a warning on stderr
    _refused_as(_tgz(forge.file("SKILL.md", SKILL, typeflag=b"7")), {"SKILL.md": SKILL}, C.AMBIGUOUS_HEADER)


@pytest.mark.parametrize(
    "end",
    [b"\0" * 512, b"\0" * 1024 + b"junk" + b"\0" * 508, b"\0" * 512 + forge.file("evil.sh", EVIL).blocks()],
    ids=["one-zero-block-then-eof", "garbage-after-end", "member-after-a-lone-zero-block"],
)
def test_what_follows_the_end_of_archive_is_refused_unless_zeros(end: bytes) -> None:
    raw = _tgz(forge.file("SKILL.md", SKILL), end=end)
    refusal = refusal_of(raw, _files({"SKILL.md": SKILL}))
    assert refusal.sub_code == C.CORRUPT_ARCHIVE, refusal.detail
    check_one_reading(raw, _files({"SKILL.md": SKILL}))


def test_missing_end_of_archive_is_refused() -> None:
    raw = _tgz(forge.file("SKILL.md", SKILL), end=b"")
    assert refusal_of(raw, _files({"SKILL.md": SKILL})).sub_code == C.CORRUPT_ARCHIVE
    check_one_reading(raw, _files({"SKILL.md": SKILL}))


def test_concatenated_gzip_members_are_refused() -> None:
    raw = forge.gzipped(forge.archive([forge.file("SKILL.md", SKILL)]), members=2)
    assert refusal_of(raw, _files({"SKILL.md": SKILL})).sub_code == C.CORRUPT_ARCHIVE
    check_one_reading(raw, _files({"SKILL.md": SKILL}))


def test_gzip_name_comment_and_extra_fields_are_accepted() -> None:
    raw = forge.gzipped(
        forge.archive([forge.file("SKILL.md", SKILL)]), fname=b"x.tar", comment=b"c", extra=b"AB\x02\x00hi"
    )
    _accepted(raw, {"SKILL.md": SKILL})


# --- What real tools write is still accepted --------------------------------------------------------------------------


def _tree(root: Path) -> dict[str, bytes]:
    files = {
        "SKILL.md": SKILL,
        "scripts/run.sh": b"#!/bin/sh\necho hi\n",
        "d" * 80 + "/" + "n" * 120 + ".txt": b"long path\n",
        "caf\u00e9/\u00fc.md": b"utf-8\n",
    }
    for path, data in files.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_bytes(data)
    return files


@pytest.mark.parametrize("tool", ["gnu-posix", "gnu-gnu", "gnu-ustar-dot", "bsdtar", "tarfile-pax", "tarfile-gnu"])
def test_archives_written_by_real_tools_have_one_reading(tool: str, tmp_path: Path) -> None:
    src = tmp_path / "src"
    files = _tree(src)
    out = tmp_path / "out.tar.gz"
    names = sorted(files)
    commands = {
        "gnu-posix": ["tar", "--format=posix", "-czf", str(out), "-C", str(src), *names],
        "gnu-gnu": ["tar", "--format=gnu", "-czf", str(out), "-C", str(src), *names],
        "gnu-ustar-dot": ["tar", "-czf", str(out), "-C", str(src), "."],
        "bsdtar": ["bsdtar", "-czf", str(out), "-C", str(src), *names],
    }
    if tool in commands:
        subprocess.run(commands[tool], check=True, env={**os.environ, "LC_ALL": "C.UTF-8"})
    else:
        fmt = tarfile.PAX_FORMAT if tool == "tarfile-pax" else tarfile.GNU_FORMAT
        with tarfile.open(out, "w:gz", format=fmt) as tar:
            for name in names:
                tar.add(src / name, arcname=name)
    _accepted(out.read_bytes(), files)


# --- The hostile corpus -----------------------------------------------------------------------------------------------


CASES: list[dict[str, Any]] = json.loads((CORPUS / "cases.json").read_text(encoding="utf-8"))


@pytest.mark.parametrize("case", [c for c in CASES if c["stage"] == "verify"], ids=lambda c: c["name"])
def test_hostile_corpus_has_one_reading_where_accepted(case: dict[str, Any]) -> None:
    raw = (CORPUS / case["archive"]).read_bytes()
    manifest = json.loads((CORPUS / case["manifest"]).read_text(encoding="utf-8"))
    meant = {f["path"]: (f["size"], f["sha256"]) for f in manifest.get("files", [])}
    check_one_reading(raw, meant)


# --- Tar streams built field by field ---------------------------------------------------------------------------------

_NAMES = [
    b"SKILL.md",
    b"docs/a.md",
    b"evil.sh",
    b"docs/",
    b"../x.md",
    b"./SKILL.md",
    b"/abs.md",
    b"a\0b.md",
    b"\xff.md",
    b"d" * 100,
    b"SKILL.md/",
]
_PREFIXES = [b"", b"", b"docs", b"../../tmp/pwn", b"p" * 155]
_MAGICS = [forge.POSIX, forge.POSIX, forge.GNU, forge.V7, b"ustar\x00  ", b"\x00" * 7 + b"x"]
_TYPES = [b"0", b"0", b"\0", b"5", b"7", b"1", b"2", b"3", b"Z"]
_PAX_KEYS = [
    b"path",
    b"size",
    b"linkpath",
    b"mtime",
    b"uid",
    b"comment",
    b"hdrcharset",
    b"SCHILY.xattr.user.a",
    b"GNU.sparse.size",
    b"vendor.key",
]
_PAX_VALUES = [b"SKILL.md", b"evil.sh", b"docs/a.md", b"", b"3", b"26", b"1700000000.5", b"x\0y", b"../up.md"]


_MUTATIONS = ["magic", "prefix", "typeflag", "size", "checksum", "tail", "name", "metadata", "metadata", "mode"]


@st.composite
def members(draw: st.DrawFn) -> forge.Member:
    """A canonical member (POSIX ustar, a safe name, octal fields) with zero to three of its fields mutated, so
    accepted archives are common and each deviation is tried on its own and in pairs."""
    data = draw(st.sampled_from([SKILL, EVIL, b"", b"x" * 600]))
    header = forge.Header(draw(st.sampled_from([b"SKILL.md", b"docs/a.md", b"evil.sh"])), len(data))
    before: list[tuple[bytes, bytes]] = []
    for mutation in draw(st.lists(st.sampled_from(_MUTATIONS), max_size=3)):
        if mutation == "magic":
            header.magic = draw(st.sampled_from(_MAGICS))
        elif mutation == "prefix":
            header.prefix = draw(st.sampled_from(_PREFIXES))
        elif mutation == "typeflag":
            header.typeflag = draw(st.sampled_from(_TYPES))
            header.linkname = draw(st.sampled_from([b"", b"SKILL.md", b"../../etc/passwd"]))
        elif mutation == "size":
            text = b"  %o \0" % len(data)
            header.size_field = draw(
                st.sampled_from(
                    [
                        text + b"\0" * (12 - len(text)),
                        b"\x80" + len(data).to_bytes(11, "big"),
                        b"%011o\x00" % max(len(data) - 1, 0),
                    ]
                )
            )
        elif mutation == "checksum":
            header.signed_checksum = True
            header.uname = b"\xc3\xa9"
        elif mutation == "tail":
            header.tail = b"\0" * 8 + b"tar\0"
        elif mutation == "name":
            header.name = draw(st.sampled_from(_NAMES))
        elif mutation == "mode":
            header.mode = draw(st.sampled_from([0o755, 0o4755, 0o000]))
        else:
            kind = draw(st.sampled_from([b"L", b"x", b"x", b"g", b"K"]))
            if kind in (b"L", b"K"):
                before.append((kind, draw(st.sampled_from(_NAMES)) + b"\0"))
            else:
                keys = st.sampled_from(_PAX_KEYS)
                records = draw(st.lists(st.tuples(keys, st.sampled_from(_PAX_VALUES)), min_size=1, max_size=3))
                before.append((kind, forge.pax_records(records)))
    if header.typeflag in (b"5", b"1", b"2", b"3"):
        data, header.size, header.size_field = b"", 0, None
    return forge.Member(header, data, before)


@st.composite
def archives(draw: st.DrawFn) -> tuple[bytes, dict[str, tuple[int, str]]]:
    chosen = draw(st.lists(members(), min_size=1, max_size=4))
    canonical = b"\0" * 1024
    end = draw(st.sampled_from([canonical] * 6 + [b"\0" * 512, b"", b"\0" * 10240, b"\0" * 1024 + b"x"]))
    tar = forge.archive(chosen, end=end)
    raw = forge.gzipped(
        tar,
        members=draw(st.sampled_from([1] * 6 + [2])),
        fname=draw(st.sampled_from([None, None, b"p.tar"])),
        trailer=draw(st.sampled_from([b""] * 6 + [b"\0" * 16])),
    )
    meant: dict[str, tuple[int, str]] = {}
    for member in chosen:
        try:
            name = member.header.name.decode().removeprefix("./")
        except UnicodeDecodeError:
            continue
        if member.header.typeflag in (b"0", b"\0", b"7") and not name.endswith("/"):
            meant[name] = (len(member.data), hashlib.sha256(member.data).hexdigest())
    return raw, meant


EXAMPLES = int(os.environ.get("PACKYARD_TAR_EXAMPLES", "250"))
SEED = int(os.environ.get("PACKYARD_TAR_SEED", "19"))


@seed(SEED)
@settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=False,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(archives())
def test_generated_tar_streams_have_one_reading_where_accepted(case: tuple[bytes, dict[str, tuple[int, str]]]) -> None:
    raw, meant = case
    check_one_reading(raw, meant)


def test_every_reader_is_run() -> None:
    # The harness runs all four readers (a reader dropped from READERS would weaken every test above)
    assert {reader.name for reader in READERS} == {"gnu-tar", "bsdtar", "tarfile", "tarfile-data"}
