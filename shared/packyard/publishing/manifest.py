"""The package manifest: its model, its rules and its canonical (digestible) form.

A manifest lists every file of a package (``path``, ``size``, ``sha256``, optional ``mode``), the permissions the
package asks for and free-form metadata. ``parse_manifest`` is the single gate every manifest passes through: the
pydantic model checks shapes and types, ``parse_manifest`` then applies the rules that need ``Limits`` (sizes,
counts, path safety, uniqueness under case folding).

Canonical form (what digests are computed over): JSON with sorted keys, no insignificant whitespace, UTF-8 (not
``\\u`` escapes), files sorted by path (code point order), optional fields omitted when unset.
"""

from __future__ import annotations

import hashlib
import json
import unicodedata
from collections.abc import Iterable
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from packyard.config import Limits
from packyard.errors import ArchiveRejectCode, ArchiveRejected, InputLimitExceeded, InvalidRequest

PermissionKind = Literal["api_read", "api_write", "events", "state", "network"]

SPECIAL_MODE_BITS = 0o7000  # setuid, setgid, sticky
_METADATA_MAX_DEPTH = 64
_MAX_REPORTED_ERRORS = 5


class ManifestFile(BaseModel):
    """One file of a package. ``mode`` (plain permission bits only), when given, must match the archive member."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    path: str
    size: int = Field(ge=0)
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    mode: int | None = Field(default=None, ge=0)

    @field_validator("mode")
    @classmethod
    def _plain_permission_mode(cls, mode: int | None) -> int | None:
        if mode is not None and mode & SPECIAL_MODE_BITS:
            raise ValueError("setuid, setgid and sticky bits are not allowed")
        if mode is not None and mode > 0o777:
            raise ValueError("mode must be a permission mode between 0 and 0o777")
        return mode


class Permission(BaseModel):
    """A permission the package declares; granting it is the installation's business, not the manifest's."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    kind: PermissionKind
    # their byte bounds are Limits' (max_permission_resource_bytes, max_permission_reason_bytes): check_copied_bounds
    resource: str = Field(default="*", min_length=1)
    reason: str | None = None


class Manifest(BaseModel):
    """A package manifest. Build it with ``parse_manifest`` so the limit-dependent rules are applied too."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    protocolVersion: Literal[1] = 1
    files: list[ManifestFile]
    permissions: list[Permission] = Field(default_factory=list)
    metadata: dict[str, Any] = Field(default_factory=dict)

    @field_validator("protocolVersion", mode="before")
    @classmethod
    def _exact_integer_version(cls, value: Any) -> Any:
        # Literal[1] alone would also accept ``true`` and ``1.0``; the protocol version is an integer.
        if type(value) is not int:
            raise ValueError("protocolVersion must be the integer 1")
        return value

    @field_validator("metadata")
    @classmethod
    def _json_metadata(cls, metadata: dict[str, Any]) -> dict[str, Any]:
        _check_json_value(metadata, "metadata", 0)
        return metadata


def _check_json_value(value: Any, where: str, depth: int) -> None:
    """Metadata must round-trip through canonical JSON unchanged, or two digests could describe one manifest."""
    if depth > _METADATA_MAX_DEPTH:
        raise ValueError(f"{where}: nested deeper than {_METADATA_MAX_DEPTH} levels")
    if value is None or isinstance(value, bool | int):
        return
    if isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            raise ValueError(f"{where}: NaN and infinity are not JSON")
        return
    if isinstance(value, str):
        _check_encodable(value, where)
        return
    if isinstance(value, list):
        for index, item in enumerate(value):
            _check_json_value(item, f"{where}[{index}]", depth + 1)
        return
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                raise ValueError(f"{where}: keys must be strings, got {key!r}")
            _check_encodable(key, where)
            _check_json_value(item, f"{where}.{key}", depth + 1)
        return
    raise ValueError(f"{where}: {type(value).__name__} is not a JSON type")


def _check_encodable(text: str, where: str) -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ValueError(f"{where}: string is not valid Unicode (lone surrogate)") from exc


# --- Paths -----------------------------------------------------------------------------------------------------------


def show_path(path: str, limit: int = 120) -> str:
    """``repr`` of a path for an error detail, shortened so a hostile path cannot flood a response."""
    return repr(path) if len(path) <= limit else f"{path[:limit]!r}... ({len(path)} characters)"


def _unsafe(path: str, why: str) -> ArchiveRejected:
    return ArchiveRejected(ArchiveRejectCode.UNSAFE_PATH, f"unsafe path {show_path(path)}: {why}")


# control (C0, C1, DEL), format (bidi overrides, zero-width), line and paragraph separators
UNSAFE_CATEGORIES = frozenset({"Cc", "Cf", "Zl", "Zp"})


def check_path(path: str, limits: Limits) -> str:
    """Return ``path`` if it is a safe, relative, already normalised package path; raise ``UNSAFE_PATH`` if not.

    Rules: not empty; valid Unicode (no surrogates, so it encodes to UTF-8); at most ``limits.max_path_length``
    UTF-8 bytes; no backslash; no control, format, line- or paragraph-separator character (Unicode categories Cc,
    Cf, Zl, Zp: C0 and C1 controls, DEL, bidi overrides, zero-width characters, U+2028/U+2029); not absolute (no
    leading ``/``, no Windows drive prefix such as ``C:``); no trailing ``/``; no empty, ``.`` or ``..`` segments.
    """
    if not isinstance(path, str) or not path:
        raise ArchiveRejected(ArchiveRejectCode.UNSAFE_PATH, f"unsafe path {path!r}: empty")
    try:
        encoded = path.encode("utf-8")
    except UnicodeEncodeError:
        raise _unsafe(path, "not valid UTF-8") from None
    if len(encoded) > limits.max_path_length:
        raise _unsafe(path, f"{len(encoded)} bytes long, limit is {limits.max_path_length}")
    if "\\" in path:
        raise _unsafe(path, "contains a backslash")
    unsafe = next((ch for ch in path if unicodedata.category(ch) in UNSAFE_CATEGORIES), None)
    if unsafe is not None:
        raise _unsafe(
            path,
            f"contains U+{ord(unsafe):04X} ({unicodedata.category(unsafe)}: a control, format or separator character)",
        )
    if path.startswith("/"):
        raise _unsafe(path, "absolute")
    if len(path) >= 2 and path[1] == ":" and path[0].isascii() and path[0].isalpha():
        raise _unsafe(path, "starts with a drive letter")
    if path.endswith("/"):
        raise _unsafe(path, "ends with '/'")
    for segment in path.split("/"):
        if segment in ("", ".", ".."):
            raise _unsafe(path, f"not normalised (segment {segment!r})")
    return path


def fold_path(path: str) -> str:
    """The key two paths collide on: NFC, then case folding (as a case-insensitive file system would see them)."""
    return unicodedata.normalize("NFC", path).casefold()


# --- Parsing ---------------------------------------------------------------------------------------------------------


def parse_manifest(raw: bytes | str | dict[str, Any], limits: Limits) -> Manifest:
    """Parse and check a manifest. Checks run in this order, the first failure is raised:

    1. size of the raw JSON (canonical bytes for a dict) > ``manifest_max_bytes`` → ``ArchiveRejected(TOO_LARGE)``,
       unless its ``files`` list is longer than ``max_files``: then ``TOO_MANY_FILES``, the limit actually exceeded
       (the byte limit follows from the file limit, so a manifest over both is over because of its file count)
    2. malformed JSON, wrong types, missing or unknown fields → ``InvalidRequest`` (detail names the field location)
    3. more than ``max_files`` files → ``ArchiveRejected(TOO_MANY_FILES)``
    4. each path, in the listed order, against ``check_path`` → ``ArchiveRejected(UNSAFE_PATH)``
    5. two paths equal under NFC + case folding, or a file path that is also a parent directory of another file
       → ``ArchiveRejected(DUPLICATE_ENTRY)``
    6. sum of sizes > ``max_unpacked_bytes`` → ``ArchiveRejected(TOO_LARGE)``
    7. more permissions, longer resources or reasons, or larger metadata than their bounds
       → ``InputLimitExceeded`` (422 ``limit_exceeded``, ``check_copied_bounds``)
    """
    size = _raw_size(raw)
    if size > limits.manifest_max_bytes:
        _check_file_count(_listed_files(raw, size, limits), limits)
        raise ArchiveRejected(
            ArchiveRejectCode.TOO_LARGE, f"manifest is {size} bytes, limit is {limits.manifest_max_bytes}"
        )
    try:
        manifest = Manifest.model_validate(raw) if isinstance(raw, dict) else Manifest.model_validate_json(raw)
    except ValidationError as exc:
        raise _invalid_manifest(exc) from None

    _check_file_count(len(manifest.files), limits)
    for entry in manifest.files:
        check_path(entry.path, limits)
    _check_unique(entry.path for entry in manifest.files)
    total = unpacked_size(manifest)
    if total > limits.max_unpacked_bytes:
        raise ArchiveRejected(
            ArchiveRejectCode.TOO_LARGE, f"files add up to {total} bytes, limit is {limits.max_unpacked_bytes}"
        )
    check_copied_bounds(manifest, limits)
    return manifest


def check_copied_bounds(manifest: Manifest, limits: Limits) -> None:
    """The parts of a manifest copied into items and answers (permissions into the release, operation, consent and
    installation items; metadata into the version answer) within their ``Limits``; else ``InputLimitExceeded``
    naming the bound (docs/architecture.md, "What one request may copy")."""
    _within("max_permissions", len(manifest.permissions), limits.max_permissions, "permissions")
    for index, permission in enumerate(manifest.permissions):
        where = f"permissions[{index}]"
        _within(
            "max_permission_resource_bytes",
            len(permission.resource.encode("utf-8")),
            limits.max_permission_resource_bytes,
            f"{where}.resource bytes",
        )
        if permission.reason is not None:
            _within(
                "max_permission_reason_bytes",
                len(permission.reason.encode("utf-8")),
                limits.max_permission_reason_bytes,
                f"{where}.reason bytes",
            )
    _within("max_metadata_bytes", len(canonical_json(manifest.metadata)), limits.max_metadata_bytes, "metadata bytes")


def _within(name: str, actual: int, maximum: int, what: str) -> None:
    if actual > maximum:
        raise InputLimitExceeded(
            f"manifest has {actual} {what}, limit is {maximum} ({name})", limit=name, maximum=maximum, actual=actual
        )


def _check_file_count(count: int, limits: Limits) -> None:
    if count > limits.max_files:
        raise ArchiveRejected(
            ArchiveRejectCode.TOO_MANY_FILES, f"manifest lists {count} files, limit is {limits.max_files} files"
        )


# An oversized manifest is read as JSON only to count its files up to this multiple of the byte limit (a request
# body is at most 10 MB anyway); past it the byte limit is the answer without looking inside.
_COUNT_FILES_UP_TO = 4


def _listed_files(raw: bytes | str | dict[str, Any], size: int, limits: Limits) -> int:
    """How many entries an oversized manifest's ``files`` list has (0 when it cannot tell)."""
    document: Any = raw
    if not isinstance(raw, dict):
        if size > _COUNT_FILES_UP_TO * limits.manifest_max_bytes:
            return 0
        try:
            document = json.loads(raw)
        except (ValueError, RecursionError):
            return 0
    files = document.get("files") if isinstance(document, dict) else None
    return len(files) if isinstance(files, list) else 0


def _raw_size(raw: bytes | str | dict[str, Any]) -> int:
    if isinstance(raw, bytes | bytearray | memoryview):
        return len(raw)
    if isinstance(raw, str):
        return len(raw.encode("utf-8", "surrogatepass"))
    if isinstance(raw, dict):
        try:
            # surrogatepass: a lone surrogate is measured here and refused later with the field it is in.
            text = json.dumps(raw, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
            return len(text.encode("utf-8", "surrogatepass"))
        except (TypeError, ValueError) as exc:
            raise InvalidRequest(f"manifest is not JSON-serialisable: {exc}") from None
    raise InvalidRequest(f"manifest must be a JSON object, got {type(raw).__name__}")


def _invalid_manifest(exc: ValidationError) -> InvalidRequest:
    errors = [
        {"loc": ".".join(str(part) for part in err["loc"]) or "(root)", "msg": err["msg"]}
        for err in exc.errors(include_url=False, include_input=False)
    ]
    shown = "; ".join(f"{e['loc']}: {e['msg']}" for e in errors[:_MAX_REPORTED_ERRORS])
    more = f" (and {len(errors) - _MAX_REPORTED_ERRORS} more)" if len(errors) > _MAX_REPORTED_ERRORS else ""
    return InvalidRequest(f"invalid manifest: {shown}{more}", errors=errors[:_MAX_REPORTED_ERRORS])


def _check_unique(paths: Iterable[str]) -> None:
    """Refuse paths that collide under case folding, and a file that is also another file's parent directory."""
    files: dict[str, str] = {}
    for path in paths:
        key = fold_path(path)
        if key in files:
            raise ArchiveRejected(
                ArchiveRejectCode.DUPLICATE_ENTRY,
                f"{show_path(path)} collides with {show_path(files[key])} (case-insensitively)",
            )
        files[key] = path
    for key, path in files.items():
        parent = key.rpartition("/")[0]
        while parent:
            if parent in files:
                raise ArchiveRejected(
                    ArchiveRejectCode.DUPLICATE_ENTRY,
                    f"{show_path(files[parent])} is a file and the parent directory of {show_path(path)}",
                )
            parent = parent.rpartition("/")[0]


# --- Canonical form and digests --------------------------------------------------------------------------------------


def canonical_json(obj: Any) -> bytes:
    """Sorted keys, no whitespace, UTF-8; NaN and infinity refused (they are not JSON)."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode("utf-8")


def _file_entries(manifest: Manifest) -> list[dict[str, Any]]:
    return [entry.model_dump(exclude_none=True) for entry in sorted(manifest.files, key=lambda f: f.path)]


def canonical_manifest_bytes(manifest: Manifest) -> bytes:
    """The manifest as stored: files sorted by path; ``mode`` and ``reason`` omitted when unset; permissions kept
    in their declared order."""
    return canonical_json(
        {
            "protocolVersion": manifest.protocolVersion,
            "files": _file_entries(manifest),
            "permissions": [p.model_dump(exclude_none=True) for p in manifest.permissions],
            "metadata": manifest.metadata,
        }
    )


def content_digest(manifest: Manifest) -> str:
    """sha256 hex of the canonical JSON of the sorted file list: what the package *contains*."""
    return hashlib.sha256(canonical_json(_file_entries(manifest))).hexdigest()


def manifest_digest(manifest: Manifest) -> str:
    """sha256 hex of the whole canonical manifest (files, permissions, metadata)."""
    return hashlib.sha256(canonical_manifest_bytes(manifest)).hexdigest()


def unpacked_size(manifest: Manifest) -> int:
    return sum(entry.size for entry in manifest.files)
