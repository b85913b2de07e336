"""Helpers of the e2e tests: the local stack as a subprocess, the CLI as a subprocess, a sample skill folder."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from devstack import process as stack_process

ROOT = Path(__file__).resolve().parents[2]
START_TIMEOUT = 60.0


def base_env(state_dir: Path) -> dict[str, str]:
    """The stack's environment (``devstack.process``), for the stack and the CLI: plain, wide, unbuffered output."""
    return stack_process.stack_environment(
        {
            "PACKYARD_LOCAL_DIR": str(state_dir),
            "COLUMNS": "200",
            "NO_COLOR": "1",
            "TERM": "dumb",
            "PYTHONUNBUFFERED": "1",
        }
    )


@dataclass
class Stack:
    process: subprocess.Popen[bytes]
    api: str
    aws: str
    state_dir: Path
    log: Path

    def log_text(self) -> str:
        return self.log.read_text("utf-8", errors="replace")


@dataclass
class CliResult:
    code: int
    stdout: str
    stderr: str

    @property
    def output(self) -> str:
        return self.stdout + self.stderr

    def json(self) -> Any:
        return json.loads(self.stdout)


def start_stack(state_dir: Path, log: Path, *extra: str) -> Stack:
    """``packyard local`` on ports chosen by the OS; ready when its local.json names this process."""
    process, state = stack_process.start_stack(state_dir, log, *extra, env=base_env(state_dir), timeout=START_TIMEOUT)
    return Stack(process=process, api=state["api"], aws=state["aws"], state_dir=state_dir, log=log)


def stop_stack(stack: Stack, sig: int = signal.SIGINT, timeout: float = 15.0) -> int:
    return stack_process.stop_stack(stack.process, sig, timeout)


@contextmanager
def running_stack(root: Path) -> Iterator[Stack]:
    """A local stack with its state and log under ``root``, stopped on exit."""
    running = start_stack(root / "state", root / "local.log")
    try:
        yield running
    finally:
        stop_stack(running)


class Cli:
    """Runs ``python -m packyard_cli`` (what the ``packyard`` console script runs) as a subprocess."""

    def __init__(self, stack: Stack, tenant: str, endpoint: str | None = None) -> None:
        self.stack = stack
        self.tenant = tenant
        self.endpoint = endpoint or stack.api  # another address in front of the stack's API (a test's proxy)

    def env(self) -> dict[str, str]:
        env = base_env(self.stack.state_dir)
        env["PACKYARD_ENDPOINT"] = self.endpoint
        env["PACKYARD_TENANT"] = self.tenant
        return env

    def __call__(self, *args: str, timeout: float = 90.0, cwd: Path | None = None) -> CliResult:
        done = subprocess.run(
            [sys.executable, "-m", "packyard_cli", *args],
            cwd=cwd or ROOT,
            env=self.env(),
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        return CliResult(done.returncode, done.stdout, done.stderr)

    def token(self, subject: str = "e2e", tenant: str | None = None) -> str:
        result = self("token", "--tenant", tenant or self.tenant, "--subject", subject)
        assert result.code == 0, result.output
        return result.stdout.strip()


def write_skill(folder: Path, marker: str = "v1") -> Path:
    (folder / "src").mkdir(parents=True, exist_ok=True)
    (folder / "SKILL.md").write_text(f"# weather-skill {marker}\nAnswers questions about the weather.\n")
    (folder / "src" / "main.py").write_text(f"def run(city):\n    return 'sunny in ' + city  # {marker}\n")
    return folder
