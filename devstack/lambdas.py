"""In-process Lambda: moto's Lambda ``Invoke`` dispatches the stack's functions to their handler files.

Step Functions on moto invokes Lambda through a boto3 ``lambda`` client against moto. Moto's own Lambda
backend would need a created function (and Docker) to run anything, so :func:`install` patches
``LambdaBackend.invoke`` (and the Docker-less ``LambdaSimpleBackend.invoke``): a function name or ARN
that names a registered function runs ``functions/<x>/app.py``'s handler right here, in the calling
thread, and answers exactly like AWS Lambda's ``Invoke``:

* success → the JSON-encoded return value;
* an exception → ``{"errorType": <class name>, "errorMessage": str(exc), "stackTrace": [...]}`` with
  ``X-Amz-Function-Error: Unhandled``, so Step Functions' Retry/Catch see ``errorType`` as the error name,
  as on AWS.

Any other function name falls through to moto unchanged. Handlers run in the process's environment
(see :meth:`devstack.template.Stack.environment`); function-specific variables are not swapped in per call
because executions run on moto's background threads.

Where the local stack's transport is installed (``packyard local``), an ``Invoke`` of a registered function is
answered by :func:`invoke_directly` before moto's Lambda API parses it (the same answer, fewer steps). And
``packyard local`` runs the handlers in its API process (:func:`run_tasks_with`): everything Lambda's ``Invoke``
decides (payload limits, concurrency, throttles, the duplicated runs of :mod:`devstack.faults`) is still decided here,
only the handler's run happens there. The in-process runtime of the tests (:func:`devstack.local_aws`) and
``packyard local --single-process`` run them here, in the calling thread.
"""

from __future__ import annotations

import importlib.util
import json
import re
import sys
import threading
import time
import traceback
import uuid
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any
from urllib.parse import unquote, urlsplit

from moto.awslambda.models import LambdaBackend
from moto.awslambda_simple.models import LambdaSimpleBackend

from devstack import counting, express, limits, moto_fixes, moto_speed, transport
from devstack.template import ROOT, FunctionSpec, Stack

_PATCHED_CLASSES: tuple[type, ...] = (LambdaBackend, LambdaSimpleBackend)

_lock = threading.RLock()
_import_lock = threading.Lock()
_originals: dict[type, Callable[..., Any]] = {}
_functions: dict[str, FunctionSpec] = {}
# Idle "containers" per function: one module instance serves one invocation at a time, as a Lambda execution
# environment does. Concurrent invocations get their own instance (AWS scales out the same way), because handler
# modules keep per-request state at module level (the Powertools resolver's current event).
_modules: dict[tuple[Path, str], list[ModuleType]] = {}
_invocations: list[Invocation] = []

TaskRunner = Callable[[str, Any], tuple[bytes, str | None]]
"""Runs function ``name``'s handler on an invocation's body elsewhere: its payload and its ``X-Amz-Function-Error``."""
_task_runner: TaskRunner | None = None
_undo_direct: list[Callable[[], None]] = []


@dataclass(frozen=True)
class Invocation:
    """One dispatched call, for tests to assert on (what ran, with what, and how it ended)."""

    function: str
    event: Any
    error_type: str | None
    result: Any = None


@dataclass
class LambdaContext:
    """The attributes of the Lambda runtime's context object that handlers and Powertools read."""

    function_name: str
    invoked_function_arn: str
    memory_limit_in_mb: int
    timeout_seconds: int
    function_version: str = "$LATEST"
    aws_request_id: str = field(default_factory=lambda: str(uuid.uuid4()))
    identity: Any = None
    client_context: Any = None
    _deadline: float = 0.0

    def __post_init__(self) -> None:
        self._deadline = time.monotonic() + self.timeout_seconds
        self.log_group_name = f"/aws/lambda/{self.function_name}"
        self.log_stream_name = f"local/[{self.function_version}]{self.aws_request_id.replace('-', '')}"

    def get_remaining_time_in_millis(self) -> int:
        return max(0, int((self._deadline - time.monotonic()) * 1000))


# ------------------------------------------------------------------ registry


def register(spec: FunctionSpec) -> None:
    """Make one function invocable by name and by ARN (used by :func:`install`, and by tests for fakes)."""
    with _lock:
        _functions[spec.name] = spec
        _functions[spec.arn] = spec


def install(stack: Stack | None = None, extra: Iterable[FunctionSpec] = ()) -> None:
    """Patch moto's Lambda backends (idempotent) and register the stack's functions plus ``extra`` ones. Also
    applies :mod:`devstack.moto_fixes` (flat memory, transactions without table copies): every local runtime
    installs the dispatcher, so every one gets them. And :mod:`devstack.limits` (AWS's payload, concurrency and
    history limits), for the same reason. And :mod:`devstack.moto_speed` (moto's costs that made the stack
    CPU-bound)."""
    moto_fixes.install()
    moto_speed.install()
    limits.install()
    _undo_direct.append(transport.answer_directly(invoke_directly))
    with _lock:
        for cls in _PATCHED_CLASSES:
            if cls not in _originals:
                _originals[cls] = cls.__dict__["invoke"]
                setattr(cls, "invoke", _make_invoke(cls))  # noqa: B010
        for spec in [*(stack.functions.values() if stack else ()), *extra]:
            register(spec)


def uninstall() -> None:
    """Restore moto's Lambda backends and forget functions, loaded handler modules and recorded invocations."""
    run_tasks_with(None)
    while _undo_direct:
        _undo_direct.pop()()
    with _lock:
        for cls, original in _originals.items():
            setattr(cls, "invoke", original)  # noqa: B010
        _originals.clear()
        _functions.clear()
        _modules.clear()
        _invocations.clear()
    limits.uninstall()
    moto_speed.uninstall()
    moto_fixes.uninstall()


@contextmanager
def dispatching(stack: Stack | None = None, extra: Iterable[FunctionSpec] = ()) -> Iterator[None]:
    install(stack, extra)
    try:
        yield
    finally:
        uninstall()


def invocations(function: str | None = None) -> list[Invocation]:
    """Calls dispatched since :func:`install` (or :func:`clear_invocations`), oldest first."""
    with _lock:
        return [i for i in _invocations if function is None or i.function == function]


def clear_invocations() -> None:
    with _lock:
        _invocations.clear()


# ------------------------------------------------------------------ dispatch

_ARN = re.compile(r"^arn:[^:]+:lambda:[^:]*:[^:]*:function:(?P<name>[^:]+)(?::(?P<qualifier>[^:]+))?$")
_PARTIAL_ARN = re.compile(r"^[0-9]{12}:function:(?P<name>[^:]+)(?::(?P<qualifier>[^:]+))?$")


def _lookup(function_name: str) -> FunctionSpec | None:
    with _lock:
        if function_name in _functions:
            return _functions[function_name]
        match = _ARN.match(function_name) or _PARTIAL_ARN.match(function_name)
        name = match.group("name") if match else function_name.split(":", 1)[0]
        return _functions.get(name)


def _header(headers: Any, name: str) -> str | None:
    if not headers:
        return None
    for key, value in dict(headers).items():
        if key.lower() == name.lower():
            return str(value)
    return None


def _make_invoke(cls: type) -> Callable[..., Any]:
    def invoke(
        self: Any, function_name: str, qualifier: str | None, body: Any, headers: Any, response_headers: Any
    ) -> str | bytes | None:
        spec = _lookup(function_name)
        if spec is None:
            answer: str | bytes | None = _originals[cls](
                self, function_name, qualifier, body, headers, response_headers
            )
            return answer
        return _invoke(spec, body, _header(headers, "X-Amz-Invocation-Type"), response_headers)

    invoke.__doc__ = f"devstack in-process dispatch over {cls.__name__}.invoke"
    return invoke


def _invoke(spec: FunctionSpec, body: Any, invocation_type: str | None, response_headers: Any) -> bytes:
    """Lambda's ``Invoke`` of ``spec``: its payload (``response_headers`` get ``x-amz-function-error`` if it failed).
    Refusals raise: :class:`devstack.limits.RequestEntityTooLarge`, :class:`devstack.limits.TooManyRequests`."""
    if invocation_type == "DryRun":
        return b""
    asynchronous = invocation_type == "Event"
    ceiling = limits.LAMBDA_ASYNC_REQUEST_BYTES if asynchronous else limits.LAMBDA_SYNC_REQUEST_BYTES
    size = len(body.encode("utf-8") if isinstance(body, str) else body or b"")
    if size > ceiling and limits.enforced("lambda_payload"):
        raise limits.RequestEntityTooLarge(ceiling)
    if asynchronous:
        # Async invoke: AWS queues it and answers 202 at once (a throttled event waits in Lambda's queue).
        threading.Thread(target=_run_counted, args=(spec, body), daemon=True).start()
        return b""
    with limits.invocation(spec.name, spec.reserved_concurrency):  # TooManyRequestsException past the ceiling
        payload = _run_task(spec, body, response_headers)
        for _ in range(express.task_runs(spec.name) - 1):  # devstack.faults.duplicate_task_runs: a task run twice
            response_headers.pop("x-amz-function-error", None)  # the second run's answer is the task's
            payload = _run_task(spec, body, response_headers)
    response_headers["Content-Length"] = str(len(payload))
    return payload


_INVOKE_PATH = re.compile(r"^/2015-03-31/functions/(?P<name>[^/]+)/invocations$")
_INVOKE_STATUS = {"Event": 202, "DryRun": 204}


def invoke_directly(request: Any) -> tuple[int, list[tuple[str, str]], bytes] | None:
    """Lambda's ``Invoke`` of a registered function, answered as moto's Lambda API answers it through
    :func:`_make_invoke` (status, headers, payload; Lambda's refusals as moto writes its errors), without moto
    parsing the request and routing it first: a sixteenth of the local stack's process under load
    (docs/decisions.md, "Local stack throughput, sixth pass"). None for any other request, which moto answers.
    Registered with :func:`devstack.transport.answer_directly` by :func:`install`."""
    if request.method != "POST":
        return None
    match = _INVOKE_PATH.match(urlsplit(request.url).path)
    spec = _lookup(unquote(match["name"])) if match else None
    if spec is None:
        return None
    raw = request.headers.get("X-Amz-Invocation-Type")  # botocore's headers: case-insensitive, values bytes
    invocation_type = raw.decode("latin-1") if isinstance(raw, bytes) else raw
    response_headers: dict[str, str] = {"x-amzn-requestid": str(uuid.uuid4())}
    try:
        payload = _invoke(spec, transport.body_of(request), invocation_type, response_headers)
    except (limits.RequestEntityTooLarge, limits.TooManyRequests) as refused:  # moto writes its JsonRESTError
        return transport.answer_of("POST", int(refused.code), refused.get_headers(), refused.get_body(), {})
    response_headers["content-type"] = "application/json"
    status = _INVOKE_STATUS.get(invocation_type or "", 200)
    return transport.answer_of("POST", status, response_headers, payload, response_headers)


def context_for(spec: FunctionSpec) -> LambdaContext:
    """A fresh context for one invocation of ``spec`` (new request id, deadline = now + Timeout)."""
    return LambdaContext(
        function_name=spec.name,
        invoked_function_arn=spec.arn,
        memory_limit_in_mb=spec.memory_size,
        timeout_seconds=spec.timeout,
    )


def invoke_handler(spec: FunctionSpec, event: Any) -> Any:
    """Call the function's handler directly (as API Gateway's Lambda proxy integration would) and return
    what it returns. Exceptions propagate to the caller, after being recorded in :func:`invocations`.
    Needs no moto patch: the local HTTP API uses it; Step Functions goes through :func:`install`.

    Lambda's limits apply (:mod:`devstack.limits`): an event over 6,291,456 bytes, a call above the function's
    reserved concurrency or a response over 6,291,556 bytes raise :class:`devstack.limits.LambdaLimitError` (the
    integration fails: the local server answers API Gateway's 500).
    """
    enforce_payload = limits.enforced("lambda_payload")
    if enforce_payload and len(json.dumps(event).encode("utf-8")) > limits.LAMBDA_SYNC_REQUEST_BYTES:
        _record(Invocation(spec.name, event, "RequestEntityTooLargeException"))
        raise limits.LambdaLimitError(
            "RequestEntityTooLargeException", f"Request must be smaller than {limits.LAMBDA_SYNC_REQUEST_BYTES} bytes"
        )
    try:
        with limits.invocation(spec.name, spec.reserved_concurrency), _container(spec) as handler:
            result = handler(event, context_for(spec))
    except limits.TooManyRequests as exc:
        _record(Invocation(spec.name, event, "TooManyRequestsException"))
        raise limits.LambdaLimitError("TooManyRequestsException", exc.message) from None
    except Exception as exc:
        _record(Invocation(spec.name, event, type(exc).__name__))
        raise
    if enforce_payload:
        size = len(json.dumps(result).encode("utf-8"))
        if size > limits.LAMBDA_SYNC_RESPONSE_BYTES:
            error_type, message = limits.response_too_large(size)
            _record(Invocation(spec.name, event, error_type))
            raise limits.LambdaLimitError(error_type, message)
    _record(Invocation(spec.name, event, None, result))
    return result


def _run_counted(spec: FunctionSpec, body: Any) -> bytes:
    """An async invocation: counted in the function's concurrency while it runs (never throttled here: AWS keeps a
    throttled event in its queue and retries it)."""
    with limits.invocation(spec.name, None):
        return _run_task(spec, body, {})


def run_tasks_with(runner: TaskRunner | None) -> None:
    """Run the handlers of the invocations Lambda's ``Invoke`` dispatches (Step Functions' tasks, events' targets)
    with ``runner``, in another process (:mod:`devstack.api_process`, whose :func:`answer_task` runs them); None: in
    this one. Invoke's own rules stay here: payload limits of the request, concurrency and its throttles, the
    duplicated runs of :mod:`devstack.faults`."""
    global _task_runner
    _task_runner = runner


def answer_task(name: str, body: Any) -> tuple[bytes, str | None]:
    """Run function ``name``'s handler on an invocation's ``body`` here, for the process that dispatched it: the
    payload Invoke answers and its ``X-Amz-Function-Error`` (None when the handler returned)."""
    spec = _lookup(name)
    if spec is None:
        raise LookupError(f"no function {name!r} is registered in this process")
    response_headers: dict[str, str] = {}
    payload = _run(spec, body, response_headers)
    return payload, response_headers.get("x-amz-function-error")


def _run_task(spec: FunctionSpec, body: Any, response_headers: Any) -> bytes:
    runner = _task_runner
    if runner is None:
        return _run(spec, body, response_headers)
    payload, function_error = runner(spec.name, body)
    if function_error is not None:
        response_headers["x-amz-function-error"] = function_error
    return payload


def _run(spec: FunctionSpec, body: Any, response_headers: Any) -> bytes:
    raw = body.decode("utf-8") if isinstance(body, bytes) else body
    event = json.loads(raw) if raw else {}
    try:
        with _container(spec) as handler:
            result = handler(event, context_for(spec))
    except Exception as exc:
        _record(Invocation(spec.name, event, type(exc).__name__))
        response_headers["x-amz-function-error"] = "Unhandled"
        # The trace starts at the handler, as on AWS (this dispatcher's frame is not part of it).
        trace = exc.__traceback__.tb_next if exc.__traceback__ else None
        return _error_payload(type(exc).__name__, str(exc), traceback.format_tb(trace))
    try:
        payload = json.dumps(result).encode("utf-8")
    except (TypeError, ValueError) as exc:
        _record(Invocation(spec.name, event, "Runtime.MarshalError"))
        response_headers["x-amz-function-error"] = "Unhandled"
        return _error_payload("Runtime.MarshalError", f"Unable to marshal response: {exc}", [])
    if len(payload) > limits.LAMBDA_SYNC_RESPONSE_BYTES and limits.enforced("lambda_payload"):
        error_type, message = limits.response_too_large(len(payload))
        _record(Invocation(spec.name, event, error_type))
        response_headers["x-amz-function-error"] = "Unhandled"
        return _error_payload(error_type, message, [])
    _record(Invocation(spec.name, event, None, result))
    return payload


def _error_payload(error_type: str, message: str, stack_trace: list[str]) -> bytes:
    return json.dumps({"errorType": error_type, "errorMessage": message, "stackTrace": stack_trace}).encode("utf-8")


def _record(invocation: Invocation) -> None:
    with _lock:
        _invocations.append(invocation)


@contextmanager
def _container(spec: FunctionSpec) -> Iterator[Callable[[Any, Any], Any]]:
    """An idle instance of ``<code_uri>/<module>.py`` (imported by path under a unique module name), held for one
    invocation; a new one is imported when all are busy."""
    module_path, _, attribute = spec.handler.rpartition(".")
    if not module_path:
        raise ValueError(f"{spec.logical_id}: handler {spec.handler!r} is not <module>.<function>")
    key = (spec.code_uri, module_path)
    with _lock:
        idle = _modules.setdefault(key, [])
        module = idle.pop() if idle else None
    if module is None:
        with _import_lock:
            module = _import_by_path(spec, module_path)
    try:
        with counting.invoking(spec.logical_id):  # AWS calls made by the handler are attributed to its function
            yield getattr(module, attribute)
    finally:
        with _lock:
            _modules.setdefault(key, []).append(module)


def _import_by_path(spec: FunctionSpec, module_path: str) -> ModuleType:
    file = spec.code_uri / (module_path.replace(".", "/") + ".py")
    if not file.is_file():
        raise FileNotFoundError(f"{spec.logical_id}: handler file {file} does not exist")
    safe = re.sub(r"\W", "_", f"{spec.logical_id}_{module_path}")
    return load_module(file, f"_devstack_fn_{safe}_{uuid.uuid4().hex[:8]}")


def load_module(file: Path, name: str) -> ModuleType:
    """Import a handler file by path under ``name``, with ``shared/`` (the layer, /opt/python on AWS) importable."""
    shared = str(ROOT / "shared")
    if shared not in sys.path:
        sys.path.insert(0, shared)
    module_spec = importlib.util.spec_from_file_location(name, file)
    if module_spec is None or module_spec.loader is None:
        raise ImportError(f"cannot import {file}")
    module = importlib.util.module_from_spec(module_spec)
    sys.modules[name] = module
    try:
        module_spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(name, None)
        raise
    return module
