"""``packyard sweep`` prints what each sweep did, cleanup jobs included, and warns about parked items."""

from __future__ import annotations

import argparse
import io
import json
from typing import Any

import pytest
from rich.console import Console

from packyard_cli import tokens
from packyard_cli.commands import maintenance
from packyard_cli.commands.context import Context

OUTPUT = {
    "swept": [
        {"kind": "upload", "shard": 0, "counts": {"expired": 2, "not_due": 1, "parked_total": 1}},
        {"kind": "upload", "shard": 3, "counts": {"failed": 1, "backed_off": 1}},
        {"kind": "job", "shard": 0, "counts": {"done": 3, "retried": 1, "parked": 1, "parked_total": 4}},
        {"kind": "job", "shard": 5, "counts": {"done": 1}},
    ]
}


class FakeStepFunctions:
    """The maintenance machine is Express: the CLI starts it with StartSyncExecution, answered once it stopped."""

    def start_sync_execution(self, **kwargs: Any) -> dict[str, Any]:
        return {"executionArn": "arn:express", "status": "SUCCEEDED", "output": json.dumps(OUTPUT)}


def _run(monkeypatch: pytest.MonkeyPatch, output: str | None) -> tuple[int, str, str]:
    import boto3

    monkeypatch.setattr(tokens, "read_state", lambda directory=None: {"maintenanceStateMachine": "arn:m", "aws": "x"})
    monkeypatch.setattr(boto3, "client", lambda *args, **kwargs: FakeStepFunctions())
    out, err = io.StringIO(), io.StringIO()
    args = argparse.Namespace(
        output=output, json=output == "json", query=None, profile=None, endpoint="http://127.0.0.1:1", token="t",
        tenant=None, state_dir=None, verbose=False, max_items=None, starting_token=None, at="+2h",
    )  # fmt: skip
    ctx = Context(args=args, out=Console(file=out, width=120, no_color=True), err=Console(file=err, width=200))
    code = maintenance.cmd_sweep(ctx, args)
    return code, out.getvalue(), err.getvalue()


def test_the_sweep_prints_jobs_done_retried_and_parked_and_warns_about_parked_items(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = _run(monkeypatch, "json")
    assert code == 0
    assert "parked after their last attempt" in err and "4 job" in err and "1 upload" in err

    out = capsys.readouterr().out
    rows = {(row["sweep"], row["action"]): row["items"] for row in json.loads(out)["items"]}
    assert rows == {
        ("job", "done"): 4,
        ("job", "retried"): 1,
        ("job", "parked"): 1,
        ("job", "parked_total"): 4,
        ("upload", "expired"): 2,
        ("upload", "failed"): 1,
        ("upload", "backed_off"): 1,
        ("upload", "parked_total"): 1,
    }


def test_the_sweep_table_shows_each_action(monkeypatch: pytest.MonkeyPatch) -> None:
    code, out, _ = _run(monkeypatch, None)
    assert code == 0
    assert "retried" in out and "parked_total" in out and "not_due" not in out
