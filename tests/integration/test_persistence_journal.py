"""devstack.persistence: the journal's records survive a process dying at any byte, and the DynamoDB hooks record
exactly what moto applied (a transaction all or nothing, a refused write not at all)."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import boto3
import pytest
from botocore.exceptions import ClientError

import devstack
from devstack.persistence import (
    JOURNAL,
    DataDir,
    DataDirInUse,
    Journal,
    World,
    encode_record,
    fold,
    open_data,
    read_journal,
)


def _record(n: int) -> dict[str, object]:
    return {
        "k": "ddb",
        "tables": {"t": [[json.dumps({"pk": {"S": f"p{n}"}}), {"pk": {"S": f"p{n}"}, "n": {"N": str(n)}}]]},
    }


def test_a_record_cut_anywhere_leaves_the_whole_records_before_it(tmp_path: Path) -> None:
    # Given a journal of three records, and the bytes of a fourth
    path = tmp_path / JOURNAL
    journal = Journal(path)
    for n in range(3):
        journal.append(_record(n))
    journal.close()
    whole = path.read_bytes()
    fourth = encode_record(_record(3))

    # When the process dies after any prefix of the fourth's write
    for cut in range(len(fourth)):
        path.write_bytes(whole + fourth[:cut])
        records, good = read_journal(path)

        # Then the three whole records are read, and the torn one is not
        assert records == [_record(n) for n in range(3)], cut
        assert good == len(whole)


def test_a_record_waited_for_is_in_the_file_before_the_journal_closes(tmp_path: Path) -> None:
    path = tmp_path / JOURNAL
    journal = Journal(path)
    try:
        sequences = [journal.append(_record(n)) for n in range(5)]
        journal.wait_durable(sequences[-1])

        # what an answered request changed is in the file (synced), whatever happens to the process next
        assert read_journal(path)[0] == [_record(n) for n in range(5)]
        assert sequences == [1, 2, 3, 4, 5]
    finally:
        journal.close()


def test_an_altered_record_ends_what_is_trusted(tmp_path: Path) -> None:
    path = tmp_path / JOURNAL
    lines = [encode_record(_record(n)) for n in range(3)]
    altered = lines[1].replace(b'"N":"1"', b'"N":"7"')
    path.write_bytes(lines[0] + altered + lines[2])

    records, good = read_journal(path)

    assert records == [_record(0)]
    assert good == len(lines[0])


def test_the_latest_image_wins_and_a_deleted_item_is_gone() -> None:
    key = json.dumps({"pk": {"S": "a"}})
    world = fold(
        [
            {"k": "ddb", "tables": {"t": [[key, {"pk": {"S": "a"}, "v": {"N": "1"}}]]}},
            {"k": "ddb", "tables": {"t": [[key, {"pk": {"S": "a"}, "v": {"N": "2"}}]]}},
            {"k": "sfn", "execution": {"arn": "e", "machine": "m", "name": "e", "input": "{}", "startDate": "x"}},
            {"k": "sfn", "execution": {"arn": "e", "status": "SUCCEEDED", "stopDate": "y", "output": "{}"}},
        ]
    )
    assert world.items["t"][key]["v"] == {"N": "2"}
    assert world.executions["e"]["status"] == "SUCCEEDED" and world.executions["e"]["machine"] == "m"
    assert fold([*world.records(), {"k": "ddb", "tables": {"t": [[key, None]]}}]).items["t"] == {}


def test_one_stack_per_data_directory(tmp_path: Path) -> None:
    first = open_data(tmp_path)
    try:
        with pytest.raises(DataDirInUse):
            open_data(tmp_path)
    finally:
        first.close()
    open_data(tmp_path).close()  # the lock went with its holder


@pytest.fixture
def journaled(tmp_path: Path) -> Iterator[tuple[devstack.Stack, DataDir]]:
    with devstack.local_aws() as stack:
        data = open_data(tmp_path / "data")
        data.start_journal()
        try:
            yield stack, data
        finally:
            data.close()


def _synced(data: DataDir) -> list[dict[str, object]]:
    """The journal's records once everything appended is synced (the local stack's answers wait for that at the
    request's end; the in-process mock here has none)."""
    assert data.journal is not None
    data.journal.wait_durable(data.journal.records)
    return read_journal(data.path / JOURNAL)[0]


def _journaled_items(data: DataDir) -> dict[str, dict[str, object]]:
    world: World = fold(_synced(data))
    return {key: item for items in world.items.values() for key, item in items.items()}


def _item_records(data: DataDir) -> list[dict[str, object]]:
    return [record for record in _synced(data) if record["k"] == "ddb"]


def _scanned(table: str) -> dict[str, dict[str, object]]:
    items = boto3.client("dynamodb").scan(TableName=table)["Items"]
    return {
        json.dumps({k: item[k] for k in ("pk", "sk")}, sort_keys=True, separators=(",", ":")): item for item in items
    }


def test_the_journal_holds_what_the_table_holds_after_writes_a_transaction_and_refusals(
    journaled: tuple[devstack.Stack, DataDir],
) -> None:
    stack, data = journaled
    ddb = boto3.client("dynamodb")
    table = stack.table_name

    # Given puts, an update, a delete and a committed transaction
    for n in range(3):
        ddb.put_item(TableName=table, Item={"pk": {"S": "P"}, "sk": {"S": f"s{n}"}, "n": {"N": str(n)}})
    ddb.update_item(
        TableName=table,
        Key={"pk": {"S": "P"}, "sk": {"S": "s0"}},
        UpdateExpression="SET n = n + :one",
        ExpressionAttributeValues={":one": {"N": "1"}},
    )
    ddb.delete_item(TableName=table, Key={"pk": {"S": "P"}, "sk": {"S": "s2"}})
    ddb.transact_write_items(
        TransactItems=[
            {"Put": {"TableName": table, "Item": {"pk": {"S": "T"}, "sk": {"S": "a"}}}},
            {"Delete": {"TableName": table, "Key": {"pk": {"S": "P"}, "sk": {"S": "s1"}}}},
        ]
    )
    records_before_refusals = len(_item_records(data))

    # When a transaction is cancelled by its condition and a conditional put is refused
    with pytest.raises(ClientError, match="TransactionCanceled"):
        ddb.transact_write_items(
            TransactItems=[
                {"Put": {"TableName": table, "Item": {"pk": {"S": "T"}, "sk": {"S": "b"}}}},
                {
                    "Put": {
                        "TableName": table,
                        "Item": {"pk": {"S": "T"}, "sk": {"S": "a"}},
                        "ConditionExpression": "attribute_not_exists(pk)",
                    }
                },
            ]
        )
    with pytest.raises(ClientError, match="ConditionalCheckFailed"):
        ddb.put_item(
            TableName=table, Item={"pk": {"S": "T"}, "sk": {"S": "a"}}, ConditionExpression="attribute_not_exists(pk)"
        )

    # Then the journal folds into exactly the table's items; the committed transaction is one record, and what was
    # refused left none
    assert _journaled_items(data) == _scanned(table)
    records = _item_records(data)
    assert len(records) == records_before_refusals == 3 + 1 + 1 + 1
    assert sorted(key for key, _ in records[-1]["tables"][table]) == sorted(
        [
            json.dumps({"pk": {"S": "P"}, "sk": {"S": "s1"}}, sort_keys=True, separators=(",", ":")),
            json.dumps({"pk": {"S": "T"}, "sk": {"S": "a"}}, sort_keys=True, separators=(",", ":")),
        ]
    )
    assert os.path.getsize(data.path / JOURNAL) == read_journal(data.path / JOURNAL)[1]


def test_binary_attributes_are_journaled_as_base64_and_restored_as_the_bytes_written(
    journaled: tuple[devstack.Stack, DataDir],
) -> None:
    from devstack import persistence

    stack, data = journaled
    ddb = boto3.client("dynamodb")
    item = {
        "pk": {"S": "B"},
        "sk": {"S": "b"},
        "packed": {"B": b"\x01\x00\xffpacked"},  # what store.workspace writes: an operation's packed fields
        "set": {"BS": [b"\x00", b"\x01\x02"]},
        "nested": {"M": {"inner": {"B": b"\xfe"}, "list": {"L": [{"B": b"\x03"}, {"S": "s"}]}}},
    }
    ddb.put_item(TableName=stack.table_name, Item=item)

    (journaled_item,) = [v for v in _journaled_items(data).values() if v["pk"] == {"S": "B"}]
    assert journaled_item["packed"] == {"B": "AQD/cGFja2Vk"}  # base64 of the bytes, as DynamoDB's JSON has them

    world = fold([record for record in _synced(data) if record["k"] == "ddb"])
    ddb.delete_item(TableName=stack.table_name, Key={"pk": {"S": "B"}, "sk": {"S": "b"}})
    persistence._restore_items(world, stack.region, "123456789012")
    restored = ddb.get_item(TableName=stack.table_name, Key={"pk": {"S": "B"}, "sk": {"S": "b"}})["Item"]
    assert restored["packed"] == item["packed"] and restored["nested"] == item["nested"]
    assert sorted(restored["set"]["BS"]) == sorted(item["set"]["BS"])
