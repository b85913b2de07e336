"""Step Functions Express semantics for the local runtime: what AWS does and moto does not.

Moto creates a ``Type: EXPRESS`` state machine and runs it exactly like a Standard one: it deduplicates executions by
name, describes them and keeps their history. AWS does none of that for Express workflows, and Packyard's workflows
are Express, so the local runtime must not either, or the tests would lean on guarantees production lacks:

- **No name deduplication.** Every ``StartExecution`` of an Express machine starts a new run, whatever its name; its
  ARN is ``arn:<partition>:states:<region>:<account>:express:<machine>:<name>:<uuid>`` (AWS's format).
- **No execution API.** ``DescribeExecution`` and ``GetExecutionHistory`` of an Express run answer ``InvalidArn``
  ("Resource type not valid in this context: express"), ``ListExecutions`` of an Express machine answers
  ``StateMachineTypeNotSupported``: the history of a run goes to CloudWatch Logs only.
- **StartSyncExecution** (Express only; moto does not route it): starts a run and answers when it has stopped, with
  its status and output — how a caller waits for an Express run's result without an execution API. A Standard
  machine answers ``StateMachineTypeNotSupported``. A client of a local endpoint sets
  ``Config(inject_host_prefix=False)`` (botocore sends the call to ``sync-states.…``; in-process, that host is routed).
- **Five minutes at most.** A run still going after :data:`LIMIT_SECONDS` is stopped, ``TIMED_OUT`` (a task already
  running finishes, as a Lambda invoked by AWS does; nothing after it runs).

Sources: the Step Functions developer guide, "Choosing workflow type" (Express: at-least-once, 5 minutes, no execution
history through the API) and the DescribeExecution / GetExecutionHistory / ListExecutions API references ("not
supported by EXPRESS state machines"); the error codes are the ones LocalStack's provider (snapshot-tested against
AWS) raises.

Duplicates on purpose (Express runs at least once): :func:`duplicate_executions` starts every Express run twice and
:func:`duplicate_task_runs` runs every Lambda task a state machine invokes twice, so crash tests see what AWS may do.

The harness (tests, benchmarks) may still look at runs: :func:`runs` and :func:`wait` read moto's backend directly,
as one reads CloudWatch Logs on AWS; the code under test only ever has the API.
"""

from __future__ import annotations

import copy
import datetime
import heapq
import itertools
import re
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

LIMIT_SECONDS = 300.0
"""The longest an Express execution runs (AWS: five minutes)."""

EXPRESS = "EXPRESS"
TERMINAL = frozenset({"SUCCEEDED", "FAILED", "TIMED_OUT", "ABORTED"})

_lock = threading.Lock()
_limit = LIMIT_SECONDS
_originals: dict[str, Callable[..., Any]] = {}
_original_reflect: Callable[..., Any] | None = None


# ------------------------------------------------------------------ duplicates on purpose


@dataclass
class Duplication:
    """What a duplicating block duplicated: runs (machine name → count) or task runs (function → count)."""

    functions: frozenset[str] | None = None
    counts: Counter[str] = field(default_factory=Counter)

    def applies_to(self, name: str) -> bool:
        return self.functions is None or name in self.functions

    @property
    def total(self) -> int:
        return sum(self.counts.values())


_duplicate_runs: Duplication | None = None
_duplicate_tasks: Duplication | None = None


@contextmanager
def duplicate_executions() -> Iterator[Duplication]:
    """While active, every StartExecution of an Express machine starts a second, identical run right after the first
    (the caller gets the first's ARN), as Express's at-least-once delivery may."""
    global _duplicate_runs
    plan = Duplication()
    with _lock:
        _duplicate_runs = plan
    try:
        yield plan
    finally:
        with _lock:
            _duplicate_runs = None


@contextmanager
def duplicate_task_runs(functions: set[str] | None = None) -> Iterator[Duplication]:
    """While active, every Lambda task a state machine invokes (of ``functions``, default all) runs its handler twice;
    the second run's answer is the task's result."""
    global _duplicate_tasks
    plan = Duplication(functions=frozenset(functions) if functions is not None else None)
    with _lock:
        _duplicate_tasks = plan
    try:
        yield plan
    finally:
        with _lock:
            _duplicate_tasks = None


def task_runs(function: str) -> int:
    """How many times the dispatcher runs one task invocation of ``function`` (2 inside duplicate_task_runs)."""
    with _lock:
        plan = _duplicate_tasks
        if plan is None or not plan.applies_to(function):
            return 1
        plan.counts[function] += 1
        return 2


@contextmanager
def limit(seconds: float) -> Iterator[None]:
    """Runs started inside the block are stopped after ``seconds`` instead of five minutes (a test of the limit)."""
    global _limit
    with _lock:
        previous, _limit = _limit, seconds
    try:
        yield
    finally:
        with _lock:
            _limit = previous


# ------------------------------------------------------------------ the time limit


class _Reaper:
    """One thread that stops runs past their deadline (a heap of deadlines; no thread per run)."""

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, Any]] = []
        self._counter = itertools.count()
        self._wake = threading.Condition()
        self._thread: threading.Thread | None = None

    def watch(self, execution: Any, seconds: float) -> None:
        with self._wake:
            heapq.heappush(self._heap, (time.monotonic() + seconds, next(self._counter), execution))
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="express-time-limit", daemon=True)
                self._thread.start()
            self._wake.notify()

    def forget(self) -> None:
        with self._wake:
            self._heap.clear()
            self._wake.notify()

    def _run(self) -> None:
        while True:
            with self._wake:
                while not self._heap:
                    self._wake.wait()
                deadline, _, execution = self._heap[0]
                left = deadline - time.monotonic()
                if left > 0:
                    self._wake.wait(timeout=left)
                    continue
                heapq.heappop(self._heap)
            _time_out(execution)


_reaper = _Reaper()


def _time_out(execution: Any) -> None:
    if _status(execution) != "RUNNING":
        return
    from moto.stepfunctions.parser.api import ExecutionStatus

    execution.express_timed_out = True
    now = datetime.datetime.now(tz=datetime.UTC)
    execution.stop(
        stop_date=now, error="States.Timeout", cause="the execution ran longer than the Express limit (5 minutes)"
    )
    # timed out now, as on AWS, even while the task it stopped in is still running (its worker reflects it later)
    execution.exec_status, execution.stop_date = ExecutionStatus.TIMED_OUT, now


# ------------------------------------------------------------------ the patched backend


def _express_arn(machine: Any, name: str) -> str:
    prefix, _, _ = str(machine.arn).partition(":stateMachine:")
    return f"{prefix}:express:{machine.name}:{name}:{uuid.uuid4()}"


def _start_run(backend: Any, machine: Any, name: str, execution_input: Any, trace_header: Any) -> Any:
    """A new run of an Express machine, never deduplicated (moto's start_execution, without its name check)."""
    import json

    from moto.stepfunctions.parser.api import StateMachineType
    from moto.stepfunctions.parser.backend.execution import Execution

    clone = copy.deepcopy(machine, {id(machine.executions): [], id(machine.backend): machine.backend})
    input_data = "{}" if execution_input is None else execution_input
    json.loads(input_data)  # moto raises InvalidExecutionInput the same way; the caller's path validated it already
    execution = Execution(
        name=name,
        sm_type=StateMachineType.EXPRESS,
        role_arn=clone.roleArn,
        exec_arn=_express_arn(machine, name),
        account_id=backend.account_id,
        region_name=backend.region_name,
        state_machine=clone,
        start_date=datetime.datetime.now(tz=datetime.UTC),
        cloud_watch_logging_session=None,
        input_data=input_data,
        trace_header=trace_header,
        activity_store={},
    )
    machine.executions.append(execution)
    execution.start()
    with _lock:
        seconds = _limit
    _reaper.watch(execution, seconds)
    return execution


def _is_express(machine: Any) -> bool:
    # moto keeps the CreateStateMachine ``type`` as ``type`` (its ``sm_type`` is always STANDARD)
    return str(getattr(machine, "type", "")).upper() == EXPRESS


def is_express_arn(arn: str) -> bool:
    return arn.split(":")[5:6] == ["express"]


def _invalid_express_arn() -> Exception:
    from moto.stepfunctions.exceptions import InvalidArn

    return InvalidArn("Invalid Arn: 'Resource type not valid in this context: express'")


def _type_not_supported(machine_type: str = EXPRESS) -> Exception:
    from moto.core.exceptions import AWSError

    class _TypeNotSupported(AWSError):
        TYPE = "StateMachineTypeNotSupported"
        STATUS = 400

    return _TypeNotSupported(f"This operation is not supported by this type of state machine: {machine_type}")


def install() -> None:
    """Give Express machines Express semantics in moto's executing backend (idempotent)."""
    global _original_reflect
    from moto.stepfunctions.parser.backend.execution import BaseExecutionWorkerCommunication
    from moto.stepfunctions.parser.models import StepFunctionsParserBackend
    from moto.stepfunctions.responses import StepFunctionResponse as StateMachineResponses

    with _lock:
        if _originals:
            return
        for method in ("start_execution", "describe_execution", "list_executions", "stop_execution"):
            _originals[method] = StepFunctionsParserBackend.__dict__.get(method) or getattr(
                StepFunctionsParserBackend, method
            )
        _original_reflect = BaseExecutionWorkerCommunication.__dict__["_reflect_execution_status"]

    original_start = _originals["start_execution"]
    original_describe = _originals["describe_execution"]
    original_list = _originals["list_executions"]
    original_stop = _originals["stop_execution"]
    original_reflect = _original_reflect

    def start_execution(
        self: Any, state_machine_arn: str, name: Any = None, execution_input: Any = None, trace_header: Any = None
    ) -> Any:
        machine = self.describe_state_machine(state_machine_arn)
        if not _is_express(machine):
            return original_start(self, state_machine_arn, name, execution_input, trace_header)
        run_name = name or str(uuid.uuid4())
        first = _start_run(self, machine, run_name, execution_input, trace_header)
        with _lock:
            plan = _duplicate_runs
            if plan is not None:
                plan.counts[str(machine.name)] += 1
        if plan is not None:
            _start_run(self, machine, run_name, execution_input, trace_header)
        return first

    def describe_execution(self: Any, execution_arn: str) -> Any:
        if is_express_arn(execution_arn):
            raise _invalid_express_arn()
        return original_describe(self, execution_arn)

    def list_executions(self: Any, state_machine_arn: str, *args: Any, **kwargs: Any) -> Any:
        if _is_express(self.describe_state_machine(state_machine_arn)):
            raise _type_not_supported()
        return original_list(self, state_machine_arn, *args, **kwargs)

    def stop_execution(self: Any, execution_arn: str) -> Any:
        if is_express_arn(execution_arn):
            raise _invalid_express_arn()
        return original_stop(self, execution_arn)

    def reflect_execution_status(self: Any) -> None:
        original_reflect(self)
        if getattr(self.execution, "express_timed_out", False):
            from moto.stepfunctions.parser.api import ExecutionStatus

            self.execution.exec_status = ExecutionStatus.TIMED_OUT

    setattr(StateMachineResponses, "start_sync_execution", _start_sync_execution)  # noqa: B010
    _sync_endpoint(add=True)
    setattr(StepFunctionsParserBackend, "start_execution", start_execution)  # noqa: B010
    setattr(StepFunctionsParserBackend, "describe_execution", describe_execution)  # noqa: B010
    setattr(StepFunctionsParserBackend, "list_executions", list_executions)  # noqa: B010
    setattr(StepFunctionsParserBackend, "stop_execution", stop_execution)  # noqa: B010
    setattr(BaseExecutionWorkerCommunication, "_reflect_execution_status", reflect_execution_status)  # noqa: B010


def uninstall() -> None:
    """Undo :func:`install` and stop every Express run still going (they must not call handlers of a later test)."""
    global _original_reflect
    from moto.stepfunctions.parser.backend.execution import BaseExecutionWorkerCommunication
    from moto.stepfunctions.parser.models import StepFunctionsParserBackend
    from moto.stepfunctions.responses import StepFunctionResponse as StateMachineResponses

    stop_all()
    with _lock:
        for method, original in _originals.items():
            setattr(StepFunctionsParserBackend, method, original)
        _originals.clear()
        if "start_sync_execution" in StateMachineResponses.__dict__:
            delattr(StateMachineResponses, "start_sync_execution")
        _sync_endpoint(add=False)
        if _original_reflect is not None:
            setattr(BaseExecutionWorkerCommunication, "_reflect_execution_status", _original_reflect)  # noqa: B010
            _original_reflect = None
    _reaper.forget()


# ------------------------------------------------------------------ StartSyncExecution

# botocore sends StartSyncExecution to ``sync-states.<region>.amazonaws.com`` (the operation's host prefix); moto routes
# only ``states.…``. A client of a local endpoint turns the prefix off (``Config(inject_host_prefix=False)``).
_SYNC_HOST = ("stepfunctions", re.compile(r"https?://sync-states\.(.+)\.amazonaws\.com"))


_SYNC_BASE = r"https?://sync-states\.(.+)\.amazonaws.com"


def _sync_endpoint(*, add: bool) -> None:
    """Route the sync host in-process: the service's URL index, and its URL bases (where its paths are matched)."""
    from moto import backend_index
    from moto.stepfunctions import urls

    patterns, bases = backend_index.backend_url_patterns, urls.url_bases
    if add:
        if _SYNC_HOST not in patterns:
            patterns.append(_SYNC_HOST)
        if _SYNC_BASE not in bases:
            bases.append(_SYNC_BASE)
    else:
        if _SYNC_HOST in patterns:
            patterns.remove(_SYNC_HOST)
        if _SYNC_BASE in bases:
            bases.remove(_SYNC_BASE)


def _start_sync_execution(self: Any) -> Any:
    """StartSyncExecution (Express only, as on AWS): start a run and answer when it has stopped, with its status,
    output or error. Moto has none (its parser provider does, its HTTP layer does not route it)."""
    from moto.core.responses import ActionResult

    arn = self._get_param("stateMachineArn")
    machine = self.stepfunction_backend.describe_state_machine(arn)
    if not _is_express(machine):
        raise _type_not_supported(str(getattr(machine, "type", "STANDARD")))
    execution = self.stepfunction_backend.start_execution(
        arn, self._get_param("name"), self._get_param("input", if_none="{}")
    )
    while _status(execution) not in TERMINAL:
        time.sleep(0.005)  # the run's own threads move it; bounded by the Express time limit
    return ActionResult({**_run_of(machine, execution).description(), "stateMachineArn": machine.arn})


# ------------------------------------------------------------------ the harness's view


@dataclass(frozen=True)
class ExpressRun:
    """One run of an Express machine, as the harness sees it (CloudWatch Logs on AWS)."""

    arn: str
    machine: str
    name: str
    status: str
    input: Any
    output: Any
    error: str | None
    cause: str | None
    started: datetime.datetime | None
    stopped: datetime.datetime | None
    transitions: int

    def description(self) -> dict[str, Any]:
        """The run in DescribeExecution's shape (for harness code written against Standard)."""
        import json

        described: dict[str, Any] = {
            "executionArn": self.arn,
            "name": self.name,
            "status": self.status,
            "input": json.dumps(self.input),
            "startDate": self.started,
        }
        if self.output is not None:
            described["output"] = self.output if isinstance(self.output, str) else json.dumps(self.output)
        if self.error is not None:
            described["error"] = self.error
        if self.cause is not None:
            described["cause"] = self.cause
        if self.stopped is not None:
            described["stopDate"] = self.stopped
        return described


def _status(execution: Any) -> str:
    status = getattr(execution, "exec_status", None)
    return str(getattr(status, "value", status) or "RUNNING")


def _transitions(execution: Any) -> int:
    env = getattr(getattr(execution, "exec_worker", None), "env", None)
    history = getattr(getattr(env, "event_manager", None), "_history_event_list", None) or []
    return sum(1 for event in history if str(event.get("type", "")).endswith("StateEntered"))


def _machines() -> Iterator[Any]:
    """Every state machine of moto's executing backend, in every account and region."""
    from moto.stepfunctions.parser.models import stepfunctions_parser_backends

    for account in list(stepfunctions_parser_backends.values()):
        for backend in list(account.values()):
            yield from list(getattr(backend, "state_machines", []))


def _express_executions() -> Iterator[tuple[Any, Any]]:
    for machine in _machines():
        if _is_express(machine):
            for execution in list(machine.executions):
                yield machine, execution


def _run_of(owner: Any, execution: Any) -> ExpressRun:
    return ExpressRun(
        arn=execution.exec_arn,
        machine=str(owner.name),
        name=str(execution.name),
        status=_status(execution),
        input=execution.input_data,
        output=execution.output,
        error=execution.error,
        cause=execution.cause,
        started=execution.start_date,
        stopped=execution.stop_date,
        transitions=_transitions(execution),
    )


def runs(machine: str | None = None, name: str | None = None) -> list[ExpressRun]:
    """Every Express run (of ``machine``: an ARN or a name; named ``name``), oldest first."""
    found: list[ExpressRun] = []
    for owner, execution in _express_executions():
        if machine is not None and machine not in (owner.arn, owner.name):
            continue
        if name is not None and execution.name != name:
            continue
        found.append(_run_of(owner, execution))
    found.sort(key=lambda run: run.started or datetime.datetime.min.replace(tzinfo=datetime.UTC))
    return found


def history(arn: str) -> list[dict[str, Any]]:
    """The events of the Express run ``arn`` (what its CloudWatch Logs would hold; GetExecutionHistory has none)."""
    for _, execution in _express_executions():
        if execution.exec_arn == arn:
            return list(execution.to_history_output()["events"])
    raise KeyError(f"no Express run {arn}")


def is_express_machine(name_or_arn: str) -> bool:
    return any(_is_express(machine) for machine in _machines() if name_or_arn in (machine.arn, machine.name))


def wait(arn: str, timeout: float = 30.0, poll_interval: float = 0.02) -> dict[str, Any]:
    """Until the run ``arn`` has stopped, or (a standard-form ARN ``…:execution:<machine>:<name>`` of an Express
    machine) until at least one run of that name exists and every one has stopped; the last one's description.
    Raises TimeoutError past ``timeout``."""
    parts = arn.split(":")
    machine, name = parts[6], parts[7]
    deadline = time.monotonic() + timeout
    while True:
        found = [run for run in runs(machine) if run.arn == arn] if is_express_arn(arn) else runs(machine, name)
        if found and all(run.status in TERMINAL for run in found):
            return found[-1].description()
        if time.monotonic() >= deadline:
            state = found[-1].status if found else "not started"
            raise TimeoutError(f"{arn} still {state} after {timeout}s")
        time.sleep(poll_interval)


def stop_all() -> None:
    """Stop every Express run still going (with the stack)."""
    for _, execution in _express_executions():
        if _status(execution) == "RUNNING":
            try:
                execution.stop(stop_date=datetime.datetime.now(tz=datetime.UTC), error="StackStopped", cause="")
            except Exception:  # a run that ended meanwhile
                continue
