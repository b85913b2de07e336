"""Drafting: what operation a request is, decided on what admission read (pure: no I/O).

The kind follows from the action and the installation's state (install / update / repair for a PUT, uninstall,
rollback, archive, restore, promote); the origin is the principal's (a body may only lower it); the intent digest
says what the operation means, so a retry with another key that means the same thing may supersede a stale one.
"""

from __future__ import annotations

from typing import Any

from packyard.authority import Principal
from packyard.config import limits
from packyard.errors import (
    InputLimitExceeded,
    InvalidRequest,
    LimitExceeded,
    NotFound,
    PlanChanged,
    QuotaExceeded,
    ReleaseUnavailable,
    StaleAuthority,
    VersionConflict,
    VersionRequired,
)
from packyard.installations.models import Installation, InstallationStatus, ReleaseRef, plan_digest
from packyard.installations.scopes import ScopeKind, is_wider
from packyard.operations.models import (
    Action,
    ChangeRequest,
    InstallRequest,
    Intent,
    Operation,
    OperationKind,
    OperationState,
    Outcome,
    PromoteRequest,
    config_bytes,
)
from packyard.operations.planning import compute_plan
from packyard.operations.preconditions import digest
from packyard.operations.targets import release_ref, usable_release
from packyard.operations.timing import lease_until
from packyard.store.workspace import AdmissionView

OperationRequest = InstallRequest | ChangeRequest | PromoteRequest


def draft_operation(
    principal: Principal,
    workspace_id: str,
    installation_id: str,
    operation_id: str,
    action: Action,
    body: OperationRequest,
    request: dict[str, Any],
    now: int,
    view: AdmissionView,
) -> Operation:
    """The operation a request would be, decided on ``view``."""
    current = view.installation
    live = current is not None and current.is_live
    note: str | None = None
    target: ReleaseRef | None = None
    target_checked = True
    permissions: list[dict[str, Any]] = []
    state, outcome = OperationState.ADMITTED, None
    intent = Intent.INSTALL_OR_SELECT
    if action is Action.PUT:
        if not isinstance(body, InstallRequest):
            raise InvalidRequest("an install or update needs a body with package and version")
        if current is not None and body.intent is Intent.CREATE_ONLY:
            raise StaleAuthority(f"installation {installation_id} already exists as {current.status} (create-only)")
        release = usable_release(view.release, body.package, body.version)
        target, permissions = release_ref(release), release.permissions
        if live and current is not None and current.package != body.package:
            raise InvalidRequest(f"installation {installation_id} holds package {current.package}, not {body.package}")
        kind = _put_kind(current if live else None, target)
        intent = body.intent
        intent_subject: dict[str, Any] = {
            "package": body.package,
            "version": body.version,
            "scope": body.scope.model_dump(),
            "config": body.config,
        }
    elif action is Action.DELETE:
        kind, intent_subject = OperationKind.UNINSTALL, {"uninstall": True}
        if not live:
            state, note = OperationState.SETTLED, "not_installed"
            outcome = Outcome(result="succeeded", code="not_installed")
    else:
        existing = _live(current, installation_id, workspace_id)
        kind = OperationKind(action.value)
        if action is Action.ARCHIVE:
            _require_status(existing, InstallationStatus.ACTIVE, action)
        else:
            if action is not Action.ROLLBACK:
                _require_status(
                    existing,
                    InstallationStatus.ARCHIVED if action is Action.RESTORE else InstallationStatus.ACTIVE,
                    action,
                )
            target = target_of(existing, action)
            if view.release is not None:
                # read already (a preview): check it now; admission leaves it to planning (its read is free there)
                release = usable_release(view.release, target.package, target.version)
                target, permissions = release_ref(release), release.permissions
            else:
                target_checked = False
        intent_subject = {str(action): target.version if target else True}
        if isinstance(body, PromoteRequest):
            if not is_wider(body.scope.kind, existing.scope.kind):
                raise InvalidRequest(f"promote needs a scope wider than {existing.scope.kind}, not {body.scope.kind}")
            intent_subject["scope"] = body.scope.model_dump()
    return Operation(
        tenant=principal.tenant,
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
        origin=principal.origin(body.origin),
        request=request,
        baseline=current,
        target=target,
        target_permissions=permissions,
        target_checked=target_checked,
        outcome=outcome,
        note=note,
        lease_until=lease_until(now),
        created_at=now,
        updated_at=now,
        settled_at=now if state is OperationState.SETTLED else None,
        requested_by=principal.subject or None,
    )


def target_of(installation: Installation, action: Action) -> ReleaseRef:
    """The release a rollback (the previous one), a restore or a promote (the current one) runs with."""
    ref = installation.previous if action is Action.ROLLBACK else installation.release
    if ref is None:
        what = "a previous release to roll back to" if action is Action.ROLLBACK else "a release"
        raise ReleaseUnavailable(f"installation {installation.installation_id} has no {what}")
    return ref


def _put_kind(live: Installation | None, target: ReleaseRef) -> OperationKind:
    if live is None:
        return OperationKind.INSTALL
    if live.release and live.release.manifest_digest == target.manifest_digest:
        return OperationKind.REPAIR
    return OperationKind.UPDATE


def _live(current: Installation | None, installation_id: str, workspace_id: str) -> Installation:
    if current is None or not current.is_live:
        raise NotFound(f"installation {installation_id} not found in workspace {workspace_id}")
    return current


def _require_status(installation: Installation, status: InstallationStatus, action: Action) -> None:
    if installation.status is not status:
        raise StaleAuthority(
            f"installation {installation.installation_id} is {installation.status}: {action} needs it {status}"
        )


def check_version(current: Installation | None, expected: int | None, op: Operation) -> None:
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


def check_copied(op: Operation) -> None:
    """What the operation copies into its items within ``Limits`` (docs/architecture.md, "What one request may
    copy"): the install config, and the target's permissions (a release published before the bound was set)."""
    bounds = limits()
    body = op.request.get("body") if op.action is Action.PUT else None
    if isinstance(body, dict):
        size = config_bytes(body.get("config") or {})
        if size > bounds.max_config_bytes:
            raise InputLimitExceeded(
                f"config is {size} bytes as compact JSON, limit is {bounds.max_config_bytes} (max_config_bytes)",
                limit="max_config_bytes",
                maximum=bounds.max_config_bytes,
                actual=size,
            )
    if len(op.target_permissions) > bounds.max_permissions:
        raise InputLimitExceeded(
            f"the release declares {len(op.target_permissions)} permissions, limit is {bounds.max_permissions} "
            "(max_permissions)",
            limit="max_permissions",
            maximum=bounds.max_permissions,
            actual=len(op.target_permissions),
        )


def check_limits(view: AdmissionView, op: Operation) -> None:
    """An install, or a restore of an archived installation, takes a place under the workspace's (and its task's)
    installation limits; commit checks again in its transaction. Every kind: ``check_copied``."""
    check_copied(op)
    if op.kind not in (OperationKind.INSTALL, OperationKind.RESTORE):
        return
    bounds = limits()
    if view.workspace_count >= bounds.max_installations_per_workspace:
        raise LimitExceeded(
            f"workspace {op.workspace} has {view.workspace_count} installations "
            f"(limit {bounds.max_installations_per_workspace})",
            limit=bounds.max_installations_per_workspace,
        )
    if op.kind is not OperationKind.INSTALL:
        return
    scope = InstallRequest.model_validate(op.request["body"]).scope
    if scope.kind is ScopeKind.TASK and view.task_count >= bounds.max_installations_per_task:
        raise LimitExceeded(
            f"task {scope.id} has {view.task_count} installations (limit {bounds.max_installations_per_task})",
            limit=bounds.max_installations_per_task,
        )


def check_quota(view: AdmissionView, op: Operation) -> None:
    """The workspace may reference at most its quota of release bytes (what its runtimes load); commit checks again
    in its transaction."""
    if op.target is None:
        return
    base = op.baseline if op.baseline is not None and op.baseline.is_live else None
    growth = op.target.archive_size - (base.release.archive_size if base and base.release else 0)
    quota = limits().workspace_quota_bytes
    if growth > 0 and view.workspace_bytes + growth > quota:
        raise QuotaExceeded(
            f"workspace {op.workspace} references {view.workspace_bytes} bytes; {op.target.package}@"
            f"{op.target.version} would take it past its quota of {quota} bytes",
            usedBytes=view.workspace_bytes,
            limitBytes=quota,
            requestedBytes=growth,
        )


def check_preview(body: OperationRequest, op: Operation) -> None:
    """A request that names a plan digest (from a preview) is admitted only if it would still plan exactly that."""
    if body.plan_digest is None:
        return
    plan = compute_plan(op, op.operation_id, op.created_at)
    if plan_digest(plan) != body.plan_digest:
        raise PlanChanged("the release or the installation changed since the preview", planDigest=plan_digest(plan))
