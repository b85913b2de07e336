"""``packyard cat``: print one file of a release, or of an installation's active release, verified."""

from __future__ import annotations

import argparse
import sys

from packyard_cli.arguments import release_ref
from packyard_cli.client import EXIT_OK, CliError
from packyard_cli.commands.context import Context, resolve_release
from packyard_cli.files import read_installation_file, read_release_file


def cmd_cat(ctx: Context, args: argparse.Namespace) -> int:
    """``cat PKG@VER PATH`` or ``cat INSTALLATION PATH -w WS``: the file's bytes to stdout, as they are."""
    if args.workspace:
        fetched = read_installation_file(ctx.client, args.workspace, args.target, args.path)
    else:
        if "@" not in args.target:
            raise CliError(f"name a release as PACKAGE@VERSION, or an installation with -w WORKSPACE: {args.target!r}")
        try:
            ref = release_ref(args.target)
        except argparse.ArgumentTypeError as bad:
            raise CliError(str(bad)) from None
        package, version = resolve_release(ctx, ref, quiet=True)
        fetched = read_release_file(ctx.client, package, version, args.path)
    out = sys.stdout.buffer
    out.write(fetched.data)
    out.flush()
    return EXIT_OK
