"""``packyard local`` (the whole stack on this machine) and ``packyard token`` (a token signed with its local key)."""

from __future__ import annotations

import argparse
import os
import sys

from packyard_cli.client import EXIT_OK, EXIT_USAGE
from packyard_cli.commands.context import Context
from packyard_cli.output import Column, dig


def cmd_local(ctx: Context, args: argparse.Namespace) -> int:
    from packyard_cli.ports import PortInUse, bind_ports

    try:
        sockets = bind_ports(args.host, args.api_port, args.aws_port)
    except PortInUse as exc:
        print(f"packyard local: {exc}", file=sys.stderr)
        return EXIT_USAGE
    from devstack.local import exit_now, serve  # moto and the stack load only after the ports are ours

    exit_now(serve(args, sockets))
    return EXIT_OK  # not reached


def cmd_token(ctx: Context, args: argparse.Namespace) -> int:
    from packyard_cli import tokens

    key = tokens.load_or_create_key(args.state_dir)
    scopes = [s for value in args.scope or [] for s in value.split()] or list(tokens.DEFAULT_SCOPES)
    tenant = args.tenant or os.environ.get("PACKYARD_TENANT") or ctx.profile.tenant or "local"
    like = getattr(args, "like", None)
    if like:
        from packyard_cli.identity_providers import PROVIDERS

        shaped = PROVIDERS[like].shape(tenant, args.subject, scopes, args.actor == "owner")
        token = key.mint_claims(shaped, ttl_seconds=args.ttl)
    else:
        token = key.mint(tenant=tenant, subject=args.subject, scopes=scopes, ttl_seconds=args.ttl, actor=args.actor)
    body = {
        "token": token,
        "tenant": tenant,
        "subject": args.subject,
        "actor": args.actor,
        "scopes": scopes,
        "expiresIn": args.ttl,
    }
    columns = (Column("token", dig("token"), key=True),)
    ctx.show(body, render=lambda: print(token), columns=columns)
    return EXIT_OK
