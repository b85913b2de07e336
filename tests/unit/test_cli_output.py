"""Output formats: RFC 3339 times, tsv lines, JMESPath queries, key columns that are never cut, and --max-items."""

from __future__ import annotations

import argparse
import io
import json
from typing import Any

import pytest
from rich.console import Console

from packyard_cli import output
from packyard_cli.client import Reply
from packyard_cli.commands.context import Context, paginate
from packyard_cli.output import Column, dig
from packyard_cli.render import INSTALLATION_COLUMNS, RELEASE_COLUMNS

RELEASE = {
    "package": "weather-skill",
    "version": "1.1.0",
    "status": "published",
    "archive": {"sha256": "a" * 64, "size": 389},
    "fileCount": 2,
    "permissions": [{"kind": "network", "resource": "api.weather.example"}],
    "publishedAt": "2026-11-30T14:42:52Z",
}


def context(**options: Any) -> tuple[Context, io.StringIO, io.StringIO]:
    out, err = io.StringIO(), io.StringIO()
    args = argparse.Namespace(
        output=None,
        json=False,
        query=None,
        profile=None,
        endpoint="http://127.0.0.1:1",
        token="t",
        tenant=None,
        state_dir=None,
        verbose=False,
        max_items=None,
        starting_token=None,
    )
    for name, value in options.items():
        setattr(args, name, value)
    ctx = Context(args=args, out=Console(file=out, width=60, no_color=True), err=Console(file=err, width=200))
    return ctx, out, err


def test_times_are_rfc3339_utc() -> None:
    # the API sends RFC 3339 UTC strings: shown as sent, another offset in UTC
    assert output.rfc3339("2026-11-30T14:42:52Z") == "2026-11-30T14:42:52Z"
    assert output.rfc3339("2026-11-30T15:42:52+01:00") == "2026-11-30T14:42:52Z"
    assert output.rfc3339("2026-11-30t14:42:52.250z") == "2026-11-30T14:42:52.250Z"
    assert (
        output.rfc3339("not a time") == "not a time" and output.rfc3339("2026-11-30T14:42:52") == "2026-11-30T14:42:52"
    )
    # epoch seconds, as the API sent them before, still read as times
    assert output.rfc3339(0) == "1970-01-01T00:00:00Z"
    assert output.rfc3339(1796049772) == "2026-11-30T14:42:52Z"
    assert output.rfc3339(None) == "" and output.rfc3339(True) == ""


def test_json_output_passes_the_api_times_through(capsys: pytest.CaptureFixture[str]) -> None:
    ctx, _, _ = context(output="json")
    ctx.show({"items": [RELEASE]}, columns=RELEASE_COLUMNS)
    assert json.loads(capsys.readouterr().out)["items"][0]["publishedAt"] == "2026-11-30T14:42:52Z"


def test_tsv_has_no_header_full_values_and_rfc3339_times(capsys: pytest.CaptureFixture[str]) -> None:
    ctx, _, _ = context(output="tsv")
    ctx.show({"items": [RELEASE]}, columns=RELEASE_COLUMNS)
    line = capsys.readouterr().out.rstrip("\n")
    assert line.split("\t") == [
        "1.1.0",
        "published",
        "a" * 64,
        "389",
        "2",
        "network:api.weather.example",
        "2026-11-30T14:42:52Z",
    ]


def test_json_is_the_api_json_and_query_selects(capsys: pytest.CaptureFixture[str]) -> None:
    ctx, _, _ = context(output="json", query="items[].{v: version, sha: archive.sha256}")
    ctx.show({"items": [RELEASE]}, columns=RELEASE_COLUMNS)
    assert json.loads(capsys.readouterr().out) == [{"v": "1.1.0", "sha": "a" * 64}]


def test_query_results_print_as_tsv_rows(capsys: pytest.CaptureFixture[str]) -> None:
    ctx, _, _ = context(output="tsv", query="items[].[version, status]")
    ctx.show({"items": [RELEASE, {**RELEASE, "version": "1.0.0", "status": "yanked"}]})
    assert capsys.readouterr().out.splitlines() == ["1.1.0\tpublished", "1.0.0\tyanked"]


def test_a_bad_query_is_a_usage_error() -> None:
    with pytest.raises(output.QueryError, match="not a JMESPath expression"):
        output.apply_query({}, "items[")


def test_key_columns_keep_their_full_width_in_a_narrow_table() -> None:
    ctx, out, _ = context()
    long_id = "a-very-long-installation-identifier-that-is-wider-than-the-terminal"[:64]
    item = {"installationId": long_id, "release": {"package": "weather-skill", "version": "1.1.0"}, "grants": []}
    ctx.show({"items": [item]}, columns=INSTALLATION_COLUMNS)
    text = out.getvalue()
    assert long_id in text and "weather-skill@1.1.0" in text


def test_table_shortens_digests_and_keeps_times_on_one_line() -> None:
    ctx, out, _ = context()
    ctx.show({"items": [RELEASE]}, columns=RELEASE_COLUMNS)
    text = out.getvalue()
    assert "aaaaaaaaaaaa…" in text and "a" * 64 not in text
    assert "2026-11-30T14:42:52Z" in text.replace("\n", "") and "389 B" in text


class Pages:
    """A fake client answering a paged listing of ``total`` items, ``limit`` per page."""

    def __init__(self, total: int) -> None:
        self.total = total
        self.calls: list[dict[str, Any]] = []

    def request(self, method: str, path: str, params: dict[str, Any] | None = None, **kwargs: Any) -> Reply:
        params = params or {}
        self.calls.append(params)
        start = int(params.get("cursor") or 0)
        end = min(self.total, start + int(params["limit"]))
        items = [{"n": n} for n in range(start, end)]
        return Reply(200, {}, {"items": items, "nextCursor": str(end) if end < self.total else None})


@pytest.mark.parametrize("total", [0, 5, 100, 250])
def test_a_listing_follows_every_page(total: int) -> None:
    ctx, _, err = context()
    ctx._client = Pages(total)  # type: ignore[assignment]
    listing = paginate(ctx, "/v1/things", "things")
    assert [i["n"] for i in listing.items] == list(range(total))
    assert listing.next_token is None and err.getvalue() == ""


def test_max_items_cuts_says_so_and_the_token_resumes_exactly_after() -> None:
    ctx, _, err = context(max_items=130)
    ctx._client = Pages(250)  # type: ignore[assignment]
    first = paginate(ctx, "/v1/things", "things")
    assert len(first.items) == 130 and first.next_token
    assert "showing the first 130 things" in err.getvalue() and "--starting-token" in err.getvalue()
    assert first.body()["nextToken"] == first.next_token
    ctx2, _, _ = context(starting_token=first.next_token)
    ctx2._client = Pages(250)  # type: ignore[assignment]
    rest = paginate(ctx2, "/v1/things", "things")
    assert [i["n"] for i in first.items + rest.items] == list(range(250))


def test_columns_read_nested_values() -> None:
    column = Column("sha", dig("archive", "sha256"))
    assert column.text(RELEASE) == "a" * 64 and column.text({}) == ""
