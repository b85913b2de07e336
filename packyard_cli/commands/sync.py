"""``packyard sync WS DIR``: make a folder hold what a workspace resolves to (:mod:`packyard_cli.sync`), or with
``--check`` compare it without changing anything (exit 4 on any drift, listed)."""

from __future__ import annotations

import argparse
import re
from typing import Any

from packyard_cli.client import EXIT_CONFLICT, EXIT_OK, EXIT_USAGE, CliError
from packyard_cli.commands.context import Context, workspace_of
from packyard_cli.output import Column, dig
from packyard_cli.render import human_size

DRIFT_COLUMNS = (
    Column("installation", dig("installation"), key=True),
    Column("path", dig("path"), key=True),
    Column("drift", dig("kind"), key=True),
    Column("detail", dig("detail")),
)
SYNC_COLUMNS = (
    Column("added", lambda r: " ".join(r["added"])),
    Column("updated", lambda r: " ".join(r["updated"])),
    Column("removed", lambda r: " ".join(r["removed"])),
    Column("unchanged", lambda r: " ".join(r["unchanged"])),
    Column("downloaded bytes", dig("downloadedBytes")),
)
_SIZE = re.compile(r"^(\d+)\s*([kmgt]i?b?|b)?$", re.IGNORECASE)
_UNITS = {"": 1, "b": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


def byte_size(text: str) -> int:
    """``500M``, ``2GiB``, ``1048576``: binary units."""
    match = _SIZE.match(text.strip())
    if not match:
        raise argparse.ArgumentTypeError(f"{text!r} is not a size (e.g. 512M, 2G, 1048576)")
    unit = (match.group(2) or "").lower()[:1]
    return int(match.group(1)) * _UNITS[unit]


class _TerminalProgress:
    """A rich progress bar on stderr: installations done, and the bytes of the download in flight."""

    def __init__(self, ctx: Context) -> None:
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

        self._bar = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), console=ctx.err)
        self._task: Any = None

    def __enter__(self) -> _TerminalProgress:
        self._bar.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._bar.stop()

    def __call__(self, event: dict[str, Any]) -> None:
        kind = event.get("event")
        if kind == "start":
            self._task = self._bar.add_task("sync", total=event["installations"])
        elif self._task is None:
            return
        elif kind == "installation":
            self._bar.update(self._task, completed=event["index"], description=str(event["installation"]))
        elif kind == "step":
            self._bar.update(self._task, description=f"{event['installation']}: {event['step']}")
        elif kind == "done":
            self._bar.update(self._task, completed=self._bar.tasks[0].total, description="sync")
        self._bar.refresh()  # each step shows at once (a step can be a long download)


def cmd_sync(ctx: Context, args: argparse.Namespace) -> int:
    from packyard_cli.sync import check_workspace, sync_workspace

    workspace = workspace_of(args)
    if not args.directory:
        raise CliError("a folder is required", detail="packyard sync WORKSPACE DIR", exit_code=EXIT_USAGE)
    if args.check:
        checked = check_workspace(workspace, args.directory, client=ctx.client, cache_dir=args.cache)
        body = checked.as_json()
        ctx.show(
            body,
            items=body["drift"],
            columns=DRIFT_COLUMNS,
            render=lambda: _render_check(ctx, body),
        )
        return EXIT_OK if checked.clean else EXIT_CONFLICT
    options: dict[str, Any] = {"client": ctx.client, "cache_dir": args.cache, "keys": pinned_keys(ctx, args)}
    if args.cache_size is not None:
        options["cache_max_bytes"] = args.cache_size
    if ctx.json or not ctx.err.is_terminal:
        result = sync_workspace(workspace, args.directory, **options)
    else:
        with _TerminalProgress(ctx) as progress:
            result = sync_workspace(workspace, args.directory, progress=progress, **options)
    body = result.as_json()
    ctx.show(body, items=[body], columns=SYNC_COLUMNS, render=lambda: _render_sync(ctx, body))
    return EXIT_OK


def pinned_keys(ctx: Context, args: argparse.Namespace) -> Any:
    """``--keys FILE``, else the profile's pinned key set (``packyard keys pin``), else None: then releases are
    written unverified, and stderr says so."""
    from pathlib import Path

    from packyard_cli import attestations
    from packyard_cli.commands.signing import pinned_keys_path

    path = Path(args.keys) if args.keys else pinned_keys_path(ctx.profile.name)
    if not path.is_file():
        if args.keys:
            raise CliError(f"no key set at {path}", detail="--keys takes a JWK Set file", exit_code=EXIT_USAGE)
        ctx.warn(f"no pinned signing keys ({path}): signatures are not checked; pin them with packyard keys pin")
        return None
    try:
        return attestations.load_key_set(path.read_bytes())
    except attestations.KeySetInvalid as invalid:
        raise CliError(f"{path} is not a JWK Set", detail=str(invalid), exit_code=EXIT_USAGE) from invalid


def _render_sync(ctx: Context, body: dict[str, Any]) -> None:
    for word, key in (("added", "added"), ("updated", "updated"), ("removed", "removed")):
        for name in body[key]:
            ctx.out.print(f"  {word:<9} {name}", highlight=False)
    ctx.out.print(
        f"[bold green]synced[/] {body['workspace']} → [bold]{body['directory']}[/]: {len(body['added'])} added, "
        f"{len(body['updated'])} updated, {len(body['removed'])} removed, {len(body['unchanged'])} unchanged "
        f"({body['downloads']} downloads, {human_size(body['downloadedBytes'])}; {body['filesFromCache']} files "
        "from the cache)",
        highlight=False,
        soft_wrap=True,
    )


def _render_check(ctx: Context, body: dict[str, Any]) -> None:
    from packyard_cli.output import make_table, rows_of

    if body["clean"]:
        ctx.out.print(
            f"[bold green]in sync[/]: {body['directory']} holds what {body['workspace']} resolves to "
            f"({body['checkedFiles']} files hashed)",
            highlight=False,
            soft_wrap=True,
        )
        return
    ctx.print_table(make_table(DRIFT_COLUMNS, rows_of(body["drift"], DRIFT_COLUMNS, brief=True)))
    ctx.out.print(f"[bold red]{len(body['drift'])} differences[/] from {body['workspace']}", highlight=False)
