"""Installations in a workspace: ``install``, ``update``, ``uninstall`` and ``rollback`` (each admitted as an
operation, then waited for), ``preview`` (the plan, nothing changed), ``status`` (one operation), ``ls`` and
``resolved`` (what a runtime loads).

A mutation sends ``If-Match`` with the installation version it just read (or ``--if-match``), and one
``Idempotency-Key`` per command that its retries reuse, so a retried request is never applied twice.
"""

from __future__ import annotations

import argparse
import json
import uuid
from typing import Any

from packyard_cli.client import EXIT_OK, EXIT_REFUSED, EXIT_UNAVAILABLE, CliError, Reply, segment
from packyard_cli.commands.context import Context, all_pages, wait_for, workspace_of
from packyard_cli.render import (
    grants_text,
    make_table,
    render_installation,
    render_operation,
    scope_text,
    short_digest,
    utc_time,
)

OPERATION_STOPS = frozenset({"settled", "awaiting_consent", "pending"})


def _installation_path(workspace: str, installation: str) -> str:
    return f"/v1/workspaces/{segment(workspace)}/installations/{segment(installation)}"


def read_installation(ctx: Context, workspace: str, installation: str) -> Reply | None:
    reply = ctx.client.request("GET", _installation_path(workspace, installation), ok=(404,))
    return None if reply.status == 404 else reply


def version_tag(reply: Reply) -> str:
    etag = reply.header("ETag") or (reply.body or {}).get("etag")
    if etag:
        return str(etag)
    return f'"{(reply.body or {}).get("version")}"'


def _if_match(value: str) -> str:
    value = value.strip()
    return value if value.startswith(('"', "W/")) else f'"{value}"'


# ------------------------------------------------------------------ admitting and following an operation


def _mutation(
    ctx: Context,
    args: argparse.Namespace,
    method: str,
    path: str,
    body: dict[str, Any] | None,
    if_match: str | None,
) -> int:
    key = args.idempotency_key or str(uuid.uuid4())
    headers = {"If-Match": if_match} if if_match else {}
    reply = ctx.client.request(method, path, body=body, headers=headers, idempotency_key=key)
    op = dict(reply.body or {})
    workspace = workspace_of(args)
    location = reply.header("Location") or f"/v1/workspaces/{segment(workspace)}/operations/{op.get('operationId')}"
    if not ctx.json:
        ctx.out.print(
            f"{op.get('kind', 'operation')} of {op.get('installationId')} admitted as [bold]{op.get('operationId')}[/] "
            f"[dim](HTTP {reply.status}, Idempotency-Key {key})[/]",
            highlight=False,
            soft_wrap=True,
        )
    if args.no_wait or op.get("state") in OPERATION_STOPS:
        final = op
    else:
        final = _wait_for_operation(ctx, location, args.wait_timeout)
    return finish_operation(ctx, final, workspace)


def _wait_for_operation(ctx: Context, path: str, timeout: float) -> dict[str, Any]:
    """Poll the operation at ``path`` until it settles, awaits consent or is pending."""
    return wait_for(
        ctx,
        lambda: dict(ctx.client.request("GET", path).body),
        done=lambda o: o.get("state") in OPERATION_STOPS,
        label=lambda o: f"{o.get('kind')} {o.get('installationId')}: {o.get('state')}",
        timeout=timeout,
    )


def finish_operation(ctx: Context, op: dict[str, Any], workspace: str) -> int:
    outcome = (op.get("outcome") or {}).get("result")
    if ctx.json:
        print(json.dumps(op, indent=2))
    else:
        render_operation(ctx, op)
        if outcome == "succeeded" and op.get("kind") != "uninstall":
            found = read_installation(ctx, workspace, str(op.get("installationId")))
            if found is not None:
                render_installation(ctx, found.body)
        elif op.get("state") == "awaiting_consent":
            ctx.out.print("  waiting for an owner to approve the permissions it needs", highlight=False)
    if outcome == "refused":
        return EXIT_REFUSED
    if outcome == "unconfirmed":
        return EXIT_UNAVAILABLE
    return EXIT_OK


# ------------------------------------------------------------------ install, update, uninstall, rollback


def _install_body(args: argparse.Namespace, package: str, version: str) -> dict[str, Any]:
    body: dict[str, Any] = {
        "package": package,
        "version": version,
        "scope": args.scope or {"kind": "workspace"},
        "config": args.config or {},
        "intent": args.intent,
        "origin": args.origin,
    }
    if getattr(args, "plan_digest", None):
        body["planDigest"] = args.plan_digest
    return body


def cmd_install(ctx: Context, args: argparse.Namespace, *, must_exist: bool = False) -> int:
    package, version = args.release
    workspace = workspace_of(args)
    installation = args.id or package
    if_match = _if_match(args.if_match) if args.if_match else None
    if if_match is None:
        current = read_installation(ctx, workspace, installation)
        if current is None and must_exist:
            raise CliError(
                f"no installation {installation!r} in workspace {workspace!r}",
                code="not_found",
                detail="install it first (packyard install)",
            )
        if current is not None:
            if_match = version_tag(current)
    path = _installation_path(workspace, installation)
    return _mutation(ctx, args, "PUT", path, _install_body(args, package, version), if_match)


def cmd_update(ctx: Context, args: argparse.Namespace) -> int:
    return cmd_install(ctx, args, must_exist=True)


def _change(ctx: Context, args: argparse.Namespace, method: str, suffix: str) -> int:
    workspace = workspace_of(args)
    if_match = _if_match(args.if_match) if args.if_match else None
    if if_match is None:
        current = read_installation(ctx, workspace, args.installation)
        if current is None:
            raise CliError(f"no installation {args.installation!r} in workspace {workspace!r}", code="not_found")
        if_match = version_tag(current)
    path = _installation_path(workspace, args.installation) + suffix
    return _mutation(ctx, args, method, path, {"origin": args.origin}, if_match)


def cmd_uninstall(ctx: Context, args: argparse.Namespace) -> int:
    return _change(ctx, args, "DELETE", "")


def cmd_rollback(ctx: Context, args: argparse.Namespace) -> int:
    return _change(ctx, args, "POST", "/rollback")


# ------------------------------------------------------------------ reading: preview, status, ls, resolved


def cmd_preview(ctx: Context, args: argparse.Namespace) -> int:
    package, version = args.release
    workspace = workspace_of(args)
    installation = args.id or package
    path = _installation_path(workspace, installation) + "/preview"
    body = ctx.client.request("POST", path, body=_install_body(args, package, version)).body or {}

    def render() -> None:
        ctx.out.print(
            f"preview of [bold]{installation}[/] in {workspace}: {body.get('kind', '')}"
            + (f" — {body['note']}" if body.get("note") else ""),
            highlight=False,
        )
        if body.get("plan") is not None:
            ctx.out.print_json(json.dumps(body["plan"]))
        if body.get("planDigest"):
            ctx.out.print(f"plan digest {body['planDigest']}  (pass --plan-digest to install exactly this plan)")

    ctx.emit(body, render)
    return EXIT_OK


def cmd_status(ctx: Context, args: argparse.Namespace) -> int:
    workspace = workspace_of(args)
    path = f"/v1/workspaces/{segment(workspace)}/operations/{segment(args.operation)}"
    op = dict(ctx.client.request("GET", path).body)
    if args.wait and op.get("state") not in OPERATION_STOPS:
        op = _wait_for_operation(ctx, path, args.wait_timeout)
    return finish_operation(ctx, op, workspace)


def cmd_ls(ctx: Context, args: argparse.Namespace) -> int:
    workspace = workspace_of(args)
    items = all_pages(ctx, f"/v1/workspaces/{segment(workspace)}/installations")
    table = make_table("installation", "release", "status", "version", "scope", "grants", "updated")
    for inst in items:
        release = inst.get("release") or {}
        table.add_row(
            str(inst.get("installationId")),
            f"{release.get('package', inst.get('package'))}@{release.get('version', '-')}",
            str(inst.get("status")),
            str(inst.get("version")),
            scope_text(inst.get("scope") or {}),
            grants_text(inst.get("grants")),
            utc_time(inst.get("updatedAt")),
        )
    ctx.emit(
        {"items": items}, lambda: ctx.out.print(table) if items else ctx.out.print(f"no installations in {workspace}")
    )
    return EXIT_OK


def cmd_resolved(ctx: Context, args: argparse.Namespace) -> int:
    workspace = workspace_of(args)
    body = ctx.client.request("GET", f"/v1/workspaces/{segment(workspace)}/resolved").body or {}
    items = body.get("items") or []
    table = make_table("installation", "release", "manifest digest", "archive sha256", "scope", "grants")
    for item in items:
        table.add_row(
            str(item.get("installationId")),
            f"{item.get('package')}@{item.get('release')}",
            short_digest(item.get("manifestDigest")),
            short_digest((item.get("archive") or {}).get("sha256")),
            scope_text(item.get("scope") or {}),
            grants_text(item.get("grants")),
        )
    ctx.emit(body, lambda: ctx.out.print(table) if items else ctx.out.print(f"nothing resolved in {workspace}"))
    return EXIT_OK
