"""The local stack over HTTP: JWT checks, v2 events to the handlers, presigned URLs on the local moto server,
the OpenAPI document and Swagger UI, ports and a clean stop."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import jwt
import pytest
import requests
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from devstack.openapi import COMMITTED
from packyard_cli.build import build_from_directory, build_from_files
from tests.e2e.helpers import ROOT, Cli, Stack, base_env, start_stack, stop_stack, write_skill

pytestmark = pytest.mark.xdist_group("e2e")

# ------------------------------------------------------------------ presigned URLs with a plain HTTP client


def test_publish_with_a_plain_http_client_and_presigned_urls(
    stack: Stack, http: requests.Session, tmp_path: Path
) -> None:
    # Given a deterministic build of a folder
    built = build_from_directory(write_skill(tmp_path / "skill"))
    api = stack.api

    # When the whole flow is done with requests: session, presigned PUT, complete, poll
    created = http.post(f"{api}/v1/packages/weather-skill/versions/1.0.0/uploads", json=built.upload_request())
    assert created.status_code == 201, created.text
    session = created.json()
    upload_url = session["upload"]["url"]
    put = requests.put(upload_url, data=built.archive, timeout=30)  # no token: the URL is the credential
    completed = http.post(f"{api}{session['links']['complete']}")
    state = completed.json()["state"]
    deadline = time.monotonic() + 30
    while state == "verifying" and time.monotonic() < deadline:
        time.sleep(0.1)
        state = http.get(f"{api}/v1/uploads/{session['uploadId']}").json()["state"]

    # Then the upload URL pointed at the local moto server, and the verified release is downloadable there too
    assert upload_url.startswith(f"{stack.aws}/"), upload_url
    assert put.status_code == 200, put.text
    assert completed.status_code == 202
    assert state == "published"
    link = http.get(f"{api}/v1/packages/weather-skill/versions/1.0.0/archive").json()
    assert link["url"].startswith(f"{stack.aws}/")
    downloaded = requests.get(link["url"], timeout=30)
    assert downloaded.status_code == 200
    assert downloaded.content == built.archive
    assert link["sha256"] == built.archive_sha256


def test_concurrent_requests_each_see_their_own_body(stack: Stack, cli: Cli) -> None:
    """16 clients create upload sessions at once, each for its own version and content: every session records the
    request that created it (Powertools keeps the current event on its router class, shared by every resolver in a
    process; the local server runs concurrent requests in one process, so the resolver holds its own)."""
    token = cli.token()

    def create(i: int) -> tuple[dict[str, object], dict[str, object]]:
        built = build_from_files({"SKILL.md": f"# concurrent {i}\n".encode()})
        answer = requests.post(
            f"{stack.api}/v1/packages/concurrent/versions/1.0.{i}/uploads",
            json=built.upload_request(),
            headers={"Authorization": f"Bearer {token}"},
            timeout=60,
        )
        assert answer.status_code == 201, answer.text
        return built.upload_request(), answer.json()

    with ThreadPoolExecutor(max_workers=16) as pool:
        results = list(pool.map(create, range(48)))

    for i, (sent, created) in enumerate(results):
        assert created["version"] == f"1.0.{i}"
        assert created["archive"]["sha256"] == sent["archive"]["sha256"]  # type: ignore[index]


def test_handler_responses_come_back_unchanged(stack: Stack, http: requests.Session) -> None:
    # Given an upload session request for a package name the handler refuses
    response = http.post(
        f"{stack.api}/v1/packages/Not_A_Name/versions/1.0.0/uploads",
        json={"manifest": {"protocolVersion": 1, "files": []}, "archive": {"size": 1, "sha256": "0" * 64}},
    )

    # Then status, content type and problem body are the handler's own
    assert response.status_code == 400
    assert response.headers["Content-Type"] == "application/problem+json"
    assert response.json()["code"] == "invalid_request"


# ------------------------------------------------------------------ the JWT authorizer


def test_requests_without_a_valid_token_are_401_problems(stack: Stack, cli: Cli, tenant: str) -> None:
    other_key = rsa.generate_private_key(public_exponent=65537, key_size=2048).private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    good = jwt.decode(cli.token(), options={"verify_signature": False})
    forged = jwt.encode(good, other_key, algorithm="RS256")
    wrong_audience = jwt.encode({**good, "aud": "someone-else"}, other_key, algorithm="RS256")
    url = f"{stack.api}/v1/packages"

    missing = requests.get(url, timeout=10)
    not_bearer = requests.get(url, headers={"Authorization": "Basic dXNlcjpwYXNz"}, timeout=10)
    garbage = requests.get(url, headers={"Authorization": "Bearer not-a-jwt"}, timeout=10)
    wrong_key = requests.get(url, headers={"Authorization": f"Bearer {forged}"}, timeout=10)
    wrong_aud = requests.get(url, headers={"Authorization": f"Bearer {wrong_audience}"}, timeout=10)
    valid = requests.get(url, headers={"Authorization": f"Bearer {cli.token()}"}, timeout=10)

    for response in (missing, not_bearer, garbage, wrong_key, wrong_aud):
        assert response.status_code == 401
        assert response.headers["Content-Type"] == "application/problem+json"
        assert response.json()["code"] == "unauthorized"
    assert "signature" in wrong_key.json()["detail"]
    assert valid.status_code == 200
    assert valid.json()["items"] == []
    assert good["tenant"] == tenant
    assert {"iss", "aud", "exp", "sub", "scope"} <= good.keys()


def test_an_expired_token_is_refused(stack: Stack, cli: Cli) -> None:
    result = cli("token", "--ttl", "-60")
    assert result.code == 0

    response = requests.get(f"{stack.api}/v1/packages", headers={"Authorization": f"Bearer {result.stdout.strip()}"})

    assert response.status_code == 401
    assert "expired" in response.json()["detail"]


def test_an_unknown_route_is_404_before_authorization(stack: Stack) -> None:
    response = requests.get(f"{stack.api}/v1/nothing-here", timeout=10)

    assert response.status_code == 404
    assert response.json()["code"] == "not_found"


@pytest.mark.parametrize("method", ["TRACE", "QUERY", "BREW"])
def test_a_method_no_route_has_is_a_404_problem_not_a_501_page(
    stack: Stack, http: requests.Session, method: str
) -> None:
    # Given a method the API routes nowhere (found by the schema fuzzer: http.server answered 501 with an HTML page)
    response = http.request(method, f"{stack.api}/v1/usage", timeout=10)

    # Then it is answered as API Gateway answers a route it does not have: 404, problem+json with a stable code
    assert response.status_code == 404, response.text
    assert response.headers["Content-Type"] == "application/problem+json"
    assert response.json()["code"] == "not_found"


def test_tenants_are_isolated(stack: Stack, cli: Cli, tmp_path: Path) -> None:
    # Given a release published by one tenant
    published = cli("publish", str(write_skill(tmp_path / "skill")), "--package", "private-skill", "--version", "1.0.0")
    assert published.code == 0, published.output

    # When another tenant looks for it
    other = requests.get(
        f"{stack.api}/v1/packages/private-skill",
        headers={"Authorization": f"Bearer {cli.token(tenant='t-someone-else')}"},
        timeout=10,
    )

    # Then it does not exist for them
    assert other.status_code == 404


# ------------------------------------------------------------------ OpenAPI and Swagger UI


def test_openapi_document_and_swagger_ui_are_served(stack: Stack) -> None:
    document = requests.get(f"{stack.api}/openapi.json", timeout=30)
    page = requests.get(f"{stack.api}/docs", timeout=10)
    bundle = requests.get(f"{stack.api}/docs/swagger-ui-bundle.min.js", timeout=10)

    assert document.status_code == 200
    served = document.json()
    committed = json.loads(COMMITTED.read_text("utf-8"))
    assert served["paths"] == committed["paths"]
    assert served["servers"] == [{"url": stack.api}]
    assert page.status_code == 200
    assert page.headers["Content-Type"].startswith("text/html")
    assert "SwaggerUIBundle" in page.text and "/docs/swagger-ui-bundle.min.js" in page.text
    assert bundle.status_code == 200 and len(bundle.content) > 100_000


# ------------------------------------------------------------------ ports and stopping


def test_a_port_in_use_is_one_clear_line_and_exit_code_2(tmp_path: Path) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        port = busy.getsockname()[1]

        done = subprocess.run(
            [sys.executable, "-m", "packyard_cli", "local", "--api-port", str(port), "--aws-port", "0"],
            cwd=ROOT,
            env=base_env(tmp_path),
            capture_output=True,
            text=True,
            timeout=30,
        )

    assert done.returncode == 2
    assert done.stdout == ""
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert f"port {port}" in lines[0] and "already in use" in lines[0] and "--api-port" in lines[0]
    assert "Traceback" not in done.stderr


def test_the_stack_stops_cleanly_on_sigterm(tmp_path: Path) -> None:
    # Given a second local stack
    other = start_stack(tmp_path / "state", tmp_path / "local.log")
    api_port = int(other.api.rsplit(":", 1)[1])

    # When it is sent SIGTERM
    code = stop_stack(other, signal.SIGTERM)

    # Then it exits 0, says so, forgets its address and frees its ports
    assert code == 0, other.log_text()
    assert "stopped" in other.log_text()
    assert "Traceback" not in other.log_text()
    assert not (other.state_dir / "local.json").exists()
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", api_port))


def _alive(pid: int) -> bool:
    status = Path(f"/proc/{pid}/status")
    return status.exists() and "State:\tZ" not in status.read_text()


def test_the_api_process_serves_the_api_and_goes_when_the_stack_is_killed(tmp_path: Path) -> None:
    # Given a second local stack (two processes by default: the stack's state, and the HTTP API)
    other = start_stack(tmp_path / "state", tmp_path / "local.log")
    state = json.loads((other.state_dir / "local.json").read_text())
    api_pid = state["apiPid"]
    assert api_pid != other.process.pid and _alive(api_pid)
    cli = Cli(other, "t-api-process")
    assert requests.get(f"{other.api}/v1/packages", headers={"Authorization": f"Bearer {cli.token()}"}).ok

    # When the stack's process is killed outright (nothing of its own stop runs)
    other.process.send_signal(signal.SIGKILL)
    other.process.wait(10)

    # Then the API process notices (its stdin ends) and exits too: nothing is left holding the API's port
    deadline = time.monotonic() + 15
    while _alive(api_pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(api_pid), other.log_text()
    with pytest.raises(requests.ConnectionError):  # nothing listens on the API's port any more
        requests.get(f"{other.api}/v1/packages", timeout=5)


def test_single_process_serves_the_api_from_the_stacks_own_process(tmp_path: Path) -> None:
    other = start_stack(tmp_path / "state", tmp_path / "local.log", "--single-process")
    try:
        state = json.loads((other.state_dir / "local.json").read_text())
        assert state["apiPid"] == other.process.pid
        cli = Cli(other, "t-single-process")
        assert requests.get(f"{other.api}/v1/packages", headers={"Authorization": f"Bearer {cli.token()}"}).ok
    finally:
        assert stop_stack(other) == 0, other.log_text()


def test_the_stack_stops_and_says_why_when_its_api_process_dies(tmp_path: Path) -> None:
    # Given a second local stack
    other = start_stack(tmp_path / "state", tmp_path / "local.log")
    api_pid = json.loads((other.state_dir / "local.json").read_text())["apiPid"]

    # When its API process dies (nothing answers on the API's port any more)
    subprocess.run(["kill", "-9", str(api_pid)], check=True)

    # Then the stack does not run on half alive: it stops, exits 1 and says why
    assert other.process.wait(30) == 1
    assert "the API process exited" in other.log_text()
    assert not (other.state_dir / "local.json").exists()
