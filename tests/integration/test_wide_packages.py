"""A package at the file limit, every path at the longest allowed length: it publishes through the real publish
state machine, installs, and no DynamoDB item it leaves behind approaches the 400 KB item limit (the manifest itself
lives in S3; items copy counts and digests from it, never the file list)."""

from __future__ import annotations

import json
from typing import Any

import boto3

from packyard.config import Limits
from packyard_cli.build import BuiltPackage, build_from_files

LIMITS = Limits()
DYNAMODB_ITEM_LIMIT = 400 * 1024  # bytes: attribute names and values (DynamoDB developer guide, service quotas)
LAMBDA_PAYLOAD_LIMIT = 6 * 1024 * 1024  # bytes: a synchronous invocation's request and response (Lambda quotas)


def widest(count: int) -> BuiltPackage:
    """``count`` one-byte files at ``max_path_length``-byte paths, each with a mode."""
    files: dict[str, bytes] = {}
    for index in range(count):
        head = f"d{index // 100:03d}/f{index:05d}-"
        files[head + "x" * (LIMITS.max_path_length - len(head))] = b"x"
    return build_from_files(files, modes=dict.fromkeys(files, 0o644))


def item_bytes(value: dict[str, Any]) -> int:
    """An upper bound of a low-level attribute value's size as DynamoDB counts it (numbers as their digits)."""
    (kind, inner), *_ = value.items()
    if kind in ("S", "N"):
        return len(str(inner).encode("utf-8"))
    if kind == "B":
        return len(inner)
    if kind in ("SS", "NS"):
        return sum(len(str(element).encode("utf-8")) for element in inner)
    if kind == "L":
        return 3 + sum(1 + item_bytes(element) for element in inner)
    if kind == "M":
        return 3 + sum(len(name.encode("utf-8")) + 1 + item_bytes(element) for name, element in inner.items())
    return 1  # BOOL, NULL


def test_a_package_at_the_file_limit_with_the_longest_paths_publishes_and_installs(acme, stack) -> None:
    # Given 10,000 files, each at a 256-byte path with a mode
    built = widest(LIMITS.max_files)
    request = json.dumps(built.upload_request(), ensure_ascii=False, separators=(",", ":")).encode()
    assert len(request) < LAMBDA_PAYLOAD_LIMIT  # what the CLI sends fits one Lambda request

    # When it is published through the publish state machine and installed into a workspace
    final = acme.publish("widest", "1.0.0", built)
    installed = acme.wait_settled("ws-1", acme.install("ws-1", "widest", "widest", "1.0.0", key="k-1"))
    version = acme.get("/v1/packages/widest/versions/1.0.0")

    # Then it is published with every file and installed
    assert final["state"] == "published", final
    assert (installed["state"], installed["outcome"]) == ("settled", {"result": "succeeded"}), installed
    assert len(version.body["manifest"]["files"]) == LIMITS.max_files
    # And the version route's answer, manifest included, fits a Lambda response
    assert len(version.raw.encode()) < LAMBDA_PAYLOAD_LIMIT
    # And no item in the table comes near DynamoDB's item limit
    ddb = boto3.client("dynamodb", region_name=stack.region)
    items = [item for page in ddb.get_paginator("scan").paginate(TableName=stack.table_name) for item in page["Items"]]
    sizes = {
        f"{item['pk']['S']} / {item['sk']['S']}": sum(len(n) + item_bytes(v) for n, v in item.items()) for item in items
    }
    assert items and max(sizes.values()) < 8 * 1024, sorted(sizes.items(), key=lambda kv: -kv[1])[:3]
    assert max(sizes.values()) < DYNAMODB_ITEM_LIMIT
    print(
        f"request {len(request)} B, version answer {len(version.raw.encode())} B, largest item {max(sizes.values())} B"
    )


def test_one_file_past_the_limit_is_refused_at_session_creation_naming_the_file_limit(acme) -> None:
    # Given 10,001 files at the longest paths
    refused = acme.request_upload("widest", "1.0.0", widest(LIMITS.max_files + 1))

    # Then the session is refused 422 archive_rejected / too_many_files, naming the file limit, and nothing is held
    assert refused.status == 422, refused.body
    assert (refused.code, refused.body["subCode"]) == ("archive_rejected", "too_many_files")
    assert refused.body["detail"] == f"manifest lists {LIMITS.max_files + 1} files, limit is {LIMITS.max_files} files"
    assert acme.get("/v1/packages/widest/versions/1.0.0").status == 404
