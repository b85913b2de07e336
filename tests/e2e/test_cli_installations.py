"""Installation operations through the CLI and over HTTP against the local stack (the routes they need are
template.yaml's: a route that goes missing fails here, it is never skipped)."""

from __future__ import annotations

import re
import threading
import uuid
from typing import Any

import pytest
import requests

from devstack.api import template_routes
from tests.e2e.helpers import Cli, Stack, write_skill

REQUIRED_ROUTES = {
    ("PUT", "/v1/workspaces/{}/installations/{}"),
    ("DELETE", "/v1/workspaces/{}/installations/{}"),
    ("POST", "/v1/workspaces/{}/installations/{}/rollback"),
    ("POST", "/v1/workspaces/{}/installations/{}/preview"),
    ("GET", "/v1/workspaces/{}/installations"),
    ("GET", "/v1/workspaces/{}/installations/{}"),
    ("GET", "/v1/workspaces/{}/operations/{}"),
    ("GET", "/v1/workspaces/{}/resolved"),
}


def _served_routes() -> set[tuple[str, str]]:
    return {(r.method, re.sub(r"\{[^}]+\}", "{}", r.path)) for r in template_routes()}


pytestmark = pytest.mark.xdist_group("e2e")


def test_template_yaml_serves_the_installation_routes() -> None:
    assert _served_routes() >= REQUIRED_ROUTES, sorted(REQUIRED_ROUTES - _served_routes())


@pytest.fixture(scope="module")
def cli(stack: Stack) -> Cli:
    """One tenant for the module (its releases are published once); every test uses its own workspace."""
    return Cli(stack, f"t-{uuid.uuid4().hex[:10]}")


@pytest.fixture(scope="module")
def http(cli: Cli) -> requests.Session:
    session = requests.Session()
    session.headers["Authorization"] = f"Bearer {cli.token()}"
    return session


@pytest.fixture(scope="module")
def releases(cli: Cli, tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    """weather-skill 1.0.0 and 1.1.0, published through the CLI."""
    folder = write_skill(tmp_path_factory.mktemp("skills") / "weather-skill")
    found = {}
    for version, marker in (("1.0.0", "v1"), ("1.1.0", "v2")):
        write_skill(folder, marker)
        published = cli("--json", "publish", str(folder), "-p", "weather-skill", "--version", version)
        assert published.code == 0, published.output
        found[version] = published.json()
    return found


@pytest.fixture
def ws() -> str:
    return f"ws-{uuid.uuid4().hex[:8]}"


def test_install_update_rollback_uninstall(cli: Cli, releases: dict[str, dict[str, Any]], ws: str) -> None:
    # Given a fresh workspace (ws)
    # When a release is installed and then updated
    installed = cli("install", "weather-skill@1.0.0", "--workspace", ws)
    updated = cli("update", "weather-skill@1.1.0", "--workspace", ws)
    listed = cli("--json", "ls", ws).json()["items"]
    resolved = cli("--json", "resolved", ws).json()["items"]

    # Then each settled as succeeded, and the workspace resolves to the verified digests of 1.1.0
    assert installed.code == 0, installed.output
    assert "succeeded" in installed.stdout
    assert updated.code == 0, updated.output
    assert [(i["installationId"], i["release"]["version"], i["status"], i["version"]) for i in listed] == [
        ("weather-skill", "1.1.0", "active", 2)
    ]
    assert [(r["installationId"], r["release"], r["manifestDigest"]) for r in resolved] == [
        ("weather-skill", "1.1.0", releases["1.1.0"]["manifestDigest"])
    ]
    download = requests.get(resolved[0]["archive"]["url"], timeout=30)
    assert download.status_code == 200
    assert len(download.content) == releases["1.1.0"]["archive"]["size"]

    # When it is rolled back, then uninstalled
    rolled_back = cli("--json", "rollback", "weather-skill", "--workspace", ws)
    after_rollback = cli("--json", "ls", ws).json()["items"]
    uninstalled = cli("uninstall", "weather-skill", "--workspace", ws)
    status = cli("--json", "status", rolled_back.json()["operationId"], "--workspace", ws)
    nothing_resolved = cli("--json", "resolved", ws).json()["items"]

    # Then rollback went back to 1.0.0 at version 3, and nothing is resolved any more
    assert rolled_back.code == 0, rolled_back.output
    assert rolled_back.json()["state"] == "settled"
    assert rolled_back.json()["outcome"]["result"] == "succeeded"
    assert [(i["release"]["version"], i["version"]) for i in after_rollback] == [("1.0.0", 3)]
    assert uninstalled.code == 0, uninstalled.output
    assert status.json()["kind"] == "rollback"
    assert nothing_resolved == []


def test_a_replay_with_the_same_key_returns_the_same_operation(cli: Cli, releases: dict[str, Any], ws: str) -> None:
    assert cli("install", "weather-skill@1.0.0", "-w", ws).code == 0
    key = f"update-{uuid.uuid4().hex}"

    first = cli("--json", "update", "weather-skill@1.1.0", "-w", ws, "--idempotency-key", key, "--if-match", "1")
    replay = cli("--json", "update", "weather-skill@1.1.0", "-w", ws, "--idempotency-key", key, "--if-match", "1")
    other = cli("--json", "update", "weather-skill@1.0.0", "-w", ws, "--idempotency-key", key, "--if-match", "1")
    versions = [i["version"] for i in cli("--json", "ls", ws).json()["items"]]

    assert first.code == replay.code == 0, first.output + replay.output
    assert replay.json()["operationId"] == first.json()["operationId"]
    assert replay.json()["outcome"]["result"] == "succeeded"
    assert versions == [2]  # applied once
    assert other.code == 3  # refused: idempotency_key_reused
    assert other.json()["code"] == "idempotency_key_reused"


def test_stale_or_missing_if_match(
    stack: Stack, cli: Cli, http: requests.Session, releases: dict[str, Any], ws: str
) -> None:
    assert cli("install", "weather-skill@1.0.0", "-w", ws).code == 0
    assert cli("update", "weather-skill@1.1.0", "-w", ws).code == 0
    url = f"{stack.api}/v1/workspaces/{ws}/installations/weather-skill"
    body = {"package": "weather-skill", "version": "1.0.0"}

    stale = cli("update", "weather-skill@1.0.0", "-w", ws, "--if-match", "1")
    missing = http.put(url, json=body, headers={"Idempotency-Key": uuid.uuid4().hex})
    no_key = http.put(url, json=body, headers={"If-Match": '"2"'})
    current = http.get(url)

    assert stale.code == 4, stale.output
    assert "version_conflict" in stale.stderr and "Version conflict" in stale.stderr
    assert (missing.status_code, missing.json()["code"]) == (428, "version_required")
    assert (no_key.status_code, no_key.json()["code"]) == (400, "idempotency_key_required")
    assert current.headers["ETag"] == '"2"'


def test_a_second_request_while_one_is_in_flight_is_409(
    stack: Stack, http: requests.Session, releases: dict[str, Any], cli: Cli, ws: str
) -> None:
    assert cli("install", "weather-skill@1.0.0", "-w", ws).code == 0
    url = f"{stack.api}/v1/workspaces/{ws}/installations/weather-skill"
    start = threading.Barrier(2)
    answers: list[requests.Response] = []

    def update(config: dict[str, Any]) -> None:
        start.wait()
        body = {"package": "weather-skill", "version": "1.1.0", "config": config}
        answers.append(http.put(url, json=body, headers={"Idempotency-Key": uuid.uuid4().hex, "If-Match": '"1"'}))

    threads = [threading.Thread(target=update, args=({"n": n},)) for n in (1, 2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)

    outcomes = sorted((a.status_code, (a.json() or {}).get("code")) for a in answers)
    assert outcomes[0][0] == 202
    assert outcomes[1] in ((409, "operation_in_progress"), (412, "version_conflict"))


def test_preview_shows_the_plan_without_changing_anything(cli: Cli, releases: dict[str, Any], ws: str) -> None:

    preview = cli("--json", "preview", "weather-skill@1.0.0", "-w", ws)
    listed = cli("--json", "ls", ws).json()["items"]

    assert preview.code == 0, preview.output
    assert re.fullmatch(r"[0-9a-f]{64}", preview.json()["planDigest"])
    assert preview.json()["plan"]["release"]["version"] == "1.0.0"
    assert listed == []
