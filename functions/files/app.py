"""HTTP reads of one file of a release: of a version directly, or of an installation's active release."""

from __future__ import annotations

from typing import Annotated, Any

from aws_lambda_powertools.event_handler.openapi.params import Header, Path

from packyard.api.file_responses import file_response, file_responses, held_by
from packyard.api.principal import authorize
from packyard.api.resolver import build_resolver, serve
from packyard.api.routes import contract
from packyard.authority import Permission
from packyard.errors import NotFound, ReleaseUnavailable
from packyard.observability import HTTP_CORRELATION, lambda_entry
from packyard.publishing import files

app = build_resolver()

FILE_ERRORS = (NotFound, ReleaseUnavailable)
# a version's files never change; an installation's change with its active release
IMMUTABLE = "private, max-age=86400, immutable"
REVALIDATE = "private, no-cache"
# BINARY_ANSWER: the two routes declare no return type on purpose. With validation on, Powertools serializes a
# route's answer through its return annotation (any, ``Response[Any]`` and ``Response[bytes]`` included), which
# decodes a bytes body as UTF-8 and fails on a binary file; without one the bytes reach ResponseBuilder untouched,
# which base64-encodes them (isBase64Encoded) as API Gateway expects. Their OpenAPI responses are declared below.


IfNoneMatch = Annotated[
    str | None,
    Header(alias="if-none-match", description='ETags held, e.g. "<sha256>": a file with one of them answers 304'),
]


def _file_contract(permission: Permission) -> dict[str, Any]:
    declared = contract(permission, {}, FILE_ERRORS)
    return {**declared, "responses": file_responses(declared["responses"])}


def _requested_path(file_path: str) -> str:
    """The file path as sent: an encoded slash (``%2F``) names no file (the resolver decodes the path before
    routing, so it is looked for in the path as the client sent it)."""
    sent = str(app.current_event.request_context.http.path or "")
    if "%2f" in sent.lower():
        raise NotFound(files.NO_SUCH_FILE)
    return file_path


@app.get(
    "/v1/packages/<package>/versions/<version>/files/<file_path>",
    operation_id="getReleaseFile",
    summary="Read one file of a release",
    description=(
        "The file's bytes, checked against the manifest's sha256 first; a file above 4 MiB is a 307 to a "
        "short-lived URL of exactly its bytes. A path the release does not hold is 404, whether or not it exists."
    ),
    tags=["releases"],
    **_file_contract(Permission.READ_PACKAGES),
)
def get_release_file(  # type: ignore[no-untyped-def]  # see BINARY_ANSWER
    package: Annotated[str, Path()],
    version: Annotated[str, Path()],
    file_path: Annotated[str, Path()],
    if_none_match: IfNoneMatch = None,
):
    tenant = authorize(app).tenant
    found = files.release_file(tenant, package, version, _requested_path(file_path), held=held_by(if_none_match))
    return file_response(found, cache_control=IMMUTABLE)


@app.get(
    "/v1/workspaces/<workspace>/installations/<installation_id>/files/<file_path>",
    operation_id="getInstallationFile",
    summary="Read one file of an installation's active release",
    description=(
        "What a runtime loads, one file at a time: the bytes of the active release's file, checked against its "
        "manifest's sha256, or a 307 to them for a file above 4 MiB."
    ),
    tags=["installations"],
    **_file_contract(Permission.READ_WORKSPACES),
)
def get_installation_file(  # type: ignore[no-untyped-def]  # see BINARY_ANSWER
    workspace: Annotated[str, Path()],
    installation_id: Annotated[str, Path()],
    file_path: Annotated[str, Path()],
    if_none_match: IfNoneMatch = None,
):
    tenant = authorize(app).tenant
    held = held_by(if_none_match)
    found = files.installation_file(tenant, workspace, installation_id, _requested_path(file_path), held=held)
    return file_response(found, cache_control=REVALIDATE)


@lambda_entry(HTTP_CORRELATION, settings=("table_name", "bucket_name"))
def lambda_handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    return serve(app, event, context)
