"""A minimal OpenID Connect issuer for the local stack, so ``packyard login`` runs end to end on this machine.

Served by the local HTTP server (:mod:`devstack.server`) under ``/oidc``; its issuer identifier is
``<api url>/oidc``, so discovery is ``<api url>/oidc/.well-known/openid-configuration`` (OpenID Connect Discovery 1.0,
section 4: the issuer followed by ``/.well-known/openid-configuration``). What it does, and nothing more:

* discovery and JWKS (the stack's signing key, :mod:`packyard_cli.tokens`: the same key ``packyard token`` signs with);
* ``authorize``: the authorization code grant with PKCE S256 required (RFC 7636) for the public client
  ``packyard-cli``, whose redirect URI must be a loopback address on any port (RFC 8252 section 7.3). It shows a
  sign-in form: the local user types a name and a tenant and signs in, or refuses (``error=access_denied``, RFC 6749
  section 4.1.2.1). No password: like ``packyard token``, the local issuer trusts whoever is at the keyboard;
* ``token``: ``authorization_code`` (the code once, the same redirect URI, the PKCE verifier), ``refresh_token``
  (rotated on every use; an expired or reused one is ``invalid_grant``) and ``client_credentials`` for the
  confidential client ``packyard-machine`` (its secret in ``<state dir>/oidc-client-secret``, mode 0600);
* ``revoke`` (RFC 7009).

Its access tokens carry the claims of the stack's claim mapping: the local shape (``tenant``, ``scope``, ``actor``,
``aud`` ``packyard``) or, with ``packyard local --idp NAME``, that provider's shape
(:mod:`packyard_cli.identity_providers`). The local server checks them exactly as it checks ``packyard token``'s:
signature, issuer, audience, expiry (:meth:`packyard_cli.tokens.LocalKey.verify`). A token request may name an
``audience`` (as Auth0's does); the issuer signs whatever audience is asked and the API refuses one not its own.

Codes and refresh tokens live in memory: a restarted stack has forgotten them (``packyard login`` again).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import html
import json
import os
import re
import secrets
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit

import jwt

from packyard_cli import tokens
from packyard_cli.identity_providers import CLI_CLIENT, MACHINE_CLIENT, PROVIDERS

ISSUER_PATH = "/oidc"
DISCOVERY_PATH = "/.well-known/openid-configuration"
CLIENT_SECRET_FILE = "oidc-client-secret"
CODE_TTL_SECONDS = 120  # RFC 6749 section 4.1.2: a maximum lifetime of 10 minutes is recommended
ACCESS_TOKEN_TTL_SECONDS = 3600
REFRESH_TOKEN_TTL_SECONDS = 12 * 3600
# The stack's knobs for the lifetimes (``packyard local`` reads them; a test of expiry sets them)
ACCESS_TTL_ENV = "PACKYARD_LOCAL_ACCESS_TOKEN_TTL"
REFRESH_TTL_ENV = "PACKYARD_LOCAL_REFRESH_TOKEN_TTL"
OIDC_SCOPES = ("openid", "offline_access", "profile")
LOOPBACK_HOSTS = frozenset({"127.0.0.1", "[::1]"})
_VERIFIER = re.compile(r"[A-Za-z0-9._~-]{43,128}")  # RFC 7636 section 4.1
_CHALLENGE = re.compile(r"[A-Za-z0-9_-]{43}")  # base64url of a SHA-256 digest, no padding
_USER = re.compile(r"[A-Za-z0-9][A-Za-z0-9._@+-]{0,127}")

Shape = Callable[[str, str, Sequence[str], bool], dict[str, Any]]
Answer = tuple[int, dict[str, str], bytes]


def pkce_challenge(verifier: str) -> str:
    """RFC 7636 section 4.2, S256: BASE64URL-ENCODE(SHA256(ASCII(code_verifier)))."""
    digest = hashlib.sha256(verifier.encode("ascii")).digest()
    return base64.urlsafe_b64encode(digest).decode().rstrip("=")


def local_shape(tenant: str, subject: str, scopes: Sequence[str], owner: bool) -> dict[str, Any]:
    """The claims of the template's default mapping: what ``packyard token`` mints."""
    return {
        "sub": subject,
        "aud": tokens.AUDIENCE,
        "tenant": tenant,
        "scope": " ".join(scopes),
        tokens.ACTOR_CLAIM: "owner" if owner else "workflow",
        "client_id": CLI_CLIENT if owner else MACHINE_CLIENT,
    }


def shape_for(idp: str | None) -> Shape:
    return PROVIDERS[idp].shape if idp else local_shape


def machine_secret(directory: str | Path | None = None) -> str:
    """The secret of the local machine client, created (0600) on first use; two racing creators keep one."""
    root = tokens.state_dir(directory)
    path = root / CLIENT_SECRET_FILE
    if not path.exists():
        root.mkdir(parents=True, exist_ok=True)
        scratch = root / f".{CLIENT_SECRET_FILE}.{uuid.uuid4().hex}"
        fd = os.open(scratch, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as out:
            out.write(secrets.token_urlsafe(32) + "\n")
        try:
            os.link(scratch, path)
        except FileExistsError:
            pass
        finally:
            scratch.unlink()
    return path.read_text("utf-8").strip()


def _ttl(name: str, default: int) -> int:
    value = os.environ.get(name, "")
    return int(value) if value.strip().isdigit() else default


class OAuthError(Exception):
    """An error answer of the token endpoint (RFC 6749 section 5.2) or of authorize (section 4.1.2.1)."""

    def __init__(self, error: str, description: str, status: int = 400) -> None:
        super().__init__(description)
        self.error = error
        self.description = description
        self.status = status


@dataclass(frozen=True)
class Client:
    client_id: str
    secret: str | None  # None: a public client (PKCE, no secret)
    grants: frozenset[str]


@dataclass(frozen=True)
class Grant:
    """What a code or a refresh token stands for: who signed in, for which client, tenant, scopes and audience."""

    client_id: str
    subject: str
    tenant: str
    scopes: tuple[str, ...]
    audience: str | None
    owner: bool
    expires_at: float
    redirect_uri: str = ""
    challenge: str = ""
    nonce: str | None = None


@dataclass
class LocalIssuer:
    key: tokens.LocalKey
    issuer: str  # e.g. http://127.0.0.1:8787/oidc
    machine_secret: str
    shape: Shape = local_shape
    clock: Callable[[], float] = time.time
    access_ttl: int = ACCESS_TOKEN_TTL_SECONDS
    refresh_ttl: int = REFRESH_TOKEN_TTL_SECONDS
    _codes: dict[str, Grant] = field(default_factory=dict, repr=False)
    _refresh: dict[str, Grant] = field(default_factory=dict, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @property
    def clients(self) -> dict[str, Client]:
        return {
            CLI_CLIENT: Client(CLI_CLIENT, None, frozenset({"authorization_code", "refresh_token"})),
            MACHINE_CLIENT: Client(MACHINE_CLIENT, self.machine_secret, frozenset({"client_credentials"})),
        }

    @property
    def path(self) -> str:
        return urlsplit(self.issuer).path

    def handles(self, path: str) -> bool:
        return path == self.path or path.startswith(self.path + "/")

    # ---------------------------------------------------------------- the endpoints

    def serve(self, method: str, path: str, query: str, body: bytes | None, authorization: str = "") -> Answer:
        """One request under the issuer's path; ``authorization``: its Authorization header (a client's Basic)."""
        route = path[len(self.path) :] or "/"
        params = dict(parse_qsl(query, keep_blank_values=True))
        form = dict(parse_qsl((body or b"").decode("utf-8", "replace"), keep_blank_values=True))
        if method in ("GET", "HEAD") and route == DISCOVERY_PATH:
            return _json(200, self.discovery())
        if method in ("GET", "HEAD") and route == "/jwks":
            return _json(200, self.jwks())
        if route == "/authorize" and method in ("GET", "POST"):
            return self.authorize(params if method == "GET" else form, decided=method == "POST")
        if route == "/token" and method == "POST":
            try:
                return _json(200, self.token(form, authorization), no_store=True)
            except OAuthError as exc:
                extra = {"WWW-Authenticate": "Basic"} if exc.status == 401 else {}
                answer = {"error": exc.error, "error_description": exc.description}
                status, out, payload = _json(exc.status, answer, no_store=True)
                return status, {**out, **extra}, payload
        if route == "/revoke" and method == "POST":
            self.revoke(form)
            return 200, {"Cache-Control": "no-store"}, b""
        return _json(404, {"error": "not_found", "error_description": f"the local issuer has no {method} {route}"})

    def discovery(self) -> dict[str, Any]:
        return {
            "issuer": self.issuer,
            "authorization_endpoint": f"{self.issuer}/authorize",
            "token_endpoint": f"{self.issuer}/token",
            "jwks_uri": f"{self.issuer}/jwks",
            "revocation_endpoint": f"{self.issuer}/revoke",
            "response_types_supported": ["code"],
            "grant_types_supported": ["authorization_code", "refresh_token", "client_credentials"],
            "code_challenge_methods_supported": ["S256"],
            "token_endpoint_auth_methods_supported": ["none", "client_secret_basic", "client_secret_post"],
            "scopes_supported": [*OIDC_SCOPES, *tokens.ALL_SCOPES],
            "subject_types_supported": ["public"],
            "id_token_signing_alg_values_supported": [tokens.ALGORITHM],
            "authorization_response_iss_parameter_supported": True,
        }

    def jwks(self) -> dict[str, Any]:
        jwk = jwt.algorithms.RSAAlgorithm.to_jwk(self.key.public_key, as_dict=True)
        return {"keys": [{**jwk, "kid": self.key.kid, "alg": tokens.ALGORITHM, "use": "sig"}]}

    def authorize(self, params: Mapping[str, str], *, decided: bool) -> Answer:
        """GET: the sign-in form for a valid request. POST: the user's decision, answered by a redirect to the
        client's loopback address with a code, or with ``error=access_denied``."""
        client_id, redirect_uri = params.get("client_id", ""), params.get("redirect_uri", "")
        client = self.clients.get(client_id)
        if client is None or "authorization_code" not in client.grants:
            return _page(400, "Unknown client", f"the local issuer has no public client {client_id!r}")
        if not _is_loopback_redirect(redirect_uri):
            # never redirect to an address not registered for the client (RFC 6749 section 4.1.2.1)
            detail = f"redirect_uri must be http://127.0.0.1:PORT/... or http://[::1]:PORT/..., got {redirect_uri!r}"
            return _page(400, "Invalid redirect_uri", detail)
        state = params.get("state")
        try:
            scopes = self._request_scopes(params.get("scope"))
            if params.get("response_type") != "code":
                raise OAuthError("unsupported_response_type", "response_type must be code")
            if params.get("code_challenge_method") != "S256" or not _CHALLENGE.fullmatch(
                params.get("code_challenge", "")
            ):
                raise OAuthError("invalid_request", "PKCE is required: code_challenge with code_challenge_method=S256")
        except OAuthError as exc:
            return _redirect(redirect_uri, {"error": exc.error, "error_description": exc.description, "state": state})
        if not decided:
            return self._form(params, error=None)
        if params.get("decision") != "allow":
            description = "the user refused the sign-in"
            return _redirect(redirect_uri, {"error": "access_denied", "error_description": description, "state": state})
        from packyard.authority import is_tenant_id

        username, tenant = params.get("username", "").strip(), params.get("tenant", "").strip()
        if not _USER.fullmatch(username):
            return self._form(params, error="a user name: letters, digits and . _ @ + -")
        if not is_tenant_id(tenant):
            return self._form(params, error="a tenant id: letters, digits, '.', '_', '-' (at most 128)")
        code = secrets.token_urlsafe(32)
        grant = Grant(
            client_id=client_id,
            subject=username,
            tenant=tenant,
            scopes=scopes,
            audience=params.get("audience") or None,
            owner=True,
            expires_at=self.clock() + CODE_TTL_SECONDS,
            redirect_uri=redirect_uri,
            challenge=params["code_challenge"],
            nonce=params.get("nonce") or None,
        )
        with self._lock:
            self._codes[code] = grant
        return _redirect(redirect_uri, {"code": code, "state": state, "iss": self.issuer})

    def token(self, form: Mapping[str, str], authorization: str) -> dict[str, Any]:
        client = self._client(form, authorization)
        grant_type = form.get("grant_type", "")
        if grant_type not in ("authorization_code", "refresh_token", "client_credentials"):
            raise OAuthError("unsupported_grant_type", f"grant_type {grant_type!r} is not supported")
        if grant_type not in client.grants:
            raise OAuthError("unauthorized_client", f"client {client.client_id!r} may not use {grant_type}")
        if grant_type == "authorization_code":
            return self._issue(self._redeem_code(client, form), refresh=True)
        if grant_type == "refresh_token":
            return self._issue(self._redeem_refresh(client, form), refresh=True)
        tenant = form.get("tenant") or "local"  # a local extension: the machine's tenant (a real IdP maps it)
        from packyard.authority import is_tenant_id

        if not is_tenant_id(tenant):
            raise OAuthError("invalid_request", f"tenant {tenant!r} is not a tenant id")
        machine = Grant(
            client_id=client.client_id,
            subject=client.client_id,
            tenant=tenant,
            scopes=self._request_scopes(form.get("scope")),
            audience=form.get("audience") or None,
            owner=False,
            expires_at=0,
        )
        return self._issue(machine, refresh=False)

    def revoke(self, form: Mapping[str, str]) -> None:
        """RFC 7009: a refresh token is forgotten; anything else (an access token, an unknown value) is ignored."""
        with self._lock:
            self._refresh.pop(form.get("token", ""), None)

    # ---------------------------------------------------------------- the token endpoint's parts

    def _client(self, form: Mapping[str, str], authorization: str) -> Client:
        """RFC 6749 section 2.3.1: HTTP Basic, or client_id/client_secret in the body; a public client by id."""
        client_id, secret = form.get("client_id", ""), form.get("client_secret")
        scheme, _, value = authorization.partition(" ")
        if scheme.lower() == "basic":
            try:
                decoded = base64.b64decode(value.strip(), validate=True).decode("utf-8")
            except (ValueError, UnicodeDecodeError):
                raise OAuthError("invalid_client", "the Basic credentials are not base64", 401) from None
            client_id, _, secret = decoded.partition(":")
        client = self.clients.get(client_id)
        if client is None:
            raise OAuthError("invalid_client", f"unknown client {client_id!r}", 401)
        if client.secret is not None and not hmac.compare_digest((secret or "").encode(), client.secret.encode()):
            raise OAuthError("invalid_client", f"wrong or missing secret for client {client_id!r}", 401)
        return client

    def _redeem_code(self, client: Client, form: Mapping[str, str]) -> Grant:
        with self._lock:
            grant = self._codes.pop(form.get("code", ""), None)  # a code works once
        if grant is None or grant.client_id != client.client_id:
            raise OAuthError("invalid_grant", "the authorization code is unknown, used, or not this client's")
        if self.clock() >= grant.expires_at:
            raise OAuthError("invalid_grant", "the authorization code has expired")
        if form.get("redirect_uri") != grant.redirect_uri:
            raise OAuthError("invalid_grant", "redirect_uri is not the one the code was issued for")
        verifier = form.get("code_verifier", "")
        if not _VERIFIER.fullmatch(verifier):
            raise OAuthError("invalid_grant", "code_verifier must be 43 to 128 unreserved characters (RFC 7636)")
        if not hmac.compare_digest(pkce_challenge(verifier), grant.challenge):
            raise OAuthError("invalid_grant", "code_verifier does not match the code_challenge (PKCE)")
        return grant

    def _redeem_refresh(self, client: Client, form: Mapping[str, str]) -> Grant:
        with self._lock:
            grant = self._refresh.pop(form.get("refresh_token", ""), None)  # rotated: each works once
        if grant is None or grant.client_id != client.client_id:
            raise OAuthError("invalid_grant", "the refresh token is unknown, revoked or already used")
        if self.clock() >= grant.expires_at:
            raise OAuthError("invalid_grant", "the refresh token has expired")
        asked = form.get("scope")
        if asked:
            narrower = tuple(s for s in asked.split() if s in grant.scopes)
            if len(narrower) != len(asked.split()):
                raise OAuthError("invalid_scope", "a refresh may only narrow the scopes first granted")
            grant = replace(grant, scopes=narrower)
        return grant

    def _request_scopes(self, requested: str | None) -> tuple[str, ...]:
        known = (*OIDC_SCOPES, *tokens.ALL_SCOPES)
        if not requested:
            return tuple(tokens.ALL_SCOPES)
        unknown = [s for s in requested.split() if s not in known]
        if unknown:
            raise OAuthError("invalid_scope", f"unknown scope {unknown[0]!r}")
        return tuple(dict.fromkeys(requested.split()))

    def _issue(self, grant: Grant, *, refresh: bool) -> dict[str, Any]:
        now = int(self.clock())
        api_scopes = [s for s in grant.scopes if s in tokens.ALL_SCOPES]
        claims = self.shape(grant.tenant, grant.subject, api_scopes, grant.owner)
        if grant.audience:
            claims["aud"] = grant.audience
        answer: dict[str, Any] = {
            "access_token": self._sign(claims, now, self.access_ttl),
            "token_type": "Bearer",
            "expires_in": self.access_ttl,
            "scope": " ".join(grant.scopes),
        }
        if refresh:
            refresh_token = secrets.token_urlsafe(32)
            with self._lock:
                self._refresh[refresh_token] = replace(grant, expires_at=now + self.refresh_ttl)
            answer["refresh_token"] = refresh_token
        if "openid" in grant.scopes:
            identity = {"sub": grant.subject, "aud": grant.client_id, "tenant": grant.tenant}
            if grant.nonce:
                identity["nonce"] = grant.nonce
            answer["id_token"] = self._sign(identity, now, self.access_ttl)
        return answer

    def _sign(self, claims: Mapping[str, Any], now: int, ttl: int) -> str:
        payload = {"iss": self.issuer, "iat": now, "nbf": now, "exp": now + ttl, "jti": uuid.uuid4().hex, **claims}
        return jwt.encode(payload, self.key.private_key, algorithm=tokens.ALGORITHM, headers={"kid": self.key.kid})

    def _form(self, params: Mapping[str, str], *, error: str | None) -> Answer:
        hidden = "".join(
            f'<input type="hidden" name="{html.escape(k)}" value="{html.escape(v)}">'
            for k, v in params.items()
            if k not in ("username", "tenant", "decision")
        )
        user = html.escape(params.get("username") or params.get("login_hint") or "")
        tenant = html.escape(params.get("tenant") or "local")
        scopes = html.escape(params.get("scope") or " ".join(tokens.ALL_SCOPES))
        note = f'<p role="alert">{html.escape(error)}</p>' if error else ""
        page = (
            "<!doctype html><html><head><meta charset='utf-8'><title>Sign in to the local Packyard</title></head>"
            f"<body><h1>Sign in to the local Packyard</h1>{note}"
            f"<p>{html.escape(params.get('client_id', ''))} asks for: {scopes}</p>"
            f'<form method="post" action="{html.escape(self.path)}/authorize">{hidden}'
            f'<label>User <input name="username" value="{user}" required></label> '
            f'<label>Tenant <input name="tenant" value="{tenant}" required></label> '
            '<button name="decision" value="allow">Sign in</button> '
            '<button name="decision" value="deny">Refuse</button></form></body></html>'
        )
        headers = {"Content-Type": "text/html; charset=utf-8", "Cache-Control": "no-store"}
        return (400 if error else 200), headers, page.encode()


def _is_loopback_redirect(uri: str) -> bool:
    """RFC 8252 section 7.3: http on a loopback IP literal, any port; section 8.3: not ``localhost``."""
    try:
        parts = urlsplit(uri)
        port = parts.port
    except ValueError:
        return False
    return parts.scheme == "http" and parts.netloc.rsplit(":", 1)[0] in LOOPBACK_HOSTS and port is not None


def _json(status: int, body: Mapping[str, Any], *, no_store: bool = False) -> Answer:
    headers = {"Content-Type": "application/json"}
    if no_store:
        headers["Cache-Control"] = "no-store"  # RFC 6749 section 5.1
    return status, headers, json.dumps(body).encode()


def _redirect(uri: str, params: Mapping[str, str | None]) -> Answer:
    query = urlencode({k: v for k, v in params.items() if v is not None})
    return 302, {"Location": f"{uri}{'&' if '?' in uri else '?'}{query}", "Cache-Control": "no-store"}, b""


def _page(status: int, title: str, detail: str) -> Answer:
    page = f"<!doctype html><html><body><h1>{html.escape(title)}</h1><p>{html.escape(detail)}</p></body></html>"
    return status, {"Content-Type": "text/html; charset=utf-8"}, page.encode()


def issuer_for(
    key: tokens.LocalKey, base_url: str, *, state_dir: str | Path | None = None, idp: str | None = None
) -> LocalIssuer:
    """The local stack's issuer at ``<base_url>/oidc``, reading the claim shape of ``idp`` and the token lifetimes
    of ``PACKYARD_LOCAL_ACCESS_TOKEN_TTL`` / ``PACKYARD_LOCAL_REFRESH_TOKEN_TTL`` (seconds)."""
    return LocalIssuer(
        key=key,
        issuer=base_url.rstrip("/") + ISSUER_PATH,
        machine_secret=machine_secret(state_dir),
        shape=shape_for(idp),
        access_ttl=_ttl(ACCESS_TTL_ENV, ACCESS_TOKEN_TTL_SECONDS),
        refresh_ttl=_ttl(REFRESH_TTL_ENV, REFRESH_TOKEN_TTL_SECONDS),
    )
