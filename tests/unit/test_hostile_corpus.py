"""The hostile corpus (tests/data/hostile): every case is refused with exactly its sub-code, at exactly its stage."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import sys
from pathlib import Path
from typing import Any

import pytest

from packyard.config import Limits
from packyard.errors import ArchiveRejected
from packyard.publishing.archive_verifier import VerifiedArchive, verify_archive
from packyard.publishing.manifest import Manifest, parse_manifest

DATA = Path(__file__).resolve().parent.parent / "data"
CORPUS = DATA / "hostile"
CASES: list[dict[str, Any]] = json.loads((CORPUS / "cases.json").read_text(encoding="utf-8"))

# The brief for the corpus: these must always be there.
REQUIRED_CASES = {
    "dotdot_traversal",
    "absolute_path",
    "symlink",
    "hardlink",
    "char_device",
    "fifo",
    "setuid_bit",
    "duplicate_entry",
    "casefold_collision",
    "gzip_bomb",
    "too_many_files",
    "truncated_gzip",
    "trailing_garbage",
    "archive_sha256_mismatch",
    "archive_size_mismatch",
    "file_size_differs",
    "file_sha256_differs",
    "missing_file",
    "extra_file",
    "non_utf8_name",
    "overlong_path",
    "manifest_too_large",
    "backslash_path_manifest",
    "good",
    "gnu_magic_prefix_traversal",
    "long_name_then_pax_path",
}


def _limits(case: dict[str, Any]) -> Limits:
    return Limits(**case["limits"])


def _parse(case: dict[str, Any]) -> Manifest:
    return parse_manifest((CORPUS / case["manifest"]).read_bytes(), _limits(case))


def _verify(case: dict[str, Any], manifest: Manifest) -> VerifiedArchive:
    raw = (CORPUS / case["archive"]).read_bytes()
    declared_size = len(raw) if case["declaredSize"] is None else case["declaredSize"]
    declared_sha256 = hashlib.sha256(raw).hexdigest() if case["declaredSha256"] is None else case["declaredSha256"]
    with (CORPUS / case["archive"]).open("rb") as stream:
        return verify_archive(
            stream, manifest, declared_size=declared_size, declared_sha256=declared_sha256, limits=_limits(case)
        )


def test_corpus_holds_every_required_case() -> None:
    # Given the committed cases.json
    names = {case["name"] for case in CASES}
    # Then every case the corpus must cover is present, once
    assert names >= REQUIRED_CASES
    assert len(names) == len(CASES)


def test_corpus_stays_small() -> None:
    # Given the committed corpus files, Then they stay well under 2 MB in total
    assert sum(path.stat().st_size for path in CORPUS.iterdir()) < 2_000_000


@pytest.mark.parametrize("case", [c for c in CASES if c["stage"] == "manifest"], ids=lambda c: c["name"])
def test_manifest_stage_case_is_refused_by_parse_manifest(case: dict[str, Any]) -> None:
    # Given a hostile manifest
    # When it is parsed at upload request
    with pytest.raises(ArchiveRejected) as caught:
        _parse(case)
    # Then it is refused with exactly its sub-code
    assert caught.value.sub_code == case["expectedSubCode"], caught.value.detail


@pytest.mark.parametrize(
    "case", [c for c in CASES if c["stage"] == "verify" and c["expectedSubCode"]], ids=lambda c: c["name"]
)
def test_verify_stage_case_is_refused_by_verify_archive(case: dict[str, Any]) -> None:
    # Given a manifest the upload request accepts
    manifest = _parse(case)
    # When its hostile archive is verified
    with pytest.raises(ArchiveRejected) as caught:
        _verify(case, manifest)
    # Then it is refused with exactly its sub-code
    assert caught.value.sub_code == case["expectedSubCode"], caught.value.detail


def test_good_reference_case_passes() -> None:
    # Given the good reference case
    (case,) = [c for c in CASES if c["expectedSubCode"] is None]
    manifest = _parse(case)
    # When it is verified
    result = _verify(case, manifest)
    # Then every manifest file was seen and measured
    assert result.file_count == len(manifest.files)
    assert result.unpacked_size == sum(f.size for f in manifest.files)
    assert result.archive_sha256 == hashlib.sha256((CORPUS / case["archive"]).read_bytes()).hexdigest()


def _generator() -> Any:
    spec = importlib.util.spec_from_file_location("make_hostile_corpus", DATA / "make_hostile_corpus.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    return module


def test_generator_is_deterministic_and_matches_committed_index(tmp_path: Path) -> None:
    # Given the generator, When it writes the corpus twice
    generator = _generator()
    first, second = tmp_path / "first", tmp_path / "second"
    generator.write_corpus(first)
    generator.write_corpus(second)
    # Then both runs are byte-identical
    names = sorted(path.name for path in first.iterdir())
    assert names == sorted(path.name for path in second.iterdir())
    assert all((first / name).read_bytes() == (second / name).read_bytes() for name in names)
    # And the case index and the manifests match what is committed (archives depend on the zlib build)
    assert (first / "cases.json").read_text() == (CORPUS / "cases.json").read_text()
    for name in names:
        if name.endswith(".manifest.json"):
            assert (first / name).read_text() == (CORPUS / name).read_text(), name
