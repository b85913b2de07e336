"""Installation operations: admission, planning, commit and settlement.

Exactly once, however often callers retry and wherever a Lambda dies:
- admission records the operation and claims the installation's single in-flight slot in one transaction, keyed by
  the Idempotency-Key (the operation id is derived from it, so a replay is one read);
- planning fixes the next installation once (version = baseline + 1);
- commit is a compare-and-put on the baseline version; a row that already equals the plan is an exact replay;
- settlement writes the terminal outcome and frees the slot.
Every operation write is fenced by the operation's version and state.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from dataclasses import replace
from typing import Any

from packyard import clock
from packyard.config import limits, settings
from packyard.errors import (
    ClaimLost,
    IdempotencyKeyRequired,
    IdempotencyKeyReused,
    InvalidRequest,
    LimitExceeded,
    NeedsConsent,
    NotFound,
    OperationInProgress,
    PackyardError,
    PlanChanged,
    ReleaseUnavailable,
    StaleAuthority,
    TransientStoreError,
    VersionConflict,
    VersionRequired,
)
from packyard.installations import (
    Creation,
    Installation,
    InstallationStatus,
    ReleaseRef,
    ScopeKind,
    check_installation_id,
    check_workspace_id,
    next_grants,
    plan_digest,
    widens,
)
from packyard.models import Release, ReleaseStatus
from packyard.observability import logger, metrics
from packyard.operation_models import (
    Action,
    ChangeRequest,
    InstallRequest,
    Intent,
    Operation,
    OperationKind,
    OperationState,
    Outcome,
    Slot,
)
from packyard.store import catalog, workflows, workspace
from packyard.store.workspace import AdmissionView
from packyard.tasks import caught_error_message

ADMISSION_ATTEMPTS = 4


def check_idempotency_key(value: str | None) -> str:
    if value is None or value == "":
        raise IdempotencyKeyRequired("mutations need an Idempotency-Key header (1-255 printable ASCII characters)")
    if len(value) > 255 or not all(0x20 <= ord(c) < 0x7F for c in value):
        raise InvalidRequest("Idempotency-Key must be 1-255 printable ASCII characters")
    return value


def parse_if_match(value: str | None) -> int | None:
    if value is None:
        return None
    raw = value.strip()
    if raw.startswith("W/"):
        raw = raw[2:]
    raw = raw.strip('"')
    if not raw.isdigit():
        raise InvalidRequest(f'If-Match must be an installation version such as "3", got {value!r}')
    return int(raw)


def operation_id_for(tenant: str, workspace_id: str, key: str) -> str:
    """Deterministic: the same (tenant, workspace, key) always names the same operation, so replay is one read."""
    return "op-" + hashlib.sha256(f"{tenant}\x00{workspace_id}\x00{key}".encode()).hexdigest()[:32]


def _digest(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def lease_seconds() -> int:
    return limits().operation_lease_seconds


# ---- admission -------------------------------------------------------------------------------------------------------


class Admitted:
    """What admission answers: the operation, and whether it was just created (202) or replayed."""

    def __init__(self, operation: Operation, replay: bool) -> None:
        self.operation = operation
        self.replay = replay


def admit(
    tenant: str,
    workspace_id: str,
    installation_id: str,
    action: Action,
    body: InstallRequest | ChangeRequest,
    *,
    idempotency_key: str | None,
    if_match: str | None,
) -> Admitted:
    check_workspace_id(workspace_id)
    check_installation_id(installation_id)
    key = check_idempotency_key(idempotency_key)
    expected_version = parse_if_match(if_match)
    # If-Match is a precondition, not part of what is asked: a resend after the commit (when the caller now knows a
    # newer version) is still the same request and replays the same operation.
    request = {
        "action": str(action),
        "installationId": installation_id,
        "body": body.model_dump(by_alias=True, mode="json", exclude_none=True),
    }
    request_digest = _digest(request)
    operation_id = operation_id_for(tenant, workspace_id, key)
    release_key = (body.package, body.version) if isinstance(body, InstallRequest) else None
    task_id = body.scope.id if isinstance(body, InstallRequest) and body.scope.kind is ScopeKind.TASK else None

    for _ in range(ADMISSION_ATTEMPTS):
        view = _read_view(tenant, workspace_id, installation_id, operation_id, action, release_key, task_id)
        if view.operation is not None:
            return _replay(view.operation, request_digest)
        now = clock.now()
        op = _new_operation(tenant, workspace_id, installation_id, operation_id, action, body, request, now, view)
        op = op.model_copy(update={"request_digest": request_digest})
        _check_version(view.installation, expected_version, op)
        if op.state is OperationState.SETTLED:
            # nothing to change (uninstall of what is not installed): settled here, but still one per key
            blocked = _blocker(view.slot, op, now)
            if blocked is not None:
                raise blocked
            conflict = workspace.admit(
                op, observed_slot=None, claimed_slot=None, baseline_version=None, superseding=None, now=now
            )
            if conflict is None:
                return Admitted(op, replay=False)
            if conflict.existing_operation is not None:
                return _replay(conflict.existing_operation, request_digest)
            continue
        _check_limits(view, op)
        _check_preview(body, op)
        superseding = _supersedable(view.slot, op, now)
        if superseding is None:
            blocked = _blocker(view.slot, op, now)
            if blocked is not None:
                raise blocked
        claimed = Slot(
            operationId=op.operation_id,
            claim=(view.slot.claim + 1) if view.slot else 1,
            leaseUntil=op.lease_until,
            intentDigest=op.intent_digest,
            pending=False,
            lastSettled=view.slot.last_settled if view.slot else None,
            lastSettledAt=view.slot.last_settled_at if view.slot else None,
        )
        if superseding:
            op = op.model_copy(update={"supersedes": superseding})
        conflict = workspace.admit(
            op,
            observed_slot=view.slot,
            claimed_slot=claimed,
            baseline_version=view.installation.version if view.installation else None,
            superseding=superseding,
            superseded_outcome=_superseded_outcome(superseding, view.installation, op.operation_id),
            now=now,
        )
        if conflict is None:
            metrics.add_metric(name="OperationsAdmitted", unit="Count", value=1)
            _start(op)
            return Admitted(op, replay=False)
        if conflict.existing_operation is not None:
            return _replay(conflict.existing_operation, request_digest)
        # the slot or the installation moved between our read and our write: decide again on fresh state
    raise TransientStoreError("admission kept racing with other operations; retry with the same Idempotency-Key")


def _read_view(
    tenant: str,
    workspace_id: str,
    installation_id: str,
    operation_id: str,
    action: Action,
    release_key: tuple[str, str] | None,
    task_id: str | None,
) -> AdmissionView:
    """What admission (or preview) decides on. A rollback's target release is known only once the installation is
    read, so it costs a second read."""
    view = workspace.read_for_admission(tenant, workspace_id, installation_id, operation_id, release_key, task_id)
    previous = view.installation.previous if view.installation is not None else None
    if action is Action.ROLLBACK and view.operation is None and previous is not None:
        view = replace(view, release=catalog.find_release(tenant, previous.package, previous.version))
    return view


def _replay(op: Operation, request_digest: str) -> Admitted:
    if op.request_digest != request_digest:
        raise IdempotencyKeyReused(
            f"Idempotency-Key already used for a different request (operation {op.operation_id})",
            operationId=op.operation_id,
        )
    if op.state is OperationState.PENDING:
        return Admitted(resume(op), replay=True)
    if op.in_flight:
        # admission (or a resume) may have died between recording and starting: starting again is idempotent by
        # execution name, and a finished execution of that name is not run twice
        _start(op)
    return Admitted(op, replay=True)


def _start(op: Operation) -> None:
    workflows.start(
        settings().install_state_machine_arn,
        op.execution_name(),
        {
            "tenant": op.tenant,
            "workspace": op.workspace,
            "installationId": op.installation_id,
            "operationId": op.operation_id,
        },
    )


def resume(op: Operation) -> Operation:
    """A retry with the same key resumes a deferred operation where it stopped (a new execution attempt)."""
    now = clock.now()
    resumed_state = (
        OperationState(op.phase) if op.phase in {s.value for s in OperationState} else OperationState.ADMITTED
    )
    resumed = op.model_copy(
        update={
            "state": resumed_state,
            "version": op.version + 1,
            "attempt": op.attempt + 1,
            "lease_until": now + lease_seconds(),
            "updated_at": now,
        }
    )
    try:
        resumed = workspace.resume(op, resumed, resumed.lease_until)
    except ClaimLost:
        current = workspace.get_operation(op.tenant, op.workspace, op.operation_id)
        if current is None:
            raise
        return current
    _start(resumed)
    return resumed


def _new_operation(
    tenant: str,
    workspace_id: str,
    installation_id: str,
    operation_id: str,
    action: Action,
    body: InstallRequest | ChangeRequest,
    request: dict[str, Any],
    now: int,
    view: AdmissionView,
) -> Operation:
    current = view.installation
    live = current is not None and current.is_live
    note = None
    target: ReleaseRef | None = None
    permissions: list[dict[str, Any]] = []
    state = OperationState.ADMITTED
    outcome = None
    if action is Action.PUT:
        assert isinstance(body, InstallRequest)
        release = _usable(view.release, body.package, body.version)
        target, permissions = _ref(release), release.permissions
        if live and body.intent is Intent.CREATE_ONLY:
            raise StaleAuthority(f"installation {installation_id} already exists (intent create-only)")
        if live and current is not None and current.package != body.package:
            raise InvalidRequest(f"installation {installation_id} holds package {current.package}, not {body.package}")
        if not live:
            kind = OperationKind.INSTALL
        elif current is not None and current.release and current.release.manifest_digest == target.manifest_digest:
            kind = OperationKind.REPAIR
        else:
            kind = OperationKind.UPDATE
        intent, origin = body.intent, body.origin
        intent_subject: dict[str, Any] = {
            "package": body.package,
            "version": body.version,
            "scope": body.scope.model_dump(),
        }
    elif action is Action.DELETE:
        kind, intent, origin = OperationKind.UNINSTALL, Intent.INSTALL_OR_SELECT, body.origin
        intent_subject = {"uninstall": True}
        if not live:
            state, note = OperationState.SETTLED, "not_installed"
            outcome = Outcome(result="succeeded", code="not_installed")
    else:
        kind, intent, origin = OperationKind.ROLLBACK, Intent.INSTALL_OR_SELECT, body.origin
        if not live or current is None:
            raise NotFound(f"installation {installation_id} not found in workspace {workspace_id}")
        if current.previous is None:
            raise ReleaseUnavailable(f"installation {installation_id} has no previous release to roll back to")
        release = _usable(view.release, current.previous.package, current.previous.version)
        target, permissions = _ref(release), release.permissions
        intent_subject = {"rollback": target.version}
    return Operation(
        tenant=tenant,
        workspace=workspace_id,
        operation_id=operation_id,
        installation_id=installation_id,
        action=action,
        kind=kind,
        state=state,
        version=1,
        request_digest="",
        intent_digest=_digest({"installationId": installation_id, **intent_subject}),
        intent=intent,
        origin=origin,
        request=request,
        baseline=current,
        target=target,
        target_permissions=permissions,
        outcome=outcome,
        note=note,
        lease_until=now + lease_seconds(),
        created_at=now,
        updated_at=now,
        settled_at=now if state is OperationState.SETTLED else None,
    )


def _usable(release: Release | None, package: str, version: str) -> Release:
    if release is None:
        raise ReleaseUnavailable(f"{package}@{version} is not published")
    if release.status is not ReleaseStatus.PUBLISHED:
        raise ReleaseUnavailable(f"{package}@{version} is {release.status}")
    return release


def _ref(release: Release) -> ReleaseRef:
    return ReleaseRef(
        package=release.package,
        version=release.version,
        manifest_digest=release.manifest_digest,
        archive_sha256=release.archive_sha256,
        archive_size=release.archive_size,
    )


def _check_version(current: Installation | None, expected: int | None, op: Operation) -> None:
    """Changing an existing installation needs If-Match with its version."""
    live = current is not None and current.is_live
    if live and expected is None and op.state is not OperationState.SETTLED:
        raise VersionRequired(
            f"installation {op.installation_id} exists: send If-Match with its version",
            actual=current.version if current else None,
        )
    if expected is not None:
        actual = current.version if current else None
        if actual != expected:
            raise VersionConflict(
                f"installation {op.installation_id} is at version {actual}, not {expected}",
                expected=expected,
                actual=actual,
            )


def _check_limits(view: AdmissionView, op: Operation) -> None:
    if op.kind is not OperationKind.INSTALL:
        return
    bounds = limits()
    if view.workspace_count >= bounds.max_installations_per_workspace:
        raise LimitExceeded(
            f"workspace {op.workspace} has {view.workspace_count} installations "
            f"(limit {bounds.max_installations_per_workspace})",
            limit=bounds.max_installations_per_workspace,
        )
    scope = InstallRequest.model_validate(op.request["body"]).scope
    if scope.kind is ScopeKind.TASK and view.task_count >= bounds.max_installations_per_task:
        raise LimitExceeded(
            f"task {scope.id} has {view.task_count} installations (limit {bounds.max_installations_per_task})",
            limit=bounds.max_installations_per_task,
        )


def _check_preview(body: InstallRequest | ChangeRequest, op: Operation) -> None:
    if body.plan_digest is None:
        return
    plan = compute_plan(op, op.operation_id, op.created_at)
    if plan_digest(plan) != body.plan_digest:
        raise PlanChanged("the release or the installation changed since the preview", planDigest=plan_digest(plan))


def _blocker(slot: Slot | None, op: Operation, now: int) -> OperationInProgress | None:
    if slot is None or slot.operation_id is None or slot.operation_id == op.operation_id:
        return None
    retry_after = max(1, slot.lease_until - now)
    error = OperationInProgress(
        f"operation {slot.operation_id} is in flight on installation {op.installation_id}",
        operationId=slot.operation_id,
        retryAfter=retry_after,
    )
    error.headers = {"Retry-After": str(retry_after)}  # type: ignore[attr-defined]
    return error


def _superseded_outcome(superseding: str | None, installation: Installation | None, by: str) -> Outcome | None:
    """What the superseded operation settles as. If its commit already landed (the installation, checked at the
    baseline version in the same transaction, was last written by it), its change is in effect: it succeeded."""
    if superseding is None:
        return None
    if installation is not None and installation.last_operation_id == superseding:
        return Outcome(result="succeeded", detail=f"committed; settled by {by} after its worker stopped")
    return Outcome(result="unconfirmed", code="cancelled", detail=f"superseded by {by}")


def _supersedable(slot: Slot | None, op: Operation, now: int) -> str | None:
    """The holder may be superseded if it is pending, or its lease expired and it meant the same thing."""
    if slot is None or slot.operation_id is None or slot.operation_id == op.operation_id:
        return None
    if slot.pending or (slot.lease_until <= now and slot.intent_digest == op.intent_digest):
        return slot.operation_id
    return None


# ---- preview and planning --------------------------------------------------------------------------------------------


def compute_plan(op: Operation, operation_id: str, now: int) -> Installation:
    """The exact next installation: a pure function of the operation's baseline, target and request."""
    base = op.baseline
    version = (base.version if base else 0) + 1
    if op.kind is OperationKind.UNINSTALL:
        assert base is not None
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
    assert op.target is not None
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
    assert base is not None
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


def preview(
    tenant: str, workspace_id: str, installation_id: str, action: Action, body: InstallRequest | ChangeRequest
) -> dict[str, Any]:
    """The plan an operation would commit now, without side effects."""
    check_workspace_id(workspace_id)
    check_installation_id(installation_id)
    release_key = (body.package, body.version) if isinstance(body, InstallRequest) else None
    view = _read_view(tenant, workspace_id, installation_id, "preview", action, release_key, None)
    now = clock.now()
    op = _new_operation(
        tenant, workspace_id, installation_id, "preview", action, body, {"body": _body(body)}, now, view
    )
    if op.state is OperationState.SETTLED:
        return {"kind": str(op.kind), "note": op.note, "plan": None, "planDigest": None}
    plan = compute_plan(op, "preview", now)
    return {"kind": str(op.kind), "plan": plan.to_api(), "planDigest": plan_digest(plan)}


def _body(body: InstallRequest | ChangeRequest) -> dict[str, Any]:
    return body.model_dump(by_alias=True, mode="json", exclude_none=True)


def plan_task(tenant: str, workspace_id: str, operation_id: str) -> dict[str, Any]:
    """Record the plan once. A re-run returns the recorded plan; a different re-plan is stale authority."""
    op = _load(tenant, workspace_id, operation_id)
    if op.state in (OperationState.PLANNED, OperationState.COMMITTED):
        assert op.plan is not None
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
            "lease_until": now + lease_seconds(),
            "updated_at": now,
        }
    )
    workspace.transition(op, planned, ("SET leaseUntil = :lease", {":lease": planned.lease_until}))
    return {"version": planned.version, "plan": plan.model_dump(by_alias=True, mode="json")}


def commit_task(tenant: str, workspace_id: str, operation_id: str, planned_version: int) -> dict[str, Any]:
    """Compare-and-put the plan on the baseline version; an installation already equal to the plan is a replay."""
    op = _load(tenant, workspace_id, operation_id)
    if op.state in (OperationState.COMMITTED, OperationState.SETTLED):
        return {"version": op.version, "committed": True, "replay": True}
    if op.state is not OperationState.PLANNED or op.version != planned_version:
        raise ClaimLost(f"operation {operation_id} is {op.state} v{op.version}, not planned v{planned_version}")
    assert op.plan is not None
    now = clock.now()
    committed = op.model_copy(
        update={
            "state": OperationState.COMMITTED,
            "version": op.version + 1,
            "lease_until": now + lease_seconds(),
            "updated_at": now,
        }
    )
    conflict = workspace.commit(
        op,
        committed,
        op.plan,
        baseline_version=op.baseline.version if op.baseline else None,
        counts=_count_changes(op),
        lease_until=committed.lease_until,
    )
    if conflict is None:
        return {"version": committed.version, "committed": True}
    current = workspace.get_installation(tenant, workspace_id, op.installation_id)
    if current is not None and current.same_content(op.plan):
        # the row already equals the plan: an earlier attempt committed it. Record the transition only.
        workspace.transition(op, committed)
        return {"version": committed.version, "committed": True, "replay": True}
    if conflict.operation_changed or conflict.slot_lost:
        raise ClaimLost(f"operation {operation_id} lost its claim before commit")
    if conflict.limit_reached:
        raise LimitExceeded("installation limit reached while committing")
    raise StaleAuthority(
        f"installation {op.installation_id} moved from version "
        f"{op.baseline.version if op.baseline else None} to {current.version if current else None}"
    )


def _count_changes(op: Operation) -> list[tuple[str | None, int, int]]:
    """Live-installation counters: (task id or None for the workspace, delta, limit)."""
    bounds = limits()
    base = op.baseline if op.baseline and op.baseline.is_live else None
    plan = op.plan
    assert plan is not None
    changes: list[tuple[str | None, int, int]] = []

    def task_of(inst: Installation | None) -> str | None:
        return inst.scope.id if inst and inst.scope.kind is ScopeKind.TASK else None

    was_live, is_live = base is not None, plan.is_live
    if was_live != is_live:
        changes.append((None, 1 if is_live else -1, bounds.max_installations_per_workspace))
    old_task, new_task = task_of(base), task_of(plan if is_live else None)
    if old_task != new_task:
        if old_task:
            changes.append((old_task, -1, bounds.max_installations_per_task))
        if new_task:
            changes.append((new_task, 1, bounds.max_installations_per_task))
    return changes


# ---- settlement ------------------------------------------------------------------------------------------------------

# errorType (the exception class name Step Functions reports) → definitive refusal
REFUSALS: dict[str, type[PackyardError]] = {
    cls.__name__: cls for cls in (NeedsConsent, StaleAuthority, LimitExceeded, ReleaseUnavailable, PlanChanged)
}
TRANSIENT = ("TransientStoreError", "Lambda.", "States.Timeout", "States.HeartbeatTimeout")


def settle_task(
    tenant: str, workspace_id: str, installation_id: str, operation_id: str, error: dict[str, Any] | None
) -> dict[str, Any]:
    """Write the terminal outcome (or defer to pending on a transient failure) and free the slot."""
    op, slot = workspace.read_operation_and_slot(tenant, workspace_id, installation_id, operation_id)
    if op is None:
        raise NotFound(f"operation {operation_id} not found")
    if op.state is OperationState.SETTLED:
        return {"settled": True, "outcome": op.outcome.model_dump(exclude_none=True) if op.outcome else None}
    if op.state is OperationState.PENDING:
        # an earlier attempt of this settle already deferred it: deferring again would lose the phase it stopped in
        return {"settled": False, "pending": True, "phase": op.phase, "errorCode": op.error_code}
    now = clock.now()
    error_type = str((error or {}).get("Error", ""))
    if error_type == "ClaimLost":
        return {"settled": False, "reason": "claim_lost"}
    if error_type.startswith(TRANSIENT):
        return _defer(op, error_type, now)
    outcome, confirm = _outcome(op, error_type, error)
    settled = op.model_copy(
        update={
            "state": OperationState.SETTLED,
            "version": op.version + 1,
            "outcome": outcome,
            "settled_at": now,
            "updated_at": now,
        }
    )
    if not workspace.settle(op, settled, slot=slot, confirm_installation=confirm):
        settled = settled.model_copy(
            update={
                "outcome": Outcome(
                    result="unconfirmed",
                    code="outcome_unknown",
                    detail="the installation no longer matches the committed plan",
                )
            }
        )
        workspace.settle(op, settled, slot=slot, confirm_installation=None)
    metrics.add_metric(
        name=f"Operations{settled.outcome.result.title() if settled.outcome else ''}", unit="Count", value=1
    )
    logger.info("operation settled", extra={"operationId": operation_id, "outcome": outcome.result})
    return {"settled": True, "outcome": settled.outcome.model_dump(exclude_none=True) if settled.outcome else None}


def _outcome(op: Operation, error_type: str, error: dict[str, Any] | None) -> tuple[Outcome, tuple[int, str] | None]:
    if not error_type:
        if op.state is OperationState.COMMITTED and op.plan is not None:
            return Outcome(result="succeeded"), (op.plan.version, op.operation_id)
        return Outcome(result="unconfirmed", code="interrupted", detail=f"settled while {op.state}"), None
    refusal = REFUSALS.get(error_type)
    detail = caught_error_message(error, limit=500)
    if refusal is not None:
        return Outcome(result="refused", status=refusal.status, code=refusal.code, detail=detail), None
    code = "outcome_unknown" if op.state is OperationState.COMMITTED else "interrupted"
    return Outcome(result="unconfirmed", code=code, detail=f"{error_type}: {detail}"[:500]), None


def _defer(op: Operation, error_type: str, now: int) -> dict[str, Any]:
    deferred = op.model_copy(
        update={
            "state": OperationState.PENDING,
            "version": op.version + 1,
            "phase": str(op.state),
            "error_code": error_type[:120],
            "updated_at": now,
        }
    )
    workspace.defer(op, deferred, now)
    metrics.add_metric(name="OperationsDeferred", unit="Count", value=1)
    return {"settled": False, "pending": True, "phase": deferred.phase, "errorCode": deferred.error_code}


def _load(tenant: str, workspace_id: str, operation_id: str) -> Operation:
    op = workspace.get_operation(tenant, workspace_id, operation_id)
    if op is None:
        raise ClaimLost(f"operation {operation_id} does not exist")
    return op


# ---- reads ---------------------------------------------------------------------------------------------------------


def get_operation(tenant: str, workspace_id: str, operation_id: str) -> Operation:
    op = workspace.get_operation(tenant, check_workspace_id(workspace_id), operation_id)
    if op is None:
        raise NotFound(f"operation {operation_id} not found")
    return op
