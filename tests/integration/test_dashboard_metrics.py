"""The metrics added for the operators' dashboard are emitted where it says, through the real state machines on moto:
a rejected consent counts ``ConsentRejected`` (it was ``ConsentRejectd``), a consent wait that runs out counts
``ConsentExpired`` beside ``OperationsRefused``, and each sweep page counts what it found due (``SweepItemsDue``).
tests/unit/test_dashboard.py checks the dashboard reads only metrics the code emits; this checks they are emitted."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator

import pytest

from devstack.caller import Caller
from packyard import clock, config
from packyard.store.due import DueKind
from packyard_cli.build import build_from_files
from tests.support.metrics import emitted_metrics
from tests.support.sweeping import run_maintenance, sweep_kinds

WIDENING = [{"kind": "api_read"}, {"kind": "network", "resource": "api.example"}]


@pytest.fixture
def emitted() -> Iterator[Counter[str]]:
    with emitted_metrics() as seen:
        yield seen


@pytest.fixture
def widening(acme: Caller) -> Caller:
    """hello@1.0.0 asks for a network grant: an owner's install waits for consent."""
    acme.publish("hello", "1.0.0", build_from_files({"SKILL.md": b"v1\n"}, permissions=WIDENING))
    return acme


def test_a_rejected_consent_counts_consent_rejected_and_a_refused_operation(
    widening: Caller, emitted: Counter[str]
) -> None:
    ws = "ws-metrics-reject"
    waiting = widening.wait_for_consent(ws, widening.install(ws, "hello", "hello", "1.0.0", key="k-reject"))
    assert waiting["state"] == "awaiting_consent" and emitted["ConsentRequested"] == 1
    assert widening.decide(ws, waiting, "reject", key="k-no").status == 200
    final = widening.wait_settled(ws, widening.get(f"/v1/workspaces/{ws}/operations/{waiting['operationId']}"))
    assert final["outcome"]["code"] == "consent_rejected"
    assert (emitted["ConsentRejected"], emitted["OperationsRefused"], emitted["ConsentExpired"]) == (1, 1, 0)
    assert emitted["ConsentRejectd"] == 0


def test_a_consent_wait_that_runs_out_counts_consent_expired(
    widening: Caller, emitted: Counter[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    ws = "ws-metrics-expired"
    monkeypatch.setenv("PACKYARD_CONSENT_WINDOW_SECONDS", "1")
    config.reset()
    admitted = widening.install(ws, "hello", "hello", "1.0.0", key="k-expire")
    waited = widening.wait_for_consent(ws, admitted, timeout=60)
    # the wait is a record (no run waits with it): the sweep settles it once its deadline has passed
    sweep_kinds([DueKind.OPERATION], clock.now() + 2)
    settled = widening.get(f"/v1/workspaces/{ws}/operations/{waited['operationId']}").body
    assert settled["outcome"]["code"] == "consent_expired", settled
    assert (emitted["ConsentExpired"], emitted["OperationsRefused"], emitted["ConsentRejected"]) == (1, 1, 0)


def test_each_sweep_page_counts_what_it_found_due(widening: Caller, emitted: Counter[str]) -> None:
    # a published release's blobs are due for their integrity check one interval later
    swept = run_maintenance(widening.api.stack, clock.now() + 60 * 24 * 3600)
    assert swept["healthy"] >= 1  # the blob pages re-hashed what was due
    assert emitted["SweepItemsDue"] >= swept["healthy"]
