"""``packyard cat`` against the running local stack (its HTTP server, moto's S3 behind presigned URLs): one file of a
release and of an installation, byte for byte on stdout, a large one through the 307, and a path not held."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.e2e.helpers import ROOT, Cli, write_skill

pytestmark = pytest.mark.xdist_group("e2e")


def _cat(cli: Cli, *args: str) -> subprocess.CompletedProcess[bytes]:
    """The CLI with stdout kept as bytes (``Cli`` decodes it as text)."""
    return subprocess.run(
        [sys.executable, "-m", "packyard_cli", "cat", *args], cwd=ROOT, env=cli.env(), capture_output=True, timeout=90
    )


def test_cat_prints_a_file_of_a_release_and_of_an_installation_byte_for_byte(cli: Cli, tmp_path: Path) -> None:
    # Given a published, installed package with a binary file and a file above the inline limit
    folder = write_skill(tmp_path / "weather-skill")
    binary = bytes(range(256)) * 7 + b"\xff\xfe not UTF-8"
    large = os.urandom(5 * 1024 * 1024)
    (folder / "assets").mkdir()
    (folder / "assets" / "icon.bin").write_bytes(binary)
    (folder / "assets" / "model.bin").write_bytes(large)
    assert cli("publish", str(folder), "--package", "weather-skill", "--version", "1.0.0").code == 0
    ws = "ws-cat"
    installed = cli("install", "weather-skill@1.0.0", "-w", ws)
    assert installed.code == 0, installed.output

    # When files are printed through the release and through the installation
    for path, expected in (
        ("src/main.py", (folder / "src" / "main.py").read_bytes()),
        ("assets/icon.bin", binary),
        ("assets/model.bin", large),
    ):
        by_release = _cat(cli, "weather-skill@1.0.0", path)
        by_installation = _cat(cli, "weather-skill", path, "-w", ws)
        # Then stdout holds exactly the file's bytes
        assert by_release.returncode == 0, by_release.stderr
        assert by_installation.returncode == 0, by_installation.stderr
        assert by_release.stdout == by_installation.stdout == expected


def test_cat_of_a_path_the_release_does_not_hold_exits_not_found(cli: Cli, tmp_path: Path) -> None:
    folder = write_skill(tmp_path / "weather-skill")
    assert cli("publish", str(folder), "--package", "weather-skill", "--version", "1.0.0").code == 0

    # (a path with ".." never reaches the server from here: the HTTP client removes dot segments, RFC 3986 5.2.4;
    # the service's own answer to one is tests/integration/test_files.py's)
    for path in ("nope.md", "src"):
        missing = _cat(cli, "weather-skill@1.0.0", path)
        assert missing.returncode == 6, missing.stderr
        assert missing.stdout == b""
        assert b"not_found" in missing.stderr or b"no such file" in missing.stderr
