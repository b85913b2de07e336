"""Installations in a workspace: ``install``, ``update``, ``uninstall`` and ``rollback`` (each admitted as an
operation, then waited for), ``preview`` (the plan, nothing changed), ``status`` (one operation), ``ls`` and
``resolved`` (what a runtime loads).

A mutation sends ``If-Match`` with the installation version it just read (or ``--if-match``), and one
``Idempotency-Key`` per command that its retries reuse, so a retried request is never applied twice.
"""

from __future__ import annotations

import argparse
import time
import uuid
from typing import Any

from packyard_cli.client import EXIT_NOT_FOUND, EXIT_OK, EXIT_REFUSED, EXIT_UNAVAILABLE, CliError, Reply, segment
from packyard_cli.commands.context import (
    Context,
    cut,
    paginate,
    resolve_release,
    wait_for,
    wait_seconds,
    workspace_of,
)
from packyard_cli.render import (
    APPROVAL_COLUMNS,
    APPROVAL_DECISION_COLUMNS,
    INSTALLATION_COLUMNS,
    OPERATION_COLUMNS,
    RESOLVED_COLUMNS,
    render_installation,
    render_operation,
    render_plan,
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
    if not args.no_wait:
        # the service answers once the operation is at rest, within the wait: most need no further request
        headers["Prefer"] = f"wait={wait_seconds(time.monotonic() + args.wait_timeout)}"
    reply = ctx.client.request(method, path, body=body, headers=headers, idempotency_key=key)
    op = dict(reply.body or {})
    workspace = workspace_of(args)
    location = reply.header("Location") or f"/v1/workspaces/{segment(workspace)}/operations/{op.get('operationId')}"
    ctx.note(
        f"{op.get('kind', 'operation')} of {op.get('installationId')} admitted as [bold]{op.get('operationId')}[/] "
        f"[dim](HTTP {reply.status}, Idempotency-Key {key})[/]"
    )
    if args.no_wait or op.get("state") in OPERATION_STOPS:
        final = op
    else:
        final = _wait_for_operation(ctx, location, args.wait_timeout)
    return finish_operation(ctx, final, workspace)


def _wait_for_operation(ctx: Context, path: str, timeout: float) -> dict[str, Any]:
    """Read the operation at ``path`` until it settles, awaits consent or is pending: each read asks the service to
    wait for that (``?wait=``, up to 20 s), so an operation that comes to rest within it takes one request."""
    deadline = time.monotonic() + timeout

    def fetch() -> dict[str, Any]:
        return dict(ctx.client.request("GET", path, params={"wait": wait_seconds(deadline)}).body)

    return wait_for(
        ctx,
        fetch,
        done=lambda o: o.get("state") in OPERATION_STOPS,
        label=lambda o: f"{o.get('kind')} {o.get('installationId')}: {o.get('state')}",
        timeout=timeout,
        server_waits=True,
    )


def finish_operation(ctx: Context, op: dict[str, Any], workspace: str) -> int:
    outcome = (op.get("outcome") or {}).get("result")

    def render() -> None:
        render_operation(ctx, op)
        if outcome == "succeeded" and op.get("kind") != "uninstall":
            found = read_installation(ctx, workspace, str(op.get("installationId")))
            if found is not None:
                render_installation(ctx, found.body)
        elif op.get("state") == "awaiting_consent":
            asked = ", ".join(
                f"{p.get('kind')}:{p.get('resource', '*')}" for p in (op.get("consent") or {}).get("permissions") or []
            )
            ctx.out.print(
                f"  waiting for an owner to approve the permissions it adds{f' ({asked})' if asked else ''}: "
                f"[bold]packyard approve {op.get('installationId')} --workspace {workspace}[/]",
                highlight=False,
                soft_wrap=True,
            )

    ctx.show(op, render=render, columns=OPERATION_COLUMNS)
    if outcome == "refused":
        return EXIT_REFUSED
    if outcome == "unconfirmed" or op.get("state") == "pending":
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
    workspace = workspace_of(args)
    installation = args.id or args.release.package
    if_match = _if_match(args.if_match) if args.if_match else None
    current = None
    if if_match is None:
        current = read_installation(ctx, workspace, installation)
        if current is None and must_exist:
            raise CliError(
                f"no installation {installation!r} in workspace {workspace!r}",
                code="not_found",
                detail=f"install it first: packyard install {args.release} --workspace {workspace}",
                exit_code=EXIT_NOT_FOUND,
            )
        if current is not None:
            if_match = version_tag(current)
    package, version = resolve_release(ctx, args.release)
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
            raise CliError(
                f"no installation {args.installation!r} in workspace {workspace!r}",
                code="not_found",
                detail=f"see what is installed: packyard ls {workspace}",
                exit_code=EXIT_NOT_FOUND,
            )
        if_match = version_tag(current)
    path = _installation_path(workspace, args.installation) + suffix
    return _mutation(ctx, args, method, path, {"origin": args.origin}, if_match)


def cmd_uninstall(ctx: Context, args: argparse.Namespace) -> int:
    return _change(ctx, args, "DELETE", "")


def cmd_rollback(ctx: Context, args: argparse.Namespace) -> int:
    return _change(ctx, args, "POST", "/rollback")


# ------------------------------------------------------------------ reading: preview, status, ls, resolved


def cmd_preview(ctx: Context, args: argparse.Namespace) -> int:
    workspace = workspace_of(args)
    installation = args.id or args.release.package
    package, version = resolve_release(ctx, args.release)
    path = _installation_path(workspace, installation) + "/preview"
    body = ctx.client.request("POST", path, body=_install_body(args, package, version)).body or {}
    plan = body.get("plan") or {}
    columns = (*INSTALLATION_COLUMNS[:4], *INSTALLATION_COLUMNS[4:6])
    ctx.show(
        body,
        render=lambda: render_plan(ctx, body, installation, workspace),
        columns=columns,
        items=[plan] if plan else [],
    )
    return EXIT_OK


def cmd_status(ctx: Context, args: argparse.Namespace) -> int:
    workspace = workspace_of(args)
    path = f"/v1/workspaces/{segment(workspace)}/operations/{segment(args.operation)}"
    if args.wait:
        return finish_operation(ctx, _wait_for_operation(ctx, path, args.wait_timeout), workspace)
    return finish_operation(ctx, dict(ctx.client.request("GET", path).body), workspace)


def cmd_ls(ctx: Context, args: argparse.Namespace) -> int:
    workspace = workspace_of(args)
    listing = paginate(ctx, f"/v1/workspaces/{segment(workspace)}/installations", "installations")
    ctx.show(listing.body(), columns=INSTALLATION_COLUMNS, empty=f"no installations in {workspace}")
    return EXIT_OK


def cmd_resolved(ctx: Context, args: argparse.Namespace) -> int:
    """Every page of ``resolved`` (the API pages it), as one listing; its URLs expire at the earliest page's
    ``expiresAt``."""
    workspace = workspace_of(args)
    path = f"/v1/workspaces/{segment(workspace)}/resolved"
    body: dict[str, Any] = {}
    items: list[dict[str, Any]] = []
    cursor: str | None = None
    while True:
        page = dict(ctx.client.request("GET", path, params={"cursor": cursor} if cursor else None).body or {})
        items.extend(page.get("items") or [])
        body.setdefault("expiresAt", page.get("expiresAt"))
        body.setdefault("workspace", page.get("workspace"))
        cursor = page.get("nextCursor")
        if not cursor:
            break
    body["items"] = cut(ctx, items, "installations")
    ctx.show(body, columns=RESOLVED_COLUMNS, empty=f"nothing resolved in {workspace}")
    return EXIT_OK


# ------------------------------------------------------------------ consent: approvals, approve


def cmd_approvals(ctx: Context, args: argparse.Namespace) -> int:
    workspace = workspace_of(args)
    listing = paginate(ctx, f"/v1/workspaces/{segment(workspace)}/approvals", "operations waiting")
    ctx.show(listing.body(), columns=APPROVAL_COLUMNS, empty=f"nothing waits for approval in {workspace}")
    return EXIT_OK


def cmd_approve(ctx: Context, args: argparse.Namespace) -> int:
    """Approve (or ``--reject``) the plan an installation's operation waits on, then follow that operation."""
    workspace = workspace_of(args)
    digest = args.plan_digest
    operation_id: str | None = None
    if digest is None:
        waiting = paginate(ctx, f"/v1/workspaces/{segment(workspace)}/approvals", "operations waiting").items
        found = [w for w in waiting if w.get("installationId") == args.installation]
        if not found:
            raise CliError(
                f"nothing waits for approval on {args.installation!r} in workspace {workspace!r}",
                code="not_found",
                detail=f"see what waits: packyard approvals {workspace}",
                exit_code=EXIT_NOT_FOUND,
            )
        digest = str(found[0].get("planDigest"))
        operation_id = str(found[0].get("operationId"))
    decision = "reject" if args.reject else "approve"
    key = args.idempotency_key or str(uuid.uuid4())
    path = _installation_path(workspace, args.installation) + "/approvals"
    body = {"decision": decision, "planDigest": digest}
    if operation_id:
        # the decision is for this operation: if another took its place meanwhile, the answer is stale_authority
        body["operationId"] = operation_id
    reply = ctx.client.request("POST", path, body=body, idempotency_key=key)
    approval = dict(reply.body or {})
    ctx.note(
        f"{decision}d the plan of {args.installation} ([dim]{str(digest)[:12]}…[/]) for operation "
        f"[bold]{approval.get('operationId')}[/]"
    )
    operation = (approval.get("links") or {}).get("operation") or (
        f"/v1/workspaces/{segment(workspace)}/operations/{segment(str(approval.get('operationId')))}"
    )
    if args.no_wait:
        ctx.show(approval, columns=APPROVAL_DECISION_COLUMNS)
        return EXIT_OK
    return finish_operation(ctx, _wait_for_operation(ctx, operation, args.wait_timeout), workspace)
