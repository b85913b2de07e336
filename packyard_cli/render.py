"""How results and errors look on a terminal: tables, releases, operations, installations and problems.

Everything here writes to the context's rich consoles (stdout for results, stderr for errors) and is skipped for
``--json``, which prints the API's JSON instead; the formatters tolerate missing fields (an older or newer service).
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

from packyard_cli.client import CliError
from packyard_cli.commands.context import Context, is_local

# ------------------------------------------------------------------ formatting


def short_digest(digest: Any, width: int = 12) -> str:
    text = str(digest or "")
    return text[:width] + "…" if len(text) > width else text


def utc_time(epoch: Any) -> str:
    if not isinstance(epoch, int | float):
        return ""
    return time.strftime("%Y-%m-%d %H:%M:%SZ", time.gmtime(epoch))


def human_size(n: Any) -> str:
    if not isinstance(n, int):
        return ""
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{int(value)} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return str(n)


def scope_text(scope: dict[str, Any], default: str = "") -> str:
    """``kind`` or ``kind:id``, as ``--scope`` takes it."""
    kind: str = scope.get("kind", default)
    return kind + (f":{scope['id']}" if scope.get("id") else "")


def grants_text(grants: list[dict[str, Any]] | None) -> str:
    return ", ".join(f"{g.get('kind')}:{g.get('resource')}" for g in grants or [])


def make_table(*columns: str) -> Any:
    from rich.table import Table

    table = Table(box=None, pad_edge=False, header_style="bold")
    for column in columns:
        table.add_column(column)
    return table


# ------------------------------------------------------------------ results


def render_release(ctx: Context, release: dict[str, Any], heading: str) -> None:
    archive = release.get("archive") or {}
    lines = [
        f"[bold green]{heading}[/] [bold]{release.get('package')}@{release.get('version')}[/] "
        f"(status [bold]{release.get('status')}[/])",
        f"  manifest digest  {release.get('manifestDigest')}",
        f"  content digest   {release.get('contentDigest')}",
        f"  archive          sha256 {archive.get('sha256')} ({human_size(archive.get('size'))})",
        f"  files            {release.get('fileCount')} ({human_size(release.get('unpackedSize'))} unpacked)",
    ]
    if release.get("permissions"):
        declared = ", ".join(f"{p.get('kind')}:{p.get('resource', '*')}" for p in release["permissions"])
        lines.append(f"  permissions      {declared}")
    if release.get("publishedAt"):
        lines.append(f"  published        {utc_time(release.get('publishedAt'))}")
    if release.get("yankedAt"):
        lines.append(f"  yanked           {utc_time(release.get('yankedAt'))}")
    for line in lines:
        ctx.out.print(line, highlight=False, soft_wrap=True)


def render_operation(ctx: Context, op: dict[str, Any]) -> None:
    outcome = op.get("outcome") or {}
    result = outcome.get("result")
    colour = {"succeeded": "green", "refused": "red", "unconfirmed": "yellow"}.get(str(result), "cyan")
    release = op.get("release") or {}
    target = f" → {release.get('package')}@{release.get('version')}" if release else ""
    ctx.out.print(
        f"operation [bold]{op.get('operationId')}[/] ({op.get('kind')} of {op.get('installationId')}{target}): "
        f"state [bold]{op.get('state')}[/]" + (f", outcome [bold {colour}]{result}[/]" if result else ""),
        highlight=False,
        soft_wrap=True,
    )
    if outcome.get("code") or outcome.get("detail"):
        status = f" ({outcome['status']})" if outcome.get("status") else ""
        ctx.out.print(f"  {outcome.get('code', '')}{status}: {outcome.get('detail', '')}", highlight=False)
    if op.get("note"):
        ctx.out.print(f"  note: {op['note']}", highlight=False)


def render_installation(ctx: Context, inst: dict[str, Any]) -> None:
    release = inst.get("release") or {}
    where = scope_text(inst.get("scope") or {}, default="workspace")
    grants = grants_text(inst.get("grants")) or "none"
    ctx.out.print(
        f"installation [bold]{inst.get('installationId')}[/] in {inst.get('workspace')}: "
        f"[bold]{release.get('package', inst.get('package'))}@{release.get('version', '-')}[/] "
        f"status [bold]{inst.get('status')}[/], version {inst.get('version')} (ETag {inst.get('etag')}), "
        f"scope {where}, grants {grants}",
        highlight=False,
        soft_wrap=True,
    )


# ------------------------------------------------------------------ errors


def print_error(ctx: Context, error: CliError) -> None:
    if ctx.json:
        print(json.dumps(error.as_json(), indent=2))
        return
    from rich.markup import escape

    bits = [str(error.status)] if error.status else []
    if error.code:
        bits.append(error.code)
    sub_code = error.body.get("subCode") if isinstance(error.body, dict) else None
    if sub_code:
        bits.append(f"sub-code {sub_code}")
    suffix = f" [dim]({escape(', '.join(bits))})[/]" if bits else ""
    ctx.err.print(f"[bold red]✗ {escape(error.title)}[/]{suffix}", highlight=False, soft_wrap=True)
    if error.detail:
        ctx.err.print(f"  {escape(error.detail)}", highlight=False, soft_wrap=True)
    if isinstance(error.body, dict):
        for name in ("expected", "actual", "blockingOperation", "operationId", "errors"):
            if name in error.body:
                ctx.err.print(f"  {name}: {escape(json.dumps(error.body[name]))}", highlight=False, soft_wrap=True)
    if error.status == 401 and is_local(ctx.endpoint) and not (ctx.args.token or os.environ.get("PACKYARD_TOKEN")):
        ctx.err.print("  hint: start the local stack (packyard local) so its signing key exists, or pass --token")
