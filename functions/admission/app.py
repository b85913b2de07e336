"""HTTP: admit installation operations (install/update/repair, uninstall, rollback) and preview their plans."""

from __future__ import annotations

import json
from typing import Annotated, Any

from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.event_handler.openapi.params import Body, Header, Path, Query
from pydantic import ValidationError

from packyard import operations
from packyard.errors import InvalidRequest
from packyard.http import build_resolver, json_response, principal_of
from packyard.observability import HTTP_CORRELATION, lambda_entry
from packyard.operation_models import Action, ChangeRequest, InstallRequest

app = build_resolver()

IdempotencyKey = Annotated[str | None, Header(alias="idempotency-key", description="1-255 printable ASCII")]
IfMatch = Annotated[str | None, Header(alias="if-match", description='The installation version, e.g. "3"')]
Workspace = Annotated[str, Path()]
InstallationId = Annotated[str, Path()]


def _accepted(admitted: operations.Admitted) -> Response[dict[str, Any]]:
    op = admitted.operation
    location = f"/v1/workspaces/{op.workspace}/operations/{op.operation_id}"
    status = 200 if not op.in_flight else 202
    return json_response(status, op.to_api(), headers={"Location": location})


def _change_body() -> ChangeRequest:
    """DELETE and rollback take an optional body."""
    raw = app.current_event.decoded_body
    if not raw:
        return ChangeRequest()
    try:
        return ChangeRequest.model_validate(json.loads(raw))
    except (ValueError, ValidationError) as exc:
        raise InvalidRequest(f'body must be a JSON object like {{"origin": "owner"}}: {exc}') from exc


def _admit_change(
    action: Action, workspace: str, installation_id: str, idempotency_key: str | None, if_match: str | None
) -> Response[dict[str, Any]]:
    tenant = principal_of(app).tenant
    body = _change_body()
    admitted = operations.admit(
        tenant, workspace, installation_id, action, body, idempotency_key=idempotency_key, if_match=if_match
    )
    return _accepted(admitted)


@app.put("/v1/workspaces/<workspace>/installations/<installation_id>", tags=["installations"])
def put_installation(
    workspace: Workspace,
    installation_id: InstallationId,
    request: Annotated[InstallRequest, Body()],
    idempotency_key: IdempotencyKey = None,
    if_match: IfMatch = None,
) -> Response[dict[str, Any]]:
    tenant = principal_of(app).tenant
    admitted = operations.admit(
        tenant, workspace, installation_id, Action.PUT, request, idempotency_key=idempotency_key, if_match=if_match
    )
    return _accepted(admitted)


@app.delete("/v1/workspaces/<workspace>/installations/<installation_id>", tags=["installations"])
def delete_installation(
    workspace: Workspace,
    installation_id: InstallationId,
    idempotency_key: IdempotencyKey = None,
    if_match: IfMatch = None,
) -> Response[dict[str, Any]]:
    return _admit_change(Action.DELETE, workspace, installation_id, idempotency_key, if_match)


@app.post("/v1/workspaces/<workspace>/installations/<installation_id>/rollback", tags=["installations"])
def rollback_installation(
    workspace: Workspace,
    installation_id: InstallationId,
    idempotency_key: IdempotencyKey = None,
    if_match: IfMatch = None,
) -> Response[dict[str, Any]]:
    return _admit_change(Action.ROLLBACK, workspace, installation_id, idempotency_key, if_match)


@app.post("/v1/workspaces/<workspace>/installations/<installation_id>/preview", tags=["installations"])
def preview_installation(
    workspace: Workspace,
    installation_id: InstallationId,
    request: Annotated[InstallRequest, Body()],
    action: Annotated[Action, Query(description="put (default), delete or rollback")] = Action.PUT,
) -> dict[str, Any]:
    tenant = principal_of(app).tenant
    body: InstallRequest | ChangeRequest = request if action is Action.PUT else ChangeRequest(origin=request.origin)
    return operations.preview(tenant, workspace, installation_id, action, body)


@lambda_entry(HTTP_CORRELATION)
def lambda_handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    return app.resolve(event, context)
