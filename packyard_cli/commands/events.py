"""``packyard events [--follow]``: the change events (``Release Published``, ``Release Yanked``, ``Release
Unavailable``, ``Operation Settled``) the local stack's event bus received, as its recorder (a rule to a log group,
``devstack.event_log``) kept them; ``--follow`` waits for more until Ctrl-C. On AWS the bus is the stack's
``EventBusName`` output: add a rule of your own there (README, "Change events")."""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

from packyard_cli.client import EXIT_OK
from packyard_cli.commands.context import Context, local_stack_aws
from packyard_cli.output import Column, dig

FOLLOW_EVERY_SECONDS = 1.0


def _subject(event: dict[str, Any]) -> str:
    detail = event.get("detail") or {}
    if "operationId" in detail:
        return f"{detail.get('workspace')}/{detail.get('installationId')} {detail.get('kind')}: {detail.get('result')}"
    return f"{detail.get('package')}@{detail.get('version')}"


EVENT_COLUMNS = (
    Column("time", dig("time")),
    Column("type", dig("detail-type"), key=True),
    Column("tenant", lambda e: (e.get("detail") or {}).get("tenant")),
    Column("subject", _subject),
    Column("eventId", lambda e: (e.get("detail") or {}).get("eventId"), key=True),
)


def _recorder(args: argparse.Namespace) -> tuple[Any, str]:
    return local_stack_aws(
        args,
        "eventLog",
        "logs",
        missing="recording change events",
        elsewhere="on AWS add a rule to the stack's EventBusName",
    )


def _wanted(event: dict[str, Any], args: argparse.Namespace) -> bool:
    return not args.type or event.get("detail-type") in args.type


def cmd_events(ctx: Context, args: argparse.Namespace) -> int:
    """The recorded change events, oldest first; with --follow, then each new one as it arrives."""
    from devstack import event_log

    logs, group = _recorder(args)
    seen = [e for e in event_log.read(logs, group) if _wanted(e, args)]
    if not args.follow:
        ctx.show({"items": seen}, columns=EVENT_COLUMNS, empty="no change events yet")
        return EXIT_OK
    after = max((e["recordedAt"] for e in seen), default=0)
    known = {e["id"] for e in seen}
    for event in seen:
        _print(ctx, event)
    try:
        while True:
            time.sleep(FOLLOW_EVERY_SECONDS)
            fresh = [e for e in event_log.read(logs, group, after=after) if e["id"] not in known]
            for event in fresh:
                known.add(event["id"])
                after = max(after, event["recordedAt"])
                if _wanted(event, args):
                    _print(ctx, event)
    except KeyboardInterrupt:
        return EXIT_OK


def _print(ctx: Context, event: dict[str, Any]) -> None:
    """One event as it arrives: a JSON line (--output json), else a line of the table's columns."""
    if ctx.json:
        print(json.dumps(event, sort_keys=True), flush=True)
    else:
        print("  ".join(str(column.get(event) or "-") for column in EVENT_COLUMNS), flush=True)
