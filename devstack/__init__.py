"""Packyard's local runtime: moto resources from template.yaml, in-process Lambda, request counting.

Only this package and the tests import moto. Typical use in a test::

    stack = devstack.start_local_aws()          # mock_aws + stack + dispatcher + os.environ
    ...                                          # call handlers / start executions
    devstack.wait_for_execution(arn)
    devstack.stop_local_aws()

or ``with devstack.local_aws() as stack: ...``.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import sys
import threading
import time
import warnings
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from moto import mock_aws
from moto.core.config import default_user_config
from moto.core.models import botocore_stubber

from devstack import express, faults, lambdas, serializable
from devstack.counting import RequestCounter, count_aws_requests, observe
from devstack.express import runs as express_runs
from devstack.sfn import (
    RetryClock,
    install_execution_names,
    install_retry_clock,
    retry_clock,
    uninstall_execution_names,
    uninstall_retry_clock,
    wait_for_execution,
)
from devstack.template import (
    DEFAULT_STACK_NAME,
    DEFAULT_TEMPLATE,
    ROOT,
    FunctionSpec,
    Stack,
    UnsupportedTemplateError,
    create_stack,
    create_state_machine,
    load_template,
)

__all__ = [
    "FunctionSpec",
    "LocalAws",
    "RequestCounter",
    "RetryClock",
    "Stack",
    "UnsupportedTemplateError",
    "count_aws_requests",
    "create_stack",
    "create_state_machine",
    "current",
    "express_runs",
    "faults",
    "load_template",
    "local_aws",
    "observe",
    "retry_clock",
    "start_local_aws",
    "stop_local_aws",
    "wait_for_execution",
]

# Credentials that can only ever reach moto: a local run never signs with a real identity.
FAKE_CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_SESSION_TOKEN": "testing",
}


@dataclass
class LocalAws:
    stack: Stack
    retry_clock: RetryClock
    _mock: object | None
    _saved_env: dict[str, str | None]


_current: LocalAws | None = None


def current() -> LocalAws | None:
    """The running local AWS started by :func:`start_local_aws`, if any."""
    return _current


def start_local_aws(
    region: str = "us-east-1",
    *,
    template: str | Path = DEFAULT_TEMPLATE,
    stack_name: str = DEFAULT_STACK_NAME,
    parameters: Mapping[str, str] | None = None,
    extra_functions: Iterable[FunctionSpec] = (),
    retry_wait_scale: float = 0.0,
) -> Stack:
    """Start (or join) an in-process moto, create the stack from the template, wire handlers and env.

    * Joins an already-active ``mock_aws`` (turning on Step Functions execution for it), else starts one
      with ``{"stepfunctions": {"execute_state_machine": True}}``; :func:`stop_local_aws` stops only
      what it started.
    * Sets fake credentials, ``AWS_DEFAULT_REGION`` and :meth:`Stack.environment` in ``os.environ``
      (restored on stop), then calls ``packyard.config.reset()`` so cached settings see them.
    * Installs the in-process Lambda dispatcher for the stack's functions (+ ``extra_functions``), a
      :class:`RetryClock` with ``retry_wait_scale`` (0: Retry waits are recorded, not slept), and UUID
      names for unnamed executions (see :mod:`devstack.sfn`).
    """
    global _current
    if _current is not None:
        raise RuntimeError("local AWS already started; call stop_local_aws() first")

    saved_env: dict[str, str | None] = {}

    def set_env(values: Mapping[str, str]) -> None:
        for key, value in values.items():
            saved_env.setdefault(key, os.environ.get(key))
            os.environ[key] = value

    mock = None
    if botocore_stubber.enabled:
        # Assign a new dict (never mutate the nested one): the active mock's patch.dict restores it on stop.
        default_user_config["stepfunctions"] = {
            **default_user_config.get("stepfunctions", {}),
            "execute_state_machine": True,
        }
    else:
        mock = mock_aws(config={"stepfunctions": {"execute_state_machine": True}})
        mock.start()
    try:
        set_env({**FAKE_CREDENTIALS, "AWS_DEFAULT_REGION": region})
        stack = create_stack(template, region=region, stack_name=stack_name, parameters=parameters)
        serializable.install()
        lambdas.install(stack, extra_functions)
        clock = install_retry_clock(retry_wait_scale)
        install_execution_names()
        set_env(stack.environment())
        _reset_config()
    except BaseException:
        lambdas.uninstall()
        uninstall_retry_clock()
        uninstall_execution_names()
        _restore_env(saved_env)
        if mock is not None:
            mock.stop()
        raise
    _current = LocalAws(stack=stack, retry_clock=clock, _mock=mock, _saved_env=saved_env)
    return stack


def stop_local_aws() -> None:
    """Undo :func:`start_local_aws`: dispatcher, retry clock, environment, and the mock if it started one."""
    global _current
    running, _current = _current, None
    if running is None:
        return
    _stop_running_executions(running.stack)
    express.stop_all()
    _wait_for_interpreter_threads()
    lambdas.uninstall()
    uninstall_retry_clock()
    uninstall_execution_names()
    _restore_env(running._saved_env)
    if running._mock is not None:
        running._mock.stop()  # type: ignore[attr-defined]
    _reset_config()


def _stop_running_executions(stack: Stack) -> None:
    """Executions still running (e.g. waiting for a consent task token for days) are stopped with the stack, so
    they do not wake up later (their wait ended by the mock's teardown) and call handlers inside another test."""
    import boto3

    sfn = boto3.client("stepfunctions", region_name=stack.region)
    for machine in stack.state_machine_arns.values():
        try:
            running = sfn.list_executions(stateMachineArn=machine, statusFilter="RUNNING").get("executions", [])
        except Exception:
            continue
        for execution in running:
            with contextlib.suppress(Exception):
                sfn.stop_execution(executionArn=execution["executionArn"], error="StackStopped")


INTERPRETER_DRAIN_SECONDS = 30.0
"""How long the stack's stop waits for moto's interpreter threads to end (a test's stack then stops clean)."""


def _wait_for_interpreter_threads(timeout: float = INTERPRETER_DRAIN_SECONDS) -> None:
    """Wait until the threads moto's interpreter runs executions on have ended: a Map's other iterations go on after
    one of them failed its execution, and a stopped run ends at its next state. Left running, they would call the
    handlers of the *next* test's stack (same process, same table and bucket names, the dispatcher installed again)
    with this test's inputs, e.g. a sweep page at this test's far-future ``time``. The threads a stop leaves end
    within milliseconds here (Retry waits are not slept); one still alive after ``timeout`` is named in a warning."""
    from moto.stepfunctions.parser.utils import TMP_THREADS

    deadline = time.monotonic() + timeout
    for thread in list(TMP_THREADS):
        if thread is not threading.current_thread():
            thread.join(max(0.0, deadline - time.monotonic()))
    alive = [thread.name for thread in TMP_THREADS if thread.is_alive() and thread is not threading.current_thread()]
    if alive:
        warnings.warn(
            f"moto's interpreter threads still running {timeout:.0f} s after the stack stopped: {alive}",
            RuntimeWarning,
            stacklevel=2,
        )


@contextmanager
def local_aws(region: str = "us-east-1", **kwargs: object) -> Iterator[Stack]:
    stack = start_local_aws(region, **kwargs)  # type: ignore[arg-type]
    try:
        yield stack
    finally:
        stop_local_aws()


def _restore_env(saved: Mapping[str, str | None]) -> None:
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


def _reset_config() -> None:
    shared = str(ROOT / "shared")
    if shared not in sys.path:
        sys.path.insert(0, shared)
    try:
        config = importlib.import_module("packyard.config")
    except ModuleNotFoundError as exc:
        if exc.name not in ("packyard", "packyard.config"):
            raise
        return
    reset = getattr(config, "reset", None)
    if callable(reset):
        reset()
