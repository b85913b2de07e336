"""The ``packyard`` command line: every command, its arguments and help, and the handler it runs.

Global options (``--endpoint``, ``--token``, ``--json`` …) are accepted before or after the command. The values of
typed arguments are checked by :mod:`packyard_cli.arguments`; the handlers live in :mod:`packyard_cli.commands`.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from packyard_cli import __version__
from packyard_cli.arguments import json_object, key_value, package_at_version, permission, scope_value
from packyard_cli.commands.context import Context
from packyard_cli.commands.installations import (
    cmd_install,
    cmd_ls,
    cmd_preview,
    cmd_resolved,
    cmd_rollback,
    cmd_status,
    cmd_uninstall,
    cmd_update,
)
from packyard_cli.commands.local import cmd_local, cmd_token
from packyard_cli.commands.publishing import cmd_build, cmd_publish, cmd_releases, cmd_yank
from packyard_cli.ports import DEFAULT_API_PORT, add_local_arguments

Handler = Callable[[Context, argparse.Namespace], int]
AddCommand = Callable[[str, str, Handler], argparse.ArgumentParser]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="packyard",
        description="Publish immutable packages and install them into workspaces.",
        epilog="Exit codes: 0 ok, 1 error, 2 usage, 3 refused, 4 conflict, 5 unavailable.",
    )
    parser.add_argument("--version", action="version", version=f"packyard {__version__}")
    _common(parser, top=True)
    common = argparse.ArgumentParser(add_help=False)
    _common(common, top=False)
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    def command(name: str, help_text: str, handler: Handler) -> argparse.ArgumentParser:
        sub = commands.add_parser(name, help=help_text, description=help_text, parents=[common])
        sub.set_defaults(handler=handler)
        return sub

    _local_commands(command)
    _publishing_commands(command)
    _installation_commands(command)
    return parser


# ------------------------------------------------------------------ option groups


def _common(parser: argparse.ArgumentParser, *, top: bool) -> None:
    """Global options, accepted before or after the command (a command's copy never overrides with a default)."""

    def default(value: Any) -> Any:
        return value if top else argparse.SUPPRESS

    group = parser.add_argument_group("global options")
    group.add_argument(
        "--endpoint",
        default=default(None),
        help="API base URL (default: $PACKYARD_ENDPOINT, else the running local stack, else "
        f"http://127.0.0.1:{DEFAULT_API_PORT})",
    )
    group.add_argument(
        "--token", default=default(None), help="bearer token (default: $PACKYARD_TOKEN; locally: minted)"
    )
    group.add_argument(
        "--tenant", default=default(None), help="tenant of tokens minted locally (default: $PACKYARD_TENANT or local)"
    )
    group.add_argument(
        "--state-dir",
        default=default(None),
        help="local stack state (key, address; default: $PACKYARD_LOCAL_DIR or <repo>/.packyard-local)",
    )
    group.add_argument("--json", action="store_true", default=default(False), help="print JSON for scripts")


def _waiting(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--no-wait", action="store_true", help="return once accepted; do not wait for the outcome")
    parser.add_argument("--wait-timeout", type=float, default=120.0, help="seconds to wait (default: %(default)s)")


def _mutating(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--idempotency-key",
        help="default: a fresh UUID per command, kept across its retries; a replay sends the same key with the "
        "same request (same --if-match)",
    )
    parser.add_argument("--if-match", help="installation version to require (default: the one just read), e.g. 3")
    parser.add_argument("--origin", choices=("owner", "workflow"), default="owner", help="default: %(default)s")
    _waiting(parser)


def _workspace(parser: argparse.ArgumentParser, *, positional: bool = False) -> None:
    if positional:
        parser.add_argument("workspace_arg", nargs="?", metavar="WORKSPACE", help="the workspace")
    parser.add_argument("--workspace", "-w", required=not positional, help="the workspace")


def _install_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("release", type=package_at_version, metavar="PACKAGE@VERSION")
    _workspace(parser)
    parser.add_argument("--id", help="installation id (default: the package name)")
    parser.add_argument("--scope", type=scope_value, help="workspace (default), task:ID, session:ID or repository:ID")
    parser.add_argument("--config", type=json_object, help="installation config as a JSON object")
    parser.add_argument(
        "--intent",
        choices=("install-or-select", "create-only", "install-or-remint"),
        default="install-or-select",
        help="default: %(default)s",
    )
    parser.add_argument("--plan-digest", help="require exactly the plan a preview returned")


# ------------------------------------------------------------------ commands, by group (in `packyard --help` order)


def _local_commands(command: AddCommand) -> None:
    local = command("local", "serve the whole stack on 127.0.0.1 (moto + HTTP API); Ctrl-C stops it", cmd_local)
    add_local_arguments(local)

    token = command("token", "mint a token for the local stack (signed with its local key)", cmd_token)
    token.add_argument("--subject", "--sub", default="me", help="the sub claim (default: %(default)s)")
    token.add_argument(
        "--scope", action="append", help="a scope (repeatable; default: packyard/publish packyard/install)"
    )
    token.add_argument("--ttl", type=int, default=3600, help="lifetime in seconds (default: %(default)s)")


def _publishing_commands(command: AddCommand) -> None:
    build = command("build", "build a deterministic archive and manifest from a folder", cmd_build)
    build.add_argument("directory", metavar="DIR")
    build.add_argument("--out", help="output path prefix (default: ./<DIR name>): PREFIX.tar.gz, PREFIX.manifest.json")
    build.add_argument("--permission", type=permission, action="append", help="declare KIND[:RESOURCE] (repeatable)")
    build.add_argument("--metadata", type=key_value, action="append", help="manifest metadata KEY=VALUE (repeatable)")

    publish = command("publish", "build, upload, verify and publish a release", cmd_publish)
    publish.add_argument("directory", metavar="DIR", nargs="?", help="folder to package")
    publish.add_argument("--package", "-p", required=True)
    publish.add_argument("--version", "-v", required=True)
    publish.add_argument("--permission", type=permission, action="append", help="declare KIND[:RESOURCE] (repeatable)")
    publish.add_argument("--metadata", type=key_value, action="append", help="manifest metadata KEY=VALUE (repeatable)")
    publish.add_argument("--archive", help="publish a prebuilt archive (with --manifest) instead of DIR")
    publish.add_argument("--manifest", help="the prebuilt archive's manifest (JSON)")
    _waiting(publish)

    releases = command("releases", "list packages, a package's versions, or show PACKAGE@VERSION", cmd_releases)
    releases.add_argument("package_or_release", nargs="?", metavar="PACKAGE[@VERSION]")

    yank = command("yank", "yank a release (its version is never reused)", cmd_yank)
    yank.add_argument("release", type=package_at_version, metavar="PACKAGE@VERSION")


def _installation_commands(command: AddCommand) -> None:
    install = command("install", "install a release into a workspace", cmd_install)
    _install_options(install)
    _mutating(install)

    update = command("update", "move an installation to another release", cmd_update)
    _install_options(update)
    _mutating(update)

    for name, help_text, handler in (
        ("uninstall", "uninstall an installation", cmd_uninstall),
        ("rollback", "roll an installation back to its previous release", cmd_rollback),
    ):
        sub = command(name, help_text, handler)
        sub.add_argument("installation", metavar="INSTALLATION")
        _workspace(sub)
        _mutating(sub)

    preview = command("preview", "show the plan an install/update would commit, without changing anything", cmd_preview)
    _install_options(preview)
    preview.add_argument("--origin", choices=("owner", "workflow"), default="owner", help="default: %(default)s")

    status = command("status", "show an operation (and its outcome)", cmd_status)
    status.add_argument("operation", metavar="OPERATION")
    _workspace(status)
    status.add_argument("--wait", action="store_true", help="wait until it settles")
    status.add_argument("--wait-timeout", type=float, default=120.0)

    ls = command("ls", "list a workspace's installations", cmd_ls)
    _workspace(ls, positional=True)

    resolved = command("resolved", "what a runtime loads: active releases, digests, grants", cmd_resolved)
    _workspace(resolved, positional=True)
