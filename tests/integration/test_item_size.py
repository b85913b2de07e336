"""devstack.item_size: DynamoDB's 400 KB item limit, counted as DynamoDB counts it, in every write path (moto's own
check counts top-level attributes only, at 405,000 bytes), with DynamoDB's own errors; and the store's answer to a
transaction cancelled for it (refused, not retried)."""

from __future__ import annotations

from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError

from devstack import item_size

LIMIT = 409_600  # 400 KB


def test_sizes_follow_the_developer_guide():
    assert item_size.value_size({"S": "héllo"}) == 6
    assert item_size.value_size({"N": "12345"}) == 4  # 5 significant digits: 3 bytes, plus 1
    assert item_size.value_size({"N": "-0.00120"}) == 2  # "12"
    assert item_size.value_size({"BOOL": True}) == item_size.value_size({"NULL": True}) == 1
    assert item_size.value_size({"L": []}) == item_size.value_size({"M": {}}) == 3
    assert item_size.value_size({"L": [{"S": "ab"}, {"N": "7"}]}) == 3 + (1 + 2) + (1 + 2)
    assert item_size.value_size({"M": {"kind": {"S": "network"}}}) == 3 + 1 + 4 + 7
    assert item_size.item_size({"pk": {"S": "a"}, "v": {"SS": ["x", "yz"]}}) == (2 + 1) + (1 + 3)


def padded(length: int) -> dict[str, Any]:
    """An item of exactly ``length`` bytes: pk (2 + 1), sk (2 + 1), v (1 + the rest)."""
    return {"pk": {"S": "p"}, "sk": {"S": "s"}, "v": {"S": "x" * (length - 7)}}


def nested(elements: int) -> dict[str, Any]:
    """Many small maps in a list (how grants and permissions are stored): each costs DynamoDB 1 + 3 + (1 + 1) + 17
    bytes, moto's own check 18."""
    return {"pk": {"S": "p"}, "sk": {"S": "n"}, "v": {"L": [{"M": {"r": {"S": "x" * 17}}} for _ in range(elements)]}}


def test_the_limit_is_400_kb_and_one_byte_past_it_is_refused_in_every_write(stack):
    ddb = boto3.client("dynamodb", region_name=stack.region)
    table = stack.table_name
    assert item_size.item_size(padded(LIMIT)) == LIMIT

    ddb.put_item(TableName=table, Item=padded(LIMIT))
    with pytest.raises(ClientError) as put:
        ddb.put_item(TableName=table, Item=padded(LIMIT + 1))
    assert (put.value.response["Error"]["Code"], put.value.response["Error"]["Message"]) == (
        "ValidationException",
        "Item size has exceeded the maximum allowed size",
    )

    with pytest.raises(ClientError) as grown:
        ddb.update_item(
            TableName=table,
            Key={"pk": {"S": "p"}, "sk": {"S": "s"}},
            UpdateExpression="SET w = :w",
            ExpressionAttributeValues={":w": {"S": "y"}},
        )
    assert grown.value.response["Error"]["Code"] == "ValidationException"
    assert grown.value.response["Error"]["Message"] == "Item size to update has exceeded the maximum allowed size"
    kept = ddb.get_item(TableName=table, Key={"pk": {"S": "p"}, "sk": {"S": "s"}})["Item"]
    assert "w" not in kept and item_size.item_size(kept) == LIMIT  # the refused update left the item as it was


def test_a_transaction_is_cancelled_with_validation_error_at_the_item_that_grew_too_large(stack):
    ddb = boto3.client("dynamodb", region_name=stack.region)
    table = stack.table_name
    small = {"pk": {"S": "p"}, "sk": {"S": "small"}}
    too_large = nested(20_000)  # 460,003 bytes for DynamoDB, 360,000 for moto's own check
    assert item_size.item_size(too_large) > LIMIT

    with pytest.raises(ClientError) as cancelled:
        ddb.transact_write_items(
            TransactItems=[
                {"Put": {"TableName": table, "Item": small}},
                {"Put": {"TableName": table, "Item": too_large}},
            ]
        )

    error = cancelled.value.response
    assert error["Error"]["Code"] == "TransactionCanceledException"
    assert [reason["Code"] for reason in error["CancellationReasons"]] == ["None", "ValidationError"]
    assert ddb.get_item(TableName=table, Key=small).get("Item") is None  # nothing of it was written
    with item_size.relaxed():  # moto alone accepts it: the check above is the local runtime's
        ddb.put_item(TableName=table, Item=too_large)


def test_the_store_answers_a_transaction_refused_for_size_as_a_refusal_not_a_retry(stack):
    from packyard import config
    from packyard.errors import StoreFailure
    from packyard.store import dynamo

    config.reset()
    items = [{"Put": {"TableName": stack.table_name, "Item": nested(20_000)}}]
    with pytest.raises(StoreFailure) as refused:
        dynamo.transact(items, step="test.too_large")
    assert refused.value.detail == "DynamoDB refused the transaction (ValidationError)"
