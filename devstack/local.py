"""``packyard local`` / ``make serve``: the whole system on 127.0.0.1, as API Gateway and AWS would serve it.

* moto as a server (S3, DynamoDB, Step Functions, Lambda, …) on ``--aws-port``; the stack's table, bucket and
  state machines are created on it from template.yaml; executions run on moto's ASL interpreter and their Lambda
  tasks are dispatched in-process to ``functions/*`` (:mod:`devstack.lambdas`);
* the handlers' boto3 clients reach that server through ``AWS_ENDPOINT_URL``, so presigned upload and download
  URLs point at it too and work with any HTTP client;
* the HTTP API on ``--api-port`` (:mod:`devstack.server`): JWT checked with the local key, v2 events, the
  handlers' responses unchanged, plus ``/openapi.json`` and ``/docs``.

Both ports are bound before anything else starts, so a port in use is a one-line message and exit code 2.

State persists across restarts with ``data_dir`` (``packyard local`` by default: ``<state dir>/data``, or
``--data DIR``): :mod:`devstack.persistence` journals every change of the stack's table, bucket and executions and
loads it back at the next start; ``--ephemeral`` keeps everything in memory only (a restart starts empty). The state
directory also holds the signing key (so tokens minted before a restart still verify) and ``local.json`` (where the
running stack listens, for the CLI).
Ctrl-C (SIGINT) or SIGTERM stops both servers and removes the state file.

Run with ``python -m devstack.local`` or ``packyard local`` (same options).
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import importlib
import json
import logging
import os
import signal
import sys
import threading
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from devstack import FAKE_CREDENTIALS
from packyard_cli import tokens
from packyard_cli.ports import PortInUse, Sockets, add_local_arguments, bind_ports

__all__ = ["LocalStack", "PortInUse", "bind_ports", "exit_now", "main", "serve", "start"]

EXIT_PORT_IN_USE = 2


@dataclass
class LocalStack:
    """A running local stack. Create it with :func:`start`; stop it with :meth:`stop`."""

    host: str
    api_url: str
    aws_url: str
    state_dir: Path
    stack: Any  # devstack.template.Stack
    data: Any = None  # devstack.persistence.DataDir, or None when nothing persists
    api: Any = None  # devstack.api_process.ApiProcess, or None when the API is served from this process
    _stoppers: list[Callable[[], None]] = field(default_factory=list)
    _stopped: bool = False

    def cli_environment(self) -> str:
        """What a shell needs so the CLI finds this stack (nothing when it uses the default state dir)."""
        return "" if self.state_dir == tokens.state_dir() else f"PACKYARD_LOCAL_DIR={self.state_dir} "

    def stop(self) -> None:
        if self._stopped:
            return
        self._stopped = True
        for stop in reversed(self._stoppers):
            with contextlib.suppress(Exception):
                stop()


def _quiet_loggers(verbose: bool) -> None:
    werkzeug = logging.getLogger("werkzeug")  # moto's server logs every AWS call at INFO
    werkzeug.setLevel(logging.INFO if verbose else logging.WARNING)
    if not werkzeug.handlers:
        werkzeug.addHandler(logging.StreamHandler() if verbose else logging.NullHandler())


def _set_env(values: dict[str, str], saved: dict[str, str | None]) -> None:
    for key, value in values.items():
        saved.setdefault(key, os.environ.get(key))
        os.environ[key] = value


def _restore_env(saved: dict[str, str | None]) -> None:
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


def _reset_packyard_caches() -> None:
    # Settings and boto3 clients cached before the environment pointed at this stack must be forgotten.
    for module_name, function in (("packyard.config", "reset"), ("packyard.store.aws", "reset_clients")):
        module = sys.modules.get(module_name)
        if module is None:
            with contextlib.suppress(ModuleNotFoundError):
                module = importlib.import_module(module_name)
        reset = getattr(module, function, None)
        if callable(reset):
            reset()


# the template's schedule runs every 5 minutes; locally a shorter interval shows sweeps at work
SWEEP_EVERY = 60.0


def _sweep_on_schedule(machine: str, aws_url: str, every: float, stop: threading.Event) -> None:
    """What the EventBridge schedule does on AWS: start the maintenance state machine with a scheduled event."""
    import boto3

    sfn = boto3.client("stepfunctions", endpoint_url=aws_url)
    while not stop.wait(every):
        event = {
            "detail-type": "Scheduled Event",
            "source": "aws.events",
            "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "resources": ["local:schedule/MaintenanceStateMachineSweep"],
            "detail": {},
        }
        with contextlib.suppress(Exception):  # a missed tick is retried by the next one, as on AWS
            sfn.start_execution(stateMachineArn=machine, input=json.dumps(event))


def _exit_point_in_tasks() -> str | None:
    """A kill point (``$PACKYARD_LOCAL_EXIT_AT``) reached while a task runs, for the API process that runs the tasks
    (``after:``; ``invoke:`` is reached here, as Step Functions invokes). It stops this process there: SIGUSR2 makes
    it exit with the code SIGKILL leaves (:func:`devstack.api_process.serve`)."""
    from devstack import persistence

    spec = os.environ.get(persistence.EXIT_AT, "")
    if not spec.startswith("after:"):
        return None
    signal.signal(signal.SIGUSR2, lambda *_: os._exit(persistence.EXIT_CODE))
    return spec


def tokens_shaped_like(idp: str | None) -> dict[str, str] | None:
    """The template parameters that read tokens shaped like identity provider ``idp``'s (None: the defaults)."""
    if not idp:
        return None
    from packyard_cli.identity_providers import PROVIDERS

    return dict(PROVIDERS[idp].parameters)


def start(
    sockets: Sockets,
    *,
    state_dir: str | Path | None = None,
    region: str = "us-east-1",
    log_level: str = "WARNING",
    verbose: bool = False,
    retry_wait_scale: float = 1.0,
    log: Callable[[str], None] | None = None,
    sweep_every: float = SWEEP_EVERY,
    idp: str | None = None,
    data_dir: str | Path | None = None,
    api_process: bool = False,
) -> LocalStack:
    """Start moto on ``sockets.aws``, create the stack, start the HTTP API on ``sockets.api``.

    Changes this process's environment (restored by :meth:`LocalStack.stop`): handlers run in it. Once per
    process: moto's backends are process-wide, so a second stack here would find the first one's table.
    ``data_dir``: keep the state there (:mod:`devstack.persistence`); None: in memory only.
    ``api_process``: serve the HTTP API from a process of its own (:mod:`devstack.api_process`, what ``packyard
    local`` does); False: from a thread of this one (``log`` is then where its access lines go).
    """
    from moto.core.config import default_user_config
    from moto.moto_server.werkzeug_app import MotoRequestHandler, create_backend_app
    from werkzeug.serving import make_server

    from devstack import api_process as api_processes
    from devstack import lambdas, persistence, serializable, transport, wakes
    from devstack.oidc import ISSUER_PATH
    from devstack.server import start_api_server
    from devstack.sfn import (
        install_execution_names,
        install_retry_clock,
        uninstall_execution_names,
        uninstall_retry_clock,
    )
    from devstack.template import create_stack

    stoppers: list[Callable[[], None]] = []
    saved_env: dict[str, str | None] = {}
    host, aws_port = sockets.aws.getsockname()[:2]
    api_port = sockets.api.getsockname()[1]
    aws_url, api_url = f"http://{host}:{aws_port}", f"http://{host}:{api_port}"
    directory = tokens.state_dir(state_dir)

    def stop_all() -> None:
        for stop in reversed(stoppers):
            with contextlib.suppress(Exception):
                stop()

    try:
        exit_point = persistence.install_exit_point()  # PACKYARD_LOCAL_EXIT_AT: the restart tests' kill points
        if exit_point is not None:
            stoppers.append(exit_point)
        data = persistence.open_data(data_dir) if data_dir is not None else None
        if data is not None:
            stoppers.append(data.close)
        _quiet_loggers(verbose)
        if not verbose:
            # every request flushes the (disabled) metrics; Powertools warns each time there were none
            warnings.filterwarnings("ignore", message="No application metrics to publish")
        key = tokens.load_or_create_key(directory)
        _set_env(
            {
                **FAKE_CREDENTIALS,
                "AWS_DEFAULT_REGION": region,
                # boto3 (handlers, this process) and moto's ASL interpreter both reach the local server
                "AWS_ENDPOINT_URL": aws_url,
                "MOTO_PORT": str(aws_port),
            },
            saved_env,
        )
        stoppers.append(lambda: _restore_env(saved_env))
        previous_sfn_config = default_user_config.get("stepfunctions")
        default_user_config["stepfunctions"] = {**(previous_sfn_config or {}), "execute_state_machine": True}
        stoppers.append(lambda: default_user_config.__setitem__("stepfunctions", previous_sfn_config or {}))

        # moto's ThreadedMotoServer, but on the socket bound above (it would hang on a port in use)
        moto_server = make_server(
            host,
            aws_port,
            _moto_app(transport.InProcessDispatcher(create_backend_app), data),
            threaded=True,
            request_handler=MotoRequestHandler,
            fd=sockets.aws.fileno(),
        )
        sockets.aws.close()  # the server holds its own duplicate of the descriptor
        moto_thread = threading.Thread(target=moto_server.serve_forever, args=(0.1,), name="moto-server", daemon=True)
        moto_thread.start()
        stoppers.append(moto_server.server_close)
        stoppers.append(moto_server.shutdown)
        # this process's own AWS calls (handlers, Step Functions) reach that app without a socket (devstack.transport)
        transport.install(moto_server.app, host, aws_port)
        stoppers.append(transport.uninstall)

        # --idp: the claim mapping of packyard_cli.identity_providers, passed as the template's parameters
        parameters = tokens_shaped_like(idp)
        # a persistent stack keeps its physical names (the bucket's suffix) from start to start
        suffix = data.suffix if data is not None else None
        stack = create_stack(region=region, endpoint_url=aws_url, parameters=parameters, suffix=suffix)
        serializable.install()  # DynamoDB's own atomicity, which moto's server threads would not give
        stoppers.append(serializable.uninstall)
        lambdas.install(stack)
        stoppers.append(lambdas.uninstall)
        install_retry_clock(retry_wait_scale)
        stoppers.append(uninstall_retry_clock)
        install_execution_names()
        stoppers.append(uninstall_execution_names)
        if data is not None:  # the journal's state back into moto, then every change journaled
            data.restore(region)
            data.start_journal()
        _set_env(stack.environment(), saved_env)
        # The template's INFO logs and EMF metrics per request would drown the access log.
        _set_env({"POWERTOOLS_LOG_LEVEL": log_level.upper()}, saved_env)
        if not verbose:
            _set_env({"POWERTOOLS_METRICS_DISABLED": "true"}, saved_env)
        _reset_packyard_caches()
        stoppers.append(_reset_packyard_caches)

        if api_process:
            # the API's handlers, and the tasks' (Step Functions', events'), run in the API process and reach moto
            # through a channel (no HTTP); their waits are woken from here
            channel, close_channel = transport.serve_channel(moto_server.app)
            stoppers.append(close_channel)
            tasks_address = transport.new_address("tasks")
            exit_at = _exit_point_in_tasks()
            api = api_processes.start(
                sockets.api,
                {
                    "stack": stack,
                    "state_dir": str(directory),
                    "idp": idp,
                    "channel": channel,
                    "aws_host": host,
                    "aws_port": aws_port,
                    "tasks": tasks_address,
                    "exit_at": exit_at,
                },
            )
            sockets.api.close()  # the API process holds its own duplicate of the descriptor
            stoppers.append(api.stop)
            tasks = transport.Caller(tasks_address, "the API process's tasks")
            lambdas.run_tasks_with(lambda name, body: tasks.call((name, body)))
            stoppers.append(tasks.close)
            stoppers.append(functools.partial(lambdas.run_tasks_with, None))
            wakes.install(observe=api.notify_at_rest)
        else:
            api_server = start_api_server(sockets.api, stack, key, state_dir=directory, idp=idp, log=log)
            stoppers.append(api_server.server_close)
            stoppers.append(api_server.shutdown)
            wakes.install()
        # a wait for an operation reads it when it comes to rest, not after every pause of its schedule
        stoppers.append(wakes.uninstall)

        tokens.write_state(
            directory,
            {
                "pid": os.getpid(),
                "api": api_url,
                "aws": aws_url,
                "issuer": tokens.ISSUER,
                "oidcIssuer": api_url.rstrip("/") + ISSUER_PATH,  # packyard login's issuer (devstack.oidc)
                "apiPid": api.process.pid if api_process else os.getpid(),
                "audience": tokens.AUDIENCE,
                "bucket": stack.bucket_name,
                "table": stack.table_name,
                "maintenanceStateMachine": stack.state_machine_arns.get("MaintenanceStateMachine"),
                # the recorder of the change events (devstack.event_log): packyard events reads it
                "eventLog": stack.event_logs.get("PackyardEventBus"),
                "data": str(data.path) if data is not None else None,
                "startedAt": int(time.time()),
            },
        )
        if sweep_every > 0 and "MaintenanceStateMachine" in stack.state_machine_arns:
            stop_sweeping = threading.Event()
            threading.Thread(
                target=_sweep_on_schedule,
                args=(stack.state_machine_arns["MaintenanceStateMachine"], aws_url, sweep_every, stop_sweeping),
                name="packyard-schedule",
                daemon=True,
            ).start()
            stoppers.append(stop_sweeping.set)
        pid = os.getpid()
        stoppers.append(lambda: tokens.clear_state(directory, pid))
    except BaseException:
        stop_all()
        sockets.close()
        raise
    return LocalStack(
        host=host,
        api_url=api_url,
        aws_url=aws_url,
        state_dir=directory,
        stack=stack,
        data=data,
        api=api if api_process else None,
        _stoppers=stoppers,
    )


def _moto_app(app: Any, data: Any) -> Any:
    """moto's WSGI app; with a data directory, wrapped so each request's S3 writes are journaled."""
    if data is None:
        return app
    from devstack.persistence import journaled_app

    return journaled_app(app, data)


def data_directory(args: argparse.Namespace) -> Path | None:
    """Where ``packyard local`` keeps the state: ``--data``, else ``<state dir>/data``; None with ``--ephemeral``."""
    if getattr(args, "ephemeral", False):
        return None
    if getattr(args, "data", None):
        return Path(args.data)
    return tokens.state_dir(getattr(args, "state_dir", None)) / "data"


# ------------------------------------------------------------------ the command


def serve(args: argparse.Namespace, sockets: Sockets | None = None) -> int:
    """Run until SIGINT/SIGTERM. Returns the process exit code."""
    from rich.console import Console

    from devstack import lambdas, memory
    from devstack.server import console_log

    console = Console(stderr=True, highlight=False)
    if sockets is None:
        try:
            sockets = bind_ports(args.host, args.api_port, args.aws_port)
        except PortInUse as exc:
            print(f"packyard local: {exc}", file=sys.stderr)
            return EXIT_PORT_IN_USE

    stop_requested = threading.Event()

    def request_stop(signum: int, _frame: Any) -> None:
        stop_requested.set()

    previous = {sig: signal.signal(sig, request_stop) for sig in (signal.SIGINT, signal.SIGTERM)}
    report_requested = threading.Event()
    if hasattr(signal, "SIGUSR1"):  # the benchmarks ask what the memory holds: written to <state dir>/memory.json
        previous[signal.SIGUSR1] = signal.signal(signal.SIGUSR1, lambda *_: report_requested.set())
    started = time.monotonic()
    try:
        with console.status("starting the local stack (moto, resources from template.yaml, handlers)…"):
            stack = start(
                sockets,
                state_dir=args.state_dir,
                log_level=args.log_level,
                verbose=args.verbose,
                idp=getattr(args, "idp", None),
                data_dir=data_directory(args),
                api_process=not getattr(args, "single_process", False),
                log=console_log(),
            )
    except Exception as exc:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        if args.verbose:
            console.print_exception()
        print(
            f"packyard local: could not start the stack: {type(exc).__name__}: {exc}"
            + ("" if args.verbose else " (--verbose shows the traceback)"),
            file=sys.stderr,
        )
        return 1
    try:
        console.print(
            f"[bold green]Packyard local stack ready[/] in {time.monotonic() - started:.1f}s\n"
            f"  HTTP API     [bold]{stack.api_url}[/]   (JWT: RS256, iss {tokens.ISSUER}, aud {tokens.AUDIENCE})\n"
            f"  OpenAPI      {stack.api_url}/openapi.json\n"
            f"  Swagger UI   {stack.api_url}/docs\n"
            f"  sign in      [bold]{stack.cli_environment()}packyard login[/]   (OpenID Connect issuer "
            f"{stack.api_url}/oidc; machines: packyard login --client-credentials, secret in "
            f"{stack.state_dir}/oidc-client-secret)\n"
            f"  AWS (moto)   {stack.aws_url}   (S3, DynamoDB, Step Functions, Lambda; presigned URLs point here)\n"
            f"  table        {stack.stack.table_name}\n"
            f"  bucket       {stack.stack.bucket_name}\n"
            f"  state dir    {stack.state_dir}   (signing key and address)\n"
            f"{_persistence_line(stack)}\n"
            f"  the CLI:     [bold]{stack.cli_environment()}packyard releases[/]  (finds this stack, mints a token)\n"
            f"  a token:     [bold]{stack.cli_environment()}packyard token --tenant local --subject me[/]\n"
            f'  curl:        curl -H "Authorization: Bearer $({stack.cli_environment()}packyard token)" '
            f"{stack.api_url}/v1/packages\n"
            "Ctrl-C stops it.",
            soft_wrap=True,
        )
        memory.freeze_what_start_built()
        if not sys.stderr.isatty():
            print(f"READY {stack.api_url} {stack.aws_url}", file=sys.stderr, flush=True)
        exit_code = 0
        while not stop_requested.wait(0.5):
            lambdas.clear_invocations()  # kept for tests' assertions; a long-running server must not hoard them
            if stack.api is not None and stack.api.process.poll() is not None:
                # nothing would answer on the API's port any more: stop, and say why, rather than run half a stack
                console.print(
                    f"[bold red]the API process exited (code {stack.api.process.returncode})[/]; stopping the stack"
                )
                exit_code = 1
                break
            if report_requested.is_set():
                report_requested.clear()
                memory.write_report(stack.state_dir / "memory.json")
        console.print("stopping…")
    finally:
        stack.stop()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    console.print("stopped")
    return exit_code


def _persistence_line(stack: LocalStack) -> str:
    if stack.data is None:
        return (
            "  [bold yellow]nothing persists[/] (--ephemeral): packages, uploads and installations live in memory and "
            "are gone when the stack stops; a restart starts empty"
        )
    found = stack.data.loaded
    torn = f"; a torn last record ({stack.data.torn_bytes} bytes) was cut off" if stack.data.torn_bytes else ""
    return (
        f"  data         {stack.data.path}   (kept across restarts: {found['items']} items, {found['objects']} "
        f"objects, {found['executions']} executions loaded{torn}; --ephemeral keeps nothing)"
    )


def exit_now(code: int) -> None:
    """Exit once everything is stopped, skipping the interpreter's teardown of moto's module state (over a
    second of freeing objects that die with the process anyway)."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m devstack.local", description=__doc__.splitlines()[0])
    add_local_arguments(parser)
    parser.add_argument(
        "--state-dir", help="signing key and local.json (default: $PACKYARD_LOCAL_DIR or <repo>/.packyard-local)"
    )
    exit_now(serve(parser.parse_args(argv)))
    return 0  # not reached


if __name__ == "__main__":
    sys.exit(main())
