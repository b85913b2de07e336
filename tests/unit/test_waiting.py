"""The wait behind ``?wait=N`` and ``Prefer: wait=N``: the preference as RFC 7240 reads it, the pauses, the budget a
Lambda leaves itself, and a wait that ends when another thread settles the operation or when N passes."""

from __future__ import annotations

import threading

import pytest

from packyard.operations import waiting
from packyard.operations.models import Operation, OperationState
from tests.support.operations import an_operation


def _operation(state: OperationState, version: int = 1) -> Operation:
    return an_operation(state, version=version)


@pytest.mark.parametrize(
    ("header", "seconds"),
    [
        ("wait=5", 5),
        ("respond-async, wait=10", 10),
        ("WAIT = 3", 3),
        ('wait="7"', 7),
        ("wait=4; foo=bar", 4),
        ("wait=20", 20),
        ("wait=100", 20),  # honoured as far as the server goes
        ("wait=0", None),
        ("wait=-1", None),
        ("wait=1.5", None),
        ("wait=abc", None),
        ("wait", None),
        ("return=minimal", None),
        ("respond-async", None),
        ("", None),
        (None, None),
    ],
)
def test_the_prefer_header_asks_for_a_wait_of_whole_seconds_up_to_twenty(header: str | None, seconds: int | None):
    assert waiting.preferred_wait(header) == seconds


def test_pauses_grow_from_a_tenth_of_a_second_to_one_second():
    assert [waiting.pause_before(n) for n in range(1, 8)] == [0.1, 0.2, 0.4, 0.8, 1.0, 1.0, 1.0]


class _Context:
    def __init__(self, remaining_ms: int) -> None:
        self.remaining_ms = remaining_ms

    def get_remaining_time_in_millis(self) -> int:
        return self.remaining_ms


def test_the_wait_ends_before_the_invocation_does():
    assert waiting.budget(20, _Context(29_000)) == 20
    assert waiting.budget(20, _Context(10_000)) == 10 - waiting.LAMBDA_MARGIN_SECONDS
    assert waiting.budget(20, _Context(1_000)) == 0
    assert waiting.budget(5, None) == 5


@pytest.mark.parametrize("state", [OperationState.SETTLED, OperationState.AWAITING_CONSENT, OperationState.PENDING])
def test_an_operation_at_rest_is_answered_without_a_read(state: OperationState):
    def unexpected() -> Operation:
        raise AssertionError("read an operation at rest")

    waited = waiting.until_at_rest(_operation(state), unexpected, 20)
    assert (waited.record.state, waited.reads, waited.paused) == (state, 0, 0.0)


def test_the_wait_answers_as_soon_as_another_thread_settles_the_operation():
    """The settle happens on another thread once the wait has read the operation three times in flight; the wait
    answers with the settled operation at its next read, long before its 20 s."""
    stored = {"op": _operation(OperationState.PLANNED)}
    third_read = threading.Event()
    reads = []

    def read() -> Operation:
        reads.append(stored["op"].state)
        if len(reads) == 3:
            third_read.set()
            settler.join(timeout=30)
        return stored["op"]

    def settle() -> None:
        third_read.wait(timeout=30)
        stored["op"] = _operation(OperationState.SETTLED, version=2)

    settler = threading.Thread(target=settle)
    settler.start()
    waited = waiting.until_at_rest(_operation(OperationState.ADMITTED), read, 20)

    assert waited.record.state is OperationState.SETTLED
    assert waited.reads == 3
    assert waited.paused == pytest.approx(0.1 + 0.2 + 0.4)


def test_the_wait_times_out_at_n_with_the_operation_as_it_stands():
    """A clock the pauses move (no real time passes): the last read is made at the deadline, not after it."""
    now = [1000.0]
    read_at: list[float] = []

    def pause(seconds: float) -> None:
        now[0] += seconds

    def read() -> Operation:
        read_at.append(now[0])
        return _operation(OperationState.COMMITTED)

    waited = waiting.until_at_rest(_operation(OperationState.PLANNED), read, 5, clock=lambda: now[0], pause=pause)

    assert waited.record.state is OperationState.COMMITTED
    assert waited.paused == waited.elapsed == pytest.approx(5)
    assert read_at[-1] == pytest.approx(1005.0)
    # 0.1, 0.2, 0.4, 0.8, then 1 s pauses, the last one cut at the deadline
    assert waited.reads == len(read_at) == 8
