"""``packyard login``'s pure parts: PKCE (against RFC 7636's worked example), the per-profile token cache (its file
modes, what it refuses and how it says to fix it) and when a cached token is renewed."""

from __future__ import annotations

import json
import re
import stat
from pathlib import Path

import pytest

from devstack.oidc import _is_loopback_redirect, pkce_challenge
from packyard_cli import credentials
from packyard_cli.client import EXIT_UNAUTHORIZED, EXIT_USAGE, CliError
from packyard_cli.credentials import Credentials
from packyard_cli.oidc import LoopbackAddress, challenge_of, new_verifier

# RFC 7636, Appendix B: this verifier's S256 challenge
RFC_VERIFIER = "dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk"
RFC_CHALLENGE = "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM"
ENDPOINT = "https://api.example"


@pytest.fixture(autouse=True)
def config_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    return tmp_path / "config"


def signed_in(expires_at: float, **changes: object) -> Credentials:
    values: dict[str, object] = {
        "endpoint": ENDPOINT,
        "issuer": "https://issuer.example",
        "client_id": "cli",
        "token_endpoint": "https://issuer.example/token",
        "grant": "authorization_code",
        "access_token": "old-access",
        "refresh_token": "old-refresh",
        "expires_at": expires_at,
        **changes,
    }
    return Credentials(**values)  # type: ignore[arg-type]


def test_the_cli_and_the_local_issuer_compute_rfc_7636s_s256_challenge() -> None:
    assert challenge_of(RFC_VERIFIER) == RFC_CHALLENGE
    assert pkce_challenge(RFC_VERIFIER) == RFC_CHALLENGE


def test_a_verifier_is_43_to_128_unreserved_characters_and_fresh_each_time() -> None:
    verifiers = {new_verifier() for _ in range(20)}
    assert len(verifiers) == 20
    assert all(re.fullmatch(r"[A-Za-z0-9._~-]{43,128}", v) for v in verifiers)


@pytest.mark.parametrize(
    ("uri", "loopback"),
    [
        ("http://127.0.0.1:53121/callback", True),
        ("http://[::1]:53121/callback", True),
        ("http://localhost:53121/callback", False),  # RFC 8252 section 8.3: not the name, the IP literal
        ("https://127.0.0.1:53121/callback", False),
        ("http://127.0.0.1/callback", False),  # the port the CLI's listener got is part of it
        ("http://evil@127.0.0.1:1/callback", False),
        ("http://127.0.0.1.evil.example:1/callback", False),
    ],
)
def test_the_local_issuer_redirects_only_to_a_loopback_ip_with_a_port(uri: str, loopback: bool) -> None:
    assert _is_loopback_redirect(uri) is loopback


def test_the_cache_is_written_0600_in_a_0700_folder_and_read_back(config_home: Path) -> None:
    path = credentials.cache_path("prod")
    credentials.save(path, signed_in(1000.0, secret_env="PACKYARD_CLIENT_SECRET"))
    assert path == config_home / "packyard" / "credentials" / "prod.json"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert credentials.load(path) == signed_in(1000.0, secret_env="PACKYARD_CLIENT_SECRET")
    assert json.loads(path.read_text())["schemaVersion"] == credentials.SCHEMA_VERSION


def test_a_profile_name_never_leaves_the_credentials_folder(config_home: Path) -> None:
    path = credentials.cache_path("../../escape")
    assert path.parent == config_home / "packyard" / "credentials"
    assert "/" not in path.name


@pytest.mark.parametrize("mode", [0o644, 0o640, 0o604, 0o620, 0o666])
def test_a_cache_others_may_read_or_write_is_refused_with_the_chmod_that_fixes_it(mode: int) -> None:
    path = credentials.cache_path("default")
    credentials.save(path, signed_in(1000.0))
    path.chmod(mode)
    with pytest.raises(CliError) as refused:
        credentials.load(path)
    assert refused.value.exit_code == EXIT_USAGE
    assert refused.value.detail == f"run: chmod 600 {path}"
    assert f"{mode:04o}" in refused.value.title


def test_a_file_this_cli_did_not_write_is_refused_with_what_to_do() -> None:
    path = credentials.cache_path("default")
    credentials.save(path, signed_in(1000.0))
    path.write_text(json.dumps({"access_token": "x"}))
    with pytest.raises(CliError) as refused:
        credentials.load(path)
    assert "packyard login" in (refused.value.detail or "")


def test_no_cache_is_no_token() -> None:
    assert credentials.token_for("default", ENDPOINT) is None


def test_a_token_is_only_used_for_the_endpoint_it_was_got_for() -> None:
    credentials.save(credentials.cache_path("default"), signed_in(10_000.0))
    assert credentials.token_for("default", ENDPOINT + "/", now=lambda: 0.0) == "old-access"
    assert credentials.token_for("default", "http://127.0.0.1:8787", now=lambda: 0.0) is None


@pytest.mark.parametrize(
    ("left", "renewed"),
    [
        (3600.0, False),
        (credentials.REFRESH_MARGIN_SECONDS + 1, False),
        (credentials.REFRESH_MARGIN_SECONDS, True),
        (-5.0, True),
    ],
)
def test_a_token_is_renewed_when_under_a_minute_is_left(left: float, renewed: bool) -> None:
    path = credentials.cache_path("default")
    credentials.save(path, signed_in(1000.0 + left))
    calls: list[Credentials] = []

    def renew(old: Credentials) -> Credentials:
        calls.append(old)
        return credentials.replace(old, access_token="new-access", refresh_token="new-refresh", expires_at=5000.0)

    token = credentials.token_for("default", ENDPOINT, renew=renew, now=lambda: 1000.0)
    assert token == ("new-access" if renewed else "old-access")
    assert len(calls) == int(renewed)
    stored = credentials.load(path)
    assert stored is not None
    assert (stored.access_token, stored.refresh_token) == (
        ("new-access", "new-refresh") if renewed else ("old-access", "old-refresh")
    )


@pytest.mark.parametrize(
    ("grant", "command"),
    [("authorization_code", "run packyard login"), ("client_credentials", "run packyard login --client-credentials")],
)
def test_a_sign_in_that_cannot_be_renewed_says_which_login_to_run(grant: str, command: str) -> None:
    error = credentials.expired(signed_in(0.0, grant=grant), "the refresh token has expired")
    assert error.exit_code == EXIT_UNAUTHORIZED
    assert error.detail is not None and error.detail.endswith(command)


def test_logout_removes_the_cache_and_its_lock() -> None:
    path = credentials.cache_path("default")
    credentials.save(path, signed_in(0.0))
    with credentials.locked(path):
        pass
    assert credentials.remove(path) is True
    assert list(path.parent.iterdir()) == []
    assert credentials.remove(path) is False


@pytest.mark.parametrize(
    ("uri", "address"),
    [
        (None, LoopbackAddress("127.0.0.1", 0, "/callback")),
        ("http://localhost:8976/callback", LoopbackAddress("localhost", 8976, "/callback")),  # Cognito's, exactly
        ("http://127.0.0.1/cb", LoopbackAddress("127.0.0.1", 0, "/cb")),
        ("http://[::1]:5000/", LoopbackAddress("[::1]", 5000, "/")),
    ],
)
def test_the_redirect_uri_the_cli_listens_on(uri: str | None, address: LoopbackAddress) -> None:
    assert LoopbackAddress.parse(uri) == address


@pytest.mark.parametrize(
    "uri", ["https://127.0.0.1:1/cb", "http://example.com:1/cb", "http://127.0.0.1:99999/cb", "http://127.0.0.1:1/?a=b"]
)
def test_a_redirect_uri_off_the_loopback_interface_is_a_usage_error(uri: str) -> None:
    with pytest.raises(CliError) as refused:
        LoopbackAddress.parse(uri)
    assert refused.value.exit_code == EXIT_USAGE
