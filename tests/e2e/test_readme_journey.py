"""The README's CLI journey, verbatim: the lines between ``<!-- journey:start -->`` and ``<!-- journey:end -->`` run
one by one through bash against the local stack, each with the exit code its comment states (0 unless it says
``exit N``). The test reads the commands from the README, so the two cannot drift apart."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from tests.e2e.helpers import ROOT, Stack, base_env

pytestmark = pytest.mark.xdist_group("e2e")

EXPORT_LINE = 'export PATH="$PWD/.venv/bin:$PATH"'


def journey_lines() -> list[str]:
    text = (ROOT / "README.md").read_text("utf-8")
    block = re.search(r"<!-- journey:start -->\s*```sh\n(.*?)```\s*<!-- journey:end -->", text, re.S)
    assert block, "README.md has no journey block between <!-- journey:start --> and <!-- journey:end -->"
    return [line for line in block.group(1).splitlines() if line.strip()]


def expected_exit(line: str) -> int:
    found = re.search(r"#.*\bexit (\d+)", line)
    return int(found.group(1)) if found else 0


def test_the_journey_block_is_runnable_as_written() -> None:
    lines = journey_lines()
    assert lines[0] == EXPORT_LINE
    assert all(line.startswith("packyard ") for line in lines[1:]), "every other line is a packyard command"
    assert any(expected_exit(line) != 0 for line in lines), "the journey shows one refusal and its exit code"


def test_readme_journey_runs_verbatim(stack: Stack, tmp_path: Path) -> None:
    # Given a copy of the repository's examples (the journey's relative paths) and `packyard` on PATH
    work = tmp_path / "repo"
    shutil.copytree(ROOT / "examples", work / "examples")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    shim = bin_dir / "packyard"
    shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m packyard_cli "$@"\n')
    shim.chmod(0o755)
    env = base_env(stack.state_dir)
    env.update(
        {
            "PATH": f"{bin_dir}:{env.get('PATH', '')}",
            "PACKYARD_ENDPOINT": stack.api,
            "PACKYARD_TENANT": f"t-journey-{uuid.uuid4().hex[:8]}",
        }
    )
    outputs: dict[str, str] = {}
    lines = journey_lines()
    # When every line runs as written, in order
    for line in lines[1:]:
        done = subprocess.run(
            ["bash", "-c", f"{lines[0]}\n{line}"], cwd=work, env=env, capture_output=True, text=True, timeout=120
        )
        # Then each exits as the README says
        assert done.returncode == expected_exit(line), f"{line}\n→ exit {done.returncode}\n{done.stdout}{done.stderr}"
        outputs[line.split("#")[0].strip()] = done.stdout + done.stderr

    def output_of(prefix: str) -> str:
        return next(text for command, text in outputs.items() if command.startswith(prefix))

    # And the journey did what its comments say
    assert "weather-skill@latest is 1.1.0" in output_of("packyard update weather-skill")
    assert "network:api.weather.example" in output_of("packyard approvals ws-1")
    resolved = json.loads(output_of("packyard resolved ws-1"))
    assert [item["release"] for item in resolved] == ["1.1.0"]
    pulled = work / "build" / "weather-skill-1.1.0.tar.gz"
    assert pulled.is_file()
    assert "weather-skill@1.0.0" in output_of("packyard rollback")
    assert "yanked" in output_of("packyard install weather-skill@1.0.0 --workspace ws-2")
