"""The local stack's record of the change events put on its event bus: an EventBridge rule on the bus (every event
of source ``packyard``) whose target is a CloudWatch Logs group, both on moto, so what the functions put travels
through moto's EventBridge as it would on AWS (a rule matching, a target receiving) and stays readable:
``packyard events [--follow]`` and the tests read the group.

On AWS nothing records the events unless an operator adds a rule of their own (README, "Change events").
"""

from __future__ import annotations

import json
from typing import Any

SOURCE = "packyard"


def log_group_of(bus: str) -> str:
    return f"/packyard/local/events/{bus}"


def record(events: Any, logs: Any, bus: str, *, region: str, account: str) -> str:
    """Route every Packyard event on ``bus`` to a log group; its name."""
    group = log_group_of(bus)
    logs.create_log_group(logGroupName=group)
    rule = f"{bus}-recorder"[:64]
    events.put_rule(Name=rule, EventBusName=bus, EventPattern=json.dumps({"source": [SOURCE]}), State="ENABLED")
    arn = f"arn:aws:logs:{region}:{account}:log-group:{group}"
    events.put_targets(Rule=rule, EventBusName=bus, Targets=[{"Id": "local-recorder", "Arn": arn}])
    return group


def read(logs: Any, group: str, *, after: int = 0) -> list[dict[str, Any]]:
    """The events recorded in ``group`` since ``after`` (epoch milliseconds of their recording), oldest first, as
    EventBridge delivered them (``id``, ``detail-type``, ``source``, ``time``, ``detail``...)."""
    found: list[tuple[int, dict[str, Any]]] = []
    kwargs: dict[str, Any] = {"logGroupName": group, "startTime": after}
    while True:
        page = logs.filter_log_events(**kwargs)
        found += [(e["timestamp"], json.loads(e["message"])) for e in page.get("events", [])]
        if not page.get("nextToken"):
            break
        kwargs["nextToken"] = page["nextToken"]
    found.sort(key=lambda pair: pair[0])
    return [event | {"recordedAt": at} for at, event in found]
