"""``packyard``: publish packages and manage installations against the local stack or a deployed one.

Exit codes (``packyard --help`` and the README list them): 0 ok, 1 error, 2 usage, 3 refused, 4 conflict,
5 unavailable (the only one worth retrying as is), 6 not found, 7 unauthorized. Errors print the problem's title,
code and detail, never a traceback; ``--output json`` prints the API's JSON (or the problem) on stdout for scripts.

Where things are: :mod:`packyard_cli.parser` (commands and options), :mod:`packyard_cli.arguments` (argument value
types) and :mod:`packyard_cli.rules` (the service's naming rules), :mod:`packyard_cli.commands` (what each command
does, by group), :mod:`packyard_cli.render` and :mod:`packyard_cli.output` (what it prints), :mod:`packyard_cli.folder`
(package folders), :mod:`packyard_cli.profiles` (the config file), :mod:`packyard_cli.completion`.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Sequence

from packyard_cli.client import EXIT_ERROR, EXIT_USAGE, CliError
from packyard_cli.commands.context import Context
from packyard_cli.output import QueryError
from packyard_cli.parser import build_parser
from packyard_cli.render import print_error

_VERSION_LIKE = re.compile(r"^v?\d+(\.\d+)*([-+].*)?$")


def legacy_version_flag(argv: list[str]) -> tuple[list[str], bool]:
    """``publish … -v 1.2.3`` (before 0.2, ``-v`` was publish's version) becomes ``--version 1.2.3``; ``-v`` is now
    ``--verbose``, as with most tools. Returns the arguments and whether it rewrote them."""
    if "publish" not in argv:
        return argv, False
    out, changed = list(argv), False
    for index in range(argv.index("publish") + 1, len(argv) - 1):
        if argv[index] == "-v" and _VERSION_LIKE.match(argv[index + 1]):
            out[index], changed = "--version", True
    return out, changed


def _console(stderr: bool = False) -> object:
    from rich.console import Console

    stream = sys.stderr if stderr else sys.stdout
    width = None
    if not stream.isatty() and not os.environ.get("COLUMNS"):
        width = 4096  # piped or redirected: never cut or wrap a line
    return Console(stderr=stderr, highlight=False, width=width)


def main(argv: Sequence[str] | None = None) -> int:
    """Parse, run the command's handler, and turn every error it raises into a message and an exit code."""
    words, rewrote = legacy_version_flag(list(sys.argv[1:] if argv is None else argv))
    if rewrote:
        print("packyard: publish -v VERSION is deprecated (-v is --verbose now): use --version", file=sys.stderr)
    args = build_parser().parse_args(words)
    ctx = Context(args=args, out=_console(), err=_console(stderr=True))
    try:
        return int(args.handler(ctx, args))
    except CliError as error:
        print_error(ctx, ctx.with_next_step(error))
        return error.exit_code
    except QueryError as exc:
        print_error(ctx, CliError(str(exc), exit_code=EXIT_USAGE))
        return EXIT_USAGE
    except KeyboardInterrupt:
        ctx.err.print("interrupted")
        return 130
    except BrokenPipeError:
        return EXIT_ERROR
    except (KeyError, TypeError, ValueError) as exc:
        # an answer without the fields this CLI expects (e.g. an older or newer service)
        print_error(ctx, CliError("unexpected answer from the service", detail=f"{type(exc).__name__}: {exc}"))
        return EXIT_ERROR


__all__ = ["main"]


if __name__ == "__main__":
    sys.exit(main())
