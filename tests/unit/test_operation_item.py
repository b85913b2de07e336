"""The stored operation item (store.workspace.operation_item / operation_of): the fields a phase changes stay plain
attributes (conditions, update expressions, the due index and the TTL name them), the fields written once are one
packed attribute, and an operation reads back exactly as written, under 1 KB for an ordinary update with its baseline
and its plan (issue 23: every phase rewrites the item, billed per 1 KB)."""

from __future__ import annotations

import base64
import hashlib
import zlib
from typing import Any

import pytest

from packyard.errors import StoredItemInvalid
from packyard.installations.models import Creation, Installation, InstallationStatus, ReleaseRef
from packyard.installations.scopes import Scope
from packyard.operations.models import (
    Action,
    AskedPermission,
    Consent,
    Operation,
    OperationKind,
    OperationState,
    Outcome,
)
from packyard.store import dynamo, workspace
from packyard.store.pages import item_bytes

NOW = 1_796_183_420
OP_ID = "op-" + "4c4b55e9a7449c921c3b38c0c97fa57e"
PREVIOUS_OP = "op-" + "76d6e71f54201a898fae9d2c5b52f1b8"
# an Express execution id, the longest value a phase adds (the install workflow's runner)
RUNNER = "arn:aws:states:us-east-1:123456789012:express:packyard-InstallStateMachine:" + OP_ID + ":" + "f" * 36


def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def ref(version: str) -> ReleaseRef:
    return ReleaseRef(
        package="pkg",
        version=version,
        manifest_digest=sha(f"manifest {version}"),
        archive_sha256=sha(f"archive {version}"),
        archive_size=125,
    )


def installation(version: int, release: str, previous: str | None, by: str, config: dict[str, Any]) -> Installation:
    return Installation(
        tenant="t-capacity",
        workspace="ws",
        installation_id="i",
        instance_id="inst-f8d90108d3605dfca4ad249a",
        version=version,
        status=InstallationStatus.ACTIVE,
        creation=Creation.FRESH,
        package="pkg",
        release=ref(release),
        previous=ref(previous) if previous else None,
        scope=Scope(),
        config=config,
        last_operation_id=by,
        updated_at=NOW,
    )


def update(config: dict[str, Any] | None = None, **changes: Any) -> Operation:
    """An update 1.0.0 → 1.1.0, planned: the largest ordinary operation (a baseline and a plan, both with a previous
    release)."""
    config = {} if config is None else config
    op = Operation(
        tenant="t-capacity",
        workspace="ws",
        operation_id=OP_ID,
        installation_id="i",
        action=Action.PUT,
        kind=OperationKind.UPDATE,
        state=OperationState.PLANNED,
        version=2,
        request_digest=sha("request"),
        intent_digest=sha("intent"),
        request={
            "action": "put",
            "installationId": "i",
            "body": {"package": "pkg", "version": "1.1.0", "scope": {"kind": "workspace"}, "config": config},
        },
        baseline=installation(1, "1.0.0", None, PREVIOUS_OP, config),
        target=ref("1.1.0"),
        plan=installation(2, "1.1.0", "1.0.0", OP_ID, config),
        lease_until=NOW + 900,
        created_at=NOW,
        updated_at=NOW,
        requested_by="user-1",
    )
    return op.model_copy(update=changes)


def stored(op: Operation, **kwargs: Any) -> dict[str, Any]:
    return workspace.operation_item(op, **kwargs)


@pytest.mark.parametrize(
    "op",
    [
        pytest.param(update(), id="planned update"),
        pytest.param(
            update(config={"name": "héllo ✓", "ratio": 2.5, "nested": {"list": [1, "two", None, True]}}),
            id="config with unicode, floats, nulls",
        ),
        pytest.param(
            update(
                state=OperationState.AWAITING_CONSENT,
                consent=Consent(
                    permissions=[AskedPermission(kind="network", resource="api.example.com")],
                    plan_digest=sha("plan"),
                    requested_at=NOW,
                    deadline=NOW + 7 * 86400,
                ),
            ),
            id="awaiting consent",
        ),
        pytest.param(
            update(
                state=OperationState.SETTLED,
                version=4,
                outcome=Outcome(result="refused", status=409, code="stale_authority", detail="moved"),
                settled_at=NOW + 1,
                superseded_by="op-" + "c" * 32,
                supersedes=PREVIOUS_OP,
            ),
            id="settled",
        ),
        pytest.param(update(baseline=None, plan=None, state=OperationState.ADMITTED, version=1), id="admitted"),
    ],
)
def test_an_operation_reads_back_as_it_was_written(op: Operation) -> None:
    assert workspace.operation_of(stored(op)) == op
    assert workspace.operation_of(stored(op, retain_until=NOW + 90 * 86400)) == op


def test_the_fields_a_phase_changes_are_plain_attributes_and_the_rest_is_packed() -> None:
    op = update(
        state=OperationState.SETTLED,
        outcome=Outcome(result="succeeded"),
        settled_at=NOW,
        superseded_by="op-" + "c" * 32,
        phase="planned",
        error_code="unavailable",
        note="not_installed",
        consent=Consent(permissions=[], plan_digest=sha("plan")),
    )
    item = stored(op)
    dumped = op.model_dump(by_alias=True, mode="json", exclude_none=True)
    plain = {name for name in dumped if name not in workspace.PACKED_FIELDS}
    assert plain <= set(item), plain - set(item)
    assert {"state", "version", "leaseUntil", "updatedAt", "outcome", "supersededBy", "consent"} <= plain
    assert not workspace.PACKED_FIELDS & set(item)
    assert workspace.unpack(item[workspace.PACKED_ATTRIBUTE]["B"]) == {
        name: value for name, value in dumped.items() if name in workspace.PACKED_FIELDS
    }


def test_a_field_added_to_the_operation_is_plain_unless_it_is_listed_as_packed() -> None:
    aliases = {field.alias or name for name, field in Operation.model_fields.items()}
    assert aliases >= workspace.PACKED_FIELDS  # nothing packed that the model does not have
    added_by_the_express_workflow = {"runner", "restarts"} & aliases
    assert not added_by_the_express_workflow & workspace.PACKED_FIELDS


def test_an_in_flight_operation_keeps_its_due_index_attributes_and_lease_plain() -> None:
    item = stored(update())
    assert item["dueAt"] == {"S": f"{NOW + 900:012d}"} and "dueShard" in item
    assert item["version"] == {"N": "2"} and item["state"] == {"S": "planned"}


def test_an_update_with_its_baseline_its_plan_and_a_runner_is_under_1_kb() -> None:
    op = update()
    if "runner" in Operation.model_fields:
        op = op.model_copy(update={"runner": RUNNER})
    size = item_bytes(stored(op))
    assert size < 1024, size
    unpacked_size = item_bytes(dynamo.to_item(*workspace.operation_key("t-capacity", "ws", OP_ID), op))
    assert unpacked_size > 1500, unpacked_size  # what the same operation took all plain


def test_an_item_written_before_the_packing_reads_as_it_did() -> None:
    op = update(config={"ratio": 2.5})
    pk, sk = workspace.operation_key(op.tenant, op.workspace, op.operation_id)
    plain = dynamo.to_item(pk, sk, op)
    assert workspace.PACKED_ATTRIBUTE not in plain
    assert workspace.operation_of(plain) == op


def test_numbers_in_packed_fields_read_back_as_dynamodb_numbers_do() -> None:
    op = update(config={"integral": 1.0, "fraction": 0.25, "big": 10**30})
    pk, sk = workspace.operation_key(op.tenant, op.workspace, op.operation_id)
    as_plain = dynamo.from_item(Operation, dynamo.to_item(pk, sk, op))
    as_packed = workspace.operation_of(stored(op))
    assert as_packed.request == as_plain.request
    assert as_packed.plan is not None and as_plain.plan is not None
    assert as_packed.plan.config == as_plain.plan.config == {"integral": 1, "fraction": 0.25, "big": 10**30}
    assert isinstance(as_packed.plan.config["integral"], int)


def test_moto_s_base64_view_of_the_packed_attribute_reads_the_same() -> None:
    op = update()
    values = dynamo.unmarshal(stored(op))
    as_moto_shows_it = {**values, "packed": base64.b64encode(values["packed"]).decode("ascii")}
    assert workspace.unpacked(as_moto_shows_it) == workspace.unpacked(values)
    assert workspace.unpacked(values)["plan"]["version"] == 2


def packed_v1(text: bytes) -> bytes:
    compressor = zlib.compressobj(9, zlib.DEFLATED, -15, 9, zlib.Z_DEFAULT_STRATEGY, workspace.PRESET_V1)
    return bytes([workspace.FORMAT_V1]) + compressor.compress(text) + compressor.flush()


@pytest.mark.parametrize(
    "packed",
    [b"", b"\x02" + b"x" * 10, b"\x01not deflate", packed_v1(b"{"), packed_v1(b"[1, 2]")],
    ids=["empty", "unknown format", "not deflate", "not JSON", "not an object"],
)
def test_a_packed_attribute_that_does_not_decode_is_refused(packed: bytes) -> None:
    item = {**stored(update()), workspace.PACKED_ATTRIBUTE: {"B": packed}}
    with pytest.raises(StoredItemInvalid):
        workspace.operation_of(item)
