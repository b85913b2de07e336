"""The CLI's wait for an operation: a service that holds its answer (``?wait=``) is asked again at once, with no
pause; one that answers at once without the operation at rest is polled with the usual pauses (the fallback);
the seconds asked for stay within 1..20 and the command's own deadline. A clock the fetches and pauses move."""

from __future__ import annotations

import argparse
import io
from typing import Any

import pytest
from rich.console import Console

from packyard_cli.commands import context as context_module
from packyard_cli.commands.context import Context, wait_for, wait_seconds


class Clock:
    def __init__(self) -> None:
        self.now = 100.0
        self.sleeps: list[float] = []

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    fake = Clock()
    monkeypatch.setattr(context_module.time, "monotonic", fake.monotonic)
    monkeypatch.setattr(context_module.time, "sleep", fake.sleep)
    return fake


def _ctx() -> Context:
    args = argparse.Namespace(output=None, json=True, query=None, profile=None, endpoint="http://127.0.0.1:1")
    return Context(args=args, out=Console(file=io.StringIO()), err=Console(file=io.StringIO()))


def _answers(clock: Clock, states: list[str], held_for: float) -> Any:
    fetched: list[str] = []

    def fetch() -> dict[str, Any]:
        clock.now += held_for  # the service held the answer this long
        fetched.append(states[len(fetched)])
        return {"state": fetched[-1]}

    return fetch, fetched


def test_a_service_that_waits_is_asked_again_at_once(clock: Clock) -> None:
    fetch, fetched = _answers(clock, ["committed", "committed", "settled"], held_for=20.0)
    final = wait_for(_ctx(), fetch, done=lambda o: o["state"] == "settled", label=str, timeout=120, server_waits=True)
    assert final == {"state": "settled"}
    assert len(fetched) == 3
    assert clock.sleeps == []


def test_a_service_that_does_not_wait_is_polled_with_pauses(clock: Clock) -> None:
    fetch, fetched = _answers(clock, ["planned", "committed", "settled"], held_for=0.01)
    final = wait_for(_ctx(), fetch, done=lambda o: o["state"] == "settled", label=str, timeout=120, server_waits=True)
    assert final == {"state": "settled"}
    assert len(fetched) == 3
    assert clock.sleeps == [0.2, 0.2]


def test_the_wait_asked_for_is_whole_seconds_within_the_deadline(clock: Clock) -> None:
    assert wait_seconds(clock.now + 120) == 20
    assert wait_seconds(clock.now + 7.9) == 7
    assert wait_seconds(clock.now + 0.3) == 1
    assert wait_seconds(clock.now - 5) == 1
