"""The install workflow on Express, through the real state machine: duplicated runs, duplicated task runs, a run
killed mid-way and a run stopped by the 5-minute limit all converge with exactly one commit per operation.

Express runs at least once and never deduplicates by name (``devstack.faults.duplicate_executions`` starts every
run twice; ``duplicate_task_runs`` runs every Lambda task twice, the second answer winning). One execution per
operation is the Plan step's claim (``runner``, fenced on the operation's version): a second run finds the
operation claimed and ends at ``Duplicate``. A run that stops without settling leaves its operation to the sweep,
which restarts it past its lease (no execution is looked up) and the new run replays what is recorded.

"Exactly one commit" is counted where it happens: the successful ``store.workspace.commit`` transactions (one per
operation) and the successful ``store.workspace.settle`` ones; and the installation's version, its live counter and
its referenced bytes say the change landed once.
"""

from __future__ import annotations

import json
import threading
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import boto3
import pytest

import devstack
from devstack import express
from devstack.caller import Caller
from devstack.faults import InjectedCrash, crash_after, duplicate_executions, duplicate_task_runs
from packyard import clock
from packyard.config import limits
from packyard.maintenance import sweeps
from packyard.operations import commit, planning
from packyard.store import due, workflows, workspace
from packyard.store.due import DueKind
from packyard_cli.build import build_from_files

WS = "ws-express"
PERMISSION = [{"kind": "network", "resource": "api.example"}]


@pytest.fixture
def releases(acme: Caller) -> Caller:
    acme.publish("hello", "1.0.0", build_from_files({"SKILL.md": b"one\n"}))
    acme.publish("hello", "2.0.0", build_from_files({"SKILL.md": b"two\n" * 10}))
    acme.publish("asks", "1.0.0", build_from_files({"SKILL.md": b"asks\n"}, permissions=PERMISSION))
    return acme


@pytest.fixture
def writes(monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    """Successful commit and settle transactions, by operation id (``commit:<op>``, ``settle:<op>``)."""
    done: Counter[str] = Counter()
    real_commit, real_settle = workspace.commit, workspace.settle

    def counted_commit(op: Any, committed: Any, *args: Any, **kwargs: Any) -> Any:
        conflict = real_commit(op, committed, *args, **kwargs)
        if conflict is None:
            done[f"commit:{op.operation_id}"] += 1
            if committed.state == "settled":  # the commit settled it in the same transaction
                done[f"settle:{op.operation_id}"] += 1
        return conflict

    def counted_settle(op: Any, *args: Any, **kwargs: Any) -> bool:
        settled = real_settle(op, *args, **kwargs)
        if settled:
            done[f"settle:{op.operation_id}"] += 1
        return settled

    monkeypatch.setattr(workspace, "commit", counted_commit)
    monkeypatch.setattr(workspace, "settle", counted_settle)
    return done


def _item(stack: devstack.Stack, sk: str) -> dict[str, Any] | None:
    found: dict[str, Any] | None = (
        boto3.client("dynamodb")
        .get_item(TableName=stack.table_name, Key={"pk": {"S": f"TENANT#t-acme#WS#{WS}"}, "sk": {"S": sk}})
        .get("Item")
    )
    return found


def _live(stack: devstack.Stack) -> tuple[int, int]:
    """The workspace's live-installation counter and the bytes its installations reference."""
    count = _item(stack, "COUNT#WORKSPACE") or {}
    return (int(count["n"]["N"]) if "n" in count else 0, int(count["usedBytes"]["N"]) if "usedBytes" in count else 0)


def _runs(stack: devstack.Stack, op: dict[str, Any]) -> list[express.ExpressRun]:
    name = op["operationId"] if not op.get("attempt") else f"{op['operationId']}-{op['attempt']}"
    return devstack.express_runs(stack.state_machine_arns["InstallStateMachine"], name)


def _ended_as_duplicate(run: express.ExpressRun) -> bool:
    output = json.loads(run.output) if isinstance(run.output, str) else run.output or {}
    return run.status == "SUCCEEDED" and (output.get("error") or {}).get("Error") == "ClaimLost"


def _archive_size(caller: Caller, version: str) -> int:
    return int(caller.get(f"/v1/packages/hello/versions/{version}").body["archive"]["size"])


def _assert_one_commit(
    stack: devstack.Stack, caller: Caller, writes: Counter[str], op: dict[str, Any], *, answered: int = 1
) -> None:
    """Settled succeeded, by the one commit that settles it; ``answered`` commits returned (0: the one commit's
    task died right after it, so its answer never came, and its settlement is in it; the installation's version
    tells it landed once). No settle of its own ever follows."""
    assert (op["state"], op["outcome"]) == ("settled", {"result": "succeeded"}), op
    assert writes[f"commit:{op['operationId']}"] == answered, writes
    assert writes[f"settle:{op['operationId']}"] == answered, writes
    assert "operationId" not in (_item(stack, "SLOT#hello") or {})  # the slot is free


# ---- duplicated runs and duplicated task runs ------------------------------------------------------------------


def test_given_duplicated_runs_and_tasks_when_installing_then_one_commit_and_the_duplicate_ends_at_duplicate(
    stack: devstack.Stack, releases: Caller, writes: Counter[str]
) -> None:
    with duplicate_executions() as runs, duplicate_task_runs() as tasks:
        op = releases.wait_settled(WS, releases.install(WS, "hello", "hello", "1.0.0", key="k-install"))

    assert runs.total >= 1 and tasks.counts["PlanningFunction"] >= 1  # duplicates really happened
    _assert_one_commit(stack, releases, writes, op)
    installation = releases.get(releases.installation_path(WS, "hello")).body
    assert (installation["version"], installation["release"]["version"]) == (1, "1.0.0")
    assert _live(stack) == (1, _archive_size(releases, "1.0.0"))
    both = _runs(stack, op)
    assert len(both) == 2 and sum(_ended_as_duplicate(run) for run in both) == 1, both


def test_given_duplicated_runs_and_tasks_when_updating_then_the_version_is_bumped_once(
    stack: devstack.Stack, releases: Caller, writes: Counter[str]
) -> None:
    releases.wait_settled(WS, releases.install(WS, "hello", "hello", "1.0.0", key="k-install"))
    with duplicate_executions() as runs, duplicate_task_runs() as tasks:
        admitted = releases.install(WS, "hello", "hello", "2.0.0", key="k-update", if_match='"1"')
        op = releases.wait_settled(WS, admitted)

    assert runs.total >= 1 and tasks.total >= 3
    _assert_one_commit(stack, releases, writes, op)
    installation = releases.get(releases.installation_path(WS, "hello")).body
    assert (installation["version"], installation["release"]["version"]) == (2, "2.0.0")
    assert installation["previous"]["version"] == "1.0.0"
    assert _live(stack) == (1, _archive_size(releases, "2.0.0"))


def test_given_duplicated_runs_and_tasks_when_uninstalling_then_it_is_removed_once_and_the_counters_drop_once(
    stack: devstack.Stack, releases: Caller, writes: Counter[str]
) -> None:
    releases.wait_settled(WS, releases.install(WS, "hello", "hello", "1.0.0", key="k-install"))
    with duplicate_executions() as runs, duplicate_task_runs() as tasks:
        op = releases.wait_settled(WS, releases.uninstall(WS, "hello", key="k-remove", if_match='"1"'))

    assert runs.total >= 1 and tasks.total >= 3
    _assert_one_commit(stack, releases, writes, op)
    removed = releases.get(releases.installation_path(WS, "hello")).body
    assert (removed["status"], removed["version"]) == ("removed", 2)
    assert _live(stack) == (0, 0)


def test_given_duplicated_runs_and_tasks_when_consent_is_approved_then_one_wait_one_decision_one_commit(
    stack: devstack.Stack, releases: Caller, writes: Counter[str]
) -> None:
    with duplicate_executions() as runs, duplicate_task_runs() as tasks:
        admitted = releases.install(WS, "hello", "asks", "1.0.0", key="k-asks")
        waiting = releases.wait_for_consent(WS, admitted)
        assert waiting["state"] == "awaiting_consent"
        assert len(releases.get(f"/v1/workspaces/{WS}/approvals").body["items"]) == 1
        assert releases.decide(WS, waiting, "approve").status == 200
        op = releases.wait_settled(WS, releases.get(f"/v1/workspaces/{WS}/operations/{waiting['operationId']}"))

    assert runs.total >= 2 and tasks.counts["ConsentFunction"] >= 1
    _assert_one_commit(stack, releases, writes, op)
    installation = releases.get(releases.installation_path(WS, "hello")).body
    assert (installation["version"], installation["grantGeneration"]) == (1, 1)
    assert [g["kind"] for g in installation["grants"]] == ["network"]
    assert releases.get(f"/v1/workspaces/{WS}/approvals").body["items"] == []
    # two runs before the decision (one recorded the wait, one was a duplicate), two after (one committed)
    ran = _runs(stack, op)
    assert len(ran) == 4 and sum(_ended_as_duplicate(run) for run in ran) == 2, ran


def test_given_a_settled_operation_when_a_duplicate_run_starts_then_nothing_changes(
    stack: devstack.Stack, releases: Caller, writes: Counter[str]
) -> None:
    op = releases.wait_settled(WS, releases.install(WS, "hello", "hello", "1.0.0", key="k-install"))
    late = boto3.client("stepfunctions").start_execution(
        stateMachineArn=stack.state_machine_arns["InstallStateMachine"],
        name=op["operationId"],
        input=json.dumps(
            {"tenant": "t-acme", "workspace": WS, "installationId": "hello", "operationId": op["operationId"]}
            | {"attempt": 0}
        ),
    )
    ended = devstack.wait_for_execution(late["executionArn"], timeout=60)

    assert ended["status"] == "SUCCEEDED" and json.loads(ended["output"])["error"]["Error"] == "ClaimLost"
    assert releases.get(f"/v1/workspaces/{WS}/operations/{op['operationId']}").body == op
    assert releases.get(releases.installation_path(WS, "hello")).body["version"] == 1
    assert writes[f"commit:{op['operationId']}"] == 1 and writes[f"settle:{op['operationId']}"] == 1


# ---- a run that stops without settling: killed mid-way, or stopped by the 5-minute limit --------------------------


@dataclass
class Dying:
    """A task that dies (or stalls) in its first run: ``release`` lets it go on once the test saw its run stop;
    ``done`` is set when it has made its last call."""

    release: threading.Event = field(default_factory=threading.Event)
    done: threading.Event = field(default_factory=threading.Event)


def _killed_in(monkeypatch: pytest.MonkeyPatch, module: Any, name: str, k: int | None) -> Dying:
    """The task ``module.name`` of the next run dies right after its k-th AWS call (``crash_after``), or (k None)
    stalls before any, while its run is stopped by the Express limit: nothing after the task runs (no Catch, no
    Settle). A stalled task, released, then finishes its work after its run was stopped, as a Lambda does."""
    real: Callable[..., Any] = getattr(module, name)
    dying = Dying()
    first: list[bool] = []

    def task(*args: Any, **kwargs: Any) -> Any:
        if first:
            return real(*args, **kwargs)  # the restarted run's
        first.append(True)
        try:
            if k is None:
                dying.release.wait(60)
                return real(*args, **kwargs)
            try:
                with crash_after(k) as plan:
                    real(*args, **kwargs)
            except InjectedCrash:
                pass
            assert plan.crashed, f"{name} made fewer than {k} AWS calls"
        finally:
            dying.done.set()
        dying.release.wait(60)
        raise InjectedCrash(f"{name} died after call {k}")

    monkeypatch.setattr(module, name, task)
    return dying


def _swept_after_the_lease(op_id: str) -> Counter[str]:
    return sweeps.sweep(
        DueKind.OPERATION, due.shard_of(op_id), clock.now() + limits().operation_lease_seconds + 1
    ).counts


@pytest.mark.parametrize(
    ("task", "k", "left"),
    [
        ("plan_task", 1, "admitted"),  # died after its read
        ("plan_task", 3, "planned"),  # died right after recording the plan (its claim): read, manifest, write
        ("commit_task", 1, "planned"),  # died after reading the operation
        ("commit_task", 2, "planned"),  # died after putting its release's holder (before the commit)
        ("commit_task", 3, "settled"),  # died right after its commit transaction (which settled it)
    ],
    ids=["plan-read", "plan-written", "commit-read", "commit-held", "commit-written"],
)
def test_given_a_run_killed_mid_way_when_swept_after_its_lease_then_it_converges_with_one_commit(
    stack: devstack.Stack,
    releases: Caller,
    writes: Counter[str],
    monkeypatch: pytest.MonkeyPatch,
    task: str,
    k: int,
    left: str,
) -> None:
    module = planning if task == "plan_task" else commit
    dying = _killed_in(monkeypatch, module, task, k)
    with express.limit(1.0):
        admitted = releases.install(WS, "hello", "hello", "1.0.0", key=f"k-{task}-{k}")
        (run,) = _runs(stack, admitted.body)
        stopped = devstack.wait_for_execution(run.arn, timeout=60)
    dying.release.set()
    assert dying.done.wait(60)
    op_id = admitted.body["operationId"]
    assert stopped["status"] == "TIMED_OUT"
    assert releases.get(f"/v1/workspaces/{WS}/operations/{op_id}").body["state"] == left

    swept = _swept_after_the_lease(op_id)

    # a run that died after its commit left nothing for the sweep: the commit settled the operation
    assert swept == (Counter({"started": 1}) if left != "settled" else Counter()), swept
    op = releases.wait_settled(WS, releases.get(f"/v1/workspaces/{WS}/operations/{op_id}"))
    _assert_one_commit(stack, releases, writes, op, answered=0 if left == "settled" else 1)
    assert releases.get(releases.installation_path(WS, "hello")).body["version"] == 1
    assert _live(stack) == (1, _archive_size(releases, "1.0.0"))
    assert _item(stack, f"OP#{op_id}")["restarts"]["N"] == ("1" if left != "settled" else "0")  # type: ignore[index]


@pytest.mark.parametrize("task", ["plan_task", "commit_task"])
def test_given_a_run_stopped_by_the_time_limit_when_swept_after_its_lease_then_it_converges_with_one_commit(
    stack: devstack.Stack, releases: Caller, writes: Counter[str], monkeypatch: pytest.MonkeyPatch, task: str
) -> None:
    dying = _killed_in(monkeypatch, planning if task == "plan_task" else commit, task, None)
    with express.limit(1.0):
        admitted = releases.install(WS, "hello", "hello", "1.0.0", key=f"k-slow-{task}")
        (run,) = _runs(stack, admitted.body)
        stopped = devstack.wait_for_execution(run.arn, timeout=60)
    op_id = admitted.body["operationId"]
    dying.release.set()  # the slow task finishes after its run was stopped (its write lands; nothing after it runs)
    assert dying.done.wait(60)
    assert stopped["status"] == "TIMED_OUT"
    expected = "planned" if task == "plan_task" else "settled"  # a commit settles the operation it commits
    assert releases.get(f"/v1/workspaces/{WS}/operations/{op_id}").body["state"] == expected

    swept = _swept_after_the_lease(op_id)

    assert swept == (Counter({"started": 1}) if task == "plan_task" else Counter()), swept
    op = releases.wait_settled(WS, releases.get(f"/v1/workspaces/{WS}/operations/{op_id}"))
    _assert_one_commit(stack, releases, writes, op)
    assert releases.get(releases.installation_path(WS, "hello")).body["version"] == 1


def test_given_an_operation_whose_restarts_are_spent_when_swept_then_it_settles_interrupted(
    stack: devstack.Stack, releases: Caller, writes: Counter[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(workflows, "start", lambda *args: "no run ever starts")
    admitted = releases.install(WS, "hello", "hello", "1.0.0", key="k-never")
    op_id = admitted.body["operationId"]
    lease = limits().operation_lease_seconds
    counts = [
        sweeps.sweep(DueKind.OPERATION, due.shard_of(op_id), clock.now() + n * (lease + 1)).counts
        for n in range(1, sweeps.MAX_RESTARTS + 2)
    ]

    assert counts == [Counter({"started": 1})] * sweeps.MAX_RESTARTS + [Counter({"settled": 1})]
    op = releases.get(f"/v1/workspaces/{WS}/operations/{op_id}").body
    assert (op["state"], op["outcome"]["result"], op["outcome"]["code"]) == ("settled", "unconfirmed", "interrupted")
    assert writes[f"commit:{op_id}"] == 0 and releases.get(releases.installation_path(WS, "hello")).status == 404
    assert "operationId" not in (_item(stack, "SLOT#hello") or {})
