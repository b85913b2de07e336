"""HTTP reads of the catalogue: packages, versions, a version's manifest and receipt, archive download links."""

from __future__ import annotations

from typing import Annotated, Any

from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.event_handler.openapi.params import Path, Query

from packyard import operations, releases, workspaces
from packyard.http import build_resolver, json_response, principal_of
from packyard.installations import etag
from packyard.observability import HTTP_CORRELATION, lambda_entry

app = build_resolver()

PageSize = Annotated[int, Query(ge=1, le=releases.MAX_PAGE)]
Cursor = Annotated[str | None, Query(max_length=2048)]


@app.get("/v1/packages", tags=["releases"])
def list_packages(limit: PageSize = 50, cursor: Cursor = None) -> dict[str, Any]:
    packages, next_cursor = releases.list_packages(principal_of(app).tenant, limit, cursor)
    return {"items": [p.to_api() for p in packages], "nextCursor": next_cursor}


@app.get("/v1/packages/<package>", tags=["releases"])
def get_package(package: Annotated[str, Path()]) -> dict[str, Any]:
    return releases.get_package(principal_of(app).tenant, package).to_api()


@app.get("/v1/packages/<package>/versions", tags=["releases"])
def list_versions(package: Annotated[str, Path()], limit: PageSize = 50, cursor: Cursor = None) -> dict[str, Any]:
    items, next_cursor = releases.list_versions(principal_of(app).tenant, package, limit, cursor)
    return {"items": [r.to_api() for r in items], "nextCursor": next_cursor}


@app.get("/v1/packages/<package>/versions/<version>", tags=["releases"])
def get_version(package: Annotated[str, Path()], version: Annotated[str, Path()]) -> dict[str, Any]:
    release, manifest = releases.get_version(principal_of(app).tenant, package, version)
    return releases.release_view(release, manifest)


@app.get("/v1/packages/<package>/versions/<version>/archive", tags=["releases"])
def get_archive(package: Annotated[str, Path()], version: Annotated[str, Path()]) -> dict[str, Any]:
    return releases.archive_link(principal_of(app).tenant, package, version)


@app.get("/v1/workspaces/<workspace>/installations", tags=["installations"])
def list_installations(
    workspace: Annotated[str, Path()], limit: PageSize = 50, cursor: Cursor = None
) -> dict[str, Any]:
    items, next_cursor = workspaces.list_installations(principal_of(app).tenant, workspace, limit, cursor)
    return {"items": [i.to_api() for i in items], "nextCursor": next_cursor}


@app.get("/v1/workspaces/<workspace>/installations/<installation_id>", tags=["installations"])
def get_installation(
    workspace: Annotated[str, Path()], installation_id: Annotated[str, Path()]
) -> Response[dict[str, Any]]:
    found = workspaces.get_installation(principal_of(app).tenant, workspace, installation_id)
    return json_response(200, found.to_api(), headers={"ETag": etag(found.version)})


@app.get("/v1/workspaces/<workspace>/operations/<operation_id>", tags=["installations"])
def get_operation(workspace: Annotated[str, Path()], operation_id: Annotated[str, Path()]) -> dict[str, Any]:
    return operations.get_operation(principal_of(app).tenant, workspace, operation_id).to_api()


@app.get("/v1/workspaces/<workspace>/resolved", tags=["installations"])
def get_resolved(workspace: Annotated[str, Path()]) -> dict[str, Any]:
    return workspaces.resolved(principal_of(app).tenant, workspace)


@lambda_entry(HTTP_CORRELATION)
def lambda_handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    return app.resolve(event, context)
