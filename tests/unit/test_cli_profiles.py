"""Named profiles in the config file: selection, precedence, token_command."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from packyard_cli.client import EXIT_UNAUTHORIZED, EXIT_USAGE, CliError
from packyard_cli.commands.context import Context, resolve_token
from packyard_cli.profiles import Profile, load_profiles, run_token_command, select

CONFIG = """
[profiles.default]
output = "tsv"

[profiles.prod]
endpoint = "https://api.example.com"
token_command = "echo tok-from-command"
output = "json"
"""


@pytest.fixture
def config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "config.toml"
    path.write_text(CONFIG)
    monkeypatch.setenv("PACKYARD_CONFIG_FILE", str(path))
    for name in ("PACKYARD_PROFILE", "PACKYARD_ENDPOINT", "PACKYARD_TOKEN", "PACKYARD_OUTPUT"):
        monkeypatch.delenv(name, raising=False)
    return path


def args(**values: object) -> argparse.Namespace:
    base = {"endpoint": None, "token": None, "tenant": None, "state_dir": None, "profile": None, "output": None}
    return argparse.Namespace(**{**base, **values})


def test_profiles_are_read_and_selected(config: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert set(load_profiles()) == {"default", "prod"}
    assert select(None).output == "tsv"
    assert select("prod").endpoint == "https://api.example.com"
    monkeypatch.setenv("PACKYARD_PROFILE", "prod")
    assert select(None).name == "prod"


def test_an_unknown_profile_or_key_is_a_usage_error_with_a_suggestion(config: Path) -> None:
    with pytest.raises(CliError, match="did you mean 'prod'") as caught:
        select("prd")
    assert caught.value.exit_code == EXIT_USAGE
    config.write_text('[profiles.x]\nendpont = "https://a"\n')
    with pytest.raises(CliError, match="did you mean 'endpoint'"):
        load_profiles()


def test_flags_then_environment_then_profile(config: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ctx = Context(args=args(profile="prod"), out=None, err=None)
    assert (ctx.endpoint, ctx.output) == ("https://api.example.com", "json")
    monkeypatch.setenv("PACKYARD_ENDPOINT", "https://env.example.com")
    monkeypatch.setenv("PACKYARD_OUTPUT", "table")
    ctx = Context(args=args(profile="prod"), out=None, err=None)
    assert (ctx.endpoint, ctx.output) == ("https://env.example.com", "table")
    ctx = Context(args=args(profile="prod", endpoint="https://flag.example.com", output="tsv"), out=None, err=None)
    assert (ctx.endpoint, ctx.output) == ("https://flag.example.com", "tsv")


def test_the_token_comes_from_the_flag_the_environment_or_the_token_command(
    config: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    prod = select("prod")
    assert resolve_token(args(), "https://api.example.com", prod) == "tok-from-command"
    monkeypatch.setenv("PACKYARD_TOKEN", "tok-env")
    assert resolve_token(args(), "https://api.example.com", prod) == "tok-env"
    assert resolve_token(args(token="tok-flag"), "https://api.example.com", prod) == "tok-flag"


def test_a_failing_token_command_is_unauthorized() -> None:
    with pytest.raises(CliError, match="token command of profile 'p' failed") as caught:
        run_token_command(Profile("p", token_command="echo nope >&2; exit 3"))
    assert caught.value.exit_code == EXIT_UNAUTHORIZED and "nope" in str(caught.value.detail)
