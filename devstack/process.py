"""The local stack as a subprocess: ``packyard local`` on ports the OS picks, ready once its state file names it.

One launcher for everything that drives the stack from outside, as a user does: ``make demo`` (``devstack.demo``),
the e2e tests and the benchmarks that go over HTTP.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path

from packyard_cli.tokens import STATE_FILE

ROOT = Path(__file__).resolve().parents[1]
START_TIMEOUT = 90.0
STRIPPED_PREFIXES = ("PACKYARD_", "AWS_", "MOTO_")
"""Variables of the caller's environment the stack does not inherit: it sets its own (fake credentials, the
template's names), and a developer's shell must not point it anywhere else."""


def stack_environment(
    extra: Mapping[str, str] | None = None, strip: tuple[str, ...] = STRIPPED_PREFIXES
) -> dict[str, str]:
    """This process's environment without the variables starting with ``strip`` (by default what would point the
    stack elsewhere), with the project importable (with or without its editable install), plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(strip)}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "shared"), str(ROOT)])
    env.update(extra or {})
    return env


def start_stack(
    state_dir: Path,
    log: Path,
    *extra_args: str,
    env: Mapping[str, str] | None = None,
    timeout: float = START_TIMEOUT,
) -> tuple[subprocess.Popen[bytes], dict[str, str]]:
    """Start ``packyard local`` with its state in ``state_dir`` and its output in ``log``; return the process and its
    state (``api``, ``aws``, …) once it is up. A stack that exits or does not come up in ``timeout`` raises with
    its log."""
    state_dir.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, "-m", "packyard_cli", "--state-dir", str(state_dir), "local"]
    if "--data" not in extra_args:
        extra_args = ("--ephemeral", *extra_args)  # tests, make demo and the benchmarks start empty
    with log.open("wb") as sink:
        process = subprocess.Popen(
            [*command, "--api-port", "0", "--aws-port", "0", *extra_args],
            cwd=ROOT,
            env=dict(env) if env is not None else stack_environment(),
            stdout=sink,
            stderr=subprocess.STDOUT,
        )
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"packyard local exited with {process.returncode}:\n{log.read_text()}")
        try:
            state = json.loads((state_dir / STATE_FILE).read_text("utf-8"))
        except (OSError, ValueError):
            state = {}
        if state.get("pid") == process.pid:
            return process, state
        time.sleep(0.05)
    process.kill()
    process.wait()
    raise RuntimeError(f"packyard local did not start in {timeout:.0f} s:\n{log.read_text()}")


def stop_stack(process: subprocess.Popen[bytes], sig: int = signal.SIGINT, timeout: float = 20.0) -> int:
    """Stop it as Ctrl-C does (or with ``sig``), killing it if it has not exited in ``timeout``; its exit code."""
    if process.poll() is None:
        process.send_signal(sig)
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    return process.returncode
