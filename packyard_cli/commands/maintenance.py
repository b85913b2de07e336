"""``packyard sweep``: run every maintenance sweep once on the local stack, now or "as if at" a time, and print what
each did (per kind: expired, settled, ..., for cleanup jobs done / retried / parked, for any failed action
backed_off / parked) and how many items are parked in all (``parked_total``); and
``packyard usage``: what the tenant and a workspace use of their quotas."""

from __future__ import annotations

import argparse
import json
import re
import time
from datetime import UTC, datetime
from typing import Any

from packyard_cli.client import EXIT_OK, EXIT_UNAVAILABLE, EXIT_USAGE, CliError, segment
from packyard_cli.commands.context import Context, local_stack_aws
from packyard_cli.output import Column, dig
from packyard_cli.render import human_size

RELATIVE = re.compile(r"\+(\d+)([smhd])", re.ASCII)
UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
# what the sweeps report besides what they did: how many items of a kind are parked (retried no more) right now
PARKED_TOTAL = "parked_total"
SWEEP_COLUMNS = (
    Column("sweep", dig("sweep"), key=True),
    Column("action", dig("action"), key=True),
    Column("items", dig("items")),
)


def sweep_time(text: str | None, now: float | None = None) -> datetime:
    """``None`` (now), ``+2h`` / ``+30m`` / ``+1d`` (from now), or an RFC 3339 time."""
    base = datetime.fromtimestamp(time.time() if now is None else now, UTC)
    if not text:
        return base
    relative = RELATIVE.fullmatch(text)
    if relative:
        return datetime.fromtimestamp(base.timestamp() + int(relative[1]) * UNITS[relative[2]], UTC)
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise CliError(
            f"--at {text!r} is neither +<n>s|m|h|d nor an RFC 3339 time", code="usage", exit_code=EXIT_USAGE
        ) from None
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def cmd_sweep(ctx: Context, args: argparse.Namespace) -> int:
    """Start the maintenance state machine once, as the schedule does, and print what each sweep did."""
    sfn, machine = local_stack_aws(
        args,
        "maintenanceStateMachine",
        "stepfunctions",
        missing="with a maintenance state machine",
        elsewhere="on AWS the EventBridge schedule runs the sweeps",
    )
    at = sweep_time(args.at)
    event = {"detail-type": "Scheduled Event", "source": "packyard.cli", "time": at.strftime("%Y-%m-%dT%H:%M:%SZ")}
    # an Express run cannot be described afterwards: StartSyncExecution answers once it has stopped (<= 5 minutes)
    finished = sfn.start_sync_execution(stateMachineArn=machine, input=json.dumps(event))
    if finished["status"] != "SUCCEEDED":
        raise CliError(f"the sweep {finished['status'].lower()}", code="unavailable", exit_code=EXIT_UNAVAILABLE)
    totals = _totals(json.loads(finished.get("output") or "{}"))
    ctx.note(f"swept as of {event['time']}")
    rows = [{"sweep": kind, "action": action, "items": count} for (kind, action), count in sorted(totals.items())]
    ctx.show({"time": event["time"], "items": rows}, columns=SWEEP_COLUMNS, empty="nothing was due")
    parked = {kind: count for (kind, action), count in sorted(totals.items()) if action == PARKED_TOTAL}
    if parked:
        listed = ", ".join(f"{count} {kind}" for kind, count in parked.items())
        ctx.warn(f"parked after their last attempt, waiting for an operator: {listed} (see the sweeper's error logs)")
    return EXIT_OK


def _totals(output: dict[str, Any]) -> dict[tuple[str, str], int]:
    totals: dict[tuple[str, str], int] = {}
    for page in output.get("swept", []):
        for action, count in (page.get("counts") or {}).items():
            if action != "not_due" and count:
                key = (str(page.get("kind")), str(action))
                totals[key] = totals.get(key, 0) + int(count)
    return totals


USAGE_COLUMNS = (
    Column("scope", dig("scope"), key=True),
    Column("used", dig("usedBytes"), brief=human_size),
    Column("quota", dig("limitBytes"), brief=human_size),
    Column("installations", dig("installations")),
)


def cmd_usage(ctx: Context, args: argparse.Namespace) -> int:
    """The tenant's stored bytes against its quota, and (with a workspace) the workspace against its limits."""
    rows = [{"scope": "tenant", **dict(ctx.client.request("GET", "/v1/usage").body or {})}]
    if args.workspace:
        path = f"/v1/workspaces/{segment(args.workspace)}/usage"
        rows.append({"scope": f"workspace {args.workspace}", **dict(ctx.client.request("GET", path).body or {})})
    ctx.show({"items": rows}, columns=USAGE_COLUMNS)
    return EXIT_OK


def cmd_whoami(ctx: Context, args: argparse.Namespace) -> int:
    """The principal as the service read it from the token (``GET /v1/me``): what an identity provider's claims
    mapped to (tenant, subject, owner or workflow, scopes and the permissions they grant)."""
    body = dict(ctx.client.request("GET", "/v1/me").body or {})

    def render() -> None:
        for name in ("tenant", "subject", "actor"):
            print(f"{name:<12}{body.get(name, '')}")
        print(f"{'scopes':<12}{' '.join(body.get('scopes') or []) or '(none)'}")
        print(f"{'permissions':<12}{' '.join(body.get('permissions') or []) or '(none)'}")

    ctx.show(body, render=render, columns=WHOAMI_COLUMNS, items=[body])
    return EXIT_OK


WHOAMI_COLUMNS = (
    Column("tenant", dig("tenant"), key=True),
    Column("subject", dig("subject"), key=True),
    Column("actor", dig("actor")),
    Column("permissions", lambda item: " ".join(item.get("permissions") or [])),
)
