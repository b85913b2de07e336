"""Installation operations against a reference model: random install / update / uninstall / rollback requests,
same-key retries, crashes at any AWS call of any task, waits for an owner's consent (approved, rejected or timed
out), lease expiry and supersession, checked after every step.

The state machine is not used (its Retry waits and polling would dominate): ``workflows.start`` is replaced by a
recorder and the test plays Step Functions itself, calling the task handlers in-process in the order the ASL runs
them (Plan → [AwaitConsent] → Commit → Settle; an exception routes to Settle with ``$.error`` exactly as the Catch
would). A crash is ``devstack.faults.crash_after(k)``: the k-th AWS call's effect lands, then the task dies;
afterwards either Step Functions retries the same task or the Catch routes it to Settle with a transient error (the
operation is deferred to ``pending`` and a client retry with the same key resumes it).

Consent: when Plan answers ``needsConsent`` (an owner-origin plan that widens grants), the execution runs the
Consent task with a task token of its own (step ``consent``: planned → awaiting_consent, the CONSENT item holds the
token, the slot's lease becomes the consent deadline), then waits on that token (step ``approve``): an owner
approves or rejects the plan over HTTP (never crashed), and the execution resumes with whatever the service sent on
the token (``workflows.send_task_success`` / ``send_task_failure`` are recorded, then called: moto answers
InvalidToken for a token no real execution waits on, which the service swallows): success → ``$.plan`` → Commit;
failure → ``$.error`` → Settle. Or nobody decides: the clock jumps past the consent window and every waiting
execution times out (``States.Timeout`` → Settle).

One moto stack and three releases serve every example; each example works in a fresh workspace (everything an
operation touches, operations, installations, slots, consent waits and counters, is keyed by workspace, so examples
cannot see each other) and deletes it at teardown (moto copies the whole table on every transaction). The clock
(``packyard.clock.now``) is the model's: it only moves when a rule expires the leases (or the consent window). The
checks read the workspace's items from moto's table in-process, after every step; the code under test goes through
boto3 as always.

Checked after every step, from what is stored (not from the model):
* no lost operation: every key that was admitted still names its operation, with the request it was admitted for;
* the installation's version = the number of operations that committed a change (succeeded ones, plus the one in
  flight that already committed): never a double bump, never a bump without a succeeded operation;
* with nothing committed in flight, the installation is exactly the plan of the latest succeeded operation;
* at most one unsettled operation per installation, and the slot is held by it (free when there is none);
* a settled outcome never changes, and a replay of a settled key answers that same outcome;
* every admitted/planned/awaiting/committed operation has a live execution for its attempt (nothing is orphaned);
* the workspace's live-installation counter equals the number of live installations;
* an operation that asked consent never commits (nor is the installation's last writer) unless approved;
* a CONSENT item exists only for the installation's unsettled operation, while it awaits consent (with the same
  plan digest and deadline; the slot's lease is that deadline), and every operation awaiting consent has one;
  an execution waiting on a token waits on the one stored (or its operation was superseded);
and the stored operations (with their consent), installations, slots and consent waits equal the reference model's.

Why one module of ~1,500 lines: the reference model, the stateful machine that drives it and the regression
tests it found share one set of builders and invariants; splitting would scatter what the model asserts.
"""

from __future__ import annotations

import contextlib
import copy
import itertools
import json
import os
from dataclasses import dataclass, field, replace
from typing import Any

import boto3
import pytest
from hypothesis import HealthCheck, Phase, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule, run_state_machine_as_test
from moto.core import DEFAULT_ACCOUNT_ID
from moto.dynamodb.models import dynamodb_backends
from moto.dynamodb.models.dynamo_type import DynamoType

import devstack
from devstack import lambdas
from devstack.api import LocalApi
from devstack.caller import Caller
from devstack.faults import InjectedCrash, crash_after
from packyard import clock
from packyard.config import limits
from packyard.operations.preconditions import operation_id_for
from packyard.store import dynamo, workflows, workspace
from packyard_cli.build import build_from_files

TENANT = "t-model"
PACKAGE = "hello"
# version → declared permission kinds (1.1.0 widens 1.0.0; 1.2.0 declares none)
RELEASES: dict[str, frozenset[str]] = {
    "1.0.0": frozenset({"api_read"}),
    "1.1.0": frozenset({"api_read", "network"}),
    "1.2.0": frozenset(),
}
UNPUBLISHED = "9.9.9"
INSTALLATIONS = ("app", "tool")
# requests go to "app" twice as often: bugs need several steps on one installation, "tool" checks isolation
TARGETS = st.sampled_from(("app", "app", "tool"))
# the tasks make 2 AWS calls (a read, then the write transaction): crash before or after the write, or not at all
CRASH_POINTS = st.sampled_from((1, 2, 2, 3))
T0 = 1_900_000_000

IN_FLIGHT = ("admitted", "planned", "awaiting_consent", "committed")
TRANSIENT_ERROR = {
    "Error": "TransientStoreError",
    "Cause": json.dumps({"errorMessage": "injected: the task died (Lambda.Unknown / States.Timeout)"}),
}
# what Step Functions writes at $.error when a wait for the task token outlives TimeoutSecondsPath
CONSENT_TIMEOUT = {"Error": "States.Timeout", "Cause": "the consent window ended with no decision"}
# errorTypes Settle treats as transient (the operation is deferred), as settlement.TRANSIENT
TRANSIENT = ("TransientStoreError", "Lambda.", "States.Timeout", "States.HeartbeatTimeout")
REFUSALS = {
    "NeedsConsent": "needs_consent",
    "StaleAuthority": "stale_authority",
    "LimitExceeded": "limit_exceeded",
    "ReleaseUnavailable": "release_unavailable",
    "PlanChanged": "plan_changed",
    "ConsentRejected": "consent_rejected",
}
# what happens to a wait for consent: an owner approves or rejects the plan, or nobody decides within the window
DECISIONS = st.sampled_from(("approve", "approve", "approve", "reject", "no decision"))

# In `make test` the examples are the same every run (a fixed seed), so CI is reproducible. An exploring run draws
# new ones: PACKYARD_MODEL_RANDOM=1 PACKYARD_MODEL_EXAMPLES=500. Shrinking a failure replays examples for up to ~5
# minutes; PACKYARD_MODEL_SHRINK=0 reports the first failing sequence as found.
SETTINGS = settings(
    derandomize=os.environ.get("PACKYARD_MODEL_RANDOM") != "1",
    max_examples=int(os.environ.get("PACKYARD_MODEL_EXAMPLES", "120")),
    stateful_step_count=int(os.environ.get("PACKYARD_MODEL_STEPS", "30")),
    deadline=None,
    phases=[Phase.explicit, Phase.reuse, Phase.generate]
    + ([Phase.shrink] if os.environ.get("PACKYARD_MODEL_SHRINK", "1") != "0" else []),
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
    print_blob=True,
)


# ---- the reference model ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Req:
    """One HTTP request: PUT (install/update/repair), DELETE (uninstall) or POST …/rollback."""

    inst: str
    action: str  # put | delete | rollback
    version: str | None
    origin: str
    if_match: int | None
    key: str

    @property
    def signature(self) -> tuple[Any, ...]:
        """What the request digest covers: not the key, and not If-Match (a precondition, not part of the ask)."""
        return (self.inst, self.action, self.version, self.origin)

    def intent(self, target: str | None) -> tuple[str, ...]:
        """What the operation means (the slot's intent digest; a put's also covers scope and config, which the
        model never sends)."""
        if self.action == "put":
            return ("put", str(self.version))
        if self.action == "delete":
            return ("uninstall",)
        return ("rollback", str(target))


@dataclass(frozen=True)
class MInst:
    version: int
    live: bool
    release: str | None
    previous: str | None
    grants: frozenset[str]
    grant_generation: int
    last_op: str


@dataclass
class MOp:
    op_id: str
    key: str
    inst: str
    signature: tuple[Any, ...]
    kind: str
    origin: str
    state: str
    baseline: MInst | None
    target: str | None
    version: int = 1
    attempt: int = 0
    phase: str | None = None
    plan: MInst | None = None
    outcome: tuple[str, str | None] | None = None
    superseded_by: str | None = None
    committed: bool = False
    asked: frozenset[str] | None = None  # the permission kinds its plan asked consent for (None: asked none)
    decision: str | None = None  # approve | reject, once an owner decided

    def execution_name(self) -> str:
        return self.op_id if self.attempt == 0 else f"{self.op_id}-{self.attempt}"

    @property
    def needs_consent(self) -> bool:
        """Plan's ``needsConsent``: its plan asked consent and no one has decided yet."""
        return self.asked is not None and self.decision is None


@dataclass
class MSlot:
    holder: str | None = None
    pending: bool = False
    lease_until: int = 0
    intent: tuple[str, ...] | None = None


class TaskError(Exception):
    """What a task raises in the model: ``name`` is the errorType Step Functions would see."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.name = name


@dataclass
class Answer:
    status: int
    code: str | None = None
    op_id: str | None = None


@dataclass
class World:
    """What the store should hold, and which executions should have been started."""

    workspace: str
    now: int = T0
    insts: dict[str, MInst] = field(default_factory=dict)
    ops: dict[str, MOp] = field(default_factory=dict)
    slots: dict[str, MSlot] = field(default_factory=dict)
    waits: dict[str, str] = field(default_factory=dict)  # installation → operation its CONSENT item names
    started: dict[str, str] = field(default_factory=dict)  # execution name → operation id

    @property
    def lease(self) -> int:
        return limits().operation_lease_seconds

    @property
    def window(self) -> int:
        return limits().consent_window_seconds

    def slot(self, inst: str) -> MSlot:
        return self.slots.setdefault(inst, MSlot())

    def start(self, op: MOp) -> None:
        self.started.setdefault(op.execution_name(), op.op_id)

    # -- admission --

    def admit(self, req: Req) -> Answer:
        op_id = operation_id_for(TENANT, self.workspace, req.key)
        op = self.ops.get(op_id)
        if op is not None:
            if op.signature != req.signature:
                return Answer(422, "idempotency_key_reused", op_id)
            if op.state == "pending":
                self.resume(op)
            elif op.state in IN_FLIGHT:
                self.start(op)  # admission or a resume may have died before starting it: idempotent by name
            return Answer(200 if op.state == "settled" else 202, None, op_id)
        cur = self.insts.get(req.inst)
        live = cur is not None and cur.live
        settled_now = False
        target: str | None = None
        if req.action == "put":
            if req.version not in RELEASES:
                return Answer(409, "release_unavailable")
            target = req.version
            kind = "install" if not live else ("repair" if cur and cur.release == target else "update")
        elif req.action == "delete":
            kind, settled_now = "uninstall", not live
        else:
            if not live or cur is None:
                return Answer(404, "not_found")
            if cur.previous is None:
                return Answer(409, "release_unavailable")
            kind, target = "rollback", cur.previous
        if live and req.if_match is None and not settled_now:
            return Answer(428, "version_required")
        if req.if_match is not None and req.if_match != (cur.version if cur else None):
            return Answer(412, "version_conflict")
        slot = self.slot(req.inst)
        new = MOp(
            op_id=op_id,
            key=req.key,
            inst=req.inst,
            signature=req.signature,
            kind=kind,
            origin=req.origin,
            state="admitted",
            baseline=cur,
            target=target,
        )
        intent = req.intent(target)
        if slot.holder is not None:
            if not (slot.pending or (slot.lease_until <= self.now and slot.intent == intent)):
                return Answer(409, "operation_in_progress", slot.holder)
            old = self.ops[slot.holder]
            # superseded: an operation that already committed its change has succeeded (the row is its plan)
            old.outcome = ("succeeded", None) if old.committed else ("unconfirmed", "cancelled")
            old.state, old.superseded_by, old.version = "settled", op_id, old.version + 1
            self.waits.pop(req.inst, None)  # its consent wait (if any) goes with it
        if settled_now:
            # nothing to uninstall: settled here, taking no slot (a superseded holder's slot is freed)
            new.state, new.outcome = "settled", ("succeeded", "not_installed")
            self.ops[op_id] = new
            self.slots[req.inst] = MSlot()
            return Answer(200, None, op_id)
        self.slots[req.inst] = MSlot(holder=op_id, pending=False, lease_until=self.now + self.lease, intent=intent)
        self.ops[op_id] = new
        self.start(new)
        return Answer(202, None, op_id)

    def resume(self, op: MOp) -> None:
        op.state = op.phase if op.phase in IN_FLIGHT else "admitted"
        op.version += 1
        op.attempt += 1
        slot = self.slot(op.inst)
        slot.pending, slot.lease_until = False, self.now + self.lease
        self.start(op)

    # -- tasks --

    def compute_plan(self, op: MOp) -> MInst:
        base = op.baseline
        version = (base.version if base else 0) + 1
        if op.kind == "uninstall":
            assert base is not None
            return replace(
                base,
                version=version,
                live=False,
                release=None,
                previous=base.release or base.previous,
                last_op=op.op_id,
            )
        assert op.target is not None
        declared = RELEASES[op.target]
        current = base.grants if base is not None and base.live else frozenset()
        if op.origin == "workflow" and declared - current:
            raise TaskError("NeedsConsent")
        grants = declared if op.origin == "owner" else current & declared
        generation = (base.grant_generation if base else 0) + (0 if base is not None and base.grants == grants else 1)
        previous = {
            "install": base.previous if base else None,
            "update": base.release if base else None,
            "rollback": base.release if base else None,
            "repair": base.previous if base else None,
        }[op.kind]
        return MInst(version, True, op.target, previous, grants, generation, op.op_id)

    @staticmethod
    def consent_asked(op: MOp) -> frozenset[str]:
        """What an owner-origin plan must have approved: the kinds it declares beyond the live grants."""
        if op.origin != "owner" or op.target is None:
            return frozenset()
        base = op.baseline
        return RELEASES[op.target] - (base.grants if base is not None and base.live else frozenset())

    def plan_task(self, op_id: str) -> tuple[int, bool]:
        """The planning output the model expects: (version, needsConsent)."""
        op = self.ops[op_id]
        if op.state in ("planned", "committed"):
            return op.version, op.needs_consent
        if op.state != "admitted":
            raise TaskError("ClaimLost")
        plan = self.compute_plan(op)
        slot = self.slot(op.inst)
        if slot.holder != op_id:
            raise TaskError("ClaimLost")
        op.state, op.plan, op.version = "planned", plan, op.version + 1
        op.asked = self.consent_asked(op) or None
        slot.lease_until = self.now + self.lease
        return op.version, op.needs_consent

    def consent_task(self, op_id: str) -> None:
        """The Consent task: planned → awaiting_consent with the wait recorded and the slot held to the deadline;
        a retry (already awaiting) only names its new token."""
        op = self.ops[op_id]
        if not op.needs_consent or op.plan is None:
            raise TaskError("ClaimLost")
        if op.state == "awaiting_consent":
            return
        slot = self.slot(op.inst)
        if op.state != "planned" or slot.holder != op_id:
            raise TaskError("ClaimLost")
        op.state, op.version = "awaiting_consent", op.version + 1
        slot.lease_until = self.now + self.window
        self.waits[op.inst] = op_id

    def decide(self, op_id: str, decision: str) -> Answer:
        """An owner's decision on the plan ``op_id`` waits with (naming that operation)."""
        op = self.ops[op_id]
        if self.waits.get(op.inst) != op_id or op.state != "awaiting_consent":
            return Answer(409, "stale_authority")
        op.state, op.version, op.decision = "planned", op.version + 1, decision
        del self.waits[op.inst]
        # the decision is the operation's heartbeat: an ordinary lease again from now (not the consent deadline)
        self.slot(op.inst).lease_until = self.now + self.lease
        return Answer(200, None, op_id)

    def commit_task(self, op_id: str, planned_version: int) -> None:
        op = self.ops[op_id]
        if op.state in ("committed", "settled"):
            return
        if op.state != "planned" or op.version != planned_version:
            raise TaskError("ClaimLost")
        if op.asked is not None and op.decision != "approve":
            raise TaskError("ClaimLost")  # a plan that asked consent commits only once approved
        assert op.plan is not None
        cur = self.insts.get(op.inst)
        base_version = op.baseline.version if op.baseline else None
        slot = self.slot(op.inst)
        if (cur.version if cur else None) == base_version and slot.holder == op_id:
            self.insts[op.inst] = op.plan
            slot.lease_until = self.now + self.lease
        elif cur != op.plan:
            raise TaskError("ClaimLost" if slot.holder != op_id else "StaleAuthority")
        op.state, op.version, op.committed = "committed", op.version + 1, True

    def settle_task(self, op_id: str, error: str | None, attempt: int | None) -> None:
        op = self.ops[op_id]
        slot = self.slot(op.inst)
        if op.state == "settled" or error == "ClaimLost":
            return
        if attempt != op.attempt:
            return  # a retried Settle of an earlier attempt: the resumed operation is not its to settle
        if op.state == "pending":
            return  # a retried Settle finds it already deferred: it keeps the phase it stopped in
        waiting = op.state == "awaiting_consent"
        if op.decision == "reject":
            op.outcome = ("refused", "consent_rejected")
        elif waiting and error == "States.Timeout":
            op.outcome = ("refused", "consent_expired")
        elif error is not None and error.startswith(TRANSIENT):
            # a wait for consent resumes by planning again (the recorded plan asks consent again)
            op.phase = "planned" if waiting else op.state
            op.state, op.version = "pending", op.version + 1
            slot.pending, slot.lease_until = True, self.now
            if waiting:
                self.waits.pop(op.inst, None)
            return
        elif error is None:
            op.outcome = ("succeeded", None) if op.state == "committed" else ("unconfirmed", "interrupted")
        elif error in REFUSALS:
            op.outcome = ("refused", REFUSALS[error])
        else:
            op.outcome = ("unconfirmed", "outcome_unknown" if op.state == "committed" else "interrupted")
        op.state, op.version = "settled", op.version + 1
        if slot.holder == op_id:
            slot.holder, slot.pending = None, False
        if waiting and self.waits.get(op.inst) == op_id:
            del self.waits[op.inst]

    @property
    def live_count(self) -> int:
        return sum(1 for inst in self.insts.values() if inst.live)


# ---- what is stored ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SInst:
    """The fields of a stored installation (or of an operation's plan) that the checks compare."""

    version: int
    is_live: bool
    release: str | None
    previous: str | None
    grants: tuple[str, ...]
    grant_generation: int
    last_operation_id: str

    @classmethod
    def of(cls, values: dict[str, Any]) -> SInst:
        return cls(
            version=values["version"],
            is_live=values["status"] != "removed",
            release=(values.get("release") or {}).get("version"),
            previous=(values.get("previous") or {}).get("version"),
            grants=tuple(sorted(g["kind"] for g in values.get("grants", []))),
            grant_generation=values.get("grantGeneration", 0),
            last_operation_id=values["lastOperationId"],
        )


@dataclass(frozen=True)
class SOp:
    """The fields of a stored operation that the checks compare."""

    operation_id: str
    installation_id: str
    kind: str
    state: str
    version: int
    request_digest: str
    phase: str | None
    attempt: int
    outcome: tuple[str, str | None] | None
    superseded_by: str | None
    plan: SInst | None
    consent: dict[str, Any] | None

    def execution_name(self) -> str:
        return self.operation_id if self.attempt == 0 else f"{self.operation_id}-{self.attempt}"

    @property
    def asked(self) -> frozenset[str] | None:
        return frozenset(p["kind"] for p in self.consent["permissions"]) if self.consent else None

    @property
    def decision(self) -> str | None:
        return self.consent.get("decision") if self.consent else None

    @property
    def committed(self) -> bool:
        """Its change is in effect (or was, before a later operation's)."""
        return (
            self.state == "committed"
            or (self.state == "pending" and self.phase == "committed")
            or (self.outcome is not None and self.outcome[0] == "succeeded" and self.plan is not None)
        )


@dataclass
class Stored:
    ops: dict[str, SOp]
    insts: dict[str, SInst]
    slots: dict[str, dict[str, Any]]
    live_count: int
    waits: dict[str, dict[str, Any]] = field(default_factory=dict)  # installation → its CONSENT item


def workspace_items(stack: devstack.Stack, workspace_id: str) -> list[dict[str, Any]]:
    """Every item of the workspace's partition, read from moto's table in-process (test-only inspection: a Query
    through boto3 costs ~10 ms per operation item in moto's response serializer, ~100x this, and the checks run
    after every step). The code under test always goes through boto3."""
    table = dynamodb_backends[DEFAULT_ACCOUNT_ID][stack.region].get_table(stack.table_name)
    partition = table.items.get(DynamoType({"S": f"TENANT#{TENANT}#WS#{workspace_id}"}), {})
    return [dynamo.unmarshal(item.to_json()["Attributes"]) for item in partition.values()]


def read_stored(stack: devstack.Stack, workspace_id: str) -> Stored:
    stored = Stored({}, {}, {}, 0)
    for item in workspace_items(stack, workspace_id):
        kind, _, name = item["sk"].partition("#")
        if kind == "OP":
            outcome = item.get("outcome")
            stored.ops[name] = SOp(
                operation_id=name,
                installation_id=item["installationId"],
                kind=item["kind"],
                state=item["state"],
                version=item["version"],
                request_digest=item["requestDigest"],
                phase=item.get("phase"),
                attempt=item.get("attempt", 0),
                outcome=(outcome["result"], outcome.get("code")) if outcome else None,
                superseded_by=item.get("supersededBy"),
                plan=SInst.of(item["plan"]) if item.get("plan") else None,
                consent=item.get("consent"),
            )
        elif kind == "INST":
            stored.insts[name] = SInst.of(item)
        elif kind == "SLOT":
            stored.slots[name] = item
        elif kind == "CONSENT":
            stored.waits[name] = item
        elif item["sk"] == "COUNT#WORKSPACE":
            stored.live_count = int(item["n"])
    return stored


def clear_workspace(stack: devstack.Stack, workspace_id: str) -> None:
    ddb = boto3.client("dynamodb", region_name=stack.region)
    pages = ddb.get_paginator("query").paginate(
        TableName=stack.table_name,
        KeyConditionExpression="pk = :pk",
        ExpressionAttributeValues={":pk": {"S": f"TENANT#{TENANT}#WS#{workspace_id}"}},
        ProjectionExpression="pk, sk",
    )
    keys = [item for page in pages for item in page["Items"]]
    for start in range(0, len(keys), 25):
        ddb.batch_write_item(
            RequestItems={stack.table_name: [{"DeleteRequest": {"Key": k}} for k in keys[start : start + 25]]}
        )


def inst_view(inst: SInst | MInst | None) -> tuple[Any, ...] | None:
    if inst is None:
        return None
    if isinstance(inst, MInst):
        return (
            inst.version,
            inst.live,
            inst.release,
            inst.previous,
            tuple(sorted(inst.grants)),
            inst.grant_generation,
            inst.last_op,
        )
    return (
        inst.version,
        inst.is_live,
        inst.release,
        inst.previous,
        inst.grants,
        inst.grant_generation,
        inst.last_operation_id,
    )


def op_view(op: SOp | MOp) -> dict[str, Any]:
    return {
        "kind": op.kind,
        "state": op.state,
        "phase": op.phase if op.state == "pending" else None,
        "attempt": op.attempt,
        "outcome": op.outcome,
        "supersededBy": op.superseded_by,
        "plan": inst_view(op.plan),
        "consent": None if op.asked is None else (tuple(sorted(op.asked)), op.decision),
    }


def slot_view(slot: MSlot | dict[str, Any] | None) -> tuple[Any, ...]:
    if isinstance(slot, MSlot):
        if slot.holder is None:
            return (None,)
        return (slot.holder, slot.pending, slot.lease_until)
    if not slot or not slot.get("operationId"):
        return (None,)
    return (slot["operationId"], bool(slot.get("pending")), slot.get("leaseUntil"))


def differences(world: World, stored: Stored) -> list[str]:
    diffs = []
    for op_id in sorted(set(world.ops) | set(stored.ops)):
        want = op_view(world.ops[op_id]) if op_id in world.ops else None
        got = op_view(stored.ops[op_id]) if op_id in stored.ops else None
        if want != got:
            diffs.append(f"operation {op_id[:14]}: model {want} != stored {got}")
    for inst in INSTALLATIONS:
        want_i, got_i = inst_view(world.insts.get(inst)), inst_view(stored.insts.get(inst))
        if want_i != got_i:
            diffs.append(f"installation {inst}: model {want_i} != stored {got_i}")
        want_s, got_s = slot_view(world.slots.get(inst)), slot_view(stored.slots.get(inst))
        if want_s != got_s:
            diffs.append(f"slot {inst}: model {want_s} != stored {got_s}")
        want_w, got_w = world.waits.get(inst), stored.waits.get(inst, {}).get("operationId")
        if want_w != got_w:
            diffs.append(f"consent wait {inst}: model {want_w} != stored {got_w}")
    if world.live_count != stored.live_count:
        diffs.append(f"live installations: model {world.live_count} != counter {stored.live_count}")
    return diffs


# ---- playing Step Functions ---------------------------------------------------------------------------------------


@dataclass
class Execution:
    name: str
    op_id: str
    event: dict[str, Any]
    next: str = "plan"  # plan | consent | approve (waiting on its task token) | commit | settle | done
    token: str | None = None  # the task token of its Consent task's attempt that returned (what it waits on)
    tokens: int = 0


@dataclass(frozen=True)
class Delivery:
    """What the service sent on a task token: success (output) or failure (error, cause)."""

    token: str
    error: str | None
    payload: Any


class Harness:
    """The stack, the caller, the executions ``workflows.start`` was asked for (in order), and what was sent on
    task tokens (in order)."""

    def __init__(self, stack: devstack.Stack, caller: Caller) -> None:
        self.stack = stack
        self.caller = caller
        self.recorded: list[tuple[str, dict[str, Any]]] = []
        self.delivered: list[Delivery] = []
        self.now = T0
        # the real calls, made after recording: moto answers InvalidToken (no execution waits on a harness token)
        self.real_success = workflows.send_task_success
        self.real_failure = workflows.send_task_failure

    def start(self, arn: str, name: str, payload: dict[str, Any]) -> str:
        self.recorded.append((name, dict(payload)))
        return name

    def send_task_success(self, task_token: str, output: dict[str, Any]) -> bool:
        self.delivered.append(Delivery(task_token, None, json.loads(json.dumps(output))))
        return self.real_success(task_token, output)

    def send_task_failure(self, task_token: str, error: str, cause: str) -> bool:
        self.delivered.append(Delivery(task_token, error, cause))
        return self.real_failure(task_token, error, cause)

    def decide(self, workspace: str, op_id: str, decision: str, key: str) -> Any:
        """An owner reads the operation (its consent's plan digest) and decides on exactly that plan."""
        op = self.caller.get(f"/v1/workspaces/{workspace}/operations/{op_id}")
        assert op.status == 200, op.body
        return self.caller.decide(workspace, op.body, decision, key=key)

    def invoke(self, function: str, event: dict[str, Any]) -> Any:
        return lambdas.invoke_handler(self.stack.functions[function], event)

    def send(self, workspace: str, req: Req) -> Any:
        path = f"/v1/workspaces/{workspace}/installations/{req.inst}"
        headers = {"Idempotency-Key": req.key}
        if req.if_match is not None:
            headers["If-Match"] = f'"{req.if_match}"'
        if req.action == "put":
            body = {"package": PACKAGE, "version": req.version, "origin": req.origin}
            return self.caller.put(path, body, headers=headers)
        body = {"origin": req.origin} if req.origin != "owner" else None
        if req.action == "delete":
            return self.caller.api.request("DELETE", path, claims=self.caller.claims, body=body, headers=headers)
        return self.caller.post(path + "/rollback", body, headers=headers)


TASK_FUNCTIONS = {
    "plan": "PlanningFunction",
    "consent": "ConsentFunction",
    "commit": "CommitFunction",
    "settle": "SettlementFunction",
}


def consent_input(event: dict[str, Any], token: str) -> dict[str, Any]:
    """The AwaitConsent state's Payload: the operation, and ``$$.Task.Token``."""
    fields = ("tenant", "workspace", "installationId", "operationId")
    return {**{k: event[k] for k in fields}, "taskToken": token}


def error_of(exc: BaseException) -> dict[str, str]:
    """``$.error`` as the ASL Catch writes it."""
    return {"Error": type(exc).__name__, "Cause": json.dumps({"errorMessage": str(exc)})}


class OperationsModel(RuleBasedStateMachine):
    harness: Harness  # set by the test

    def __init__(self) -> None:
        super().__init__()
        self.workspace = f"ws-{next(_workspaces)}"
        self.world = World(self.workspace)
        self.harness.recorded.clear()
        self.harness.delivered.clear()
        self.harness.now = T0
        self.executions: dict[str, Execution] = {}
        self.keys: list[str] = []
        self.sent: list[Req] = []
        self.admitted: dict[str, str] = {}  # key → operation id
        self.digests: dict[str, str] = {}  # operation id → request digest, once seen
        self.outcomes: dict[str, tuple[str, str | None]] = {}  # settled outcomes, once seen
        self.versions: dict[str, int] = {}
        self.key_counter = itertools.count()
        self.decision_keys = itertools.count()
        self.fresh: Stored | None = None
        self.last = "nothing yet"

    def teardown(self) -> None:
        # Moto copies the whole table for every transaction: keep it at the published releases between examples.
        clear_workspace(self.harness.stack, self.workspace)

    # -- helpers --

    def stored(self) -> Stored:
        """What the workspace holds now (read once, reused until the next request or task)."""
        if self.fresh is None:
            self.fresh = read_stored(self.harness.stack, self.workspace)
        return self.fresh

    def send(self, req: Req) -> Any:
        self.fresh = None
        return self.harness.send(self.workspace, req)

    def invoke(self, function: str, event: dict[str, Any]) -> Any:
        self.fresh = None
        return self.harness.invoke(function, event)

    def collect_started(self) -> None:
        for name, payload in self.harness.recorded:
            if name not in self.executions:  # Step Functions: a second start with the same name is the same one
                self.executions[name] = Execution(name, payload["operationId"], dict(payload))
        self.harness.recorded.clear()
        assert set(self.executions) == set(self.world.started), (
            f"started executions {sorted(self.executions)} != model {sorted(self.world.started)}"
        )
        self.follow_tokens()

    def follow_tokens(self) -> None:
        """Step Functions resumes the execution waiting on a token the service used (success: its output is
        ``$.plan`` and Commit runs next; failure: Settle, with ``$.error``). A token nothing waits on any more (an
        earlier attempt's, or one whose execution moved on) is InvalidToken: nothing happens."""
        for delivery in self.harness.delivered:
            waiting = [e for e in self.executions.values() if e.next == "approve" and e.token == delivery.token]
            for execution in waiting:
                if delivery.error is None:
                    execution.event["plan"] = delivery.payload
                    execution.next = "commit"
                else:
                    execution.event["error"] = {"Error": delivery.error, "Cause": delivery.payload}
                    execution.next = "settle"
        self.harness.delivered.clear()

    def new_key(self) -> str:
        key = f"k-{next(self.key_counter)}"
        self.keys.append(key)
        return key

    def pick_key(self, data: st.DataObject) -> str:
        if self.keys and data.draw(st.booleans(), label="reuse key"):
            return data.draw(st.sampled_from(self.keys), label="reused key")
        return self.new_key()

    def if_match(self, data: st.DataObject, inst: str) -> int | None:
        mode = data.draw(st.sampled_from(["model", "current", "stale", "none"]), label="If-Match")
        model = self.world.insts.get(inst)
        if mode == "model":
            return model.version if model else None
        if mode == "current":
            row = workspace.get_installation(TENANT, self.workspace, inst)
            return row.version if row else None
        if mode == "stale":
            return (model.version - 1 if model and model.version > 1 else 7) if model else 7
        return None

    def request(self, req: Req, *, crash_at: int | None = None) -> Answer:
        """Send one request (optionally crashing its k-th AWS call, then resending it as a client would)."""
        expected = self.world.admit(req)
        if crash_at is not None:
            with crash_after(crash_at) as crash, contextlib.suppress(InjectedCrash):
                self.send(req)
            event(f"admission crashed={crash.crashed}")
        self.last = f"request {req}"
        response = self.send(req)
        got = Answer(response.status, response.code, (response.body or {}).get("operationId"))
        assert (got.status, got.code) == (expected.status, expected.code), (
            f"{req}: answered {got.status} {got.code} {response.body}, model expects {expected.status} {expected.code}"
        )
        if expected.op_id is not None and expected.status in (200, 202, 409, 422):
            assert got.op_id == expected.op_id, f"{req}: answered operation {got.op_id}, expected {expected.op_id}"
        if response.status in (200, 202):
            op_id = got.op_id
            assert self.admitted.setdefault(req.key, op_id) == op_id
            if op_id in self.outcomes:  # replay of a settled key: the same outcome
                outcome = response.body.get("outcome") or {}
                assert (outcome.get("result"), outcome.get("code")) == self.outcomes[op_id], (
                    f"replay of {req.key} answered {outcome}, settled as {self.outcomes[op_id]}"
                )
        self.sent.append(req)
        self.collect_started()
        return expected

    def run_task(self, execution: Execution, crash_at: int | None = None, route: bool = False) -> None:
        """One task of an execution, as Step Functions runs it (crash: retry later, or route to Settle)."""
        world_before = copy.deepcopy(self.world)
        step, op_id = execution.next, execution.op_id
        predicted_error: str | None = None
        predicted: tuple[int, bool] | None = None
        try:
            if step == "plan":
                predicted = self.world.plan_task(op_id)
            elif step == "consent":
                self.world.consent_task(op_id)
            elif step == "commit":
                self.world.commit_task(op_id, int(execution.event["plan"]["version"]))
            else:
                error = execution.event.get("error")
                self.world.settle_task(op_id, error["Error"] if error else None, execution.event["attempt"])
        except TaskError as exc:
            predicted_error = exc.name
        world_after = self.world
        function = TASK_FUNCTIONS[step]
        payload = dict(execution.event)
        if step == "consent":  # every attempt of the task gets a token of its own
            execution.tokens += 1
            payload = consent_input(execution.event, f"tok-{execution.name}-{execution.tokens}")
        crashed = False
        result: Any = None
        raised: BaseException | None = None
        with contextlib.ExitStack() as stack:
            plan = stack.enter_context(crash_after(crash_at)) if crash_at is not None else None
            try:
                result = self.invoke(function, payload)
            except InjectedCrash:
                crashed = True
            except Exception as exc:
                raised = exc
        event(f"{step}: crash_at={crash_at} crashed={crashed} route={route} state={world_before.ops[op_id].state}")
        if crashed:
            assert plan is not None
            stored = self.stored()
            if not differences(world_after, stored):
                self.world = world_after
            elif not differences(world_before, stored):
                self.world = world_before
            else:
                raise AssertionError(
                    f"a crash in {step} of {op_id[:14]} after {plan.calls} left neither the state before nor after:\n  "
                    + "\n  ".join(differences(world_after, stored))
                )
            self.last = f"{step} of {op_id[:14]} crashed after {plan.calls}"
            if route and step != "settle":
                execution.event["error"] = dict(TRANSIENT_ERROR)
                execution.next = "settle"
            return  # else: Step Functions' Retry runs the same task again
        got_error = type(raised).__name__ if raised is not None else None
        assert got_error == predicted_error, (
            f"{step} of {op_id[:14]} raised {raised!r}; model expects {predicted_error}"
        )
        if step == "settle":
            assert raised is None, f"settlement failed: {raised!r}"
            execution.next = "done"
        elif raised is not None:
            execution.event["error"] = error_of(raised)
            execution.next = "settle"
        elif step == "plan":
            assert predicted is not None
            got = (result["version"], result["needsConsent"])
            assert got == predicted, f"plan of {op_id[:14]} answered (version, needsConsent) {got}, model {predicted}"
            assert ("consentWindowSeconds" in result) == result["needsConsent"], result
            if result["needsConsent"]:
                assert result["consentWindowSeconds"] == self.world.window, result
            execution.event["plan"] = result
            execution.next = "consent" if result["needsConsent"] else "commit"
        elif step == "consent":
            execution.token = payload["taskToken"]  # the task returned: the execution waits on this token
            execution.next = "approve"
        else:
            execution.event["commit"] = result
            execution.next = "settle"
        self.last = f"{step} of {op_id[:14]}"
        self.collect_started()

    def decide(self, execution: Execution, decision: str) -> None:
        """An owner decides on the plan the execution's operation waits with (over HTTP, never crashed); the
        service resumes the execution on its token."""
        assert execution.next == "approve"
        op_id = execution.op_id
        expected = self.world.decide(op_id, decision)
        self.fresh = None
        key = f"decision-{next(self.decision_keys)}"
        response = self.harness.decide(self.workspace, op_id, decision, key)
        event(f"decide: {decision} → {response.status}")
        self.last = f"{decision} of {op_id[:14]}"
        assert (response.status, response.code) == (expected.status, expected.code), (
            f"{decision} of {op_id[:14]} answered {response.status} {response.body}, model expects {expected}"
        )
        self.follow_tokens()
        if response.status == 200:
            assert execution.next != "approve", f"{decision} of {op_id[:14]} did not resume its execution"
            if decision == "approve":
                assert execution.event["plan"]["version"] == self.world.ops[op_id].version, execution.event["plan"]
        elif execution.next == "approve":
            # its operation was superseded, and the admission that did it died before failing the wait: nothing
            # resumes the execution until the consent window ends
            assert self.world.ops[op_id].state == "settled", self.world.ops[op_id]
            execution.event["error"] = dict(CONSENT_TIMEOUT)
            execution.next = "settle"

    def advance(self, execution: Execution, data: st.DataObject) -> None:
        """The execution's next step: a task, or (waiting on its token) an owner's decision, or none."""
        if execution.next != "approve":
            self.run_task(execution)
            return
        decision = data.draw(DECISIONS, label="decision")
        if decision != "no decision":
            self.decide(execution, decision)
            return
        # no decision within the consent window: every wait times out (its leases, and all others, expire)
        self.world.now += self.world.window + 1
        self.harness.now = self.world.now
        for waiting in self.waiting():
            waiting.event["error"] = dict(CONSENT_TIMEOUT)
            waiting.next = "settle"
        self.last = f"the consent window of {execution.op_id[:14]} ended"

    def live_executions(self) -> list[str]:
        # in the order they started (op ids are hashes of the workspace: sorting by them would not replay)
        return [name for name, e in self.executions.items() if e.next != "done"]

    def running_tasks(self) -> list[str]:
        """Live executions whose next step is a task (not a wait for a decision: the approval is never crashed)."""
        return [name for name, e in self.executions.items() if e.next not in ("done", "approve")]

    def waiting(self) -> list[Execution]:
        return [e for e in self.executions.values() if e.next == "approve"]

    # -- rules: requests --

    @rule(
        data=st.data(),
        inst=TARGETS,
        version=st.sampled_from([*RELEASES, UNPUBLISHED]),
        origin=st.sampled_from(["owner", "owner", "workflow"]),
    )
    def put(self, data: st.DataObject, inst: str, version: str, origin: str) -> None:
        self.request(Req(inst, "put", version, origin, self.if_match(data, inst), self.pick_key(data)))

    @rule(data=st.data(), inst=TARGETS)
    def uninstall(self, data: st.DataObject, inst: str) -> None:
        self.request(Req(inst, "delete", None, "owner", self.if_match(data, inst), self.pick_key(data)))

    @rule(data=st.data(), inst=TARGETS, origin=st.sampled_from(["owner", "workflow"]))
    def rollback(self, data: st.DataObject, inst: str, origin: str) -> None:
        self.request(Req(inst, "rollback", None, origin, self.if_match(data, inst), self.pick_key(data)))

    @precondition(lambda self: self.sent)
    @rule(data=st.data())
    def retry_same_key(self, data: st.DataObject) -> None:
        """A client resends an earlier request exactly (same key, same body, same If-Match)."""
        self.request(data.draw(st.sampled_from(self.sent), label="resent"))

    @precondition(lambda self: any(s.holder for s in self.world.slots.values()))
    @rule(data=st.data(), same_intent=st.booleans())
    def contend(self, data: st.DataObject, same_intent: bool) -> None:
        """Another request on an installation whose slot is held: the same intent as the holder, or another."""
        held = sorted(name for name, s in self.world.slots.items() if s.holder)
        inst = data.draw(st.sampled_from(held), label="contended")
        holder = self.world.ops[self.world.slots[inst].holder]  # type: ignore[index]
        current = self.world.insts.get(inst)
        version = current.version if current else None
        if same_intent:
            action, target = holder.signature[1], holder.signature[2]
        else:
            action, target = data.draw(
                st.sampled_from([("put", v) for v in RELEASES] + [("delete", None), ("rollback", None)]),
                label="other intent",
            )
        self.request(Req(inst, action, target, "owner", version, self.new_key()))

    @precondition(lambda self: any(s.holder and s.pending for s in self.world.slots.values()))
    @rule(data=st.data())
    def supersede_pending(self, data: st.DataObject) -> None:
        """Another request on an installation whose holder was deferred (pending): any intent supersedes it, an
        uninstall of what is not installed too (settled at admission, it frees the slot)."""
        held = sorted(name for name, s in self.world.slots.items() if s.holder and s.pending)
        inst = data.draw(st.sampled_from(held), label="deferred holder")
        action, target = data.draw(
            st.sampled_from([("put", v) for v in RELEASES] + [("delete", None), ("delete", None), ("rollback", None)]),
            label="intent",
        )
        current = self.world.insts.get(inst)
        self.request(Req(inst, action, target, "owner", current.version if current else None, self.new_key()))

    @rule(data=st.data(), k=CRASH_POINTS)
    def crash_admission(self, data: st.DataObject, k: int) -> None:
        """Admission dies after its k-th AWS call; the client resends with the same key."""
        if self.sent and data.draw(st.booleans(), label="resend an earlier request"):
            req = data.draw(st.sampled_from(self.sent), label="resent")
        else:
            inst = data.draw(TARGETS, label="inst")
            version = data.draw(st.sampled_from(list(RELEASES)), label="version")
            req = Req(inst, "put", version, "owner", self.if_match(data, inst), self.new_key())
        self.request(req, crash_at=k)

    @precondition(lambda self: any(op.state == "pending" for op in self.world.ops.values()))
    @rule(data=st.data(), k=st.sampled_from((None, 1, 2, 2)))
    def client_resumes_pending(self, data: st.DataObject, k: int | None) -> None:
        """The client of a deferred operation retries with its key (admission may die after its k-th call)."""
        pending = [op.op_id for op in self.world.ops.values() if op.state == "pending"]
        op = self.world.ops[data.draw(st.sampled_from(pending), label="pending")]
        req = next(r for r in self.sent if r.key == op.key and r.signature == op.signature)
        self.request(req, crash_at=k)

    # -- rules: executions --

    @precondition(lambda self: self.live_executions())
    @rule(data=st.data())
    def run_execution(self, data: st.DataObject) -> None:
        execution = self.executions[data.draw(st.sampled_from(self.live_executions()), label="execution")]
        while execution.next != "done":
            self.advance(execution, data)

    @precondition(lambda self: self.live_executions())
    @rule(data=st.data())
    def step_execution(self, data: st.DataObject) -> None:
        self.advance(self.executions[data.draw(st.sampled_from(self.live_executions()), label="execution")], data)

    @precondition(lambda self: self.running_tasks())
    @rule(data=st.data(), k=CRASH_POINTS, route=st.booleans())
    def crash_task(self, data: st.DataObject, k: int, route: bool) -> None:
        """The next task dies after its k-th AWS call; then Step Functions retries it or routes to Settle."""
        execution = self.executions[data.draw(st.sampled_from(self.running_tasks()), label="execution")]
        self.run_task(execution, crash_at=k, route=route)

    @rule()
    def expire_leases(self) -> None:
        self.world.now += self.world.lease + 1
        self.harness.now = self.world.now

    # -- invariants (from what is stored) --

    @invariant()
    def matches_the_model(self) -> None:
        stored = self.stored()
        diffs = differences(self.world, stored)
        assert not diffs, f"after {self.last}:\n  " + "\n  ".join(diffs)
        for op_id, op in stored.ops.items():
            self.world.ops[op_id].version = op.version  # follow the fencing counter (asserted monotonic below)

    @invariant()
    def stored_invariants(self) -> None:
        stored = self.stored()
        for key, op_id in self.admitted.items():
            assert op_id == operation_id_for(TENANT, self.workspace, key)
            assert op_id in stored.ops, f"operation {op_id} of key {key} is lost"
        for op_id, op in stored.ops.items():
            assert self.digests.setdefault(op_id, op.request_digest) == op.request_digest, f"{op_id} changed request"
            assert op.version >= self.versions.get(op_id, 0), f"operation {op_id} went back to v{op.version}"
            self.versions[op_id] = op.version
            if op.outcome is not None:
                seen = op.outcome
                assert self.outcomes.setdefault(op_id, seen) == seen, f"{op_id} was {self.outcomes[op_id]}, now {seen}"
        for inst in INSTALLATIONS:
            ops = [op for op in stored.ops.values() if op.installation_id == inst]
            unsettled = [op for op in ops if op.state != "settled"]
            assert len(unsettled) <= 1, f"{inst}: {len(unsettled)} operations unsettled"
            slot = slot_view(stored.slots.get(inst))
            if not unsettled:
                assert slot == (None,), f"{inst}: slot {slot} held with no operation in flight"
            else:
                assert slot[:2] == (unsettled[0].operation_id, unsettled[0].state == "pending"), (
                    f"{inst}: slot {slot} but {unsettled[0].operation_id} is {unsettled[0].state}"
                )
            succeeded = [op for op in ops if op.outcome and op.outcome[0] == "succeeded" and op.plan is not None]
            committed_in_flight = [
                op for op in unsettled if op.state == "committed" or (op.state == "pending" and op.phase == "committed")
            ]
            row = stored.insts.get(inst)
            assert (row.version if row else 0) == len(succeeded) + len(committed_in_flight), (
                f"{inst}: version {row.version if row else 0} but {len(succeeded)} succeeded changes "
                f"+ {len(committed_in_flight)} committed in flight"
            )
            if not committed_in_flight:
                latest = max(succeeded, key=lambda op: op.plan.version if op.plan else 0, default=None)
                want = latest.plan if latest else None
                assert inst_view(row) == inst_view(want), (
                    f"{inst}: stored {inst_view(row)} != plan of the latest succeeded operation {inst_view(want)}"
                )
        live_names = {e.name for e in self.executions.values() if e.next != "done"}
        for op in stored.ops.values():
            if op.state in IN_FLIGHT:
                assert op.execution_name() in live_names, (
                    f"{op.operation_id} is {op.state} (attempt {op.attempt}) but no execution runs it"
                )
        assert stored.live_count == sum(1 for i in stored.insts.values() if i.is_live)

    @invariant()
    def consent_invariants(self) -> None:
        stored = self.stored()
        for op in stored.ops.values():
            if op.asked is not None and op.committed:
                assert op.decision == "approve", f"{op.operation_id} committed a plan whose consent is {op.decision}"
            if op.state == "awaiting_consent":
                assert op.consent is not None and op.decision is None, f"{op.operation_id} awaits {op.consent}"
                wait = stored.waits.get(op.installation_id)
                assert wait is not None and wait["operationId"] == op.operation_id, (
                    f"{op.operation_id} awaits consent but CONSENT#{op.installation_id} is {wait}"
                )
                lease = stored.slots[op.installation_id]["leaseUntil"]
                assert lease == op.consent["deadline"] == wait["deadline"], (
                    f"{op.operation_id}: slot lease {lease}, consent deadline {op.consent['deadline']}, "
                    f"wait deadline {wait['deadline']}"
                )
        for inst, row in stored.insts.items():
            writer = stored.ops.get(row.last_operation_id)
            if writer is not None and writer.asked is not None:
                assert writer.decision == "approve", f"{inst} was written by {writer.operation_id}, {writer.consent}"
        for inst, wait in stored.waits.items():
            op = stored.ops.get(wait["operationId"])
            assert op is not None and op.installation_id == inst == wait["installationId"], f"CONSENT#{inst}: {wait}"
            assert op.state == "awaiting_consent", (
                f"CONSENT#{inst} names {op.operation_id}, which is {op.state} (phase {op.phase})"
            )
            assert op.consent is not None and wait["planDigest"] == op.consent["planDigest"], (wait, op.consent)
        for execution in self.waiting():
            op = stored.ops[execution.op_id]
            if op.state == "settled" and op.superseded_by is not None:
                continue  # superseded: its wait was failed (or ends with the consent window)
            wait = stored.waits.get(op.installation_id) or {}
            assert op.state == "awaiting_consent" and (wait.get("operationId"), wait.get("taskToken")) == (
                op.operation_id,
                execution.token,
            ), f"{execution.name} waits on {execution.token}, but {op.operation_id} is {op.state}, wait {wait}"


_workspaces = itertools.count()


@pytest.fixture(scope="module")
def published():
    with devstack.local_aws() as stack:
        caller = Caller(LocalApi(stack), TENANT)
        for version, permissions in RELEASES.items():
            built = build_from_files(
                {"SKILL.md": f"hello {version}\n".encode()}, permissions=[{"kind": k} for k in sorted(permissions)]
            )
            assert caller.publish(PACKAGE, version, built)["state"] == "published"
        yield stack, caller


@pytest.fixture
def harness(published, monkeypatch) -> Harness:
    stack, caller = published
    harness = Harness(stack, caller)
    monkeypatch.setattr(workflows, "start", harness.start)
    monkeypatch.setattr(workflows, "send_task_success", harness.send_task_success)
    monkeypatch.setattr(workflows, "send_task_failure", harness.send_task_failure)
    monkeypatch.setattr(clock, "now", lambda: harness.now)
    return harness


def test_operations_against_the_reference_model(harness):
    class Machine(OperationsModel):
        pass

    Machine.harness = harness
    run_state_machine_as_test(Machine, settings=SETTINGS)


# ---- the bugs the model found (their minimal sequences) and the consent rules, as plain regression tests ----------


def _started(harness: Harness) -> dict[str, Any]:
    """The input of the execution admission started last (what the state machine would run)."""
    return dict(harness.recorded[-1][1])


_tokens = itertools.count()


def _await_consent(harness: Harness, event: dict[str, Any]) -> str:
    """The AwaitConsent state's task: record the wait with a token of its own (returned)."""
    token = f"tok-plain-{next(_tokens)}"
    assert harness.invoke("ConsentFunction", consent_input(event, token))["waiting"] is True
    return token


def _through_consent(harness: Harness, workspace_id: str, event: dict[str, Any]) -> None:
    """If Plan asked consent: the execution waits with a token, an owner approves the plan, and ``$.plan``
    becomes what the service sent on the token (the approved operation's version), as the AwaitConsent state's
    ResultPath has it."""
    if event["plan"]["needsConsent"]:
        _approve(harness, workspace_id, event, _await_consent(harness, event))


def _approve(harness: Harness, workspace_id: str, event: dict[str, Any], token: str) -> None:
    """An owner approves the plan the operation waits with; ``$.plan`` = what the service sent on ``token``."""
    decided = harness.decide(workspace_id, event["operationId"], "approve", f"approve-{token}")
    assert decided.status == 200, decided.body
    (delivered,) = [d for d in harness.delivered if d.token == token]
    assert delivered.error is None, delivered
    event["plan"] = delivered.payload


def _waiting_for_consent(
    harness: Harness, workspace_id: str, version: str, key: str
) -> tuple[str, dict[str, Any], str]:
    """Install hello@``version`` as ``key``: Plan asks consent and the execution waits with a token. Returns the
    operation id, the execution's input and the token."""
    admitted = harness.send(workspace_id, Req("app", "put", version, "owner", None, key))
    assert admitted.status == 202, admitted.body
    event = _started(harness)
    event["plan"] = harness.invoke("PlanningFunction", dict(event))
    assert event["plan"]["needsConsent"], event["plan"]
    return admitted.body["operationId"], event, _await_consent(harness, event)


def _deferred(
    harness: Harness,
    workspace_id: str,
    key: str,
    *,
    commit_crashes_after: int | None,
    settle_dies_after_its_write: bool = False,
) -> dict[str, Any]:
    """Install hello@1.0.0 as ``key``; Plan runs (it asks consent for api_read: an owner approves); Commit dies
    (after its k-th AWS call, or before it starts); the Catch routes to Settle with a transient error, which defers
    the operation to pending (optionally dying right after that write, so that Step Functions' Retry runs Settle
    again with the same input)."""
    admitted = harness.send(workspace_id, Req("app", "put", "1.0.0", "owner", None, key))
    assert admitted.status == 202, admitted.body
    event = _started(harness)
    event["plan"] = harness.invoke("PlanningFunction", dict(event))
    assert event["plan"]["needsConsent"], event["plan"]
    _through_consent(harness, workspace_id, event)
    if commit_crashes_after is not None:
        with crash_after(commit_crashes_after) as crash, contextlib.suppress(InjectedCrash):
            harness.invoke("CommitFunction", dict(event))
        assert crash.crashed
    event["error"] = dict(TRANSIENT_ERROR)
    if settle_dies_after_its_write:
        with crash_after(2) as crash, contextlib.suppress(InjectedCrash):  # BatchGetItem, TransactWriteItems
            harness.invoke("SettlementFunction", dict(event))
        assert crash.crashed
    harness.invoke("SettlementFunction", dict(event))
    return event


def _run_to_the_end(harness: Harness, workspace_id: str, event: dict[str, Any]) -> None:
    event = {k: v for k, v in event.items() if k not in ("plan", "commit", "error")}
    try:
        event["plan"] = harness.invoke("PlanningFunction", dict(event))
        _through_consent(harness, workspace_id, event)
        event["commit"] = harness.invoke("CommitFunction", dict(event))
    except Exception as exc:
        event["error"] = error_of(exc)
    harness.invoke("SettlementFunction", dict(event))


def test_a_retried_settle_of_a_deferral_keeps_the_operation_resumable(harness):
    """Settle defers the operation (transient error) and dies right after its write; Step Functions' Retry runs
    Settle again with the same input. The second attempt must not defer again over the phase the operation stopped
    in (it used to record phase "pending": the client's retry then "resumed" it into state pending, Plan answered
    ClaimLost, Settle does nothing for ClaimLost, and the operation held its installation's slot for ever)."""
    ws = f"ws-plain-{next(_workspaces)}"
    event = _deferred(harness, ws, "k-1", commit_crashes_after=None, settle_dies_after_its_write=True)
    op_id = event["operationId"]

    deferred = workspace.get_operation(TENANT, ws, op_id)
    assert deferred is not None
    assert (str(deferred.state), deferred.phase) == ("pending", "planned"), "the retried Settle lost the phase"
    resumed = harness.send(ws, Req("app", "put", "1.0.0", "owner", None, "k-1"))
    assert (resumed.status, resumed.body["state"]) == (202, "planned"), resumed.body
    _run_to_the_end(harness, ws, _started(harness))
    final = workspace.get_operation(TENANT, ws, op_id)
    assert final is not None and final.outcome is not None and final.outcome.result == "succeeded", final


def test_a_resume_whose_admission_dies_before_starting_is_started_by_the_next_retry(harness):
    """A pending operation (deferred while planned) is resumed by the client's retry; admission dies after the
    resume's write and before StartExecution. The client's resend must start the resumed execution (it used to
    restart only ``admitted`` operations, so one resumed into planned or committed stayed in flight with no
    execution, holding the slot, until its lease expired and someone sent the same intent)."""
    ws = f"ws-plain-{next(_workspaces)}"
    event = _deferred(harness, ws, "k-1", commit_crashes_after=1)
    op_id = event["operationId"]
    harness.recorded.clear()
    with crash_after(2) as crash, contextlib.suppress(InjectedCrash):  # BatchGetItem, TransactWriteItems (resume)
        harness.send(ws, Req("app", "put", "1.0.0", "owner", None, "k-1"))
    assert crash.crashed and harness.recorded == []
    resent = harness.send(ws, Req("app", "put", "1.0.0", "owner", None, "k-1"))

    assert (resent.status, resent.body["state"], resent.body["attempt"]) == (202, "planned", 1), resent.body
    assert [name for name, _ in harness.recorded] == [f"{op_id}-1"], "no execution runs the resumed operation"


@pytest.mark.parametrize("how", ["pending", "lease expired"])
def test_superseding_an_operation_that_already_committed_does_not_report_it_cancelled(harness, how):
    """Operation A committed its change (the installation is A's plan, version 1) but has not settled: it was
    deferred after Commit died past its write, or its lease expired before Settle ran. B supersedes it (B's
    If-Match is A's version). A must settle succeeded (it used to settle "unconfirmed / cancelled" although its
    change was in effect: a version bump by an operation that did not succeed, and A's caller told nothing
    happened)."""
    ws = f"ws-plain-{next(_workspaces)}"
    if how == "pending":
        event = _deferred(harness, ws, "k-a", commit_crashes_after=2)  # GetItem, TransactWriteItems (commit)
        superseding = Req("app", "delete", None, "owner", 1, "k-b")  # any intent supersedes a pending one
    else:
        admitted = harness.send(ws, Req("app", "put", "1.0.0", "owner", None, "k-a"))
        assert admitted.status == 202, admitted.body
        event = _started(harness)
        event["plan"] = harness.invoke("PlanningFunction", dict(event))
        _through_consent(harness, ws, event)
        event["commit"] = harness.invoke("CommitFunction", dict(event))
        harness.now += limits().operation_lease_seconds + 1  # Settle has not run when the lease expires
        superseding = Req("app", "put", "1.0.0", "owner", 1, "k-b")  # the same intent
    op_a = event["operationId"]
    row = workspace.get_installation(TENANT, ws, "app")
    assert row is not None and (row.version, row.last_operation_id) == (1, op_a)

    answered = harness.send(ws, superseding)
    assert answered.status == 202, answered.body
    a = workspace.get_operation(TENANT, ws, op_a)
    assert a is not None and a.outcome is not None
    assert (a.outcome.result, a.outcome.code) == ("succeeded", None), (
        f"A committed installation version 1 but settled {a.outcome}"
    )


def test_an_uninstall_of_nothing_supersedes_a_pending_holder_and_frees_the_slot(harness):
    """An uninstall of what is not installed settles at admission (succeeded / not_installed). If a pending
    operation holds the slot, the uninstall supersedes it (it settles unconfirmed / cancelled, its consent wait goes
    with it) and frees the slot with it as the last settled; an operation that is not pending still holds the slot
    (409 operation_in_progress)."""
    ws = f"ws-plain-{next(_workspaces)}"
    admitted = harness.send(ws, Req("app", "put", "1.0.0", "owner", None, "k-a"))
    assert admitted.status == 202, admitted.body
    event = _started(harness)
    event["plan"] = harness.invoke("PlanningFunction", dict(event))
    assert event["plan"]["needsConsent"], event["plan"]
    _await_consent(harness, event)
    harness.invoke("SettlementFunction", {**event, "error": dict(TRANSIENT_ERROR)})  # the wait deferred
    op_a = admitted.body["operationId"]

    uninstalled = harness.send(ws, Req("app", "delete", None, "owner", None, "k-b"))
    assert uninstalled.status == 200, uninstalled.body
    assert (uninstalled.body["state"], uninstalled.body["outcome"]["code"]) == ("settled", "not_installed")
    a = workspace.get_operation(TENANT, ws, op_a)
    assert a is not None and a.outcome is not None
    assert (str(a.state), a.outcome.result, a.outcome.code) == ("settled", "unconfirmed", "cancelled"), a
    assert a.superseded_by == uninstalled.body["operationId"]
    slot = workspace.get_slot(TENANT, ws, "app")
    assert slot is not None and (slot.operation_id, slot.last_settled) == (None, op_a), slot
    assert not [i for i in workspace_items(harness.stack, ws) if i["sk"].startswith("CONSENT#")]

    held = harness.send(ws, Req("tool", "put", "1.2.0", "owner", None, "k-c"))
    assert held.status == 202, held.body
    blocked = harness.send(ws, Req("tool", "delete", None, "owner", None, "k-d"))
    assert (blocked.status, blocked.code, blocked.body["operationId"]) == (
        409,
        "operation_in_progress",
        held.body["operationId"],
    ), blocked.body


def test_a_wait_for_consent_deferred_by_settle_asks_again_when_resumed(harness):
    """The Consent task's write lands and the task dies; the Catch routes to Settle with a transient error: the
    operation is deferred in phase planned (not awaiting_consent). The client's retry resumes it, Plan answers the
    recorded plan, which asks consent again; the new wait (new token, new deadline) is approved and commits."""
    ws = f"ws-plain-{next(_workspaces)}"
    op_id, event, _ = _waiting_for_consent(harness, ws, "1.1.0", "k-1")
    harness.invoke("SettlementFunction", {**event, "error": dict(TRANSIENT_ERROR)})
    deferred = workspace.get_operation(TENANT, ws, op_id)
    assert deferred is not None and (str(deferred.state), deferred.phase) == ("pending", "planned"), deferred

    harness.now += 3600
    resumed = harness.send(ws, Req("app", "put", "1.1.0", "owner", None, "k-1"))
    assert (resumed.status, resumed.body["state"], resumed.body["attempt"]) == (202, "planned", 1), resumed.body
    event = _started(harness)
    event["plan"] = harness.invoke("PlanningFunction", dict(event))
    assert event["plan"]["needsConsent"], event["plan"]
    token = _await_consent(harness, event)
    waiting = workspace.get_operation(TENANT, ws, op_id)
    assert waiting is not None and waiting.consent is not None and str(waiting.state) == "awaiting_consent"
    deadline = harness.now + limits().consent_window_seconds
    assert waiting.consent.deadline == deadline, waiting.consent
    slot = workspace.get_slot(TENANT, ws, "app")
    assert slot is not None and slot.lease_until == deadline, slot
    _approve(harness, ws, event, token)
    event["commit"] = harness.invoke("CommitFunction", dict(event))
    harness.invoke("SettlementFunction", dict(event))
    final = workspace.get_operation(TENANT, ws, op_id)
    assert final is not None and final.outcome is not None and final.outcome.result == "succeeded", final
    assert final.consent is not None and final.consent.decision == "approve"
    row = workspace.get_installation(TENANT, ws, "app")
    assert row is not None and sorted(g.kind for g in row.grants) == ["api_read", "network"], row


def test_a_deferred_wait_for_consent_is_no_longer_listed_as_waiting(harness):
    """Settle defers an operation that awaits consent (its Consent task died after its write). The operation no
    longer waits (it is pending; a decision on it answers 409 stale_authority), so its consent wait must go: it
    stays listed by GET …/approvals (and as the installation's pendingConsent) until the operation is resumed or
    superseded."""
    ws = f"ws-plain-{next(_workspaces)}"
    admitted = harness.send(ws, Req("app", "put", "1.0.0", "owner", None, "k-1"))
    assert admitted.status == 202, admitted.body
    event = _started(harness)
    event["plan"] = harness.invoke("PlanningFunction", dict(event))
    _await_consent(harness, event)
    harness.invoke("SettlementFunction", {**event, "error": dict(TRANSIENT_ERROR)})
    decided = harness.decide(ws, admitted.body["operationId"], "approve", "k-approve")
    assert (decided.status, decided.code) == (409, "stale_authority"), decided.body

    listed = harness.caller.get(f"/v1/workspaces/{ws}/approvals")
    assert listed.status == 200, listed.body
    assert listed.body["items"] == [], "a pending operation is listed as waiting for a decision"
    assert not [i for i in workspace_items(harness.stack, ws) if i["sk"].startswith("CONSENT#")]


def test_a_retried_settle_of_an_earlier_attempt_leaves_the_resumed_attempt_alone(harness):
    """Attempt 0 waits for consent; its Consent task dies after its write and the Catch routes to Settle, which
    defers the operation and dies right after that write. Before Step Functions' Retry runs that Settle again, the
    client resumes the operation: attempt 1 plans and waits for consent with a token of its own. The retried Settle
    of attempt 0 must not touch attempt 1 (it used to defer it again: attempt 1's execution waited on a token whose
    wait was gone, found by the reference model as "waits on tok-…, but op is pending, wait {}")."""
    ws = f"ws-plain-{next(_workspaces)}"
    op_id, first, _ = _waiting_for_consent(harness, ws, "1.1.0", "k-1")
    first["error"] = dict(TRANSIENT_ERROR)
    with crash_after(2) as crash, contextlib.suppress(InjectedCrash):  # BatchGetItem, TransactWriteItems (defer)
        harness.invoke("SettlementFunction", dict(first))
    assert crash.crashed

    resumed = harness.send(ws, Req("app", "put", "1.1.0", "owner", None, "k-1"))
    assert (resumed.status, resumed.body["attempt"]) == (202, 1), resumed.body
    second = _started(harness)
    second["plan"] = harness.invoke("PlanningFunction", dict(second))
    token = _await_consent(harness, second)
    waiting = workspace.get_operation(TENANT, ws, op_id)
    assert waiting is not None and str(waiting.state) == "awaiting_consent"

    retried = harness.invoke("SettlementFunction", dict(first))  # Step Functions' Retry of attempt 0's Settle
    assert retried["settled"] is False, retried
    after = workspace.get_operation(TENANT, ws, op_id)
    assert after == waiting, "the retried Settle of attempt 0 changed attempt 1"
    assert [i["sk"] for i in workspace_items(harness.stack, ws) if i["sk"].startswith("CONSENT#")] == ["CONSENT#app"]
    _approve(harness, ws, second, token)
    second["commit"] = harness.invoke("CommitFunction", dict(second))
    harness.invoke("SettlementFunction", dict(second))
    final = workspace.get_operation(TENANT, ws, op_id)
    assert final is not None and final.outcome is not None and final.outcome.result == "succeeded", final
