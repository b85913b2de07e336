"""What every command shares: the parsed arguments and consoles (:class:`Context`), where the API is and which
token to send (flags, environment, profile, the local stack), output in the chosen format, paging through a
listing, resolving ``PACKAGE@latest``, and waiting for an upload or operation.
"""

from __future__ import annotations

import argparse
import base64
import binascii
import json
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from packyard_cli import output as fmt
from packyard_cli.arguments import ReleaseRef
from packyard_cli.client import EXIT_NOT_FOUND, EXIT_UNAVAILABLE, EXIT_USAGE, Client, CliError, segment
from packyard_cli.ports import DEFAULT_API_PORT
from packyard_cli.profiles import DEFAULT_PROFILE, Profile, run_token_command, select

LOCAL_HOSTS = frozenset({"127.0.0.1", "localhost", "::1", "[::1]"})
PAGE_SIZE = 100


@dataclass
class Context:
    """One per command run. The client is made on first use, so commands that never call the API (``build``,
    ``token``, ``local``) never resolve an endpoint or mint a token."""

    args: argparse.Namespace
    out: Any  # rich Console on stdout
    err: Any  # rich Console on stderr (spinners, progress, errors)
    _client: Client | None = field(default=None, repr=False)
    _token: str | None = field(default=None, repr=False)
    _token_source: str = field(default="none", repr=False)  # flag, env, token_command, login, minted, none
    _profile: Profile | None = field(default=None, repr=False)

    # ---------------------------------------------------------------- settings

    @property
    def profile(self) -> Profile:
        if self._profile is None:
            self._profile = select(getattr(self.args, "profile", None))
        return self._profile

    @property
    def output(self) -> str:
        chosen = getattr(self.args, "output", None)
        if getattr(self.args, "json", False):
            chosen = "json"
        if chosen is None:
            env = os.environ.get("PACKYARD_OUTPUT")
            chosen = env if env in fmt.FORMATS else None
        return str(chosen or self.profile.output or "table")

    @property
    def query(self) -> str | None:
        value = getattr(self.args, "query", None)
        return str(value) if value else None

    @property
    def json(self) -> bool:
        """Machine output on stdout (json or tsv, or any --query): no notes, no human rendering."""
        return self.output != "table" or self.query is not None

    @property
    def endpoint(self) -> str:
        return str(
            self.args.endpoint
            or os.environ.get("PACKYARD_ENDPOINT")
            or self.profile.endpoint
            or default_endpoint(self.args.state_dir)
        )

    @property
    def client(self) -> Client:
        if self._client is None:
            log = self.log if getattr(self.args, "verbose", False) else None
            self._client = Client(self.endpoint, token=self.bearer_token, log=log)
        return self._client

    def bearer_token(self) -> str | None:
        if self._token is None:
            self._token, self._token_source = token_and_source(self.args, self.endpoint, self.profile)
        return self._token or None

    def with_next_step(self, error: CliError) -> CliError:
        """A 401 to a call sent with no token, or with ``packyard login``'s: say how to sign in."""
        if error.status != 401 or self._token is None or self._token_source not in ("login", "none"):
            return error
        step = (
            "run packyard login to sign in again"
            if self._token_source == "login"
            else "sign in with packyard login, or pass --token / $PACKYARD_TOKEN"
        )
        error.detail = f"{error.detail}; {step}" if error.detail else step
        return error

    # ---------------------------------------------------------------- printing

    def show(
        self,
        data: Any,
        *,
        render: Callable[[], None] | None = None,
        columns: Sequence[fmt.Column] = (),
        items: Sequence[dict[str, Any]] | None = None,
        empty: str = "",
    ) -> None:
        """Print a command's result in the chosen format. ``data`` is the JSON (what ``--query`` sees); the table
        is ``render()`` when given, else ``columns`` over ``items``; tsv is ``columns`` over ``items``."""
        if self.query is not None:
            result = fmt.apply_query(data, self.query)
            if self.output == "json":
                print(json.dumps(result, indent=2))
            elif self.output == "tsv":
                for line in fmt.generic_tsv(result):
                    print(line)
            else:
                headers, rows = fmt.generic_rows(result)
                if rows:
                    self.print_table(fmt.make_table(headers, rows))
            return
        if self.output == "json":
            print(json.dumps(data, indent=2))
            return
        if items is None:
            listed = data.get("items") if isinstance(data, dict) else None
            items = listed if isinstance(listed, list) else ([data] if isinstance(data, dict) else [])
        if self.output == "tsv":
            for line in fmt.tsv_lines(fmt.rows_of(items, columns)):
                print(line)
            return
        if render is not None:
            render()
        elif items:
            self.print_table(fmt.make_table(columns, fmt.rows_of(items, columns, brief=True)))
        elif empty:
            self.out.print(empty, highlight=False)

    def print_table(self, table: Any) -> None:
        """A table at the terminal's width, or wider when that would cut a key column (the terminal then wraps
        whole lines instead)."""
        needed = int(getattr(table, "needed_width", 0))
        width = self.out.width
        if needed <= width:
            self.out.print(table)
            return
        self.out.width = needed
        try:
            self.out.print(table)
        finally:
            self.out.width = width

    def emit(self, body: Any, render: Callable[[], None]) -> None:
        self.show(body, render=render)

    def note(self, text: str) -> None:
        """Human progress on stdout (table output without --query only)."""
        if not self.json:
            self.out.print(text, highlight=False, soft_wrap=True)

    def warn(self, text: str) -> None:
        """Something a script's author must see too (a listing cut short): always, on stderr."""
        from rich.markup import escape

        self.err.print(f"[yellow]note:[/] {escape(text)}", highlight=False, soft_wrap=True)

    def log(self, text: str) -> None:
        from rich.markup import escape

        self.err.print(f"[dim]{escape(text)}[/]", highlight=False, soft_wrap=True)

    def status(self, text: str) -> Any:
        """A spinner on a terminal; nothing when stderr is a pipe or a file (logs stay clean)."""
        if self.json or not self.err.is_terminal:
            return _Quiet()
        return self.err.status(text, spinner="dots")


class _Quiet:
    def __enter__(self) -> _Quiet:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def update(self, *args: Any, **kwargs: Any) -> None:
        return None


# ------------------------------------------------------------------ endpoint and token


def default_endpoint(state_dir: str | None = None) -> str:
    """The running local stack (its local.json), else the local default port."""
    from packyard_cli import tokens

    state = tokens.read_state(state_dir)
    if state and isinstance(state.get("api"), str) and _alive(state.get("pid")):
        return str(state["api"])
    return f"http://127.0.0.1:{DEFAULT_API_PORT}"


def _alive(pid: Any) -> bool:
    if not isinstance(pid, int) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def is_local(endpoint: str) -> bool:
    return (urlsplit(endpoint).hostname or "") in LOCAL_HOSTS


def local_stack_aws(
    args: argparse.Namespace, entry: str, service: str, *, missing: str, elsewhere: str
) -> tuple[Any, str]:
    """A boto3 client of ``service`` on the running local stack's moto, and what its local.json names ``entry`` (a
    state machine, a log group). Unavailable when no local stack with it runs: ``missing`` says what is not running,
    ``elsewhere`` what does its work on AWS."""
    from packyard_cli import tokens

    state = tokens.read_state(getattr(args, "state_dir", None)) or {}
    named, aws = state.get(entry), state.get("aws")
    if not isinstance(named, str) or not isinstance(aws, str):
        raise CliError(
            f"no local stack {missing} is running",
            code="unavailable",
            detail=f"start one with: make serve (or packyard local); {elsewhere}",
            exit_code=EXIT_UNAVAILABLE,
        )
    import boto3
    from botocore.config import Config

    # no operation's host prefix on a local endpoint (StartSyncExecution's "sync-" would name another host)
    aws_client = boto3.client(
        service,
        endpoint_url=aws,
        region_name="us-east-1",
        aws_access_key_id="x",
        aws_secret_access_key="x",
        config=Config(inject_host_prefix=False),
    )
    return aws_client, named


def resolve_token(args: argparse.Namespace, endpoint: str, profile: Profile | None = None) -> str:
    """--token, else $PACKYARD_TOKEN, else the profile's token_command, else the profile's ``packyard login``
    token for this endpoint, else (local stack only) a token minted with the local key, carrying every scope."""
    return token_and_source(args, endpoint, profile)[0]


def token_and_source(args: argparse.Namespace, endpoint: str, profile: Profile | None = None) -> tuple[str, str]:
    """:func:`resolve_token`'s token, and where it came from (flag, env, token_command, login, minted, none)."""
    if args.token:
        return str(args.token), "flag"
    if os.environ.get("PACKYARD_TOKEN"):
        return os.environ["PACKYARD_TOKEN"], "env"
    if profile is not None and profile.token_command:
        return run_token_command(profile), "token_command"
    from packyard_cli import credentials

    signed_in = credentials.token_for(profile.name if profile is not None else DEFAULT_PROFILE, endpoint)
    if signed_in:
        return signed_in, "login"  # packyard login's token for this endpoint (renewed when it is about to expire)
    if not is_local(endpoint):
        return "", "none"
    from packyard_cli import tokens

    key = tokens.load_key(args.state_dir)
    if key is None:
        return "", "none"
    tenant = args.tenant or os.environ.get("PACKYARD_TENANT") or (profile.tenant if profile else None) or "local"
    subject = os.environ.get("PACKYARD_SUBJECT") or "cli"
    return key.mint(tenant=tenant, subject=subject, ttl_seconds=900), "minted"


# ------------------------------------------------------------------ arguments and listings


def workspace_of(args: argparse.Namespace) -> str:
    workspace = getattr(args, "workspace_arg", None) or getattr(args, "workspace", None)
    if not workspace:
        raise CliError("a workspace is required", detail="pass WORKSPACE or --workspace W", exit_code=EXIT_USAGE)
    return str(workspace)


@dataclass(frozen=True)
class Listing:
    items: list[dict[str, Any]]
    next_token: str | None  # where --starting-token resumes; None when the listing is complete

    def body(self) -> dict[str, Any]:
        return {"items": self.items, **({"nextToken": self.next_token} if self.next_token else {})}


def _encode_token(cursor: str | None, skip: int, limit: int) -> str:
    raw = json.dumps({"cursor": cursor, "skip": skip, "limit": limit}, separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _decode_token(token: str) -> tuple[str | None, int, int]:
    try:
        raw = json.loads(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))
        cursor, skip, limit = raw["cursor"], int(raw["skip"]), int(raw["limit"])
        if cursor is not None and not isinstance(cursor, str):
            raise ValueError
    except (ValueError, KeyError, TypeError, binascii.Error):
        raise CliError(
            "--starting-token is not a token this CLI printed",
            detail="use the nextToken of a previous listing",
            exit_code=EXIT_USAGE,
        ) from None
    return cursor, max(0, skip), min(max(1, limit), PAGE_SIZE)


def paginate(ctx: Context, path: str, what: str = "items") -> Listing:
    """A listing, following ``nextCursor`` until it ends or ``--max-items`` is reached; a cut listing says so on
    stderr and carries a ``nextToken`` for ``--starting-token`` (which resumes exactly after the last item shown)."""
    args = ctx.args
    max_items: int | None = getattr(args, "max_items", None)
    limit = PAGE_SIZE
    cursor: str | None = None
    skip = 0
    if getattr(args, "starting_token", None):
        cursor, skip, limit = _decode_token(args.starting_token)
    items: list[dict[str, Any]] = []
    while True:
        params: dict[str, Any] = {"limit": limit, **({"cursor": cursor} if cursor else {})}
        body = ctx.client.request("GET", path, params=params).body or {}
        offset, skip = skip, 0
        page = list(body.get("items") or [])[offset:]
        next_cursor = body.get("nextCursor")
        if max_items is not None and len(items) + len(page) > max_items:
            room = max_items - len(items)
            items.extend(page[:room])
            listing = Listing(items, _encode_token(cursor, offset + room, limit))
            break
        items.extend(page)
        if not next_cursor:
            listing = Listing(items, None)
            break
        if max_items is not None and len(items) >= max_items:
            listing = Listing(items, _encode_token(next_cursor, 0, limit))
            break
        cursor = next_cursor
    if listing.next_token:
        ctx.warn(
            f"showing the first {len(listing.items)} {what}; there are more. "
            f"Continue with --starting-token {listing.next_token}, or raise --max-items."
        )
    return listing


def cut(ctx: Context, items: list[dict[str, Any]], what: str) -> list[dict[str, Any]]:
    """``--max-items`` over a listing the API returns whole (with the same note when it cuts)."""
    max_items: int | None = getattr(ctx.args, "max_items", None)
    if max_items is None or len(items) <= max_items:
        return items
    ctx.warn(f"showing the first {max_items} of {len(items)} {what}; raise --max-items to see more.")
    return items[:max_items]


def resolve_release(ctx: Context, ref: ReleaseRef, *, quiet: bool = False) -> tuple[str, str]:
    """``PACKAGE@VERSION`` as given, or for a bare name / ``@latest`` the newest published version (semver order;
    pre-releases only when nothing else is published). Says which version it picked."""
    if ref.version is not None:
        return ref.package, ref.version
    from packyard_cli import rules

    path = f"/v1/packages/{segment(ref.package)}/versions"
    published: list[str] = []
    cursor = None
    while True:
        params: dict[str, Any] = {"limit": PAGE_SIZE, **({"cursor": cursor} if cursor else {})}
        body = ctx.client.request("GET", path, params=params).body or {}
        published.extend(
            str(r["version"]) for r in body.get("items") or [] if r.get("status") == "published" and r.get("version")
        )
        cursor = body.get("nextCursor")
        if not cursor:
            break
    stable = [v for v in published if not rules.is_prerelease(v)]
    candidates = stable or published
    if not candidates:
        raise CliError(
            f"{ref.package} has no published version",
            code="not_found",
            detail=f"publish one first, or see packyard releases {ref.package}",
            exit_code=EXIT_NOT_FOUND,
        )
    version = max(candidates, key=rules.semver_key)
    if not quiet:
        ctx.note(f"{ref.package}@latest is {version}")
    return ref.package, version


# ------------------------------------------------------------------ waiting


def wait_for(
    ctx: Context,
    fetch: Callable[[], dict[str, Any]],
    *,
    done: Callable[[dict[str, Any]], bool],
    label: Callable[[dict[str, Any]], str],
    timeout: float,
    server_waits: bool = False,
) -> dict[str, Any]:
    """Poll ``fetch`` until ``done``; a spinner shows the current state. Times out with exit code 5.

    ``server_waits``: ``fetch`` asks the service to hold its answer until the thing is done (``?wait=N``), so no
    pause comes between two fetches; the pause only follows an answer that came back sooner than a poll's
    interval without being done (a service that did not wait)."""
    started = time.monotonic()
    deadline = started + timeout
    asked = time.monotonic()
    current = fetch()
    with ctx.status(label(current)) as spinner:
        while not done(current):
            if time.monotonic() >= deadline:
                raise CliError(
                    f"still {current.get('state')} after {timeout:.0f}s",
                    detail="it goes on in the service; check again later",
                    exit_code=EXIT_UNAVAILABLE,
                    body=current,
                )
            # a few polls a second while the outcome is likely near, then once a second
            interval = 0.2 if time.monotonic() - started < 15 else 1.0
            if not server_waits or time.monotonic() - asked < interval:
                time.sleep(interval)
            asked = time.monotonic()
            current = fetch()
            spinner.update(label(current))
    return current


def wait_seconds(deadline: float, longest: int = 20) -> int:
    """Whole seconds (1..``longest``) to ask the service to wait (``?wait=``, ``Prefer: wait=``) before
    ``deadline`` (a ``time.monotonic()`` value)."""
    return max(1, min(longest, int(deadline - time.monotonic())))
