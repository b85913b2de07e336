"""Races on one installation: 16 threads through the real API and state machine."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest

from packyard_cli.build import build_from_files

WS = "ws-race"
THREADS = 16


@pytest.fixture
def published(acme):
    acme.publish("hello", "1.0.0", build_from_files({"SKILL.md": b"race\n"}))
    return acme


def _together(fn):
    with ThreadPoolExecutor(max_workers=THREADS) as pool:
        return list(pool.map(fn, range(THREADS)))


def test_same_key_from_16_threads_is_one_operation_one_bump_and_16_equal_answers(published):
    answers = _together(lambda _: published.install(WS, "hello", "hello", "1.0.0", key="same-key"))

    assert {a.status for a in answers} <= {200, 202}
    assert len({a.body["operationId"] for a in answers}) == 1
    settled = published.wait_settled(WS, answers[0])
    assert settled["outcome"] == {"result": "succeeded"}
    replays = _together(lambda _: published.install(WS, "hello", "hello", "1.0.0", key="same-key"))
    assert {(r.status, r.body["outcome"]["result"]) for r in replays} == {(200, "succeeded")}
    assert published.get(f"/v1/workspaces/{WS}/installations/hello").body["version"] == 1


def test_different_keys_from_16_threads_admit_exactly_one_the_rest_are_operation_in_progress(published, monkeypatch):
    from packyard.store import workflows

    # hold the admitted operation's execution until every thread has its answer, so none can arrive after it
    # settled (that would be a legitimate 428, not the race under test)
    real_start, held = workflows.start, []
    monkeypatch.setattr(workflows, "start", lambda *args: held.append(args) or "held")
    answers = _together(lambda i: published.install(WS, "hello", "hello", "1.0.0", key=f"key-{i}"))
    assert len(held) == 1
    real_start(*held[0])

    admitted = [a for a in answers if a.status == 202]
    refused = [a for a in answers if a.status != 202]
    assert len(admitted) == 1
    assert {(r.status, r.code) for r in refused} == {(409, "operation_in_progress")}
    assert {r.body["operationId"] for r in refused} == {admitted[0].body["operationId"]}
    assert published.wait_settled(WS, admitted[0])["outcome"] == {"result": "succeeded"}
    assert published.get(f"/v1/workspaces/{WS}/installations/hello").body["version"] == 1
