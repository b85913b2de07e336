"""Fault injection: the ways AWS misbehaves that moto never does on its own.

- **Crash** (:func:`crash_after`): the k-th AWS call of the code under test "dies" right after AWS answered it. The
  hook runs on botocore's ``after-call`` event, so the request's side effect has happened (the item is written, the
  object stored) when the injected crash raises: exactly what a Lambda killed between two calls leaves behind.
- **Lost answer** (:func:`lose_answers`): a call is applied and its answer never arrives: the client sees the
  connection close (``ConnectionClosedError``), and botocore's own retry sends the same request again, as on a
  network that drops a response. Hooked on ``before-send`` (first in line): the request is handed to moto (or, for a
  moto server, sent) before the error is raised.
- **Unprocessed keys** (:func:`unprocessed_keys`): a BatchGetItem answers part of what it was asked and returns the
  rest as ``UnprocessedKeys``, as DynamoDB may under throttling.
- **Duplicates** (:func:`duplicate_executions`, :func:`duplicate_task_runs`, from :mod:`devstack.express`): Express
  workflows run at least once: every Express run started twice, or every Lambda task of a state machine run twice.
- **Stale index** (:func:`stale_index`): a global secondary index is eventually consistent (DynamoDB: "All reads
  from GSIs and streams are eventually consistent"); while the block runs, every Query of the index is answered
  from the index as it was when the block began, while the table itself moves on.

Installed the same way as the request counter (``BUILTIN_HANDLERS``), so they reach every client.
"""

from __future__ import annotations

import re
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from botocore.handlers import BUILTIN_HANDLERS, REGISTER_FIRST

from devstack.counting import _issued_by_moto
from devstack.express import duplicate_executions, duplicate_task_runs  # noqa: F401 - re-exported fault injectors


class InjectedCrash(Exception):
    """Raised in place of the process dying. Not a domain error: nothing in the code catches it by type."""


@dataclass
class CrashPlan:
    after_call: int
    calls: list[tuple[str, str]] = field(default_factory=list)
    crashed: bool = False


_lock = threading.Lock()
_plan: CrashPlan | None = None


def _on_after_call(model: Any = None, **_: Any) -> None:
    global _plan
    if _plan is None or model is None:
        return
    key = (model.service_model.service_name, model.name)
    if key[0] == "lambda" and _issued_by_moto():
        return
    with _lock:
        plan = _plan
        if plan is None or plan.crashed:
            return
        plan.calls.append(key)
        if len(plan.calls) == plan.after_call:
            plan.crashed = True
            raise InjectedCrash(f"injected crash after call {plan.after_call}: {key[0]}.{key[1]}")


@contextmanager
def crash_after(k: int) -> Iterator[CrashPlan]:
    """Crash once, right after the k-th AWS call made inside the block (any thread). ``plan.crashed`` tells
    whether the code made that many calls at all."""
    global _plan
    plan = CrashPlan(after_call=k)
    with _lock:
        _plan = plan
    try:
        yield plan
    finally:
        with _lock:
            _plan = None


if ("after-call", _on_after_call) not in BUILTIN_HANDLERS:
    BUILTIN_HANDLERS.append(("after-call", _on_after_call))


# ------------------------------------------------------------------ lost answers


@dataclass
class LossPlan:
    """Lose the answers of the next ``times`` calls of ``operation`` (made by the store function ``site``, e.g.
    ``catalog.create_upload``, if given). ``lost`` lists each lost call as (operation, site)."""

    operation: str
    site: str | None
    times: int
    lost: list[tuple[str, str | None]] = field(default_factory=list)


_loss: LossPlan | None = None


def calling_site() -> str | None:
    """The data access layer's function making the current AWS call (``module.function`` under packyard/store/,
    the plumbing of ``dynamo`` and ``aws`` aside), from this thread's stack."""
    frame = sys._getframe(1)
    while frame is not None:
        path = frame.f_code.co_filename.replace("\\", "/")
        if "/packyard/store/" in path and not path.endswith(("/dynamo.py", "/aws.py")):
            module = path.rsplit("/", 1)[-1].removesuffix(".py")
            return f"{module}.{frame.f_code.co_name}"
        frame = frame.f_back  # type: ignore[assignment]
    return None


def _on_before_send(request: Any = None, event_name: str = "", **_: Any) -> Any:
    plan = _loss
    if plan is None or request is None:
        return None
    operation = event_name.rsplit(".", 1)[-1]
    if operation != plan.operation:
        return None
    site = calling_site()
    with _lock:
        if plan.times <= len(plan.lost) or (plan.site is not None and site != plan.site):
            return None
        plan.lost.append((operation, site))
    _deliver(request, event_name)
    from botocore.exceptions import ConnectionClosedError

    raise ConnectionClosedError(endpoint_url=request.url)


def _deliver(request: Any, event_name: str) -> None:
    """Let AWS (moto) apply the request whose answer is about to be lost."""
    from moto.core.models import botocore_stubber

    if botocore_stubber(event_name, request) is None:  # not mocked in-process: a moto server over HTTP
        from botocore.httpsession import URLLib3Session

        URLLib3Session().send(request)


@contextmanager
def lose_answers(
    operation: str = "TransactWriteItems", *, site: str | None = None, times: int = 1
) -> Iterator[LossPlan]:
    """Inside the block, the next ``times`` requests of ``operation`` (from ``site``, if given) are applied and
    their answers lost; botocore retries each as it would on AWS (``plan.lost`` tells which were)."""
    global _loss
    plan = LossPlan(operation=operation, site=site, times=times)
    with _lock:
        _loss = plan
    try:
        yield plan
    finally:
        with _lock:
            _loss = None


if ("before-send", _on_before_send, REGISTER_FIRST) not in BUILTIN_HANDLERS:
    BUILTIN_HANDLERS.append(("before-send", _on_before_send, REGISTER_FIRST))


# ------------------------------------------------------------------ stale index pages


@dataclass
class StaleIndex:
    """The items of ``index`` as they were when the block began (``refresh`` takes the picture again), and how many
    Query pages were answered from it."""

    table: str
    index: str
    hash_key: str
    range_key: str | None
    table_keys: tuple[str, ...]
    items: list[dict[str, Any]] = field(default_factory=list)
    pages: int = 0

    def refresh(self) -> None:
        self.items = _scan_index(self.table, self.index)

    def answer(self, params: dict[str, Any], parsed: dict[str, Any]) -> None:
        """Replace a Query's answer by one computed from the picture."""
        if params.get("FilterExpression") or params.get("QueryFilter") or params.get("KeyConditions"):
            raise NotImplementedError("stale_index answers key conditions only")
        names = params.get("ExpressionAttributeNames", {})
        values = params.get("ExpressionAttributeValues", {})
        conditions = _key_conditions(params["KeyConditionExpression"], names, values)
        matched = [item for item in self.items if all(_holds(item, *c) for c in conditions)]
        matched.sort(key=self._order, reverse=params.get("ScanIndexForward", True) is False)
        start = params.get("ExclusiveStartKey")
        if start:
            wanted = tuple(start[k]["S"] if "S" in start[k] else start[k].get("N") for k in self.table_keys)
            for position, item in enumerate(matched):
                if tuple(_scalar(item[k]) for k in self.table_keys) == wanted:
                    matched = matched[position + 1 :]
                    break
        limit = params.get("Limit")
        page = matched[:limit] if limit else matched
        parsed["Count"] = parsed["ScannedCount"] = len(page)
        if params.get("Select") == "COUNT":
            parsed.pop("Items", None)
        else:
            parsed["Items"] = [dict(item) for item in page]
        parsed.pop("LastEvaluatedKey", None)
        if limit and len(matched) > limit:
            last = page[-1]
            keys = {*self.table_keys, self.hash_key, *([self.range_key] if self.range_key else [])}
            parsed["LastEvaluatedKey"] = {k: last[k] for k in keys}
        self.pages += 1

    def _order(self, item: dict[str, Any]) -> tuple[Any, ...]:
        at = _scalar(item[self.range_key]) if self.range_key else ""
        return (at, *(_scalar(item[k]) for k in self.table_keys))


_stale: list[StaleIndex] = []
_unprocessed: list[UnprocessedPlan] = []
_PARAMS = "devstack_query_params"


def _scalar(value: dict[str, Any]) -> Any:
    if "N" in value:
        return float(value["N"])
    return value.get("S", value.get("B"))


_COMPARE = {"=": lambda a, b: a == b, "<=": lambda a, b: a <= b, "<": lambda a, b: a < b,
            ">=": lambda a, b: a >= b, ">": lambda a, b: a > b}  # fmt: skip
_CONDITION = re.compile(r"^\s*([#\w]+)\s*(<=|>=|=|<|>)\s*(:\w+)\s*$")


def _key_conditions(expression: str, names: dict[str, str], values: dict[str, Any]) -> list[tuple[str, str, Any]]:
    """``a = :x AND b <= :y`` as (attribute, operator, value); anything else is refused, never guessed."""
    found = []
    for part in re.split(r"\s+AND\s+", expression, flags=re.IGNORECASE):
        match = _CONDITION.match(part)
        if match is None:
            raise NotImplementedError(f"stale_index cannot evaluate the key condition {part!r}")
        name, operator, placeholder = match.groups()
        found.append((names.get(name, name), operator, _scalar(values[placeholder])))
    return found


def _holds(item: dict[str, Any], attribute: str, operator: str, value: Any) -> bool:
    return attribute in item and bool(_COMPARE[operator](_scalar(item[attribute]), value))


def _scan_index(table: str, index: str) -> list[dict[str, Any]]:
    import boto3

    client = boto3.client("dynamodb")
    items: list[dict[str, Any]] = []
    params: dict[str, Any] = {"TableName": table, "IndexName": index}
    while True:
        page = client.scan(**params)
        items.extend(page.get("Items", []))
        if not page.get("LastEvaluatedKey"):
            return items
        params["ExclusiveStartKey"] = page["LastEvaluatedKey"]


def _on_query_params(params: Any = None, model: Any = None, context: Any = None, **_: Any) -> None:
    if model is None or context is None or not isinstance(params, dict):
        return
    if (_stale and model.name == "Query") or (_unprocessed and model.name == "BatchGetItem"):
        context[_PARAMS] = dict(params)


def _on_query_answered(parsed: Any = None, model: Any = None, context: Any = None, **_: Any) -> None:
    if _unprocessed and model is not None and model.name == "BatchGetItem" and context is not None:
        _leave_unprocessed(context.get(_PARAMS) or {}, parsed)
    if not _stale or model is None or model.name != "Query" or context is None:
        return
    params = context.get(_PARAMS)
    if not params or "Error" in (parsed or {}):
        return
    for stale in list(_stale):
        if params.get("TableName") == stale.table and params.get("IndexName") == stale.index:
            stale.answer(params, parsed)


@contextmanager
def stale_index(table: str, index: str) -> Iterator[StaleIndex]:
    """Inside the block, every Query of ``index`` of ``table`` is answered from the index as it was when the block
    began: items written since are not in it, items changed since show their old image."""
    import boto3

    described = boto3.client("dynamodb").describe_table(TableName=table)["Table"]
    (gsi,) = [g for g in described.get("GlobalSecondaryIndexes", []) if g["IndexName"] == index]
    schema = {k["KeyType"]: k["AttributeName"] for k in gsi["KeySchema"]}
    stale = StaleIndex(
        table=table,
        index=index,
        hash_key=schema["HASH"],
        range_key=schema.get("RANGE"),
        table_keys=tuple(k["AttributeName"] for k in described["KeySchema"]),
    )
    stale.refresh()
    with _lock:
        _stale.append(stale)
    try:
        yield stale
    finally:
        with _lock:
            _stale.remove(stale)


# ------------------------------------------------------------------ unprocessed keys


@dataclass
class UnprocessedPlan:
    """The next ``times`` BatchGetItem answers return all but their first item as ``UnprocessedKeys``."""

    times: int
    answered: int = 0


def _leave_unprocessed(params: dict[str, Any], parsed: Any) -> None:
    with _lock:
        plan = _unprocessed[-1] if _unprocessed else None
        if plan is None or plan.answered >= plan.times or not isinstance(parsed, dict):
            return
        plan.answered += 1
    unprocessed: dict[str, Any] = {}
    for table, found in (parsed.get("Responses") or {}).items():
        requested = params.get("RequestItems", {}).get(table, {})
        names = list(requested["Keys"][0]) if requested.get("Keys") else []
        if len(found) > 1 and names:
            keys = [{name: item[name] for name in names} for item in found[1:]]
            unprocessed[table] = {**{k: v for k, v in requested.items() if k != "Keys"}, "Keys": keys}
            parsed["Responses"][table] = found[:1]
    if unprocessed:
        parsed["UnprocessedKeys"] = unprocessed


@contextmanager
def unprocessed_keys(times: int) -> Iterator[UnprocessedPlan]:
    """Inside the block, the next ``times`` BatchGetItem answers keep only their first item and return the rest as
    ``UnprocessedKeys`` (what DynamoDB does past its throughput or the 16 MB answer limit)."""
    plan = UnprocessedPlan(times=times)
    with _lock:
        _unprocessed.append(plan)
    try:
        yield plan
    finally:
        with _lock:
            _unprocessed.remove(plan)


if ("before-parameter-build.dynamodb", _on_query_params) not in BUILTIN_HANDLERS:
    BUILTIN_HANDLERS.append(("before-parameter-build.dynamodb", _on_query_params))
if ("after-call.dynamodb", _on_query_answered) not in BUILTIN_HANDLERS:
    BUILTIN_HANDLERS.append(("after-call.dynamodb", _on_query_answered))
