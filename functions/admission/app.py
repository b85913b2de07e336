"""HTTP: admit installation operations (install/update/repair, uninstall, rollback) and preview their plans."""

from __future__ import annotations

from typing import Annotated, Any

from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.event_handler.openapi.params import Body, Header, Path, Query

from packyard.api import examples, waits
from packyard.api.principal import authorize
from packyard.api.resolver import build_resolver, json_response, serve
from packyard.api.routes import contract
from packyard.api.waits import PreferWait
from packyard.api.workspace_responses import OperationView, PreviewView
from packyard.authority import Permission
from packyard.errors import (
    IdempotencyKeyRequired,
    IdempotencyKeyReused,
    InputLimitExceeded,
    InvalidRequest,
    LimitExceeded,
    NeedsConsent,
    NotFound,
    OperationInProgress,
    PlanChanged,
    QuotaExceeded,
    ReleaseUnavailable,
    StaleAuthority,
    VersionConflict,
    VersionRequired,
)
from packyard.observability import HTTP_CORRELATION, lambda_entry
from packyard.operations import admission, preview, waiting
from packyard.operations.drafting import OperationRequest
from packyard.operations.models import Action, ChangeRequest, InstallRequest, Operation, PromoteRequest
from packyard.store import workspace as workspace_store

app = build_resolver()

IdempotencyKey = Annotated[str | None, Header(alias="idempotency-key", description="1-255 printable ASCII")]
IfMatch = Annotated[str | None, Header(alias="if-match", description='The installation version, e.g. "3"')]
Workspace = Annotated[str, Path()]
InstallationId = Annotated[str, Path()]
OptionalChange = Annotated[ChangeRequest | None, Body(description='optional, e.g. {"origin": "workflow"}')]

ADMITTED = {
    202: ("Admitted: the operation runs; read Location (with ?wait=N to wait for it)", OperationView),
    200: ("Replayed, already settled, or settled within Prefer: wait=N: the operation as it stands", OperationView),
}
ADMISSION_ERRORS = (
    InvalidRequest,
    IdempotencyKeyRequired,
    NotFound,
    OperationInProgress,
    StaleAuthority,
    ReleaseUnavailable,
    LimitExceeded,
    InputLimitExceeded,
    PlanChanged,
    VersionConflict,
    IdempotencyKeyReused,
    VersionRequired,
    QuotaExceeded,  # the workspace's quota of referenced bytes, checked at admission (drafting.check_quota)
)


def _admit(
    action: Action,
    workspace: str,
    installation_id: str,
    body: OperationRequest,
    idempotency_key: str | None,
    if_match: str | None,
    prefer: str | None,
) -> Response[OperationView]:
    op = admission.admit(
        authorize(app), workspace, installation_id, action, body, idempotency_key=idempotency_key, if_match=if_match
    )
    headers = {"Location": f"/v1/workspaces/{op.workspace}/operations/{op.operation_id}"}
    wait = waiting.preferred_wait(prefer)
    if wait is not None and op.in_flight:
        op = waiting.until_at_rest(op, lambda: _reread(op), waiting.budget(wait, app.lambda_context)).record
        headers.update(waits.applied(wait))
    return json_response(202 if op.in_flight else 200, OperationView.of(op), headers=headers)


def _reread(op: Operation) -> Operation:
    """The operation as stored now (a consistent read); the one just admitted if it is not found (it never leaves)."""
    return workspace_store.get_operation(op.tenant, op.workspace, op.operation_id) or op


@app.put(
    "/v1/workspaces/<workspace>/installations/<installation_id>",
    operation_id="putInstallation",
    summary="Install, update or repair an installation",
    description=(
        "Admits an operation that makes the installation hold the release the body names (install, update or "
        "repair, from the installation's state). `Idempotency-Key` is required, `If-Match` too once the "
        "installation exists. Poll the operation at `Location`; an owner's install of new permissions waits "
        "for `decideApproval`."
    ),
    tags=["installations"],
    **contract(
        Permission.CHANGE_INSTALLATIONS, ADMITTED, ADMISSION_ERRORS, examples={202: examples.OPERATION_ADMITTED}
    ),
)
def put_installation(
    workspace: Workspace,
    installation_id: InstallationId,
    request: Annotated[InstallRequest, Body(openapi_examples=examples.PUT_INSTALLATION_REQUEST)],
    idempotency_key: IdempotencyKey = None,
    if_match: IfMatch = None,
    prefer: PreferWait = None,
) -> Response[OperationView]:
    return _admit(Action.PUT, workspace, installation_id, request, idempotency_key, if_match, prefer)


@app.delete(
    "/v1/workspaces/<workspace>/installations/<installation_id>",
    operation_id="deleteInstallation",
    summary="Uninstall an installation",
    description=(
        "Admits an operation that removes the installation; of something not installed it settles `succeeded` "
        "with `code: not_installed`."
    ),
    tags=["installations"],
    **contract(Permission.CHANGE_INSTALLATIONS, ADMITTED, ADMISSION_ERRORS),
)
def delete_installation(
    workspace: Workspace,
    installation_id: InstallationId,
    request: OptionalChange = None,
    idempotency_key: IdempotencyKey = None,
    if_match: IfMatch = None,
    prefer: PreferWait = None,
) -> Response[OperationView]:
    return _admit(
        Action.DELETE, workspace, installation_id, request or ChangeRequest(), idempotency_key, if_match, prefer
    )


@app.post(
    "/v1/workspaces/<workspace>/installations/<installation_id>/rollback",
    operation_id="rollbackInstallation",
    summary="Roll an installation back",
    description="Admits an operation that brings back the installation's retained previous release.",
    tags=["installations"],
    **contract(Permission.CHANGE_INSTALLATIONS, ADMITTED, ADMISSION_ERRORS),
)
def rollback_installation(
    workspace: Workspace,
    installation_id: InstallationId,
    request: OptionalChange = None,
    idempotency_key: IdempotencyKey = None,
    if_match: IfMatch = None,
    prefer: PreferWait = None,
) -> Response[OperationView]:
    return _admit(
        Action.ROLLBACK, workspace, installation_id, request or ChangeRequest(), idempotency_key, if_match, prefer
    )


@app.post(
    "/v1/workspaces/<workspace>/installations/<installation_id>/archive",
    operation_id="archiveInstallation",
    summary="Archive an installation",
    description=(
        "Admits an operation that archives an active installation: it no longer counts towards the "
        "installation limits, its release stays referenced; `restoreInstallation` brings it back."
    ),
    tags=["installations"],
    **contract(Permission.CHANGE_INSTALLATIONS, ADMITTED, ADMISSION_ERRORS),
)
def archive_installation(
    workspace: Workspace,
    installation_id: InstallationId,
    request: OptionalChange = None,
    idempotency_key: IdempotencyKey = None,
    if_match: IfMatch = None,
    prefer: PreferWait = None,
) -> Response[OperationView]:
    """Archive: off the installation limits, its release still referenced; restore brings it back."""
    return _admit(
        Action.ARCHIVE, workspace, installation_id, request or ChangeRequest(), idempotency_key, if_match, prefer
    )


@app.post(
    "/v1/workspaces/<workspace>/installations/<installation_id>/restore",
    operation_id="restoreInstallation",
    summary="Restore an archived installation",
    description=(
        "Admits an operation that makes an archived installation active again; limits and grants are checked again."
    ),
    tags=["installations"],
    **contract(Permission.CHANGE_INSTALLATIONS, ADMITTED, ADMISSION_ERRORS),
)
def restore_installation(
    workspace: Workspace,
    installation_id: InstallationId,
    request: OptionalChange = None,
    idempotency_key: IdempotencyKey = None,
    if_match: IfMatch = None,
    prefer: PreferWait = None,
) -> Response[OperationView]:
    """Restore an archived installation: limits and grants are checked again."""
    return _admit(
        Action.RESTORE, workspace, installation_id, request or ChangeRequest(), idempotency_key, if_match, prefer
    )


@app.post(
    "/v1/workspaces/<workspace>/installations/<installation_id>/promote",
    operation_id="promoteInstallation",
    summary="Widen an installation's scope",
    description=(
        "Admits an operation that widens the installation's scope (task, session, repository, workspace); "
        "grants used above their ceiling are asked consent for again."
    ),
    tags=["installations"],
    **contract(Permission.CHANGE_INSTALLATIONS, ADMITTED, ADMISSION_ERRORS),
)
def promote_installation(
    workspace: Workspace,
    installation_id: InstallationId,
    request: Annotated[PromoteRequest, Body()],
    idempotency_key: IdempotencyKey = None,
    if_match: IfMatch = None,
    prefer: PreferWait = None,
) -> Response[OperationView]:
    """Widen the scope (e.g. task to workspace); grants above their ceiling are asked consent for again."""
    return _admit(Action.PROMOTE, workspace, installation_id, request, idempotency_key, if_match, prefer)


@app.post(
    "/v1/workspaces/<workspace>/installations/<installation_id>/preview",
    operation_id="previewInstallation",
    summary="Preview an operation's plan",
    description=(
        "The plan an operation would commit now, its `planDigest` and the permissions it would ask consent "
        "for, with no side effect. Send the digest with `putInstallation` to be refused `plan_changed` if "
        "anything moved since."
    ),
    tags=["installations"],
    **contract(
        Permission.CHANGE_INSTALLATIONS,
        {200: ("The plan the operation would commit now, and its digest", PreviewView)},
        (InvalidRequest, NotFound, ReleaseUnavailable, StaleAuthority, NeedsConsent),
    ),
)
def preview_installation(
    workspace: Workspace,
    installation_id: InstallationId,
    request: Annotated[InstallRequest, Body()],
    action: Annotated[
        Action, Query(description="put (default), delete, rollback, archive, restore or promote (to the body's scope)")
    ] = Action.PUT,
) -> PreviewView:
    return PreviewView.of_preview(preview.preview(authorize(app), workspace, installation_id, action, request))


@lambda_entry(HTTP_CORRELATION, settings=("table_name", "install_state_machine_arn"))
def lambda_handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    return serve(app, event, context)
