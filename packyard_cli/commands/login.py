"""``packyard login`` (a person through the browser, or ``--client-credentials`` for a machine) and ``packyard
logout``: the tokens of an OpenID Connect issuer, cached per profile (:mod:`packyard_cli.credentials`,
:mod:`packyard_cli.oidc`)."""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import time
from typing import Any

from packyard_cli.client import EXIT_OK, EXIT_USAGE, CliError
from packyard_cli.commands.context import Context, is_local
from packyard_cli.output import Column, dig

LOCAL_ISSUER_PATH = "/oidc"  # devstack.oidc.ISSUER_PATH (the CLI does not import devstack)
LOCAL_PERSON_CLIENT = "packyard-cli"
LOCAL_MACHINE_CLIENT = "packyard-machine"
PERSON_SCOPES = ("openid", "offline_access")


def _issuer_url(ctx: Context, args: argparse.Namespace) -> str:
    chosen = args.issuer or os.environ.get("PACKYARD_ISSUER") or ctx.profile.issuer
    if chosen:
        return str(chosen).rstrip("/")
    if is_local(ctx.endpoint):
        return ctx.endpoint.rstrip("/") + LOCAL_ISSUER_PATH  # the local stack's own issuer
    raise CliError(
        "which identity provider?",
        detail="pass --issuer URL, or set issuer (and client_id) in the profile (packyard --help shows the file)",
        exit_code=EXIT_USAGE,
    )


def _client_id(ctx: Context, args: argparse.Namespace, issuer: str) -> str:
    chosen = args.client_id or os.environ.get("PACKYARD_CLIENT_ID") or ctx.profile.client_id
    if chosen:
        return str(chosen)
    if is_local(issuer):
        return LOCAL_MACHINE_CLIENT if args.client_credentials else LOCAL_PERSON_CLIENT
    raise CliError(
        "which client?",
        detail="pass --client-id ID, or set client_id in the profile: the app client registered for Packyard",
        exit_code=EXIT_USAGE,
    )


def _scopes(ctx: Context, args: argparse.Namespace) -> list[str]:
    from packyard_cli.tokens import ALL_SCOPES

    """--scope, else the profile's scopes, exactly as given (Cognito refuses a scope it does not know, such as
    offline_access); else every Packyard scope, and for a person openid offline_access (Okta, Auth0 and Entra ID
    issue a refresh token only for offline_access)."""
    asked = [s for value in args.scope or [] for s in value.split()]
    if not asked and ctx.profile.scopes:
        asked = ctx.profile.scopes.split()
    if asked:
        return asked
    return list(ALL_SCOPES) if args.client_credentials else [*PERSON_SCOPES, *ALL_SCOPES]


def cmd_login(ctx: Context, args: argparse.Namespace) -> int:
    from packyard_cli import credentials, oidc

    if args.client_secret_file and not args.client_credentials:
        raise CliError("--client-secret-file is for --client-credentials", exit_code=EXIT_USAGE)
    endpoint = ctx.endpoint
    issuer_url = _issuer_url(ctx, args)
    client_id = _client_id(ctx, args, issuer_url)
    scopes = _scopes(ctx, args)
    audience = args.audience or ctx.profile.audience
    # the local issuer takes a tenant (a real one maps the user or the client to it)
    tenant = (args.tenant or os.environ.get("PACKYARD_TENANT") or ctx.profile.tenant) if is_local(issuer_url) else None
    issuer = oidc.discover(issuer_url)
    if args.client_credentials:
        signed_in = oidc.client_credentials(
            issuer,
            endpoint=endpoint,
            client_id=client_id,
            secret_env=args.client_secret_env,
            secret_file=args.client_secret_file,
            scopes=scopes,
            audience=audience,
            tenant=tenant,
        )
    else:
        signed_in = oidc.authorization_code(
            issuer,
            endpoint=endpoint,
            client_id=client_id,
            scopes=scopes,
            show=lambda url: _show(url, open_browser=not args.no_browser),
            audience=audience,
            tenant=tenant,
            timeout=args.timeout,
            redirect_uri=args.redirect_uri or ctx.profile.redirect_uri,
        )
    path = credentials.cache_path(ctx.profile.name)
    credentials.save(path, signed_in)
    until = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(signed_in.expires_at))
    body: dict[str, Any] = {
        "profile": ctx.profile.name,
        "endpoint": endpoint,
        "issuer": signed_in.issuer,
        "clientId": client_id,
        "grant": signed_in.grant,
        "scope": signed_in.scope,
        "expiresAt": until,
        "refreshable": bool(signed_in.refresh_token or signed_in.secret_env or signed_in.secret_file),
        "cache": str(path),
    }

    def render() -> None:
        who = "a machine (client credentials)" if args.client_credentials else "you"
        ctx.out.print(f"signed in {who} to {signed_in.issuer} for {endpoint}", highlight=False, soft_wrap=True)
        ctx.out.print(
            f"token cached in {path} until {until} (renewed before it expires); packyard whoami shows what the "
            "service reads from it",
            highlight=False,
            soft_wrap=True,
        )

    ctx.show(body, render=render, columns=(Column("issuer", dig("issuer"), key=True), Column("cache", dig("cache"))))
    return EXIT_OK


def _show(url: str, *, open_browser: bool) -> None:
    # plain stderr, never wrapped: the address must stay copyable (and a test reads it)
    print(f"Open this address in a browser to sign in:\n  {url}", file=sys.stderr, flush=True)
    if open_browser:
        import webbrowser

        with contextlib.suppress(webbrowser.Error, OSError):  # no browser here: the printed address is the way
            webbrowser.open(url)
    print("waiting for the sign-in…", file=sys.stderr, flush=True)


def cmd_logout(ctx: Context, args: argparse.Namespace) -> int:
    from packyard_cli import credentials, oidc

    path = credentials.cache_path(ctx.profile.name)
    revoked: str | None = None
    try:
        cached = credentials.load(path)
    except CliError:
        cached = None  # unreadable or loose: removed all the same
    if cached is not None:
        problem = oidc.revoke(cached)
        revoked = "revoked" if problem is None else f"not revoked: {problem}"
    removed = credentials.remove(path)
    body = {"profile": ctx.profile.name, "removed": removed, "cache": str(path), "revocation": revoked}

    def render() -> None:
        if removed:
            note = f" (refresh token {revoked})" if revoked else ""
            ctx.out.print(f"signed out of profile {ctx.profile.name}: removed {path}{note}", highlight=False)
        else:
            ctx.out.print(f"profile {ctx.profile.name} was not signed in (no {path})", highlight=False)

    ctx.show(body, render=render, columns=(Column("cache", dig("cache"), key=True),))
    return EXIT_OK
