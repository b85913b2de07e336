"""Count AWS API requests by (service, operation) with botocore event hooks.

How it reaches every client
---------------------------
botocore copies the session's event emitter into each client when the client is created, and a session's
emitter is built with the session (the data access layer keeps one, ``store.aws._session``, until
``reset_clients``). So a handler registered on "a session" only sees clients that session creates later. What
*every* new botocore session does see is
``botocore.handlers.BUILTIN_HANDLERS``: it is read when the session is built. Importing this module
appends one inert ``before-call`` hook there (the way moto installs its own ``before-send`` stubber), so
any client created afterwards, from any session, carries the hook, including clients the data access
layer creates and caches before a counter starts. While no counter is active the hook returns at once.

Clients created before ``devstack`` was imported lack the hook; :func:`observe` adds it to one.
``devstack/__init__`` imports this module, so importing ``devstack`` early (a conftest does) is enough.

What counts
-----------
``before-call`` fires once per API call (per page of a paginator), before retries: the count is of
requests the code made, not of HTTP attempts. Calls from any thread count (moto runs Step Functions
executions on background threads). The ``lambda:Invoke`` calls moto's Step Functions interpreter makes to
run Task states are not requests of the code under test: they go to ``counter.dispatched`` instead.

Recording calls for IAM
-----------------------
:func:`record_aws_calls` keeps every call with its API parameters (bodies dropped) and who made it: the logical id
of the function whose handler is running (:func:`invoking` marks it, in a context variable, so calls on moto's
execution threads and concurrent handlers are told apart), or None for the test itself and devstack. A second inert
hook, on ``before-parameter-build``, sees what ``before-call`` never does: a presigned URL (signed, never sent) is
recorded with ``presigned=True``; a third, on ``after-call``, notes how AWS answered (``outcome``).
:mod:`devstack.iam` maps the calls to IAM actions and checks them against the template's roles.
"""

from __future__ import annotations

import sys
import threading
from collections import Counter
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from types import FrameType
from typing import Any

from botocore.handlers import BUILTIN_HANDLERS

_HOOK_ID = "devstack-counting"
_CONTEXT_MARK = "devstack_counted"
_RECORD_HOOK_ID = "devstack-recording"
_RECORD_MARK = "devstack_recorded"
_RECORDED_CALL = "devstack_recorded_call"

_lock = threading.Lock()
_active: list[RequestCounter] = []
_recorders: list[CallRecorder] = []
_current_function: ContextVar[str | None] = ContextVar("devstack_current_function", default=None)


class RequestCounter(Counter[tuple[str, str]]):
    """``Counter`` keyed by ``(service, operation)``, e.g. ``("dynamodb", "TransactWriteItems")``."""

    def __init__(self) -> None:
        super().__init__()
        self.dispatched: Counter[tuple[str, str]] = Counter()

    def by_service(self) -> Counter[str]:
        out: Counter[str] = Counter()
        for (service, _), n in self.items():
            out[service] += n
        return out

    def of(self, service: str) -> int:
        """Requests to one service, e.g. ``counter.of("dynamodb")``."""
        return self.by_service()[service]

    def table(self, title: str = "AWS requests") -> str:
        """A fixed-width table (service, operation, count) with per-service and grand totals."""
        rows = sorted(self.items())
        width = max([len(f"{s} {o}") for (s, o), _ in rows] + [len(title), 14])
        lines = [title, "-" * (width + 8)]
        for service, total in sorted(self.by_service().items()):
            for (s, operation), n in rows:
                if s == service:
                    lines.append(f"{service + ' ' + operation:<{width}} {n:>7}")
            lines.append(f"{service + ' (total)':<{width}} {total:>7}")
        lines.append("-" * (width + 8))
        lines.append(f"{'all services':<{width}} {sum(self.values()):>7}")
        return "\n".join(lines)


def _issued_by_moto() -> bool:
    """True when the caller of the client method is moto itself (its Step Functions interpreter)."""
    frame: FrameType | None = sys._getframe(2)
    for _ in range(64):
        if frame is None:
            return False
        module = str(frame.f_globals.get("__name__", ""))
        if not module.startswith(("botocore.", "boto3.", __name__)):
            return module.startswith("moto.")
        frame = frame.f_back
    return False


def _on_before_call(model: Any = None, context: Any = None, **_: Any) -> None:
    if not _active or model is None:
        return None
    if isinstance(context, dict):
        # A client may carry the hook twice (BUILTIN_HANDLERS and observe()); count each call once.
        if context.get(_CONTEXT_MARK):
            return None
        context[_CONTEXT_MARK] = True
    key = (model.service_model.service_name, model.name)
    internal = key[0] == "lambda" and _issued_by_moto()
    with _lock:
        for counter in _active:
            if internal:
                counter.dispatched[key] += 1
            else:
                counter[key] += 1
    return None


def observe(client: Any) -> Any:
    """Add the counting and recording hooks to a client created before this module was imported. Returns it."""
    client.meta.events.register("before-call", _on_before_call, unique_id=_HOOK_ID)
    client.meta.events.register("before-parameter-build", _on_before_parameter_build, unique_id=_RECORD_HOOK_ID)
    client.meta.events.register("after-call", _on_after_call, unique_id=_RECORD_HOOK_ID + "-outcome")
    return client


@contextmanager
def count_aws_requests() -> Iterator[RequestCounter]:
    """Count every AWS API call made while the block runs (nesting and overlapping counters are fine)."""
    counter = RequestCounter()
    with _lock:
        _active.append(counter)
    try:
        yield counter
    finally:
        with _lock:
            _active.remove(counter)


# ------------------------------------------------------------------ recording calls, with who made them


@contextmanager
def invoking(function: str) -> Iterator[None]:
    """AWS calls made inside the block (in this thread or task) are made by ``function`` (a logical id). The
    in-process Lambda dispatcher wraps each handler call in it; nested invocations restore the outer one."""
    token = _current_function.set(function)
    try:
        yield
    finally:
        _current_function.reset(token)


def current_function() -> str | None:
    """The logical id of the function whose handler is running here, if any."""
    return _current_function.get()


@dataclass(frozen=True)
class AwsCall:
    """One API call (or one presigned URL) as the code made it."""

    principal: str | None  # logical id of the function whose handler made it; None: the test or devstack
    service: str  # botocore's service name: "dynamodb", "s3", "stepfunctions", "lambda"
    operation: str  # "TransactWriteItems", "PutObject", …
    params: Mapping[str, Any] = field(default_factory=dict)  # the API parameters, without Body
    presigned: bool = False  # a URL was signed for it; no request was sent
    internal: bool = False  # moto's Step Functions interpreter invoking a Task's Lambda function
    # how AWS answered, once it has: {"status": 404, "error": "NoSuchKey"} (empty for a presigned URL)
    outcome: dict[str, Any] = field(default_factory=dict, compare=False)


@dataclass
class CallRecorder:
    """The calls made while :func:`record_aws_calls` was active, oldest first."""

    calls: list[AwsCall] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add(self, call: AwsCall) -> None:
        with self._lock:
            self.calls.append(call)

    def of(self, principal: str | None) -> list[AwsCall]:
        with self._lock:
            return [c for c in self.calls if c.principal == principal]

    def principals(self) -> set[str]:
        with self._lock:
            return {c.principal for c in self.calls if c.principal is not None}


def _on_before_parameter_build(params: Any = None, model: Any = None, context: Any = None, **_: Any) -> None:
    if not _recorders or model is None:
        return None
    if isinstance(context, dict):
        if context.get(_RECORD_MARK):
            return None
        context[_RECORD_MARK] = True
    presigned = bool(isinstance(context, dict) and context.get("is_presign_request"))
    service = model.service_model.service_name
    kept = {k: v for k, v in (params or {}).items() if k != "Body"}
    call = AwsCall(
        principal=_current_function.get(),
        service=service,
        operation=model.name,
        params=kept,
        presigned=presigned,
        internal=service == "lambda" and _issued_by_moto(),
    )
    with _lock:
        recorders = list(_recorders)
    for recorder in recorders:
        recorder.add(call)
    if isinstance(context, dict):
        context[_RECORDED_CALL] = call
    return None


def _on_after_call(http_response: Any = None, parsed: Any = None, context: Any = None, **_: Any) -> None:
    """Note how AWS answered a recorded call (a 404 of a read tells IAM it needs s3:ListBucket, see devstack.iam)."""
    call = context.get(_RECORDED_CALL) if isinstance(context, dict) else None
    if call is None or call.outcome:
        return None
    call.outcome["status"] = int(getattr(http_response, "status_code", 0) or 0)
    error = (parsed or {}).get("Error", {}).get("Code") if isinstance(parsed, dict) else None
    if error:
        call.outcome["error"] = str(error)
    if call.service == "kms" and isinstance(parsed, dict) and parsed.get("KeyId"):
        call.outcome["keyArn"] = str(parsed["KeyId"])  # the key an alias named (IAM authorizes against the key)
    return None


@contextmanager
def record_aws_calls() -> Iterator[CallRecorder]:
    """Record every AWS call (and presigned URL) made while the block runs, with the function that made it."""
    recorder = CallRecorder()
    with _lock:
        _recorders.append(recorder)
    try:
        yield recorder
    finally:
        with _lock:
            _recorders.remove(recorder)


if ("before-call", _on_before_call) not in BUILTIN_HANDLERS:
    BUILTIN_HANDLERS.append(("before-call", _on_before_call))
if ("before-parameter-build", _on_before_parameter_build) not in BUILTIN_HANDLERS:
    BUILTIN_HANDLERS.append(("before-parameter-build", _on_before_parameter_build))
if ("after-call", _on_after_call) not in BUILTIN_HANDLERS:
    BUILTIN_HANDLERS.append(("after-call", _on_after_call))
