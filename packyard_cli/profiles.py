"""Named profiles in a config file, for deployed stacks (the ``aws`` CLI's ``--profile``).

The file is TOML, at ``$PACKYARD_CONFIG_FILE``, else ``$XDG_CONFIG_HOME/packyard/config.toml``, else
``~/.config/packyard/config.toml``::

    [profiles.default]                 # used when no --profile / $PACKYARD_PROFILE is given
    output = "table"

    [profiles.prod]
    endpoint = "https://abc123.execute-api.eu-west-1.amazonaws.com"
    token_command = "my-idp-login --print-access-token"    # run by /bin/sh; its stdout is the bearer token
    output = "json"

    [profiles.sso]
    endpoint = "https://abc123.execute-api.eu-west-1.amazonaws.com"
    issuer = "https://cognito-idp.eu-west-1.amazonaws.com/eu-west-1_AbCdEf"   # packyard login signs in here
    client_id = "1example23456789"
    scopes = "https://packyard.example/packages:read https://packyard.example/packages:publish"

Keys: ``endpoint``, ``token_command``, ``output`` (table, json, tsv), ``tenant`` (tokens minted for the local
stack), and for ``packyard login``: ``issuer``, ``client_id``, ``scopes`` (space separated), ``audience``,
``redirect_uri``. Flags win over environment variables, which win over the profile (as with ``aws``).
"""

from __future__ import annotations

import difflib
import os
import subprocess
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from packyard_cli.client import EXIT_UNAUTHORIZED, EXIT_USAGE, CliError
from packyard_cli.output import FORMATS

KEYS = ("endpoint", "token_command", "output", "tenant", "issuer", "client_id", "scopes", "audience", "redirect_uri")
DEFAULT_PROFILE = "default"
TOKEN_COMMAND_TIMEOUT = 60.0


@dataclass(frozen=True)
class Profile:
    name: str
    endpoint: str | None = None
    token_command: str | None = None
    output: str | None = None
    tenant: str | None = None
    issuer: str | None = None  # packyard login: the OpenID Connect issuer, its app client, scopes and audience
    client_id: str | None = None
    scopes: str | None = None
    audience: str | None = None
    redirect_uri: str | None = None
    source: Path | None = None


def config_path() -> Path:
    explicit = os.environ.get("PACKYARD_CONFIG_FILE")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "packyard" / "config.toml"


def _usage(title: str, detail: str | None = None) -> CliError:
    return CliError(title, detail=detail, exit_code=EXIT_USAGE)


def load_profiles(path: Path | None = None) -> dict[str, Profile]:
    """Every profile in the config file ({} when there is no file)."""
    path = path or config_path()
    try:
        raw = tomllib.loads(path.read_text("utf-8"))
    except FileNotFoundError:
        return {}
    except (OSError, UnicodeDecodeError) as exc:
        raise _usage(f"cannot read {path}", str(exc)) from None
    except tomllib.TOMLDecodeError as exc:
        raise _usage(f"{path} is not valid TOML", str(exc)) from None
    unknown = sorted(set(raw) - {"profiles"})
    if unknown:
        raise _usage(f"{path}: unknown table {unknown[0]!r}", "profiles live in [profiles.NAME] tables")
    tables = raw.get("profiles", {})
    if not isinstance(tables, dict):
        raise _usage(f"{path}: 'profiles' must be a table of [profiles.NAME] tables")
    return {name: _profile(name, values, path) for name, values in tables.items()}


def _profile(name: str, values: Any, path: Path) -> Profile:
    where = f"{path}: [profiles.{name}]"
    if not isinstance(values, dict):
        raise _usage(f"{where} must be a table")
    unknown = sorted(set(values) - set(KEYS))
    if unknown:
        guess = difflib.get_close_matches(unknown[0], KEYS, n=1)
        raise _usage(
            f"{where}: unknown key {unknown[0]!r}" + (f" (did you mean {guess[0]!r}?)" if guess else ""),
            f"the keys are {', '.join(KEYS)}",
        )
    for key, value in values.items():
        if not isinstance(value, str) or not value:
            raise _usage(f"{where}: {key} must be a non-empty string")
    if values.get("output") and values["output"] not in FORMATS:
        raise _usage(f"{where}: output must be one of {', '.join(FORMATS)}")
    return Profile(name=name, source=path, **{k: values.get(k) for k in KEYS})


def select(explicit: str | None) -> Profile:
    """The profile named by ``--profile`` or ``$PACKYARD_PROFILE``, else ``default`` (an empty one if undefined)."""
    name = explicit or os.environ.get("PACKYARD_PROFILE") or None
    profiles = load_profiles()
    if name is None:
        return profiles.get(DEFAULT_PROFILE, Profile(DEFAULT_PROFILE))
    if name in profiles:
        return profiles[name]
    if name == DEFAULT_PROFILE:
        return Profile(DEFAULT_PROFILE)
    guess = difflib.get_close_matches(name, list(profiles), n=1)
    known = ", ".join(sorted(profiles)) or "none"
    raise _usage(
        f"no profile {name!r} in {config_path()}" + (f" (did you mean {guess[0]!r}?)" if guess else ""),
        f"profiles there: {known}",
    )


def run_token_command(profile: Profile) -> str:
    """The profile's token: the stdout of its ``token_command`` (run by /bin/sh), stripped."""
    assert profile.token_command
    try:
        done = subprocess.run(
            profile.token_command,
            shell=True,  # the user's own config: pipes and quoting as they typed them
            capture_output=True,
            text=True,
            timeout=TOKEN_COMMAND_TIMEOUT,
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise CliError(
            f"the token command of profile {profile.name!r} did not finish in {TOKEN_COMMAND_TIMEOUT:.0f}s",
            exit_code=EXIT_UNAUTHORIZED,
        ) from None
    token = done.stdout.strip()
    if done.returncode != 0 or not token:
        why = done.stderr.strip().splitlines()[-1:] or [f"exit {done.returncode}, no output"]
        raise CliError(
            f"the token command of profile {profile.name!r} failed",
            detail=f"{profile.token_command}: {why[0]}",
            exit_code=EXIT_UNAUTHORIZED,
        )
    return token
