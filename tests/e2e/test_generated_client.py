"""The contract is usable by a generated client, not only valid (issue 24, item 3): openapi-python-client (in its own
virtualenv, .venv-openapi-client, made by ``make test`` from tools/openapi-python-client/requirements.lock) generates
a Python client from docs/openapi.json, and that client alone drives a publish-and-install journey against the local
stack (tests/e2e/generated_client_journey.py): create and complete an upload, follow it to published, install,
approve the permission the release asks, and read the installation. A missing generator fails, it never skips."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path
from urllib.parse import urljoin

import pytest
import requests

from devstack.openapi import COMMITTED
from packyard_cli.build import build_from_files
from tests.e2e.helpers import ROOT, Cli, Stack

pytestmark = pytest.mark.xdist_group("e2e")

CLIENT_VENV = ROOT / ".venv-openapi-client"
GENERATOR = CLIENT_VENV / "bin" / "openapi-python-client"
JOURNEY = Path(__file__).with_name("generated_client_journey.py")
PACKAGE = "packyard_client"
METHODS = {"get", "put", "post", "delete", "patch"}


def _tool_env() -> dict[str, str]:
    # the generator formats what it writes with the ruff of its own virtualenv
    return {**os.environ, "PATH": f"{CLIENT_VENV / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}"}


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if not GENERATOR.exists():
        pytest.fail(f"{GENERATOR} is missing: run `make {CLIENT_VENV.name}/.installed` (make test does)")
    output = tmp_path_factory.mktemp("generated") / PACKAGE
    done = subprocess.run(
        [str(GENERATOR), "generate", "--path", str(COMMITTED), "--output-path", str(output), "--meta", "none"],
        capture_output=True,
        text=True,
        env=_tool_env(),
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    # the generator warns (and leaves pieces out) for a schema it cannot read: none here
    assert "Warning" not in done.stdout + done.stderr, done.stdout + done.stderr
    return output


def _snake(operation_id: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", operation_id).lower()


def test_the_generated_clients_functions_are_the_operation_ids_by_tag(generated: Path) -> None:
    # Given the document's operations, each with its operationId and its tag
    document = json.loads(COMMITTED.read_text("utf-8"))
    expected = {
        f"{operation['tags'][0]}/{_snake(operation['operationId'])}"
        for item in document["paths"].values()
        for method, operation in item.items()
        if method in METHODS
    }

    # When the generated modules are listed
    modules = {f"{path.parent.name}/{path.stem}" for path in (generated / "api").glob("*/*.py")}

    # Then there is one module per operation, named in the domain's words under its tag (api/publish/create_upload,
    # api/approvals/decide_approval), not after the route (decide_v1_workspaces_..._post)
    assert modules - {f"{path.parent.name}/__init__" for path in (generated / "api").glob("*/__init__.py")} == expected
    assert {"publish/create_upload", "installations/put_installation", "approvals/decide_approval"} <= expected


def test_a_publish_and_install_journey_through_the_generated_client(
    stack: Stack, cli: Cli, generated: Path, tmp_path: Path
) -> None:
    # Given a release that asks for one network permission, and an owner's token with every scope
    built = build_from_files(
        {"SKILL.md": b"# weather\n", "src/main.py": b"print('sunny')\n"},
        permissions=[{"kind": "network", "resource": "api.weather.example", "reason": "fetch forecasts"}],
    )
    archive = tmp_path / "archive.tar.gz"
    archive.write_bytes(built.archive)
    journey = tmp_path / "journey.json"
    journey.write_text(
        json.dumps(
            {
                "package": "weather-skill",
                "version": "1.0.0",
                "workspace": "ws-generated",
                "installation": "weather",
                "uploadRequest": built.upload_request(),
                "archive": str(archive),
            }
        )
    )

    # When the generated client runs the journey against the local stack
    arguments = [str(generated.parent), PACKAGE, stack.api, cli.token(), str(journey)]
    done = subprocess.run(
        [str(CLIENT_VENV / "bin" / "python"), str(JOURNEY), *arguments],
        capture_output=True,
        text=True,
        env=_tool_env(),
        timeout=180,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    seen = json.loads(done.stdout)

    # Then every step answered as the document says, parsed into the generated models
    assert seen["createUpload"] == {"status": 201, "type": "CreatedUploadView"}
    assert seen["archivePut"] == 200
    assert seen["completeUpload"] == {"status": 202, "state": "verifying"}
    assert seen["getUpload"] == {"state": "published", "release": "/v1/packages/weather-skill/versions/1.0.0"}
    assert seen["putInstallation"]["status"] == 202
    assert seen["putInstallation"]["location"].startswith("/v1/workspaces/ws-generated/operations/op-")
    assert seen["awaitingConsent"] == {"state": "awaiting_consent"}
    assert [item["permissions"] for item in seen["listApprovals"]] == [
        [{"kind": "network", "resource": "api.weather.example"}]
    ]
    assert seen["decideApproval"] == {"decision": "approve", "decidedBy": "e2e"}
    assert seen["settled"] == {"result": "succeeded"}
    installed = seen["getInstallation"]
    assert installed["status"] == "active"
    assert (installed["release"]["package"], installed["release"]["version"]) == ("weather-skill", "1.0.0")
    assert installed["release"]["archiveSha256"] == built.archive_sha256
    assert [(grant["kind"], grant["resource"]) for grant in installed["grants"]] == [("network", "api.weather.example")]
    assert installed["etag"] == '"1"'


def test_the_documented_oauth2_flows_are_the_local_issuers_endpoints(stack: Stack) -> None:
    # Given the document the local stack serves (its server URL is the stack's) and its issuer's discovery document
    served = requests.get(f"{stack.api}/openapi.json", timeout=30).json()
    flows = served["components"]["securitySchemes"]["oauth2"]["flows"]
    base = served["servers"][0]["url"].rstrip("/") + "/"
    discovery = requests.get(f"{stack.api}/oidc/.well-known/openid-configuration", timeout=30).json()

    # When the flows' relative URLs are resolved against the server, as OpenAPI 3.1 resolves them
    authorize = urljoin(base, flows["authorizationCode"]["authorizationUrl"].lstrip("/"))
    token = urljoin(base, flows["authorizationCode"]["tokenUrl"].lstrip("/"))

    # Then they are the endpoints the issuer announces, for both grants the document names
    assert authorize == discovery["authorization_endpoint"]
    assert token == discovery["token_endpoint"] == urljoin(base, flows["clientCredentials"]["tokenUrl"].lstrip("/"))
    assert {"authorization_code", "client_credentials", "refresh_token"} <= set(discovery["grant_types_supported"])
    assert "S256" in discovery["code_challenge_methods_supported"]
