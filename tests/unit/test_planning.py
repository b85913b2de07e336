"""compute_plan: the exact next installation an operation commits, as a pure function of baseline, target and request.

Tables build the domain models directly (no store, no mocks): one row per kind of change, then the rules that cut
across kinds (version and authorship, grants and their generation, consent, instance ids, stale authority).
"""

from __future__ import annotations

import re
from typing import Any

import pytest

from packyard.errors import NeedsConsent, StaleAuthority
from packyard.installations.grants import Grant
from packyard.installations.models import Creation, Installation, InstallationStatus, ReleaseRef
from packyard.installations.scopes import Scope, ScopeKind
from packyard.operations.models import (
    Action,
    InstallRequest,
    Intent,
    Operation,
    OperationKind,
    OperationState,
)
from packyard.operations.planning import compute_plan

NOW = 1_700_000_000
OP_ID = "op-" + "a" * 32
OTHER_OP_ID = "op-" + "b" * 32
ACTIONS = {
    OperationKind.INSTALL: Action.PUT,
    OperationKind.UPDATE: Action.PUT,
    OperationKind.REPAIR: Action.PUT,
    OperationKind.UNINSTALL: Action.DELETE,
    OperationKind.ROLLBACK: Action.ROLLBACK,
}
WORKSPACE = Scope()
_CHANGES = (OperationKind.UNINSTALL, OperationKind.ROLLBACK)  # their body is a ChangeRequest
MINTED_ID = re.compile(r"^inst-[0-9a-f]{24}$")


def ref(version: str, package: str = "hello") -> ReleaseRef:
    return ReleaseRef(
        package=package,
        version=version,
        manifest_digest=f"sha256:manifest-{version}",
        archive_sha256=f"archive-{version}",
        archive_size=100,
    )


def task(task_id: str) -> Scope:
    return Scope(kind=ScopeKind.TASK, id=task_id)


def grant(kind: Any, resource: str = "*") -> Grant:
    return Grant(kind=kind, resource=resource)


def perm(kind: str, resource: str | None = None) -> dict[str, Any]:
    return {"kind": kind} if resource is None else {"kind": kind, "resource": resource}


def installation(
    *,
    version: int = 3,
    status: InstallationStatus = InstallationStatus.ACTIVE,
    release: ReleaseRef | None = None,
    previous: ReleaseRef | None = None,
    scope: Scope = WORKSPACE,
    grants: tuple[Grant, ...] = (),
    grant_generation: int = 1,
    config: dict[str, Any] | None = None,
    instance_id: str = "inst-baseline",
    creation: Creation = Creation.FRESH,
) -> Installation:
    return Installation(
        tenant="t-acme",
        workspace="ws-1",
        installation_id="hello-1",
        instance_id=instance_id,
        version=version,
        status=status,
        creation=creation,
        package="hello",
        release=release,
        previous=previous,
        scope=scope,
        grants=list(grants),
        grant_generation=grant_generation,
        config=config or {},
        last_operation_id="op-baseline",
        updated_at=NOW - 1000,
    )


def removed(**fields: Any) -> Installation:
    return installation(status=InstallationStatus.REMOVED, **fields)


def put_body(
    version: str = "2.0.0",
    *,
    scope: Scope = WORKSPACE,
    config: dict[str, Any] | None = None,
    intent: Intent | None = None,
) -> dict[str, Any]:
    body = InstallRequest(package="hello", version=version, scope=scope, config=config or {})
    if intent is not None:
        body = body.model_copy(update={"intent": intent})
    return body.model_dump(by_alias=True, mode="json", exclude_none=True)


def operation(
    kind: OperationKind,
    *,
    baseline: Installation | None = None,
    target: ReleaseRef | None = None,
    permissions: tuple[dict[str, Any], ...] = (),
    origin: str = "owner",
    body: dict[str, Any] | None = None,
    operation_id: str = OP_ID,
) -> Operation:
    request = {"body": body if body is not None else ({"origin": origin} if kind in _CHANGES else put_body())}
    return Operation(
        tenant="t-acme",
        workspace="ws-1",
        operation_id=operation_id,
        installation_id="hello-1",
        action=ACTIONS[kind],
        kind=kind,
        state=OperationState.ADMITTED,
        version=1,
        request_digest="r" * 64,
        intent_digest="i" * 64,
        origin=origin,  # type: ignore[arg-type]
        request=request,
        baseline=baseline,
        target=target,
        target_permissions=list(permissions),
        lease_until=NOW + 900,
        created_at=NOW,
        updated_at=NOW,
    )


V1, V2, V09 = ref("1.0.0"), ref("2.0.0"), ref("0.9.0")

# id, operation, the fields of the plan the row is about
KIND_CASES = [
    pytest.param(
        operation(
            OperationKind.INSTALL,
            target=V2,
            permissions=(perm("api_read"),),
            body=put_body(scope=task("t1"), config={"greeting": "hi"}),
        ),
        {
            "version": 1,
            "status": InstallationStatus.ACTIVE,
            "creation": Creation.FRESH,
            "package": "hello",
            "release": V2,
            "previous": None,
            "scope": task("t1"),
            "config": {"greeting": "hi"},
            # granted up to the scope it was installed with: promoting it re-asks consent
            "grants": [grant("api_read").model_copy(update={"ceiling": ScopeKind.TASK})],
            "grant_generation": 1,
            "tenant": "t-acme",
            "workspace": "ws-1",
            "installation_id": "hello-1",
        },
        id="install fresh: version 1, active, scope and config from the body, no previous",
    ),
    pytest.param(
        operation(
            OperationKind.INSTALL,
            baseline=removed(version=4, previous=V1, instance_id="inst-old", config={"old": True}),
            target=V2,
            body=put_body(config={"new": True}),
        ),
        {
            "version": 5,
            "status": InstallationStatus.ACTIVE,
            "creation": Creation.REPLACEMENT,
            "instance_id": "inst-old",
            "release": V2,
            "previous": V1,
            "config": {"new": True},
        },
        id="install over a removed row: replacement keeps the instance id and the retained previous",
    ),
    pytest.param(
        operation(
            OperationKind.INSTALL,
            baseline=removed(version=4, previous=V1, instance_id="inst-old"),
            target=V2,
            body=put_body(intent=Intent.INSTALL_OR_REMINT),
        ),
        {"version": 5, "status": InstallationStatus.ACTIVE, "creation": Creation.REMINTED, "previous": V1},
        id="install-or-remint over a removed row: reminted",
    ),
    pytest.param(
        operation(
            OperationKind.UPDATE,
            baseline=installation(release=V1, previous=V09, config={"old": 1}, instance_id="inst-keep"),
            target=V2,
            body=put_body(scope=task("t2"), config={"new": 2}),
        ),
        {
            "version": 4,
            "status": InstallationStatus.ACTIVE,
            "creation": Creation.FRESH,
            "instance_id": "inst-keep",
            "release": V2,
            "previous": V1,
            "scope": task("t2"),
            "config": {"new": 2},
        },
        id="update: previous is the old release, scope and config from the body, identity kept",
    ),
    pytest.param(
        operation(
            OperationKind.REPAIR,
            baseline=installation(release=V1, previous=V09, config={"old": 1}, instance_id="inst-keep"),
            target=V1,
            body=put_body("1.0.0", scope=task("t3"), config={"fixed": True}),
        ),
        {
            "version": 4,
            "status": InstallationStatus.ACTIVE,
            "instance_id": "inst-keep",
            "release": V1,
            "previous": V09,
            "scope": task("t3"),
            "config": {"fixed": True},
        },
        id="repair: same release, previous untouched, scope and config from the body",
    ),
    pytest.param(
        operation(
            OperationKind.ROLLBACK,
            baseline=installation(release=V2, previous=V1, scope=task("t1"), config={"k": "v"}),
            target=V1,
        ),
        {
            "version": 4,
            "status": InstallationStatus.ACTIVE,
            "release": V1,
            "previous": V2,
            "scope": task("t1"),
            "config": {"k": "v"},
        },
        id="rollback: previous is the release rolled back from, scope and config kept",
    ),
    pytest.param(
        operation(
            OperationKind.UNINSTALL,
            baseline=installation(
                release=V2, previous=V1, scope=task("t1"), grants=(grant("state"),), grant_generation=7
            ),
        ),
        {
            "version": 4,
            "status": InstallationStatus.REMOVED,
            "release": None,
            "previous": V2,
            "scope": task("t1"),
            "instance_id": "inst-baseline",
            "grants": [grant("state")],
            "grant_generation": 7,
        },
        id="uninstall: removed, no release, previous is the old release, the rest kept",
    ),
    pytest.param(
        operation(OperationKind.UNINSTALL, baseline=removed(release=None, previous=V1)),
        {"version": 4, "status": InstallationStatus.REMOVED, "release": None, "previous": V1},
        id="uninstall of a row without a release: previous stays the retained one",
    ),
]


@pytest.mark.parametrize(("op", "expected"), KIND_CASES)
def test_given_an_operation_kind_when_planned_then_the_plan_has_that_kinds_fields(op, expected):
    plan = compute_plan(op, OP_ID, NOW)

    assert {field: getattr(plan, field) for field in expected} == expected


@pytest.mark.parametrize("op", [pytest.param(case.values[0], id=case.id) for case in KIND_CASES])
def test_given_any_kind_when_planned_then_version_is_baseline_plus_one_written_by_the_operation_now(op):
    plan = compute_plan(op, "op-the-argument", NOW + 5)

    expected_version = (op.baseline.version if op.baseline else 0) + 1
    assert (plan.version, plan.last_operation_id, plan.updated_at) == (expected_version, "op-the-argument", NOW + 5)


LIVE: dict[str, Any] = {"release": V1, "grants": (grant("api_read"), grant("state")), "grant_generation": 5}


@pytest.mark.parametrize(
    ("op", "grants", "generation"),
    [
        pytest.param(operation(OperationKind.INSTALL, target=V1), [], 1, id="fresh install, nothing declared: gen 1"),
        pytest.param(
            operation(OperationKind.INSTALL, target=V1, permissions=(perm("state"), perm("api_read"))),
            [grant("api_read"), grant("state")],
            1,
            id="fresh install by the owner: exactly what is declared, gen 1",
        ),
        pytest.param(
            operation(
                OperationKind.UPDATE,
                baseline=installation(**LIVE),
                target=V2,
                permissions=(perm("state"), perm("api_read"), perm("api_read", "*")),
            ),
            [grant("api_read"), grant("state")],
            5,
            id="owner update declaring the same set (any order, duplicates): gen unchanged",
        ),
        pytest.param(
            operation(
                OperationKind.UPDATE,
                baseline=installation(**LIVE),
                target=V2,
                permissions=(perm("api_read"), perm("state"), perm("network", "example.com")),
            ),
            [grant("api_read"), grant("network", "example.com"), grant("state")],
            6,
            id="owner update widening: granted, gen + 1",
        ),
        pytest.param(
            operation(OperationKind.UPDATE, baseline=installation(**LIVE), target=V2, permissions=(perm("api_read"),)),
            [grant("api_read")],
            6,
            id="owner update narrowing: dropped, gen + 1",
        ),
        pytest.param(
            operation(
                OperationKind.UPDATE,
                baseline=installation(**LIVE),
                target=V2,
                permissions=(perm("api_read"),),
                origin="workflow",
            ),
            [grant("api_read")],
            6,
            id="workflow update narrowing: keeps the still-declared grant, gen + 1",
        ),
        pytest.param(
            operation(
                OperationKind.UPDATE,
                baseline=installation(**LIVE),
                target=V2,
                permissions=(perm("api_read"), perm("state")),
                origin="workflow",
            ),
            [grant("api_read"), grant("state")],
            5,
            id="workflow update declaring exactly what is granted: gen unchanged",
        ),
        pytest.param(
            operation(
                OperationKind.REPAIR,
                baseline=installation(**LIVE),
                target=V1,
                permissions=(perm("api_read"), perm("state")),
                body=put_body("1.0.0"),
            ),
            [grant("api_read"), grant("state")],
            5,
            id="repair with unchanged grants: gen unchanged",
        ),
        pytest.param(
            operation(
                OperationKind.ROLLBACK,
                baseline=installation(**{**LIVE, "release": V2, "previous": V1}),
                target=V1,
                permissions=(perm("api_read"),),
            ),
            [grant("api_read")],
            6,
            id="rollback to a release declaring less: narrowed, gen + 1",
        ),
        pytest.param(
            operation(OperationKind.UNINSTALL, baseline=installation(**LIVE), origin="workflow"),
            [grant("api_read"), grant("state")],
            5,
            id="uninstall (even by a workflow): grants and gen kept, no consent",
        ),
    ],
)
def test_given_declared_permissions_when_planned_then_grants_and_generation_follow(op, grants, generation):
    plan = compute_plan(op, OP_ID, NOW)

    assert (plan.grants, plan.grant_generation) == (grants, generation)


@pytest.mark.parametrize(
    ("op", "permissions"),
    [
        pytest.param(
            operation(OperationKind.INSTALL, target=V1, permissions=(perm("api_read"),), origin="workflow"),
            [{"kind": "api_read", "resource": "*"}],
            id="workflow fresh install declaring anything",
        ),
        pytest.param(
            operation(
                OperationKind.UPDATE,
                baseline=installation(**LIVE),
                target=V2,
                permissions=(perm("state"), perm("network", "example.com"), perm("events"), perm("api_read")),
                origin="workflow",
            ),
            [{"kind": "events", "resource": "*"}, {"kind": "network", "resource": "example.com"}],
            id="workflow update widening: only the ungranted ones, sorted",
        ),
        pytest.param(
            operation(
                OperationKind.INSTALL,
                baseline=removed(grants=(grant("api_read"),)),
                target=V1,
                permissions=(perm("api_read"),),
                origin="workflow",
            ),
            [{"kind": "api_read", "resource": "*"}],
            id="workflow reinstall: a removed row's grants count for nothing",
        ),
        pytest.param(
            operation(
                OperationKind.ROLLBACK,
                baseline=installation(release=V2, previous=V1, grants=(grant("api_read"),)),
                target=V1,
                permissions=(perm("api_read"), perm("api_write")),
                origin="workflow",
            ),
            [{"kind": "api_write", "resource": "*"}],
            id="workflow rollback to a release declaring more",
        ),
    ],
)
def test_given_a_workflow_origin_when_the_release_widens_grants_then_needs_consent_lists_them(op, permissions):
    with pytest.raises(NeedsConsent) as refused:
        compute_plan(op, OP_ID, NOW)

    assert refused.value.extra == {"permissions": permissions}
    assert (refused.value.status, refused.value.code) == (403, "needs_consent")
    assert f"{op.target.package}@{op.target.version}" in refused.value.detail


@pytest.mark.parametrize(
    ("op", "needle"),
    [
        pytest.param(
            operation(OperationKind.UNINSTALL), "needs an existing installation", id="uninstall without a baseline"
        ),
        pytest.param(
            operation(OperationKind.INSTALL, target=None), "has no target release", id="install without a target"
        ),
        pytest.param(
            operation(OperationKind.UPDATE, baseline=installation(release=V1), target=None),
            "has no target release",
            id="update without a target",
        ),
        pytest.param(
            operation(OperationKind.UPDATE, target=V2), "needs an existing installation", id="update without baseline"
        ),
        pytest.param(
            operation(OperationKind.REPAIR, target=V1), "needs an existing installation", id="repair without baseline"
        ),
        pytest.param(
            operation(OperationKind.ROLLBACK, target=V1),
            "needs an existing installation",
            id="rollback without baseline",
        ),
    ],
)
def test_given_an_operation_missing_its_baseline_or_target_when_planned_then_stale_authority(op, needle):
    with pytest.raises(StaleAuthority, match=needle):
        compute_plan(op, OP_ID, NOW)


def _install(operation_id: str = OP_ID, *, intent: Intent | None = None, baseline: Installation | None = None):
    return operation(
        OperationKind.INSTALL, baseline=baseline, target=V1, body=put_body(intent=intent), operation_id=operation_id
    )


REMINT_BASE = removed(instance_id="inst-old")


@pytest.mark.parametrize(
    ("first", "second", "same"),
    [
        pytest.param(_install(), _install(), True, id="fresh: the same operation mints the same id"),
        pytest.param(_install(), _install(OTHER_OP_ID), False, id="fresh: another operation mints another id"),
        pytest.param(
            _install(intent=Intent.INSTALL_OR_REMINT, baseline=REMINT_BASE),
            _install(intent=Intent.INSTALL_OR_REMINT, baseline=REMINT_BASE),
            True,
            id="reminted: the same operation mints the same id",
        ),
        pytest.param(
            _install(intent=Intent.INSTALL_OR_REMINT, baseline=REMINT_BASE),
            _install(OTHER_OP_ID, intent=Intent.INSTALL_OR_REMINT, baseline=REMINT_BASE),
            False,
            id="reminted: another operation mints another id",
        ),
    ],
)
def test_given_a_minting_install_when_planned_twice_then_the_instance_id_depends_only_on_the_operation_id(
    first, second, same
):
    one, two = compute_plan(first, OP_ID, NOW), compute_plan(second, OP_ID, NOW + 60)

    assert MINTED_ID.match(one.instance_id) and MINTED_ID.match(two.instance_id)
    assert one.instance_id != "inst-old"
    assert (one.instance_id == two.instance_id) is same
