"""Examples of the main request and response bodies in the OpenAPI document (one publish-and-install journey:
a skill asking for a network permission, published, installed, approved). They are bodies the local stack answered,
ids and digests included; tests/unit/test_openapi_contract.py checks each against its schema. Each is an OpenAPI
Example Object map for a route decorator (``Body(openapi_examples=...)``, ``contract(..., examples=...)``)."""

from __future__ import annotations

from typing import Any

PUBLISH_EXECUTION = (
    "arn:aws:states:us-east-1:123456789012:execution:packyard-PublishStateMachine:bd4f0c285d1f425187e7f1612980fea3"
)


def example(name: str, summary: str, value: dict[str, Any]) -> dict[str, Any]:
    """One named example: ``{name: {"summary", "value"}}``."""
    return {name: {"summary": summary, "value": value}}


CREATE_UPLOAD_REQUEST = example(
    "weather-skill",
    "A two-file skill that asks for one network permission",
    {
        "manifest": {
            "protocolVersion": 1,
            "files": [
                {
                    "path": "SKILL.md",
                    "size": 10,
                    "sha256": "63c8f8d1a79da3d851f6937bcc605c3709728747b6e3e4a15c9baad9a7defefa",
                },
                {
                    "path": "src/main.py",
                    "size": 15,
                    "sha256": "df66e14e54ec4a553b050d0b5eb132592efb0839c9cc86c3aa76fbe5faed6463",
                },
            ],
            "permissions": [{"kind": "network", "resource": "api.weather.example", "reason": "fetch forecasts"}],
            "metadata": {},
        },
        "archive": {"size": 165, "sha256": "b1386cac28c866e7aa8d4e90cd56d7a362fcb57bb297784bfb5feadae60acf05"},
    },
)

UPLOAD_CREATED = example(
    "created",
    "A new session: PUT the archive to upload.url",
    {
        "uploadId": "bd4f0c285d1f425187e7f1612980fea3",
        "package": "weather-skill",
        "version": "1.0.0",
        "state": "awaiting_upload",
        "uploadRequired": True,
        "archive": {"size": 165, "sha256": "b1386cac28c866e7aa8d4e90cd56d7a362fcb57bb297784bfb5feadae60acf05"},
        "manifestDigest": "51426eede305d225599fbb847782663d0588cbbeb127cca3e1288744e72407bb",
        "contentDigest": "97076b34adbe2ea2610a75bf407d49ad4c72913a2aed5a7eae9d3b6398a85ab8",
        "expiresAt": "2026-12-02T00:55:25Z",
        "upload": {
            "method": "PUT",
            "url": "https://packyard-bucket.s3.amazonaws.com/uploads/t-acme/bd4f0c285d1f425187e7f1612980fea3/archive.tar.gz?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Expires=600&X-Amz-Signature=...",
            "headers": {},
        },
        "links": {
            "self": "/v1/uploads/bd4f0c285d1f425187e7f1612980fea3",
            "complete": "/v1/uploads/bd4f0c285d1f425187e7f1612980fea3/complete",
        },
    },
)

UPLOAD_VERIFYING = example(
    "verifying",
    "Verification started",
    {
        "uploadId": "bd4f0c285d1f425187e7f1612980fea3",
        "package": "weather-skill",
        "version": "1.0.0",
        "state": "verifying",
        "uploadRequired": True,
        "archive": {"size": 165, "sha256": "b1386cac28c866e7aa8d4e90cd56d7a362fcb57bb297784bfb5feadae60acf05"},
        "manifestDigest": "51426eede305d225599fbb847782663d0588cbbeb127cca3e1288744e72407bb",
        "contentDigest": "97076b34adbe2ea2610a75bf407d49ad4c72913a2aed5a7eae9d3b6398a85ab8",
        "expiresAt": "2026-12-02T00:55:25Z",
        "executionArn": PUBLISH_EXECUTION,
    },
)

UPLOAD_PUBLISHED = example(
    "published",
    "Verified and published",
    {
        "uploadId": "bd4f0c285d1f425187e7f1612980fea3",
        "package": "weather-skill",
        "version": "1.0.0",
        "state": "published",
        "uploadRequired": True,
        "archive": {"size": 165, "sha256": "b1386cac28c866e7aa8d4e90cd56d7a362fcb57bb297784bfb5feadae60acf05"},
        "manifestDigest": "51426eede305d225599fbb847782663d0588cbbeb127cca3e1288744e72407bb",
        "contentDigest": "97076b34adbe2ea2610a75bf407d49ad4c72913a2aed5a7eae9d3b6398a85ab8",
        "expiresAt": "2026-12-02T00:55:25Z",
        "executionArn": PUBLISH_EXECUTION,
        "release": "/v1/packages/weather-skill/versions/1.0.0",
    },
)

PUT_INSTALLATION_REQUEST = example(
    "workspace-install",
    "Install a release for the whole workspace",
    {"package": "weather-skill", "version": "1.0.0", "scope": {"kind": "workspace"}},
)

OPERATION_ADMITTED = example(
    "admitted",
    "Admitted: poll links.self",
    {
        "operationId": "op-4989e800720603e62bcf543cdf3bda17",
        "workspace": "ws-1",
        "installationId": "weather",
        "kind": "install",
        "state": "admitted",
        "intent": "install-or-select",
        "origin": "owner",
        "attempt": 0,
        "createdAt": "2026-12-02T00:45:26Z",
        "updatedAt": "2026-12-02T00:45:26Z",
        "release": {"package": "weather-skill", "version": "1.0.0"},
        "requestedBy": "alice",
        "links": {"self": "/v1/workspaces/ws-1/operations/op-4989e800720603e62bcf543cdf3bda17"},
    },
)

OPERATION_AWAITING_CONSENT = example(
    "awaiting-consent",
    "Waiting for an owner to approve the network permission",
    {
        "operationId": "op-4989e800720603e62bcf543cdf3bda17",
        "workspace": "ws-1",
        "installationId": "weather",
        "kind": "install",
        "state": "awaiting_consent",
        "intent": "install-or-select",
        "origin": "owner",
        "attempt": 0,
        "createdAt": "2026-12-02T00:45:26Z",
        "updatedAt": "2026-12-02T00:45:26Z",
        "release": {"package": "weather-skill", "version": "1.0.0"},
        "installationVersion": 1,
        "requestedBy": "alice",
        "consent": {
            "permissions": [{"kind": "network", "resource": "api.weather.example"}],
            "planDigest": "0d31780a00e2660d4f3a40d42b632abd87700c4acf33132b930da72d0bc383ee",
            "requestedAt": "2026-12-02T00:45:26Z",
            "deadline": "2026-12-09T00:45:26Z",
        },
        "links": {"self": "/v1/workspaces/ws-1/operations/op-4989e800720603e62bcf543cdf3bda17"},
    },
)

OPERATION_SUCCEEDED = example(
    "succeeded",
    "Settled: succeeded after approval",
    {
        "operationId": "op-4989e800720603e62bcf543cdf3bda17",
        "workspace": "ws-1",
        "installationId": "weather",
        "kind": "install",
        "state": "settled",
        "intent": "install-or-select",
        "origin": "owner",
        "attempt": 0,
        "createdAt": "2026-12-02T00:45:26Z",
        "updatedAt": "2026-12-02T00:45:27Z",
        "release": {"package": "weather-skill", "version": "1.0.0"},
        "installationVersion": 1,
        "outcome": {"result": "succeeded"},
        "settledAt": "2026-12-02T00:45:27Z",
        "requestedBy": "alice",
        "consent": {
            "permissions": [{"kind": "network", "resource": "api.weather.example"}],
            "planDigest": "0d31780a00e2660d4f3a40d42b632abd87700c4acf33132b930da72d0bc383ee",
            "requestedAt": "2026-12-02T00:45:26Z",
            "deadline": "2026-12-09T00:45:26Z",
            "decision": "approve",
            "decidedBy": "alice",
            "decidedAt": "2026-12-02T00:45:27Z",
        },
        "links": {"self": "/v1/workspaces/ws-1/operations/op-4989e800720603e62bcf543cdf3bda17"},
    },
)

APPROVALS_WAITING = example(
    "one-waiting",
    "One install waiting for consent",
    {
        "items": [
            {
                "operationId": "op-4989e800720603e62bcf543cdf3bda17",
                "installationId": "weather",
                "package": "weather-skill",
                "version": "1.0.0",
                "status": "pending_permission",
                "permissions": [{"kind": "network", "resource": "api.weather.example"}],
                "planDigest": "0d31780a00e2660d4f3a40d42b632abd87700c4acf33132b930da72d0bc383ee",
                "requestedBy": "alice",
                "since": "2026-12-02T00:45:26Z",
                "deadline": "2026-12-09T00:45:26Z",
            }
        ],
        "nextCursor": None,
    },
)

DECIDE_APPROVAL_REQUEST = example(
    "approve",
    "Approve the exact plan the operation waits with",
    {
        "decision": "approve",
        "planDigest": "0d31780a00e2660d4f3a40d42b632abd87700c4acf33132b930da72d0bc383ee",
        "operationId": "op-4989e800720603e62bcf543cdf3bda17",
    },
)

APPROVAL_RECORDED = example(
    "approved",
    "Approved: the operation commits",
    {
        "approvalId": "ap-bf292e92df64a548bd5c930cecba3858",
        "operationId": "op-4989e800720603e62bcf543cdf3bda17",
        "installationId": "weather",
        "decision": "approve",
        "planDigest": "0d31780a00e2660d4f3a40d42b632abd87700c4acf33132b930da72d0bc383ee",
        "decidedBy": "alice",
        "decidedAt": "2026-12-02T00:45:27Z",
        "links": {"operation": "/v1/workspaces/ws-1/operations/op-4989e800720603e62bcf543cdf3bda17"},
    },
)

INSTALLATION_ACTIVE = example(
    "active",
    "Installed, with the granted permission",
    {
        "workspace": "ws-1",
        "installationId": "weather",
        "instanceId": "inst-b4e271c9185859ba8dfbea3e",
        "version": 1,
        "status": "active",
        "creation": "fresh",
        "package": "weather-skill",
        "release": {
            "package": "weather-skill",
            "version": "1.0.0",
            "manifestDigest": "51426eede305d225599fbb847782663d0588cbbeb127cca3e1288744e72407bb",
            "archiveSha256": "b1386cac28c866e7aa8d4e90cd56d7a362fcb57bb297784bfb5feadae60acf05",
            "archiveSize": 165,
        },
        "previous": None,
        "scope": {"kind": "workspace", "id": None},
        "grants": [{"kind": "network", "resource": "api.weather.example", "origin": "owner", "ceiling": "workspace"}],
        "grantGeneration": 1,
        "config": {},
        "lastOperationId": "op-4989e800720603e62bcf543cdf3bda17",
        "updatedAt": "2026-12-02T00:45:26Z",
        "etag": '"1"',
    },
)

VERSION_EXISTS = example(
    "version-exists",
    "The version is already published with other content",
    {
        "type": "https://packyard.dev/problems/version_exists",
        "title": "Version already published with different content",
        "status": 409,
        "code": "version_exists",
        "detail": "weather-skill@1.0.0 is already published with different content",
        "existingManifestDigest": "2715db5841206e5a6481a8c88756b4ef625af7b0ef757300ee217b16c9de40f5",
    },
)

APPROVE_FORBIDDEN = example(
    "forbidden",
    "The token lacks the scope this route needs",
    {
        "type": "https://packyard.dev/problems/forbidden",
        "title": "Forbidden",
        "status": 403,
        "code": "forbidden",
        "detail": "this route needs the scope 'approvals:write'",
        "requiredScope": "approvals:write",
    },
)
