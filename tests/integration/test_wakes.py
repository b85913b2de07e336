"""devstack.wakes: a wait for an operation is woken by the write that leaves the operation at rest (settled,
awaiting consent, pending), by a PutItem, an UpdateItem or a transaction's item alike, and by no other write; the
wait then reads it once instead of after every pause of the schedule."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import boto3
import pytest

from devstack import wakes
from packyard.operations import waiting
from packyard.operations.models import Operation, OperationState
from packyard.store.workspace import operation_key
from tests.support.operations import an_operation


def _operation(state: OperationState, operation_id: str) -> Operation:
    return an_operation(state, operation_id=operation_id, tenant="t-wake")


@pytest.fixture
def table(stack: Any) -> Iterator[str]:
    wakes.install()
    try:
        yield stack.table_name
    finally:
        wakes.uninstall()


def _put(table: str, key: tuple[str, str], state: str) -> None:
    boto3.client("dynamodb").put_item(
        TableName=table, Item={"pk": {"S": key[0]}, "sk": {"S": key[1]}, "state": {"S": state}}
    )


def _update(table: str, key: tuple[str, str], state: str) -> dict[str, Any]:
    return {
        "TableName": table,
        "Key": {"pk": {"S": key[0]}, "sk": {"S": key[1]}},
        "UpdateExpression": "SET #s = :s",
        "ExpressionAttributeNames": {"#s": "state"},
        "ExpressionAttributeValues": {":s": {"S": state}},
    }


def test_only_the_write_that_leaves_the_operation_at_rest_wakes_its_wait(table: str) -> None:
    op = _operation(OperationState.PLANNED, "op-wake")
    key = operation_key(op.tenant, op.workspace, op.operation_id)
    other = operation_key(op.tenant, op.workspace, "op-other")
    client = boto3.client("dynamodb")
    _put(table, key, "admitted")
    with wakes.alarm(op, time.monotonic() + 30) as pause:
        (woken,) = wakes._waiters[key]
        _put(table, key, "planned")
        client.update_item(**_update(table, key, "committed"))
        _put(table, other, "settled")  # another operation at rest
        assert not woken.is_set()
        client.transact_write_items(TransactItems=[{"Update": _update(table, key, "settled")}])
        assert woken.is_set()
        started = time.monotonic()
        pause(0.1)  # ends at once: the write has already woken it (a pause alone lasts a second)
        assert time.monotonic() - started < waiting.LONGEST_PAUSE_SECONDS
        assert not woken.is_set()  # each pause waits for its own wake
        for state in ("awaiting_consent", "pending"):
            client.update_item(**_update(table, key, state))
            assert woken.is_set()
            woken.clear()
    assert key not in wakes._waiters  # the wait is over: nothing is kept for it


def test_a_wait_reads_its_operation_once_when_the_settle_wakes_it(table: str) -> None:
    op = _operation(OperationState.PLANNED, "op-once")
    key = operation_key(op.tenant, op.workspace, op.operation_id)
    _put(table, key, "planned")
    reads: list[str] = []
    waiting_now = threading.Event()
    alarm = wakes.alarm

    def read() -> Operation:
        item = boto3.client("dynamodb").get_item(TableName=table, Key={"pk": {"S": key[0]}, "sk": {"S": key[1]}})
        reads.append(item["Item"]["state"]["S"])
        return _operation(OperationState(reads[-1]), op.operation_id)

    @contextmanager
    def noted_alarm(*args: Any) -> Iterator[Any]:
        with alarm(*args) as pause:  # registered: a write from now on wakes it
            waiting_now.set()
            yield pause

    waiting.wake_with(noted_alarm)
    answers: list[waiting.Waited[Operation]] = []
    waiter = threading.Thread(target=lambda: answers.append(waiting.until_at_rest(op, read, 20)))
    waiter.start()
    assert waiting_now.wait(10)
    _put(table, key, "settled")
    waiter.join(20)
    (waited,) = answers
    assert waited.record.state is OperationState.SETTLED
    assert reads == ["settled"]  # one read, after the wake: the schedule would have read at 0.1, 0.3, 0.7 s, ...
    assert waited.elapsed < 5


def test_without_the_alarm_the_wait_keeps_the_schedule(stack: Any) -> None:
    op = _operation(OperationState.PLANNED, "op-schedule")
    now = [0.0]

    def pause(seconds: float) -> None:
        now[0] += seconds

    waited = waiting.until_at_rest(op, lambda: op, 1.5, clock=lambda: now[0], pause=pause)
    assert waited.reads == 4  # after 0.1, 0.2, 0.4 and 0.8 s: a read after every pause
