"""A caller of the in-process API with a fixed identity, and the publish journey step by step (tests, demo)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import devstack
from devstack.api import ApiResponse, LocalApi
from packyard_cli.build import BuiltPackage


@dataclass
class Caller:
    api: LocalApi
    tenant: str
    subject: str = "user-1"

    @property
    def claims(self) -> dict[str, Any]:
        return {"tenant": self.tenant, "sub": self.subject, "scope": "packyard/publish packyard/install"}

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
        return final.body

    def publish(self, package: str, version: str, built: BuiltPackage, archive: bytes | None = None) -> dict[str, Any]:
        session = self.request_upload(package, version, built)
        assert session.status in (200, 201), session.body
        if session.status == 200:
            return session.body
        if session.body["uploadRequired"]:
            self.put_archive(session.body, built.archive if archive is None else archive)
        return self.complete_and_wait(session.body["uploadId"])
