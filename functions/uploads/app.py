"""HTTP: upload sessions, completing them (starts the publish state machine), reading them, and yanking."""

from __future__ import annotations

from typing import Annotated, Any

from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.event_handler.openapi.params import Body, Header, Path

from packyard import clock
from packyard.api import examples, waits
from packyard.api.principal import authorize
from packyard.api.publishing_responses import CreatedUploadView, ExistingReleaseView, ReleaseDetailView, UploadView
from packyard.api.resolver import build_resolver, json_response, serve
from packyard.api.routes import contract
from packyard.api.waits import PreferWait, WaitSeconds
from packyard.authority import Permission
from packyard.errors import (
    ArchiveRejected,
    ClaimLost,
    IdempotencyKeyReused,
    InputLimitExceeded,
    InvalidRequest,
    NotFound,
    QuotaExceeded,
    UploadExpired,
    UploadIncomplete,
    VersionExists,
)
from packyard.observability import HTTP_CORRELATION, lambda_entry
from packyard.operations import waiting
from packyard.publishing import catalog, request_keys, uploads
from packyard.publishing.models import Release, Upload

app = build_resolver()
# completing and yanking are idempotent by nature; a key binds one such request (another under it: 422)
REQUEST_KEY = "optional: the same request again answers as before; another request under this key is 422"


@app.post(
    "/v1/packages/<package>/versions/<version>/uploads",
    operation_id="createUpload",
    summary="Open an upload session for a new release",
    description=(
        "Declare the release's manifest and its archive's size and sha256. The answer is a session with a "
        "presigned `upload.url` to PUT the archive to and a `links.complete` to POST once it is uploaded; "
        "when the tenant already holds this exact content the answer is the existing release (200) and there "
        "is nothing to upload."
    ),
    tags=["publish"],
    **contract(
        Permission.PUBLISH,
        {
            201: ("A new upload session: PUT the archive to upload.url, then POST links.complete", CreatedUploadView),
            200: ("This exact content is already published: nothing to upload", ExistingReleaseView),
        },
        (InvalidRequest, ArchiveRejected, InputLimitExceeded, VersionExists, QuotaExceeded, IdempotencyKeyReused),
        examples={201: examples.UPLOAD_CREATED, 409: examples.VERSION_EXISTS},
    ),
)
def create_upload(
    package: Annotated[str, Path()],
    version: Annotated[str, Path()],
    request: Annotated[uploads.CreateUploadRequest, Body(openapi_examples=examples.CREATE_UPLOAD_REQUEST)],
    idempotency_key: Annotated[
        str | None, Header(alias="idempotency-key", description="optional: a retry with it answers the same session")
    ] = None,
) -> Response[CreatedUploadView | ExistingReleaseView]:
    created = uploads.create_upload(authorize(app), package, version, request, idempotency_key=idempotency_key)
    if isinstance(created, Release):
        return json_response(200, ExistingReleaseView.of(created))
    view = CreatedUploadView.of(created.upload, clock.now(), created.upload_url)
    return json_response(201, view, headers={"Location": view.links.self_link})


@app.post(
    "/v1/uploads/<upload_id>/complete",
    operation_id="completeUpload",
    summary="Finish an upload and start its verification",
    description=(
        "Starts the publish workflow on the uploaded archive (the execution is named after the upload id, so "
        "a repeat answers the same one). Read `getUpload` (with `?wait=N`) until the session is `published` or "
        "`rejected`, or send `Prefer: wait=N` to have this answer wait for that."
    ),
    tags=["publish"],
    **contract(
        Permission.PUBLISH,
        {
            202: ("Verification started (or still running): read the session", UploadView),
            200: ("The session had already finished, or finished within Prefer: wait=N", UploadView),
        },
        (InvalidRequest, NotFound, UploadExpired, UploadIncomplete, ClaimLost, IdempotencyKeyReused),
        examples={202: examples.UPLOAD_VERIFYING},
    ),
)
def complete_upload(
    upload_id: Annotated[str, Path()],
    idempotency_key: Annotated[str | None, Header(alias="idempotency-key", description=REQUEST_KEY)] = None,
    prefer: PreferWait = None,
) -> Response[UploadView]:
    tenant = authorize(app).tenant
    request_keys.bind(tenant, idempotency_key, {"request": "complete_upload", "uploadId": upload_id})
    upload = uploads.complete_upload(tenant, upload_id)
    headers = {"Location": f"/v1/uploads/{upload_id}"}
    wait = waiting.preferred_wait(prefer)
    if wait is not None and upload.is_verifying:
        upload = _wait_for_upload(tenant, upload, wait)
        headers.update(waits.applied(wait))
    status = 202 if upload.is_verifying else 200
    return json_response(status, UploadView.of(upload, clock.now()), headers=headers)


def _wait_for_upload(tenant: str, upload: Upload, seconds: int) -> Upload:
    """The session re-read until it is no longer verifying (published, rejected) or ``seconds`` pass."""
    return waiting.until(
        upload,
        lambda: uploads.get_upload(tenant, upload.upload_id),
        lambda found: not found.is_verifying,
        waiting.budget(seconds, app.lambda_context),
    ).record


@app.get(
    "/v1/uploads/<upload_id>",
    operation_id="getUpload",
    summary="Read an upload session",
    description=(
        "The session's state (`awaiting_upload`, `verifying`, `published`, `rejected`, `expired`); a "
        "rejection carries its `code`, `subCode` and `detail`. With `wait=N` a `verifying` session is answered "
        "once it is no longer verifying, or after N seconds."
    ),
    tags=["publish"],
    **contract(
        Permission.PUBLISH,
        {200: ("An upload session", UploadView)},
        (NotFound,),
        examples={200: examples.UPLOAD_PUBLISHED},
    ),
)
def get_upload(upload_id: Annotated[str, Path()], wait: WaitSeconds = None) -> UploadView:
    tenant = authorize(app).tenant
    upload = uploads.get_upload(tenant, upload_id)
    if wait is not None:
        upload = _wait_for_upload(tenant, upload, wait)
    return UploadView.of(upload, clock.now())


@app.delete(
    "/v1/packages/<package>/versions/<version>",
    operation_id="yankRelease",
    summary="Yank a release",
    description="Marks the release yanked: it is no longer installed anew, and its version is never reused.",
    tags=["releases"],
    **contract(
        Permission.YANK,
        {200: ("The release, now yanked (its version is never reused)", ReleaseDetailView)},
        (InvalidRequest, NotFound, IdempotencyKeyReused),
    ),
)
def yank_version(
    package: Annotated[str, Path()],
    version: Annotated[str, Path()],
    idempotency_key: Annotated[str | None, Header(alias="idempotency-key", description=REQUEST_KEY)] = None,
) -> ReleaseDetailView:
    tenant = authorize(app).tenant
    request_keys.bind(tenant, idempotency_key, {"request": "yank", "package": package, "version": version})
    return ReleaseDetailView.of(catalog.yank(tenant, package, version))


@lambda_entry(HTTP_CORRELATION, settings=("table_name", "bucket_name", "publish_state_machine_arn"))
def lambda_handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    return serve(app, event, context)
