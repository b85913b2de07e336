"""Storage over time against its invariants: random publishes (content drawn from a small pool, so blobs are shared
between versions), abandoned upload sessions, yanks, installs, updates and uninstalls, clock jumps, and sweeps that
run whole or crash at any AWS call of any sweep action, in any order.

Everything runs as it does on AWS on one moto stack: the API (in-process), the real publish and install state
machines, the sweep as the maintenance Map runs it (every kind x shard, page after page, as of the model's clock).
The clock (``packyard.clock.now``) is the model's and only moves in the ``jump`` rule; a sweep's "now" is that clock.

Checked after every step, from what is stored (DynamoDB items and S3 objects, read in-process):
* the tenant's ledger ``usedBytes`` equals the bytes of its blob records that count (not orphans) plus the
  reservations of its live upload sessions: no reservation leaks, nothing credited twice;
* no referenced blob disappears: every blob of a published release, and of a yanked release that an installation
  still holds (active or previous), has its record and its object;
* nothing is retained past its time once the sweeps have had their chance (rule ``quiesce``: the clock jumps past
  every backoff and claim, the sweeps run until nothing is due): no live session past its deadline, no blob record
  or object that no release holds.
"""

from __future__ import annotations

import contextlib
import os
from collections import Counter
from typing import Any

import boto3
import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule, run_state_machine_as_test

import devstack
from devstack.api import LocalApi
from devstack.caller import Caller
from devstack.faults import InjectedCrash, crash_after
from packyard import clock
from packyard.store.due import DueKind
from packyard_cli.build import BuiltPackage, build_from_files
from tests.support.sweeping import sweep_kinds

TENANT = "t-storage"
PACKAGE = "kept"
WS = "ws-storage"
INSTALLATIONS = ("a", "b")
START = 1_900_000_000
LIVE_UPLOAD_STATES = ("awaiting_upload", "verifying")

# three contents: versions published with the same content share their archive and manifest blobs
CONTENTS: list[BuiltPackage] = [build_from_files({"SKILL.md": f"content {n}\n".encode() * (n + 1)}) for n in range(3)]

SETTINGS = settings(
    max_examples=int(os.environ.get("STORAGE_MODEL_EXAMPLES", "8")),
    stateful_step_count=14,
    deadline=None,
    derandomize=True,
    suppress_health_check=list(HealthCheck),
    phases=[Phase.explicit, Phase.generate],  # no shrinking: a failure prints its steps, each one a full stack run
)


def _table_items(stack: devstack.Stack) -> list[dict[str, Any]]:
    client = boto3.client("dynamodb", region_name=stack.region)
    items: list[dict[str, Any]] = []
    for page in client.get_paginator("scan").paginate(TableName=stack.table_name, ConsistentRead=True):
        items.extend(page["Items"])
    return items


def _objects(stack: devstack.Stack, prefix: str) -> set[str]:
    s3 = boto3.client("s3", region_name=stack.region)
    keys: set[str] = set()
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=stack.bucket_name, Prefix=prefix):
        keys.update(o["Key"] for o in page.get("Contents", []))
    return keys


def _s(item: dict[str, Any], name: str) -> str | None:
    value = item.get(name)
    return None if value is None else value.get("S")


def _n(item: dict[str, Any], name: str) -> int | None:
    value = item.get(name)
    return None if value is None else int(value["N"])


class Stored:
    """The tenant's storage, as it is in the table and the bucket."""

    def __init__(self, stack: devstack.Stack, tenant: str) -> None:
        items = [
            i
            for i in _table_items(stack)
            if str(_s(i, "pk")) == f"TENANT#{tenant}" or str(_s(i, "pk")).startswith(f"TENANT#{tenant}#")
        ]
        self.ledger = next((_n(i, "usedBytes") or 0 for i in items if _s(i, "sk") == "USAGE"), 0)
        self.blobs = {str(_s(i, "sha256")): i for i in items if _s(i, "sk") == "BLOB"}
        self.uploads = [i for i in items if _s(i, "sk") == "UPLOAD"]
        self.releases = {
            str(_s(i, "version")): i
            for i in items
            if str(_s(i, "pk")).endswith(f"#PACKAGE#{PACKAGE}") and str(_s(i, "sk")).startswith("VERSION#")
        }
        self.installations = [
            i for i in items if str(_s(i, "pk")).endswith(f"#WS#{WS}") and str(_s(i, "sk")).startswith("INST#")
        ]
        self.objects = _objects(stack, f"blobs/{tenant}/")

    def live_reservations(self) -> int:
        return sum(_n(u, "reservedBytes") or 0 for u in self.uploads if _s(u, "state") in LIVE_UPLOAD_STATES)

    def counted_blob_bytes(self) -> int:
        return sum(
            _n(b, "size") or 0
            for b in self.blobs.values()
            if not b.get("orphan", {}).get("BOOL", False) and "reclaimedAt" not in b
        )

    def held_versions(self) -> set[str]:
        held: set[str] = set()
        for inst in self.installations:
            for slot in ("release", "previous"):
                ref = inst.get(slot, {}).get("M")
                if ref:
                    held.add(ref["version"]["S"])
        return held

    def needed_blobs(self) -> set[str]:
        """Blobs that must exist: those of published releases and of releases an installation holds."""
        held = self.held_versions()
        needed: set[str] = set()
        for version, release in self.releases.items():
            if _s(release, "status") == "published" or version in held:
                needed.update({str(_s(release, "archiveSha256")), str(_s(release, "manifestDigest"))})
        return needed


class StorageModel(RuleBasedStateMachine):
    stack: devstack.Stack
    caller: Caller
    clock_box: list[int]
    examples = 0
    seen: Counter[str] = Counter()  # what the sweeps and installs did, over every example

    def __init__(self) -> None:
        super().__init__()
        StorageModel.examples += 1
        self.tenant = f"{TENANT}-{StorageModel.examples}"
        self.caller = Caller(LocalApi(self.stack), self.tenant)
        self.versions = 0
        self.published: list[str] = []
        self.yanked: set[str] = set()
        self.installed: dict[str, int] = {}  # installation → its version (ETag)
        self.keys = 0

    # ---- helpers ----

    @property
    def now(self) -> int:
        return self.clock_box[0]

    def key(self) -> str:
        self.keys += 1
        return f"k{self.keys}"

    def stored(self) -> Stored:
        return Stored(self.stack, self.tenant)

    def sweep_all(self) -> Counter[str]:
        return sweep_kinds(DueKind, self.now)

    # ---- publishing ----

    @rule(content=st.integers(0, len(CONTENTS) - 1))
    def publish(self, content: int) -> None:
        self.versions += 1
        version = f"1.0.{self.versions}"
        final = self.caller.publish(PACKAGE, version, CONTENTS[content])
        assert final["state"] == "published", final
        self.published.append(version)

    @rule(content=st.integers(0, len(CONTENTS) - 1))
    def abandon_upload(self, content: int) -> None:
        self.versions += 1
        session = self.caller.request_upload(PACKAGE, f"1.0.{self.versions}", CONTENTS[content])
        assert session.status == 201, session.body

    @precondition(lambda self: set(self.published) - self.yanked)
    @rule(data=st.data())
    def yank(self, data: st.DataObject) -> None:
        version = data.draw(st.sampled_from(sorted(set(self.published) - self.yanked)))
        answer = self.caller.delete(
            f"/v1/packages/{PACKAGE}/versions/{version}", headers={"Idempotency-Key": self.key()}
        )
        assert answer.status == 200, answer.body
        self.yanked.add(version)

    # ---- installations ----

    @precondition(lambda self: set(self.published) - self.yanked)
    @rule(data=st.data(), inst=st.sampled_from(INSTALLATIONS))
    def install(self, data: st.DataObject, inst: str) -> None:
        version = data.draw(st.sampled_from(sorted(set(self.published) - self.yanked)))
        current = self.installed.get(inst)
        admitted = self.caller.install(
            WS, inst, PACKAGE, version, key=self.key(), if_match=f'"{current}"' if current else None
        )
        assert admitted.status == 202, admitted.body
        settled = self.caller.wait_settled(WS, admitted)
        if settled.get("outcome", {}).get("result") == "succeeded":
            self.installed[inst] = self.caller.get(self.caller.installation_path(WS, inst)).body["version"]
        self.seen[f"install {settled.get('outcome', {}).get('result')}"] += 1

    @precondition(lambda self: self.installed)
    @rule(data=st.data())
    def uninstall(self, data: st.DataObject) -> None:
        inst = data.draw(st.sampled_from(sorted(self.installed)))
        admitted = self.caller.uninstall(WS, inst, key=self.key(), if_match=f'"{self.installed[inst]}"')
        assert admitted.status == 202, admitted.body
        settled = self.caller.wait_settled(WS, admitted)
        if settled.get("outcome", {}).get("result") == "succeeded":
            del self.installed[inst]

    # ---- time and sweeps ----

    @rule(seconds=st.sampled_from([60, 11 * 60, 31 * 60, 2 * 3600]))
    def jump(self, seconds: int) -> None:
        self.clock_box[0] += seconds

    @rule()
    def sweep(self) -> None:
        self.seen.update(self.sweep_all())

    @rule(k=st.integers(1, 6))
    def sweep_crashing(self, k: int) -> None:
        """The k-th AWS call of the sweep dies (the sweep loop may count it as a failed action, or it escapes)."""
        with contextlib.suppress(InjectedCrash), crash_after(k):
            self.sweep_all()

    @rule()
    def quiesce(self) -> None:
        """Past every backoff and claim, sweeps run until nothing changes: nothing is retained past its time."""
        self.clock_box[0] += 8 * 3600
        for _ in range(4):
            self.seen.update(self.sweep_all())
        stored = self.stored()
        expired_live = [
            u for u in stored.uploads if _s(u, "state") == "awaiting_upload" and (_n(u, "deadlineAt") or 0) <= self.now
        ]
        assert not expired_live, "sessions past their deadline still hold their reservations"
        needed = stored.needed_blobs()
        unneeded = {sha for sha, b in stored.blobs.items() if sha not in needed and "reclaimedAt" not in b}
        assert not unneeded, f"blob records nothing holds were not reclaimed: {sorted(unneeded)}"
        leftover = {key for key in stored.objects if key.rsplit("/", 1)[-1] not in needed}
        assert not leftover, f"blob objects nothing holds were not reclaimed: {sorted(leftover)}"

    def teardown(self) -> None:
        """Every example ends quiesced: whatever it left due is reclaimed or expired by then."""
        self.quiesce()
        self.ledger_is_blobs_plus_live_reservations()
        self.no_referenced_blob_disappears()

    # ---- invariants ----

    @invariant()
    def ledger_is_blobs_plus_live_reservations(self) -> None:
        stored = self.stored()
        assert stored.ledger == stored.counted_blob_bytes() + stored.live_reservations(), (
            stored.ledger,
            stored.counted_blob_bytes(),
            stored.live_reservations(),
        )

    @invariant()
    def no_referenced_blob_disappears(self) -> None:
        stored = self.stored()
        for sha in stored.needed_blobs():
            assert sha in stored.blobs, f"the record of referenced blob {sha} is gone"
            assert f"blobs/{self.tenant}/sha256/{sha}" in stored.objects, f"referenced blob {sha} is gone from S3"


@pytest.fixture(scope="module")
def storage_stack():
    with devstack.local_aws() as stack:
        yield stack


def test_storage_against_its_invariants(storage_stack, monkeypatch):
    clock_box = [START]
    monkeypatch.setattr(clock, "now", lambda: clock_box[0])

    class Machine(StorageModel):
        pass

    Machine.stack = storage_stack
    Machine.clock_box = clock_box
    run_state_machine_as_test(Machine, settings=SETTINGS)
    print("storage model:", dict(StorageModel.seen))
    # the examples reached what the invariants are about (fixed seed: the same examples every run)
    assert StorageModel.seen["expired"] and StorageModel.seen["reclaimed"] and StorageModel.seen["install succeeded"]
