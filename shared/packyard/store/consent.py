"""DynamoDB items of consent: the consent wait of an installation's operation and the approvals recorded.

    consent wait   pk TENANT#<t>#WS#<ws>   sk CONSENT#<installationId>  (an operation awaiting approval)
    approval       pk TENANT#<t>#WS#<ws>   sk APPROVAL#<approvalId>     (one decision per Idempotency-Key)

Both live in the workspace's partition, beside the operation they belong to, so a decision is one transaction.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from packyard.consent.models import Approval, ConsentWait
from packyard.errors import ClaimLost
from packyard.installations.models import Installation
from packyard.operations.models import Operation, OperationState
from packyard.store import dynamo
from packyard.store.counters import workspace_pk
from packyard.store.dynamo import TransactionCancelled, from_item, key, marshal, table_name, to_item, transact
from packyard.store.workspace import (
    approval_key,
    consent_key,
    installation_key,
    operation_item,
    operation_put,
    slot_renewal,
)


def await_consent(op: Operation, waiting: Operation, wait: ConsentWait) -> Operation:
    """planned → awaiting_consent (fenced by version), the consent wait recorded (replacing only one of the same
    operation's), and the slot's lease extended to the consent deadline."""
    pk, sk = consent_key(op.tenant, op.workspace, op.installation_id)
    items = [
        operation_put(waiting, new=False, expected_version=op.version),
        {
            "Put": {
                "TableName": table_name(),
                "Item": to_item(pk, sk, wait),
                "ConditionExpression": "attribute_not_exists(pk) OR operationId = :op",
                "ExpressionAttributeValues": marshal({":op": op.operation_id}),
            }
        },
        slot_renewal(op, wait.deadline, None),
    ]
    try:
        transact(items, step="consent.await")
    except TransactionCancelled as cancelled:
        raise ClaimLost(f"operation {op.operation_id} lost its claim before awaiting consent") from cancelled
    return waiting


def read_for_decision(
    tenant: str, workspace: str, installation_id: str, approval_id: str
) -> tuple[ConsentWait | None, Approval | None]:
    """The installation's consent wait and the approval this key already recorded, in one strongly consistent read."""
    wkey = consent_key(tenant, workspace, installation_id)
    akey = approval_key(tenant, workspace, approval_id)
    found = dynamo.batch_get([wkey, akey])
    return (
        from_item(ConsentWait, found[wkey]) if wkey in found else None,
        from_item(Approval, found[akey]) if akey in found else None,
    )


@dataclass(frozen=True)
class DecisionConflict:
    existing_approval: Approval | None
    operation_changed: bool


def decide(op: Operation, decided: Operation, approval: Approval) -> DecisionConflict | None:
    """Record one decision: the approval (once per key), the operation's transition out of awaiting_consent (fenced:
    exactly one decision wins), the end of its consent wait and the slot's lease renewed to the decided operation's
    (while this operation holds it), in one transaction."""
    apk, ask = approval_key(op.tenant, op.workspace, approval.approval_id)
    cpk, csk = consent_key(op.tenant, op.workspace, op.installation_id)
    items: list[dict[str, Any]] = [
        {
            "Put": {
                "TableName": table_name(),
                "Item": to_item(apk, ask, approval),
                "ConditionExpression": "attribute_not_exists(pk)",
                "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
            }
        },
        {
            "Put": {
                "TableName": table_name(),
                "Item": operation_item(decided),
                "ConditionExpression": "version = :v AND #state = :waiting",
                "ExpressionAttributeNames": {"#state": "state"},
                "ExpressionAttributeValues": marshal(
                    {":v": op.version, ":waiting": str(OperationState.AWAITING_CONSENT)}
                ),
            }
        },
        {
            "Delete": {
                "TableName": table_name(),
                "Key": key(cpk, csk),
                "ConditionExpression": "operationId = :op",
                "ExpressionAttributeValues": marshal({":op": op.operation_id}),
            }
        },
        slot_renewal(op, decided.lease_until, None),
    ]
    try:
        transact(items, step="consent.decide")
    except TransactionCancelled as cancelled:
        old = cancelled.old_item(0) if cancelled.failed(0) else None
        return DecisionConflict(
            existing_approval=from_item(Approval, old) if old else None,
            operation_changed=cancelled.failed(1) or cancelled.failed(2) or cancelled.failed(3),
        )
    return None


def list_consent_waits(
    tenant: str, workspace: str, *, limit: int, cursor: str | None
) -> tuple[list[ConsentWait], str | None]:
    items, next_cursor = dynamo.query(
        workspace_pk(tenant, workspace), prefix="CONSENT#", limit=limit, cursor=cursor, answered=True
    )
    return [from_item(ConsentWait, item) for item in items], next_cursor


def read_installation(
    tenant: str, workspace: str, installation_id: str
) -> tuple[Installation | None, ConsentWait | None]:
    """The installation and the consent wait of its operation in flight, if one waits."""
    ikey = installation_key(tenant, workspace, installation_id)
    wkey = consent_key(tenant, workspace, installation_id)
    found = dynamo.batch_get([ikey, wkey])
    return (
        from_item(Installation, found[ikey]) if ikey in found else None,
        from_item(ConsentWait, found[wkey]) if wkey in found else None,
    )
