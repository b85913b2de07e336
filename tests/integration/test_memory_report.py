"""The local stack's memory report (``devstack.memory``): what moto stores, told apart from the process's heap."""

from __future__ import annotations

import json
from pathlib import Path

import boto3

from devstack import memory
from devstack.template import Stack


def store_some(stack: Stack, objects: int) -> None:
    s3 = boto3.client("s3")
    dynamodb = boto3.client("dynamodb")
    for i in range(objects):
        s3.put_object(Bucket=stack.bucket_name, Key=f"blobs/report-{i}", Body=b"x" * (1000 + i))
        dynamodb.put_item(TableName=stack.table_name, Item={"pk": {"S": f"REPORT#{i}"}, "sk": {"S": "ITEM"}})


def test_the_report_counts_what_moto_stores_and_the_heap_beside_it(stack: Stack, tmp_path: Path) -> None:
    store_some(stack, 3)
    path = tmp_path / "memory.json"
    memory.write_report(path)
    report = json.loads(path.read_text("utf-8"))

    assert report["stored"]["s3"]["objects"] >= 3
    assert report["stored"]["s3"]["bytes"] >= 3000 + 3
    assert report["stored"]["dynamodb"]["items"] >= 3
    assert report["stored"]["s3"]["pythonBytes"] > 0 and report["stored"]["dynamodb"]["pythonBytes"] > 0
    assert report["rssMiB"] > 0
    assert report["allocatedBlocks"] > 0
    heap = report["allocatorMiB"]
    assert heap["pymallocArenas"] >= heap["pymallocLive"] > 0
    assert not path.with_suffix(".partial").exists() and not path.with_suffix(".stored").exists()


def test_the_forked_walk_sees_exactly_what_this_process_stores(stack: Stack, tmp_path: Path) -> None:
    store_some(stack, 5)
    path = tmp_path / "memory.json"
    memory.write_report(path)
    forked = json.loads(path.read_text("utf-8"))
    here = memory.stored_figures()

    assert forked["stored"] == here["stored"]
    assert forked["storedMiB"] == here["storedMiB"]


def test_the_objects_the_data_does_not_reach_leave_out_the_walk_itself() -> None:
    def set_kib(rows: list[dict[str, object]]) -> int:
        return next((int(str(row["KiB"])) for row in rows if row["type"] == "set"), 0)

    before = set_kib(memory.unstored_objects(set(), limit=1_000))
    seen = set(range(200_000))  # the walk's ids: a set table of several MiB

    after = set_kib(memory.unstored_objects(seen, limit=1_000))

    assert after < before + 1024
