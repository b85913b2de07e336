"""The ``packyard`` command line: every command, its arguments and help, and the handler it runs.

Global options (``--endpoint``, ``--profile``, ``--output``, ``--query`` …) are accepted before or after the command.
The values of typed arguments are checked by :mod:`packyard_cli.arguments` (with the service's naming rules); the
handlers live in :mod:`packyard_cli.commands`. A mistyped command or choice gets a suggestion.
"""

from __future__ import annotations

import argparse
import difflib
import re
from collections.abc import Callable
from typing import Any, NoReturn

from packyard_cli import __version__
from packyard_cli.arguments import (
    exact_release,
    installation_id,
    json_object,
    key_value,
    package_name,
    permission,
    positive_int,
    release_ref,
    scope_value,
    version,
    workspace_id,
)
from packyard_cli.commands.context import Context
from packyard_cli.commands.events import cmd_events
from packyard_cli.commands.files import cmd_cat
from packyard_cli.commands.installations import (
    cmd_approvals,
    cmd_approve,
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
from packyard_cli.commands.login import cmd_login, cmd_logout
from packyard_cli.commands.maintenance import cmd_sweep, cmd_usage, cmd_whoami
from packyard_cli.commands.publishing import cmd_build, cmd_publish, cmd_pull, cmd_releases, cmd_yank
from packyard_cli.commands.setup import cmd_completion, cmd_init, cmd_profiles
from packyard_cli.commands.signing import add_signing_commands
from packyard_cli.commands.sync import byte_size, cmd_sync
from packyard_cli.completion import SHELLS
from packyard_cli.output import FORMATS
from packyard_cli.ports import DEFAULT_API_PORT, add_local_arguments

Handler = Callable[[Context, argparse.Namespace], int]
AddCommand = Callable[[str, str, Handler], argparse.ArgumentParser]

# Words people reach for, and the command that does it.
ALIASES = {
    "list": "ls",
    "installed": "ls",
    "remove": "uninstall",
    "rm": "uninstall",
    "delete": "uninstall",
    "upgrade": "update",
    "download": "pull",
    "fetch": "pull",
    "get": "pull",
    "upload": "publish",
    "push": "publish",
    "release": "releases",
    "versions": "releases",
    "show": "releases",
    "search": "releases",
    "packages": "releases",
    "auth": "login",
    "signin": "login",
    "signout": "logout",
    "config": "profiles",
    "configure": "profiles",
    "profile": "profiles",
    "new": "init",
    "create": "init",
    "serve": "local",
    "server": "local",
    "plan": "preview",
    "undo": "rollback",
    "operation": "status",
    "consent": "approve",
    "accept": "approve",
    "allow": "approve",
    "deny": "approve",
    "pending": "approvals",
}

EPILOG = """\
exit codes:
  0 ok   1 error   2 usage (bad arguments or local input)   3 refused (the service said no; retrying will not help)
  4 conflict (409/412/428: the state moved; re-read, then decide)   5 unavailable (transient: retry the same command)
  6 not found (404)   7 unauthorized (401/403: no or a refused token, or a missing scope)
  verify: 10 tampered envelope   11 wrong key   12 unknown key id   13 subject mismatch

where the API is: --endpoint, else $PACKYARD_ENDPOINT, else the profile's endpoint, else the running local stack.
the token: --token, else $PACKYARD_TOKEN, else the profile's token_command, else its packyard login token, else
(local stack) one minted locally.
profiles: [profiles.NAME] tables in $PACKYARD_CONFIG_FILE or ~/.config/packyard/config.toml (packyard profiles).
"""


class Parser(argparse.ArgumentParser):
    """argparse with suggestions: a mistyped command or choice gets 'did you mean …?'."""

    def error(self, message: str) -> NoReturn:
        match = re.search(r"invalid choice: '([^']*)' \(choose from (.*)\)", message)
        if match:
            wrong, choices = match.group(1), re.findall(r"'([^']*)'", match.group(2))
            is_command = message.startswith("argument COMMAND")
            alias = ALIASES.get(wrong.lower()) if is_command else None
            guesses = [alias] if alias else difflib.get_close_matches(wrong, choices, n=1, cutoff=0.6)
            what = "a packyard command" if is_command else "one of the choices"
            text = f"{self.prog}: {wrong!r} is not {what}."
            if guesses:
                text += f" Did you mean {guesses[0]!r}?"
            text += f"\n{'commands' if is_command else 'choices'}: {', '.join(choices)}"
            if is_command:
                text += "\n(packyard --help describes them)"
            self.exit(2, text + "\n")
        self.exit(2, f"{self.prog}: {message}\n(see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="packyard",
        description="Publish immutable packages and install them into workspaces.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", "-V", action="version", version=f"packyard {__version__}")
    _common(parser, top=True)
    common = Parser(add_help=False)
    _common(common, top=False)
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True, parser_class=Parser)

    def command(name: str, help_text: str, handler: Handler) -> argparse.ArgumentParser:
        sub = commands.add_parser(
            name,
            help=help_text,
            description=help_text,
            parents=[common],
            epilog=EPILOG,
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        sub.set_defaults(handler=handler)
        return sub

    _local_commands(command)
    _publishing_commands(command)
    add_signing_commands(command)
    _installation_commands(command)
    _setup_commands(command)
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
        help="API base URL (default: $PACKYARD_ENDPOINT, the profile's, else the running local stack, else "
        f"http://127.0.0.1:{DEFAULT_API_PORT})",
    )
    group.add_argument(
        "--token",
        default=default(None),
        help="bearer token (default: $PACKYARD_TOKEN, the profile's token_command or packyard login; locally: minted)",
    )
    group.add_argument(
        "--profile", default=default(None), help="a profile of the config file (default: $PACKYARD_PROFILE or default)"
    )
    group.add_argument(
        "--tenant", default=default(None), help="tenant of tokens minted locally (default: $PACKYARD_TENANT or local)"
    )
    group.add_argument(
        "--state-dir",
        default=default(None),
        help="local stack state (key, address; default: $PACKYARD_LOCAL_DIR or <repo>/.packyard-local)",
    )
    group.add_argument(
        "--output",
        "-o",
        choices=FORMATS,
        default=default(None),
        help="table (default), json (the API's JSON) or tsv (tab-separated, no header)",
    )
    group.add_argument("--json", action="store_true", default=default(False), help="the same as --output json")
    group.add_argument(
        "--query", default=default(None), metavar="JMESPATH", help="JMESPath over the JSON result, as with aws"
    )
    group.add_argument(
        "--verbose", "-v", action="store_true", default=default(False), help="log each HTTP request on stderr"
    )


def _listing(parser: argparse.ArgumentParser, *, resumable: bool = True) -> None:
    parser.add_argument(
        "--max-items", type=positive_int, metavar="N", help="stop after N items (a note on stderr says when it cuts)"
    )
    if resumable:
        parser.add_argument("--starting-token", metavar="TOKEN", help="continue a cut listing (its nextToken)")


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
        parser.add_argument("workspace_arg", nargs="?", type=workspace_id, metavar="WORKSPACE", help="the workspace")
    parser.add_argument("--workspace", "-w", type=workspace_id, required=not positional, help="the workspace")


def _install_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "release",
        type=release_ref,
        metavar="PACKAGE[@VERSION]",
        help="a bare name or PACKAGE@latest: the newest published version",
    )
    _workspace(parser)
    parser.add_argument("--id", type=installation_id, help="installation id (default: the package name)")
    parser.add_argument("--scope", type=scope_value, help="workspace (default), task:ID, session:ID or repository:ID")
    parser.add_argument("--config", type=json_object, help="installation config as a JSON object")
    parser.add_argument(
        "--intent",
        choices=("install-or-select", "create-only", "install-or-remint"),
        default="install-or-select",
        help="default: %(default)s",
    )
    parser.add_argument("--plan-digest", help="require exactly the plan a preview returned")


def _package_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--permission",
        type=permission,
        action="append",
        help="declare KIND[:RESOURCE] (repeatable; replaces packyard.toml's permissions)",
    )
    parser.add_argument(
        "--metadata", type=key_value, action="append", help="manifest metadata KEY=VALUE (repeatable; added)"
    )
    parser.add_argument(
        "--follow-links",
        action="store_true",
        help="pack a symbolic link to a file inside the folder as that file's bytes (default: links are refused)",
    )


# ------------------------------------------------------------------ commands, by group (in `packyard --help` order)


def _local_commands(command: AddCommand) -> None:
    local = command(
        "local", "serve the whole stack on 127.0.0.1 (moto + HTTP API); it keeps nothing: Ctrl-C forgets it", cmd_local
    )
    add_local_arguments(local, verbose=False)  # the global --verbose also shows moto's AWS calls

    token = command("token", "mint a token for the local stack (signed with its local key)", cmd_token)
    token.add_argument("--subject", "--sub", default="me", help="the sub claim (default: %(default)s)")
    token.add_argument(
        "--scope",
        action="append",
        metavar="SCOPE",
        help="a scope the token carries (repeatable; default: all of them: packages:read packages:publish "
        "packages:yank workspaces:read installations:write approvals:write usage:read)",
    )
    token.add_argument(
        "--actor",
        choices=("owner", "workflow"),
        default="owner",
        help="owner (a person: may approve what a release asks) or workflow (an automation: may only keep or "
        "narrow grants); default: %(default)s",
    )
    token.add_argument("--ttl", type=int, default=3600, help="lifetime in seconds (default: %(default)s)")
    token.add_argument(
        "--like",
        choices=("cognito", "auth0", "okta", "entra", "keycloak"),
        help="shape the token like that identity provider's (the stack must read it: packyard local --idp NAME)",
    )

    sweep = command(
        "sweep", "run every maintenance sweep once on the local stack (the schedule does it on AWS)", cmd_sweep
    )
    events = command(
        "events",
        "the change events the local stack's event bus received (Release Published/Yanked/Unavailable, Operation "
        "Settled); --follow waits for more",
        cmd_events,
    )
    events.add_argument("--follow", "-f", action="store_true", help="keep printing new events until Ctrl-C")
    events.add_argument(
        "--type",
        action="append",
        metavar="TYPE",
        choices=("Release Published", "Release Yanked", "Release Unavailable", "Operation Settled"),
        help="only events of this detail type (repeatable)",
    )
    usage = command("usage", "the tenant's stored bytes, and a workspace's, against their quotas", cmd_usage)
    command(
        "whoami",
        "the principal the service read from the token: tenant, subject, actor, scopes (GET /v1/me)",
        cmd_whoami,
    )
    usage.add_argument("workspace", nargs="?", metavar="WORKSPACE", help="also this workspace's usage")

    sweep.add_argument(
        "--at",
        metavar="TIME",
        help="sweep as if at TIME: +30m, +2h, +1d from now, or an RFC 3339 time (default: now)",
    )


def _publishing_commands(command: AddCommand) -> None:
    build = command("build", "build a deterministic archive and manifest from a package folder", cmd_build)
    build.add_argument("directory", metavar="DIR")
    build.add_argument(
        "--out",
        help="output path prefix (default: ./NAME-VERSION or ./<DIR name>): PREFIX.tar.gz, PREFIX.manifest.json",
    )
    build.add_argument("--list", action="store_true", help="list the files it would pack and those it ignores")
    _package_flags(build)

    publish = command("publish", "build, upload, verify and publish a release", cmd_publish)
    publish.add_argument("directory", metavar="DIR", nargs="?", help="the package folder (with its packyard.toml)")
    publish.add_argument("--package", "-p", type=package_name, help="package name (default: packyard.toml's name)")
    publish.add_argument("--version", type=version, help="version (default: packyard.toml's version)")
    _package_flags(publish)
    publish.add_argument(
        "--list", action="store_true", help="print every path the ignore rules leave out (default: the first few)"
    )
    publish.add_argument("--archive", help="publish a prebuilt archive (with --manifest and --package, --version)")
    publish.add_argument("--manifest", help="the prebuilt archive's manifest (JSON)")
    publish.add_argument(
        "--idempotency-key",
        help="default: a fresh UUID per command, kept across its retries; the same key with the same request "
        "answers the same upload session",
    )
    _waiting(publish)

    releases = command(
        "releases", "list packages, a package's versions, or show PACKAGE@VERSION (or @latest)", cmd_releases
    )
    releases.add_argument("package_or_release", nargs="?", metavar="PACKAGE[@VERSION]")
    _listing(releases)

    pull = command("pull", "download a release's archive and verify its sha256 against the release", cmd_pull)
    pull.add_argument("release", type=release_ref, metavar="PACKAGE[@VERSION]", help="a bare name: the newest")
    pull.add_argument("--out", help="file, or folder (ending in /), to write (default: ./PACKAGE-VERSION.tar.gz)")

    cat = command("cat", "print one file of a release, or of an installation's active release, verified", cmd_cat)
    cat.add_argument("target", metavar="PACKAGE@VERSION|INSTALLATION", help="a release, or an installation with -w")
    cat.add_argument("path", metavar="PATH", help="the file's path in the release, e.g. src/main.py")
    cat.add_argument("--workspace", "-w", type=workspace_id, help="read an installation of this workspace")

    yank = command("yank", "yank a release (its version is never reused)", cmd_yank)
    yank.add_argument("release", type=exact_release, metavar="PACKAGE@VERSION")


def _installation_commands(command: AddCommand) -> None:
    install = command("install", "install a release into a workspace", cmd_install)
    _install_options(install)
    _mutating(install)

    update = command("update", "move an installation to another release (a bare name: the newest)", cmd_update)
    _install_options(update)
    _mutating(update)

    for name, help_text, handler in (
        ("uninstall", "uninstall an installation", cmd_uninstall),
        ("rollback", "roll an installation back to its previous release", cmd_rollback),
    ):
        sub = command(name, help_text, handler)
        sub.add_argument(
            "installation",
            type=installation_id,
            metavar="INSTALLATION",
            help="the installation id (by default the package name)",
        )
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

    approvals = command("approvals", "list what waits for an owner's approval in a workspace", cmd_approvals)
    _workspace(approvals, positional=True)
    _listing(approvals)

    approve = command(
        "approve", "approve (or --reject) the permissions an installation's operation waits on", cmd_approve
    )
    approve.add_argument("installation", type=installation_id, metavar="INSTALLATION")
    _workspace(approve)
    approve.add_argument("--reject", action="store_true", help="reject instead: the operation settles refused")
    approve.add_argument("--plan-digest", help="the exact plan to decide (default: the one waiting)")
    approve.add_argument("--idempotency-key", help="default: a fresh UUID per command, kept across its retries")
    _waiting(approve)

    ls = command("ls", "list a workspace's installations", cmd_ls)
    _workspace(ls, positional=True)
    _listing(ls)

    resolved = command("resolved", "what a runtime loads: active releases, digests, grants", cmd_resolved)
    _workspace(resolved, positional=True)
    _listing(resolved, resumable=False)

    sync = command(
        "sync", "make DIR hold what the workspace resolves to, one folder per installation (or --check it)", cmd_sync
    )
    sync.add_argument("workspace_arg", type=workspace_id, metavar="WORKSPACE", help="the workspace")
    sync.add_argument("directory", metavar="DIR", help="the folder a runtime loads (created if missing)")
    sync.add_argument(
        "--check", action="store_true", help="hash DIR against the resolved view, change nothing; exit 4 on drift"
    )
    sync.add_argument(
        "--cache", metavar="DIR", help="the file cache (default: $PACKYARD_CACHE_DIR or ~/.cache/packyard/files)"
    )
    sync.add_argument("--cache-size", type=byte_size, metavar="SIZE", help="bound of the cache (default: 1G)")
    sync.add_argument(
        "--keys",
        metavar="FILE",
        help="verify every release's signed statement against this JWK Set before writing it (default: the "
        "profile's pinned keys, packyard keys pin; none pinned: not checked, a note says so)",
    )


def _setup_commands(command: AddCommand) -> None:
    init = command("init", "make a package folder: packyard.toml and .packyardignore", cmd_init)
    init.add_argument("directory", metavar="DIR", nargs="?", default=".", help="the folder (default: here)")
    init.add_argument("--name", type=package_name, help="package name (default: from the folder's name)")
    init.add_argument("--version", type=version, help="first version (default: 0.1.0)")
    init.add_argument("--permission", type=permission, action="append", help="declare KIND[:RESOURCE] (repeatable)")
    init.add_argument("--description", help="metadata.description")
    init.add_argument("--force", action="store_true", help="replace an existing packyard.toml")

    command("profiles", "list the profiles of the config file, and which one is in use", cmd_profiles)

    login = command(
        "login",
        "sign in through your identity provider (a browser, PKCE) or as a machine (--client-credentials); the "
        "token is cached for the profile and renewed before it expires",
        cmd_login,
    )
    login.add_argument(
        "--issuer", help="OpenID Connect issuer URL (default: $PACKYARD_ISSUER, the profile's; locally: the stack's)"
    )
    login.add_argument("--client-id", help="the app client (default: $PACKYARD_CLIENT_ID, the profile's client_id)")
    login.add_argument(
        "--scope",
        action="append",
        metavar="SCOPE",
        help="a scope to ask for (repeatable; default: the profile's scopes, else every Packyard scope)",
    )
    login.add_argument("--audience", help="the API audience to ask for (Auth0 needs it; default: the profile's)")
    login.add_argument(
        "--client-credentials",
        action="store_true",
        help="sign in a machine: the client credentials grant, the secret read from --client-secret-env or "
        "--client-secret-file (never an argument)",
    )
    login.add_argument(
        "--client-secret-env",
        metavar="NAME",
        default="PACKYARD_CLIENT_SECRET",
        help="environment variable holding the client secret (default: %(default)s)",
    )
    login.add_argument("--client-secret-file", metavar="PATH", help="file holding the client secret")
    login.add_argument(
        "--no-browser",
        action="store_true",
        help="print the sign-in address only (open it yourself); do not launch a browser",
    )
    login.add_argument(
        "--redirect-uri",
        metavar="URI",
        help="the loopback address the browser comes back to (default: the profile's redirect_uri, else "
        "http://127.0.0.1:<a free port>/callback; Cognito: http://localhost:PORT/callback as registered)",
    )
    login.add_argument(
        "--timeout", type=float, default=300.0, help="seconds to wait for the browser sign-in (default: %(default)s)"
    )
    command("logout", "remove the profile's cached sign-in (and revoke its refresh token at the issuer)", cmd_logout)

    completion = command("completion", "print a shell completion script (bash, zsh or fish)", cmd_completion)
    completion.add_argument("shell", choices=SHELLS)
