"""HTTP: upload sessions, completing them (starts the publish state machine), reading them, and yanking."""

from __future__ import annotations

from typing import Annotated, Any

from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.event_handler.openapi.params import Body, Path

from packyard import clock, releases, uploads
from packyard.http import build_resolver, json_response, principal_of
from packyard.observability import HTTP_CORRELATION, lambda_entry

app = build_resolver()


@app.post("/v1/packages/<package>/versions/<version>/uploads", tags=["publish"])
def create_upload(
    package: Annotated[str, Path()],
    version: Annotated[str, Path()],
    request: Annotated[uploads.CreateUploadRequest, Body()],
) -> Response[dict[str, Any]]:
    tenant = principal_of(app).tenant
    created = uploads.create_upload(tenant, package, version, request)
    if created.existing is not None:
        body = {"state": "published", "uploadRequired": False, "release": releases.release_view(created.existing)}
        return json_response(200, body)
    assert created.upload is not None
    body = created.upload.to_api(clock.now())
    if created.upload_url:
        body["upload"] = {"method": "PUT", "url": created.upload_url, "headers": {}}
    location = f"/v1/uploads/{created.upload.upload_id}"
    body["links"] = {"self": location, "complete": f"{location}/complete"}
    return json_response(201, body, headers={"Location": location})


@app.post("/v1/uploads/<upload_id>/complete", tags=["publish"])
def complete_upload(upload_id: Annotated[str, Path()]) -> Response[dict[str, Any]]:
    upload = uploads.complete_upload(principal_of(app).tenant, upload_id)
    status = 202 if upload.state.value == "verifying" else 200
    return json_response(status, upload.to_api(clock.now()), headers={"Location": f"/v1/uploads/{upload_id}"})


@app.get("/v1/uploads/<upload_id>", tags=["publish"])
def get_upload(upload_id: Annotated[str, Path()]) -> dict[str, Any]:
    return uploads.get_upload(principal_of(app).tenant, upload_id).to_api(clock.now())


@app.delete("/v1/packages/<package>/versions/<version>", tags=["releases"])
def yank_version(package: Annotated[str, Path()], version: Annotated[str, Path()]) -> dict[str, Any]:
    return releases.release_view(releases.yank(principal_of(app).tenant, package, version))


@lambda_entry(HTTP_CORRELATION)
def lambda_handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    return app.resolve(event, context)
