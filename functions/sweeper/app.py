"""Maintenance task (the maintenance state machine's Map item, run on the EventBridge schedule): sweep one page of
one shard of the due index, as of the scheduled event's time. An event that is not such a task changes nothing."""

from __future__ import annotations

from typing import Any

from packyard.errors import InvalidRequest
from packyard.maintenance import sweeps
from packyard.observability import lambda_entry, logger
from packyard.store.due import DueKind
from packyard.workflow_inputs import SweepTask, parse

SWEEP_CORRELATION = "time"


@lambda_entry(
    SWEEP_CORRELATION, settings=("table_name", "bucket_name", "install_state_machine_arn", "publish_state_machine_arn")
)
def lambda_handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    try:
        task = parse(SweepTask, event)
    except InvalidRequest as refused:
        # a malformed event, or one from a rule that is not ours: say so, change nothing
        logger.warning("sweeper ignored an event it does not understand", extra={"reason": refused.detail})
        return {"ignored": refused.detail}
    page = sweeps.sweep(DueKind(task.kind), task.shard, task.now, task.cursor)
    counts = {name: task.counts.get(name, 0) + page.counts.get(name, 0) for name in {*task.counts, *page.counts}}
    answer: dict[str, Any] = {
        "kind": task.kind,
        "shard": task.shard,
        "time": event["time"],
        "counts": counts,
        "pages": task.pages + 1,
    }
    if page.cursor:
        answer["cursor"] = page.cursor
    return answer
