"""Signing in with OAuth 2.0 / OpenID Connect: discovery, the authorization code grant with PKCE through a loopback
redirect (people), client credentials (machines), refresh and revocation.

* Discovery: ``<issuer>/.well-known/openid-configuration`` (OpenID Connect Discovery 1.0 section 4); the document's
  ``issuer`` must be the one asked for (section 4.3), else its endpoints are not trusted.
* People: RFC 8252 (OAuth 2.0 for native apps). A one-shot HTTP listener on ``127.0.0.1`` on a port the OS picks
  receives the redirect (section 7.3); the request carries a fresh ``state`` (checked on the way back: a mismatch is
  refused, RFC 6749 section 10.12) and a PKCE S256 challenge (RFC 7636); the code is exchanged with its verifier.
* Machines: the client credentials grant (RFC 6749 section 4.4), the secret sent with HTTP Basic. It comes from an
  environment variable or a file, never from the command line (where ``ps`` and shell history would show it).

Errors say what to do next; none prints a token or a secret.
"""

from __future__ import annotations

import base64
import hashlib
import html
import os
import secrets
import socket
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit

import requests

from packyard_cli import __version__
from packyard_cli.client import EXIT_UNAUTHORIZED, EXIT_UNAVAILABLE, EXIT_USAGE, CliError
from packyard_cli.credentials import Credentials, expired

DISCOVERY_PATH = "/.well-known/openid-configuration"
CALLBACK_PATH = "/callback"
DEFAULT_SECRET_ENV = "PACKYARD_CLIENT_SECRET"
HTTP_TIMEOUT = 30.0


def new_verifier() -> str:
    """A PKCE code verifier: 64 random bytes, base64url (86 characters; RFC 7636 section 4.1 allows 43 to 128)."""
    return secrets.token_urlsafe(64)


def challenge_of(verifier: str) -> str:
    """RFC 7636 section 4.2, S256."""
    return base64.urlsafe_b64encode(hashlib.sha256(verifier.encode("ascii")).digest()).decode().rstrip("=")


@dataclass(frozen=True)
class Issuer:
    """The endpoints an issuer's discovery document names."""

    issuer: str
    authorization_endpoint: str | None
    token_endpoint: str
    revocation_endpoint: str | None = None


def _session() -> requests.Session:
    session = requests.Session()
    session.headers["User-Agent"] = f"packyard-cli/{__version__}"
    return session


def _unreachable(url: str, exc: Exception) -> CliError:
    origin = "{0.scheme}://{0.netloc}".format(urlsplit(url))
    return CliError(
        "the identity provider is unreachable",
        code="unavailable",
        detail=f"cannot reach {origin} ({type(exc).__name__}); check --issuer and try again",
        exit_code=EXIT_UNAVAILABLE,
    )


def discover(issuer: str, session: requests.Session | None = None) -> Issuer:
    """The issuer's endpoints, from its discovery document."""
    url = issuer.rstrip("/") + DISCOVERY_PATH
    session = session or _session()
    try:
        response = session.get(url, timeout=HTTP_TIMEOUT, headers={"Accept": "application/json"})
    except requests.RequestException as exc:
        raise _unreachable(url, exc) from None
    try:
        document = response.json() if response.ok else None
    except ValueError:
        document = None
    if not isinstance(document, dict) or not isinstance(document.get("token_endpoint"), str):
        raise CliError(
            f"{issuer} is not an OpenID Connect issuer",
            detail=f"GET {url} answered {response.status_code} without a discovery document; check --issuer "
            "(or the profile's issuer)",
            exit_code=EXIT_USAGE,
        )
    if str(document.get("issuer", "")).rstrip("/") != issuer.rstrip("/"):
        raise CliError(
            "the discovery document names another issuer",
            detail=f"asked {issuer!r}, it says {document.get('issuer')!r} (OpenID Connect Discovery 4.3); use that "
            "issuer if you trust it",
            exit_code=EXIT_USAGE,
        )
    return Issuer(
        issuer=str(document["issuer"]),
        authorization_endpoint=document.get("authorization_endpoint"),
        token_endpoint=document["token_endpoint"],
        revocation_endpoint=document.get("revocation_endpoint"),
    )


# ------------------------------------------------------------------ the token endpoint


def _token_request(
    issuer: Issuer,
    form: Mapping[str, str | None],
    *,
    auth: tuple[str, str] | None = None,
    session: requests.Session | None = None,
) -> dict[str, Any]:
    """POST to the token endpoint; a 200 answer's JSON, else :class:`TokenRefused`."""
    session = session or _session()
    try:
        response = session.post(
            issuer.token_endpoint,
            data={k: v for k, v in form.items() if v is not None},
            auth=auth,
            headers={"Accept": "application/json"},
            timeout=HTTP_TIMEOUT,
        )
    except requests.RequestException as exc:
        raise _unreachable(issuer.token_endpoint, exc) from None
    try:
        body = response.json()
    except ValueError:
        body = None
    if response.status_code == 200 and isinstance(body, dict) and isinstance(body.get("access_token"), str):
        return body
    error = body.get("error") if isinstance(body, dict) else None
    description = body.get("error_description") if isinstance(body, dict) else None
    raise TokenRefused(str(error or f"http_{response.status_code}"), str(description or response.reason or ""))


class TokenRefused(Exception):
    def __init__(self, error: str, description: str) -> None:
        super().__init__(f"{error}: {description}" if description else error)
        self.error = error
        self.description = description


def _refused(what: str, exc: TokenRefused, next_step: str) -> CliError:
    return CliError(what, code=exc.error, detail=f"{exc}; {next_step}", exit_code=EXIT_UNAUTHORIZED)


def _lifetime(answer: Mapping[str, Any]) -> float:
    """``expires_in`` (RFC 6749 section 5.1: RECOMMENDED); an answer without it is taken as an hour."""
    value = answer.get("expires_in")
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    return float(value) if isinstance(value, str) and value.isdigit() else 3600.0


def _credentials(
    answer: Mapping[str, Any], *, endpoint: str, issuer: Issuer, client_id: str, grant: str, now: float, **extra: Any
) -> Credentials:
    lifetime = _lifetime(answer)
    return Credentials(
        endpoint=endpoint,
        issuer=issuer.issuer,
        client_id=client_id,
        token_endpoint=issuer.token_endpoint,
        revocation_endpoint=issuer.revocation_endpoint,
        grant=grant,
        access_token=str(answer["access_token"]),
        refresh_token=answer.get("refresh_token"),
        expires_at=now + lifetime,
        scope=str(answer.get("scope") or ""),
        **extra,
    )


# ------------------------------------------------------------------ machines


def read_secret(secret_env: str | None, secret_file: str | None) -> str:
    """The client secret from ``secret_file``, else the environment variable ``secret_env``."""
    if secret_file:
        try:
            secret = Path(secret_file).read_text("utf-8").strip()
        except OSError as exc:
            raise CliError(
                f"cannot read the client secret file {secret_file}", detail=str(exc), exit_code=EXIT_USAGE
            ) from None
        if not secret:
            raise CliError(f"the client secret file {secret_file} is empty", exit_code=EXIT_USAGE)
        return secret
    name = secret_env or DEFAULT_SECRET_ENV
    secret = os.environ.get(name, "").strip()
    if not secret:
        raise CliError(
            "no client secret",
            detail=f"set ${name} (or pass --client-secret-file PATH); a secret is never a command-line argument",
            exit_code=EXIT_USAGE,
        )
    return secret


def client_credentials(
    issuer: Issuer,
    *,
    endpoint: str,
    client_id: str,
    secret_env: str | None,
    secret_file: str | None,
    scopes: Sequence[str],
    audience: str | None = None,
    tenant: str | None = None,
    now: Callable[[], float] = time.time,
) -> Credentials:
    secret = read_secret(secret_env, secret_file)
    form = {
        "grant_type": "client_credentials",
        "scope": " ".join(scopes) or None,
        "audience": audience,
        "tenant": tenant,
    }
    try:
        answer = _token_request(issuer, form, auth=(client_id, secret))
    except TokenRefused as exc:
        step = (
            "check the client id and its secret"
            if exc.error == "invalid_client"
            else "check --scope and --audience against the client's registration"
        )
        raise _refused("the identity provider refused the client credentials", exc, step) from None
    return _credentials(
        answer,
        endpoint=endpoint,
        issuer=issuer,
        client_id=client_id,
        grant="client_credentials",
        now=now(),
        audience=audience,
        tenant=tenant,
        secret_env=None if secret_file else (secret_env or DEFAULT_SECRET_ENV),
        secret_file=str(Path(secret_file).resolve()) if secret_file else None,
    )


# ------------------------------------------------------------------ people: the loopback redirect


class _IPv6Server(HTTPServer):
    address_family = socket.AF_INET6


@dataclass
class Redirect:
    """What came back to the loopback listener: the query of the redirect."""

    params: dict[str, str]


@dataclass(frozen=True)
class LoopbackAddress:
    """Where the redirect comes back: ``http://127.0.0.1:<free port>/callback`` by default (RFC 8252 sections 7.3 and
    8.3), or what the client's registration demands (Cognito matches the URL exactly and takes http only for
    ``localhost``: ``http://localhost:8976/callback``)."""

    host: str = "127.0.0.1"
    port: int = 0  # 0: a port the OS picks
    path: str = CALLBACK_PATH

    @classmethod
    def parse(cls, uri: str | None) -> LoopbackAddress:
        if not uri:
            return cls()
        try:
            parts = urlsplit(uri)
            port = parts.port or 0
        except ValueError:
            port, parts = -1, urlsplit("")
        host = (parts.hostname or "").lower()
        if parts.scheme != "http" or host not in ("127.0.0.1", "localhost", "::1") or port < 0 or parts.query:
            raise CliError(
                f"--redirect-uri {uri!r} is not a loopback address",
                detail="use http://127.0.0.1[:PORT]/PATH, http://[::1][:PORT]/PATH or http://localhost:PORT/PATH",
                exit_code=EXIT_USAGE,
            )
        return cls("[::1]" if host == "::1" else host, port, parts.path or CALLBACK_PATH)


class LoopbackListener:
    """A one-shot HTTP listener on the loopback interface (RFC 8252 section 7.3) that waits for the redirect.

    Other paths (a browser's ``/favicon.ico``) get 404 and are not the answer."""

    def __init__(self, expected_state: str, address: LoopbackAddress | None = None) -> None:
        self.address = address or LoopbackAddress()
        self.expected_state = expected_state
        self.result: Redirect | None = None
        self._done = threading.Event()
        listener = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                parts = urlsplit(self.path)
                if parts.path != listener.address.path:
                    self._page(404, "Not found", "this address only receives the sign-in answer")
                    return
                params = dict(parse_qsl(parts.query, keep_blank_values=True))
                if listener.result is None:
                    listener.result = Redirect(params)
                    listener._done.set()
                if params.get("state") != listener.expected_state:
                    self._page(400, "Sign-in refused", "the answer does not belong to this sign-in (state)")
                elif "error" in params:
                    self._page(400, "Sign-in refused", params.get("error_description") or params["error"])
                else:
                    self._page(200, "Signed in", "Packyard has your sign-in. You can close this window.")

            def _page(self, status: int, title: str, text: str) -> None:
                body = (
                    f"<!doctype html><html><body><h1>{html.escape(title)}</h1><p>{html.escape(text)}</p></body></html>"
                ).encode()
                self.send_response(status)
                self.send_header("Content-Type", "text/html; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.send_header("Connection", "close")
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        server_class = _IPv6Server if self.address.host == "[::1]" else HTTPServer
        bind = "::1" if self.address.host == "[::1]" else "127.0.0.1"  # localhost: its IPv4 address
        try:
            self._server = server_class((bind, self.address.port), Handler)
        except OSError as exc:
            raise CliError(
                f"cannot listen on {bind} port {self.address.port} for the sign-in answer",
                detail=f"{exc.strerror or exc}; free the port, or choose another --redirect-uri",
                exit_code=EXIT_USAGE,
            ) from None
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.1,), daemon=True)

    @property
    def redirect_uri(self) -> str:
        return f"http://{self.address.host}:{self._server.server_address[1]}{self.address.path}"

    def __enter__(self) -> LoopbackListener:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    def wait(self, timeout: float) -> Redirect | None:
        self._done.wait(timeout)
        return self.result


def authorization_url(
    issuer: Issuer,
    *,
    client_id: str,
    redirect_uri: str,
    scopes: Sequence[str],
    state: str,
    challenge: str,
    audience: str | None = None,
    tenant: str | None = None,
) -> str:
    assert issuer.authorization_endpoint
    query = {
        "response_type": "code",
        "client_id": client_id,
        "redirect_uri": redirect_uri,
        "scope": " ".join(scopes),
        "state": state,
        "code_challenge": challenge,
        "code_challenge_method": "S256",
        **({"audience": audience} if audience else {}),
        **({"tenant": tenant} if tenant else {}),  # the local issuer's sign-in form starts with it
    }
    separator = "&" if "?" in issuer.authorization_endpoint else "?"
    return f"{issuer.authorization_endpoint}{separator}{urlencode(query)}"


def authorization_code(
    issuer: Issuer,
    *,
    endpoint: str,
    client_id: str,
    scopes: Sequence[str],
    show: Callable[[str], None],
    audience: str | None = None,
    tenant: str | None = None,
    timeout: float = 300.0,
    redirect_uri: str | None = None,
    now: Callable[[], float] = time.time,
) -> Credentials:
    """Sign a person in: ``show`` gets the authorization URL (printing it, opening a browser); the redirect comes
    back to the loopback listener; the code is exchanged with the PKCE verifier."""
    if not issuer.authorization_endpoint:
        raise CliError(
            f"{issuer.issuer} has no authorization endpoint",
            detail="sign in a machine with packyard login --client-credentials",
            exit_code=EXIT_USAGE,
        )
    state, verifier = secrets.token_urlsafe(24), new_verifier()
    with LoopbackListener(state, LoopbackAddress.parse(redirect_uri)) as listener:
        url = authorization_url(
            issuer,
            client_id=client_id,
            redirect_uri=listener.redirect_uri,
            scopes=scopes,
            state=state,
            challenge=challenge_of(verifier),
            audience=audience,
            tenant=tenant,
        )
        show(url)
        answer = listener.wait(timeout)
        sent_redirect_uri = listener.redirect_uri
    if answer is None:
        raise CliError(
            f"no sign-in within {timeout:.0f}s",
            detail="run packyard login again (--no-browser prints the address to open yourself)",
            exit_code=EXIT_UNAUTHORIZED,
        )
    params = answer.params
    if params.get("state") != state:
        raise CliError(
            "the sign-in answer is not for this sign-in (state mismatch)",
            code="state_mismatch",
            detail="nothing was signed in; run packyard login again, and open only the address it prints",
            exit_code=EXIT_UNAUTHORIZED,
        )
    if "iss" in params and params["iss"].rstrip("/") != issuer.issuer.rstrip("/"):  # RFC 9207
        raise CliError(
            "the sign-in answer came from another issuer",
            code="issuer_mismatch",
            detail=f"expected {issuer.issuer}, got {params['iss']}; run packyard login again",
            exit_code=EXIT_UNAUTHORIZED,
        )
    if "error" in params:
        why = params.get("error_description") or params["error"]
        step = (
            "run packyard login again to sign in"
            if params["error"] == "access_denied"
            else "check the client id, --scope and --audience"
        )
        raise CliError(
            "the sign-in was refused", code=params["error"], detail=f"{why}; {step}", exit_code=EXIT_UNAUTHORIZED
        )
    form = {
        "grant_type": "authorization_code",
        "code": params.get("code", ""),
        "redirect_uri": sent_redirect_uri,
        "client_id": client_id,
        "code_verifier": verifier,
    }
    try:
        token = _token_request(issuer, form)
    except TokenRefused as exc:
        raise _refused("the identity provider refused the sign-in code", exc, "run packyard login again") from None
    return _credentials(
        token,
        endpoint=endpoint,
        issuer=issuer,
        client_id=client_id,
        grant="authorization_code",
        now=now(),
        audience=audience,
    )


# ------------------------------------------------------------------ renewal and revocation


def renew(credentials: Credentials, now: Callable[[], float] = time.time) -> Credentials:
    """New tokens for an expiring sign-in: the refresh token, or a machine's client credentials again."""
    issuer = Issuer(
        issuer=credentials.issuer,
        authorization_endpoint=None,
        token_endpoint=credentials.token_endpoint,
        revocation_endpoint=credentials.revocation_endpoint,
    )
    if credentials.grant == "client_credentials":
        if not (credentials.secret_env and os.environ.get(credentials.secret_env)) and not credentials.secret_file:
            raise expired(credentials, f"its client secret is not in ${credentials.secret_env or DEFAULT_SECRET_ENV}")
        try:
            return client_credentials(
                issuer,
                endpoint=credentials.endpoint,
                client_id=credentials.client_id,
                secret_env=credentials.secret_env,
                secret_file=credentials.secret_file,
                scopes=credentials.scope.split(),
                audience=credentials.audience,
                tenant=credentials.tenant,
                now=now,
            )
        except CliError as exc:
            raise expired(credentials, f"the renewal failed: {exc.detail or exc.title}") from None
    if not credentials.refresh_token:
        raise expired(credentials, "the identity provider gave no refresh token")
    form = {
        "grant_type": "refresh_token",
        "refresh_token": credentials.refresh_token,
        "client_id": credentials.client_id,
    }
    try:
        answer = _token_request(issuer, form)
    except TokenRefused as exc:
        raise expired(credentials, f"the identity provider refused the refresh token ({exc})") from None
    return replace(
        credentials,
        access_token=str(answer["access_token"]),
        # an issuer that rotates sends a new one; one that does not keeps the old one valid
        refresh_token=answer.get("refresh_token") or credentials.refresh_token,
        expires_at=now() + _lifetime(answer),
        scope=str(answer.get("scope") or credentials.scope),
    )


def revoke(credentials: Credentials) -> str | None:
    """RFC 7009: revoke the refresh token (else the access token) if the issuer has a revocation endpoint. Returns
    why it could not, or None."""
    if not credentials.revocation_endpoint:
        return "the identity provider has no revocation endpoint"
    token, hint = (
        (credentials.refresh_token, "refresh_token")
        if credentials.refresh_token
        else (credentials.access_token, "access_token")
    )
    form = {"token": token, "token_type_hint": hint, "client_id": credentials.client_id}
    auth = None
    if credentials.grant == "client_credentials":
        try:
            auth = (credentials.client_id, read_secret(credentials.secret_env, credentials.secret_file))
        except CliError:
            auth = None
    try:
        response = _session().post(credentials.revocation_endpoint, data=form, auth=auth, timeout=HTTP_TIMEOUT)
    except requests.RequestException as exc:
        return f"cannot reach the revocation endpoint ({type(exc).__name__})"
    return None if response.status_code == 200 else f"the revocation endpoint answered {response.status_code}"
