"""Argument value types: each turns one command-line word into the value the API expects, or explains the form.

They raise :class:`argparse.ArgumentTypeError`, so a malformed value is a usage error (exit code 2) that names the
expected form, before anything is sent to the service. Names and versions follow the service's rules
(:mod:`packyard_cli.rules`).
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from typing import Any

from packyard_cli import rules

SCOPE_KINDS = ("workspace", "task", "session", "repository")


@dataclass(frozen=True)
class ReleaseRef:
    """``PACKAGE@VERSION``, ``PACKAGE@latest`` or a bare ``PACKAGE`` (``version`` None: the newest published)."""

    package: str
    version: str | None

    def __str__(self) -> str:
        return f"{self.package}@{self.version or rules.LATEST}"

    def __iter__(self) -> Any:  # package, version = ref
        return iter((self.package, self.version))


def release_ref(text: str) -> ReleaseRef:
    package, at, version = text.partition("@")
    problem = rules.package_problem(package) if package else f"expected PACKAGE[@VERSION], got {text!r}"
    if problem:
        raise argparse.ArgumentTypeError(problem)
    if not at or version == rules.LATEST:
        return ReleaseRef(package, None)
    problem = rules.version_problem(version) if version else f"a version after '@': {package}@1.2.3 or {package}@latest"
    if problem:
        raise argparse.ArgumentTypeError(problem)
    return ReleaseRef(package, version)


def exact_release(text: str) -> ReleaseRef:
    """``PACKAGE@VERSION`` with an exact version (yank: never 'the newest')."""
    ref = release_ref(text)
    if ref.version is None:
        raise argparse.ArgumentTypeError(f"name the exact version: {ref.package}@1.2.3 (not a bare name or @latest)")
    return ref


def package_at_version(text: str) -> tuple[str, str]:
    """``PACKAGE@VERSION`` as a pair (an exact version)."""
    ref = exact_release(text)
    assert ref.version is not None
    return ref.package, ref.version


def package_name(text: str) -> str:
    problem = rules.package_problem(text)
    if problem:
        raise argparse.ArgumentTypeError(problem)
    return text


def version(text: str) -> str:
    problem = rules.version_problem(text)
    if problem:
        raise argparse.ArgumentTypeError(problem)
    return text


def installation_id(text: str) -> str:
    problem = rules.installation_problem(text)
    if problem:
        raise argparse.ArgumentTypeError(problem)
    return text


def workspace_id(text: str) -> str:
    problem = rules.workspace_problem(text)
    if problem:
        raise argparse.ArgumentTypeError(problem)
    return text


def scope_value(text: str) -> dict[str, str]:
    kind, _, ident = text.partition(":")
    if kind not in SCOPE_KINDS:
        raise argparse.ArgumentTypeError(f"scope kind must be one of {', '.join(SCOPE_KINDS)}; got {kind!r}")
    if kind == "workspace":
        if ident:
            raise argparse.ArgumentTypeError("a workspace scope takes no id")
        return {"kind": "workspace"}
    if not ident:
        raise argparse.ArgumentTypeError(f"a {kind} scope needs an id: {kind}:ID")
    return {"kind": kind, "id": ident}


def json_object(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"not JSON: {exc}") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError("expected a JSON object")
    return value


def permission(text: str) -> dict[str, str]:
    kind, _, resource = text.partition(":")
    if not kind:
        raise argparse.ArgumentTypeError("expected KIND[:RESOURCE], e.g. network:api.example.com")
    if kind not in rules.PERMISSION_KINDS:
        raise argparse.ArgumentTypeError(
            f"permission kind {kind!r} is not one of {', '.join(rules.PERMISSION_KINDS)} (KIND[:RESOURCE])"
        )
    return {"kind": kind, "resource": resource or "*"}


def key_value(text: str) -> tuple[str, str]:
    key, eq, value = text.partition("=")
    if not eq or not key:
        raise argparse.ArgumentTypeError("expected KEY=VALUE")
    return key, value


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError("expected 1 or more")
    return value
