"""The local stack's HTTP API in a process of its own: what API Gateway and the API's Lambda functions are on AWS,
beside the services they call.

``packyard local`` runs two processes. The stack's own (:mod:`devstack.local`) keeps moto (every table, bucket and
execution), the Step Functions interpreter, and Lambda's ``Invoke`` (its payload limits, concurrency and throttles).
This one serves the HTTP API (:class:`devstack.server.LocalApiServer`: routes, the JWT authorizer, API Gateway's edge
limits, the OpenID Connect issuer, ``/openapi.json``) and runs the functions' handlers: the API's, and those of the
tasks the stack's process invokes (Step Functions' tasks, the events' targets), which it sends here over a task
channel (:func:`devstack.lambdas.run_tasks_with`). The handlers' AWS calls reach the stack's moto through a channel
(:class:`devstack.transport.Channel`: the WSGI environ and body over a Unix socket, no HTTP on either side). Why: one
interpreter was the ceiling of the stack under load; the API's requests, then the tasks' handlers and their
botocore side, are CPU that needs none of moto's state (docs/decisions.md, "Local stack throughput, fifth pass" and
"sixth pass").

How it talks with the stack's process (:func:`start` is the stack's side):

* **stdin**: first one frame (4-byte length, then a pickle) with what this process needs (the stack's description,
  the state directory, the identity provider's claim shape, the channel's address, moto's host and port), then one
  line ``<pk>\\t<sk>`` per operation item written at rest, which wakes the waits for it (:mod:`devstack.wakes`).
  End of file means the stack's process is gone (stopped, or killed with ``kill -9``): this one exits at once.
* **the API socket**: inherited, already listening (bound by ``packyard local`` before anything started).
* **the task channel**: an abstract Unix socket address in the configuration, where this process answers the
  invocations the stack's process sends (function name and body in, payload and ``X-Amz-Function-Error`` out).
  A kill point of the restart tests (``after:``, ``$PACKYARD_LOCAL_EXIT_AT``) reached in a task here stops the
  stack's process with SIGUSR2.
* **a ready pipe**: ``READY`` once it serves; anything else is the reason it could not start.
* **stdout and stderr**: the stack's own; the access log is written there as the stack writes it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
READY = b"READY"
START_TIMEOUT_SECONDS = 60.0
STOP_TIMEOUT_SECONDS = 5.0
UNINHERITED = ("PACKYARD_LOCAL_EXIT_AT",)  # prefixes (devstack.process.stack_environment)
"""The restart tests' kill points name steps of the stack's process (devstack.persistence.install_exit_point)."""


class ApiProcessFailed(RuntimeError):
    """The API process did not start."""


@dataclass
class ApiProcess:
    """The running API process, seen from the stack's process."""

    process: subprocess.Popen[bytes]
    _lock: threading.Lock

    def notify_at_rest(self, key: tuple[str, str]) -> None:
        """Tell its waits that operation item ``key`` was written at rest (:func:`devstack.wakes.install`)."""
        line = f"{key[0]}\t{key[1]}\n".encode()
        with self._lock, contextlib.suppress(OSError, ValueError):
            stdin = self.process.stdin
            if stdin is not None:
                stdin.write(line)
                stdin.flush()

    def stop(self) -> None:
        with self._lock, contextlib.suppress(OSError, ValueError):
            if self.process.stdin is not None:
                self.process.stdin.close()  # its end of file: it exits
        try:
            self.process.wait(STOP_TIMEOUT_SECONDS)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def start(api_socket: socket.socket, configuration: dict[str, Any]) -> ApiProcess:
    """Start the API process on ``api_socket`` (which it inherits; the caller closes its own copy) and return once
    it serves. ``configuration``: what :func:`serve` reads (see the module's docstring). It runs in this process's
    environment (the stack's names, moto's address, the fake credentials), less the restart tests' kill points."""
    from devstack.process import stack_environment
    from devstack.transport import frame

    ready_read, ready_write = os.pipe()
    try:
        process = subprocess.Popen(
            [sys.executable, "-m", "devstack.api_process", str(ready_write)],
            stdin=subprocess.PIPE,
            pass_fds=(api_socket.fileno(), ready_write),
            env=stack_environment(strip=UNINHERITED),
            cwd=ROOT,
        )
    finally:
        os.close(ready_write)
    api = ApiProcess(process=process, _lock=threading.Lock())
    try:
        assert process.stdin is not None
        process.stdin.write(frame({**configuration, "fd": api_socket.fileno()}))
        process.stdin.flush()
        answer = _read_until_closed(ready_read, START_TIMEOUT_SECONDS)
    except BaseException:
        api.stop()
        raise
    finally:
        os.close(ready_read)
    if answer != READY:
        api.stop()
        reason = answer.decode(errors="replace").strip() or f"it exited with code {process.returncode}"
        raise ApiProcessFailed(f"the API process did not start: {reason}")
    return api


def _read_until_closed(fd: int, timeout: float) -> bytes:
    """What the child writes to the ready pipe until it closes it (or ``timeout`` passes)."""
    import select

    chunks: list[bytes] = []
    deadline = time.monotonic() + timeout
    while (left := deadline - time.monotonic()) > 0:
        readable, _, _ = select.select([fd], [], [], left)
        if not readable:
            break
        chunk = os.read(fd, 4096)
        if not chunk:
            break
        chunks.append(chunk)
    return b"".join(chunks)


# ------------------------------------------------------------------ the API process itself


def _forget_invocations() -> None:
    """What the stack's own loop does (``devstack.local.serve``): the invocations :mod:`devstack.lambdas` records for
    tests' assertions are dropped, or a long-running server would keep every event and answer it ever handled."""
    from devstack import lambdas

    while True:
        time.sleep(0.5)
        lambdas.clear_invocations()


def _answer_task(request: tuple[str, Any]) -> tuple[bytes, str | None]:
    from devstack import lambdas

    name, body = request
    return lambdas.answer_task(name, body)


def _stop_the_stack() -> None:
    """A kill point of the restart tests reached in a task run here: the stack's process dies at it
    (:func:`devstack.local.start` set SIGUSR2 to ``os._exit(137)``), and this task goes no further."""
    os.kill(os.getppid(), signal.SIGUSR2)
    threading.Event().wait()  # this process exits when the stack's process is gone (its stdin ends)


def serve(configuration: dict[str, Any], ready: Callable[[bytes], None]) -> None:
    """Serve the API, and run the tasks the stack's process dispatches, until stdin ends (the stack's process
    stopped or died)."""
    from devstack import lambdas, memory, persistence, transport, wakes
    from devstack.server import console_log, start_api_server
    from packyard_cli import tokens

    transport.install_channel(configuration["channel"], configuration["aws_host"], configuration["aws_port"])
    wakes.install_alarm()
    for spec in configuration["stack"].functions.values():
        lambdas.register(spec)
    if configuration.get("exit_at"):
        persistence.install_exit_point(configuration["exit_at"], die=_stop_the_stack)
    transport.serve_calls(_answer_task, configuration["tasks"], "packyard-task")
    state_dir = configuration["state_dir"]
    start_api_server(
        socket.socket(fileno=configuration["fd"]),
        configuration["stack"],
        tokens.load_or_create_key(state_dir),
        state_dir=state_dir,
        idp=configuration.get("idp"),
        log=console_log(),
    )
    threading.Thread(target=_forget_invocations, name="packyard-invocations", daemon=True).start()
    memory.freeze_what_start_built()
    ready(READY)
    for line in sys.stdin.buffer:  # operations written at rest, until the stack's process is gone
        pk, _, sk = line.decode("utf-8").rstrip("\n").partition("\t")
        wakes.notify_at_rest((pk, sk))


def main(argv: list[str]) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the whole group: the stack's process stops this one
    ready_fd = int(argv[0])

    def ready(message: bytes) -> None:
        os.write(ready_fd, message)
        os.close(ready_fd)

    try:
        from devstack.transport import read_frame

        configuration = read_frame(sys.stdin.buffer.read)
        if configuration is None:
            raise ApiProcessFailed("no configuration on stdin")
        serve(configuration, ready)
    except Exception as exc:
        with contextlib.suppress(OSError):
            ready(f"{type(exc).__name__}: {exc}".encode())
        sys.stderr.flush()
        os._exit(1)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main(sys.argv[1:])
