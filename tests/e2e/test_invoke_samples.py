"""``make invoke``: every function of template.yaml has a sample event in events/ that works as is."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.e2e.helpers import ROOT, base_env

pytestmark = pytest.mark.xdist_group("e2e")


def test_every_function_runs_with_its_sample_event(tmp_path: object) -> None:
    # Given template.yaml's functions and events/
    # When each is invoked with its sample, on a fresh seeded stack (python -m packyard_cli.invoke --all)
    done = subprocess.run(
        [sys.executable, "-m", "packyard_cli.invoke", "--all"],
        cwd=ROOT,
        env=base_env(ROOT / ".packyard-local"),
        capture_output=True,
        text=True,
        timeout=300,
    )
    # Then every one succeeds
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    assert done.stdout.count("ok ") >= 9, done.stdout


def test_a_mistyped_function_is_named_with_the_real_ones() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "packyard_cli.invoke", "verfy", "events/sfn_verify.json"],
        cwd=ROOT,
        env=base_env(ROOT / ".packyard-local"),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2
    assert "no function 'verfy'" in done.stderr and "VerifyFunction (verify)" in done.stderr
