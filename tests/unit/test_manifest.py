"""Manifest model, parse_manifest rules, check_path and the canonical form / digests.

Why one module of ~470 lines: one table per manifest rule, sharing the manifest builders.
"""

from __future__ import annotations

import hashlib
import json
import unicodedata
from typing import Any

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from packyard.config import MANIFEST_OTHER_BYTES, Limits, manifest_bytes_needed, manifest_entry_bytes
from packyard.errors import ArchiveRejectCode, ArchiveRejected, InvalidRequest
from packyard.publishing.manifest import (
    Manifest,
    ManifestFile,
    Permission,
    canonical_json,
    canonical_manifest_bytes,
    check_path,
    content_digest,
    manifest_digest,
    parse_manifest,
    unpacked_size,
)

LIMITS = Limits()
SHA_A = hashlib.sha256(b"a").hexdigest()
SHA_B = hashlib.sha256(b"b").hexdigest()


def entry(path: Any, size: Any = 1, sha256: str = SHA_A, **extra: Any) -> dict[str, Any]:
    """A file entry; ``Any`` so tests can put wrong types in."""
    return {"path": path, "size": size, "sha256": sha256, **extra}


def doc(*files: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"protocolVersion": 1, "files": list(files), **extra}


def rejected(raw: Any, limits: Limits = LIMITS) -> ArchiveRejected:
    with pytest.raises(ArchiveRejected) as caught:
        parse_manifest(raw, limits)
    return caught.value


def invalid(raw: Any, limits: Limits = LIMITS) -> InvalidRequest:
    with pytest.raises(InvalidRequest) as caught:
        parse_manifest(raw, limits)
    return caught.value


# --- Parsing: accepted shapes -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("as_type", ["bytes", "str", "dict"])
def test_valid_manifest_parses_from_bytes_str_and_dict(as_type: str) -> None:
    # Given one valid manifest as bytes, str or dict
    document = doc(entry("README.md", mode=0o644), permissions=[{"kind": "network", "resource": "api.example.com"}])
    raw: Any = {"bytes": json.dumps(document).encode(), "str": json.dumps(document), "dict": document}[as_type]
    # When it is parsed
    manifest = parse_manifest(raw, LIMITS)
    # Then every field is read as written
    assert manifest.files == [ManifestFile(path="README.md", size=1, sha256=SHA_A, mode=0o644)]
    assert manifest.permissions == [Permission(kind="network", resource="api.example.com")]
    assert manifest.protocolVersion == 1


def test_optional_fields_take_their_defaults() -> None:
    # Given a manifest with only files, and a permission with only a kind
    manifest = parse_manifest({"files": [entry("a")], "permissions": [{"kind": "state"}]}, LIMITS)
    # Then protocol version is 1, metadata empty, resource "*", reason and mode unset
    assert manifest.protocolVersion == 1
    assert manifest.metadata == {}
    assert manifest.permissions[0].resource == "*"
    assert manifest.permissions[0].reason is None
    assert manifest.files[0].mode is None


def test_empty_file_list_is_a_valid_manifest() -> None:
    # Given a manifest with no files, When parsed, Then it is accepted with nothing to unpack
    assert unpacked_size(parse_manifest(doc(), LIMITS)) == 0


# --- Parsing: InvalidRequest ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "location"),
    [
        (b"{not json", "(root)"),
        (b'{"files": [}', "(root)"),
        (b"[]", "(root)"),
        (b"\xff\xfe", "(root)"),
        (b"{}", "files"),
        (json.dumps(doc(entry("a", size="1"))).encode(), "files.0.size"),
        (json.dumps(doc(entry("a", size=1.0))).encode(), "files.0.size"),
        (json.dumps(doc(entry("a", size=True))).encode(), "files.0.size"),
        (json.dumps(doc(entry("a", size=-1))).encode(), "files.0.size"),
        (json.dumps(doc(entry("a", sha256=SHA_A.upper()))).encode(), "files.0.sha256"),
        (json.dumps(doc(entry("a", sha256=SHA_A[:-1]))).encode(), "files.0.sha256"),
        (json.dumps(doc(entry("a", sha256=SHA_A + "\n"))).encode(), "files.0.sha256"),
        (json.dumps(doc(entry("a", mode="0644"))).encode(), "files.0.mode"),
        (json.dumps(doc(entry("a"), entry(7))).encode(), "files.1.path"),
        (json.dumps(doc(entry("a", owner="root"))).encode(), "files.0.owner"),
        (json.dumps({**doc(), "protocolVersion": 2}).encode(), "protocolVersion"),
        (json.dumps({**doc(), "protocolVersion": True}).encode(), "protocolVersion"),
        (json.dumps({**doc(), "protocolVersion": 1.0}).encode(), "protocolVersion"),
        (json.dumps({**doc(), "signature": "x"}).encode(), "signature"),
        (json.dumps(doc(permissions=[{"kind": "root"}])).encode(), "permissions.0.kind"),
        (json.dumps(doc(permissions=[{"kind": "state", "resource": ""}])).encode(), "permissions.0.resource"),
        # a resource over its byte bound is 422 limit_exceeded (tests/unit/test_copied_bounds.py), not malformed
        (b'{"files": [], "metadata": {"x": NaN}}', "metadata"),
        (b'{"files": [], "metadata": []}', "metadata"),
    ],
)
def test_malformed_manifest_is_invalid_request_naming_the_field(raw: bytes, location: str) -> None:
    # Given malformed JSON, a wrong type, a missing or an unknown field
    # When parsed
    error = invalid(raw)
    # Then InvalidRequest says where
    assert location in error.detail
    assert any(e["loc"] == location for e in error.extra["errors"])


@pytest.mark.parametrize("mode", [0o4755, 0o2755, 0o1777, 0o7777, 0o10644, -1])
def test_mode_with_special_bits_or_out_of_range_is_refused(mode: int) -> None:
    # Given a file mode with setuid/setgid/sticky bits or outside 0..0o777
    # When parsed, Then it is an invalid request naming the mode
    assert "files.0.mode" in invalid(doc(entry("a", mode=mode))).detail


@pytest.mark.parametrize("mode", [0, 0o644, 0o755, 0o777])
def test_plain_permission_modes_are_accepted(mode: int) -> None:
    # Given a plain permission mode, When parsed, Then it is kept
    assert parse_manifest(doc(entry("a", mode=mode)), LIMITS).files[0].mode == mode


def test_metadata_that_is_not_json_is_refused_in_a_dict() -> None:
    # Given a dict manifest whose metadata holds a set (not JSON)
    # When parsed, Then it is an invalid request, not a crash
    assert "manifest" in invalid(doc(metadata={"tags": {"a", "b"}})).detail


def test_metadata_with_a_lone_surrogate_is_refused() -> None:
    # Given metadata with a string that is not valid Unicode
    # When parsed, Then it is an invalid request naming metadata
    assert "metadata" in invalid(doc(metadata={"x": "\ud800"})).detail


def test_invalid_request_reports_at_most_five_errors() -> None:
    # Given a manifest with ten bad files
    error = invalid(doc(*[entry(f"f{i}", size=-1) for i in range(10)]))
    # Then five are listed and the rest counted
    assert len(error.extra["errors"]) == 5
    assert "and 5 more" in error.detail


# --- Parsing: ArchiveRejected -----------------------------------------------------------------------------------------


def test_manifest_over_size_limit_is_too_large() -> None:
    # Given raw JSON one byte over the limit
    raw = json.dumps(doc(entry("a"))).encode()
    # When parsed with a limit one byte below its size
    error = rejected(raw, Limits(manifest_max_bytes=len(raw) - 1))
    # Then it is TOO_LARGE, naming both numbers
    assert error.sub_code == ArchiveRejectCode.TOO_LARGE
    assert str(len(raw)) in error.detail
    # And exactly at the limit it passes
    assert parse_manifest(raw, Limits(manifest_max_bytes=len(raw))).files[0].path == "a"


def test_dict_manifest_is_measured_as_canonical_bytes() -> None:
    # Given a dict manifest and its canonical size
    document = doc(entry("a"), metadata={"k": "vé"})
    size = len(canonical_json(document))
    # Then a limit equal to the canonical size accepts it and one byte less refuses it
    assert parse_manifest(document, Limits(manifest_max_bytes=size)).metadata == {"k": "vé"}
    assert rejected(document, Limits(manifest_max_bytes=size - 1)).sub_code == ArchiveRejectCode.TOO_LARGE


def test_size_limit_is_checked_before_parsing() -> None:
    # Given malformed JSON that is also too large
    # When parsed, Then the size wins (nothing large is parsed)
    assert rejected(b"{" * 100, Limits(manifest_max_bytes=10)).sub_code == ArchiveRejectCode.TOO_LARGE


def test_too_many_files_is_refused_and_the_limit_itself_is_fine() -> None:
    # Given three files and a limit of two, Then TOO_MANY_FILES
    files = [entry(name) for name in ("a", "b", "c")]
    assert rejected(doc(*files), Limits(max_files=2)).sub_code == ArchiveRejectCode.TOO_MANY_FILES
    # And with a limit of three they pass
    assert len(parse_manifest(doc(*files), Limits(max_files=3)).files) == 3


def longest_entries(count: int, limits: Limits = LIMITS) -> list[dict[str, Any]]:
    """``count`` distinct files at the longest allowed path, the largest mode and a size of the most digits."""
    return [
        entry(f"d{index:05d}/" + "x" * (limits.max_path_length - 7), size=limits.max_unpacked_bytes, mode=0o777)
        for index in range(count)
    ]


def test_the_manifest_byte_limit_fits_the_file_limit_at_the_longest_paths() -> None:
    # Given the default limits and max_files entries, each at the longest allowed path, with mode and the longest size
    files = longest_entries(LIMITS.max_files)
    document = doc(*files)
    # Then each canonical entry is as long as manifest_entry_bytes says (the arithmetic is exact, not a guess)
    assert (
        len(canonical_json(files))
        == len(files) * manifest_entry_bytes(LIMITS.max_path_length, LIMITS.max_unpacked_bytes) + 1
    )  # the list's brackets, less the last entry's comma
    # And the default byte limit is that much plus the room kept for everything else
    assert (
        LIMITS.manifest_max_bytes
        == len(files) * manifest_entry_bytes(LIMITS.max_path_length, LIMITS.max_unpacked_bytes) + MANIFEST_OTHER_BYTES
    )
    # And the size check is passed (the unpacked total is the next rule, not the manifest's bytes)
    assert len(canonical_json(document)) <= LIMITS.manifest_max_bytes
    assert rejected(document).sub_code == ArchiveRejectCode.TOO_LARGE
    assert "files add up to" in rejected(document).detail


def test_ten_thousand_files_at_the_longest_paths_parse_with_the_default_limits() -> None:
    # Given 10,000 one-byte files at 256-byte paths, with mode (as the CLI writes them)
    files = [entry(f["path"], size=1, mode=0o644) for f in longest_entries(10_000)]
    # When parsed as bytes (as verification and publication read the staged manifest), Then all are accepted
    assert len(parse_manifest(canonical_json(doc(*files)), LIMITS).files) == 10_000


def test_a_django_sized_sdist_manifest_fits() -> None:
    # Given the shape of Django 4.2.7's sdist: 6,713 files, mode on each, paths of 58 bytes on average, 1,131,717
    # canonical bytes (refused too_large by the 1 MiB limit before)
    files = [
        entry(f"Django-4.2.7/django/{index:05d}/" + "m" * 25 + ".py", size=4096, mode=0o644) for index in range(6713)
    ]
    raw = canonical_json(doc(*files))
    assert len(raw) > 1024 * 1024
    # Then it parses with the default limits
    assert len(parse_manifest(raw, LIMITS).files) == 6713


@pytest.mark.parametrize("as_bytes", [True, False], ids=["bytes", "dict"])
def test_a_manifest_over_both_limits_is_refused_naming_the_file_limit(as_bytes: bool) -> None:
    # Given max_files + 1 files at the longest paths, with a byte limit that only max_files of them fit
    limits = Limits(max_files=50)
    document = doc(*longest_entries(51, limits))
    raw: Any = canonical_json(document) if as_bytes else document
    assert len(canonical_json(document)) > limits.manifest_max_bytes - MANIFEST_OTHER_BYTES
    limits = Limits(max_files=50, manifest_max_bytes=len(canonical_json(document)) - 1)
    # When parsed, Then the answer is the file count, the limit actually exceeded, and its detail names it
    error = rejected(raw, limits)
    assert error.sub_code == ArchiveRejectCode.TOO_MANY_FILES
    assert error.detail == "manifest lists 51 files, limit is 50 files"


def test_one_file_past_the_default_file_limit_is_too_many_files() -> None:
    # Given 10,001 files at the longest paths (the bytes of 10,000 plus one entry)
    raw = canonical_json(doc(*longest_entries(LIMITS.max_files + 1)))
    # Then the refusal names the file limit
    error = rejected(raw)
    assert error.sub_code == ArchiveRejectCode.TOO_MANY_FILES
    assert error.detail == f"manifest lists {LIMITS.max_files + 1} files, limit is {LIMITS.max_files} files"


def test_an_oversized_manifest_within_the_file_limit_is_too_large() -> None:
    # Given few files but more bytes than the limit (long metadata)
    document = doc(entry("a"), metadata={"k": "v" * 200})
    error = rejected(canonical_json(document), Limits(manifest_max_bytes=100))
    # Then the byte limit is named
    assert error.sub_code == ArchiveRejectCode.TOO_LARGE
    assert "limit is 100" in error.detail


def test_the_byte_limit_follows_overridden_file_and_path_limits() -> None:
    # Given other file and path limits, Then the default byte limit moves with them; an explicit one is kept
    assert Limits(max_files=20_000).manifest_max_bytes == manifest_bytes_needed(
        20_000, 256, Limits().max_unpacked_bytes
    )
    assert Limits(max_path_length=100).manifest_max_bytes < LIMITS.manifest_max_bytes
    assert Limits(manifest_max_bytes=1234).manifest_max_bytes == 1234


def test_sum_of_sizes_over_unpacked_limit_is_too_large() -> None:
    # Given files adding up to 101 bytes and a 100-byte limit
    files = [entry("a", size=50), entry("b", size=51)]
    error = rejected(doc(*files), Limits(max_unpacked_bytes=100))
    # Then TOO_LARGE, naming the total
    assert error.sub_code == ArchiveRejectCode.TOO_LARGE
    assert "101" in error.detail


@pytest.mark.parametrize("path", ["../etc/passwd", "/abs", "a\\b", "a/../b", "./a", "a//b", "a/", "tab\there", ""])
def test_unsafe_manifest_path_is_refused_with_unsafe_path(path: str) -> None:
    # Given a manifest with an unsafe path, When parsed, Then UNSAFE_PATH naming it
    error = rejected(doc(entry("ok.txt"), entry(path)))
    assert error.sub_code == ArchiveRejectCode.UNSAFE_PATH
    assert repr(path) in error.detail


def test_surrogate_path_in_a_dict_is_unsafe_path() -> None:
    # Given a path that cannot be UTF-8 (a lone surrogate), When parsed, Then UNSAFE_PATH
    assert rejected(doc(entry("caf\udce9.txt"))).sub_code == ArchiveRejectCode.UNSAFE_PATH


@pytest.mark.parametrize(
    ("first", "second"),
    [
        ("a.txt", "a.txt"),
        ("README.md", "readme.md"),
        ("Straße.txt", "STRASSE.txt"),
        (unicodedata.normalize("NFC", "café"), unicodedata.normalize("NFD", "café")),
        ("dir/File", "DIR/file"),
    ],
)
def test_paths_equal_under_nfc_and_case_folding_are_duplicates(first: str, second: str) -> None:
    # Given two paths a case-insensitive, normalising file system would merge
    # When parsed, Then DUPLICATE_ENTRY naming the second
    error = rejected(doc(entry(first), entry(second)))
    assert error.sub_code == ArchiveRejectCode.DUPLICATE_ENTRY
    assert repr(second) in error.detail


@pytest.mark.parametrize(("file", "nested"), [("lib", "lib/x.py"), ("Lib", "lib/sub/x.py")])
def test_file_that_is_also_a_parent_directory_is_a_duplicate(file: str, nested: str) -> None:
    # Given a file path that another file uses as a directory
    # When parsed, Then DUPLICATE_ENTRY (it could not be unpacked)
    assert rejected(doc(entry(nested), entry(file))).sub_code == ArchiveRejectCode.DUPLICATE_ENTRY


def test_similar_but_distinct_paths_are_not_duplicates() -> None:
    # Given paths that share prefixes but not segments
    files = [entry("lib.py"), entry("lib/x.py"), entry("libx/y.py")]
    # When parsed, Then all are kept
    assert len(parse_manifest(doc(*files), LIMITS).files) == 3


def test_rule_order_count_before_paths_before_duplicates_before_total() -> None:
    # Given a manifest that breaks every rule at once
    files = [entry("../x", size=10), entry("a", size=10), entry("A", size=10)]
    # Then the count is reported first, then the path, then the duplicate, then the total
    assert rejected(doc(*files), Limits(max_files=2, max_unpacked_bytes=5)).sub_code == ArchiveRejectCode.TOO_MANY_FILES
    assert rejected(doc(*files), Limits(max_unpacked_bytes=5)).sub_code == ArchiveRejectCode.UNSAFE_PATH
    assert rejected(doc(*files[1:]), Limits(max_unpacked_bytes=5)).sub_code == ArchiveRejectCode.DUPLICATE_ENTRY
    assert rejected(doc(*files[1:2]), Limits(max_unpacked_bytes=5)).sub_code == ArchiveRejectCode.TOO_LARGE


# --- check_path -------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "path",
    ["a", "README.md", "src/pkg/__init__.py", ".hidden", "a/.b/c", "...", "a..b", "名前/ファイル.txt", "sp ace", "~x"],
)
def test_safe_paths_are_returned_unchanged(path: str) -> None:
    # Given a relative, normalised path, When checked, Then it is returned as is
    assert check_path(path, LIMITS) == path


@pytest.mark.parametrize(
    ("path", "why"),
    [
        ("", "empty"),
        ("/etc/passwd", "absolute"),
        ("C:/Windows", "drive letter"),
        ("c:evil", "drive letter"),
        ("a\\b", "backslash"),
        ("..", "'..'"),
        ("a/../../b", "'..'"),
        ("./a", "'.'"),
        ("a/.", "'.'"),
        ("a//b", "''"),
        ("a/", "ends with"),
        ("nul\x00byte", "control"),
        ("new\nline", "control"),
        ("del\x7f", "control"),
        ("esc\x1b[31m", "control"),
        ("lone\udc80surrogate", "UTF-8"),
    ],
)
def test_unsafe_paths_are_refused_with_a_reason(path: str, why: str) -> None:
    # Given an unsafe path, When checked, Then UNSAFE_PATH naming the path and why
    with pytest.raises(ArchiveRejected) as caught:
        check_path(path, LIMITS)
    assert caught.value.sub_code == ArchiveRejectCode.UNSAFE_PATH
    assert why in caught.value.detail


def test_path_length_is_measured_in_utf8_bytes() -> None:
    # Given a limit of 10 bytes
    limits = Limits(max_path_length=10)
    # Then 5 two-byte characters (10 bytes) pass and 6 (12 bytes, but only 6 characters) do not
    assert check_path("é" * 5, limits) == "é" * 5
    with pytest.raises(ArchiveRejected) as caught:
        check_path("é" * 6, limits)
    assert "12 bytes" in caught.value.detail


def test_very_long_path_is_shortened_in_the_detail() -> None:
    # Given a 5000-character path, When refused, Then the detail stays short
    with pytest.raises(ArchiveRejected) as caught:
        check_path("a" * 5000, LIMITS)
    assert len(caught.value.detail) < 300


# safe: no surrogates, and (the path rule) no control, format or separator characters (Cc, Cf, Zl, Zp)
_segment = st.text(
    alphabet=st.characters(exclude_categories=["Cs", "Cc", "Cf", "Zl", "Zp"], exclude_characters="/\\"),
    min_size=1,
    max_size=12,
).filter(lambda s: s not in (".", ".."))


@given(st.lists(_segment, min_size=1, max_size=6))
def test_property_paths_built_from_safe_segments_are_accepted(segments: list[str]) -> None:
    # Given a path joined from safe segments (not starting with a drive letter), When checked, Then accepted unchanged
    path = "/".join(segments)
    assume(not (len(path) >= 2 and path[1] == ":" and path[0].isascii() and path[0].isalpha()))
    assert check_path(path, LIMITS) == path


@given(st.lists(_segment, min_size=0, max_size=4), st.sampled_from(["..", ".", "", "a\\b", "x\x00y", "\x1f"]))
def test_property_one_bad_segment_anywhere_makes_the_path_unsafe(segments: list[str], bad: str) -> None:
    # Given safe segments with one bad segment inserted anywhere
    for index in range(len(segments) + 1):
        path = "/".join([*segments[:index], bad, *segments[index:]])
        # When checked, Then UNSAFE_PATH
        with pytest.raises(ArchiveRejected) as caught:
            check_path(path, LIMITS)
        assert caught.value.sub_code == ArchiveRejectCode.UNSAFE_PATH


@given(st.text(max_size=40))
def test_property_any_accepted_path_is_relative_normalised_and_clean(path: str) -> None:
    # Given any text at all, When checked
    try:
        accepted = check_path(path, LIMITS)
    except ArchiveRejected as exc:
        # Then a refusal is always UNSAFE_PATH (never another error)
        assert exc.sub_code == ArchiveRejectCode.UNSAFE_PATH
        return
    # Then an accepted path is the input, relative, without empty/./.. segments, backslash or control characters
    assert accepted == path
    assert not path.startswith("/")
    assert all(segment not in ("", ".", "..") for segment in path.split("/"))
    assert "\\" not in path
    assert all(ord(c) >= 0x20 and ord(c) != 0x7F for c in path)


# --- Canonical form and digests ---------------------------------------------------------------------------------------


def test_canonical_json_is_sorted_compact_and_utf8() -> None:
    # Given an object with unsorted keys and non-ASCII text
    # When made canonical, Then keys are sorted, no spaces, UTF-8 bytes (not \\u escapes)
    assert canonical_json({"b": 1, "a": ["é", None]}) == '{"a":["é",null],"b":1}'.encode()


def test_canonical_json_refuses_nan() -> None:
    # Given NaN, When made canonical, Then ValueError (NaN is not JSON)
    with pytest.raises(ValueError):
        canonical_json({"x": float("nan")})


def test_canonical_manifest_sorts_files_and_omits_unset_optionals() -> None:
    # Given files out of order, one with a mode, and a permission without a reason
    manifest = parse_manifest(
        doc(entry("b", sha256=SHA_B), entry("a", mode=0o600), permissions=[{"kind": "events"}]), LIMITS
    )
    # When made canonical
    canonical = json.loads(canonical_manifest_bytes(manifest))
    # Then files are sorted by path, mode appears only where set, reason is omitted
    assert [f["path"] for f in canonical["files"]] == ["a", "b"]
    assert canonical["files"][0]["mode"] == 0o600
    assert "mode" not in canonical["files"][1]
    assert canonical["permissions"] == [{"kind": "events", "resource": "*"}]
    assert canonical["protocolVersion"] == 1


def test_content_digest_is_sha256_of_the_canonical_sorted_file_list() -> None:
    # Given a manifest
    manifest = parse_manifest(doc(entry("b", sha256=SHA_B), entry("a")), LIMITS)
    # Then its content digest is the sha256 of the canonical, path-sorted file list
    expected_list = [{"path": "a", "sha256": SHA_A, "size": 1}, {"path": "b", "sha256": SHA_B, "size": 1}]
    assert content_digest(manifest) == hashlib.sha256(canonical_json(expected_list)).hexdigest()


def test_content_digest_ignores_permissions_and_metadata_but_manifest_digest_does_not() -> None:
    # Given two manifests with the same files but different metadata and permissions
    plain = parse_manifest(doc(entry("a")), LIMITS)
    dressed = parse_manifest(doc(entry("a"), metadata={"v": 2}, permissions=[{"kind": "state"}]), LIMITS)
    # Then the content digest is the same and the manifest digest differs
    assert content_digest(plain) == content_digest(dressed)
    assert manifest_digest(plain) != manifest_digest(dressed)
    assert manifest_digest(dressed) == hashlib.sha256(canonical_manifest_bytes(dressed)).hexdigest()


@pytest.mark.parametrize(
    "change", [{"path": "b"}, {"size": 2}, {"sha256": SHA_B}, {"mode": 0o644}], ids=["path", "size", "sha256", "mode"]
)
def test_content_digest_changes_when_any_file_field_changes(change: dict[str, Any]) -> None:
    # Given a manifest and a copy with one file field changed
    before = parse_manifest(doc(entry("a")), LIMITS)
    after = parse_manifest(doc({**entry("a"), **change}), LIMITS)
    # Then the content digests differ
    assert content_digest(before) != content_digest(after)


_files = st.dictionaries(
    keys=st.text(alphabet="abcdefgh/._-", min_size=1, max_size=10).filter(
        lambda p: all(s not in ("", ".", "..") for s in p.split("/"))
    ),
    values=st.tuples(st.integers(0, 10**9), st.binary(max_size=8), st.none() | st.integers(0, 0o777)),
    min_size=1,
    max_size=12,
)


def _manifest_from(files: dict[str, tuple[int, bytes, int | None]], order: list[str]) -> Manifest | None:
    entries = []
    for path in order:
        size, seed, mode = files[path]
        item = entry(path, size=size, sha256=hashlib.sha256(seed).hexdigest())
        if mode is not None:
            item["mode"] = mode
        entries.append(item)
    try:
        return parse_manifest(doc(*entries), LIMITS)
    except ArchiveRejected:
        return None  # generated paths that collide; not what this property is about


@settings(max_examples=100)
@given(_files, st.randoms(use_true_random=False))
def test_property_digests_do_not_depend_on_file_order(files: dict[str, Any], rng: Any) -> None:
    # Given the same files listed in two orders
    order = sorted(files)
    shuffled = list(order)
    rng.shuffle(shuffled)
    first, second = _manifest_from(files, order), _manifest_from(files, shuffled)
    assume(first is not None and second is not None)
    assert first is not None and second is not None
    # Then the content digest, the canonical bytes and the manifest digest are identical
    assert content_digest(first) == content_digest(second)
    assert canonical_manifest_bytes(first) == canonical_manifest_bytes(second)
    assert manifest_digest(first) == manifest_digest(second)


@settings(max_examples=100)
@given(_files, st.dictionaries(st.text(max_size=5), st.none() | st.booleans() | st.integers() | st.text(max_size=5)))
def test_property_canonical_bytes_parse_back_to_the_same_manifest(files: dict[str, Any], metadata: Any) -> None:
    # Given a valid manifest
    manifest = _manifest_from(files, sorted(files))
    assume(manifest is not None)
    assert manifest is not None
    manifest = manifest.model_copy(update={"metadata": metadata})
    # When its canonical bytes are parsed again
    again = parse_manifest(canonical_manifest_bytes(manifest), LIMITS)
    # Then the same manifest (and digest) comes back
    assert again == manifest
    assert manifest_digest(again) == manifest_digest(manifest)


@pytest.mark.parametrize(
    "character",
    ["\u009b", "\u0085", "\u2028", "\u2029", "\u202e", "\u200b", "\u200d", "\ufeff", "\u0000", "\u007f"],
    ids=[
        "C1-CSI",
        "C1-NEL",
        "line-separator",
        "paragraph-separator",
        "bidi-RLO",
        "zero-width-space",
        "ZWJ",
        "BOM",
        "NUL",
        "DEL",
    ],
)
def test_given_a_control_format_or_separator_character_then_the_path_is_unsafe(character: str) -> None:
    # Given a path hiding the character inside a file name, When checked, Then unsafe_path names it
    with pytest.raises(ArchiveRejected) as caught:
        check_path(f"src/mai{character}n.py", LIMITS)
    assert caught.value.sub_code is ArchiveRejectCode.UNSAFE_PATH
    assert f"U+{ord(character):04X}" in caught.value.detail


@pytest.mark.parametrize("path", ["src/naïve.py", "docs/日本語.md", "emoji/🙂.txt", "a b/c d.txt"])
def test_given_ordinary_unicode_then_the_path_is_accepted(path: str) -> None:
    assert check_path(path, LIMITS) == path
