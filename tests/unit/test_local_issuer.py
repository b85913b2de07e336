"""The local OpenID Connect issuer's grants, called directly with a clock the test moves (no HTTP, no waiting): codes
work once and only with their PKCE verifier, refresh tokens rotate and expire, the machine client needs its secret,
and the tokens are the stack's claim shape (or an identity provider's), accepted by the local authorizer's check."""

from __future__ import annotations

import base64
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

from devstack.oidc import LocalIssuer, OAuthError, pkce_challenge, shape_for
from packyard_cli import tokens
from packyard_cli.identity_providers import CLI_CLIENT, MACHINE_CLIENT

ISSUER = "http://127.0.0.1:8787/oidc"
REDIRECT = "http://127.0.0.1:50123/callback"
VERIFIER = "v" * 43 + "-verifier"
SECRET = "machine-secret"


class Clock:
    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture(scope="module")
def key(tmp_path_factory: pytest.TempPathFactory) -> tokens.LocalKey:
    return tokens.load_or_create_key(tmp_path_factory.mktemp("key"))


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def issuer(key: tokens.LocalKey, clock: Clock) -> LocalIssuer:
    return LocalIssuer(key=key, issuer=ISSUER, machine_secret=SECRET, clock=clock, access_ttl=600, refresh_ttl=3600)


def authorize(issuer: LocalIssuer, decision: str = "allow", **changes: str) -> dict[str, list[str]]:
    params = {
        "client_id": CLI_CLIENT,
        "redirect_uri": REDIRECT,
        "response_type": "code",
        "scope": "openid packages:read packages:publish",
        "state": "st",
        "code_challenge": pkce_challenge(VERIFIER),
        "code_challenge_method": "S256",
        "username": "jane",
        "tenant": "acme",
        "decision": decision,
        **changes,
    }
    status, headers, _ = issuer.authorize(params, decided=True)
    assert status == 302
    location = urlsplit(headers["Location"])
    assert f"{location.scheme}://{location.netloc}{location.path}" == REDIRECT
    return parse_qs(location.query)


def redeem(issuer: LocalIssuer, code: str, verifier: str = VERIFIER) -> dict[str, Any]:
    form = {
        "grant_type": "authorization_code",
        "code": code,
        "client_id": CLI_CLIENT,
        "redirect_uri": REDIRECT,
        "code_verifier": verifier,
    }
    return issuer.token(form, "")


def verified(key: tokens.LocalKey, token: str) -> dict[str, Any]:
    """The claims, with the signature and issuer checked (not the times: the test's clock is not the real one)."""
    import jwt

    return jwt.decode(
        token,
        key.public_key,
        algorithms=["RS256"],
        issuer=ISSUER,
        options={"verify_aud": False, "verify_exp": False, "verify_nbf": False, "verify_iat": False},
    )


def test_a_code_is_exchanged_once_with_its_verifier_for_the_stacks_claim_shape(
    issuer: LocalIssuer, key: tokens.LocalKey
) -> None:
    answer = authorize(issuer)
    assert answer["state"] == ["st"] and answer["iss"] == [ISSUER]
    tokens_ = redeem(issuer, answer["code"][0])
    assert tokens_["token_type"] == "Bearer" and tokens_["expires_in"] == 600 and tokens_["refresh_token"]
    claims = verified(key, tokens_["access_token"])
    assert {k: claims[k] for k in ("sub", "aud", "tenant", "scope", "actor")} == {
        "sub": "jane",
        "aud": "packyard",
        "tenant": "acme",
        "scope": "packages:read packages:publish",  # openid is the issuer's, not the API's
        "actor": "owner",
    }
    assert claims["exp"] - claims["iat"] == 600
    with pytest.raises(OAuthError) as again:
        redeem(issuer, answer["code"][0])
    assert again.value.error == "invalid_grant"


def test_a_wrong_verifier_is_invalid_grant_and_burns_the_code(issuer: LocalIssuer) -> None:
    code = authorize(issuer)["code"][0]
    with pytest.raises(OAuthError) as wrong:
        redeem(issuer, code, verifier="w" * 50)
    assert (wrong.value.error, wrong.value.status) == ("invalid_grant", 400)
    assert "PKCE" in wrong.value.description
    with pytest.raises(OAuthError):
        redeem(issuer, code)


def test_a_code_expires_after_two_minutes(issuer: LocalIssuer, clock: Clock) -> None:
    code = authorize(issuer)["code"][0]
    clock.now += 121
    with pytest.raises(OAuthError, match="expired"):
        redeem(issuer, code)


def test_a_refused_sign_in_redirects_access_denied_with_the_state(issuer: LocalIssuer) -> None:
    answer = authorize(issuer, decision="deny")
    assert answer["error"] == ["access_denied"] and answer["state"] == ["st"] and "code" not in answer


def test_a_request_without_pkce_is_refused_by_redirect(issuer: LocalIssuer) -> None:
    answer = authorize(issuer, code_challenge_method="plain")
    assert answer["error"] == ["invalid_request"]


@pytest.mark.parametrize(
    "redirect_uri", ["http://localhost:50123/cb", "https://evil.example/cb", "http://127.0.0.1/cb"]
)
def test_a_redirect_uri_off_the_loopback_ip_gets_an_error_page_never_a_redirect(
    issuer: LocalIssuer, redirect_uri: str
) -> None:
    status, headers, page = issuer.authorize({"client_id": CLI_CLIENT, "redirect_uri": redirect_uri}, decided=False)
    assert status == 400 and "Location" not in headers and b"redirect_uri" in page


def test_refresh_tokens_rotate_and_expire(issuer: LocalIssuer, clock: Clock) -> None:
    first = redeem(issuer, authorize(issuer)["code"][0])
    refresh = {"grant_type": "refresh_token", "client_id": CLI_CLIENT}
    second = issuer.token({**refresh, "refresh_token": first["refresh_token"]}, "")
    assert second["refresh_token"] != first["refresh_token"]
    with pytest.raises(OAuthError, match="already used"):
        issuer.token({**refresh, "refresh_token": first["refresh_token"]}, "")
    clock.now += 3600
    with pytest.raises(OAuthError, match="the refresh token has expired") as expired:
        issuer.token({**refresh, "refresh_token": second["refresh_token"]}, "")
    assert expired.value.error == "invalid_grant"


def test_a_revoked_refresh_token_is_refused(issuer: LocalIssuer) -> None:
    first = redeem(issuer, authorize(issuer)["code"][0])
    issuer.revoke({"token": first["refresh_token"]})
    with pytest.raises(OAuthError) as refused:
        issuer.token(
            {"grant_type": "refresh_token", "client_id": CLI_CLIENT, "refresh_token": first["refresh_token"]}, ""
        )
    assert refused.value.error == "invalid_grant"


def basic(client: str, secret: str) -> str:
    return "Basic " + base64.b64encode(f"{client}:{secret}".encode()).decode()


def test_the_machine_gets_a_workflow_token_with_its_secret_and_no_refresh_token(
    issuer: LocalIssuer, key: tokens.LocalKey
) -> None:
    answer = issuer.token(
        {"grant_type": "client_credentials", "tenant": "acme", "scope": "packages:read"}, basic(MACHINE_CLIENT, SECRET)
    )
    assert "refresh_token" not in answer
    claims = verified(key, answer["access_token"])
    assert (claims["sub"], claims["tenant"], claims["actor"], claims["scope"]) == (
        MACHINE_CLIENT,
        "acme",
        "workflow",
        "packages:read",
    )


@pytest.mark.parametrize("authorization", [basic(MACHINE_CLIENT, "wrong"), basic("nobody", SECRET), ""])
def test_the_machine_client_without_its_secret_is_invalid_client_401(issuer: LocalIssuer, authorization: str) -> None:
    form = (
        {"grant_type": "client_credentials"}
        if authorization
        else {"grant_type": "client_credentials", "client_id": MACHINE_CLIENT}
    )
    with pytest.raises(OAuthError) as refused:
        issuer.token(form, authorization)
    assert (refused.value.error, refused.value.status) == ("invalid_client", 401)


def test_the_public_client_may_not_use_client_credentials(issuer: LocalIssuer) -> None:
    with pytest.raises(OAuthError) as refused:
        issuer.token({"grant_type": "client_credentials", "client_id": CLI_CLIENT}, "")
    assert refused.value.error == "unauthorized_client"


def test_an_unknown_scope_is_invalid_scope(issuer: LocalIssuer) -> None:
    with pytest.raises(OAuthError) as refused:
        issuer.token({"grant_type": "client_credentials", "scope": "admin:everything"}, basic(MACHINE_CLIENT, SECRET))
    assert refused.value.error == "invalid_scope"


def test_with_an_identity_providers_shape_the_tokens_are_shaped_like_its(key: tokens.LocalKey, clock: Clock) -> None:
    okta = LocalIssuer(key=key, issuer=ISSUER, machine_secret=SECRET, clock=clock, shape=shape_for("okta"))
    answer = okta.token(
        {"grant_type": "client_credentials", "tenant": "acme", "scope": "packages:read"}, basic(MACHINE_CLIENT, SECRET)
    )
    claims = verified(key, answer["access_token"])
    assert (claims["scp"], claims["cid"], claims["tenant"]) == (["packages:read"], MACHINE_CLIENT, "acme")
    assert "scope" not in claims


def test_the_local_authorizer_accepts_the_issuers_tokens_and_refuses_another_audience(key: tokens.LocalKey) -> None:
    live = LocalIssuer(key=key, issuer=ISSUER, machine_secret=SECRET)  # the real clock: the authorizer checks exp
    ours = live.token({"grant_type": "client_credentials", "tenant": "acme"}, basic(MACHINE_CLIENT, SECRET))
    other = live.token(
        {"grant_type": "client_credentials", "audience": "https://another-api.example"}, basic(MACHINE_CLIENT, SECRET)
    )
    assert key.verify(ours["access_token"], issuers=(tokens.ISSUER, ISSUER))["tenant"] == "acme"
    with pytest.raises(tokens.InvalidToken, match="issuer"):
        key.verify(ours["access_token"])  # packyard token's issuer alone: the local issuer must be trusted too
    with pytest.raises(tokens.InvalidToken, match="audience"):
        key.verify(other["access_token"], issuers=(tokens.ISSUER, ISSUER))
