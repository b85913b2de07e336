"""A pytest plugin that records, across a whole test run, the IAM actions each function's handler performs.

    .venv/bin/python -m pytest -p tests.support.iam_observer tests/integration
    .venv/bin/python -m tests.support.iam_observer        # then: what was observed, checked against the roles

Each test's calls (made while its local stack runs) are mapped to IAM actions (:func:`devstack.iam.needs_of`) and
written, with the stack's names as ``${LogicalId}`` placeholders, to ``$PACKYARD_IAM_OBSERVED`` (default
``.iam-observed/``), one file per process (xdist workers included). ``tests/integration/test_iam.py`` runs its own
journeys and is the check that runs with every ``make test``; this plugin is the audit that the rest of the suite
stays within what it observes.
"""

from __future__ import annotations

import json
import os
import sys
from collections import defaultdict
from collections.abc import Generator, Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest

import devstack
from devstack import iam
from devstack.counting import CallRecorder, record_aws_calls

OUT = Path(os.environ.get("PACKYARD_IAM_OBSERVED", ".iam-observed"))

_observed: dict[str, set[tuple[str, str]]] = defaultdict(set)
_unmapped: set[str] = set()
_exit = ExitStack()
_recorder: CallRecorder | None = None


def pytest_configure(config: pytest.Config) -> None:
    global _recorder
    _recorder = _exit.enter_context(record_aws_calls())
    _exit.enter_context(iam.attributing_invocations())


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, Any, None]:
    yield
    running = devstack.current()
    if _recorder is None:
        return
    calls, _recorder.calls[:] = list(_recorder.calls), []
    if running is None:
        return
    stack = running.stack
    for call in calls:
        if call.principal is None or call.internal:
            continue
        try:
            needs = iam.needs_of(call, stack.region, stack.account)
        except iam.UnmappedCall as exc:
            _unmapped.add(str(exc))
            continue
        for need in needs:
            _observed[call.principal].add((need.action, iam.resource_kind(need.resource, stack)))


def pytest_unconfigure(config: pytest.Config) -> None:
    _exit.close()
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    OUT.mkdir(parents=True, exist_ok=True)
    payload = {
        "observed": {principal: sorted(pairs) for principal, pairs in sorted(_observed.items())},
        "unmapped": sorted(_unmapped),
    }
    (OUT / f"{worker}.json").write_text(json.dumps(payload, indent=1) + "\n")


def merged(directory: Path = OUT) -> tuple[dict[str, set[tuple[str, str]]], set[str]]:
    observed: dict[str, set[tuple[str, str]]] = defaultdict(set)
    unmapped: set[str] = set()
    for file in sorted(directory.glob("*.json")):
        payload = json.loads(file.read_text())
        for principal, pairs in payload["observed"].items():
            observed[principal] |= {(a, r) for a, r in pairs}
        unmapped |= set(payload["unmapped"])
    return observed, unmapped


def _lines() -> Iterator[str]:
    observed, unmapped = merged()
    for principal in sorted(observed):
        yield f"{principal}:"
        for action, resource in sorted(observed[principal]):
            yield f"  {action:<30} {resource}"
    for text in sorted(unmapped):
        yield f"unmapped: {text}"


if __name__ == "__main__":
    sys.stdout.write("\n".join(_lines()) + "\n")
