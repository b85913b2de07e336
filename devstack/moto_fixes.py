"""Four fixes to moto: memory that stays flat and transactions that stay fast (a long-running local stack needs both),
and transactions idempotent under their token, as on AWS.

**Every moto model instance was kept forever.** moto's ``BaseModel.__new__`` appends each instance it creates to its
class's ``instances_tracked`` list (for the moto server's dashboard), so every DynamoDB ``Item`` a read copied, every
S3 key and every Step Functions object stayed reachable until a reset that a running stack never does. Here the
tracking becomes weak: the dashboard still lists the live instances, and the dead ones are freed.

**Every transaction copied whole tables.** moto's ``TransactWriteItems`` backs up each table it touches with
``copy.deepcopy`` (once per item of the transaction) so it can put the copy back if the transaction is cancelled.
Those copies were also tracked (above), so the local stack grew by a full copy of the table per transaction
(about 2.7 GB after a few hundred publishes), and each transaction took longer as the table grew, under the lock
that makes it atomic. Here the backup is a journal of just the items the transaction names: they are copied before it
runs and put back (or removed, if they did not exist) when it fails. moto's own copy of the table is skipped.

**Every Step Functions thread was kept forever.** moto's ASL interpreter appends every thread it starts (two or more
per execution: the execution, its program, each Map iteration and Parallel branch, each task-token wait) to a
module-level list, ``TMP_THREADS``, that nothing reads or empties. Here each new execution first drops the threads
of that list that have finished.

**TransactWriteItems ignored its ClientRequestToken.** DynamoDB makes a transaction idempotent under its token: for
10 minutes after the first request that used it completes, the same token with the same parameters is answered as
a success without writing again, and with other parameters refused ``IdempotentParameterMismatchException``; a
request that failed (cancelled) leaves the token unused (API reference, TransactWriteItems, ClientRequestToken).
moto 5.2 reads the token nowhere, so a retry of a committed transaction whose answer was lost was cancelled by its
own condition here and not on AWS. Here moto's handler keeps the tokens of committed transactions for 10 minutes.

All four are installed by :func:`devstack.lambdas.install` (the one call every local runtime makes: tests, the local
stack, benchmarks) and removed by :func:`devstack.lambdas.uninstall`.
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import json
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from typing import Any

import moto.dynamodb.models as dynamodb_models
from moto.core.common_models import BaseModel
from moto.core.model_instances import model_data
from moto.dynamodb.exceptions import ERROR_TYPE_PREFIX, DynamodbException
from moto.dynamodb.models import DynamoDBBackend
from moto.dynamodb.models.dynamo_type import DynamoType
from moto.dynamodb.models.table import Table
from moto.dynamodb.responses import DynamoHandler
from moto.stepfunctions.parser.backend.execution_worker import ExecutionWorker
from moto.stepfunctions.parser.utils import TMP_THREADS

from devstack import item_size, serializable

_installed: dict[str, Any] = {}
_journaling = threading.local()


# ------------------------------------------------------------------ weak instance tracking


class WeakInstances:
    """Stands in for a model class's ``instances_tracked`` list: remembers the instances that are still alive."""

    def __init__(self, existing: Any = ()) -> None:
        self._refs: weakref.WeakSet[Any] = weakref.WeakSet()
        for instance in existing:
            self.append(instance)

    def append(self, instance: Any) -> None:
        with contextlib.suppress(TypeError):  # a class without weak reference support is not tracked at all
            self._refs.add(instance)

    def __iter__(self) -> Iterator[Any]:
        return iter(list(self._refs))

    def __len__(self) -> int:
        return len(self._refs)


def _weakly_tracked_new(cls: Any, *args: Any, **kwargs: Any) -> Any:
    instance = super(BaseModel, cls).__new__(cls)  # as moto's BaseModel.__new__, minus the strong reference
    tracked = cls.__dict__.get("instances_tracked")
    if not isinstance(tracked, WeakInstances):
        tracked = WeakInstances(tracked or ())
        setattr(cls, "instances_tracked", tracked)  # noqa: B010
    tracked.append(instance)
    return instance


def _track_weakly() -> None:
    _installed["BaseModel.__new__"] = BaseModel.__dict__["__new__"]
    setattr(BaseModel, "__new__", staticmethod(_weakly_tracked_new))  # noqa: B010
    for models in model_data.values():
        for model in models.values():
            tracked = getattr(model, "instances_tracked", None)
            if not isinstance(tracked, WeakInstances):
                setattr(model, "instances_tracked", WeakInstances(tracked or ()))  # noqa: B010


# ------------------------------------------------------------------ journaled transactions


class _CopyWithoutTables:
    """The ``copy`` module as moto's DynamoDB backend sees it: while a journaled transaction runs on this thread,
    ``deepcopy`` of a Table returns the table itself (moto's rollback then puts back the same object, a no-op)."""

    def __getattr__(self, name: str) -> Any:
        return getattr(copy, name)

    @staticmethod
    def deepcopy(value: Any, memo: dict[int, Any] | None = None) -> Any:
        if isinstance(value, Table) and getattr(_journaling, "active", False):
            return value
        return copy.deepcopy(value, memo)


Saved = tuple[Table, DynamoType, "DynamoType | None", Any]


def _journal(backend: Any, transact_items: list[dict[str, Any]]) -> list[Saved]:
    """A copy of each item the transaction names, as it is now (None where there is none)."""
    saved: list[Saved] = []
    for entry in transact_items:
        try:
            (op_type, op), *_ = entry.items()
            table = backend.get_table(op["TableName"])
            key = op["Item"] if op_type == "Put" else op["Key"]
            hash_value = DynamoType(key[table.hash_key_attr])
            range_value = DynamoType(key[table.range_key_attr]) if table.range_key_attr else None
        except Exception:  # moto refuses the malformed entry itself, before writing anything
            continue
        current = table.get_item(hash_value, range_value)
        saved.append((table, hash_value, range_value, copy.deepcopy(current)))
    return saved


def _restore(saved: list[Saved]) -> None:
    for table, hash_value, range_value, item in reversed(saved):
        item_size.put_back_at(table, hash_value, range_value, item)


def _journaled(inner: Callable[..., Any]) -> Callable[..., Any]:
    def transact_write_items(self: Any, transact_items: list[dict[str, Any]], *args: Any, **kwargs: Any) -> Any:
        # The same (reentrant) lock as every other write: the journal and the writes are one atomic step.
        with serializable._LOCK:
            saved = _journal(self, transact_items)
            _journaling.active = True
            try:
                return inner(self, transact_items, *args, **kwargs)
            except BaseException:
                _restore(saved)
                raise
            finally:
                _journaling.active = False

    transact_write_items.__doc__ = "moto's TransactWriteItems, backed up by a journal of its items (devstack)"
    return transact_write_items


# ------------------------------------------------------------------ finished interpreter threads


def _prune_finished_threads() -> None:
    """Drop finished threads from moto's ``TMP_THREADS`` (in place: moto's modules hold the list itself). One
    ``remove`` at a time, so a thread another execution appends meanwhile is never lost."""
    for thread in [thread for thread in TMP_THREADS if not thread.is_alive()]:
        with contextlib.suppress(ValueError):
            TMP_THREADS.remove(thread)


def _pruning(start: Callable[..., Any]) -> Callable[..., Any]:
    def start_pruned(self: Any, *args: Any, **kwargs: Any) -> Any:
        _prune_finished_threads()
        return start(self, *args, **kwargs)

    start_pruned.__doc__ = "moto's ExecutionWorker.start, after dropping finished threads from TMP_THREADS (devstack)"
    return start_pruned


# ------------------------------------------------------------------ idempotent transactions

IDEMPOTENCY_WINDOW_SECONDS = 600  # DynamoDB: a client request token is valid for 10 minutes
_tokens: dict[tuple[str, str, str], tuple[str, float]] = {}  # (account, region, token) -> (parameters, completed)


class IdempotentParameterMismatch(DynamodbException):
    def __init__(self) -> None:
        super().__init__(
            ERROR_TYPE_PREFIX + "IdempotentParameterMismatchException",
            "the ClientRequestToken was used in the last 10 minutes by a request with other parameters",
        )


def _clock() -> float:
    return time.monotonic()


def _idempotent(inner: Callable[..., Any]) -> Callable[..., Any]:
    def transact_write_items(self: Any) -> Any:
        token = self.body.get("ClientRequestToken")
        if not token:
            return inner(self)
        parameters = {name: value for name, value in self.body.items() if name != "ClientRequestToken"}
        digest = _parameters_digest(parameters)
        entry = (self.current_account, self.region, token)
        with serializable._LOCK:
            now = _clock()
            _forget_tokens_before(now - IDEMPOTENCY_WINDOW_SECONDS)
            seen = _tokens.get(entry)
            if seen is not None:
                if seen[0] != digest:
                    raise IdempotentParameterMismatch()
                return _success()  # committed before: the same answer, nothing written again
            result = inner(self)  # a cancelled transaction raises: its token stays unused
            _tokens[entry] = (digest, now)
            return result

    transact_write_items.__doc__ = "moto's TransactWriteItems handler, idempotent under ClientRequestToken (devstack)"
    return transact_write_items


def _parameters_digest(parameters: dict[str, Any]) -> str:
    """What "the same parameters" compares: a sha256 of the request without its token. moto's parser has decoded
    binary attribute values (``B``, ``BS``) to bytes by then; they count as their hex, tagged (so no string equals
    them)."""
    canonical = json.dumps(parameters, sort_keys=True, default=_hex_of_bytes)
    return hashlib.sha256(canonical.encode()).hexdigest()


def _hex_of_bytes(value: Any) -> dict[str, str]:
    if isinstance(value, bytes | bytearray):
        return {"bytes": bytes(value).hex()}
    raise TypeError(f"no canonical form for {type(value).__name__}")


def _forget_tokens_before(cutoff: float) -> None:
    """Drop the tokens whose transaction completed at or before ``cutoff``: the oldest first (the dict is in commit
    order), stopping at the first one still in the window, so each token is looked at about once over its life, not
    once per transaction (copying the 10-minute window's tokens, some 18,000 at 30 transactions a second, was the
    cost of every transaction before)."""
    while _tokens:
        oldest = next(iter(_tokens))
        if _tokens[oldest][1] > cutoff:
            return
        del _tokens[oldest]


def _success() -> Any:
    from moto.core.responses import ActionResult

    return ActionResult({"ConsumedCapacity": [], "ItemCollectionMetrics": {}})  # what moto answers a commit


# ------------------------------------------------------------------ install


def install() -> None:
    """Apply the four fixes (idempotent)."""
    if _installed:
        return
    _track_weakly()
    _installed["transact_write_items"] = DynamoDBBackend.__dict__["transact_write_items"]
    DynamoDBBackend.transact_write_items = _journaled(  # type: ignore[method-assign]
        _installed["transact_write_items"]
    )
    _installed["copy"] = getattr(dynamodb_models, "copy")  # noqa: B009 - not exported, but what moto calls
    setattr(dynamodb_models, "copy", _CopyWithoutTables())  # noqa: B010
    _installed["ExecutionWorker.start"] = ExecutionWorker.__dict__["start"]
    setattr(ExecutionWorker, "start", _pruning(_installed["ExecutionWorker.start"]))  # noqa: B010
    item_size.install()  # DynamoDB's 400 KB item limit as DynamoDB counts it (devstack/item_size.py)
    _installed["DynamoHandler.transact_write_items"] = DynamoHandler.__dict__["transact_write_items"]
    setattr(  # noqa: B010
        DynamoHandler, "transact_write_items", _idempotent(_installed["DynamoHandler.transact_write_items"])
    )


def uninstall() -> None:
    """Put moto back as it was (instances tracked from now on strongly again)."""
    if not _installed:
        return
    setattr(BaseModel, "__new__", _installed.pop("BaseModel.__new__"))  # noqa: B010
    DynamoDBBackend.transact_write_items = _installed.pop("transact_write_items")  # type: ignore[method-assign]
    setattr(dynamodb_models, "copy", _installed.pop("copy"))  # noqa: B010
    item_size.uninstall()
    setattr(ExecutionWorker, "start", _installed.pop("ExecutionWorker.start"))  # noqa: B010
    setattr(DynamoHandler, "transact_write_items", _installed.pop("DynamoHandler.transact_write_items"))  # noqa: B010
    _tokens.clear()
