"""Test-only inspection of what landed in moto (whole-table scans are fine on a tiny test table)."""

from __future__ import annotations

from typing import Any

import boto3

import devstack
from devstack.caller import Caller

__all__ = ["Caller", "all_keys", "release_items", "used_bytes"]


def used_bytes(stack: devstack.Stack, tenant: str) -> int:
    item = (
        boto3.client("dynamodb", region_name=stack.region)
        .get_item(
            TableName=stack.table_name, Key={"pk": {"S": f"TENANT#{tenant}"}, "sk": {"S": "USAGE"}}, ConsistentRead=True
        )
        .get("Item")
    )
    return int(item["usedBytes"]["N"]) if item else 0


def all_keys(stack: devstack.Stack, prefix: str = "") -> list[str]:
    s3 = boto3.client("s3", region_name=stack.region)
    pages = s3.get_paginator("list_objects_v2").paginate(Bucket=stack.bucket_name, Prefix=prefix)
    return [obj["Key"] for page in pages for obj in page.get("Contents", [])]


def release_items(stack: devstack.Stack, tenant: str) -> list[dict[str, Any]]:
    ddb = boto3.client("dynamodb", region_name=stack.region)
    items = ddb.scan(TableName=stack.table_name)["Items"]  # test-only: the whole (tiny) table
    return [i for i in items if i["pk"]["S"].startswith(f"TENANT#{tenant}#PACKAGE#")]
