"""What every command shares: the parsed arguments and consoles (:class:`Context`), where the API is and which
token to send (endpoint and token resolution), paging through a listing, and waiting for an upload or operation.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from packyard_cli.client import EXIT_UNAVAILABLE, EXIT_USAGE, Client, CliError
from packyard_cli.ports import DEFAULT_API_PORT

LOCAL_HOSTS = frozenset({"127.0.0.1", "localhost", "::1", "[::1]"})


@dataclass
class Context:
    """One per command run. The client is made on first use, so commands that never call the API (``build``,
    ``token``, ``local``) never resolve an endpoint or mint a token."""

    args: argparse.Namespace
    json: bool
    out: Any  # rich Console on stdout
    err: Any  # rich Console on stderr (spinners, progress, errors)
    _client: Client | None = field(default=None, repr=False)
    _token: str | None = field(default=None, repr=False)

    @property
    def endpoint(self) -> str:
        return str(self.args.endpoint or default_endpoint(self.args.state_dir))

    @property
    def client(self) -> Client:
        if self._client is None:
            self._client = Client(self.endpoint, token=self.bearer_token)
        return self._client

    def bearer_token(self) -> str | None:
        if self._token is None:
            self._token = resolve_token(self.args, self.endpoint)
        return self._token or None

    def emit(self, body: Any, render: Callable[[], None]) -> None:
        if self.json:
            print(json.dumps(body, indent=2, sort_keys=False))
        else:
            render()

    def note(self, text: str) -> None:
        if not self.json:
            self.out.print(text, highlight=False, soft_wrap=True)

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
    """$PACKYARD_ENDPOINT, else the running local stack (its local.json), else the local default port."""
    env = os.environ.get("PACKYARD_ENDPOINT")
    if env:
        return env
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


def resolve_token(args: argparse.Namespace, endpoint: str) -> str:
    """--token, else $PACKYARD_TOKEN, else (local stack only) a token minted with the local key."""
    explicit = args.token or os.environ.get("PACKYARD_TOKEN")
    if explicit:
        return str(explicit)
    if not is_local(endpoint):
        return ""
    from packyard_cli import tokens

    key = tokens.load_key(args.state_dir)
    if key is None:
        return ""
    tenant = args.tenant or os.environ.get("PACKYARD_TENANT") or "local"
    subject = os.environ.get("PACKYARD_SUBJECT") or "cli"
    return key.mint(tenant=tenant, subject=subject, ttl_seconds=900)


# ------------------------------------------------------------------ arguments and listings


def workspace_of(args: argparse.Namespace) -> str:
    workspace = getattr(args, "workspace_arg", None) or getattr(args, "workspace", None)
    if not workspace:
        raise CliError("a workspace is required", detail="pass WORKSPACE or --workspace W", exit_code=EXIT_USAGE)
    return str(workspace)


def all_pages(ctx: Context, path: str, max_pages: int = 50) -> list[dict[str, Any]]:
    """Every item of a paged listing (following ``nextCursor``), up to ``max_pages`` pages."""
    items: list[dict[str, Any]] = []
    cursor = None
    for _ in range(max_pages):
        params = {"limit": 100, **({"cursor": cursor} if cursor else {})}
        body = ctx.client.request("GET", path, params=params).body or {}
        items.extend(body.get("items") or [])
        cursor = body.get("nextCursor")
        if not cursor:
            break
    return items


# ------------------------------------------------------------------ waiting


def wait_for(
    ctx: Context,
    fetch: Callable[[], dict[str, Any]],
    *,
    done: Callable[[dict[str, Any]], bool],
    label: Callable[[dict[str, Any]], str],
    timeout: float,
) -> dict[str, Any]:
    """Poll ``fetch`` until ``done``; a spinner shows the current state. Times out with exit code 5."""
    started = time.monotonic()
    deadline = started + timeout
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
            time.sleep(0.2 if time.monotonic() - started < 15 else 1.0)
            current = fetch()
            spinner.update(label(current))
    return current
