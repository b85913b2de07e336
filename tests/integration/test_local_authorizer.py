"""Issue 21's bad tokens through the local HTTP server (a real socket in front of the template's routes): what API
Gateway's JWT authorizer refuses on AWS (malformed, expired, another issuer, another audience, no expiry, an
unsigned or HMAC-signed token) the local server refuses the same way, 401 problem+json ``unauthorized`` saying why;
a well-signed token whose claims the claim mapping cannot read (a tenant that is not a tenant id, a scope claim of
the wrong type, an actor claim with an unknown value) reaches the function and is 401 problem+json naming the claim.
Each bad token is the good one with one thing changed, so the refusal is that thing's."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time
from collections.abc import Iterator
from typing import Any

import jwt
import pytest
import requests

from devstack.api import LocalApi
from packyard_cli import tokens
from tests.support.local_server import serving


@pytest.fixture(scope="module")
def key(tmp_path_factory: pytest.TempPathFactory) -> tokens.LocalKey:
    return tokens.load_or_create_key(tmp_path_factory.mktemp("key"))


@pytest.fixture
def url(api: LocalApi, key: tokens.LocalKey) -> Iterator[str]:
    with serving(api, key) as server:
        yield server.url


def _claims(**changes: Any) -> dict[str, Any]:
    now = int(time.time())
    claims: dict[str, Any] = {
        "iss": tokens.ISSUER,
        "aud": tokens.AUDIENCE,
        "sub": "jane",
        "tenant": "t-acme",
        "scope": "packages:read",
        "actor": "owner",
        "iat": now,
        "nbf": now,
        "exp": now + 600,
    }
    claims.update(changes)
    return {name: value for name, value in claims.items() if value is not None}


def _signed(key: tokens.LocalKey, claims: dict[str, Any]) -> str:
    return jwt.encode(claims, key.private_pem, algorithm=tokens.ALGORITHM, headers={"kid": key.kid})


def _segment(value: dict[str, Any]) -> str:
    return base64.urlsafe_b64encode(json.dumps(value).encode()).rstrip(b"=").decode()


def _get(url: str, token: str, path: str = "/v1/packages") -> requests.Response:
    return requests.get(f"{url}{path}", headers={"Authorization": f"Bearer {token}"}, timeout=30)


def _assert_unauthorized(answer: requests.Response) -> dict[str, Any]:
    assert answer.status_code == 401, answer.text
    assert answer.headers["Content-Type"] == "application/problem+json"
    body: dict[str, Any] = answer.json()
    assert (body["status"], body["code"]) == (401, "unauthorized")
    return body


def test_the_good_token_is_accepted(url: str, key: tokens.LocalKey) -> None:
    # the baseline every bad token below differs from in one thing
    answer = _get(url, _signed(key, _claims()))
    assert answer.status_code == 200, answer.text
    assert answer.json()["items"] == []


@pytest.mark.parametrize(
    ("token", "why"),
    [
        ("not-a-jwt", "not valid"),
        ("a.b.c", "not valid"),
        (_segment({"alg": "RS256"}) + "." + _segment(_claims()), "not valid"),  # two segments
        (_segment({"alg": "RS256", "typ": "JWT"}) + "." + _segment(_claims()) + ".", "signature"),  # none
        (_segment({"alg": "none", "typ": "JWT"}) + "." + _segment(_claims()) + ".", "not valid"),  # unsigned
    ],
    ids=["not-a-jwt", "three-garbage-segments", "two-segments", "empty-signature", "alg-none"],
)
def test_a_malformed_token_is_401_problem_json(url: str, token: str, why: str) -> None:
    body = _assert_unauthorized(_get(url, token))
    assert why in body["detail"], body


def test_an_hmac_token_keyed_with_the_public_key_is_refused(url: str, key: tokens.LocalKey) -> None:
    # the algorithm-confusion forgery: HS256 with the (public) verification key as the secret
    # (PyJWT will not sign with a PEM as an HMAC secret, so the token is put together by hand)
    signing_input = f"{_segment({'alg': 'HS256', 'typ': 'JWT', 'kid': key.kid})}.{_segment(_claims())}"
    mac = hmac.new(key.public_pem, signing_input.encode(), hashlib.sha256).digest()
    forged = f"{signing_input}.{base64.urlsafe_b64encode(mac).rstrip(b'=').decode()}"
    body = _assert_unauthorized(_get(url, forged))
    assert "not valid" in body["detail"], body


@pytest.mark.parametrize(
    ("changes", "why"),
    [
        ({"exp": int(time.time()) - 120, "iat": int(time.time()) - 720, "nbf": int(time.time()) - 720}, "expired"),
        ({"exp": None}, "exp"),
        ({"iss": "https://cognito-idp.eu-west-1.amazonaws.com/eu-west-1_SOMEONEELSE"}, "issuer"),
        ({"iss": None}, "iss"),
        ({"aud": "https://another-api.example"}, "audience"),
        ({"aud": None}, "audience"),
    ],
    ids=["expired", "no-exp", "wrong-issuer", "no-issuer", "wrong-audience", "no-audience"],
)
def test_a_well_signed_token_the_authorizer_refuses_is_401_problem_json_saying_why(
    url: str, key: tokens.LocalKey, changes: dict[str, Any], why: str
) -> None:
    answer = _get(url, _signed(key, _claims(**changes)))
    body = _assert_unauthorized(answer)
    assert why in body["detail"], body
    assert answer.headers["WWW-Authenticate"] == 'Bearer error="invalid_token"'


@pytest.mark.parametrize(
    ("changes", "claim", "says"),
    [
        ({"tenant": "a#b"}, "tenant", "not a valid tenant id"),
        ({"tenant": None}, "tenant", "no tenant claim"),
        ({"scope": ["packages:read"]}, "scope", "not a space-separated string"),
        ({"actor": "admin"}, "actor", "neither an owner's nor a workflow's"),
        ({"sub": None}, "sub", "no subject claim"),
    ],
    ids=["tenant-not-a-tenant-id", "no-tenant", "scope-an-array", "actor-unknown", "no-subject"],
)
def test_a_claim_the_mapping_cannot_read_is_401_problem_json_naming_it(
    url: str, key: tokens.LocalKey, changes: dict[str, Any], claim: str, says: str
) -> None:
    for path in ("/v1/packages", "/v1/me"):  # a scoped route and the one that needs only a valid token
        body = _assert_unauthorized(_get(url, _signed(key, _claims(**changes)), path))
        assert body["claim"] == claim, body
        assert repr(claim) in body["detail"] and says in body["detail"], body
