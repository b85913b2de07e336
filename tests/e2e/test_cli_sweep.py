"""`packyard sweep --at`: the maintenance sweeps on the local stack, as if later, through the CLI."""

from __future__ import annotations

import hashlib
import json

import pytest
import requests

from tests.e2e.helpers import Cli, write_skill

pytestmark = pytest.mark.xdist_group("e2e")


def test_given_an_abandoned_upload_when_swept_two_hours_later_then_it_is_expired(
    cli: Cli, http: requests.Session, tmp_path
) -> None:
    folder = write_skill(tmp_path / "skill")
    built = cli("build", str(folder), "--out", str(tmp_path / "out"))
    assert built.code == 0, built.output
    manifest = (tmp_path / "out.manifest.json").read_text()
    archive = (tmp_path / "out.tar.gz").read_bytes()
    session = http.post(
        f"{cli.stack.api}/v1/packages/skill/versions/1.0.0/uploads",
        json={
            "manifest": json.loads(manifest),
            "archive": {"size": len(archive), "sha256": hashlib.sha256(archive).hexdigest()},
        },
    )
    assert session.status_code == 201, session.text

    swept = cli("sweep", "--at", "+2h", "--output", "json")

    assert swept.code == 0, swept.output
    expired = [row for row in swept.json()["items"] if (row["sweep"], row["action"]) == ("upload", "expired")]
    assert expired and expired[0]["items"] >= 1  # other tests' abandoned sessions on this shared stack count too
    upload = http.get(f"{cli.stack.api}/v1/uploads/{session.json()['uploadId']}").json()
    assert upload["state"] == "expired"


def test_given_a_time_that_is_not_one_then_a_usage_error(cli: Cli) -> None:
    refused = cli("sweep", "--at", "tomorrow-ish")
    assert refused.code == 2
    assert "RFC 3339" in refused.output


def test_usage_shows_the_tenant_and_a_workspace_against_their_quotas(cli: Cli) -> None:
    shown = cli("usage", "ws-empty", "--output", "json")
    assert shown.code == 0, shown.output
    tenant, workspace = shown.json()["items"]
    assert (tenant["scope"], tenant["limitBytes"]) == ("tenant", 10 * 1024**3)
    assert (workspace["scope"], workspace["usedBytes"], workspace["installations"]) == ("workspace ws-empty", 0, 0)
