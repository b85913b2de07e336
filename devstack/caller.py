"""A caller of the in-process API with a fixed identity, and the publish journey step by step (tests, demo)."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import devstack
from devstack.api import ApiResponse, LocalApi
from packyard.authority import Permission
from packyard_cli.build import BuiltPackage

ALL_SCOPES = tuple(permission.value for permission in Permission)


@dataclass
class Caller:
    """An owner holding every scope unless told otherwise."""

    api: LocalApi
    tenant: str
    subject: str = "user-1"
    scopes: tuple[str, ...] = ALL_SCOPES
    actor: str = "owner"

    @property
    def claims(self) -> dict[str, Any]:
        return {"tenant": self.tenant, "sub": self.subject, "scope": " ".join(self.scopes), "actor": self.actor}

    def get(self, path: str, **kwargs: Any) -> ApiResponse:
        return self.api.request("GET", path, claims=self.claims, **kwargs)

    def post(self, path: str, body: Any = None, **kwargs: Any) -> ApiResponse:
        return self.api.request("POST", path, claims=self.claims, body=body, **kwargs)

    def put(self, path: str, body: Any = None, **kwargs: Any) -> ApiResponse:
        return self.api.request("PUT", path, claims=self.claims, body=body, **kwargs)

    def delete(self, path: str, **kwargs: Any) -> ApiResponse:
        return self.api.request("DELETE", path, claims=self.claims, **kwargs)

    # ---- the publish journey, step by step ----

    def request_upload(self, package: str, version: str, built: BuiltPackage) -> ApiResponse:
        return self.post(f"/v1/packages/{package}/versions/{version}/uploads", built.upload_request())

    def put_archive(self, session: dict[str, Any], data: bytes) -> None:
        """PUT to the presigned URL with a plain HTTP client (moto intercepts it in-process)."""
        import requests

        response = requests.put(session["upload"]["url"], data=data, timeout=30)
        assert response.status_code == 200, response.text

    def complete_and_wait(self, upload_id: str) -> dict[str, Any]:
        done = self.post(f"/v1/uploads/{upload_id}/complete")
        assert done.status in (200, 202), done.body
        if done.status == 202:
            devstack.wait_for_execution(done.body["executionArn"], timeout=60)
        final = self.get(f"/v1/uploads/{upload_id}")
        assert final.status == 200, final.body
        body: dict[str, Any] = final.body
        return body

    def publish(self, package: str, version: str, built: BuiltPackage, archive: bytes | None = None) -> dict[str, Any]:
        session = self.request_upload(package, version, built)
        assert session.status in (200, 201), session.body
        if session.status == 200:
            existing: dict[str, Any] = session.body
            return existing
        if session.body["uploadRequired"]:
            self.put_archive(session.body, built.archive if archive is None else archive)
        return self.complete_and_wait(session.body["uploadId"])

    # ---- installation operations ----

    def installation_path(self, workspace: str, installation: str) -> str:
        return f"/v1/workspaces/{workspace}/installations/{installation}"

    def wait_settled(
        self, workspace: str, admitted: ApiResponse, timeout: float = 60, *, approve: bool = True
    ) -> dict[str, Any]:
        """Wait for the operation's executions to finish, then read the operation. With ``approve`` (an owner
        holding the approve scope, as the default caller does), a wait for consent on the way is approved for the
        exact plan it asks (the decision starts the next execution); without, waiting for consent counts as done."""
        assert admitted.status in (200, 202), admitted.body
        op = admitted.body
        deadline = time.monotonic() + timeout
        while op["state"] != "settled":
            if op["state"] == "awaiting_consent":
                if not approve:
                    break
                self.decide(workspace, op, "approve")
            try:
                devstack.wait_for_execution(self._execution_arn(op), timeout=0.5)
                # every run of it ended: the operation is settled, pending, or (its run recorded the wait and
                # ended) waiting for consent
                op = self.get(f"/v1/workspaces/{workspace}/operations/{op['operationId']}").body
                if op["state"] != "awaiting_consent":
                    break
                continue
            except TimeoutError:
                if time.monotonic() >= deadline:
                    raise
            op = self.get(f"/v1/workspaces/{workspace}/operations/{op['operationId']}").body
        final = self.get(f"/v1/workspaces/{workspace}/operations/{op['operationId']}")
        assert final.status == 200, final.body
        body: dict[str, Any] = final.body
        return body

    def wait_for_consent(self, workspace: str, admitted: ApiResponse, timeout: float = 30) -> dict[str, Any]:
        """Wait until the operation waits for consent (or settled), and read it."""
        return self.wait_settled(workspace, admitted, timeout, approve=False)

    def decide(self, workspace: str, op: dict[str, Any], decision: str, *, key: str | None = None) -> ApiResponse:
        """Approve or reject the plan ``op`` waits with (its consent's plan digest)."""
        digest = op["consent"]["planDigest"]
        return self.post(
            f"{self.installation_path(workspace, op['installationId'])}/approvals",
            {"decision": decision, "planDigest": digest, "operationId": op["operationId"]},
            headers={"Idempotency-Key": key or f"decide-{op['operationId']}-{decision}"},
        )

    def _execution_arn(self, op: dict[str, Any]) -> str:
        machine = self.api.stack.state_machine_arns["InstallStateMachine"]
        prefix, _, name = machine.partition(":stateMachine:")
        attempt = op.get("attempt")
        execution = op["operationId"] if not attempt else f"{op['operationId']}-{attempt}"
        return f"{prefix}:execution:{name}:{execution}"

    def install(
        self,
        workspace: str,
        installation: str,
        package: str,
        version: str,
        *,
        key: str,
        if_match: str | None = None,
        **body: Any,
    ) -> ApiResponse:
        headers = {"Idempotency-Key": key}
        if if_match is not None:
            headers["If-Match"] = if_match
        return self.put(
            self.installation_path(workspace, installation),
            {"package": package, "version": version, **body},
            headers=headers,
        )

    def uninstall(self, workspace: str, installation: str, *, key: str, if_match: str | None = None) -> ApiResponse:
        headers = {"Idempotency-Key": key, **({"If-Match": if_match} if if_match else {})}
        return self.delete(self.installation_path(workspace, installation), headers=headers)

    def rollback(self, workspace: str, installation: str, *, key: str, if_match: str | None = None) -> ApiResponse:
        headers = {"Idempotency-Key": key, **({"If-Match": if_match} if if_match else {})}
        return self.post(self.installation_path(workspace, installation) + "/rollback", headers=headers)
