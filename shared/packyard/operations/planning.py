"""Planning: the exact next installation an operation will commit (version = baseline + 1), fixed once recorded.

``compute_plan`` is a pure function of the operation's baseline, target and request, so preview, admission and the
planning task agree on it; ``plan_task`` records it once.
"""

from __future__ import annotations

import uuid
from typing import Any

from packyard import clock
from packyard.errors import ClaimLost, NeedsConsent, StaleAuthority
from packyard.installations.grants import PermissionKey, needing_consent, next_grants
from packyard.installations.models import Creation, Installation, InstallationStatus, plan_digest
from packyard.installations.scopes import Scope
from packyard.observability import logger, tracer
from packyard.operations.models import (
    AskedPermission,
    Consent,
    InstallRequest,
    Intent,
    Operation,
    OperationKind,
    OperationState,
    PromoteRequest,
)
from packyard.operations.targets import checked_target
from packyard.operations.timing import lease_kept, lease_until
from packyard.publishing import integrity
from packyard.store import workspace


def compute_plan(op: Operation, operation_id: str, now: int) -> Installation:
    """The exact next installation: a pure function of the operation's baseline, target and request."""
    base = op.baseline
    common: dict[str, Any] = {
        "version": (base.version if base else 0) + 1,
        "last_operation_id": operation_id,
        "updated_at": now,
    }
    if op.kind is OperationKind.UNINSTALL:
        base = _existing(base, op, operation_id)
        return base.model_copy(
            update={
                **common,
                "status": InstallationStatus.REMOVED,
                "release": None,
                "previous": base.release or base.previous,
            }
        )
    if op.kind is OperationKind.ARCHIVE:
        # archived: off the installation limits, its release still referenced (restore brings it back as it was)
        return _existing(base, op, operation_id).model_copy(update={**common, "status": InstallationStatus.ARCHIVED})
    if op.target is None:
        raise StaleAuthority(f"operation {operation_id} has no target release")
    scope = _scope_of(op, base)
    current_grants = base.grants if base and base.is_live else []
    if op.origin == "workflow":
        asked = needing_consent(current_grants, op.target_permissions, scope.kind)
        if asked:
            raise NeedsConsent(
                f"{op.target.package}@{op.target.version} needs permissions not yet granted for a {scope.kind} "
                "scope: " + ", ".join(f"{k}:{r}" for k, r in asked),
                permissions=[{"kind": k, "resource": r} for k, r in asked],
            )
    grants = next_grants(current_grants, op.target_permissions, op.origin, scope.kind)
    changed = base is None or base.grants != grants or base.scope != scope
    common.update(grants=grants, grant_generation=(base.grant_generation if base else 0) + (1 if changed else 0))
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
            status=InstallationStatus.ACTIVE,
            creation=creation,
            package=op.target.package,
            release=op.target,
            previous=base.previous if base else None,
            scope=scope,
            config=body.config,
            **common,
        )
    base = _existing(base, op, operation_id)
    update: dict[str, Any] = {**common, "status": InstallationStatus.ACTIVE, "release": op.target, "scope": scope}
    if op.kind is OperationKind.UPDATE:
        update.update(previous=base.release, config=InstallRequest.model_validate(op.request["body"]).config)
    elif op.kind is OperationKind.REPAIR:
        update["config"] = InstallRequest.model_validate(op.request["body"]).config
    elif op.kind is OperationKind.ROLLBACK:
        update["previous"] = base.release
    return base.model_copy(update=update)


def consent_asked(op: Operation) -> list[PermissionKey]:
    """What an owner-origin operation must have approved before it commits (a workflow-origin one was refused by
    ``compute_plan`` already): permissions its plan adds, and grants it uses above their ceiling."""
    if op.origin != "owner" or op.target is None or op.plan is None:
        return []
    base = op.baseline
    current_grants = base.grants if base and base.is_live else []
    return needing_consent(current_grants, op.target_permissions, op.plan.scope.kind)


def _existing(base: Installation | None, op: Operation, operation_id: str) -> Installation:
    if base is None:
        raise StaleAuthority(f"operation {operation_id}: a {op.kind} needs an existing installation")
    return base


def _scope_of(op: Operation, base: Installation | None) -> Scope:
    """Where the planned installation applies: the request's scope for install/update/repair and promote, else
    where it applies today."""
    if op.kind in (OperationKind.INSTALL, OperationKind.UPDATE, OperationKind.REPAIR):
        return InstallRequest.model_validate(op.request["body"]).scope
    if op.kind is OperationKind.PROMOTE:
        return PromoteRequest.model_validate(op.request["body"]).scope
    return _existing(base, op, op.operation_id).scope


def _instance_id(op: Operation) -> str:
    # derived from the operation, so a re-plan mints the same id
    return "inst-" + uuid.uuid5(uuid.NAMESPACE_URL, op.operation_id).hex[:24]


@tracer.capture_method(capture_response=False)
def plan_task(
    tenant: str,
    workspace_id: str,
    operation_id: str,
    release: tuple[str, str] | None = None,
    *,
    runner: str | None = None,
    attempt: int | None = None,
) -> dict[str, Any]:
    """Claim the operation for the execution ``runner`` and record the plan once (and, for an owner-origin plan
    that widens grants, what it asks consent for). A re-run returns the recorded plan; a different re-plan is stale
    authority. ``release``: the target of a rollback, restore or promote, read here beside the operation and
    checked to be still published. ``attempt``: the attempt the run was started for (None: not fenced).

    The claim: an admitted operation is claimed by the write that records its plan (no extra write); a recorded
    one (a resume, a decision, a sweep restart cleared its runner) by a fenced write of ``runner``. An operation
    settled, deferred, waiting for a decision or held by another live runner is ClaimLost: this execution is a
    duplicate (Express runs at least once) and ends without touching it; so is a run of an earlier attempt (a
    deferred or taken-over operation resumed as a later one)."""
    logger.append_keys(tenant=tenant, workspace=workspace_id, operationId=operation_id)
    op, target_release = workspace.read_operation_and_release(tenant, workspace_id, operation_id, release)
    if op is None:
        raise ClaimLost(f"operation {operation_id} does not exist")
    now = clock.now()
    if held_by_another(op, runner, now) or (attempt is not None and attempt != op.attempt):
        raise ClaimLost(f"operation {operation_id} is run by another execution")
    if op.state in (OperationState.PLANNED, OperationState.COMMITTED) and op.plan is not None:
        return _planned_output(claimed(op, runner, now))
    if op.state is not OperationState.ADMITTED:
        raise ClaimLost(f"operation {operation_id} is {op.state}, not admitted")
    op = checked_target(op, target_release)
    if op.target is not None and op.kind not in (OperationKind.UNINSTALL, OperationKind.ARCHIVE):
        # the stored manifest of what will become active is checked before the plan is fixed: one altered in
        # storage makes the release unavailable now (refused release_unavailable), not a week later
        integrity.require_manifest(tenant, op.target, found_by="planning")
    plan = compute_plan(op, operation_id, now)
    if op.plan is not None and not op.plan.same_content(plan):
        raise StaleAuthority(f"operation {operation_id}: the re-computed plan differs from the recorded one")
    keeps_lease = lease_kept(op.lease_until, now)  # then the slot keeps its copy too: the operation alone is written
    planned = op.model_copy(
        update={
            "state": OperationState.PLANNED,
            "version": op.version + 1,
            "plan": plan,
            "runner": runner,
            "lease_until": op.lease_until if keeps_lease else lease_until(now),
            "updated_at": now,
        }
    )
    asked = consent_asked(planned)
    if asked:
        planned = planned.model_copy(
            update={
                "consent": Consent(
                    permissions=[AskedPermission(kind=k, resource=r) for k, r in asked],
                    plan_digest=plan_digest(plan),
                )
            }
        )
    if keeps_lease:
        workspace.record(op, planned)  # admission's lease is still good: the slot keeps it, one write
    else:
        workspace.transition(op, planned, slot_lease=planned.lease_until)
    logger.info("operation planned", extra={"installationVersion": plan.version, "consentAsked": len(asked)})
    return _planned_output(planned)


def held_by_another(op: Operation, runner: str | None, now: int) -> bool:
    """Whether an execution other than ``runner`` holds the operation: a live claim of another runner (its lease
    not over), or nothing left to run (settled, deferred, or waiting for an owner's decision)."""
    if op.state in (OperationState.SETTLED, OperationState.PENDING, OperationState.AWAITING_CONSENT):
        return True
    return op.runner is not None and op.runner != runner and op.lease_until > now


def claimed(op: Operation, runner: str | None, now: int) -> Operation:
    """A recorded operation claimed by ``runner`` (a fenced write of the runner, the lease renewed); already its
    runner's, it is as it is. A concurrent claim makes this one ClaimLost."""
    if op.runner == runner:
        return op
    claim = op.model_copy(
        update={"runner": runner, "version": op.version + 1, "lease_until": lease_until(now), "updated_at": now}
    )
    workspace.transition(op, claim, slot_lease=claim.lease_until)
    logger.info("operation claimed", extra={"state": str(op.state), "attempt": op.attempt})
    return claim


def _planned_output(op: Operation) -> dict[str, Any]:
    """What the Plan state hands on: the version the plan was recorded (or claimed) at, whether the workflow must
    record a wait for consent first, and whether its owner rejected it (then it settles refused). Not the plan: it
    is on the operation item, where Commit reads it, and in the execution's state it would grow with the grants and
    config toward Step Functions' 256 KiB payload."""
    decision = op.consent.decision if op.consent is not None else None
    return {
        "version": op.version,
        "needsConsent": op.consent is not None and decision is None,
        "rejected": decision == "reject",
    }


def load(tenant: str, workspace_id: str, operation_id: str) -> Operation:
    """The operation a task works on; a missing one means this execution has nothing left to do."""
    op = workspace.get_operation(tenant, workspace_id, operation_id)
    if op is None:
        raise ClaimLost(f"operation {operation_id} does not exist")
    return op
