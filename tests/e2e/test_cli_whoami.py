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


@pytest.mark.parametrize("idp", ["okta", "cognito", "entra"])
def test_a_stack_started_with_an_idp_reads_tokens_minted_like_it(idp: str, tmp_path) -> None:
    from tests.e2e.helpers import start_stack, stop_stack

    stack = start_stack(tmp_path / "state", tmp_path / "local.log", "--idp", idp)
    try:
        cli = Cli(stack, "t-idp")
        reader = cli("token", "--like", idp, "--subject", "jane", "--scope", "packages:read")
        machine = cli("token", "--like", idp, "--subject", "ci", "--scope", "packages:read", "--actor", "workflow")
        plain = cli("token", "--subject", "jane", "--scope", "packages:read")
        assert reader.code == machine.code == plain.code == 0, (reader.output, machine.output, plain.output)

        me = cli("--output", "json", "--token", reader.stdout.strip(), "whoami")
        ci = cli("--output", "json", "--token", machine.stdout.strip(), "whoami")
        assert me.code == ci.code == 0, (me.output, ci.output)
        assert (me.json()["tenant"], me.json()["actor"], me.json()["permissions"]) == (
            "t-idp",
            "owner",
            ["packages:read"],
        )
        assert (ci.json()["actor"], ci.json()["permissions"]) == ("workflow", ["packages:read"])
        listed = cli("--token", reader.stdout.strip(), "releases")
        assert listed.code == 0, listed.output
        yank = cli("--token", reader.stdout.strip(), "yank", "nothing@1.0.0")
        assert yank.code == 7, yank.output  # 403: the read scope does not yank

        # a token of the local shape is not what this stack reads: it grants nothing here (Okta reads scp, Cognito
        # only prefixed scopes), or it is refused 401 (Entra ID reads the tenant from tid)
        other = cli("--output", "json", "--token", plain.stdout.strip(), "whoami")
        if idp == "entra":
            assert other.code == 7 and "'tid'" in other.output, other.output
        else:
            assert other.code == 0 and other.json()["permissions"] == [], other.output
    finally:
        stop_stack(stack)
