"""devstack.moto_fixes: a cancelled transaction still leaves every item as it was (now from a journal of its items,
not a copy of the table), the table is never copied, and moto no longer keeps every model instance it ever made."""

from __future__ import annotations

import gc
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError
from moto.dynamodb.models.dynamo_type import Item

from devstack import moto_fixes
from devstack.template import Stack

KEY = "t-journal"


def item(sk: str, **attrs: Any) -> dict[str, Any]:
    return {"pk": {"S": KEY}, "sk": {"S": sk}, **{name: {"N": str(value)} for name, value in attrs.items()}}


def everything(client: Any, table: str) -> list[dict[str, Any]]:
    found = client.query(
        TableName=table, KeyConditionExpression="pk = :pk", ExpressionAttributeValues={":pk": {"S": KEY}}
    )
    return sorted(found["Items"], key=lambda i: i["sk"]["S"])


def backend_table(stack: Stack) -> Any:
    from moto.dynamodb.models import dynamodb_backends

    return dynamodb_backends[stack.account][stack.region].tables[stack.table_name]


def test_the_fixes_are_installed_with_the_local_runtime(stack: Stack) -> None:
    from moto.core.common_models import BaseModel
    from moto.dynamodb.models import DynamoDBBackend

    assert "journal" in (DynamoDBBackend.transact_write_items.__doc__ or "")
    assert isinstance(Item.instances_tracked, moto_fixes.WeakInstances) or "instances_tracked" not in Item.__dict__
    assert BaseModel.__dict__["__new__"].__func__ is moto_fixes._weakly_tracked_new


def test_a_cancelled_transaction_leaves_every_item_as_it_was(stack: Stack) -> None:
    # Given three items
    client = boto3.client("dynamodb")
    table = stack.table_name
    for sk, n in (("A", 1), ("B", 2), ("C", 3)):
        client.put_item(TableName=table, Item=item(sk, n=n))
    before = everything(client, table)
    live_table = backend_table(stack)

    # When a transaction puts a new item, updates one, deletes one, and then fails its last condition
    with pytest.raises(ClientError) as caught:
        client.transact_write_items(
            TransactItems=[
                {"Put": {"TableName": table, "Item": item("D", n=4)}},
                {
                    "Update": {
                        "TableName": table,
                        "Key": {"pk": {"S": KEY}, "sk": {"S": "A"}},
                        "UpdateExpression": "SET n = :n, added = :n",
                        "ExpressionAttributeValues": {":n": {"N": "100"}},
                    }
                },
                {"Delete": {"TableName": table, "Key": {"pk": {"S": KEY}, "sk": {"S": "B"}}}},
                {
                    "ConditionCheck": {
                        "TableName": table,
                        "Key": {"pk": {"S": KEY}, "sk": {"S": "C"}},
                        "ConditionExpression": "n = :wrong",
                        "ExpressionAttributeValues": {":wrong": {"N": "0"}},
                    }
                },
            ]
        )

    # Then it is cancelled for the condition, and the items are exactly as before (no D, A unchanged, B back)
    assert caught.value.response["Error"]["Code"] == "TransactionCanceledException"
    reasons = [reason["Code"] for reason in caught.value.response["CancellationReasons"]]
    assert reasons == ["None", "None", "None", "ConditionalCheckFailed"]
    assert everything(client, table) == before
    # And the table was never swapped for a copy
    assert backend_table(stack) is live_table


def test_a_transaction_naming_one_item_twice_is_refused_and_changes_nothing(stack: Stack) -> None:
    client = boto3.client("dynamodb")
    table = stack.table_name
    client.put_item(TableName=table, Item=item("A", n=1))
    before = everything(client, table)
    with pytest.raises(ClientError) as caught:
        client.transact_write_items(
            TransactItems=[
                {"Put": {"TableName": table, "Item": item("A", n=2)}},
                {"Delete": {"TableName": table, "Key": {"pk": {"S": KEY}, "sk": {"S": "A"}}}},
            ]
        )
    assert caught.value.response["Error"]["Code"] == "ValidationException"
    assert everything(client, table) == before


def test_a_successful_transaction_writes_every_item(stack: Stack) -> None:
    client = boto3.client("dynamodb")
    table = stack.table_name
    client.put_item(TableName=table, Item=item("A", n=1))
    client.transact_write_items(
        TransactItems=[
            {"Put": {"TableName": table, "Item": item("B", n=2)}},
            {
                "Update": {
                    "TableName": table,
                    "Key": {"pk": {"S": KEY}, "sk": {"S": "A"}},
                    "UpdateExpression": "ADD n :one",
                    "ExpressionAttributeValues": {":one": {"N": "1"}},
                }
            },
        ]
    )
    assert everything(client, table) == [item("A", n=2), item("B", n=2)]


def test_moto_keeps_only_the_model_instances_that_are_alive(stack: Stack) -> None:
    # Given one item read many times (each read copies it inside moto)
    client = boto3.client("dynamodb")
    client.put_item(TableName=stack.table_name, Item=item("A", n=1))
    gc.collect()
    tracked_before = len(Item.instances_tracked)
    for _ in range(200):
        client.query(
            TableName=stack.table_name,
            KeyConditionExpression="pk = :pk",
            ExpressionAttributeValues={":pk": {"S": KEY}},
        )
    # When the copies are no longer used
    gc.collect()
    # Then moto's instance tracking let them go (it used to keep all 200)
    assert len(Item.instances_tracked) <= tracked_before + 5


# ---- TransactWriteItems under a ClientRequestToken (AWS: idempotent for 10 minutes after it completes) ----


def _increment(table: str, sk: str, by: int = 1) -> list[dict[str, Any]]:
    """One ADD, conditional on the item not being incremented yet: a second application is cancelled."""
    return [
        {
            "Update": {
                "TableName": table,
                "Key": {"pk": {"S": KEY}, "sk": {"S": sk}},
                "UpdateExpression": "ADD n :by",
                "ConditionExpression": "attribute_not_exists(n)",
                "ExpressionAttributeValues": {":by": {"N": str(by)}},
            }
        }
    ]


def test_a_transaction_repeated_under_its_token_is_answered_as_the_success_it_was(stack: Stack) -> None:
    client = boto3.client("dynamodb")
    client.transact_write_items(TransactItems=_increment(stack.table_name, "T"), ClientRequestToken="token-1")
    client.transact_write_items(TransactItems=_increment(stack.table_name, "T"), ClientRequestToken="token-1")
    assert everything(client, stack.table_name) == [item("T", n=1)]  # applied once, answered twice
    # and another token is another request: its condition decides
    with pytest.raises(ClientError) as caught:
        client.transact_write_items(TransactItems=_increment(stack.table_name, "T"), ClientRequestToken="token-2")
    assert caught.value.response["Error"]["Code"] == "TransactionCanceledException"


def test_a_token_used_with_other_parameters_is_refused_idempotent_parameter_mismatch(stack: Stack) -> None:
    client = boto3.client("dynamodb")
    client.transact_write_items(TransactItems=_increment(stack.table_name, "M"), ClientRequestToken="token-m")
    with pytest.raises(ClientError) as caught:
        client.transact_write_items(TransactItems=_increment(stack.table_name, "M", 2), ClientRequestToken="token-m")
    assert caught.value.response["Error"]["Code"] == "IdempotentParameterMismatchException"
    assert everything(client, stack.table_name) == [item("M", n=1)]


def test_a_cancelled_transaction_leaves_its_token_unused(stack: Stack) -> None:
    client = boto3.client("dynamodb")
    client.put_item(TableName=stack.table_name, Item=item("C", n=5))
    with pytest.raises(ClientError):
        client.transact_write_items(TransactItems=_increment(stack.table_name, "C"), ClientRequestToken="token-c")
    client.delete_item(TableName=stack.table_name, Key={"pk": {"S": KEY}, "sk": {"S": "C"}})
    client.transact_write_items(TransactItems=_increment(stack.table_name, "C"), ClientRequestToken="token-c")
    assert everything(client, stack.table_name) == [item("C", n=1)]


def test_a_token_is_a_new_request_after_ten_minutes(stack: Stack, monkeypatch: pytest.MonkeyPatch) -> None:
    client = boto3.client("dynamodb")
    client.transact_write_items(TransactItems=_increment(stack.table_name, "W"), ClientRequestToken="token-w")
    later = moto_fixes._clock() + moto_fixes.IDEMPOTENCY_WINDOW_SECONDS
    monkeypatch.setattr(moto_fixes, "_clock", lambda: later)
    with pytest.raises(ClientError) as caught:  # treated as new: cancelled by its condition
        client.transact_write_items(TransactItems=_increment(stack.table_name, "W"), ClientRequestToken="token-w")
    assert caught.value.response["Error"]["Code"] == "TransactionCanceledException"


def test_a_transaction_with_binary_values_is_idempotent_under_its_token(stack: Stack) -> None:
    """moto's parser hands the handler a B attribute as bytes: the same bytes are the same parameters, others not."""
    client = boto3.client("dynamodb")

    def put(blob: bytes) -> list[dict[str, Any]]:
        return [{"Put": {"TableName": stack.table_name, "Item": {**item("B"), "blob": {"B": blob}}}}]

    client.transact_write_items(TransactItems=put(b"\x00\xffone"), ClientRequestToken="token-b")
    client.transact_write_items(TransactItems=put(b"\x00\xffone"), ClientRequestToken="token-b")
    with pytest.raises(ClientError) as caught:
        client.transact_write_items(TransactItems=put(b"\x00\xfftwo"), ClientRequestToken="token-b")
    assert caught.value.response["Error"]["Code"] == "IdempotentParameterMismatchException"
    assert everything(client, stack.table_name) == [{**item("B"), "blob": {"B": b"\x00\xffone"}}]


def test_leaving_the_window_forgets_the_old_tokens_and_keeps_the_newer(
    stack: Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    client = boto3.client("dynamodb")
    now = moto_fixes._clock()
    monkeypatch.setattr(moto_fixes, "_clock", lambda: now)
    client.transact_write_items(TransactItems=_increment(stack.table_name, "O"), ClientRequestToken="token-old")
    monkeypatch.setattr(moto_fixes, "_clock", lambda: now + 300)
    client.transact_write_items(TransactItems=_increment(stack.table_name, "N"), ClientRequestToken="token-new")
    monkeypatch.setattr(moto_fixes, "_clock", lambda: now + moto_fixes.IDEMPOTENCY_WINDOW_SECONDS)
    # the old token left the window (a new request: its condition cancels it); the newer one is still answered
    with pytest.raises(ClientError) as caught:
        client.transact_write_items(TransactItems=_increment(stack.table_name, "O"), ClientRequestToken="token-old")
    assert caught.value.response["Error"]["Code"] == "TransactionCanceledException"
    client.transact_write_items(TransactItems=_increment(stack.table_name, "N"), ClientRequestToken="token-new")
    remembered = [token for (_, _, token) in moto_fixes._tokens]
    assert "token-old" not in remembered and "token-new" in remembered


def test_moto_itself_still_ignores_the_token(stack: Stack) -> None:
    """The upstream gap the fix closes: when this fails, moto honours ClientRequestToken and the fix can go."""
    from moto.dynamodb.responses import DynamoHandler

    client = boto3.client("dynamodb")
    patched = DynamoHandler.transact_write_items
    DynamoHandler.transact_write_items = moto_fixes._installed["DynamoHandler.transact_write_items"]  # type: ignore[method-assign]
    try:
        client.transact_write_items(TransactItems=_increment(stack.table_name, "U"), ClientRequestToken="token-u")
        with pytest.raises(ClientError) as caught:
            client.transact_write_items(TransactItems=_increment(stack.table_name, "U"), ClientRequestToken="token-u")
    finally:
        DynamoHandler.transact_write_items = patched  # type: ignore[method-assign]
    assert caught.value.response["Error"]["Code"] == "TransactionCanceledException"
