"""The local stack's signing key and the tokens it accepts (local only: a deployment trusts its own IdP).

The local stack checks what the deployed HTTP API's JWT authorizer checks: an RS256 signature, ``iss``, ``aud``,
``exp`` (and ``nbf``/``iat`` when present); the handler then reads the ``tenant`` claim. The key pair is created
on first use and kept in the local state directory (``PACKYARD_LOCAL_DIR``, default ``<repo>/.packyard-local``),
so the server and ``packyard token`` agree across restarts. This module needs only PyJWT and cryptography: the
CLI imports it without pulling in moto.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

ALGORITHM = "RS256"
ISSUER = "https://packyard.local/"
AUDIENCE = "packyard"
# JwtAudience of the local authorizer: its own audience and the client ids of tokens shaped like an identity
# provider's (packyard_cli.identity_providers); a token without ``aud`` is matched by ``client_id`` as on AWS
AUDIENCES = (AUDIENCE, "packyard-cli", "packyard-machine")
# Every scope the service knows: a locally minted token may do everything unless --scope narrows it.
ALL_SCOPES = (
    "packages:read",
    "packages:publish",
    "packages:yank",
    "workspaces:read",
    "installations:write",
    "approvals:write",
    "usage:read",
)
DEFAULT_SCOPES = ALL_SCOPES
# The claim saying whether the caller is a person (owner: its installs are granted what the release declares) or an
# automation (workflow: widening grants needs an owner's consent). Locally minted tokens are owners unless asked.
ACTOR_CLAIM = "actor"
ACTORS = ("owner", "workflow")
DEFAULT_ACTOR = "owner"
DEFAULT_TTL_SECONDS = 3600
PRIVATE_KEY_FILE = "jwt-private.pem"
PUBLIC_KEY_FILE = "jwt-public.pem"
STATE_FILE = "local.json"

_REPO_ROOT = Path(__file__).resolve().parent.parent


def state_dir(explicit: str | Path | None = None) -> Path:
    """Where the local stack keeps its key and the address it serves on."""
    if explicit:
        return Path(explicit)
    env = os.environ.get("PACKYARD_LOCAL_DIR")
    return Path(env) if env else _REPO_ROOT / ".packyard-local"


class InvalidToken(Exception):
    """A bearer token the local authorizer refuses; the message says why (never the token itself)."""


@dataclass(frozen=True)
class LocalKey:
    """The local issuer's RSA key pair (PEM, and the loaded keys so signing does not parse PEM again)."""

    private_pem: bytes
    public_pem: bytes
    kid: str
    private_key: Any = None
    public_key: Any = None

    def mint(
        self,
        *,
        tenant: str,
        subject: str,
        scopes: Iterable[str] = DEFAULT_SCOPES,
        ttl_seconds: int = DEFAULT_TTL_SECONDS,
        tenant_claim: str = "tenant",
        actor: str | None = DEFAULT_ACTOR,
        extra: Mapping[str, Any] | None = None,
        now: int | None = None,
    ) -> str:
        issued = int(time.time()) if now is None else now
        claims: dict[str, Any] = {
            "iss": ISSUER,
            "aud": AUDIENCE,
            "sub": subject,
            tenant_claim: tenant,
            "scope": " ".join(scopes),
            "iat": issued,
            "nbf": issued,
            "exp": issued + ttl_seconds,
            "jti": uuid.uuid4().hex,
            **({ACTOR_CLAIM: actor} if actor else {}),
            **(extra or {}),
        }
        signing_key = self.private_key if self.private_key is not None else self.private_pem
        return jwt.encode(claims, signing_key, algorithm=ALGORITHM, headers={"kid": self.kid})

    def mint_claims(self, claims: Mapping[str, Any], *, ttl_seconds: int = DEFAULT_TTL_SECONDS) -> str:
        """A token of the local issuer carrying ``claims`` (a provider's shape) and a lifetime of ``ttl_seconds``."""
        issued = int(time.time())
        payload = {"iss": ISSUER, "iat": issued, "exp": issued + ttl_seconds, "jti": uuid.uuid4().hex, **claims}
        signing_key = self.private_key if self.private_key is not None else self.private_pem
        return jwt.encode(payload, signing_key, algorithm=ALGORITHM, headers={"kid": self.kid})

    def verify(self, token: str, issuers: Sequence[str] = (ISSUER,)) -> dict[str, Any]:
        """The token's claims if the deployed authorizer would accept it, else :class:`InvalidToken`. ``issuers``:
        the local stack trusts ``packyard token``'s issuer and its OpenID Connect issuer's (:mod:`devstack.oidc`),
        both signing with this key."""
        try:
            claims: dict[str, Any] = jwt.decode(
                token,
                self.public_key if self.public_key is not None else self.public_pem,
                algorithms=[ALGORITHM],
                issuer=list(issuers),
                options={"require": ["exp", "iss"], "verify_aud": False},
                leeway=5,
            )
        except jwt.ExpiredSignatureError:
            raise InvalidToken("the token has expired") from None
        except jwt.InvalidAudienceError:
            raise InvalidToken(f"the token's audience is not {AUDIENCE!r}") from None
        except jwt.InvalidIssuerError:
            raise InvalidToken(f"the token's issuer is not {' or '.join(map(repr, issuers))}") from None
        except jwt.InvalidSignatureError:
            raise InvalidToken("the token's signature does not match the local key") from None
        except jwt.PyJWTError as exc:
            raise InvalidToken(f"the token is not valid: {exc}") from None
        # API Gateway's JWT authorizer: aud must match one of the audiences; a token without aud, its client_id
        audience = claims.get("aud", claims.get("client_id"))
        audiences = audience if isinstance(audience, list) else [audience]
        if not any(isinstance(value, str) and value in AUDIENCES for value in audiences):
            raise InvalidToken(f"the token's audience is not {AUDIENCE!r}")
        return claims


def load_or_create_key(directory: str | Path | None = None) -> LocalKey:
    """The key pair in ``directory``; created (0600) if absent. Two racing creators end up with one key."""
    root = state_dir(directory)
    private_path = root / PRIVATE_KEY_FILE
    if not private_path.exists():
        root.mkdir(parents=True, exist_ok=True)
        key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        pem = key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
        scratch = root / f".{PRIVATE_KEY_FILE}.{uuid.uuid4().hex}"
        fd = os.open(scratch, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as out:
            out.write(pem)
        try:
            os.link(scratch, private_path)  # fails if another process created the key first: keep theirs
        except FileExistsError:
            pass
        finally:
            scratch.unlink()
    private_pem = private_path.read_bytes()
    # our own key, generated above: skip the (slow) RSA consistency checks on every CLI start
    private_key = serialization.load_pem_private_key(private_pem, password=None, unsafe_skip_rsa_key_validation=True)
    public_pem = private_key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    public_path = root / PUBLIC_KEY_FILE
    if not public_path.exists() or public_path.read_bytes() != public_pem:
        public_path.write_bytes(public_pem)
    kid = jwt.utils.base64url_encode(hashlib.sha256(public_pem).digest()[:12]).decode()
    return LocalKey(
        private_pem=private_pem,
        public_pem=public_pem,
        kid=kid,
        private_key=private_key,
        public_key=private_key.public_key(),
    )


def load_key(directory: str | Path | None = None) -> LocalKey | None:
    """The existing key pair, or None when no local stack (or token command) has created one here."""
    if not (state_dir(directory) / PRIVATE_KEY_FILE).exists():
        return None
    return load_or_create_key(directory)


# ------------------------------------------------------------------ where the running local stack listens


def write_state(directory: str | Path | None, values: Mapping[str, Any]) -> Path:
    root = state_dir(directory)
    root.mkdir(parents=True, exist_ok=True)
    path = root / STATE_FILE
    scratch = root / f".{STATE_FILE}.{uuid.uuid4().hex}"
    scratch.write_text(json.dumps(dict(values), indent=2) + "\n", "utf-8")
    os.replace(scratch, path)
    return path


def read_state(directory: str | Path | None = None) -> dict[str, Any] | None:
    try:
        value = json.loads((state_dir(directory) / STATE_FILE).read_text("utf-8"))
    except (OSError, ValueError):
        return None
    return value if isinstance(value, dict) else None


def clear_state(directory: str | Path | None, pid: int) -> None:
    """Remove the state file if it is still ours (a newer stack may have replaced it)."""
    current = read_state(directory)
    if current is not None and current.get("pid") == pid:
        (state_dir(directory) / STATE_FILE).unlink(missing_ok=True)
