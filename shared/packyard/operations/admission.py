"""Admission: record an operation exactly once per Idempotency-Key and claim its installation's in-flight slot.

Read, decide, write: one strongly consistent read of everything admission decides on (the operation, the
installation, its slot, the live counters, the target release), pure decisions, then one transaction that records
the operation and claims the slot (superseding its holder when the rule allows). On a conflict it starts over from
a fresh read. A replay of a known key costs that one read.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from aws_lambda_powertools.metrics import MetricUnit

from packyard import clock
from packyard.config import limits
from packyard.errors import (
    ClaimLost,
    IdempotencyKeyReused,
    InvalidRequest,
    LimitExceeded,
    NotFound,
    PlanChanged,
    ReleaseUnavailable,
    StaleAuthority,
    TransientStoreError,
    VersionConflict,
    VersionRequired,
)
from packyard.installations.models import (
    Installation,
    ReleaseRef,
    ScopeKind,
    check_installation_id,
    check_workspace_id,
    plan_digest,
)
from packyard.observability import logger, metrics, tracer
from packyard.operations import supersede, workflow
from packyard.operations.models import (
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
from packyard.operations.planning import compute_plan
from packyard.operations.preconditions import check_idempotency_key, digest, operation_id_for, parse_if_match
from packyard.operations.timing import lease_until, retained_until
from packyard.publishing.models import Release, ReleaseStatus
from packyard.store import catalog, workspace
from packyard.store.workspace import AdmissionView

ADMISSION_ATTEMPTS = 4


@tracer.capture_method(capture_response=False)
def admit(
    tenant: str,
    workspace_id: str,
    installation_id: str,
    action: Action,
    body: InstallRequest | ChangeRequest,
    *,
    idempotency_key: str | None,
    if_match: str | None,
) -> Operation:
    """The operation for this key: newly admitted (and its workflow started), or the one the key already names."""
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
    request_digest = digest(request)
    operation_id = operation_id_for(tenant, workspace_id, key)
    logger.append_keys(tenant=tenant, workspace=workspace_id, installationId=installation_id, operationId=operation_id)
    release_key = (body.package, body.version) if isinstance(body, InstallRequest) else None
    task_id = body.scope.id if isinstance(body, InstallRequest) and body.scope.kind is ScopeKind.TASK else None

    for _ in range(ADMISSION_ATTEMPTS):
        view = read_view(tenant, workspace_id, installation_id, operation_id, action, release_key, task_id)
        if view.operation is not None:
            return _replay(view.operation, request_digest)
        now = clock.now()
        op = draft_operation(tenant, workspace_id, installation_id, operation_id, action, body, request, now, view)
        op = op.model_copy(update={"request_digest": request_digest})
        _check_version(view.installation, expected_version, op)
        if op.state is OperationState.SETTLED:
            # nothing to change (uninstall of what is not installed): settled here, but still one per key
            blocked = supersede.blocker(view.slot, op, now)
            if blocked is not None:
                raise blocked
            conflict = workspace.admit(
                op,
                observed_slot=None,
                claimed_slot=None,
                baseline_version=None,
                superseding=None,
                now=now,
                retain_until=retained_until(now),
            )
            if conflict is None:
                logger.info("operation settled at admission", extra={"note": op.note})
                return op
            if conflict.existing_operation is not None:
                return _replay(conflict.existing_operation, request_digest)
            continue
        _check_limits(view, op)
        _check_preview(body, op)
        superseding = supersede.supersession(view.slot, op, view.installation, now)
        if superseding is None:
            blocked = supersede.blocker(view.slot, op, now)
            if blocked is not None:
                raise blocked
        else:
            op = op.model_copy(update={"supersedes": superseding.operation_id})
        conflict = workspace.admit(
            op,
            observed_slot=view.slot,
            claimed_slot=_claimed_slot(view.slot, op),
            baseline_version=view.installation.version if view.installation else None,
            superseding=superseding,
            now=now,
        )
        if conflict is None:
            metrics.add_metric(name="OperationsAdmitted", unit=MetricUnit.Count, value=1)
            logger.info("operation admitted", extra={"kind": str(op.kind), "supersedes": op.supersedes})
            workflow.start(op)
            return op
        if conflict.existing_operation is not None:
            return _replay(conflict.existing_operation, request_digest)
        # the slot or the installation moved between our read and our write: decide again on fresh state
    raise TransientStoreError("admission kept racing with other operations; retry with the same Idempotency-Key")


def _claimed_slot(observed: Slot | None, op: Operation) -> Slot:
    """The slot as ``op`` takes it: one more claim, its lease and intent, the last settled operation kept."""
    return Slot(
        operationId=op.operation_id,
        claim=(observed.claim + 1) if observed else 1,
        leaseUntil=op.lease_until,
        intentDigest=op.intent_digest,
        pending=False,
        lastSettled=observed.last_settled if observed else None,
        lastSettledAt=observed.last_settled_at if observed else None,
    )


def read_view(
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


def _replay(op: Operation, request_digest: str) -> Operation:
    if op.request_digest != request_digest:
        raise IdempotencyKeyReused(
            f"Idempotency-Key already used for a different request (operation {op.operation_id})",
            operationId=op.operation_id,
        )
    if op.state is OperationState.PENDING:
        return resume(op)
    if op.in_flight:
        # admission (or a resume) may have died between recording and starting: starting again is idempotent by
        # execution name, and a finished execution of that name is not run twice
        workflow.start(op)
    return op


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
            "lease_until": lease_until(now),
            "updated_at": now,
        }
    )
    try:
        resumed = workspace.transition(op, resumed, slot_lease=resumed.lease_until, slot_pending=False)
    except ClaimLost:
        current = workspace.get_operation(op.tenant, op.workspace, op.operation_id)
        if current is None:
            raise
        return current
    logger.info("operation resumed", extra={"phase": str(resumed_state), "attempt": resumed.attempt})
    workflow.start(resumed)
    return resumed


def draft_operation(
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
    """The operation a request would be, decided on ``view`` (pure: no I/O)."""
    current = view.installation
    live = current is not None and current.is_live
    note = None
    target: ReleaseRef | None = None
    permissions: list[dict[str, Any]] = []
    state = OperationState.ADMITTED
    outcome = None
    if action is Action.PUT:
        if not isinstance(body, InstallRequest):
            raise InvalidRequest("an install or update needs a body with package and version")
        release = usable_release(view.release, body.package, body.version)
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
        release = usable_release(view.release, current.previous.package, current.previous.version)
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
        intent_digest=digest({"installationId": installation_id, **intent_subject}),
        intent=intent,
        origin=origin,
        request=request,
        baseline=current,
        target=target,
        target_permissions=permissions,
        outcome=outcome,
        note=note,
        lease_until=lease_until(now),
        created_at=now,
        updated_at=now,
        settled_at=now if state is OperationState.SETTLED else None,
    )


def usable_release(release: Release | None, package: str, version: str) -> Release:
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
