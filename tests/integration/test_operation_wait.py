"""``GET …/operations/{op}?wait=N`` and ``Prefer: wait=N`` on the mutations, over the install state machine on moto.

The settle is held at a gate (the settlement task waits for it on the execution's thread) and opened from the
test once the waiting handler has read the operation in flight: the answer comes from the real state machine
settling, not from a sleep in the test."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest

from devstack.caller import ALL_SCOPES, Caller
from packyard.operations import commit, settlement, waiting
from packyard.store import workspace as workspace_store
from packyard_cli.build import build_from_files

WS = "ws-1"


class Gate:
    """Holds every task that settles (the commit, which settles what it commits, and the settlement) until opened;
    counts the reads the waits make of an operation in flight."""

    def __init__(self, open_after_reads: int | None) -> None:
        self.opened = threading.Event()
        self.open_after_reads = open_after_reads
        self.reads_in_flight = 0
        self.waits: list[waiting.Waited] = []

    def open(self) -> None:
        self.opened.set()


@pytest.fixture
def gate(monkeypatch) -> Iterator[Gate]:
    held = Gate(open_after_reads=None)
    settle_task, commit_task = settlement.settle_task, commit.commit_task
    read_operation = workspace_store.get_operation
    until_at_rest = waiting.until_at_rest
    waiting_here = threading.local()  # set on the thread of a handler that waits, while it waits

    def gated_settle(*args: Any, **kwargs: Any) -> Any:
        assert held.opened.wait(timeout=60), "the test never opened the gate"
        return settle_task(*args, **kwargs)

    def gated_commit(*args: Any, **kwargs: Any) -> Any:
        assert held.opened.wait(timeout=60), "the test never opened the gate"
        return commit_task(*args, **kwargs)

    def counted_read(tenant: str, workspace: str, operation_id: str) -> Any:
        op = read_operation(tenant, workspace, operation_id)
        if getattr(waiting_here, "on", False) and op is not None and op.in_flight and not held.opened.is_set():
            held.reads_in_flight += 1
            if held.open_after_reads is not None and held.reads_in_flight >= held.open_after_reads:
                held.open()
        return op

    def recorded_wait(*args: Any, **kwargs: Any) -> waiting.Waited:
        waiting_here.on = True
        try:
            waited = until_at_rest(*args, **kwargs)
        finally:
            waiting_here.on = False
        held.waits.append(waited)
        return waited

    monkeypatch.setattr(settlement, "settle_task", gated_settle)
    monkeypatch.setattr(commit, "commit_task", gated_commit)
    monkeypatch.setattr(workspace_store, "get_operation", counted_read)
    monkeypatch.setattr(waiting, "until_at_rest", recorded_wait)
    yield held
    held.open()  # never leave an execution waiting


def _op_path(op: dict[str, Any]) -> str:
    return f"/v1/workspaces/{WS}/operations/{op['operationId']}"


def _published(acme: Caller) -> None:
    acme.publish("hello", "1.0.0", build_from_files({"SKILL.md": b"v1\n"}))
    acme.publish("hello", "1.1.0", build_from_files({"SKILL.md": b"v2\n"}))


def test_prefer_wait_answers_the_mutation_settled_once_the_state_machine_settles_it(acme: Caller, gate: Gate):
    _published(acme)
    gate.open_after_reads = 2

    answer = acme.put(
        acme.installation_path(WS, "hello"),
        {"package": "hello", "version": "1.0.0"},
        headers={"Idempotency-Key": "k1", "Prefer": "wait=20"},
    )

    assert answer.status == 200, answer.body
    assert answer.body["state"] == "settled"
    assert answer.body["outcome"] == {"result": "succeeded"}
    assert answer.headers["preference-applied"] == "wait=20"
    assert answer.headers["location"] == _op_path(answer.body)
    assert gate.reads_in_flight == 2  # it read the operation in flight, then settled
    assert gate.waits[-1].paused < 20  # answered when it settled, not at the end of the wait
    assert acme.get(acme.installation_path(WS, "hello")).body["release"]["version"] == "1.0.0"


def test_prefer_wait_on_update_rollback_and_uninstall(acme: Caller, gate: Gate):
    _published(acme)
    gate.open()
    prefer = {"Prefer": "wait=20"}
    path = acme.installation_path(WS, "hello")

    installed = acme.put(path, {"package": "hello", "version": "1.0.0"}, headers={"Idempotency-Key": "i", **prefer})
    updated = acme.put(
        path, {"package": "hello", "version": "1.1.0"}, headers={"Idempotency-Key": "u", "If-Match": '"1"', **prefer}
    )
    rolled_back = acme.post(f"{path}/rollback", headers={"Idempotency-Key": "r", "If-Match": '"2"', **prefer})
    removed = acme.delete(path, headers={"Idempotency-Key": "d", "If-Match": '"3"', **prefer})

    for answer, kind in (
        (installed, "install"),
        (updated, "update"),
        (rolled_back, "rollback"),
        (removed, "uninstall"),
    ):
        assert (answer.status, answer.body["kind"], answer.body["state"]) == (200, kind, "settled"), answer.body
        assert answer.body["outcome"] == {"result": "succeeded"}


def test_prefer_wait_that_runs_out_answers_202_with_the_operation_in_flight(acme: Caller, gate: Gate):
    _published(acme)

    answer = acme.put(
        acme.installation_path(WS, "hello"),
        {"package": "hello", "version": "1.0.0"},
        headers={"Idempotency-Key": "k1", "Prefer": "respond-async, wait=1"},
    )

    assert answer.status == 202, answer.body
    assert answer.body["state"] != "settled"
    assert answer.headers["preference-applied"] == "wait=1"
    assert gate.waits[-1].elapsed >= 1.0  # it waited the whole second
    assert gate.waits[-1].reads >= 1

    # the same request again (a retry) waits the same way and, the settle let through, answers it settled
    gate.open()
    again = acme.put(
        acme.installation_path(WS, "hello"),
        {"package": "hello", "version": "1.0.0"},
        headers={"Idempotency-Key": "k1", "Prefer": "wait=20"},
    )
    assert (again.status, again.body["state"], again.body["operationId"]) == (
        200,
        "settled",
        answer.body["operationId"],
    )


def test_without_prefer_a_mutation_answers_202_at_once(acme: Caller, gate: Gate):
    _published(acme)
    answer = acme.install(WS, "hello", "hello", "1.0.0", key="k1")
    assert answer.status == 202
    assert "preference-applied" not in answer.headers
    assert gate.waits == []
    for ignored in ("wait=0", "wait=abc", "return=minimal"):
        replay = acme.put(
            acme.installation_path(WS, "hello"),
            {"package": "hello", "version": "1.0.0"},
            headers={"Idempotency-Key": "k1", "Prefer": ignored},
        )
        assert replay.status == 202, ignored
        assert "preference-applied" not in replay.headers
    assert gate.waits == []


def test_get_with_wait_answers_when_the_operation_settles(acme: Caller, gate: Gate):
    _published(acme)
    admitted = acme.install(WS, "hello", "hello", "1.0.0", key="k1")
    assert admitted.status == 202
    gate.open_after_reads = 3

    answer = acme.get(_op_path(admitted.body), query={"wait": "20"})

    assert answer.status == 200, answer.body
    assert (answer.body["state"], answer.body["outcome"]) == ("settled", {"result": "succeeded"})
    assert gate.reads_in_flight == 3
    assert gate.waits[-1].paused < 20


def test_get_with_wait_times_out_at_n_with_the_unsettled_operation(acme: Caller, gate: Gate):
    _published(acme)
    admitted = acme.install(WS, "hello", "hello", "1.0.0", key="k1")

    answer = acme.get(_op_path(admitted.body), query={"wait": "1"})

    assert answer.status == 200, answer.body
    assert answer.body["state"] in ("admitted", "planned", "committed")
    assert answer.body["operationId"] == admitted.body["operationId"]
    assert gate.waits[-1].elapsed >= 1.0
    gate.open()
    settled = acme.get(_op_path(admitted.body), query={"wait": "20"})
    assert settled.body["state"] == "settled"


def test_a_settled_operation_is_answered_at_once(acme: Caller, gate: Gate):
    _published(acme)
    gate.open()
    op = acme.wait_settled(WS, acme.install(WS, "hello", "hello", "1.0.0", key="k1"))
    answer = acme.get(_op_path(op), query={"wait": "20"})
    assert (answer.status, answer.body["state"]) == (200, "settled")
    assert (gate.waits[-1].reads, gate.waits[-1].paused) == (0, 0.0)


@pytest.mark.parametrize("value", ["0", "21", "-1", "1.5", "abc", ""])
def test_a_wait_outside_one_to_twenty_seconds_is_refused(acme: Caller, gate: Gate, value: str):
    _published(acme)
    gate.open()
    op = acme.wait_settled(WS, acme.install(WS, "hello", "hello", "1.0.0", key="k1"))
    answer = acme.get(_op_path(op), query={"wait": value})
    assert answer.status == 400, answer.body
    assert answer.headers["content-type"] == "application/problem+json"
    assert answer.code == "invalid_request"
    assert [e["location"] for e in answer.body["errors"]] == ["query.wait"]


def test_waiting_keeps_tenancy_and_scopes(api, acme: Caller, globex: Caller, gate: Gate):
    _published(acme)
    admitted = acme.install(WS, "hello", "hello", "1.0.0", key="k1")

    # another tenant's wait finds nothing, at once (no read of the owner's operation in flight)
    assert globex.get(_op_path(admitted.body), query={"wait": "20"}).status == 404
    no_read = Caller(api, "t-acme", scopes=tuple(s for s in ALL_SCOPES if s != "workspaces:read"))
    refused = no_read.get(_op_path(admitted.body), query={"wait": "20"})
    assert (refused.status, refused.body["requiredScope"]) == (403, "workspaces:read")
    no_write = Caller(api, "t-acme", scopes=tuple(s for s in ALL_SCOPES if s != "installations:write"))
    refused = no_write.put(
        acme.installation_path(WS, "other"),
        {"package": "hello", "version": "1.0.0"},
        headers={"Idempotency-Key": "k2", "Prefer": "wait=20"},
    )
    assert (refused.status, refused.body["requiredScope"]) == (403, "installations:write")
    assert gate.waits == [] and gate.reads_in_flight == 0
    gate.open()
