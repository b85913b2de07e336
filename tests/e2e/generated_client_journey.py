"""A publish-and-install journey through the client openapi-python-client generated from docs/openapi.json.

Run by tests/e2e/test_generated_client.py with the generator's own virtualenv (.venv-openapi-client: the generated
client's httpx, attrs and python-dateutil are there, not in .venv), as

    python generated_client_journey.py GENERATED_DIR PACKAGE_NAME API_URL TOKEN JOURNEY_JSON

where JOURNEY_JSON holds ``{"package", "version", "workspace", "installation", "uploadRequest", "archive"
(path of the archive file)}``. Only the generated modules speak to the API (their functions are named after the
operationIds: create_upload, complete_upload, put_installation, decide_approval, ...); the archive is PUT to the
presigned URL the API answered with plain httpx, as any client does. It prints one JSON object: what each step
answered, for the test to assert on.
"""

from __future__ import annotations

import importlib
import json
import sys
import time
from pathlib import Path
from typing import Any

import httpx

DEADLINE_SECONDS = 60.0
POLL_SECONDS = 0.1


def main(generated_dir: str, package_name: str, api: str, token: str, journey_file: str) -> dict[str, Any]:
    sys.path.insert(0, generated_dir)
    client_module = importlib.import_module(package_name)
    models = importlib.import_module(f"{package_name}.models")
    publish = {name: importlib.import_module(f"{package_name}.api.publish.{name}") for name in _PUBLISH}
    installations = {
        name: importlib.import_module(f"{package_name}.api.installations.{name}") for name in _INSTALLATIONS
    }
    approvals = {name: importlib.import_module(f"{package_name}.api.approvals.{name}") for name in _APPROVALS}
    journey = json.loads(Path(journey_file).read_text("utf-8"))
    seen: dict[str, Any] = {}

    with client_module.AuthenticatedClient(base_url=api, token=token, raise_on_unexpected_status=True) as client:
        # publish: open a session, PUT the archive to the presigned URL, complete, follow the session
        created = publish["create_upload"].sync_detailed(
            journey["package"],
            journey["version"],
            client=client,
            body=models.CreateUploadRequest.from_dict(journey["uploadRequest"]),
            idempotency_key=f"journey-{journey['version']}",
        )
        session = created.parsed
        seen["createUpload"] = {"status": int(created.status_code), "type": type(session).__name__}
        put = httpx.put(session.upload.url, content=Path(journey["archive"]).read_bytes(), timeout=30)
        seen["archivePut"] = put.status_code
        completed = publish["complete_upload"].sync_detailed(session.upload_id, client=client)
        seen["completeUpload"] = {"status": int(completed.status_code), "state": str(completed.parsed.state)}
        upload = _until(
            lambda: publish["get_upload"].sync(session.upload_id, client=client),
            lambda found: str(found.state) != "verifying",
        )
        seen["getUpload"] = {"state": str(upload.state), "release": upload.release}

        # install: admitted, waits for consent to the permission the release asks, approved, settles
        admitted = installations["put_installation"].sync_detailed(
            journey["workspace"],
            journey["installation"],
            client=client,
            body=models.InstallRequest.from_dict(
                {"package": journey["package"], "version": journey["version"], "scope": {"kind": "workspace"}}
            ),
            idempotency_key=f"journey-install-{journey['installation']}",
        )
        operation = admitted.parsed
        seen["putInstallation"] = {
            "status": int(admitted.status_code),
            "state": str(operation.state),
            "location": admitted.headers.get("location"),
        }
        waiting = _until(
            lambda: installations["get_operation"].sync(journey["workspace"], operation.operation_id, client=client),
            lambda found: str(found.state) in ("awaiting_consent", "settled"),
        )
        seen["awaitingConsent"] = {"state": str(waiting.state)}
        asked = approvals["list_approvals"].sync(journey["workspace"], client=client)
        seen["listApprovals"] = [
            {"operationId": item.operation_id, "permissions": [p.to_dict() for p in item.permissions]}
            for item in asked.items
        ]
        decided = approvals["decide_approval"].sync(
            journey["workspace"],
            journey["installation"],
            client=client,
            body=models.DecisionRequest.from_dict(
                {
                    "decision": "approve",
                    "planDigest": waiting.consent.plan_digest,
                    "operationId": waiting.operation_id,
                }
            ),
            idempotency_key=f"journey-approve-{journey['installation']}",
        )
        seen["decideApproval"] = {"decision": str(decided.decision), "decidedBy": decided.decided_by}
        settled = _until(
            lambda: installations["get_operation"].sync(journey["workspace"], operation.operation_id, client=client),
            lambda found: str(found.state) == "settled",
        )
        seen["settled"] = settled.outcome.to_dict()
        installed = installations["get_installation"].sync_detailed(
            journey["workspace"], journey["installation"], client=client
        )
        view = installed.parsed
        seen["getInstallation"] = {
            "status": str(view.status),
            "release": view.release.to_dict(),
            "grants": [grant.to_dict() for grant in view.grants],
            "etag": installed.headers.get("etag"),
        }
    return seen


_PUBLISH = ("create_upload", "complete_upload", "get_upload")
_INSTALLATIONS = ("put_installation", "get_operation", "get_installation")
_APPROVALS = ("list_approvals", "decide_approval")


def _until(read: Any, done: Any) -> Any:
    """Poll as any client of an asynchronous API does, up to a deadline."""
    deadline = time.monotonic() + DEADLINE_SECONDS
    found = read()
    while not done(found):
        if time.monotonic() >= deadline:
            raise TimeoutError(f"still {found!r} after {DEADLINE_SECONDS} s")
        time.sleep(POLL_SECONDS)
        found = read()
    return found


if __name__ == "__main__":
    print(json.dumps(main(*sys.argv[1:6])))
