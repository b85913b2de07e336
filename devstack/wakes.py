"""Waits woken when their operation comes to rest: the local stack's alarm for ``packyard.operations.waiting``.

A request that waits for an operation (``Prefer: wait=N``, ``?wait=N``) reads it again after pauses of 100 ms,
200 ms, 400 ms, 800 ms, then every second (``waiting.pause_before``): on AWS that schedule is the wait, because a
Lambda has nothing cheaper to wait on than the reads themselves. The local stack holds the table in this process,
so it can tell a wait the moment its operation is written at rest (``settled``, ``awaiting_consent``, ``pending``):
each pause ends then, and without such a write it lasts a second (``waiting.LONGEST_PAUSE_SECONDS``) instead of the
growing schedule. A lifecycle that settles in about a second is then read once or twice instead of four or five
times, each read a whole GetItem through botocore and moto: under the load benchmark those reads were a sixth of
the stack's CPU (docs/decisions.md, "Local stack throughput, fifth pass").

Only a write that leaves a waited operation at rest wakes its waiter: waking at every write of the operation (the
plan's, the commit's) was measured in the fourth pass and cost more than it saved. What the waiter answers is what
it would have answered after its next pause: it still reads the operation, strongly consistent, and decides
from what it read.

Installed by ``packyard local`` (:func:`devstack.local.start`); :func:`install` patches moto's DynamoDB writes and
sets the alarm, :func:`uninstall` undoes both.
"""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from moto.dynamodb.models.dynamo_type import DynamoType

from devstack import persistence
from packyard.operations import waiting
from packyard.operations.models import Operation
from packyard.store.workspace import operation_key

STATE_ATTRIBUTE = "state"
KEY_ATTRIBUTES = ("pk", "sk")  # the table's key (template.yaml)
OPERATION_PREFIX = operation_key("t", "w", "")[1]  # the sort key of every operation item starts with it
AT_REST_VALUES = frozenset(state.value for state in waiting.AT_REST)

Key = tuple[str, str]

_lock = threading.Lock()
_waiters: dict[Key, list[threading.Event]] = {}
_undo: list[Callable[[], None]] = []


@contextmanager
def alarm(op: Operation, deadline: float) -> Iterator[Callable[[float], None]]:
    """``waiting.Alarm``: while the wait lasts, a write that leaves ``op`` at rest sets this wait's event; each pause
    ends at that event or after a second (never past ``deadline``)."""
    key = operation_key(op.tenant, op.workspace, op.operation_id)
    woken = threading.Event()
    with _lock:
        _waiters.setdefault(key, []).append(woken)
    try:

        def pause(step: float) -> None:
            woken.wait(min(max(step, waiting.LONGEST_PAUSE_SECONDS), max(0.0, deadline - time.monotonic())))
            woken.clear()

        yield pause
    finally:
        with _lock:
            events = _waiters.get(key, [])
            if woken in events:
                events.remove(woken)
            if not events:
                _waiters.pop(key, None)


def _operation_written_at_rest(backend: Any, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Key | None:
    """The key of the operation item this write left at rest, if it did (read back from the table, as written)."""
    written = persistence.item_written(backend, name, args, kwargs)
    if written is None:
        return None
    table_name, _, attributes = written
    key = (_string(attributes.get(KEY_ATTRIBUTES[0])), _string(attributes.get(KEY_ATTRIBUTES[1])))
    if key[0] is None or not (key[1] or "").startswith(OPERATION_PREFIX):
        return None
    item = backend.get_table(table_name).get_item(
        DynamoType(attributes[KEY_ATTRIBUTES[0]]), DynamoType(attributes[KEY_ATTRIBUTES[1]])
    )
    state = item.attrs.get(STATE_ATTRIBUTE) if item is not None else None
    return key if state is not None and state.value in AT_REST_VALUES else None  # type: ignore[return-value]


def _string(attribute: Any) -> str | None:
    return attribute.get("S") if isinstance(attribute, dict) else None


def notify_at_rest(key: Key) -> None:
    """Wake the waits of this process for the operation item ``key`` (it was just written at rest)."""
    with _lock:
        events = list(_waiters.get(key, ()))
    for event in events:
        event.set()


def _waking(name: str, original: Callable[..., Any], observe: Callable[[Key], None] | None) -> Callable[..., Any]:
    @functools.wraps(original)
    def write(self: Any, *args: Any, **kwargs: Any) -> Any:
        result = original(self, *args, **kwargs)
        if observe is None and not _waiters:  # read without the lock: a wait registered meanwhile reads anyway
            return result
        key = _operation_written_at_rest(self, name, args, kwargs)
        if key is not None:
            (observe or notify_at_rest)(key)
        return result

    return write


def install(observe: Callable[[Key], None] | None = None) -> None:
    """Wake waits at their operation's rest (idempotent). ``observe``: told of every operation written at rest,
    for waits in another process (the API process, :mod:`devstack.api_process`, which calls :func:`install_alarm`
    and :func:`notify_at_rest`); None: this process's own waits."""
    from moto.dynamodb.models import DynamoDBBackend

    if _undo:
        return
    for name in ("put_item", "update_item"):  # a transaction writes its items through these too
        original = DynamoDBBackend.__dict__[name]
        setattr(DynamoDBBackend, name, _waking(name, original, observe))
        _undo.append(functools.partial(setattr, DynamoDBBackend, name, original))
    if observe is None:
        install_alarm()


def install_alarm() -> None:
    """The waits of this process pause until :func:`notify_at_rest` names their operation (or a second passes)."""
    waiting.wake_with(alarm)
    _undo.append(functools.partial(waiting.wake_with, None))


def uninstall() -> None:
    while _undo:
        _undo.pop()()
    with _lock:
        _waiters.clear()
