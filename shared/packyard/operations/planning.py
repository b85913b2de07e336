"""Planning: the exact next installation an operation will commit (version = baseline + 1), fixed once recorded.

``compute_plan`` is a pure function of the operation's baseline, target and request, so preview, admission and the
planning task agree on it; ``plan_task`` records it once.
"""

from __future__ import annotations

import uuid
from typing import Any

from packyard import clock
from packyard.errors import ClaimLost, NeedsConsent, StaleAuthority
from packyard.installations.grants import next_grants, widens
from packyard.installations.models import Creation, Installation, InstallationStatus
from packyard.observability import logger, tracer
from packyard.operations.models import InstallRequest, Intent, Operation, OperationKind, OperationState
from packyard.operations.timing import lease_until
from packyard.store import workspace


def compute_plan(op: Operation, operation_id: str, now: int) -> Installation:
    """The exact next installation: a pure function of the operation's baseline, target and request."""
    base = op.baseline
    version = (base.version if base else 0) + 1
    if op.kind is OperationKind.UNINSTALL:
        if base is None:
            raise StaleAuthority(f"operation {operation_id}: nothing to uninstall")
        return base.model_copy(
            update={
                "version": version,
                "status": InstallationStatus.REMOVED,
                "release": None,
                "previous": base.release or base.previous,
                "last_operation_id": operation_id,
                "updated_at": now,
            }
        )
    if op.target is None:
        raise StaleAuthority(f"operation {operation_id} has no target release")
    current_grants = base.grants if base and base.is_live else []
    if op.origin == "workflow":
        widened = widens(current_grants, op.target_permissions)
        if widened:
            raise NeedsConsent(
                f"{op.target.package}@{op.target.version} needs permissions not yet granted: "
                + ", ".join(f"{k}:{r}" for k, r in widened),
                permissions=[{"kind": k, "resource": r} for k, r in widened],
            )
    grants = next_grants(current_grants, op.target_permissions, op.origin)
    grant_generation = (base.grant_generation if base else 0) + (0 if base and base.grants == grants else 1)
    if op.kind is OperationKind.INSTALL:
        body = InstallRequest.model_validate(op.request["body"])
        if base is None:
            creation, instance_id = Creation.FRESH, _instance_id(op)
        elif body.intent is Intent.INSTALL_OR_REMINT:
            creation, instance_id = Creation.REMINTED, _instance_id(op)
        else:
            creation, instance_id = Creation.REPLACEMENT, base.instance_id
        return Installation(
            tenant=op.tenant,
            workspace=op.workspace,
            installation_id=op.installation_id,
            instance_id=instance_id,
            version=version,
            status=InstallationStatus.ACTIVE,
            creation=creation,
            package=op.target.package,
            release=op.target,
            previous=base.previous if base else None,
            scope=body.scope,
            grants=grants,
            grant_generation=grant_generation,
            config=body.config,
            last_operation_id=operation_id,
            updated_at=now,
        )
    if base is None:
        raise StaleAuthority(f"operation {operation_id}: a {op.kind} needs an existing installation")
    update: dict[str, Any] = {
        "version": version,
        "status": InstallationStatus.ACTIVE,
        "release": op.target,
        "grants": grants,
        "grant_generation": grant_generation,
        "last_operation_id": operation_id,
        "updated_at": now,
    }
    if op.kind is OperationKind.UPDATE:
        body = InstallRequest.model_validate(op.request["body"])
        update.update(previous=base.release, scope=body.scope, config=body.config)
    elif op.kind is OperationKind.ROLLBACK:
        update["previous"] = base.release
    elif op.kind is OperationKind.REPAIR:
        body = InstallRequest.model_validate(op.request["body"])
        update.update(scope=body.scope, config=body.config)
    return base.model_copy(update=update)


def _instance_id(op: Operation) -> str:
    # derived from the operation, so a re-plan mints the same id
    return "inst-" + uuid.uuid5(uuid.NAMESPACE_URL, op.operation_id).hex[:24]


@tracer.capture_method(capture_response=False)
def plan_task(tenant: str, workspace_id: str, operation_id: str) -> dict[str, Any]:
    """Record the plan once. A re-run returns the recorded plan; a different re-plan is stale authority."""
    logger.append_keys(tenant=tenant, workspace=workspace_id, operationId=operation_id)
    op = load(tenant, workspace_id, operation_id)
    if op.state in (OperationState.PLANNED, OperationState.COMMITTED) and op.plan is not None:
        return {"version": op.version, "plan": op.plan.model_dump(by_alias=True, mode="json")}
    if op.state is not OperationState.ADMITTED:
        raise ClaimLost(f"operation {operation_id} is {op.state}, not admitted")
    now = clock.now()
    plan = compute_plan(op, operation_id, now)
    if op.plan is not None and not op.plan.same_content(plan):
        raise StaleAuthority(f"operation {operation_id}: the re-computed plan differs from the recorded one")
    planned = op.model_copy(
        update={
            "state": OperationState.PLANNED,
            "version": op.version + 1,
            "plan": plan,
            "lease_until": lease_until(now),
            "updated_at": now,
        }
    )
    workspace.transition(op, planned, slot_lease=planned.lease_until)
    logger.info("operation planned", extra={"installationVersion": plan.version})
    return {"version": planned.version, "plan": plan.model_dump(by_alias=True, mode="json")}


def load(tenant: str, workspace_id: str, operation_id: str) -> Operation:
    """The operation a task works on; a missing one means this execution has nothing left to do."""
    op = workspace.get_operation(tenant, workspace_id, operation_id)
    if op is None:
        raise ClaimLost(f"operation {operation_id} does not exist")
    return op
