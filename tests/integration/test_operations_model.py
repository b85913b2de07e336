"""Installation operations against a reference model: random install / update / uninstall / rollback requests,
same-key retries, crashes at any AWS call of any task, duplicate Express runs and tasks run twice, waits for an
owner's consent (approved, rejected or timed out), lease expiry, sweep restarts and supersession, checked after every
step.

The state machine is not used (its Retry waits would dominate): ``workflows.start`` is replaced by a recorder and the
test plays Step Functions Express itself, calling the task handlers in-process in the order the ASL runs them (Plan →
[AwaitConsent] → Commit → Settle unless the commit settled its operation; an exception routes to Settle with ``$.error``
exactly as the Catch would; ClaimLost from Plan ends the run at ``Duplicate``, with no Settle). Every start is a new run
(Express does not deduplicate names): the recorder hands out a run ARN, which the tasks get as ``$$.Execution.Id`` (the
runner that claims the operation). A crash is ``devstack.faults.crash_after(k)``: the k-th AWS call's effect lands, then
the task dies; afterwards either Step Functions retries the same task or the Catch routes it to Settle with a transient
error (the operation is deferred to ``pending`` and a client retry with the same key resumes it); a crash in Settle
whose retries run out ends the run at SettlementFailed, the operation left to the sweep.

What Express adds, as rules:
* a duplicate run starts: a second run of an operation with the input of one of its earlier starts, at any point
  (interleaved step by step with the first, or after the operation settled): it must lose its Plan (ClaimLost →
  Duplicate) while another live runner holds the operation, and change nothing;
* a task runs twice: the same task call repeated (its first call crashed at some AWS call, or not), the second's
  answer is the task's result;
* a run is stopped (the 5-minute limit): nothing after its current task runs; its operation waits for its lease;
* the sweep (``maintenance.sweeps``, in-process over the workspace's due shards, or one due operation's action dying
  after its k-th AWS call): an operation past its lease is restarted (a fenced write, then a new run) up to the
  restart limit, then settled as Settle would; one awaiting consent past its deadline is settled consent_expired;
* converge: every run is played to its end, then the clock and the sweep run until nothing is in flight.

Consent: when Plan answers ``needsConsent`` (an owner-origin plan that widens grants), the run's Consent task
records the wait (planned → awaiting_consent, the CONSENT item, the lease becomes the consent deadline) and the run
ends. An owner approves or rejects the plan over HTTP (a decision may crash after any AWS call, and be resent with
its key), which records the decision and starts a new run: approve → Plan (needsConsent false) → Commit → Settle;
reject → Settle refuses consent_rejected. Nobody decides: the clock jumps past the consent window and the sweep
settles the wait consent_expired.

One moto stack and three releases serve every example; each example works in a fresh workspace (everything an
operation touches, operations, installations, slots, consent waits and counters, is keyed by workspace, so examples
cannot see each other) and deletes it at teardown (moto copies the whole table on every transaction). The clock
(``packyard.clock.now``) is the model's: it only moves when a rule expires the leases (or the consent window). The
checks read the workspace's items from moto's table in-process, after every step; the code under test goes through
boto3 as always.

Checked after every step, from what is stored (not from the model):
* no lost operation: every key that was admitted still names its operation, with the request it was admitted for;
* the installation's version = the number of operations that committed a change (succeeded ones, plus the one in
  flight that already committed): exactly one commit per operation, never a double bump under duplicate runs or
  tasks run twice, never a bump without a succeeded operation;
* with nothing committed in flight, the installation is exactly the plan of the latest succeeded operation;
* at most one unsettled operation per installation, and the slot is held by it (free when there is none);
* a settled outcome never changes, and a replay of a settled key answers that same outcome;
* every admitted/planned/committed operation has a live run that can still run it (one that has not planned yet, or
  its runner), or is past its lease, or lost its run in a way the sweep recovers once its lease ends (a crash between
  a write and its start, a run stopped): the sweep's to restart;
* the workspace's live-installation counter equals the number of live installations;
* an operation that asked consent never commits (nor is the installation's last writer) unless approved;
* a CONSENT item exists only for the installation's unsettled operation, while it awaits consent (with the same
  plan digest and deadline; the slot's lease is that deadline), and every operation awaiting consent has one;
and the stored operations (with their consent, runner and restarts), installations, slots and consent waits equal
the reference model's, and the runs started equal the model's (which operation, which attempt, in order).

Why one module of ~1,800 lines: the reference model, the stateful machine that drives it and the regression
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
from packyard.maintenance import sweeps
from packyard.operations.preconditions import operation_id_for
from packyard.store import due, dynamo, workflows, workspace
from packyard.store.due import DueKind
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
# in flight and run by an execution (an operation awaiting consent is a recorded wait: no run, the sweep ends it)
RUNNABLE = ("admitted", "planned", "committed")
TRANSIENT_ERROR = {
    "Error": "TransientStoreError",
    "Cause": json.dumps({"errorMessage": "injected: the task died (Lambda.Unknown / States.Timeout)"}),
}
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
# an owner's decision dies after its k-th AWS call (then it is resent with its key), or not
DECISION_CRASHES = st.sampled_from((None, None, 1, 2, 3))
# what becomes of a wait when everything converges: approved, rejected, or the window ends with no decision (None)
CONVERGE_DECISIONS = st.sampled_from(("approve", "approve", "reject", None))
FAULTS = st.sampled_from(("retry", "route", "twice", "twice after a crash", "stopped"))
MACHINE = "InstallStateMachine"

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
    runner: str | None = None  # the run (its ARN) that claimed it, until a resume, a decision or a restart clears it
    restarts: int = 0  # how many times the sweep restarted it past its lease

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
    """What the store should hold, and which runs should have been started."""

    workspace: str
    now: int = T0
    insts: dict[str, MInst] = field(default_factory=dict)
    ops: dict[str, MOp] = field(default_factory=dict)
    slots: dict[str, MSlot] = field(default_factory=dict)
    waits: dict[str, str] = field(default_factory=dict)  # installation → operation its CONSENT item names
    starts: list[tuple[str, int]] = field(default_factory=list)  # (operation, attempt) of each run the step started
    # runnable operations known to have no run until the sweep restarts them: a crash fell between a write and the
    # start that follows it
    orphans: set[str] = field(default_factory=set)
    decisions: dict[str, tuple[str, str]] = field(default_factory=dict)  # decision key → (operation, decision)

    @property
    def lease(self) -> int:
        return limits().operation_lease_seconds

    @property
    def window(self) -> int:
        return limits().consent_window_seconds

    def slot(self, inst: str) -> MSlot:
        return self.slots.setdefault(inst, MSlot())

    def start(self, op: MOp) -> None:
        self.starts.append((op.op_id, op.attempt))

    def past_lease(self, op: MOp) -> bool:
        return self.slot(op.inst).lease_until <= self.now

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
                if self.past_lease(op):
                    # nothing runs it any more (no run outlives a lease): the same key takes it over, a new attempt
                    self.resume(op, "planned" if op.state == "awaiting_consent" else op.state)
                elif op.state == "admitted":
                    self.start(op)  # admission may have died before starting it: a duplicate run is harmless
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

    def resume(self, op: MOp, phase: str | None = None) -> None:
        was_waiting = op.state == "awaiting_consent"
        op.state = phase or (op.phase if op.phase in IN_FLIGHT else "admitted")
        op.version += 1
        op.attempt += 1
        op.runner = None
        slot = self.slot(op.inst)
        slot.pending, slot.lease_until = False, self.now + self.lease
        if was_waiting and self.waits.get(op.inst) == op.op_id:
            del self.waits[op.inst]  # it plans again, and asks again: the wait past its deadline is gone
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

    def plan_task(self, op_id: str, runner: str, attempt: int | None) -> tuple[int, bool, bool]:
        """The planning output the model expects, (version, needsConsent, rejected), for the run ``runner`` of
        ``attempt``: it claims the operation (fenced on version) unless another live runner holds it."""
        op = self.ops[op_id]
        slot = self.slot(op.inst)
        if op.state not in RUNNABLE or attempt != op.attempt:
            raise TaskError("ClaimLost")  # settled, deferred, waiting for consent, or resumed as a later attempt
        if op.runner not in (None, runner) and not self.past_lease(op):
            raise TaskError("ClaimLost")  # another run holds it: this one is a duplicate
        if op.state in ("planned", "committed"):
            if op.runner != runner:
                op.runner, op.version = runner, op.version + 1
                slot.lease_until = self.now + self.lease
            return op.version, op.needs_consent, op.decision == "reject"
        plan = self.compute_plan(op)
        if slot.holder != op_id:
            raise TaskError("ClaimLost")
        op.state, op.plan, op.version, op.runner = "planned", plan, op.version + 1, runner
        op.asked = self.consent_asked(op) or None
        slot.lease_until = self.now + self.lease
        return op.version, op.needs_consent, False

    def consent_task(self, op_id: str, runner: str) -> None:
        """The Consent task of the run ``runner``: planned → awaiting_consent with the wait recorded and the slot
        held to the deadline; a repeat (already awaiting) changes nothing. The run ends there."""
        op = self.ops[op_id]
        if not op.needs_consent or op.plan is None:
            raise TaskError("ClaimLost")
        if op.state == "awaiting_consent":
            return
        slot = self.slot(op.inst)
        if op.state != "planned" or slot.holder != op_id or op.runner != runner:
            raise TaskError("ClaimLost")
        op.state, op.version = "awaiting_consent", op.version + 1
        slot.lease_until = self.now + self.window
        self.waits[op.inst] = op_id

    def decide(self, op_id: str, decision: str, key: str) -> Answer:
        """An owner's decision (key ``key``) on the plan ``op_id`` waits with (naming that operation); recorded, it
        starts a new run (a replay of the key starts one again)."""
        op = self.ops[op_id]
        if key in self.decisions:
            recorded, _ = self.decisions[key]
            if self.ops[recorded].state in IN_FLIGHT:
                self.start(self.ops[recorded])  # it may have died before starting the run: started again
            return Answer(200, None, recorded)
        if self.waits.get(op.inst) != op_id or op.state != "awaiting_consent" or self.past_lease(op):
            return Answer(409, "stale_authority")
        op.state, op.version, op.decision, op.runner = "planned", op.version + 1, decision, None
        del self.waits[op.inst]
        # the decision is the operation's heartbeat: an ordinary lease again from now (not the consent deadline)
        self.slot(op.inst).lease_until = self.now + self.lease
        self.decisions[key] = (op_id, decision)
        self.start(op)
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
        # the commit settles (docs/decisions.md, "Commit settles"): succeeded, the slot freed, in the same write
        op.state, op.version, op.committed = "settled", op.version + 1, True
        op.outcome = ("succeeded", None)
        if slot.holder == op_id:
            slot.holder, slot.pending = None, False

    def settle_task(self, op_id: str, error: str | None, attempt: int | None, runner: str | None) -> None:
        """Settle, called by the run ``runner`` of ``attempt`` (the sweep's direct settle: no runner)."""
        op = self.ops[op_id]
        slot = self.slot(op.inst)
        if op.state == "settled" or error == "ClaimLost":
            return
        if attempt != op.attempt:
            return  # a retried Settle of an earlier attempt: the resumed operation is not its to settle
        if runner is not None and op.runner is not None and runner != op.runner:
            return  # a run that lost its claim to another
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

    # -- the sweep --

    def sweep(self, op_id: str) -> str:
        """The stuck-operation sweep's action on one operation past its lease: one admitted or planned is restarted
        (a new run) up to the restart limit; one committed is settled as Settle would (only Settle was left); one
        awaiting consent is settled consent_expired; one out of restarts is settled unconfirmed interrupted."""
        op = self.ops[op_id]
        if op.state not in IN_FLIGHT or not self.past_lease(op):
            return "not_due"
        if op.state in ("admitted", "planned") and op.restarts < sweeps.MAX_RESTARTS:
            op.restarts, op.runner, op.version = op.restarts + 1, None, op.version + 1
            self.slot(op.inst).lease_until = self.now + self.lease
            self.start(op)
            return "started"
        error = {"committed": None, "awaiting_consent": "States.Timeout"}.get(op.state, "ExecutionEnded")
        self.settle_task(op_id, error, op.attempt, None)
        return "settled"

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
    runner: str | None
    restarts: int
    lease_until: int

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
    return [dynamo.unmarshal(item) for item in raw_workspace_items(stack, workspace_id)]


def raw_workspace_items(stack: devstack.Stack, workspace_id: str) -> list[dict[str, Any]]:
    """The workspace's items as DynamoDB answers them (attribute values typed: what a Query returns)."""
    table = dynamodb_backends[DEFAULT_ACCOUNT_ID][stack.region].get_table(stack.table_name)
    partition = table.items.get(DynamoType({"S": f"TENANT#{TENANT}#WS#{workspace_id}"}), {})
    return [item.to_json()["Attributes"] for item in partition.values()]


def read_stored(stack: devstack.Stack, workspace_id: str) -> Stored:
    stored = Stored({}, {}, {}, 0)
    for raw in raw_workspace_items(stack, workspace_id):
        item = dynamo.unmarshal(raw)
        kind, _, name = item["sk"].partition("#")
        if kind == "OP":
            # through the store's own reader (the item keeps its cold fields packed), as the model's fields
            item = workspace.operation_of(raw).model_dump(by_alias=True, mode="json")
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
                runner=item.get("runner"),
                restarts=item.get("restarts", 0),
                lease_until=item.get("leaseUntil", 0),
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
        "runner": op.runner,
        "restarts": op.restarts,
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


# ---- playing Step Functions Express --------------------------------------------------------------------------------


@dataclass
class Run:
    """One Express execution of the install state machine: its ARN (``$$.Execution.Id``), operation and state."""

    arn: str
    op_id: str
    event: dict[str, Any]
    start: dict[str, Any]  # its input as started (a duplicate run starts with the same)
    next: str = "plan"  # plan | consent | commit | settle | done
    end: str | None = None  # Settled | Duplicate | AwaitingConsent | SettlementFailed | TimedOut


class Harness:
    """The stack, the caller, and the runs ``workflows.start`` was asked for (in order: ARN, input)."""

    def __init__(self, stack: devstack.Stack, caller: Caller) -> None:
        self.stack = stack
        self.caller = caller
        self.recorded: list[tuple[str, dict[str, Any]]] = []
        self.now = T0
        self.runs = itertools.count()

    def start(self, arn: str, name: str, payload: dict[str, Any]) -> str:
        """StartExecution of an Express machine: every call a new run, its ARN in AWS's Express form."""
        prefix, _, machine = arn.partition(":stateMachine:")
        run_arn = f"{prefix}:express:{machine}:{name}:run-{next(self.runs)}"
        self.recorded.append((run_arn, json.loads(json.dumps(payload))))
        return run_arn

    def operation(self, workspace: str, op_id: str) -> dict[str, Any]:
        op = self.caller.get(f"/v1/workspaces/{workspace}/operations/{op_id}")
        assert op.status == 200, op.body
        return dict(op.body)

    def decide(self, workspace: str, op: dict[str, Any], decision: str, key: str) -> Any:
        """An owner decides on exactly the plan ``op`` (as read) waits with."""
        return self.caller.decide(workspace, op, decision, key=key)

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


def task_input(step: str, event: dict[str, Any], run_arn: str) -> dict[str, Any]:
    """What the ASL hands the task: the state, with the run's ``$$.Execution.Id`` at ``$.runner.execution`` (set by
    its first state)."""
    return {**event, "runner": {"execution": run_arn}}


def error_of(exc: BaseException) -> dict[str, str]:
    """``$.error`` as the ASL Catch writes it."""
    return {"Error": type(exc).__name__, "Cause": json.dumps({"errorMessage": str(exc)})}


def due_operations(stack: devstack.Stack, workspace_id: str, now: int) -> dict[str, dict[str, Any]]:
    """The workspace's operations due at ``now`` (in the due index, their lease over), read in-process as the
    index's Query answers them: operation id → item."""
    due_now = {}
    for raw in raw_workspace_items(stack, workspace_id):
        item = dynamo.unmarshal(raw)
        if item["sk"].startswith("OP#") and item.get("dueShard") and item["leaseUntil"] <= now:
            due_now[item["sk"].partition("#")[2]] = raw
    return due_now


class OperationsModel(RuleBasedStateMachine):
    harness: Harness  # set by the test

    def __init__(self) -> None:
        super().__init__()
        self.workspace = f"ws-{next(_workspaces)}"
        self.world = World(self.workspace)
        self.harness.recorded.clear()
        self.harness.now = T0
        self.harness.runs = itertools.count()
        self.runs: dict[str, Run] = {}  # ARN → run, in the order they started
        self.keys: list[str] = []
        self.sent: list[Req] = []
        self.admitted: dict[str, str] = {}  # key → operation id
        self.digests: dict[str, str] = {}  # operation id → request digest, once seen
        self.outcomes: dict[str, tuple[str, str | None]] = {}  # settled outcomes, once seen
        self.versions: dict[str, int] = {}
        self.decided: list[tuple[str, dict[str, Any], str]] = []  # (key, the operation as decided on, decision)
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

    def collect_started(self, *, crashed: bool = False, ordered: bool = True) -> None:
        """The runs the step started are the model's (operation and attempt, in order unless the step is the sweep,
        which goes by shard and due time); a crashed step started a prefix of them, and an operation whose start it
        never reached is left to the sweep (an orphan)."""
        got = [(payload["operationId"], payload.get("attempt")) for _, payload in self.harness.recorded]
        want = self.world.starts
        if not ordered:
            got, want = sorted(got), sorted(want)
        if crashed:
            assert got == want[: len(got)], f"a crashed step started {got}, model {want}"
            for op_id, _ in want[len(got) :]:
                self.world.orphans.add(op_id)
        else:
            assert got == want, f"started runs {got} != model {want}"
        for arn, payload in self.harness.recorded:
            self.runs[arn] = Run(arn, payload["operationId"], dict(payload), dict(payload))
            self.world.orphans.discard(payload["operationId"])
        self.harness.recorded.clear()
        self.world.starts.clear()

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

    def crashed_step(self, predict: Any, act: Any, k: int, what: str) -> None:
        """A step (a request, a decision, a sweep action) dies after its k-th AWS call: the store holds the model's
        state either before it or after it, and the runs it started are a prefix of the model's."""
        before = copy.deepcopy(self.world)
        predict(self.world)
        after = self.world
        self.fresh = None
        with crash_after(k) as crash, contextlib.suppress(InjectedCrash):
            act()
        event(f"{what} crashed={crash.crashed}")
        if not crash.crashed:
            self.collect_started()
            return
        stored = self.stored()
        if not differences(after, stored):
            self.world = after
        elif not differences(before, stored):
            self.world = before
            self.world.starts.clear()
        else:
            raise AssertionError(
                f"{what} crashed after {crash.calls} and left neither the state before nor after:\n  "
                + "\n  ".join(differences(after, stored))
            )
        self.collect_started(crashed=True)

    def request(self, req: Req, *, crash_at: int | None = None) -> Answer:
        """Send one request (optionally crashing its k-th AWS call, then resending it as a client would)."""
        if crash_at is not None:
            self.crashed_step(lambda world: world.admit(req), lambda: self.send(req), crash_at, "admission")
        expected = self.world.admit(req)
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

    def predict_task(self, run: Run) -> tuple[int, bool, bool] | None:
        """What the model says the run's next task does (applied to the world); raises TaskError as the task would."""
        step, op_id = run.next, run.op_id
        attempt = run.event.get("attempt")
        if step == "plan":
            return self.world.plan_task(op_id, run.arn, attempt)
        if step == "consent":
            self.world.consent_task(op_id, run.arn)
        elif step == "commit":
            self.world.commit_task(op_id, int(run.event["plan"]["version"]))
        else:
            error = run.event.get("error")
            self.world.settle_task(op_id, error["Error"] if error else None, attempt, run.arn)
        return None

    def run_task(self, run: Run, crash_at: int | None = None, route: bool = False, twice: bool = False) -> None:
        """One task of a run, as Step Functions Express runs it (crash: retry later, or route to Settle; twice: the
        task's handler runs again with the same input, the second answer is the task's)."""
        world_before = copy.deepcopy(self.world)
        step, op_id = run.next, run.op_id
        predicted_error: str | None = None
        predicted: tuple[int, bool, bool] | None = None
        try:
            predicted = self.predict_task(run)
        except TaskError as exc:
            predicted_error = exc.name
        world_after = self.world
        function = TASK_FUNCTIONS[step]
        payload = task_input(step, run.event, run.arn)
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
        state = world_before.ops[op_id].state
        event(f"{step}: crash_at={crash_at} crashed={crashed} route={route} twice={twice} state={state}")
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
            self.world.starts.clear()
            self.last = f"{step} of {op_id[:14]} crashed after {plan.calls}"
            if twice:
                self.run_task(run)  # the same call again, whose answer is the task's
            elif route and step == "settle":
                self.lose(run, "SettlementFailed")  # its retries ran out: left to the sweep
            elif route:
                run.event["error"] = dict(TRANSIENT_ERROR)
                run.next = "settle"
            return  # else: Step Functions' Retry runs the same task again
        got_error = type(raised).__name__ if raised is not None else None
        assert got_error == predicted_error, (
            f"{step} of {op_id[:14]} raised {raised!r}; model expects {predicted_error}"
        )
        self.last = f"{step} of {op_id[:14]} by {run.arn.rsplit(':', 1)[-1]}"
        self.collect_started()
        if twice:
            # the matches_the_model invariant runs between steps only: check the first call's effect here
            diffs = differences(self.world, self.stored())
            assert not diffs, f"after the first of two runs of {self.last}:\n  " + "\n  ".join(diffs)
            self.follow_versions()
            self.run_task(run)
            return
        if step == "settle":
            assert raised is None, f"settlement failed: {raised!r}"
            run.next, run.end = "done", "Settled"
        elif got_error == "ClaimLost" and step != "settle":
            run.next, run.end = "done", "Duplicate"  # the ASL's Duplicate state: no Settle
        elif raised is not None:
            run.event["error"] = error_of(raised)
            run.next = "settle"
        elif step == "plan":
            assert predicted is not None
            got = (result["version"], result["needsConsent"], result["rejected"])
            assert got == predicted, (
                f"plan of {op_id[:14]} answered (version, needsConsent, rejected) {got}, model {predicted}"
            )
            run.event["plan"] = result
            # the ASL's choice: a rejected plan settles (refused consent_rejected), one asking consent records a wait
            run.next = "settle" if result["rejected"] else "consent" if result["needsConsent"] else "commit"
        elif step == "consent":
            run.next, run.end = "done", "AwaitingConsent"  # the wait is recorded; a decision starts a new run
        else:
            run.event["commit"] = result
            # the ASL's CommitSettled choice: a commit that settled its operation ends the run, else Settle
            if result.get("settled") is True:
                run.next, run.end = "done", "Settled"
            else:
                run.next = "settle"

    def lose(self, run: Run, end: str) -> None:
        """The run ends without settling its operation: if it was the one to run it, the operation is left to the
        sweep (past its lease)."""
        run.next, run.end = "done", end
        self.world.orphans.add(run.op_id)

    def follow_versions(self) -> None:
        for op_id, op in self.stored().ops.items():
            self.world.ops[op_id].version = op.version  # follow the fencing counter (asserted monotonic below)

    def decide(self, op_id: str, decision: str, key: str, body: dict[str, Any], crash_at: int | None) -> None:
        """An owner decides (over HTTP, the decision possibly dying after its k-th AWS call and resent with its
        key): recorded, it starts a new run of the operation."""
        if crash_at is not None:
            self.crashed_step(
                lambda world: world.decide(op_id, decision, key),
                lambda: self.harness.decide(self.workspace, body, decision, key),
                crash_at,
                "decision",
            )
        expected = self.world.decide(op_id, decision, key)
        self.fresh = None
        response = self.harness.decide(self.workspace, body, decision, key)
        event(f"decide: {decision} → {response.status}")
        self.last = f"{decision} of {op_id[:14]} (key {key})"
        assert (response.status, response.code) == (expected.status, expected.code), (
            f"{decision} of {op_id[:14]} answered {response.status} {response.body}, model expects {expected}"
        )
        self.collect_started()

    def live_runs(self) -> list[str]:
        return [arn for arn, run in self.runs.items() if run.next != "done"]

    def sweep_due(self, crash_at: int | None = None, pick: int = 0) -> None:
        """The operation sweep: every due shard of the workspace's operations, in-process as the Map runs it; or one
        due operation's action dying after its k-th AWS call (the sweeper's process dies: nothing catches it)."""
        due_now = due_operations(self.harness.stack, self.workspace, self.world.now)
        if crash_at is not None and due_now:
            op_id = sorted(due_now)[pick % len(due_now)]
            item = due_now[op_id]
            self.crashed_step(
                lambda world: world.sweep(op_id),
                lambda: sweeps._sweep_operation(item, self.world.now),
                crash_at,
                "sweep",
            )
            self.last = f"the sweep of {op_id[:14]} crashed"
            return
        expected: dict[str, int] = {}
        for op_id in due_now:
            outcome = self.world.sweep(op_id)
            expected[outcome] = expected.get(outcome, 0) + 1
        counts: dict[str, int] = {}
        self.fresh = None
        for shard in sorted({due.shard_of(op_id) for op_id in due_now}):
            cursor: str | None = None
            while True:
                page = sweeps.sweep(DueKind.OPERATION, shard, self.world.now, cursor)
                for outcome, n in page.counts.items():
                    counts[outcome] = counts.get(outcome, 0) + n
                cursor = page.cursor
                if not cursor:
                    break
        event(f"sweep: {sorted(expected.items())}")
        self.last = f"the sweep at +{self.world.now - T0}s"
        assert counts == expected, f"the sweep did {counts}, model {expected}"
        self.collect_started(ordered=False)

    def advance_clock(self, seconds: int) -> None:
        self.world.now += seconds
        self.harness.now = self.world.now

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

    # -- rules: runs --

    @precondition(lambda self: self.live_runs())
    @rule(data=st.data())
    def run_to_the_end(self, data: st.DataObject) -> None:
        run = self.runs[data.draw(st.sampled_from(self.live_runs()), label="run")]
        while run.next != "done":
            self.run_task(run)

    @precondition(lambda self: self.live_runs())
    @rule(data=st.data())
    def step_run(self, data: st.DataObject) -> None:
        self.run_task(self.runs[data.draw(st.sampled_from(self.live_runs()), label="run")])

    @precondition(lambda self: self.live_runs())
    @rule(data=st.data(), fault=FAULTS, k=CRASH_POINTS)
    def task_fault(self, data: st.DataObject, fault: str, k: int) -> None:
        """What Step Functions Express may do to the next task of a run: it dies after its k-th AWS call and is
        retried later ("retry") or caught and routed to Settle ("route"; Settle's own retries running out end the
        run at SettlementFailed); it runs twice, its first call dying after its k-th AWS call or not ("twice",
        "twice after a crash"), the second's answer the task's; or the 5-minute limit stops the run before it
        ("stopped")."""
        run = self.runs[data.draw(st.sampled_from(self.live_runs()), label="run")]
        if fault == "stopped":
            self.lose(run, "TimedOut")
            self.last = f"{run.arn.rsplit(':', 1)[-1]} timed out"
        elif fault.startswith("twice"):
            self.run_task(run, crash_at=k if fault == "twice after a crash" else None, twice=True)
        else:
            self.run_task(run, crash_at=k, route=fault == "route")

    @precondition(lambda self: self.runs)
    @rule(data=st.data())
    def duplicate_run_starts(self, data: st.DataObject) -> None:
        """Express starts a run at least once: a second run with the input of an earlier start (of a run still
        going or ended, of an operation in flight or settled), interleaved with the others from here on."""
        twin = self.runs[data.draw(st.sampled_from(list(self.runs)), label="duplicated run")]
        arn = f"{twin.arn.rsplit(':', 1)[0]}:run-{next(self.harness.runs)}"
        self.runs[arn] = Run(arn, twin.op_id, dict(twin.start), dict(twin.start))
        self.last = f"a duplicate of {twin.arn.rsplit(':', 1)[-1]} started as {arn.rsplit(':', 1)[-1]}"
        event(f"duplicate run of an operation {self.world.ops[twin.op_id].state}")

    # -- rules: consent --

    def awaiting(self) -> list[str]:
        return sorted(self.world.waits.values())

    def owner_decides(self, data: st.DataObject, decision: str, k: int | None, op_id: str | None = None) -> None:
        """An owner reads an operation awaiting consent and decides on its plan (the decision may die after its
        k-th AWS call, and is then resent with its key)."""
        op_id = op_id or data.draw(st.sampled_from(self.awaiting()), label="awaiting")
        body = self.harness.operation(self.workspace, op_id)
        key = f"decision-{next(self.decision_keys)}"
        self.decided.append((key, body, decision))
        self.decide(op_id, decision, key, body, k)

    @precondition(lambda self: self.awaiting())
    @rule(data=st.data(), k=DECISION_CRASHES)
    def owner_approves(self, data: st.DataObject, k: int | None) -> None:
        self.owner_decides(data, "approve", k)

    @precondition(lambda self: self.awaiting())
    @rule(data=st.data(), k=DECISION_CRASHES)
    def owner_rejects(self, data: st.DataObject, k: int | None) -> None:
        self.owner_decides(data, "reject", k)

    @precondition(lambda self: self.decided)
    @rule(data=st.data())
    def decision_resent(self, data: st.DataObject) -> None:
        """An owner's earlier decision is sent again with its key (its first answer was lost)."""
        key, body, decision = data.draw(st.sampled_from(self.decided), label="resent decision")
        self.decide(body["operationId"], decision, key, body, None)

    # -- rules: time and the sweep --

    @rule(window=st.sampled_from((False, False, False, True)))
    def time_passes(self, window: bool) -> None:
        """Every lease ends (or the consent window: nobody decides in time)."""
        self.advance_clock((self.world.window if window else self.world.lease) + 1)
        self.last = "the consent window ended" if window else "the leases ended"

    def anything_due(self) -> bool:
        return any(op.state in IN_FLIGHT and self.world.past_lease(op) for op in self.world.ops.values())

    @precondition(lambda self: self.anything_due())
    @rule(k=st.sampled_from((None, None, 1, 2)), pick=st.integers(0, 3))
    def sweep(self, k: int | None, pick: int) -> None:
        self.sweep_due(k, pick)

    @precondition(lambda self: self.live_runs() or any(op.state in IN_FLIGHT for op in self.world.ops.values()))
    @rule(data=st.data())
    def converge(self, data: st.DataObject) -> None:
        """Every run is played to its end; an owner decides on each wait for consent (approves, rejects, or lets
        the window end); then the clock and the sweep run, until nothing is in flight: each operation settles or is
        deferred (pending, its client's to resume). One run may time out first (its operation left to the sweep's
        restarts)."""
        if self.live_runs() and data.draw(st.booleans(), label="a run times out first"):
            self.lose(self.runs[data.draw(st.sampled_from(self.live_runs()), label="timed out")], "TimedOut")
        for _ in range(sweeps.MAX_RESTARTS + 4):
            for arn in self.live_runs():
                while self.runs[arn].next != "done":
                    self.run_task(self.runs[arn])
            # a wait past its deadline takes no decision (409): the sweep settles it
            open_waits = [op_id for op_id in self.awaiting() if not self.world.past_lease(self.world.ops[op_id])]
            decisions = {op_id: data.draw(CONVERGE_DECISIONS, label="decision") for op_id in open_waits}
            for op_id, decision in decisions.items():
                if decision is not None:
                    self.owner_decides(data, decision, None, op_id)
            if any(decisions.values()):
                continue
            if not any(op.state in IN_FLIGHT for op in self.world.ops.values()):
                break
            self.advance_clock((self.world.window if self.awaiting() else self.world.lease) + 1)
            self.sweep_due()
        due_now = due_operations(self.harness.stack, self.workspace, self.world.now)
        stuck = [
            f"{op.operation_id[:14]} {op.state} (restarts {op.restarts}, lease +{op.lease_until - self.world.now}s, "
            f"{'due' if op.operation_id in due_now else 'not due'})"
            for op in self.read_ops()
            if op.state in IN_FLIGHT
        ]
        assert not stuck, f"still in flight after every run ended and the sweep ran: {stuck}"
        self.last = "converged"

    def read_ops(self) -> list[SOp]:
        self.fresh = None
        return list(self.stored().ops.values())

    # -- invariants (from what is stored) --

    @invariant()
    def matches_the_model(self) -> None:
        stored = self.stored()
        diffs = differences(self.world, stored)
        assert not diffs, f"after {self.last}:\n  " + "\n  ".join(diffs)
        self.follow_versions()

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
        for op in stored.ops.values():
            if op.state in RUNNABLE and op.lease_until > self.world.now:
                assert self.can_run(op), (
                    f"{op.operation_id} is {op.state} (attempt {op.attempt}, runner {op.runner}) with its lease on "
                    "but no run can run it, and the model knows of no crash or stop that left it to the sweep; its "
                    f"runs: {self.runs_of(op.operation_id)}"
                )
        assert stored.live_count == sum(1 for i in stored.insts.values() if i.is_live)

    def runs_of(self, op_id: str) -> list[tuple[str, str, str | None, int | None]]:
        return [
            (arn.rsplit(":", 1)[-1], run.next, run.end, run.event.get("attempt"))
            for arn, run in self.runs.items()
            if run.op_id == op_id
        ]

    def can_run(self, op: SOp) -> bool:
        """A live run of its attempt that is its runner, or (unclaimed) one that will claim or settle it; or a loss
        the sweep recovers once the lease ends: a run that could run it stopped (timed out, or Settle's retries ran
        out), or a crash fell between a write and the start that should have followed it."""
        if op.operation_id in self.world.orphans:
            return True
        return any(
            run.op_id == op.operation_id
            and run.next != "done"
            and run.event.get("attempt") == op.attempt
            and (run.arn == op.runner or (op.runner is None and run.next in ("plan", "settle")))
            for run in self.runs.values()
        )

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
    monkeypatch.setattr(clock, "now", lambda: harness.now)
    return harness


def test_operations_against_the_reference_model(harness):
    class Machine(OperationsModel):
        pass

    Machine.harness = harness
    run_state_machine_as_test(Machine, settings=SETTINGS)


# ---- the bugs the model found (their minimal sequences) and the consent rules, as plain regression tests ----------


def _started(harness: Harness) -> dict[str, Any]:
    """The state of the run started last (what the state machine would run), its ARN as ``runner`` (the
    ``$$.Execution.Id`` the ASL hands every task)."""
    arn, payload = harness.recorded[-1]
    return {**payload, "runner": arn}


def _task(harness: Harness, step: str, event: dict[str, Any]) -> Any:
    """One task of the run whose state is ``event``, with the input the ASL hands it."""
    return harness.invoke(TASK_FUNCTIONS[step], task_input(step, event, event["runner"]))


def _await_consent(harness: Harness, event: dict[str, Any]) -> None:
    """The AwaitConsent state's task: record the wait (the run then ends)."""
    assert _task(harness, "consent", event)["waiting"] is True


def _through_consent(harness: Harness, workspace_id: str, event: dict[str, Any]) -> dict[str, Any]:
    """If Plan asked consent: the run records the wait and ends, an owner approves the plan, and the run the
    decision starts plans again (no consent asked now). The state of the run that goes on to Commit."""
    if not event["plan"]["needsConsent"]:
        return event
    _await_consent(harness, event)
    return _approve(harness, workspace_id, event["operationId"])


def _approve(harness: Harness, workspace_id: str, op_id: str) -> dict[str, Any]:
    """An owner approves the plan the operation waits with; the decision starts a new run, which plans (the
    recorded plan, approved): its state, ready for Commit."""
    harness.recorded.clear()
    decided = harness.decide(workspace_id, harness.operation(workspace_id, op_id), "approve", f"approve-{op_id}")
    assert decided.status == 200, decided.body
    assert [payload["operationId"] for _, payload in harness.recorded] == [op_id], "the decision started no run"
    event = _started(harness)
    event["plan"] = _task(harness, "plan", event)
    assert event["plan"]["needsConsent"] is False, event["plan"]
    return event


def _waiting_for_consent(harness: Harness, workspace_id: str, version: str, key: str) -> tuple[str, dict[str, Any]]:
    """Install hello@``version`` as ``key``: Plan asks consent and the run records the wait. Returns the operation
    id and the run's state."""
    admitted = harness.send(workspace_id, Req("app", "put", version, "owner", None, key))
    assert admitted.status == 202, admitted.body
    event = _started(harness)
    event["plan"] = _task(harness, "plan", event)
    assert event["plan"]["needsConsent"], event["plan"]
    _await_consent(harness, event)
    return admitted.body["operationId"], event


def _deferred(
    harness: Harness,
    workspace_id: str,
    key: str,
    *,
    commit_crashes_after: int | None,
    settle_dies_after_its_write: bool = False,
) -> dict[str, Any]:
    """Install hello@1.0.0 as ``key``; Plan runs (it asks consent for api_read: an owner approves, and the run the
    decision starts plans again); Commit dies (after its k-th AWS call, or before it starts); the Catch routes to
    Settle with a transient error, which defers the operation to pending (optionally dying right after that write,
    so that Step Functions' Retry runs Settle again with the same input). The state of the run that deferred it."""
    admitted = harness.send(workspace_id, Req("app", "put", "1.0.0", "owner", None, key))
    assert admitted.status == 202, admitted.body
    event = _started(harness)
    event["plan"] = _task(harness, "plan", event)
    assert event["plan"]["needsConsent"], event["plan"]
    event = _through_consent(harness, workspace_id, event)
    if commit_crashes_after is not None:
        with crash_after(commit_crashes_after) as crash, contextlib.suppress(InjectedCrash):
            _task(harness, "commit", event)
        assert crash.crashed
    event["error"] = dict(TRANSIENT_ERROR)
    if settle_dies_after_its_write:
        with crash_after(2) as crash, contextlib.suppress(InjectedCrash):  # BatchGetItem, TransactWriteItems
            _task(harness, "settle", event)
        assert crash.crashed
    _task(harness, "settle", event)
    return event


def _run_to_the_end(harness: Harness, workspace_id: str, event: dict[str, Any]) -> None:
    event = {k: v for k, v in event.items() if k not in ("plan", "commit", "error")}
    try:
        event["plan"] = _task(harness, "plan", event)
        event = _through_consent(harness, workspace_id, event)
        event["commit"] = _task(harness, "commit", event)
    except Exception as exc:
        event["error"] = error_of(exc)
    _task(harness, "settle", event)


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


def test_a_resume_whose_admission_dies_before_starting_is_restarted_by_the_sweep_past_its_lease(harness):
    """A pending operation (deferred while planned) is resumed by the client's retry; admission dies after the
    resume's write and before StartExecution. With Express no execution can be looked up, and a resend replays an
    in-flight operation without starting it (only an ``admitted`` one is started again): the resumed operation has no
    run until its lease (renewed by the resume) ends; then the sweep restarts it, and that run settles it. (Under
    Standard, the resend started the resumed execution by name, ``<op>-1``: it used to restart only ``admitted``
    operations, so one resumed into planned stayed in flight with no execution until someone sent the same intent.)"""
    ws = f"ws-plain-{next(_workspaces)}"
    event = _deferred(harness, ws, "k-1", commit_crashes_after=1)
    op_id = event["operationId"]
    harness.recorded.clear()
    with crash_after(2) as crash, contextlib.suppress(InjectedCrash):  # BatchGetItem, TransactWriteItems (resume)
        harness.send(ws, Req("app", "put", "1.0.0", "owner", None, "k-1"))
    assert crash.crashed and harness.recorded == []
    resent = harness.send(ws, Req("app", "put", "1.0.0", "owner", None, "k-1"))
    assert (resent.status, resent.body["state"], resent.body["attempt"]) == (202, "planned", 1), resent.body
    assert harness.recorded == [], "a resend of a planned operation started a run"

    resumed = workspace.get_operation(TENANT, ws, op_id)
    assert resumed is not None
    assert sweeps.sweep(DueKind.OPERATION, due.shard_of(op_id), resumed.lease_until - 1).counts == {}
    swept = sweeps.sweep(DueKind.OPERATION, due.shard_of(op_id), resumed.lease_until)
    assert swept.counts == {"started": 1}, swept.counts
    assert [(payload["operationId"], payload["attempt"]) for _, payload in harness.recorded] == [(op_id, 1)]
    restarted = workspace.get_operation(TENANT, ws, op_id)
    assert restarted is not None and (str(restarted.state), restarted.restarts) == ("planned", 1), restarted
    _run_to_the_end(harness, ws, _started(harness))
    final = workspace.get_operation(TENANT, ws, op_id)
    assert final is not None and final.outcome is not None and final.outcome.result == "succeeded", final


@pytest.mark.parametrize("how", ["pending", "lease expired"])
def test_superseding_an_operation_that_already_committed_does_not_report_it_cancelled(harness, how):
    """Operation A committed its change (the installation is A's plan, version 1) but has not settled: it was
    deferred after Commit died past its write, or its lease expired before Settle ran. B supersedes it (B's
    If-Match is A's version). A must settle succeeded (it used to settle "unconfirmed / cancelled" although its
    change was in effect: a version bump by an operation that did not succeed, and A's caller told nothing
    happened). Since the commit settles (docs/decisions.md, "Commit settles"), a commit that landed has settled A
    already: the deferral and the expired lease find it settled, and B is admitted on a free slot; A must still read
    succeeded."""
    ws = f"ws-plain-{next(_workspaces)}"
    if how == "pending":
        # BatchGetItem (read), PutItem (the release's holder), TransactWriteItems (the commit)
        event = _deferred(harness, ws, "k-a", commit_crashes_after=3)
        superseding = Req("app", "delete", None, "owner", 1, "k-b")  # any intent supersedes a pending one
    else:
        admitted = harness.send(ws, Req("app", "put", "1.0.0", "owner", None, "k-a"))
        assert admitted.status == 202, admitted.body
        event = _started(harness)
        event["plan"] = _task(harness, "plan", event)
        event = _through_consent(harness, ws, event)
        event["commit"] = _task(harness, "commit", event)
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
    event["plan"] = _task(harness, "plan", event)
    assert event["plan"]["needsConsent"], event["plan"]
    _await_consent(harness, event)
    _task(harness, "settle", {**event, "error": dict(TRANSIENT_ERROR)})  # the wait deferred
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
    recorded plan, which asks consent again; the new wait (new deadline) is approved and commits."""
    ws = f"ws-plain-{next(_workspaces)}"
    op_id, event = _waiting_for_consent(harness, ws, "1.1.0", "k-1")
    _task(harness, "settle", {**event, "error": dict(TRANSIENT_ERROR)})
    deferred = workspace.get_operation(TENANT, ws, op_id)
    assert deferred is not None and (str(deferred.state), deferred.phase) == ("pending", "planned"), deferred

    harness.now += 3600
    resumed = harness.send(ws, Req("app", "put", "1.1.0", "owner", None, "k-1"))
    assert (resumed.status, resumed.body["state"], resumed.body["attempt"]) == (202, "planned", 1), resumed.body
    event = _started(harness)
    event["plan"] = _task(harness, "plan", event)
    assert event["plan"]["needsConsent"], event["plan"]
    _await_consent(harness, event)
    waiting = workspace.get_operation(TENANT, ws, op_id)
    assert waiting is not None and waiting.consent is not None and str(waiting.state) == "awaiting_consent"
    deadline = harness.now + limits().consent_window_seconds
    assert waiting.consent.deadline == deadline, waiting.consent
    slot = workspace.get_slot(TENANT, ws, "app")
    assert slot is not None and slot.lease_until == deadline, slot
    event = _approve(harness, ws, op_id)
    event["commit"] = _task(harness, "commit", event)
    _task(harness, "settle", event)
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
    event["plan"] = _task(harness, "plan", event)
    _await_consent(harness, event)
    _task(harness, "settle", {**event, "error": dict(TRANSIENT_ERROR)})
    decided = harness.decide(ws, harness.operation(ws, admitted.body["operationId"]), "approve", "k-approve")
    assert (decided.status, decided.code) == (409, "stale_authority"), decided.body

    listed = harness.caller.get(f"/v1/workspaces/{ws}/approvals")
    assert listed.status == 200, listed.body
    assert listed.body["items"] == [], "a pending operation is listed as waiting for a decision"
    assert not [i for i in workspace_items(harness.stack, ws) if i["sk"].startswith("CONSENT#")]


def test_a_retried_settle_of_an_earlier_attempt_leaves_the_resumed_attempt_alone(harness):
    """Attempt 0 waits for consent; its Consent task dies after its write and the Catch routes to Settle, which
    defers the operation and dies right after that write. Before Step Functions' Retry runs that Settle again, the
    client resumes the operation: attempt 1 plans and waits for consent. The retried Settle of attempt 0 must not
    touch attempt 1 (it used to defer it again: attempt 1's execution waited on a task token whose wait was gone,
    found by the reference model as "waits on tok-…, but op is pending, wait {}"; with Express there is no token,
    and the wait itself must stay)."""
    ws = f"ws-plain-{next(_workspaces)}"
    op_id, first = _waiting_for_consent(harness, ws, "1.1.0", "k-1")
    first["error"] = dict(TRANSIENT_ERROR)
    with crash_after(2) as crash, contextlib.suppress(InjectedCrash):  # BatchGetItem, TransactWriteItems (defer)
        _task(harness, "settle", first)
    assert crash.crashed

    resumed = harness.send(ws, Req("app", "put", "1.1.0", "owner", None, "k-1"))
    assert (resumed.status, resumed.body["attempt"]) == (202, 1), resumed.body
    second = _started(harness)
    second["plan"] = _task(harness, "plan", second)
    _await_consent(harness, second)
    waiting = workspace.get_operation(TENANT, ws, op_id)
    assert waiting is not None and str(waiting.state) == "awaiting_consent"

    retried = _task(harness, "settle", first)  # Step Functions' Retry of attempt 0's Settle
    assert retried["settled"] is False, retried
    after = workspace.get_operation(TENANT, ws, op_id)
    assert after == waiting, "the retried Settle of attempt 0 changed attempt 1"
    assert [i["sk"] for i in workspace_items(harness.stack, ws) if i["sk"].startswith("CONSENT#")] == ["CONSENT#app"]
    third = _approve(harness, ws, op_id)
    third["commit"] = _task(harness, "commit", third)
    _task(harness, "settle", third)
    final = workspace.get_operation(TENANT, ws, op_id)
    assert final is not None and final.outcome is not None and final.outcome.result == "succeeded", final


def test_a_wait_for_consent_resumed_past_its_deadline_by_its_key_is_no_longer_listed(harness):
    """An operation waits for consent; nobody decides and its deadline passes before the sweep settles it; the
    client resends with its key, which resumes it as a new attempt, planned (it asks consent again). The old wait
    must go with the resume (found by the reference model as "CONSENT#… names op-…, which is planned": it stayed
    listed by GET …/approvals and a decision on it answered 409); the resumed run records a new wait, with a new
    deadline."""
    ws = f"ws-plain-{next(_workspaces)}"
    op_id, _ = _waiting_for_consent(harness, ws, "1.1.0", "k-1")
    harness.now += limits().consent_window_seconds + 1
    resumed = harness.send(ws, Req("app", "put", "1.1.0", "owner", None, "k-1"))
    assert (resumed.status, resumed.body["state"], resumed.body["attempt"]) == (202, "planned", 1), resumed.body
    assert not [i for i in workspace_items(harness.stack, ws) if i["sk"].startswith("CONSENT#")]
    listed = harness.caller.get(f"/v1/workspaces/{ws}/approvals")
    assert listed.status == 200 and listed.body["items"] == [], listed.body

    event = _started(harness)
    assert event["attempt"] == 1, event
    event["plan"] = _task(harness, "plan", event)
    assert event["plan"]["needsConsent"], event["plan"]
    _await_consent(harness, event)
    (wait,) = [i for i in workspace_items(harness.stack, ws) if i["sk"].startswith("CONSENT#")]
    assert (wait["operationId"], wait["deadline"]) == (op_id, harness.now + limits().consent_window_seconds), wait
