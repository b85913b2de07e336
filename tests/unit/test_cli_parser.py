"""Command-line parsing: did-you-mean, the global options anywhere, -v, exit codes of answers, completion."""

from __future__ import annotations

import pytest

from packyard_cli import client
from packyard_cli.completion import script
from packyard_cli.main import legacy_version_flag, main
from packyard_cli.parser import build_parser


def usage_error(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    with pytest.raises(SystemExit) as caught:
        build_parser().parse_args(argv)
    assert caught.value.code == 2
    return capsys.readouterr().err


@pytest.mark.parametrize(
    ("typed", "meant"),
    [("instal", "install"), ("relases", "releases"), ("list", "ls"), ("remove", "uninstall"), ("download", "pull")],
)
def test_a_mistyped_command_gets_a_suggestion(typed: str, meant: str, capsys: pytest.CaptureFixture[str]) -> None:
    message = usage_error([typed], capsys)
    assert f"'{typed}' is not a packyard command. Did you mean '{meant}'?" in message


def test_a_mistyped_choice_gets_a_suggestion(capsys: pytest.CaptureFixture[str]) -> None:
    assert "Did you mean 'tsv'?" in usage_error(["ls", "ws-1", "--output", "tvs"], capsys)


def test_global_options_go_before_or_after_the_command() -> None:
    parser = build_parser()
    before = parser.parse_args(["-o", "tsv", "--query", "items", "--profile", "prod", "ls", "ws-1"])
    after = parser.parse_args(["ls", "ws-1", "-o", "tsv", "--query", "items", "--profile", "prod"])
    for args in (before, after):
        assert (args.output, args.query, args.profile, args.workspace_arg) == ("tsv", "items", "prod", "ws-1")


def test_v_is_verbose_and_publish_v_version_still_works_with_a_warning() -> None:
    assert build_parser().parse_args(["-v", "ls", "ws-1"]).verbose is True
    rewritten, changed = legacy_version_flag(["publish", "dir", "-p", "x", "-v", "1.2.3"])
    assert changed and rewritten == ["publish", "dir", "-p", "x", "--version", "1.2.3"]
    assert legacy_version_flag(["publish", "dir", "-v"]) == (["publish", "dir", "-v"], False)
    assert legacy_version_flag(["ls", "-v", "1"]) == (["ls", "-v", "1"], False)


def test_version_prints_the_cli_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        build_parser().parse_args(["--version"])
    assert capsys.readouterr().out.startswith("packyard ")


def test_main_turns_a_bad_query_into_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--query", "items[", "completion", "bash"]) == 0  # completion ignores --query
    assert main(["profiles", "--query", "items["]) == 2
    assert "not a JMESPath expression" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("status", "code", "exit_code"),
    [
        (404, "not_found", client.EXIT_NOT_FOUND),
        (401, "unauthorized", client.EXIT_UNAUTHORIZED),
        (403, "forbidden", client.EXIT_UNAUTHORIZED),
        (409, "release_unavailable", client.EXIT_REFUSED),
        (409, "version_exists", client.EXIT_CONFLICT),
        (409, "operation_in_progress", client.EXIT_CONFLICT),
        (412, "version_conflict", client.EXIT_CONFLICT),
        (422, "archive_rejected", client.EXIT_REFUSED),
        (400, "invalid_request", client.EXIT_REFUSED),
        (503, "unavailable", client.EXIT_UNAVAILABLE),
        (500, None, client.EXIT_UNAVAILABLE),
        (429, None, client.EXIT_UNAVAILABLE),
    ],
)
def test_refused_and_not_found_never_share_the_retry_exit_code(status: int, code: str | None, exit_code: int) -> None:
    assert client.exit_code_for(status, code) == exit_code


@pytest.mark.parametrize("shell", ["bash", "zsh", "fish"])
def test_completion_knows_every_command_and_option(shell: str) -> None:
    text = script(build_parser(), shell)
    for word in ("publish", "pull", "approve", "max-items", "query", "table json tsv"):
        assert word in text
    if shell == "zsh":
        assert "bashcompinit" in text
