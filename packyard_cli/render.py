"""How results and errors look: the columns of each resource (table and tsv), the human views of one release,
operation, installation or plan, and problems.

Human views are skipped for machine output (json, tsv, any ``--query``), which prints the API's JSON or the columns
instead; the formatters tolerate missing fields (an older or newer service).
"""

from __future__ import annotations

import json
import os
from typing import Any

from packyard_cli.client import CliError
from packyard_cli.commands.context import Context, is_local
from packyard_cli.output import Column, dig, rfc3339, short

# ------------------------------------------------------------------ formatting


def short_digest(digest: Any, width: int = 12) -> str:
    text = str(digest or "")
    return text[:width] + "…" if len(text) > width else text


def utc_time(value: Any) -> str:
    return rfc3339(value)


def human_size(n: Any) -> str:
    if not isinstance(n, int) or isinstance(n, bool):
        return ""
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{int(value)} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return str(n)


def scope_text(scope: dict[str, Any] | None, default: str = "") -> str:
    """``kind`` or ``kind:id``, as ``--scope`` takes it."""
    scope = scope or {}
    kind: str = scope.get("kind", default)
    return kind + (f":{scope['id']}" if scope.get("id") else "")


def grants_text(grants: list[dict[str, Any]] | None) -> str:
    return ", ".join(f"{g.get('kind')}:{g.get('resource')}" for g in grants or [])


def permissions_text(permissions: list[dict[str, Any]] | None) -> str:
    return ", ".join(f"{p.get('kind')}:{p.get('resource', '*')}" for p in permissions or [])


def _release_of(inst: dict[str, Any]) -> str:
    release = inst.get("release") or {}
    if not release:
        return "-"
    return f"{release.get('package', inst.get('package'))}@{release.get('version', '-')}"


# ------------------------------------------------------------------ columns (table and tsv), per resource

PACKAGE_COLUMNS = (
    Column("package", dig("package"), key=True),
    Column("latest", dig("latestVersion"), key=True),
    Column("versions", dig("versionCount")),
    Column("created", dig("createdAt"), time=True),
)
RELEASE_COLUMNS = (
    Column("version", dig("version"), key=True),
    Column("status", dig("status")),
    Column("archive sha256", dig("archive", "sha256"), brief=short()),
    Column("size", dig("archive", "size"), brief=human_size),
    Column("files", dig("fileCount")),
    Column("permissions", lambda r: permissions_text(r.get("permissions"))),
    Column("published", dig("publishedAt"), time=True),
)
INSTALLATION_COLUMNS = (
    Column("installation", dig("installationId"), key=True),
    Column("release", _release_of, key=True),
    Column("status", dig("status")),
    Column("version", dig("version")),
    Column("scope", lambda i: scope_text(i.get("scope"))),
    Column("grants", lambda i: grants_text(i.get("grants"))),
    Column("updated", dig("updatedAt"), time=True),
)
RESOLVED_COLUMNS = (
    Column("installation", dig("installationId"), key=True),
    Column("release", lambda i: f"{i.get('package')}@{i.get('release')}", key=True),
    Column("archive sha256", dig("archive", "sha256"), brief=short()),
    Column("manifest digest", dig("manifestDigest"), brief=short()),
    Column("scope", lambda i: scope_text(i.get("scope"))),
    Column("grants", lambda i: grants_text(i.get("grants"))),
)
OPERATION_COLUMNS = (
    Column("operation", dig("operationId"), key=True),
    Column("kind", dig("kind")),
    Column("installation", dig("installationId"), key=True),
    Column(
        "release",
        lambda o: f"{dig('release', 'package')(o)}@{dig('release', 'version')(o)}" if o.get("release") else "",
    ),
    Column("state", dig("state")),
    Column("outcome", dig("outcome", "result")),
    Column("code", dig("outcome", "code")),
    Column("updated", dig("updatedAt"), time=True),
)

APPROVAL_COLUMNS = (
    Column("installation", dig("installationId"), key=True),
    Column("release", lambda w: f"{w.get('package')}@{w.get('version')}", key=True),
    Column("operation", dig("operationId"), key=True),
    Column("adds", lambda w: permissions_text(w.get("permissions"))),
    Column("requested by", dig("requestedBy")),
    Column("deadline", dig("deadline"), time=True),
    Column("plan digest", dig("planDigest"), brief=short()),
)
APPROVAL_DECISION_COLUMNS = (
    Column("approval", dig("approvalId"), key=True),
    Column("operation", dig("operationId"), key=True),
    Column("installation", dig("installationId"), key=True),
    Column("decision", dig("decision")),
    Column("decided", dig("decidedAt"), time=True),
)


def release_row_columns(with_package: bool = True) -> tuple[Column, ...]:
    return ((Column("package", dig("package"), key=True),) if with_package else ()) + RELEASE_COLUMNS


# ------------------------------------------------------------------ human views


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
        lines.append(f"  permissions      {permissions_text(release['permissions'])}")
    if release.get("publishedAt"):
        lines.append(f"  published        {utc_time(release.get('publishedAt'))}")
    if release.get("yankedAt"):
        lines.append(f"  yanked           {utc_time(release.get('yankedAt'))}")
    for line in lines:
        ctx.out.print(line, highlight=False, soft_wrap=True)


NOTES = {
    "not_installed": "nothing to uninstall: it is not installed",
}


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
    code, detail, note = outcome.get("code"), outcome.get("detail"), op.get("note")
    if code or detail:
        status = f" ({outcome['status']})" if outcome.get("status") else ""
        explained = detail or NOTES.get(str(code), "")
        ctx.out.print(f"  {code or ''}{status}" + (f": {explained}" if explained else ""), highlight=False)
    if note and note != code:
        ctx.out.print(f"  note: {NOTES.get(str(note), note)}", highlight=False)
    if op.get("state") == "pending":
        ctx.out.print(
            f"  pending in {op.get('phase')} ({op.get('errorCode')}): send the same command with the same "
            "--idempotency-key to resume it",
            highlight=False,
            soft_wrap=True,
        )


def render_installation(ctx: Context, inst: dict[str, Any]) -> None:
    where = scope_text(inst.get("scope") or {}, default="workspace")
    grants = grants_text(inst.get("grants")) or "none"
    ctx.out.print(
        f"installation [bold]{inst.get('installationId')}[/] in {inst.get('workspace')}: "
        f"[bold]{_release_of(inst)}[/] status [bold]{inst.get('status')}[/], version {inst.get('version')} "
        f"(ETag {inst.get('etag')}), scope {where}, grants {grants}",
        highlight=False,
        soft_wrap=True,
    )


def render_plan(ctx: Context, body: dict[str, Any], installation: str, workspace: str) -> None:
    """A preview as lines: what would change, and the digest that pins it."""
    plan = body.get("plan")
    head = f"preview: [bold]{body.get('kind', '')}[/] of [bold]{installation}[/] in {workspace}"
    if plan is None:
        note = body.get("note")
        ctx.out.print(head + f" — nothing to do ({NOTES.get(str(note), note or 'no change')})", highlight=False)
        return
    previous = plan.get("previous") or {}
    before = f"{previous.get('package')}@{previous.get('version')}" if previous else "nothing"
    lines = [
        head,
        f"  release      {_release_of(plan)}  (was {before})",
        f"  version      {plan.get('version')}  (ETag {plan.get('etag')})",
        f"  scope        {scope_text(plan.get('scope'), default='workspace')}",
        f"  grants       {grants_text(plan.get('grants')) or 'none'}",
    ]
    if plan.get("config"):
        lines.append(f"  config       {json.dumps(plan['config'], sort_keys=True)}")
    if body.get("planDigest"):
        lines.append(f"  plan digest  {body['planDigest']}")
        lines.append("  (install with --plan-digest DIGEST to get 409 plan_changed if anything moves before then)")
    for line in lines:
        ctx.out.print(line, highlight=False, soft_wrap=True)


# ------------------------------------------------------------------ errors


def _safe_output(ctx: Context) -> str:
    try:
        return ctx.output
    except CliError:  # the profile itself is what failed
        return "json" if getattr(ctx.args, "json", False) or getattr(ctx.args, "output", None) == "json" else "table"


def print_error(ctx: Context, error: CliError) -> None:
    if _safe_output(ctx) == "json":
        data: Any = error.as_json()
        query = getattr(ctx.args, "query", None)
        if query:  # a refusal is queried like an answer: --query code reads the problem's code
            from packyard_cli import output as fmt

            data = fmt.apply_query(data, str(query))
        print(json.dumps(data, indent=2))
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
    if error.status == 401 and not (ctx.args.token or os.environ.get("PACKYARD_TOKEN")):
        try:
            local = is_local(ctx.endpoint)
        except CliError:
            local = False
        if local:
            ctx.err.print("  hint: start the local stack (packyard local) so its signing key exists, or pass --token")
