"""AWS limits moto does not enforce (or enforces loosely), enforced by the local runtime with AWS's own numbers and
error names. Each is on by default (every test and the local stack run under it); :func:`relaxed` switches named
ones off inside a block, for a test that needs it.

===========================  =========================================================  ==============================
limit                        AWS's number and error                                     enforced here
===========================  =========================================================  ==============================
``lambda_payload``           Invoke request 6,291,456 bytes (sync), 1 MB (async, since   :mod:`devstack.lambdas` Invoke
                             2025; 256 KB before): ``RequestEntityTooLargeException``   and ``invoke_handler``
                             (413); sync response 6,291,556 bytes: function error
                             ``Function.ResponseSizeTooLarge``
``concurrency``              a function's ``ReservedConcurrentExecutions`` is its       :mod:`devstack.lambdas` Invoke
                             ceiling: ``TooManyRequestsException`` (429, Reason          and ``invoke_handler``
                             ``ReservedFunctionConcurrentInvocationLimitExceeded``);
                             a Step Functions Task sees ``Lambda.TooManyRequestsException``
``sfn_payload``              262,144 bytes of UTF-8 for a task's or state's input or     moto's parser (its own check,
                             output: ``States.DataLimitExceeded``                       made ``<=`` and switchable)
``sfn_history``              25,000 events per Standard execution; event 25,000 that     moto's event manager (patched)
                             is not ``ExecutionSucceeded`` fails the execution
===========================  =========================================================  ==============================

Sources (docs/decisions.md, "AWS limits the local runtime enforces"): the Lambda quotas page and the Invoke API
reference, the Step Functions quotas page and "Avoid reaching the history quota".

The history limit's failure: AWS documents that the execution fails (an ``ExecutionFailed`` event) but names no error;
the local runtime fails it with ``States.Runtime`` and a cause naming the limit, and no Retry or Catch sees it (it is
the execution that fails, not a state).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, fields
from typing import Any

from moto.core.exceptions import JsonRESTError

LAMBDA_SYNC_REQUEST_BYTES = 6 * 1024 * 1024  # 6,291,456: "Request must be smaller than 6291456 bytes"
LAMBDA_SYNC_RESPONSE_BYTES = 6 * 1024 * 1024 + 100  # 6,291,556: "exceeded maximum allowed payload size (6291556 bytes)"
LAMBDA_ASYNC_REQUEST_BYTES = 1024 * 1024  # 1 MB since the 2025 raise (was 256 KB)
SFN_PAYLOAD_BYTES = 262_144  # "262,144 bytes of data as a UTF-8 encoded string"
SFN_HISTORY_EVENTS = 25_000  # "Maximum execution history size: 25,000 events"


@dataclass
class Limits:
    """Which limits are enforced (all, by default)."""

    lambda_payload: bool = True
    concurrency: bool = True
    sfn_payload: bool = True
    sfn_history: bool = True


_lock = threading.RLock()
_enforced = Limits()
NAMES = tuple(f.name for f in fields(Limits))


def enforced(name: str) -> bool:
    # read without the lock: an attribute read is atomic, and a flag being switched is read before or after
    return bool(getattr(_enforced, name))


@contextmanager
def relaxed(*names: str) -> Iterator[None]:
    """Inside the block, the named limits (all of them if none is named) are not enforced."""
    unknown = set(names) - set(NAMES)
    if unknown:
        raise ValueError(f"no such limit: {sorted(unknown)} (limits: {NAMES})")
    with _lock:
        saved = {name: getattr(_enforced, name) for name in NAMES}
        for name in names or NAMES:
            setattr(_enforced, name, False)
    try:
        yield
    finally:
        with _lock:
            for name, value in saved.items():
                setattr(_enforced, name, value)


# ------------------------------------------------------------------ Lambda errors, as Lambda's Invoke answers them


class RequestEntityTooLarge(JsonRESTError):
    """Lambda's 413 for an Invoke payload over its limit."""

    code = 413

    def __init__(self, limit: int) -> None:
        message = f"Request must be smaller than {limit} bytes for the InvokeFunction operation"
        super().__init__("RequestEntityTooLargeException", message)


class TooManyRequests(JsonRESTError):
    """Lambda's 429 when a function's reserved concurrency is in use."""

    code = 429
    REASON = "ReservedFunctionConcurrentInvocationLimitExceeded"

    def __init__(self, function: str) -> None:
        super().__init__("TooManyRequestsException", "Rate Exceeded.")
        self.description = json.dumps(
            {"__type": self.error_type, "message": self.message, "Reason": self.REASON, "Type": "User"}
        )
        self.function = function


class LambdaLimitError(Exception):
    """A limit reached on the direct path (API Gateway → Lambda, :func:`devstack.lambdas.invoke_handler`): the
    integration fails, which API Gateway answers ``500 {"message": "Internal Server Error"}``."""

    def __init__(self, error_type: str, message: str) -> None:
        super().__init__(f"{error_type}: {message}")
        self.error_type = error_type


def response_too_large(size: int) -> tuple[str, str]:
    limit = LAMBDA_SYNC_RESPONSE_BYTES
    message = f"Response payload size ({size} bytes) exceeded maximum allowed payload size ({limit} bytes)."
    return "Function.ResponseSizeTooLarge", message


# ------------------------------------------------------------------ reserved concurrency


@dataclass
class Concurrency:
    """Invocations in flight per function, and slots held by tests (:func:`occupied`) as other callers would."""

    in_flight: dict[str, int] = field(default_factory=dict)
    held: dict[str, int] = field(default_factory=dict)
    throttled: dict[str, int] = field(default_factory=dict)


_concurrency = Concurrency()


@contextmanager
def invocation(function: str, reserved: int | None) -> Iterator[None]:
    """Count one invocation of ``function`` while the block runs; raise :class:`TooManyRequests` when its reserved
    concurrency (None: unreserved, no ceiling here) is all in use."""
    with _lock:
        busy = _concurrency.in_flight.get(function, 0) + _concurrency.held.get(function, 0)
        if reserved is not None and enforced("concurrency") and busy >= reserved:
            _concurrency.throttled[function] = _concurrency.throttled.get(function, 0) + 1
            raise TooManyRequests(function)
        _concurrency.in_flight[function] = _concurrency.in_flight.get(function, 0) + 1
    try:
        yield
    finally:
        with _lock:
            _concurrency.in_flight[function] -= 1


@dataclass
class Occupation:
    """Slots of ``function`` held as if other invocations ran; :meth:`release` frees them (the throttle clears)."""

    function: str
    slots: int
    released: bool = False

    def release(self) -> None:
        with _lock:
            if not self.released:
                _concurrency.held[self.function] = _concurrency.held.get(self.function, 0) - self.slots
                self.released = True


@contextmanager
def occupied(function: str, slots: int) -> Iterator[Occupation]:
    """Hold ``slots`` of ``function``'s concurrency inside the block (released at its end at the latest)."""
    with _lock:
        _concurrency.held[function] = _concurrency.held.get(function, 0) + slots
    occupation = Occupation(function, slots)
    try:
        yield occupation
    finally:
        occupation.release()


def in_flight(function: str) -> int:
    """Invocations of ``function`` running now (an asynchronous one runs after its 202)."""
    with _lock:
        return _concurrency.in_flight.get(function, 0)


def throttles(function: str) -> int:
    """How many invocations of ``function`` were throttled since :func:`reset`."""
    with _lock:
        return _concurrency.throttled.get(function, 0)


def reset() -> None:
    with _lock:
        _concurrency.in_flight.clear()
        _concurrency.held.clear()
        _concurrency.throttled.clear()


# ------------------------------------------------------------------ Step Functions (moto's parser)

_installed = False
_saved: dict[tuple[Any, str], Any] = {}


def _within_payload_quota(value: Any) -> bool:
    if not enforced("sfn_payload"):
        return True
    from moto.stepfunctions.parser.asl.utils.encoding import to_json_str

    # the value as Step Functions holds it: compact JSON (a string counts its quotes; moto counted a str without them)
    text = to_json_str(value, separators=(",", ":"))
    return len(text.encode("utf-8")) <= SFN_PAYLOAD_BYTES


TERMINAL_EVENTS = frozenset({"ExecutionSucceeded", "ExecutionFailed", "ExecutionAborted", "ExecutionTimedOut"})
HISTORY_ERROR = "States.Runtime"


def history_cause() -> str:
    return f"The execution reached the maximum number of history events ({SFN_HISTORY_EVENTS})."


def _patch(owner: Any, name: str, value: Any) -> None:
    _saved.setdefault((owner, name), owner.__dict__[name] if isinstance(owner, type) else getattr(owner, name))
    setattr(owner, name, value)


def install() -> None:
    """Patch moto's Step Functions parser: the payload check (``<=`` 262,144 bytes, switchable), the history limit,
    and a Lambda Task's error name for an Invoke that Lambda refused (``Lambda.<code>``, as AWS names it).
    Idempotent."""
    global _installed
    with _lock:
        if _installed:
            return
        from botocore.exceptions import ClientError
        from moto.stepfunctions.parser.api import ExecutionFailedEventDetails
        from moto.stepfunctions.parser.asl.component.common.error_name import custom_error_name
        from moto.stepfunctions.parser.asl.component.common.error_name.failure_event import FailureEvent
        from moto.stepfunctions.parser.asl.component.state import state
        from moto.stepfunctions.parser.asl.component.state.exec.state_task import state_task_lambda
        from moto.stepfunctions.parser.asl.component.state.exec.state_task.service import state_task_service
        from moto.stepfunctions.parser.asl.eval import environment
        from moto.stepfunctions.parser.asl.eval.event.event_manager import EventManager

        for module in (state, state_task_lambda, state_task_service):
            _patch(module, "is_within_size_quota", _within_payload_quota)

        task_cls = state_task_lambda.StateTaskLambda
        original_from_error = task_cls.__dict__["_from_error"]

        def _from_error(self: Any, env: Any, ex: Exception) -> FailureEvent:
            event: FailureEvent = original_from_error(self, env, ex)
            if isinstance(ex, ClientError):
                # AWS: "Lambda.TooManyRequestsException", "Lambda.ServiceException", … (moto says "Exception")
                name = f"Lambda.{ex.response['Error']['Code']}"
                details: dict[str, Any] = dict(event.event_details or {})
                failed = details.get("lambdaFunctionFailedEventDetails")
                if failed is not None:
                    failed["error"] = name
                return FailureEvent(env, custom_error_name.CustomErrorName(name), event.event_type, details)  # type: ignore[arg-type]
            return event

        _patch(task_cls, "_from_error", _from_error)

        env_cls = environment.Environment
        original_init = env_cls.__dict__["__init__"]

        def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
            original_init(self, *args, **kwargs)
            manager = getattr(self, "event_manager", None)
            if manager is not None and getattr(manager, "_devstack_env", None) is None:
                manager._devstack_env = self  # the root environment (frames share its manager)

        _patch(env_cls, "__init__", __init__)

        original_set_error = env_cls.__dict__["set_error"]

        def set_error(self: Any, error: Any) -> None:
            # the history limit's failure is the execution's last word: what the state that was running when it was
            # reached does afterwards (its events are no longer recorded) does not replace it
            if getattr(self, "_devstack_history_failed", False):
                return
            original_set_error(self, error)

        _patch(env_cls, "set_error", set_error)

        original_add_event = EventManager.__dict__["add_event"]

        def add_event(self: Any, context: Any, event_type: Any, *args: Any, **kwargs: Any) -> int:
            kind = str(getattr(event_type, "value", event_type))
            if enforced("sfn_history") and kind not in TERMINAL_EVENTS:
                with self._mutex:
                    recorded = len(self._history_event_list)
                if recorded >= SFN_HISTORY_EVENTS - 1:
                    env = getattr(self, "_devstack_env", None)
                    if env is not None and env.is_running():
                        env.set_error(ExecutionFailedEventDetails(error=HISTORY_ERROR, cause=history_cause()))
                        env._devstack_history_failed = True
                    return recorded  # not recorded: the next event is the execution's last
            answer: int = original_add_event(self, context, event_type, *args, **kwargs)
            return answer

        _patch(EventManager, "add_event", add_event)
        _installed = True


def uninstall() -> None:
    global _installed
    with _lock:
        for (owner, name), value in _saved.items():
            setattr(owner, name, value)
        _saved.clear()
        _installed = False
        reset()
