"""HTTP reads of workspaces: installations, operations, what a runtime loads (``resolved``, with download links),
and usage against the limits (a workspace's, the tenant's)."""

from __future__ import annotations

from typing import Annotated, Any

from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.event_handler.openapi.params import Path

from packyard.api import examples
from packyard.api.principal import authorize
from packyard.api.principal_responses import PrincipalView
from packyard.api.query_responses import InstallationPage, ResolvedView, TenantUsageView, WorkspaceUsageView
from packyard.api.resolver import build_resolver, json_response, serve
from packyard.api.routes import Cursor, PageSize, authenticated_contract, contract
from packyard.api.waits import WaitSeconds
from packyard.api.workspace_responses import InstallationView, OperationView
from packyard.authority import Permission
from packyard.errors import InvalidRequest, NotFound
from packyard.installations.models import etag
from packyard.observability import HTTP_CORRELATION, lambda_entry
from packyard.operations import waiting
from packyard.workspaces import queries, usage

app = build_resolver()

READ_ERRORS = (InvalidRequest, NotFound)


@app.get(
    "/v1/workspaces/<workspace>/installations",
    operation_id="listInstallations",
    summary="List a workspace's installations",
    description="One page of the workspace's installations.",
    tags=["installations"],
    **contract(
        Permission.READ_WORKSPACES, {200: ("The workspace's installations", InstallationPage)}, (InvalidRequest,)
    ),
)
def list_installations(
    workspace: Annotated[str, Path()], limit: PageSize = 50, cursor: Cursor = None
) -> InstallationPage:
    return InstallationPage.of(*queries.list_installations(authorize(app).tenant, workspace, limit, cursor))


@app.get(
    "/v1/workspaces/<workspace>/installations/<installation_id>",
    operation_id="getInstallation",
    summary="Read an installation",
    description=(
        "The installation, its release, grants and any pending consent; its version is the `ETag` that "
        "`If-Match` names."
    ),
    tags=["installations"],
    **contract(
        Permission.READ_WORKSPACES,
        {200: ("The installation; its version is the ETag", InstallationView)},
        READ_ERRORS,
        examples={200: examples.INSTALLATION_ACTIVE},
    ),
)
def get_installation(
    workspace: Annotated[str, Path()], installation_id: Annotated[str, Path()]
) -> Response[InstallationView]:
    found, waiting = queries.get_installation(authorize(app).tenant, workspace, installation_id)
    return json_response(200, InstallationView.of(found, waiting), headers={"ETag": etag(found.version)})


@app.get(
    "/v1/workspaces/<workspace>/operations/<operation_id>",
    operation_id="getOperation",
    summary="Read an operation",
    description=(
        "An operation's state and, once settled, its outcome (`succeeded`, `refused` or `unconfirmed`). With "
        "`wait=N` the answer waits up to N seconds for the operation to come to rest (`settled`, `awaiting_consent` "
        "or `pending`) and answers at once when it does: no polling."
    ),
    tags=["installations"],
    **contract(
        Permission.READ_WORKSPACES,
        {200: ("An operation and, once settled, its outcome", OperationView)},
        READ_ERRORS,
        examples={200: {**examples.OPERATION_AWAITING_CONSENT, **examples.OPERATION_SUCCEEDED}},
    ),
)
def get_operation(
    workspace: Annotated[str, Path()], operation_id: Annotated[str, Path()], wait: WaitSeconds = None
) -> OperationView:
    tenant = authorize(app).tenant
    op = queries.get_operation(tenant, workspace, operation_id)
    if wait is not None:
        seconds = waiting.budget(wait, app.lambda_context)
        op = waiting.until_at_rest(op, lambda: queries.get_operation(tenant, workspace, operation_id), seconds).record
    return OperationView.of(op)


@app.get(
    "/v1/workspaces/<workspace>/resolved",
    operation_id="getResolved",
    summary="Read what a runtime loads",
    description=(
        "One page of the workspace's active installations with their releases, digests, grants, config and "
        "short-lived download URLs."
    ),
    tags=["installations"],
    **contract(
        Permission.READ_WORKSPACES,
        {200: ("What a runtime loads: active releases, digests, grants, download URLs", ResolvedView)},
        (InvalidRequest,),
    ),
)
def get_resolved(workspace: Annotated[str, Path()], limit: PageSize = 50, cursor: Cursor = None) -> ResolvedView:
    return ResolvedView.of_resolved(queries.resolved(authorize(app).tenant, workspace, limit, cursor))


@app.get(
    "/v1/workspaces/<workspace>/usage",
    operation_id="getWorkspaceUsage",
    summary="Read a workspace's usage",
    description="The workspace's live installations and referenced bytes against its limits.",
    tags=["usage"],
    **contract(
        Permission.READ_USAGE, {200: ("The workspace against its limits", WorkspaceUsageView)}, (InvalidRequest,)
    ),
)
def get_workspace_usage(workspace: Annotated[str, Path()]) -> WorkspaceUsageView:
    return WorkspaceUsageView.of(usage.workspace_usage(authorize(app).tenant, workspace))


@app.get(
    "/v1/usage",
    operation_id="getTenantUsage",
    summary="Read the tenant's usage",
    description="The tenant's stored bytes (retained archives and live upload reservations) against its quota.",
    tags=["usage"],
    **contract(Permission.READ_USAGE, {200: ("The tenant's stored bytes against its quota", TenantUsageView)}, ()),
)
def get_tenant_usage() -> TenantUsageView:
    return TenantUsageView.of(usage.tenant_usage(authorize(app).tenant))


@app.get(
    "/v1/me",
    operation_id="getPrincipal",
    summary="Read the caller as Packyard understood the token",
    description=(
        "The tenant, subject, actor kind and scopes read from the token and the permissions they grant; any "
        "valid token may call it (`packyard whoami`)."
    ),
    tags=["principal"],
    **authenticated_contract({200: ("The principal as Packyard read it from the token", PrincipalView)}),
)
def get_me() -> PrincipalView:
    return PrincipalView.of(authorize(app))


@lambda_entry(HTTP_CORRELATION, settings=("table_name", "bucket_name"))
def lambda_handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    return serve(app, event, context)
