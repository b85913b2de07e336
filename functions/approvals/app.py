"""HTTP: what waits for consent in a workspace, and an owner's decision on the exact plan (approve or reject)."""

from __future__ import annotations

from typing import Annotated, Any

from aws_lambda_powertools.event_handler.openapi.params import Body, Header, Path, Query

from packyard.api import examples
from packyard.api.consent_responses import ApprovalView, ConsentWaitPage
from packyard.api.principal import authorize
from packyard.api.resolver import build_resolver, serve
from packyard.api.routes import contract
from packyard.authority import Permission
from packyard.consent import decisions, waiting
from packyard.errors import IdempotencyKeyRequired, IdempotencyKeyReused, InvalidRequest, StaleAuthority
from packyard.observability import HTTP_CORRELATION, lambda_entry

app = build_resolver()

MAX_PAGE = 100


@app.get(
    "/v1/workspaces/<workspace>/approvals",
    operation_id="listApprovals",
    summary="List the operations waiting for consent",
    description=(
        "One page of the workspace's operations that wait for an owner's decision: the permissions asked, the "
        "`planDigest` to decide on, who asked and until when."
    ),
    tags=["approvals"],
    **contract(
        Permission.READ_WORKSPACES,
        {200: ("Operations waiting for a decision", ConsentWaitPage)},
        (InvalidRequest,),
        examples={200: examples.APPROVALS_WAITING},
    ),
)
def list_waiting(
    workspace: Annotated[str, Path()],
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = 50,
    cursor: Annotated[str | None, Query(max_length=2048)] = None,
) -> ConsentWaitPage:
    return ConsentWaitPage.of(*waiting.waiting_in(authorize(app).tenant, workspace, limit, cursor))


@app.post(
    "/v1/workspaces/<workspace>/installations/<installation_id>/approvals",
    operation_id="decideApproval",
    summary="Approve or reject an operation's plan",
    description=(
        "An owner's decision on the exact plan (`planDigest`) the installation's operation waits with: "
        "approve and it commits with the new grants, reject and it settles `refused consent_rejected`."
    ),
    tags=["approvals"],
    **contract(
        Permission.APPROVE,
        {200: ("The decision, recorded; the operation commits (approve) or settles refused (reject)", ApprovalView)},
        (InvalidRequest, IdempotencyKeyRequired, StaleAuthority, IdempotencyKeyReused),
        examples={200: examples.APPROVAL_RECORDED, 403: examples.APPROVE_FORBIDDEN},
    ),
)
def decide(
    workspace: Annotated[str, Path()],
    installation_id: Annotated[str, Path()],
    request: Annotated[decisions.DecisionRequest, Body(openapi_examples=examples.DECIDE_APPROVAL_REQUEST)],
    idempotency_key: Annotated[str | None, Header(alias="idempotency-key", description="1-255 printable ASCII")] = None,
) -> ApprovalView:
    approval = decisions.decide(authorize(app), workspace, installation_id, request, idempotency_key=idempotency_key)
    return ApprovalView.of(approval, workspace)


@lambda_entry(HTTP_CORRELATION, settings=("table_name", "install_state_machine_arn"))
def lambda_handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    return serve(app, event, context)
