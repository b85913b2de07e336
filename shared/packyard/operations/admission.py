"""Admission: record an operation exactly once per Idempotency-Key and claim its installation's in-flight slot.

Read, decide, write: one strongly consistent read of everything admission decides on (the operation, the
installation, its slot, the live counters, the target release), pure decisions, then one transaction that records
the operation and claims the slot (superseding its holder when the rule allows). On a conflict it starts over from
a fresh read. A replay of a known key costs that one read.
"""

from __future__ import annotations

from dataclasses import replace

from aws_lambda_powertools.metrics import MetricUnit

from packyard import clock
from packyard.authority import Principal
from packyard.errors import ClaimLost, IdempotencyKeyReused, TransientStoreError
from packyard.installations.models import check_installation_id, check_workspace_id
from packyard.installations.scopes import ScopeKind
from packyard.observability import logger, metrics, tracer
from packyard.operations import supersede, workflow
from packyard.operations.drafting import (
    OperationRequest,
    check_limits,
    check_preview,
    check_quota,
    check_version,
    draft_operation,
)
from packyard.operations.models import Action, InstallRequest, Operation, OperationState, Slot, Supersession
from packyard.operations.preconditions import check_idempotency_key, digest, operation_id_for, parse_if_match
from packyard.operations.targets import checked_target
from packyard.operations.timing import lease_until, retained_until
from packyard.store import catalog, workspace
from packyard.store.workspace import AdmissionView

ADMISSION_ATTEMPTS = 4


@tracer.capture_method(capture_response=False)
def admit(
    principal: Principal,
    workspace_id: str,
    installation_id: str,
    action: Action,
    body: OperationRequest,
    *,
    idempotency_key: str | None,
    if_match: str | None,
) -> Operation:
    """The operation for this key: newly admitted (and its workflow started), or the one the key already names."""
    tenant = principal.tenant
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
        if read_installation_behind(view):
            continue  # read again: the installation's version must be the one the slot's claim stands for
        now = clock.now()
        op = draft_operation(principal, workspace_id, installation_id, operation_id, action, body, request, now, view)
        op = op.model_copy(update={"request_digest": request_digest})
        if body.plan_digest is not None and not op.target_checked and op.target is not None:
            # "this plan or nothing" needs the plan now, so the release it would run is read now
            op = checked_target(op, catalog.find_release(tenant, op.target.package, op.target.version))
        check_version(view.installation, expected_version, op)
        if op.state is not OperationState.SETTLED:
            check_limits(view, op)
            check_quota(view, op)
            check_preview(body, op)
        superseding = supersede.supersession(view.slot, op, view.installation, now)
        if superseding is None:
            blocked = supersede.blocker(view.slot, op, now)
            if blocked is not None:
                raise blocked
        else:
            op = op.model_copy(update={"supersedes": superseding.operation_id})
        settled_here = op.state is OperationState.SETTLED
        conflict = workspace.admit(
            op,
            observed_slot=view.slot,
            claimed_slot=_freed_slot(view.slot, superseding, now) if settled_here else _claimed_slot(view.slot, op),
            superseding=superseding,
            now=now,
            retain_until=retained_until(now) if settled_here else None,
        )
        if conflict is None:
            if settled_here:
                # nothing to change (uninstall of what is not installed): settled here, but still one per key
                logger.info("operation settled at admission", extra={"note": op.note, "supersedes": op.supersedes})
                return op
            metrics.add_metric(name="OperationsAdmitted", unit=MetricUnit.Count, value=1)
            logger.info("operation admitted", extra={"kind": str(op.kind), "supersedes": op.supersedes})
            workflow.start(op)
            return op
        if conflict.existing_operation is not None:
            return _replay(conflict.existing_operation, request_digest)
        # the slot or the installation moved between our read and our write: decide again on fresh state
    raise TransientStoreError("admission kept racing with other operations; retry with the same Idempotency-Key")


def _freed_slot(observed: Slot | None, superseding: Supersession | None, now: int) -> Slot | None:
    """An operation settled at admission takes no slot; if it superseded the holder, the slot is freed with the
    holder recorded as the last settled operation."""
    if superseding is None or observed is None:
        return None
    return Slot(
        claim=observed.claim + 1,
        lastSettled=superseding.operation_id,
        lastSettledAt=now,
        installationVersion=observed.installation_version,
    )


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
        installationVersion=observed.installation_version if observed else 0,
    )


def read_installation_behind(view: AdmissionView) -> bool:
    """Whether the view's installation was read before a commit its slot was read after (a BatchGetItem reads item
    by item, not as one snapshot): the slot records the version that commit left. The claim on the slot fences
    every commit after the read, so this is the one stale read the admission's write would not catch."""
    recorded = view.slot.installation_version if view.slot is not None else None
    return recorded is not None and (view.installation.version if view.installation else 0) < recorded


def read_view(
    tenant: str,
    workspace_id: str,
    installation_id: str,
    operation_id: str,
    action: Action,
    release_key: tuple[str, str] | None,
    task_id: str | None,
    *,
    with_installed_release: bool = False,
) -> AdmissionView:
    """What admission (or preview) decides on, in one read. The release of a rollback (the previous one), a restore
    or a promote (the current one) is known only once the installation is read: a preview reads it at once
    (``with_installed_release``); admission leaves it to the planning task, which reads it beside the operation."""
    view = workspace.read_for_admission(tenant, workspace_id, installation_id, operation_id, release_key, task_id)
    if not with_installed_release or view.operation is not None or view.installation is None:
        return view
    wanted = {
        Action.ROLLBACK: view.installation.previous,
        Action.RESTORE: view.installation.release,
        Action.PROMOTE: view.installation.release,
    }.get(action)
    if wanted is not None:
        view = replace(view, release=catalog.find_release(tenant, wanted.package, wanted.version))
    return view


def _replay(op: Operation, request_digest: str) -> Operation:
    if op.request_digest != request_digest:
        raise IdempotencyKeyReused(
            f"Idempotency-Key already used for a different request (operation {op.operation_id})",
            operationId=op.operation_id,
        )
    if op.state is OperationState.PENDING:
        return resume(op)
    if op.in_flight and op.lease_until <= clock.now():
        # past its lease no execution runs it (every start renews the lease, which outlasts an Express run): its
        # workflow ended without settling it (a lost Settle), and the same key takes it over as a new attempt
        phase = OperationState.PLANNED if op.state is OperationState.AWAITING_CONSENT else op.state
        return resume(op, phase)
    if op.state is OperationState.ADMITTED:
        # admission (or a resume) may have died between recording and starting: starting again is harmless (a
        # second run finds the operation claimed by the first and ends)
        workflow.start(op)
    return op


def resume(op: Operation, phase: OperationState | None = None) -> Operation:
    """A retry with the same key resumes a deferred (or abandoned) operation where it stopped (a new execution
    attempt)."""
    now = clock.now()
    resumed_state = phase or (
        OperationState(op.phase) if op.phase in {s.value for s in OperationState} else OperationState.ADMITTED
    )
    resumed = op.model_copy(
        update={
            "state": resumed_state,
            "version": op.version + 1,
            "attempt": op.attempt + 1,
            "runner": None,
            "lease_until": lease_until(now),
            "updated_at": now,
        }
    )
    try:
        # a wait for consent resumed past its deadline by its key plans again: its wait record goes with it (else the
        # approvals list would still show it, and a decision on it would find no operation waiting)
        resumed = workspace.transition(
            op,
            resumed,
            slot_lease=resumed.lease_until,
            slot_pending=False,
            drop_consent_wait=op.state is OperationState.AWAITING_CONSENT,
        )
    except ClaimLost:
        current = workspace.get_operation(op.tenant, op.workspace, op.operation_id)
        if current is None:
            raise
        return current
    logger.info("operation resumed", extra={"phase": str(resumed_state), "attempt": resumed.attempt})
    workflow.start(resumed)
    return resumed
