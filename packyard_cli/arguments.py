"""Argument value types: each turns one command-line word into the value the API expects, or explains the form.

They raise :class:`argparse.ArgumentTypeError`, so a malformed value is a usage error (exit code 2) that names the
expected form, before anything is sent to the service.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

SCOPE_KINDS = ("workspace", "task", "session", "repository")


def package_at_version(text: str) -> tuple[str, str]:
    package, at, version = text.partition("@")
    if not at or not package or not version:
        raise argparse.ArgumentTypeError(f"expected PACKAGE@VERSION, got {text!r}")
    return package, version


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
    return {"kind": kind, "resource": resource or "*"}


def key_value(text: str) -> tuple[str, str]:
    key, eq, value = text.partition("=")
    if not eq or not key:
        raise argparse.ArgumentTypeError("expected KEY=VALUE")
    return key, value
