"""Waiting for an operation inside one request: ``GET …/operations/{op}?wait=N`` and a mutation's ``Prefer: wait=N``
(RFC 7240 section 4.3) answer as soon as the operation comes to rest or N seconds pass, so a client makes one
request where it made one plus a poll every 200 ms.

An operation is at rest when only something outside it can move it on: ``settled``, ``awaiting_consent`` (an owner
decides) or ``pending`` (the same request resumes it). The wait reads the operation again (a strongly consistent
GetItem, 1 read unit for an item under 4 KB) after pauses that grow 100 ms, 200 ms, 400 ms, 800 ms, then 1 s: a
lifecycle that settles in ~1 s costs 4-5 reads, a 20 s wait at most 23. Why this and not a stream or a signal, and
what the waiting Lambda costs against the polls it saves: docs/decisions.md, "Waiting for an operation".

The wait is bounded by the request's integration timeout, not only by N: it ends ``LAMBDA_MARGIN_SECONDS`` before
the invocation's own deadline, so the answer always leaves the function (API Gateway's 30 s integration timeout
is the Lambda's Timeout here, 30 s, above the 20 s a caller may ask)."""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from packyard.operations.models import Operation, OperationState

Record = TypeVar("Record")

MAX_WAIT_SECONDS = 20
FIRST_PAUSE_SECONDS = 0.1
LONGEST_PAUSE_SECONDS = 1.0
LAMBDA_MARGIN_SECONDS = 2.0
AT_REST = frozenset({OperationState.SETTLED, OperationState.AWAITING_CONSENT, OperationState.PENDING})

# RFC 7240 section 2: preference = token [ BWS "=" BWS word ] *( OWS ";" [ OWS parameter ] ), comma-separated;
# section 4.3: wait = "wait" BWS "=" BWS delta-seconds (1*DIGIT). Names are case-insensitive.
_WAIT_PREFERENCE = re.compile(r'^\s*wait\s*=\s*"?(\d{1,9})"?\s*(?:;.*)?$', re.IGNORECASE)


@dataclass(frozen=True)
class Waited(Generic[Record]):
    """The record (an operation, an upload) as the wait last read it, how many reads it took, the seconds it
    paused and the seconds it took in all (pauses and reads)."""

    record: Record
    reads: int
    paused: float
    elapsed: float


def at_rest(op: Operation) -> bool:
    return op.state in AT_REST


def pause_before(read: int) -> float:
    """The pause before the wait's ``read``-th read (1, 2, …): 100 ms doubling, capped at 1 s."""
    return float(min(LONGEST_PAUSE_SECONDS, FIRST_PAUSE_SECONDS * 2 ** (read - 1)))


def preferred_wait(prefer: str | None) -> int | None:
    """The seconds a ``Prefer`` header asks to wait (capped at ``MAX_WAIT_SECONDS``), or None when it asks for no
    wait. A preference the server does not understand is ignored, as RFC 7240 section 2 has it: ``wait=0``, a
    malformed value and other preferences (``respond-async``, ``return=minimal``) change nothing."""
    if not prefer:
        return None
    for preference in prefer.split(","):
        found = _WAIT_PREFERENCE.match(preference)
        if found and int(found.group(1)) > 0:
            return min(int(found.group(1)), MAX_WAIT_SECONDS)
    return None


def budget(seconds: float, lambda_context: Any) -> float:
    """``seconds``, shortened so the answer leaves the invocation before its deadline (``LAMBDA_MARGIN_SECONDS``)."""
    remaining = getattr(lambda_context, "get_remaining_time_in_millis", None)
    if remaining is None:
        return seconds
    left: float = remaining() / 1000 - LAMBDA_MARGIN_SECONDS
    return max(0.0, min(seconds, left))


Alarm = Callable[[Operation, float], AbstractContextManager[Callable[[float], None]]]
"""Given the operation waited on and the wait's deadline (``time.monotonic``), a context that yields the pause to
use between reads: one that ends as soon as the operation is written at rest."""

_alarm: Alarm | None = None


def wake_with(alarm: Alarm | None) -> None:
    """Let a runtime that sees the table's writes end a wait's pauses when its operation comes to rest (the local
    stack: ``devstack.wakes``), so the wait reads it about once instead of after every pause. AWS has no such
    signal a Lambda could wait on for less than the reads cost (docs/decisions.md, "Waiting for an operation"):
    there the pauses are the schedule. None: the schedule everywhere."""
    global _alarm
    _alarm = alarm


def until_at_rest(
    current: Operation,
    read: Callable[[], Operation],
    seconds: float,
    *,
    clock: Callable[[], float] = time.monotonic,
    pause: Callable[[float], None] | None = None,
) -> Waited[Operation]:
    """Read the operation again, with growing pauses, until it is at rest or ``seconds`` pass; the last read is
    made at the deadline, so an operation still moving is answered as it stands then. Without a ``pause`` of the
    caller's, a runtime's alarm (:func:`wake_with`) may end each pause early."""
    if pause is not None or _alarm is None or at_rest(current):
        return until(current, read, at_rest, seconds, clock=clock, pause=pause or time.sleep)
    with _alarm(current, time.monotonic() + seconds) as woken:
        return until(current, read, at_rest, seconds, clock=clock, pause=woken)


def until(
    current: Record,
    read: Callable[[], Record],
    done: Callable[[Record], bool],
    seconds: float,
    *,
    clock: Callable[[], float] = time.monotonic,
    pause: Callable[[float], None] = time.sleep,
) -> Waited[Record]:
    """Read ``current`` again with ``read``, after the pauses of :func:`pause_before`, until ``done`` or
    ``seconds`` pass (the last pause cut at the deadline)."""
    started = clock()
    deadline = started + seconds
    reads = 0
    paused = 0.0
    while not done(current):
        left = deadline - clock()
        if left <= 0:
            break
        step = min(pause_before(reads + 1), left)
        pause(step)
        paused += step
        current = read()
        reads += 1
    return Waited(current, reads, paused, clock() - started)
