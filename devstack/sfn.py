"""Step Functions plumbing for local runs: waiting for executions, the Retry clock, unnamed executions.

Moto's ASL interpreter really sleeps ``IntervalSeconds * BackoffRate**n`` between Retry attempts
(``time.sleep`` in ``retrier_decl``): the publish flow's ``1s, 2s, 4s`` would make every failure test
take 7 s. :class:`RetryClock` replaces that one sleep: it records each requested wait (so tests can
assert the backoff schedule) and sleeps ``wait * scale`` (0 by default: retries happen at once; 1 for
real timing). Nothing else in the interpreter (Wait states, timeouts) is affected.

Moto's executing backend also names an unnamed execution ``None`` (ARN ``…:execution:<machine>:None``),
so a second unnamed ``StartExecution`` on the same machine fails with ``ExecutionAlreadyExists``.
:func:`install_execution_names` gives it a UUID, as AWS does. (Packyard always names executions after
the upload/operation id; this only keeps ad-hoc starts faithful.)
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

import boto3
from moto.stepfunctions.parser.asl.component.common.retry import retrier_decl
from moto.stepfunctions.parser.models import StepFunctionsParserBackend

from devstack import express

TERMINAL = frozenset({"SUCCEEDED", "FAILED", "TIMED_OUT", "ABORTED"})


class RetryClock:
    """Stands in for the ``time`` module inside moto's retrier."""

    def __init__(self, scale: float = 0.0) -> None:
        self.scale = scale
        self._waits: list[float] = []
        self._lock = threading.Lock()
        # called with each wait before it is slept: a test makes "the throttle clears while Step Functions waits"
        # happen at a known point of the schedule (devstack.limits.occupied(...).release)
        self.on_wait: Callable[[float], None] | None = None

    @property
    def waits(self) -> list[float]:
        """Every Retry wait requested so far, in seconds, in order."""
        with self._lock:
            return list(self._waits)

    def clear(self) -> None:
        with self._lock:
            self._waits.clear()

    def sleep(self, seconds: float) -> None:
        with self._lock:
            self._waits.append(float(seconds))
            hook = self.on_wait
        if hook is not None:
            hook(float(seconds))
        if self.scale > 0:
            time.sleep(seconds * self.scale)

    def __getattr__(self, name: str) -> Any:
        return getattr(time, name)


_installed: RetryClock | None = None


def install_retry_clock(scale: float = 0.0) -> RetryClock:
    """Replace the retrier's sleep with a :class:`RetryClock` (replacing any previous one)."""
    global _installed
    _installed = RetryClock(scale)
    setattr(retrier_decl, "time", _installed)  # noqa: B010 - moto's module does not export the name it uses
    return _installed


def uninstall_retry_clock() -> None:
    global _installed
    setattr(retrier_decl, "time", time)  # noqa: B010
    _installed = None


def retry_clock() -> RetryClock | None:
    return _installed


_original_start_execution: Callable[..., Any] | None = None


def install_execution_names() -> None:
    """Give unnamed executions a UUID name in moto's executing backend, and Express machines Express semantics
    (:mod:`devstack.express`: no name deduplication, no execution API, the 5-minute limit) (idempotent)."""
    global _original_start_execution
    if _original_start_execution is not None:
        return
    original = StepFunctionsParserBackend.__dict__["start_execution"]

    def start_execution(self: Any, state_machine_arn: str, name: Any = None, *args: Any, **kwargs: Any) -> Any:
        return original(self, state_machine_arn, name or str(uuid.uuid4()), *args, **kwargs)

    _original_start_execution = original
    setattr(StepFunctionsParserBackend, "start_execution", start_execution)  # noqa: B010
    express.install()  # over the naming patch: an Express start names its run itself


def uninstall_execution_names() -> None:
    global _original_start_execution
    express.uninstall()
    if _original_start_execution is not None:
        setattr(StepFunctionsParserBackend, "start_execution", _original_start_execution)  # noqa: B010
        _original_start_execution = None


def wait_for_execution(
    execution_arn: str,
    timeout: float = 30.0,
    *,
    client: Any = None,
    poll_interval: float = 0.02,
) -> dict[str, Any]:
    """Poll ``DescribeExecution`` until the execution leaves RUNNING; return the description.

    Raises ``TimeoutError`` (with the last status) if it is still running after ``timeout`` seconds.

    An Express run has no DescribeExecution: the harness reads it from moto's backend (:func:`devstack.express.wait`,
    which also takes the standard-form ARN ``…:execution:<machine>:<name>`` and then waits for every run of the name).
    """
    if express.is_express_arn(execution_arn) or express.is_express_machine(execution_arn.split(":")[6]):
        return express.wait(execution_arn, timeout, poll_interval=min(poll_interval, 0.05))
    sfn = client or boto3.client("stepfunctions")
    poll_interval = min(poll_interval, 0.05)
    deadline = time.monotonic() + timeout
    while True:
        description: dict[str, Any] = sfn.describe_execution(executionArn=execution_arn)
        if description["status"] in TERMINAL:
            return description
        if time.monotonic() >= deadline:
            raise TimeoutError(f"{execution_arn} still {description['status']} after {timeout}s")
        time.sleep(poll_interval)
