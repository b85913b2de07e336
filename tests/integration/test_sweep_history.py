"""One maintenance execution stays under Step Functions' 25,000-event history limit whatever the backlog.

Each page is a Task (5 events: entered, scheduled, started, succeeded, exited) and a Choice (2), so a run that swept
page after page until nothing was due failed its execution above ~3,500 pages (a 175,000-item backlog at 50 a
page). The Map item now stops after 40 pages a run (the rest stays due for the next scheduled run): 32 shards x 40
pages x at most 16 events a page (3 retries add 3 events each) is 20,480. Here the page size is 1, so 4,000 items are
the 4,000 pages of a 200,000-item backlog at the deployed 50 (the old definition's one run: ~28,000 events).
The maintenance machine is Express now: its runs have no GetExecutionHistory and no 25,000-event limit, but at most
5 minutes each, and the same page bound is what keeps a run's work (and so its duration) bounded. The run's events
are read as its CloudWatch Logs would show them (``devstack.express.history``), and the bound is still checked.
"""

from __future__ import annotations

import json
from typing import Any

import boto3
import pytest

import devstack
from devstack import express
from packyard import clock
from packyard.maintenance import jobs, sweeps
from packyard.store import due
from packyard.store.due import DueKind
from tests.support.sweeping import failures, scheduled_time

HISTORY_LIMIT = 25_000  # Step Functions Standard: events per execution history
PAGES_PER_RUN = 40  # statemachines/maintenance.asl.json, MorePages
SHARDS = 4 * due.SHARDS  # kinds x shards of the Map
WORST_EVENTS_PER_PAGE = 5 + 3 * 3 + 2  # Task, three retries, Choice
BACKLOG = 4_000  # cleanup jobs, ~500 a shard, a page each: the page count of 200,000 items at 50 a page


def _run(stack: devstack.Stack, at: int) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    event = json.loads((devstack.ROOT / "events" / "schedule_sweep.json").read_text())
    event["time"] = scheduled_time(at)
    sfn = boto3.client("stepfunctions", region_name=stack.region)
    started = sfn.start_execution(
        stateMachineArn=stack.state_machine_arns["MaintenanceStateMachine"], input=json.dumps(event)
    )
    finished = devstack.wait_for_execution(started["executionArn"], timeout=600)
    return finished, express.history(started["executionArn"])


def _due_jobs(now: int) -> int:
    return sum(len(due.query(DueKind.JOB, shard, now, limit=1000, cursor=None)[0]) for shard in range(due.SHARDS))


def test_a_backlog_deeper_than_a_run_sweeps_over_runs_each_within_the_history_limit(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert SHARDS * PAGES_PER_RUN * WORST_EVENTS_PER_PAGE + 500 < HISTORY_LIMIT  # the bound holds with retries
    with devstack.local_aws() as stack:
        monkeypatch.setattr(sweeps, "PAGE_SIZE", 1)
        now = clock.now()
        for index in range(BACKLOG):
            jobs.enqueue("t-backlog", jobs.JobKind.STAGING, {"uploadId": f"u-{index}", "token": "k"}, now)
        at = now + 60
        assert _due_jobs(at) == BACKLOG

        finished, history = _run(stack, at)
        assert finished["status"] == "SUCCEEDED", (finished, failures(history))
        swept = json.loads(finished["output"])["swept"]
        job_pages = [item["pages"] for item in swept if item["kind"] == "job"]
        deep = [item for item in swept if item["kind"] == "job" and item.get("cursor")]
        assert deep and all(item["pages"] == PAGES_PER_RUN for item in deep)  # stopped at the bound, more is due
        assert max(job_pages) == PAGES_PER_RUN
        left = _due_jobs(at)
        assert 0 < left == BACKLOG - sum(item["counts"].get("done", 0) for item in swept if item["kind"] == "job")
        pages = sum(1 for e in history if e["type"] == "LambdaFunctionScheduled")
        assert pages == sum(item["pages"] for item in swept)
        assert len(history) < HISTORY_LIMIT
        per_page = (len(history) - 4 * SHARDS - 10) / pages  # less the Map's per-item and the execution's events
        assert per_page <= 7.5, per_page

        done = BACKLOG - left
        finished, history = _run(stack, at)  # the next scheduled run takes the next 40 pages of each shard
        assert finished["status"] == "SUCCEEDED", (finished, failures(history))
        assert len(history) < HISTORY_LIMIT
        assert _due_jobs(at) == left - done
