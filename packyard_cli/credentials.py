"""Tokens ``packyard login`` got, cached per profile, and renewed before they expire.

The cache of profile ``NAME`` is ``$XDG_CONFIG_HOME/packyard/credentials/NAME.json`` (else
``~/.config/packyard/credentials/NAME.json``): next to the profiles, as ``gh`` keeps its tokens in
``~/.config/gh``. The folder is made 0700 and each file 0600; a cache file that others may read or write (or that
another user owns) is refused with the command that fixes it. The file never holds a client secret: a
``--client-credentials`` login records where its secret comes from (an environment variable's name, or a file's path)
so the CLI can ask for a new token when the old one expires.

A cached token is used only against the endpoint it was got for (a token for a deployment is never sent to the local
stack, nor the other way round), and is renewed when it has less than :data:`REFRESH_MARGIN_SECONDS` left: with the
refresh token (``refresh_token`` grant; the new refresh token replaces the old, as issuers rotate them), or for a
machine with its client credentials again. Two CLI runs renewing at once take turns on a lock file, so a rotated
refresh token is never spent twice.
"""

from __future__ import annotations

import contextlib
import json
import os
import stat
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path
from typing import Any
from urllib.parse import quote

from packyard_cli.client import EXIT_UNAUTHORIZED, EXIT_USAGE, CliError

REFRESH_MARGIN_SECONDS = 60
SCHEMA_VERSION = 1


@dataclass(frozen=True)
class Credentials:
    """One profile's sign-in: where it came from, the tokens, and when the access token expires (epoch seconds)."""

    endpoint: str
    issuer: str
    client_id: str
    token_endpoint: str
    grant: str  # authorization_code (a person) or client_credentials (a machine)
    access_token: str
    expires_at: float
    scope: str = ""
    refresh_token: str | None = None
    revocation_endpoint: str | None = None
    audience: str | None = None
    tenant: str | None = None  # the local issuer's tenant of a machine (its token request's ``tenant``)
    secret_env: str | None = None  # a machine's secret: the environment variable it is read from …
    secret_file: str | None = None  # … or the file

    def fresh(self, now: float) -> bool:
        return self.expires_at - now > REFRESH_MARGIN_SECONDS

    def as_json(self) -> dict[str, Any]:
        return {"schemaVersion": SCHEMA_VERSION, **{k: v for k, v in asdict(self).items() if v is not None}}


def credentials_dir() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "packyard" / "credentials"


def cache_path(profile: str) -> Path:
    """The profile's cache file (a profile name is percent-encoded: never a path of its own)."""
    return credentials_dir() / f"{quote(profile, safe='')}.json"


def save(path: Path, credentials: Credentials) -> None:
    """Write atomically, 0600, in a 0700 folder."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    scratch = path.parent / f".{path.name}.{uuid.uuid4().hex}"
    fd = os.open(scratch, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        json.dump(credentials.as_json(), out, indent=2)
        out.write("\n")
    os.replace(scratch, path)


def check_private(path: Path) -> None:
    """Refuse a cache file others may read or write, or that is not the user's own, saying how to fix it."""
    info = path.stat()
    if hasattr(os, "geteuid") and info.st_uid != os.geteuid():
        raise CliError(
            f"{path} belongs to another user",
            detail=f"remove it (rm {path}) and run packyard login again",
            exit_code=EXIT_USAGE,
        )
    loose = stat.S_IMODE(info.st_mode) & 0o077
    if loose:
        raise CliError(
            f"{path} holds tokens and is readable or writable by others (mode {stat.S_IMODE(info.st_mode):04o})",
            detail=f"run: chmod 600 {path}",
            exit_code=EXIT_USAGE,
        )


def load(path: Path) -> Credentials | None:
    """The cached sign-in, or None when there is none; a loose or unreadable file is refused."""
    try:
        check_private(path)
        raw = json.loads(path.read_text("utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise CliError(
            f"cannot read the cached sign-in {path}",
            detail=f"{exc}; remove it (packyard logout) and run packyard login again",
            exit_code=EXIT_USAGE,
        ) from None
    known = {f.name for f in fields(Credentials)}
    values = {k: v for k, v in raw.items() if k in known} if isinstance(raw, dict) else {}
    if raw.get("schemaVersion") != SCHEMA_VERSION or not {"endpoint", "access_token", "expires_at"} <= set(values):
        raise CliError(
            f"{path} is not a sign-in this CLI wrote",
            detail="run packyard logout, then packyard login",
            exit_code=EXIT_USAGE,
        )
    return Credentials(**values)


@contextlib.contextmanager
def locked(path: Path) -> Iterator[None]:
    """One renewal at a time per cache file (an advisory lock on ``<file>.lock``; none where fcntl is missing)."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    try:
        import fcntl
    except ImportError:  # pragma: no cover - not POSIX
        yield
        return
    fd = os.open(path.parent / f"{path.name}.lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def remove(path: Path) -> bool:
    try:
        path.unlink()
    except FileNotFoundError:
        return False
    (path.parent / f"{path.name}.lock").unlink(missing_ok=True)
    return True


def token_for(
    profile: str,
    endpoint: str,
    *,
    renew: Callable[[Credentials], Credentials] | None = None,
    now: Callable[[], float] = time.time,
) -> str | None:
    """The profile's cached access token for ``endpoint`` (renewed first when it is about to expire), or None when
    the profile has no sign-in for that endpoint."""
    path = cache_path(profile)
    cached = load(path)
    if cached is None or cached.endpoint.rstrip("/") != endpoint.rstrip("/"):
        return None
    if cached.fresh(now()):
        return cached.access_token
    with locked(path):
        cached = load(path)  # another run may have renewed it while this one waited
        if cached is None:
            return None
        if not cached.fresh(now()):
            if renew is None:
                from packyard_cli.oidc import renew as renew_with_issuer

                renew = renew_with_issuer
            cached = renew(cached)
            save(path, cached)
    return cached.access_token


def expired(credentials: Credentials, why: str) -> CliError:
    """The sign-in cannot be renewed: say what to run."""
    again = "packyard login --client-credentials" if credentials.grant == "client_credentials" else "packyard login"
    return CliError(
        "your sign-in has expired",
        code="login_required",
        detail=f"{why}; run {again}",
        exit_code=EXIT_UNAUTHORIZED,
    )


__all__ = ["Credentials", "cache_path", "check_private", "load", "remove", "replace", "save", "token_for"]
