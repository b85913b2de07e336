"""counter_changes: how the live-installation counters (the workspace's, and each task's) move when a plan replaces
its baseline. Only live rows count; only task scopes have a per-task counter."""

from __future__ import annotations

import pytest

from packyard.config import limits
from packyard.installations.models import Creation, Installation, InstallationStatus
from packyard.installations.scopes import Scope, ScopeKind
from packyard.operations.commit import counter_changes

NOW = 1_700_000_000
WS = "workspace counter"  # placeholder in the tables for the workspace's own counter (task id None)

ACTIVE, REMOVED = InstallationStatus.ACTIVE, InstallationStatus.REMOVED
WORKSPACE = Scope()


def task(task_id: str) -> Scope:
    return Scope(kind=ScopeKind.TASK, id=task_id)


def row(scope: Scope = WORKSPACE, status: InstallationStatus = ACTIVE, version: int = 1) -> Installation:
    return Installation(
        tenant="t-acme",
        workspace="ws-1",
        installation_id="hello-1",
        instance_id="inst-1",
        version=version,
        status=status,
        creation=Creation.FRESH,
        package="hello",
        scope=scope,
        last_operation_id="op-1",
        updated_at=NOW,
    )


def resolved(expected: list[tuple[str, int]]) -> list[tuple[str | None, int, int]]:
    bounds = limits()
    return [
        (None, delta, bounds.max_installations_per_workspace)
        if counter == WS
        else (counter, delta, bounds.max_installations_per_task)
        for counter, delta in expected
    ]


@pytest.mark.parametrize(
    ("baseline", "plan", "expected"),
    [
        pytest.param(None, row(), [(WS, +1)], id="install, workspace scope"),
        pytest.param(None, row(task("t1")), [(WS, +1), ("t1", +1)], id="install, task scope"),
        pytest.param(None, row(Scope(kind=ScopeKind.SESSION, id="s1")), [(WS, +1)], id="install, session scope"),
        pytest.param(None, row(Scope(kind=ScopeKind.REPOSITORY, id="r1")), [(WS, +1)], id="install, repository scope"),
        pytest.param(
            row(task("t1"), REMOVED),
            row(task("t2"), version=2),
            [(WS, +1), ("t2", +1)],
            id="reinstall over a removed row: the removed row counts for nothing",
        ),
        pytest.param(
            row(task("t1"), REMOVED),
            row(task("t1"), version=2),
            [(WS, +1), ("t1", +1)],
            id="reinstall into the task it was removed from",
        ),
        pytest.param(row(), row(status=REMOVED, version=2), [(WS, -1)], id="uninstall, workspace scope"),
        pytest.param(
            row(task("t1")), row(task("t1"), REMOVED, version=2), [(WS, -1), ("t1", -1)], id="uninstall, task scope"
        ),
        pytest.param(row(task("t1")), row(task("t1"), version=2), [], id="update staying in the same task"),
        pytest.param(row(), row(version=2), [], id="update staying in workspace scope"),
        pytest.param(
            row(task("t1")), row(task("t2"), version=2), [("t1", -1), ("t2", +1)], id="move from one task to another"
        ),
        pytest.param(row(task("t1")), row(version=2), [("t1", -1)], id="move from a task to workspace scope"),
        pytest.param(row(), row(task("t2"), version=2), [("t2", +1)], id="move from workspace scope into a task"),
        pytest.param(
            row(Scope(kind=ScopeKind.SESSION, id="s1")),
            row(Scope(kind=ScopeKind.REPOSITORY, id="r1"), version=2),
            [],
            id="move between non-task scopes",
        ),
        pytest.param(
            row(Scope(kind=ScopeKind.SESSION, id="t1")),
            row(task("t1"), version=2),
            [("t1", +1)],
            id="a session id equal to a task id is not that task",
        ),
    ],
)
def test_given_a_baseline_when_the_plan_replaces_it_then_the_live_counters_move_by(baseline, plan, expected):
    assert counter_changes(baseline, plan) == resolved(expected)
