"""A crash at every AWS call of every sweep action converges on a re-run, and nothing referenced is ever deleted.

Each case sets up one thing that is due (in a tenant of its own, on one moto stack), then sweeps with the process
"dying" right after the k-th AWS call made by a sweep action (k = 1, 2, … until the actions make fewer calls): the
call's effect has landed and nothing after it runs, not even the sweep's own failure bookkeeping (the crash is
raised as a ``BaseException``, which the sweep loop does not catch, as a killed Lambda would not run it). Then the
sweeps run again, as the next scheduled runs would (a day later: past any claim or backoff), and the stored state
must be exactly what one clean sweep makes. The state machines are not used here (their Retry waits would dominate):
the sweep actions are called as the sweeper handler calls them; tests/integration/test_maintenance.py runs the real
maintenance state machine.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import boto3
import pytest

import devstack
from devstack.api import LocalApi
from devstack.caller import Caller
from devstack.faults import InjectedCrash, crash_after
from packyard import clock, config
from packyard.maintenance import sweeps
from packyard.publishing import resumption
from packyard.store import workflows
from packyard.store.due import DueKind
from packyard_cli.build import build_from_files
from tests.support.callers import used_bytes
from tests.support.sweeping import install_with_settle_down, sweep_kinds

HOUR = 3600
DAY = 24 * HOUR
MAX_CALLS = 16  # a blob reclaim reads its file pack's index and deletes the pack too (issue 22)
WS = "ws-crash"


class ProcessDied(BaseException):
    """The sweeper's process ended at the injected crash: nothing after it runs, not even ``except Exception``."""


@pytest.fixture(scope="module")
def stack() -> Iterator[devstack.Stack]:
    with devstack.local_aws() as created:
        yield created


@pytest.fixture(autouse=True)
def _fresh_config() -> Iterator[None]:
    """A case may change a limit through the environment: settings read after it are read anew."""
    yield
    config.reset()


class DyingActions:
    """Every sweep action runs under one crash budget: the k-th AWS call the actions make (counted across actions,
    the index reads of the sweep itself aside) ends the process."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, k: int) -> None:
        self.k, self.calls, self.crashed = k, 0, False
        for kind, action in list(sweeps._ACTIONS.items()):
            monkeypatch.setitem(sweeps._ACTIONS, kind, self.wrap(action))

    def wrap(self, action: Callable[[dict[str, Any], int], str]) -> Callable[[dict[str, Any], int], str]:
        def dying(item: dict[str, Any], now: int) -> str:
            if self.crashed:
                raise ProcessDied("already dead")
            with crash_after(self.k - self.calls) as plan:
                try:
                    return action(item, now)
                except InjectedCrash as crash:
                    self.crashed = True
                    raise ProcessDied(str(crash)) from crash
                finally:
                    self.calls += len(plan.calls)

        return dying


def _staged_keys(stack: devstack.Stack, tenant: str) -> list[str]:
    listed = boto3.client("s3").list_objects_v2(Bucket=stack.bucket_name, Prefix=f"uploads/{tenant}/")
    return [o["Key"] for o in listed.get("Contents", [])]


def _blob_keys(stack: devstack.Stack, tenant: str) -> list[str]:
    listed = boto3.client("s3").list_objects_v2(Bucket=stack.bucket_name, Prefix=f"blobs/{tenant}/")
    return sorted(o["Key"] for o in listed.get("Contents", []))


def _blob_records(stack: devstack.Stack, tenant: str) -> list[str]:
    client = boto3.client("dynamodb")
    found = client.scan(
        TableName=stack.table_name,
        FilterExpression="begins_with(pk, :p) AND sk = :blob",
        ExpressionAttributeValues={":p": {"S": f"TENANT#{tenant}#BLOB#"}, ":blob": {"S": "BLOB"}},
        ConsistentRead=True,
    )
    return sorted(i["pk"]["S"] for i in found["Items"] if "reclaimedAt" not in i)


@dataclass
class Case:
    """Set up something due for ``tenant``; after the sweeps converge, ``check`` asserts what one clean sweep makes."""

    kinds: tuple[DueKind, ...]
    setup: Callable[[devstack.Stack, Caller, pytest.MonkeyPatch], dict[str, Any]]
    check: Callable[[devstack.Stack, Caller, dict[str, Any]], None]
    later: int = 2 * HOUR


def _expired_session_setup(stack: devstack.Stack, caller: Caller, mp: pytest.MonkeyPatch) -> dict[str, Any]:
    session = caller.request_upload("hello", "1.0.0", build_from_files({"SKILL.md": b"v1\n"}))
    assert session.status == 201
    return {"upload": session.body["uploadId"]}


def _expired_session_check(stack: devstack.Stack, caller: Caller, state: dict[str, Any]) -> None:
    assert caller.get(f"/v1/uploads/{state['upload']}").body["state"] == "expired"
    assert used_bytes(stack, caller.tenant) == 0  # the reservation came back, once
    assert _staged_keys(stack, caller.tenant) == []


def _unstarted_verify_setup(stack: devstack.Stack, caller: Caller, mp: pytest.MonkeyPatch) -> dict[str, Any]:
    """Completed, and no run of its verification ever starts; with no resumes left (MAX_RESUMES 0) the first sweep
    past its window rejects it. (The sweep used to look the execution up and reject a never-started one at once;
    now a session past its window is started again up to MAX_RESUMES times, and rejected after: "verify-renewed"
    crashes the renewal.)"""
    return _verifying_forever(caller, mp, resumes_allowed=0)


def _renewed_verify_setup(stack: devstack.Stack, caller: Caller, mp: pytest.MonkeyPatch) -> dict[str, Any]:
    """As "verify-never-ran" with one resume allowed: the first sweep renews it (and starts a run that never
    comes), the next one rejects it."""
    return _verifying_forever(caller, mp, resumes_allowed=1)


def _verifying_forever(caller: Caller, mp: pytest.MonkeyPatch, *, resumes_allowed: int) -> dict[str, Any]:
    built = build_from_files({"SKILL.md": b"v1\n"})
    session = caller.request_upload("hello", "1.0.0", built)
    caller.put_archive(session.body, built.archive)
    mp.setattr(workflows, "start", lambda *args: "never started")
    mp.setattr(resumption, "MAX_RESUMES", resumes_allowed)
    assert caller.post(f"/v1/uploads/{session.body['uploadId']}/complete").status == 202
    return {"upload": session.body["uploadId"]}


def _unstarted_verify_check(stack: devstack.Stack, caller: Caller, state: dict[str, Any]) -> None:
    upload = caller.get(f"/v1/uploads/{state['upload']}").body
    assert upload["state"] == "rejected"
    assert used_bytes(stack, caller.tenant) == 0
    assert _staged_keys(stack, caller.tenant) == []


def _stuck_settle_setup(stack: devstack.Stack, caller: Caller, mp: pytest.MonkeyPatch) -> dict[str, Any]:
    caller.publish("hello", "1.0.0", build_from_files({"SKILL.md": b"v1\n"}))

    admitted, _ = install_with_settle_down(stack, caller, WS, "hello", "hello", "1.0.0", key="k-stuck")
    operation = admitted.body["operationId"]
    assert caller.get(f"/v1/workspaces/{WS}/operations/{operation}").body["state"] == "committed"
    return {"operation": operation, "used": used_bytes(stack, caller.tenant)}


def _stuck_settle_check(stack: devstack.Stack, caller: Caller, state: dict[str, Any]) -> None:
    settled = caller.get(f"/v1/workspaces/{WS}/operations/{state['operation']}").body
    assert (settled["state"], settled["outcome"]) == ("settled", {"result": "succeeded"})
    assert caller.get(caller.installation_path(WS, "hello")).body["status"] == "active"
    assert used_bytes(stack, caller.tenant) == state["used"]
    again = caller.install(WS, "hello", "hello", "1.0.0", key="k-after", if_match='"1"')
    assert again.status == 202, again.body  # the slot is free


def _yanked_setup(stack: devstack.Stack, caller: Caller, mp: pytest.MonkeyPatch) -> dict[str, Any]:
    caller.publish("hello", "1.0.0", build_from_files({"SKILL.md": b"gone\n" * 50}))
    assert caller.delete("/v1/packages/hello/versions/1.0.0").status == 200
    assert len(_blob_keys(stack, caller.tenant)) == 2 and used_bytes(stack, caller.tenant) > 0
    return {}


def _yanked_check(stack: devstack.Stack, caller: Caller, state: dict[str, Any]) -> None:
    assert _blob_keys(stack, caller.tenant) == []
    assert _blob_records(stack, caller.tenant) == []
    assert used_bytes(stack, caller.tenant) == 0  # credited exactly once: never negative


def _shared_setup(stack: devstack.Stack, caller: Caller, mp: pytest.MonkeyPatch) -> dict[str, Any]:
    """Two versions of the same content share their blobs; one is yanked, the other installed and then yanked."""
    built = build_from_files({"SKILL.md": b"shared\n" * 50})
    caller.publish("hello", "1.0.0", built)
    caller.publish("hello", "1.0.1", built)
    caller.wait_settled(WS, caller.install(WS, "hello", "hello", "1.0.1", key="k-held"))
    assert caller.delete("/v1/packages/hello/versions/1.0.0").status == 200
    assert caller.delete("/v1/packages/hello/versions/1.0.1").status == 200
    return {"blobs": _blob_keys(stack, caller.tenant), "used": used_bytes(stack, caller.tenant)}


def _shared_check(stack: devstack.Stack, caller: Caller, state: dict[str, Any]) -> None:
    # 1.0.1 is yanked but still the installation's active release: its blobs (shared with 1.0.0) stay
    assert _blob_keys(stack, caller.tenant) == state["blobs"]
    assert len(_blob_records(stack, caller.tenant)) == 2
    assert used_bytes(stack, caller.tenant) == state["used"]
    resolved = caller.get(f"/v1/workspaces/{WS}/resolved").body
    assert [entry["release"] for entry in resolved["items"]] == ["1.0.1"]


def _rotten_setup(stack: devstack.Stack, caller: Caller, mp: pytest.MonkeyPatch) -> dict[str, Any]:
    """An installed release whose archive rots in S3; the scrub checks every blob an hour after its publish."""
    mp.setenv("PACKYARD_SCRUB_INTERVAL_SECONDS", str(HOUR))
    config.reset()
    caller.publish("hello", "1.0.0", build_from_files({"SKILL.md": b"rots\n" * 50}))
    caller.wait_settled(WS, caller.install(WS, "hello", "hello", "1.0.0", key="k-rot"))
    archive = caller.get("/v1/packages/hello/versions/1.0.0").body["archive"]["sha256"]
    key = f"blobs/{caller.tenant}/sha256/{archive}"
    boto3.client("s3").put_object(Bucket=stack.bucket_name, Key=key, Body=b"bit rot")
    return {"used": used_bytes(stack, caller.tenant)}


def _rotten_check(stack: devstack.Stack, caller: Caller, state: dict[str, Any]) -> None:
    assert caller.get("/v1/packages/hello/versions/1.0.0").body["status"] == "unavailable"
    assert caller.get(caller.installation_path(WS, "hello")).body["status"] == "needs_attention"
    assert caller.get(f"/v1/workspaces/{WS}/resolved").body["items"] == []
    assert len(_blob_keys(stack, caller.tenant)) == 2  # nothing is deleted: an operator looks at it
    assert used_bytes(stack, caller.tenant) == state["used"]


CASES = {
    "expired-session": Case((DueKind.UPLOAD,), _expired_session_setup, _expired_session_check),
    "verify-never-ran": Case((DueKind.UPLOAD,), _unstarted_verify_setup, _unstarted_verify_check),
    "verify-renewed": Case((DueKind.UPLOAD,), _renewed_verify_setup, _unstarted_verify_check),
    "settle-failed": Case((DueKind.OPERATION,), _stuck_settle_setup, _stuck_settle_check),
    "yanked-unreferenced": Case((DueKind.JOB, DueKind.BLOB), _yanked_setup, _yanked_check, later=HOUR),
    "yanked-but-held": Case((DueKind.JOB, DueKind.BLOB), _shared_setup, _shared_check, later=HOUR),
    "rotten-blob": Case((DueKind.BLOB,), _rotten_setup, _rotten_check, later=2 * HOUR),
}


@pytest.mark.parametrize("name", list(CASES))
def test_a_crash_at_every_call_of_a_sweep_action_converges_on_a_rerun(
    stack: devstack.Stack, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    case = CASES[name]
    crashes = 0
    for k in range(1, MAX_CALLS + 1):
        caller = Caller(LocalApi(stack), f"t-crash-{name}-{k}")
        state = case.setup(stack, caller, monkeypatch)
        at = clock.now() + case.later
        with monkeypatch.context() as patched:
            dying = DyingActions(patched, k)
            with contextlib.suppress(ProcessDied):
                sweep_kinds(case.kinds, at)
        for later in (at + DAY, at + 2 * DAY):  # the next scheduled runs
            sweep_kinds(case.kinds, later)
        case.check(stack, caller, state)
        if not dying.crashed:
            break  # the actions made fewer than k calls: every call has had its crash
        crashes += 1
    assert 0 < crashes < MAX_CALLS, f"{crashes} crash points (raise MAX_CALLS if the actions make more calls)"
