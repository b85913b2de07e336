"""Binding the local stack's two ports first, with the standard library only.

``packyard local`` binds before it imports moto and the stack (which takes a second or two), so a port already
in use is reported at once, in one line, with exit code 2.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import socket
from dataclasses import dataclass

DEFAULT_HOST = "127.0.0.1"
DEFAULT_API_PORT = 8787
DEFAULT_AWS_PORT = 4566


class PortInUse(Exception):
    def __init__(self, role: str, host: str, port: int, flag: str, message: str | None = None) -> None:
        super().__init__(
            message or f"port {port} on {host} is already in use ({role}); choose another with {flag} PORT"
        )
        self.role, self.host, self.port, self.flag = role, host, port, flag


def listen(host: str, port: int, role: str, flag: str) -> socket.socket:
    """A listening TCP socket on host:port (port 0 picks a free one), or :class:`PortInUse`."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        # as every server does: lets a restart reuse a port in TIME_WAIT, still refuses a live listener
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(128)
    except OSError as exc:
        sock.close()
        if exc.errno in (errno.EADDRINUSE, errno.EACCES):
            raise PortInUse(role, host, port, flag) from None
        raise
    return sock


@dataclass
class Sockets:
    api: socket.socket
    aws: socket.socket

    def close(self) -> None:
        for sock in (self.api, self.aws):
            with contextlib.suppress(OSError):
                sock.close()


def bind_ports(host: str = DEFAULT_HOST, api_port: int = DEFAULT_API_PORT, aws_port: int = DEFAULT_AWS_PORT) -> Sockets:
    if api_port and api_port == aws_port:
        raise PortInUse(
            "both", host, api_port, "--api-port", f"--api-port and --aws-port must differ (both are {api_port})"
        )
    aws = listen(host, aws_port, "wanted for local AWS (moto)", "--aws-port")
    try:
        api = listen(host, api_port, "wanted for the HTTP API", "--api-port")
    except BaseException:
        aws.close()
        raise
    return Sockets(api=api, aws=aws)


def add_local_arguments(parser: argparse.ArgumentParser, *, verbose: bool = True) -> None:
    """The options of ``packyard local`` (and ``python -m devstack.local``). ``verbose=False`` when the parser
    already has a ``--verbose`` (the CLI's global one)."""
    parser.add_argument("--host", default=DEFAULT_HOST, help="address to listen on (default: %(default)s)")
    parser.add_argument(
        "--api-port", type=int, default=DEFAULT_API_PORT, help="HTTP API port (default: %(default)s; 0: any free)"
    )
    parser.add_argument(
        "--aws-port", type=int, default=DEFAULT_AWS_PORT, help="moto server port (default: %(default)s; 0: any free)"
    )
    parser.add_argument("--log-level", default="WARNING", help="handlers' Powertools log level (default: %(default)s)")
    parser.add_argument(
        "--idp",
        choices=("cognito", "auth0", "okta", "entra", "keycloak"),
        help="read tokens shaped like that identity provider's (its claim mapping as template parameters; mint "
        "them with packyard token --like NAME)",
    )
    keeping = parser.add_mutually_exclusive_group()
    keeping.add_argument(
        "--data",
        metavar="DIR",
        help="keep tables, objects and executions there across restarts (default: <state dir>/data)",
    )
    keeping.add_argument(
        "--ephemeral", action="store_true", help="keep nothing: the stack starts empty and forgets everything on exit"
    )
    parser.add_argument(
        "--single-process",
        action="store_true",
        help="serve the HTTP API and run the functions' handlers in the stack's own process instead of a second one "
        "(one interpreter: slower under concurrent clients)",
    )
    if verbose:
        parser.add_argument("--verbose", action="store_true", help="also show moto's AWS calls and EMF metrics")
