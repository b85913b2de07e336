"""``packyard whoami`` prints the principal the running local stack read from the token (``GET /v1/me``)."""

from __future__ import annotations

import pytest

from tests.e2e.helpers import Cli

pytestmark = pytest.mark.xdist_group("e2e")


def test_whoami_prints_the_tokens_principal_and_a_narrow_token_shows_its_one_permission(cli: Cli) -> None:
    everything = cli("--output", "json", "whoami")
    assert everything.code == 0, everything.output
    assert everything.json()["tenant"] == cli.tenant
    assert everything.json()["actor"] == "owner"
    assert "packages:publish" in everything.json()["permissions"]

    minted = cli("token", "--subject", "reader", "--scope", "packages:read", "--actor", "workflow")
    assert minted.code == 0, minted.output
    narrow = cli("--token", minted.stdout.strip(), "whoami")
    assert narrow.code == 0, narrow.output
    lines = dict(line.split(None, 1) for line in narrow.stdout.strip().splitlines())
    assert lines == {
        "tenant": cli.tenant,
        "subject": "reader",
        "actor": "workflow",
        "scopes": "packages:read",
        "permissions": "packages:read",
    }
