"""The service's naming rules, checked before anything is sent (copied, not imported: the CLI does not load the
service's layer). Keep them in step with ``shared/packyard/publishing/models.py`` (package names, versions,
semver order) and ``shared/packyard/installations/models.py`` (installation and workspace ids);
``tests/unit/test_cli_rules.py`` compares them with the service's.
"""

from __future__ import annotations

import re
from typing import Any

# full matches over ASCII classes, as the service: no trailing newline, no non-ASCII digits
PACKAGE_NAME = re.compile(r"[a-z0-9](?:[a-z0-9._-]{0,62}[a-z0-9])?", re.ASCII)
# semver 2.0.0, from the spec's grammar (no leading zeros in numeric identifiers)
SEMVER = re.compile(
    r"(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)"
    r"(?:-((?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*)(?:\.(?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*))*))?"
    r"(?:\+([0-9a-zA-Z-]+(?:\.[0-9a-zA-Z-]+)*))?",
    re.ASCII,
)
MAX_VERSION_LENGTH = 128
INSTALLATION_ID = re.compile(r"[a-z0-9](?:[a-z0-9._-]{0,62}[a-z0-9])?", re.ASCII)
WORKSPACE_ID = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9._-]{0,126}[A-Za-z0-9])?", re.ASCII)
PERMISSION_KINDS = ("api_read", "api_write", "events", "state", "network")
LATEST = "latest"


def package_problem(name: str) -> str | None:
    """Why ``name`` is not a package name, or None."""
    if PACKAGE_NAME.fullmatch(name):
        return None
    return f"package name {name!r} must be 1-64 chars of a-z, 0-9, '.', '_', '-', starting and ending alphanumeric"


def version_problem(version: str) -> str | None:
    """Why ``version`` is not a version the service accepts, or None (with a hint for the usual slips)."""
    if len(version) <= MAX_VERSION_LENGTH and SEMVER.fullmatch(version):
        return None
    hint = ""
    bare = version[1:] if version[:1] in ("v", "V") else version
    if bare != version and SEMVER.fullmatch(bare):
        hint = f" (without the 'v': {bare})"
    elif re.fullmatch(r"\d+(\.\d+)?", bare):
        parts = bare.split(".")
        hint = f" (all three numbers: {'.'.join([*parts, *['0'] * (3 - len(parts))])})"
    return f"version {version!r} is not a semantic version MAJOR.MINOR.PATCH, e.g. 1.2.3 or 1.2.3-rc.1{hint}"


def installation_problem(value: str) -> str | None:
    if INSTALLATION_ID.fullmatch(value):
        return None
    if "@" in value:
        return (
            f"{value!r} is PACKAGE@VERSION, not an installation id: name the installation "
            f"(by default the package name: {value.partition('@')[0]!r})"
        )
    return f"installation id {value!r} must be 1-64 chars of a-z, 0-9, '.', '_', '-', starting and ending alphanumeric"


def workspace_problem(value: str) -> str | None:
    if WORKSPACE_ID.fullmatch(value):
        return None
    return f"workspace id {value!r} must be 1-128 chars of letters, digits, '.', '_', '-', starting and ending with one"


def semver_key(version: str) -> tuple[Any, ...]:
    """Sort key following semver precedence (build metadata ignored, pre-releases before the release)."""
    match = SEMVER.fullmatch(version)
    if not match:
        return (0, 0, 0, 0, ())
    major, minor, patch, pre = int(match[1]), int(match[2]), int(match[3]), match[4]
    if pre is None:
        return (major, minor, patch, 1, ())
    parts = tuple((0, int(p), "") if p.isdigit() else (1, 0, p) for p in pre.split("."))
    return (major, minor, patch, 0, parts)


def is_prerelease(version: str) -> bool:
    match = SEMVER.fullmatch(version)
    return bool(match and match[4])
