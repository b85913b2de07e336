"""Commit: compare-and-put the recorded plan on the installation's baseline version, exactly once, and settle.

The commit's transaction also settles the operation ``succeeded`` and frees its slot: once the plan is on the
installation, nothing else decides the outcome, and a separate settlement was a second transaction over the same items
(docs/decisions.md, "Commit settles"). The commit then puts the ``Operation Settled`` change event itself and answers
``settled``, and the state machine ends there without running Settle (docs/decisions.md, "The commit tells its own
settlement"); a retry that finds the operation settled puts the event again (at least once). If the installation row
already equals the plan (an earlier attempt committed it and died), the commit is an exact replay: the operation's
transition is recorded and nothing is bumped twice.
"""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.metrics import MetricUnit

from packyard import clock
from packyard.config import limits
from packyard.errors import (
    ClaimLost,
    LimitExceeded,
    QuotaExceeded,
    ReleaseUnavailable,
    StaleAuthority,
    TransientStoreError,
)
from packyard.installations.models import Installation
from packyard.installations.scopes import ScopeKind
from packyard.observability import logger, metrics, tracer
from packyard.operations import settlement
from packyard.operations.models import OperationState, Outcome
from packyard.operations.timing import lease_until
from packyard.store import workspace

SUCCEEDED = Outcome(result="succeeded")

# a change of live-installation counters: (task id, or None for the workspace's own counter; delta; limit)
CounterChange = tuple[str | None, int, int]


@tracer.capture_method(capture_response=False)
def commit_task(
    tenant: str, workspace_id: str, operation_id: str, planned_version: int, installation_id: str
) -> dict[str, Any]:
    """Compare-and-put the plan on the baseline version and settle the operation ``succeeded`` in the same
    transaction (its Settle state then only tells it); an installation already equal to the plan is a replay.
    ``installation_id`` (the task's input) lets the operation, its slot and the workspace's counters be read in one
    request (an operation of another installation is not this task's: ClaimLost)."""
    logger.append_keys(tenant=tenant, workspace=workspace_id, operationId=operation_id)
    op, slot, legacy_bytes = workspace.read_for_commit(tenant, workspace_id, operation_id, installation_id)
    if op is None:
        raise ClaimLost(f"operation {operation_id} does not exist")
    if op.state is OperationState.SETTLED:
        # settled by an earlier try (which may have died before its event went out), or by the sweep
        settlement.tell_settled(op)
        return {"version": op.version, "committed": True, "replay": True, "settled": True}
    if op.state is OperationState.COMMITTED:  # committed by code before "Commit settles": Settle settles it
        return {"version": op.version, "committed": True, "replay": True, "settled": False}
    if op.state is not OperationState.PLANNED or op.version != planned_version or op.plan is None:
        raise ClaimLost(f"operation {operation_id} is {op.state} v{op.version}, not planned v{planned_version}")
    if op.consent is not None and op.consent.decision != "approve":
        # a plan that asked consent commits only once approved, whatever called this task
        raise ClaimLost(f"operation {operation_id} has no approval of its plan")
    plan = op.plan
    now = clock.now()
    settled = settlement.settled_as(op, SUCCEEDED, now)
    retiring = settlement.retiring(op, slot)
    if retiring is not None:
        # the installation's settled operation before this one starts its retention clock: idempotent, and right
        # whatever this commit meets (this operation settles either way, as the latest)
        workspace.retire(tenant, workspace_id, *retiring)
    held = hold_changes(op.baseline, plan)
    holds, let_go = held["holds"], held["let_go"]
    workspace.hold_before_commit(op, plan.version, holds)
    conflict = workspace.commit(
        op,
        settled,
        plan,
        baseline_version=op.baseline.version if op.baseline else None,
        counts=counter_changes(op.baseline, plan),
        lease_until=op.lease_until,
        bytes_change=(referenced_bytes_change(op.baseline, plan), limits().workspace_quota_bytes),
        legacy_bytes=legacy_bytes,
        holds=holds,
    )
    if conflict is None:
        workspace.let_go_after_commit(op, plan.version, let_go, now)
        written_settled = settled.state is OperationState.SETTLED  # what the transaction wrote decides the answer
        if written_settled:
            settlement.tell_settled(settled)  # after the settlement is committed
        metrics.add_metric(name="OperationsSucceeded", unit=MetricUnit.Count, value=1)
        logger.info("operation committed", extra={"installationVersion": plan.version, "outcome": "succeeded"})
        return {"version": settled.version, "committed": True, "settled": written_settled}
    if conflict.counters_moved:
        raise TransientStoreError("the workspace's counters moved while committing, retry")
    current = workspace.get_installation(tenant, workspace_id, op.installation_id)
    if current is not None and current.same_content(plan):
        # the row already equals the plan: an earlier attempt committed it. Record the transition (and renew the
        # slot's lease with the operation's, as the commit would have); Settle confirms it.
        committed = op.model_copy(
            update={
                "state": OperationState.COMMITTED,
                "version": op.version + 1,
                "lease_until": lease_until(now),
                "updated_at": now,
            }
        )
        workspace.transition(op, committed, slot_lease=committed.lease_until)
        return {"version": committed.version, "committed": True, "replay": True, "settled": False}
    if conflict.operation_changed or conflict.slot_lost:
        raise ClaimLost(f"operation {operation_id} lost its claim before commit")
    if conflict.release_unavailable and plan.release is not None:
        raise ReleaseUnavailable(
            f"{plan.release.package}@{plan.release.version} is no longer available: yanked and its stored bytes "
            "reclaimed, or its stored bytes failed an integrity check"
        )
    if conflict.limit_reached:
        raise LimitExceeded("installation limit reached while committing")
    if conflict.quota_reached:
        raise QuotaExceeded(
            f"workspace {workspace_id} would reference more than {limits().workspace_quota_bytes} bytes",
            limitBytes=limits().workspace_quota_bytes,
        )
    raise StaleAuthority(
        f"installation {op.installation_id} moved from version "
        f"{op.baseline.version if op.baseline else None} to {current.version if current else None}"
    )


def counter_changes(baseline: Installation | None, plan: Installation) -> list[CounterChange]:
    """How the live-installation counters move when ``plan`` replaces ``baseline`` (pure). Archived and removed
    installations hold no place under the limits."""
    bounds = limits()
    base = baseline if baseline and baseline.holds_slot else None
    changes: list[CounterChange] = []
    was_live, is_live = base is not None, plan.holds_slot
    if was_live != is_live:
        changes.append((None, 1 if is_live else -1, bounds.max_installations_per_workspace))
    old_task, new_task = _task_of(base), _task_of(plan if is_live else None)
    if old_task != new_task:
        if old_task:
            changes.append((old_task, -1, bounds.max_installations_per_task))
        if new_task:
            changes.append((new_task, 1, bounds.max_installations_per_task))
    return changes


def _task_of(installation: Installation | None) -> str | None:
    return installation.scope.id if installation and installation.scope.kind is ScopeKind.TASK else None


def referenced_bytes(installation: Installation | None) -> int:
    """What an installation makes its workspace's runtimes load: its release's archive (none once removed)."""
    if installation is None or not installation.is_live or installation.release is None:
        return 0
    return installation.release.archive_size


def held_releases(installation: Installation | None) -> dict[tuple[str, str], bool]:
    """The releases an installation keeps from being reclaimed: its active release and its previous one (the
    rollback target), each (package, version) → whether it is the active one. A removed installation holds none:
    nothing runs it and it cannot be rolled back (a reinstall takes its previous back as a non-active hold)."""
    if installation is None or not installation.is_live:
        return {}
    held: dict[tuple[str, str], bool] = {}
    if installation.previous is not None:
        held[(installation.previous.package, installation.previous.version)] = False
    if installation.release is not None:
        held[(installation.release.package, installation.release.version)] = True
    return held


def hold_changes(baseline: Installation | None, plan: Installation) -> dict[str, Any]:
    """What ``plan`` replacing ``baseline`` starts and stops holding (pure): releases newly held (``holds``:
    package, version, active; an active one must still have its blobs, a yanked release whose blobs were given back
    cannot become active again) and releases let go (``let_go``). A release kept in either slot is neither."""
    before, after = held_releases(baseline), held_releases(plan)
    return {
        "holds": [
            (package, version, active)
            for (package, version), active in after.items()
            if (package, version) not in before
        ],
        "let_go": [release for release in before if release not in after],
    }


def referenced_bytes_change(baseline: Installation | None, plan: Installation) -> int:
    """How the workspace's referenced bytes move when ``plan`` replaces ``baseline`` (pure)."""
    return referenced_bytes(plan) - referenced_bytes(baseline)
