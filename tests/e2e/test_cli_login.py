"""``packyard login`` against the local stack's OpenID Connect issuer (:mod:`devstack.oidc`), over HTTP only.

The CLI runs as a subprocess whose state directory holds no signing key, so it cannot mint a local token: every call
it makes carries the token ``packyard login`` got, or none. The person's browser is this test: it reads the address
``login --no-browser`` prints, fetches the sign-in form, posts it as a user would, and follows the redirect to the
CLI's loopback listener.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import parse_qs, urljoin, urlsplit

import pytest
import requests

from devstack import process as stack_process
from devstack.oidc import machine_secret, pkce_challenge
from tests.e2e.helpers import ROOT, CliResult, Stack, base_env, stop_stack

pytestmark = pytest.mark.xdist_group("e2e")

LOGIN_TIMEOUT = 60.0


class _Form(HTMLParser):
    """The sign-in page's form: its action and its inputs (what a browser would post)."""

    def __init__(self) -> None:
        super().__init__()
        self.action = ""
        self.fields: dict[str, str] = {}
        self.buttons: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = {k: v or "" for k, v in attrs}
        if tag == "form":
            self.action = values.get("action", "")
        elif tag == "input" and values.get("name"):
            self.fields[values["name"]] = values.get("value", "")
        elif tag == "button" and values.get("name") == "decision":
            self.buttons.append(values.get("value", ""))


def sign_in_form(url: str) -> tuple[str, dict[str, str]]:
    page = requests.get(url, timeout=30)
    assert page.status_code == 200, page.text
    form = _Form()
    form.feed(page.text)
    assert form.buttons == ["allow", "deny"], page.text
    return urljoin(url, form.action), form.fields


def browse(url: str, *, user: str, tenant: str, decision: str = "allow") -> requests.Response:
    """What the person does in the browser: submit the form, then follow the redirect to the loopback address."""
    action, fields = sign_in_form(url)
    answer = requests.post(
        action, data={**fields, "username": user, "tenant": tenant, "decision": decision}, allow_redirects=False
    )
    assert answer.status_code == 302, answer.text
    return requests.get(answer.headers["Location"], timeout=30)


@dataclass
class Login:
    """A running ``packyard login``: the address it printed, then its result."""

    process: subprocess.Popen[str]
    url: str

    def result(self) -> CliResult:
        stdout, stderr = self.process.communicate(timeout=LOGIN_TIMEOUT)
        return CliResult(self.process.returncode, stdout, stderr)


class SignedOutCli:
    """The CLI with its own config directory and profiles, and no local signing key to fall back on."""

    def __init__(self, stack: Stack, home: Path) -> None:
        self.stack = stack
        self.home = home
        config = home / "config" / "packyard" / "config.toml"
        config.parent.mkdir(parents=True, exist_ok=True)
        config.write_text(
            "".join(f'[profiles.{name}]\nendpoint = "{stack.api}"\n\n' for name in ("person", "ci", "other")), "utf-8"
        )

    def env(self, **extra: str) -> dict[str, str]:
        env = base_env(self.home / "no-key")  # a state directory without the stack's key: nothing minted here
        env.update({"PACKYARD_ENDPOINT": self.stack.api, "XDG_CONFIG_HOME": str(self.home / "config"), **extra})
        return env

    def cache(self, profile: str) -> Path:
        return self.home / "config" / "packyard" / "credentials" / f"{profile}.json"

    def __call__(self, *args: str, **extra: str) -> CliResult:
        done = subprocess.run(
            [sys.executable, "-m", "packyard_cli", *args],
            cwd=ROOT,
            env=self.env(**extra),
            capture_output=True,
            text=True,
            timeout=120,
        )
        return CliResult(done.returncode, done.stdout, done.stderr)

    def start_login(self, *args: str) -> Login:
        process = subprocess.Popen(
            [sys.executable, "-m", "packyard_cli", *args, "login", "--no-browser", "--timeout", str(LOGIN_TIMEOUT)],
            cwd=ROOT,
            env=self.env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert process.stderr is not None
        for line in process.stderr:  # blocks until the CLI prints the address (or exits)
            if line.strip().startswith("http"):
                return Login(process, line.strip())
        process.wait(timeout=LOGIN_TIMEOUT)
        raise AssertionError(f"packyard login printed no address (exit {process.returncode})")

    def login_person(self, profile: str, user: str, tenant: str) -> CliResult:
        login = self.start_login("--profile", profile)
        landing = browse(login.url, user=user, tenant=tenant)
        assert landing.status_code == 200 and "Signed in" in landing.text, landing.text
        return login.result()

    def login_machine(self, profile: str, tenant: str, *args: str) -> CliResult:
        secret = machine_secret(self.stack.state_dir)
        return self(
            "--profile",
            profile,
            "--tenant",
            tenant,
            "login",
            "--client-credentials",
            *args,
            PACKYARD_CLIENT_SECRET=secret,
        )


@pytest.fixture
def signed_out(stack: Stack, tmp_path: Path) -> SignedOutCli:
    return SignedOutCli(stack, tmp_path)


def test_discovery_names_the_issuer_and_its_key_verifies_its_tokens(stack: Stack) -> None:
    issuer = f"{stack.api}/oidc"
    document = requests.get(f"{issuer}/.well-known/openid-configuration", timeout=30).json()
    assert document["issuer"] == issuer
    assert document["code_challenge_methods_supported"] == ["S256"]
    assert {"authorization_code", "refresh_token", "client_credentials"} <= set(document["grant_types_supported"])
    keys = requests.get(document["jwks_uri"], timeout=30).json()["keys"]
    answer = requests.post(
        document["token_endpoint"],
        data={"grant_type": "client_credentials", "tenant": "t-jwks"},
        auth=("packyard-machine", machine_secret(stack.state_dir)),
        timeout=30,
    )
    assert answer.status_code == 200, answer.text
    import jwt

    token = answer.json()["access_token"]
    public_key = jwt.PyJWK(next(k for k in keys if k["kid"] == jwt.get_unverified_header(token)["kid"])).key
    claims = jwt.decode(token, public_key, algorithms=["RS256"], audience="packyard", issuer=issuer)
    assert (claims["tenant"], claims["actor"], claims["sub"]) == ("t-jwks", "workflow", "packyard-machine")


def test_a_person_and_a_machine_sign_in_and_a_package_is_published_installed_and_approved_with_their_tokens(
    signed_out: SignedOutCli, tmp_path: Path
) -> None:
    tenant = f"t-{uuid.uuid4().hex[:10]}"
    # Given no token at all: the CLI cannot call the API, and says how to sign in
    nobody = signed_out("--profile", "person", "whoami")
    assert nobody.code == 7 and "sign in with packyard login" in nobody.output, nobody.output

    # When a person signs in through the browser and a machine with its client credentials
    person = signed_out.login_person("person", "jane", tenant)
    machine = signed_out.login_machine("ci", tenant)
    assert person.code == 0, person.output
    assert machine.code == 0, machine.output
    for profile in ("person", "ci"):
        assert (signed_out.cache(profile).stat().st_mode & 0o777) == 0o600
    assert (signed_out.cache("person").parent.stat().st_mode & 0o777) == 0o700
    assert machine_secret(signed_out.stack.state_dir) not in signed_out.cache("ci").read_text()
    profiles = signed_out("--output", "json", "profiles").json()["items"]
    assert {p["name"]: p["token"] for p in profiles} == {"person": "login", "ci": "login", "other": None}

    # Then the service reads each one's principal from the token it got
    me = signed_out("--profile", "person", "--output", "json", "whoami")
    ci = signed_out("--profile", "ci", "--output", "json", "whoami")
    assert me.code == ci.code == 0, (me.output, ci.output)
    assert (me.json()["tenant"], me.json()["subject"], me.json()["actor"]) == (tenant, "jane", "owner")
    assert (ci.json()["tenant"], ci.json()["subject"], ci.json()["actor"]) == (tenant, "packyard-machine", "workflow")

    # And the machine publishes, the person installs (it waits for consent) and approves, the machine sees it
    folder = tmp_path / "weather-skill"
    shutil.copytree(ROOT / "examples" / "weather-skill" / "1.0.0", folder)
    published = signed_out("--profile", "ci", "--output", "json", "publish", str(folder))
    assert published.code == 0, published.output
    assert published.json()["publishedBy"] == "packyard-machine"
    installed = signed_out("--profile", "person", "install", "weather-skill@1.0.0", "--workspace", "ws-login")
    assert installed.code == 0, installed.output
    assert "approve" in installed.output
    approved = signed_out("--profile", "person", "approve", "weather-skill", "--workspace", "ws-login")
    assert approved.code == 0, approved.output
    resolved = signed_out("--profile", "ci", "--output", "json", "resolved", "ws-login")
    assert resolved.code == 0, resolved.output
    items = resolved.json()["items"]
    assert [(item["package"], item["release"]) for item in items] == [("weather-skill", "1.0.0")]


def test_a_refused_sign_in_caches_nothing_and_says_to_sign_in_again(signed_out: SignedOutCli) -> None:
    login = signed_out.start_login("--profile", "person")
    landing = browse(login.url, user="jane", tenant="t-refused", decision="deny")
    result = login.result()
    assert landing.status_code == 400
    assert result.code == 7, result.output
    assert "the sign-in was refused" in result.output and "access_denied" in result.output
    assert "run packyard login again" in result.output
    assert not signed_out.cache("person").exists()


def test_an_answer_with_another_state_is_refused(signed_out: SignedOutCli) -> None:
    # Given a login waiting for its redirect
    login = signed_out.start_login("--profile", "person")
    redirect_uri = parse_qs(urlsplit(login.url).query)["redirect_uri"][0]
    # When something else calls the loopback address with a code and a state of its own
    forged = requests.get(redirect_uri, params={"code": "stolen", "state": "not-this-one"}, timeout=30)
    result = login.result()
    # Then the CLI refuses it and caches nothing
    assert forged.status_code == 400
    assert result.code == 7, result.output
    assert "state mismatch" in result.output and "run packyard login again" in result.output
    assert not signed_out.cache("person").exists()


def _code(stack: Stack, challenge: str, redirect_uri: str = "http://127.0.0.1:9/callback") -> str:
    query = {
        "response_type": "code",
        "client_id": "packyard-cli",
        "redirect_uri": redirect_uri,
        "scope": "openid packages:read",
        "state": "s",
        "code_challenge": challenge,
        "code_challenge_method": "S256",
    }
    action, fields = sign_in_form(requests.Request("GET", f"{stack.api}/oidc/authorize", params=query).prepare().url)
    answer = requests.post(
        action, data={**fields, "username": "jane", "tenant": "t-pkce", "decision": "allow"}, allow_redirects=False
    )
    assert answer.status_code == 302, answer.text
    return parse_qs(urlsplit(answer.headers["Location"]).query)["code"][0]


def test_the_token_endpoint_refuses_a_code_without_its_pkce_verifier_and_a_code_twice(stack: Stack) -> None:
    verifier, other = "a" * 43 + uuid.uuid4().hex, "b" * 43 + uuid.uuid4().hex
    token_url = f"{stack.api}/oidc/token"
    form = {
        "grant_type": "authorization_code",
        "client_id": "packyard-cli",
        "redirect_uri": "http://127.0.0.1:9/callback",
    }

    wrong = requests.post(
        token_url, data={**form, "code": _code(stack, pkce_challenge(verifier)), "code_verifier": other}
    )
    assert wrong.status_code == 400
    assert wrong.json()["error"] == "invalid_grant" and "PKCE" in wrong.json()["error_description"]

    code = _code(stack, pkce_challenge(verifier))
    first = requests.post(token_url, data={**form, "code": code, "code_verifier": verifier})
    again = requests.post(token_url, data={**form, "code": code, "code_verifier": verifier})
    assert first.status_code == 200, first.text
    assert again.status_code == 400 and again.json()["error"] == "invalid_grant"


def test_a_token_for_another_audience_is_401_problem_json(signed_out: SignedOutCli, stack: Stack) -> None:
    # Given a machine that asked the issuer for a token of another API
    machine = signed_out.login_machine("other", "t-aud", "--audience", "https://another-api.example")
    assert machine.code == 0, machine.output
    # When it calls Packyard with it
    refused = signed_out("--profile", "other", "whoami")
    token = json.loads(signed_out.cache("other").read_text())["access_token"]
    answer = requests.get(f"{stack.api}/v1/me", headers={"Authorization": f"Bearer {token}"}, timeout=30)
    # Then the local authorizer refuses it as API Gateway's would: 401 problem+json naming the audience
    assert refused.code == 7, refused.output
    assert "audience" in refused.output and "run packyard login to sign in again" in refused.output
    assert answer.status_code == 401
    assert answer.headers["Content-Type"] == "application/problem+json"
    assert answer.json()["code"] == "unauthorized" and "audience" in answer.json()["detail"]


def test_a_cache_file_others_may_read_is_refused_with_the_command_that_fixes_it(signed_out: SignedOutCli) -> None:
    assert signed_out.login_machine("ci", "t-mode").code == 0
    cache = signed_out.cache("ci")
    cache.chmod(0o644)
    refused = signed_out("--profile", "ci", "whoami")
    assert refused.code == 2, refused.output
    assert f"chmod 600 {cache}" in refused.output
    cache.chmod(0o600)
    assert signed_out("--profile", "ci", "whoami").code == 0


def test_logout_removes_the_cache_and_revokes_the_refresh_token(signed_out: SignedOutCli, stack: Stack) -> None:
    assert signed_out.login_person("person", "jane", "t-logout").code == 0
    refresh_token = json.loads(signed_out.cache("person").read_text())["refresh_token"]
    out = signed_out("--profile", "person", "logout")
    assert out.code == 0, out.output
    assert "revoked" in out.output and not signed_out.cache("person").exists()
    reuse = requests.post(
        f"{stack.api}/oidc/token",
        data={"grant_type": "refresh_token", "refresh_token": refresh_token, "client_id": "packyard-cli"},
        timeout=30,
    )
    assert reuse.status_code == 400 and reuse.json()["error"] == "invalid_grant"
    assert signed_out("--profile", "person", "whoami").code == 7  # signed out: no token at all


def test_a_token_about_to_expire_is_renewed_with_the_rotated_refresh_token(
    signed_out: SignedOutCli, stack: Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    from packyard_cli import credentials

    assert signed_out.login_person("person", "jane", "t-renew").code == 0
    before = json.loads(signed_out.cache("person").read_text())
    # When the CLI's clock says the token has under a minute left (an hour on: it lives an hour)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(signed_out.home / "config"))
    later = before["expires_at"] - 30
    token = credentials.token_for("person", stack.api, now=lambda: later)
    after = json.loads(signed_out.cache("person").read_text())
    # Then it got a new access token and a new refresh token from the issuer, and the service takes the token
    assert token == after["access_token"] != before["access_token"]
    assert after["refresh_token"] != before["refresh_token"]
    me = requests.get(f"{stack.api}/v1/me", headers={"Authorization": f"Bearer {token}"}, timeout=30)
    assert me.status_code == 200 and me.json()["subject"] == "jane"


@pytest.fixture(scope="module")
def short_lived_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """A stack whose issuer's access tokens live 30 s (under the CLI's renewal margin: every use renews) and whose
    refresh tokens expire as they are issued."""
    root = tmp_path_factory.mktemp("short-lived")
    env = base_env(root / "state")
    env.update({"PACKYARD_LOCAL_ACCESS_TOKEN_TTL": "30", "PACKYARD_LOCAL_REFRESH_TOKEN_TTL": "0"})
    process, state = stack_process.start_stack(root / "state", root / "local.log", env=env)
    stack = Stack(process=process, api=state["api"], aws=state["aws"], state_dir=root / "state", log=root / "local.log")
    try:
        yield stack
    finally:
        stop_stack(stack)


def test_an_expired_refresh_token_says_to_run_packyard_login(short_lived_stack: Stack, tmp_path: Path) -> None:
    cli = SignedOutCli(short_lived_stack, tmp_path)
    assert cli.login_person("person", "jane", "t-expired").code == 0
    started = time.time()
    result = cli("--profile", "person", "whoami")
    assert result.code == 7, result.output
    assert "your sign-in has expired" in result.output
    assert "the refresh token has expired" in result.output and "run packyard login" in result.output
    assert json.loads(cli.cache("person").read_text())["expires_at"] - started < 60  # it was due for renewal


def test_an_issuer_without_a_discovery_document_or_out_of_reach_says_what_to_check(
    signed_out: SignedOutCli, stack: Stack
) -> None:
    wrong = signed_out("--profile", "ci", "login", "--client-credentials", "--issuer", f"{stack.api}/not-an-issuer")
    assert wrong.code == 2, wrong.output
    assert "is not an OpenID Connect issuer" in wrong.output and "--issuer" in wrong.output
    gone = signed_out("--profile", "ci", "login", "--client-credentials", "--issuer", "http://127.0.0.1:9/oidc")
    assert gone.code == 5, gone.output
    assert "the identity provider is unreachable" in gone.output


def test_a_secret_is_never_an_argument(signed_out: SignedOutCli) -> None:
    missing = signed_out("--profile", "ci", "login", "--client-credentials")  # no $PACKYARD_CLIENT_SECRET
    assert missing.code == 2, missing.output
    assert "set $PACKYARD_CLIENT_SECRET" in missing.output
    argument = signed_out("--profile", "ci", "login", "--client-credentials", "--client-secret", "s3cret")
    assert argument.code == 2, argument.output  # no such option (and nothing was sent anywhere)
    assert "s3cret" not in argument.output


@pytest.mark.parametrize("idp", ["okta", "cognito"])
def test_a_stack_started_with_an_idp_issues_tokens_its_claim_mapping_reads(idp: str, tmp_path: Path) -> None:
    # Given a stack reading Okta's (scp array) or Cognito's (prefixed scopes, client_id for the actor) token shape
    root = tmp_path / "stack"
    env = base_env(root / "state")
    process, state = stack_process.start_stack(root / "state", root / "local.log", "--idp", idp, env=env)
    stack = Stack(process=process, api=state["api"], aws=state["aws"], state_dir=root / "state", log=root / "local.log")
    try:
        cli = SignedOutCli(stack, tmp_path / "home")
        # When a person and a machine sign in with the local issuer
        person = cli.login_person("person", "jane", "t-idp")
        machine = cli.login_machine("ci", "t-idp", "--scope", "packages:read")
        assert person.code == machine.code == 0, (person.output, machine.output)
        token = json.loads(cli.cache("person").read_text())["access_token"]
        import jwt

        claims = jwt.decode(token, options={"verify_signature": False})
        # Then the tokens have that provider's shape, and the stack reads owner and workflow from them
        assert ("scp" in claims) if idp == "okta" else claims["scope"].startswith("openid https://packyard.local/")
        me = cli("--profile", "person", "--output", "json", "whoami")
        ci = cli("--profile", "ci", "--output", "json", "whoami")
        assert me.code == ci.code == 0, (me.output, ci.output)
        assert (me.json()["tenant"], me.json()["actor"]) == ("t-idp", "owner")
        assert "packages:publish" in me.json()["permissions"]
        assert (ci.json()["tenant"], ci.json()["actor"], ci.json()["permissions"]) == (
            "t-idp",
            "workflow",
            ["packages:read"],
        )
    finally:
        stop_stack(stack)
