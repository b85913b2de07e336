"""Getting set up: ``init`` (a package folder), ``profiles`` (the config file's profiles) and ``completion``
(a shell completion script)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from packyard_cli.client import EXIT_OK
from packyard_cli.commands.context import Context
from packyard_cli.output import Column, dig


def cmd_init(ctx: Context, args: argparse.Namespace) -> int:
    from packyard_cli.folder import default_name, init_folder

    folder = Path(args.directory)
    written = init_folder(
        folder,
        name=args.name or default_name(folder),
        version=args.version or "0.1.0",
        permissions=args.permission or [],
        description=args.description or "",
        force=args.force,
    )
    body = {"items": [{"file": str(p)} for p in written]}

    def render() -> None:
        for path in written:
            ctx.out.print(f"wrote {path}", highlight=False)
        ctx.out.print(f"next: add files to {folder}, then [bold]packyard publish {folder}[/]", highlight=False)

    ctx.show(body, render=render, columns=(Column("file", dig("file"), key=True),))
    return EXIT_OK


def cmd_profiles(ctx: Context, args: argparse.Namespace) -> int:
    from packyard_cli.credentials import cache_path
    from packyard_cli.profiles import config_path, load_profiles

    path = config_path()
    active = ctx.profile.name
    items = [
        {
            "name": p.name,
            "active": p.name == active,
            "endpoint": p.endpoint,
            "token": "token_command" if p.token_command else ("login" if cache_path(p.name).exists() else None),
            "output": p.output,
        }
        for p in load_profiles(path).values()
    ]
    columns = (
        Column("profile", dig("name"), key=True),
        Column("active", lambda p: "*" if p.get("active") else ""),
        Column("endpoint", dig("endpoint"), key=True),
        Column("token", dig("token")),
        Column("output", dig("output")),
    )
    ctx.show(
        {"config": str(path), "items": items},
        columns=columns,
        empty=f"no profiles: {path} does not define any (packyard --help shows the format)",
    )
    return EXIT_OK


def cmd_completion(ctx: Context, args: argparse.Namespace) -> int:
    from packyard_cli.completion import script
    from packyard_cli.parser import build_parser

    sys.stdout.write(script(build_parser(), args.shell))
    return EXIT_OK
