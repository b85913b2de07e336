"""Preview: the plan an operation would commit now, decided exactly as admission and planning would, with no
side effects. Its digest lets a caller admit "this plan or nothing" (``planDigest``)."""

from __future__ import annotations

from packyard import clock
from packyard.authority import Principal
from packyard.installations.models import check_installation_id, check_workspace_id, plan_digest
from packyard.observability import logger, tracer
from packyard.operations.admission import read_view
from packyard.operations.drafting import OperationRequest, draft_operation
from packyard.operations.models import Action, ChangeRequest, InstallRequest, OperationState, Preview, PromoteRequest
from packyard.operations.planning import compute_plan, consent_asked

PREVIEW_ID = "preview"


@tracer.capture_method(capture_response=False)
def preview(
    principal: Principal, workspace_id: str, installation_id: str, action: Action, request: InstallRequest
) -> Preview:
    """The plan ``action`` would commit now, and what it would ask consent for. Only an install/update reads the
    request's release; promote takes its scope; the other actions take just its origin."""
    tenant = principal.tenant
    check_workspace_id(workspace_id)
    check_installation_id(installation_id)
    logger.append_keys(tenant=tenant, workspace=workspace_id, installationId=installation_id)
    body: OperationRequest = request
    if action is Action.PROMOTE:
        body = PromoteRequest(scope=request.scope, origin=request.origin)
    elif action is not Action.PUT:
        body = ChangeRequest(origin=request.origin)
    release_key = (body.package, body.version) if isinstance(body, InstallRequest) else None
    view = read_view(
        tenant, workspace_id, installation_id, PREVIEW_ID, action, release_key, None, with_installed_release=True
    )
    now = clock.now()
    request_record = {"body": body.model_dump(by_alias=True, mode="json", exclude_none=True)}
    op = draft_operation(principal, workspace_id, installation_id, PREVIEW_ID, action, body, request_record, now, view)
    if op.state is OperationState.SETTLED:
        return Preview(kind=op.kind, plan=None, plan_digest=None, note=op.note)
    plan = compute_plan(op, PREVIEW_ID, now)
    asked = consent_asked(op.model_copy(update={"plan": plan}))
    return Preview(kind=op.kind, plan=plan, plan_digest=plan_digest(plan), consent=asked)
