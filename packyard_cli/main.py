"""``packyard``: publish packages and manage installations against the local stack or a deployed one.

Exit codes: 0 ok, 1 error, 2 usage (or a local-stack port in use), 3 refused (archive rejected, operation
refused, consent needed), 4 conflict (409, 412, 428), 5 unavailable (cannot connect, 5xx/429 after retries,
release_unavailable, an unconfirmed outcome). Errors print the problem's title, code and detail, never a
traceback; ``--json`` prints the API's JSON (or the problem) on stdout for scripts.

Where things are: :mod:`packyard_cli.parser` (commands and options), :mod:`packyard_cli.arguments` (argument value
types), :mod:`packyard_cli.commands` (what each command does, by group), :mod:`packyard_cli.render` (output).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from packyard_cli.client import EXIT_ERROR, CliError
from packyard_cli.commands.context import Context
from packyard_cli.parser import build_parser
from packyard_cli.render import print_error


def main(argv: Sequence[str] | None = None) -> int:
    """Parse, run the command's handler, and turn every error it raises into a message and an exit code."""
    args = build_parser().parse_args(argv)
    from rich.console import Console

    ctx = Context(args=args, json=bool(args.json), out=Console(highlight=False), err=Console(stderr=True))
    try:
        return int(args.handler(ctx, args))
    except CliError as error:
        print_error(ctx, error)
        return error.exit_code
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
