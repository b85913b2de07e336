"""Crash after every AWS call of every installation handler, then retry: every run converges.

Tasks are invoked directly (what Step Functions does on Retry, without its real waits); the admission crash is
followed by the client resending the same request with the same Idempotency-Key. After convergence: one operation
per key, settled succeeded, exactly one version bump, the installation equal to the plan, the slot free.
"""

from __future__ import annotations

import contextlib
import json

import boto3
import pytest

from devstack import lambdas
from devstack.faults import InjectedCrash, crash_after
from packyard.errors import NeedsConsent
from packyard.store import workflows
from packyard_cli.build import build_from_files

WS = "ws-crash"
MAX_CALLS = 30
TASKS = ("PlanningFunction", "CommitFunction", "SettlementFunction")
LIFECYCLE_TASKS = ("PlanningFunction", "CommitFunction")  # a commit that lands settles: Settle does not run
API_READ = [{"kind": "api_read"}]


@pytest.fixture
def started(monkeypatch):
    calls: list[dict] = []
    monkeypatch.setattr(workflows, "start", lambda arn, name, payload: calls.append(payload) or name)
    return calls


@pytest.fixture
def published(acme):
    acme.publish("hello", "1.0.0", build_from_files({"SKILL.md": b"one\n"}))
    acme.publish("hello", "2.0.0", build_from_files({"SKILL.md": b"two\n"}))
    return acme


@pytest.fixture
def widening(published):
    """hello@3.0.0 asks a permission 1.0.0 and 2.0.0 do not: a workflow-origin update to it is refused by Plan."""
    published.publish("hello", "3.0.0", build_from_files({"SKILL.md": b"three\n"}, permissions=API_READ))
    return published


def _run_tasks(stack, event, crash_in: str | None = None, k: int = 0):
    """Plan → Commit → Settle as the ASL runs them (its CommitSettled choice: no Settle after a commit that settled
    its operation), crashing once in ``crash_in`` after its k-th AWS call, then retrying it."""
    crashed = False
    for name in TASKS:
        if name == "SettlementFunction" and event.get("commit", {}).get("settled") is True:
            break
        spec = stack.functions[name]
        if name == crash_in:
            result, crashed = _invoke_crashing(spec, event, k)
        else:
            result = lambdas.invoke_handler(spec, event)
        _store(event, name, result)
    return crashed


def _invoke_crashing(spec, event, k: int):
    """The task, crashing after its k-th AWS call, then run again as Step Functions' Retry runs it: its answer, and
    whether it crashed (it made fewer than k calls otherwise)."""
    with crash_after(k) as plan, contextlib.suppress(InjectedCrash):
        return lambdas.invoke_handler(spec, event), False
    return lambdas.invoke_handler(spec, event), plan.crashed


def _store(event, name, result):
    if name == "PlanningFunction":
        event["plan"] = result
    elif name == "CommitFunction":
        event["commit"] = result


def _slot(stack, installation):
    item = (
        boto3.client("dynamodb", region_name=stack.region)
        .get_item(
            TableName=stack.table_name,
            Key={"pk": {"S": f"TENANT#t-acme#WS#{WS}"}, "sk": {"S": f"SLOT#{installation}"}},
            ConsistentRead=True,
        )
        .get("Item")
    )
    return item


def _assert_converged(acme, stack, installation, op_id, version, release):
    op = acme.get(f"/v1/workspaces/{WS}/operations/{op_id}").body
    assert (op["state"], op["outcome"]) == ("settled", {"result": "succeeded"})
    inst = acme.get(f"/v1/workspaces/{WS}/installations/{installation}").body
    assert (inst["version"], inst["release"]["version"], inst["lastOperationId"]) == (version, release, op_id)
    assert "operationId" not in _slot(stack, installation)


@pytest.mark.parametrize("task", LIFECYCLE_TASKS)
def test_each_install_task_converges_after_a_crash_at_every_call(published, stack, started, task):
    for k in range(1, MAX_CALLS):
        installation = f"{task.lower()[:4]}-{k}"
        admitted = published.install(WS, installation, "hello", "1.0.0", key=f"{task}-{k}")
        assert admitted.status == 202
        crashed = _run_tasks(stack, dict(started[-1]), crash_in=task, k=k)

        _assert_converged(published, stack, installation, admitted.body["operationId"], 1, "1.0.0")
        if not crashed:
            break
    assert k > 2, f"{task} made suspiciously few AWS calls"


@pytest.mark.parametrize("task", LIFECYCLE_TASKS)
def test_update_task_crash_never_double_bumps(published, stack, started, task):
    crashed_at: list[int] = []
    for k in range(1, MAX_CALLS):
        installation = f"up-{task.lower()[:4]}-{k}"
        published.install(WS, installation, "hello", "1.0.0", key=f"i-{task}-{k}")
        _run_tasks(stack, dict(started[-1]))
        admitted = published.install(WS, installation, "hello", "2.0.0", key=f"u-{task}-{k}", if_match='"1"')
        crashed = _run_tasks(stack, dict(started[-1]), crash_in=task, k=k)

        _assert_converged(published, stack, installation, admitted.body["operationId"], 2, "2.0.0")
        if not crashed:
            break
        crashed_at.append(k)
    else:
        pytest.fail(f"{task} still crashed after call {MAX_CALLS - 1}: its later crash points were not exercised")
    # the run without a crash is the first k past the task's last AWS call: every call before it was a crash point,
    # and the crash must really have been injected there (else this test proves nothing about double bumps)
    assert crashed_at == list(range(1, k)), f"{task}: crashes injected after calls {crashed_at}, expected 1..{k - 1}"
    assert len(crashed_at) >= 2, f"{task}: crash injected after only {len(crashed_at)} call(s); is injection working?"


def test_settle_of_a_refused_plan_converges_after_a_crash_at_every_call(widening, stack, started):
    """Settle still runs for what the commit did not settle: a workflow-origin update that would widen grants is
    refused by Plan (NeedsConsent) and Settle records the refusal, crashing after its k-th AWS call and retried."""
    settle = stack.functions["SettlementFunction"]
    for k in range(1, MAX_CALLS):
        installation = f"refused-{k}"
        widening.install(WS, installation, "hello", "1.0.0", key=f"i-refused-{k}")
        _run_tasks(stack, dict(started[-1]))
        admitted = widening.install(
            WS, installation, "hello", "3.0.0", key=f"u-refused-{k}", if_match='"1"', origin="workflow"
        )
        event = dict(started[-1])
        with pytest.raises(NeedsConsent) as refused:
            lambdas.invoke_handler(stack.functions["PlanningFunction"], event)
        event["error"] = {"Error": "NeedsConsent", "Cause": json.dumps({"errorMessage": str(refused.value)})}
        _, crashed = _invoke_crashing(settle, event, k)

        op = widening.get(f"/v1/workspaces/{WS}/operations/{admitted.body['operationId']}").body
        assert (op["state"], op["outcome"]["result"], op["outcome"]["code"]) == ("settled", "refused", "needs_consent")
        inst = widening.get(f"/v1/workspaces/{WS}/installations/{installation}").body
        assert (inst["version"], inst["release"]["version"]) == (1, "1.0.0")  # nothing committed
        assert "operationId" not in _slot(stack, installation)
        if not crashed:
            break
    assert k > 2, "Settle made suspiciously few AWS calls"


def test_admission_crash_then_client_resend_converges(published, stack, started):
    for k in range(1, MAX_CALLS):
        installation = f"adm-{k}"
        with crash_after(k) as plan, contextlib.suppress(InjectedCrash):
            published.install(WS, installation, "hello", "1.0.0", key=f"adm-{k}")
        resent = published.install(WS, installation, "hello", "1.0.0", key=f"adm-{k}")
        assert resent.status == 202, resent.body
        _run_tasks(stack, dict(started[-1]))

        _assert_converged(published, stack, installation, resent.body["operationId"], 1, "1.0.0")
        if not plan.crashed:
            break
    assert k > 1
