"""In-process transport: an AWS request this process makes to its own moto server goes to the server's WSGI app
directly, not through a socket.

The local stack's handlers, and moto's Step Functions interpreter, reach moto over HTTP at ``AWS_ENDPOINT_URL``
(:mod:`devstack.local`), the moto server being a thread of this same process. Profiled under load (docs/decisions.md,
"Local stack throughput"), that loopback cost a fifth of the stack's CPU and most of its threads: urllib3's
connection pool (10 connections a client; 16 clients' requests overflowed it, and each extra connection was a new
socket and a new server thread), werkzeug's HTTP parsing and writing, a thread per connection on the server.

Here a botocore ``before-send`` hook (the way moto's own in-process mock, ``BotocoreStubber``, answers botocore)
takes a request addressed to the moto server's host and port, builds the WSGI environ werkzeug's server would
build from it (moto's ``MotoRequestHandler`` included: ``x-amz-meta-*`` header names keep their underscores) and calls
the very app the server runs (so a wrapper around it, :mod:`devstack.persistence`'s journal, sees every request
either way). Everything else is as before: botocore serializes and parses; moto parses, dispatches, runs its
backends and serializes. Requests from anywhere else (the CLI, presigned URLs, another process) still arrive over
HTTP.

**Not signed, only addressed.** moto verifies no signature (it enforces no IAM), and reads two things from a request's
``Authorization`` header: the access key (the account) and the credential scope's region. SigV4's canonical request,
payload hash and HMAC chain were 7% of the stack's CPU under load (docs/decisions.md, "Local stack throughput, second
pass"). A request this hook will hand to the app in-process is therefore given the header SigV4 would write, with the
same ``Credential=<key>/<date>/<region>/<service>/aws4_request`` scope and ``X-Amz-Date``/``X-Amz-Security-Token``
headers, and a placeholder signature. Only plain ``SigV4Auth`` is short-cut: S3's signer (its payload-hash header is
read by moto's S3), presigned URLs (``SigV4QueryAuth``: they leave the process) and every request to any other
address are signed as before.

**Dispatched, not routed through Flask** (third pass, docs/decisions.md "Local stack throughput, third pass"). moto's
server app (:class:`InProcessDispatcher`, which ``packyard local`` runs) finds a request's service from its host or
signature scope, then hands it to that service's Flask app, whose request and application contexts, URL map
(matched rule by rule), debug helpers, CORS hook and response object were a tenth of each request's CPU. A request
this hook hands in (marked in its environ) goes instead straight to the moto handler the same URL map names (the
match kept per service, method and path), called as moto's Flask view calls it (``convert_to_flask_response``: the
same request class, URL and headers; a ``ClientError`` is a 400 with its message), its werkzeug ``HTTPException``
answered as Flask answers one (its code, headers and body), and its answer written as Flask's response would write it
(``Content-Type`` ``text/html; charset=utf-8`` when moto gives none, ``Content-Length``, no body for HEAD, 204 or
304). Not written: the CORS headers ``flask_cors`` adds for a browser. Anything else (an exception Flask would let
through, as this debug app does; a path the map does not match; moto's own dashboard) goes through Flask as before.
"""

from __future__ import annotations

import contextlib
import functools
import io
import os
import pickle
import socket
import struct
import sys
import threading
import uuid
from collections import OrderedDict
from collections.abc import Callable, Iterable
from typing import Any
from urllib.parse import unquote, urlsplit

from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSResponse
from botocore.exceptions import NoCredentialsError
from botocore.handlers import BUILTIN_HANDLERS
from moto.core.botocore_stubber import MockRawResponse
from moto.core.request import (
    PRESERVED_HEADER_NAMES_ENVIRON_KEY,
    environ_key_for_header,
    should_preserve_original_header_name,
)
from moto.core.utils import convert_to_flask_response
from moto.moto_server.werkzeug_app import DomainDispatcherApplication
from werkzeug.exceptions import HTTPException
from werkzeug.http import HTTP_STATUS_CODES

_lock = threading.Lock()
_HOOK_ID = "devstack-in-process-transport"
_apps: dict[str, Any] = {}  # "host:port" -> the WSGI app the moto server at that address runs
IN_PROCESS = "devstack.in_process"
"""The environ key that marks a request this hook hands to the app (:class:`InProcessDispatcher` reads it)."""


def _latin1(text: str) -> str:
    """WSGI's "bytes as latin-1" strings (werkzeug's ``_wsgi_encoding_dance``)."""
    return text.encode("utf-8").decode("latin-1")


def body_of(request: Any) -> bytes:
    """A request's body as the socket would have carried it."""
    return _body(request.body)


def _body(body: Any) -> bytes:
    if body is None:
        return b""
    if isinstance(body, bytes | bytearray):
        return bytes(body)
    if isinstance(body, str):
        return body.encode("utf-8")
    if hasattr(body, "read"):  # a file or botocore's (aws-chunked) stream: what the socket would have carried
        data = body.read()
        return data.encode("utf-8") if isinstance(data, str) else bytes(data)
    return b"".join(body)  # an iterable of chunks


def environ_for(request: Any, netloc: str) -> dict[str, Any]:
    """The environ werkzeug's server (with moto's ``MotoRequestHandler``) builds for this request."""
    url = urlsplit(request.url)
    target = url.path + (f"?{url.query}" if url.query else "")
    body = _body(request.body)
    host, _, port = netloc.rpartition(":")
    environ: dict[str, Any] = {
        "wsgi.version": (1, 0),
        "wsgi.url_scheme": "http",
        "wsgi.input": io.BytesIO(body),
        "wsgi.errors": sys.stderr,
        "wsgi.multithread": True,
        "wsgi.multiprocess": False,
        "wsgi.run_once": False,
        "SERVER_SOFTWARE": "packyard-in-process",
        "REQUEST_METHOD": request.method,
        "SCRIPT_NAME": "",
        "PATH_INFO": _latin1(unquote(url.path)),
        "QUERY_STRING": _latin1(url.query),
        "REQUEST_URI": _latin1(target),
        "RAW_URI": _latin1(target),
        "REMOTE_ADDR": "127.0.0.1",
        "REMOTE_PORT": 0,
        "SERVER_NAME": host,
        "SERVER_PORT": port,
        "SERVER_PROTOCOL": "HTTP/1.1",
        "HTTP_HOST": netloc,  # what http.client adds on the wire
    }
    headers = [
        (str(name), value.decode("latin-1") if isinstance(value, bytes) else str(value))
        for name, value in request.headers.items()
    ]
    preserved: dict[str, str] = {}
    dashed = {environ_key_for_header(name) for name, _ in headers if "_" not in name}
    for name, value in headers:
        value = value.replace("\r\n", "")
        lower = name.lower()
        if lower in ("transfer-encoding", "content-length", "host"):
            continue  # the body is whole here: its length is what it is
        key = environ_key_for_header(name)
        if "_" in name:
            if not should_preserve_original_header_name(name) or key in dashed:
                continue
            preserved.setdefault(key, name)
        if key in environ and key.startswith("HTTP_") and key != "HTTP_HOST":
            value = f"{environ[key]},{value}"
        environ[key] = value
    environ["CONTENT_LENGTH"] = str(len(body))
    environ[PRESERVED_HEADER_NAMES_ENVIRON_KEY] = preserved
    environ[IN_PROCESS] = True
    return environ


# ------------------------------------------------------------------ moto's server app, dispatching in-process requests

ROUTES_KEPT = 4096
"""URL matches kept (service, method, path): the DynamoDB, Lambda, Step Functions and EventBridge paths are a handful;
S3's vary with the key, hence a bound."""

Route = tuple[Callable[..., Any], dict[str, Any]]


class InProcessDispatcher(DomainDispatcherApplication):
    """moto's server app (``DomainDispatcherApplication``), with the backend found for a host kept (moto tries the
    URL patterns of every service, some 200 regexes, for each request, under its lock), and the requests this module
    hands in dispatched to their moto handler without Flask's request machinery (see the module's docstring).
    Requests over HTTP go through Flask exactly as before."""

    def __init__(self, create_app: Callable[..., Any]) -> None:
        super().__init__(create_app)
        self._backends: dict[str, Any] = {}
        self._routes: OrderedDict[tuple[str, str, str], Route] = OrderedDict()
        self._routes_lock = threading.Lock()

    def get_backend_for_host(self, host: str | None) -> Any:
        if host is None:
            return None
        found = self._backends.get(host)
        if found is None:
            found = super().get_backend_for_host(host)
            if found is not None:  # a host no service serves is looked at (and reported) each time, as before
                self._backends[host] = found
        return found

    def __call__(self, environ: dict[str, Any], start_response: Any) -> Any:
        app = self.get_application(environ)
        route = self._route(app, environ) if environ.get(IN_PROCESS) else None
        if route is None:
            return app(environ, start_response)
        status, headers, body = _dispatch(app, route[0], environ)
        start_response(f"{status} {HTTP_STATUS_CODES.get(status, 'UNKNOWN')}", headers)
        return [body]

    def _route(self, app: Any, environ: dict[str, Any]) -> Route | None:
        """The moto handler (and view arguments) the app's URL map gives this request, or None for Flask to
        answer (no match, a redirect, moto's own dashboard, an app with request hooks of its own)."""
        service = str(getattr(app, "service", ""))
        if service == "moto_api" or app.before_request_funcs or app.error_handler_spec:
            return None
        key = (service, str(environ.get("REQUEST_METHOD", "")), str(environ.get("PATH_INFO", "")))
        with self._routes_lock:
            found = self._routes.get(key)
            if found is not None:
                self._routes.move_to_end(key)
                return found
        try:
            rule, arguments = app.url_map.bind_to_environ(environ).match(return_rule=True)
        except HTTPException:  # not found, method not allowed, a redirect: Flask's answer
            return None
        view = app.view_functions.get(rule.endpoint)
        if not isinstance(view, convert_to_flask_response):
            return None
        found = (view.callback, dict(arguments))
        with self._routes_lock:
            self._routes[key] = found
            while len(self._routes) > ROUTES_KEPT:
                self._routes.popitem(last=False)
        return found


def _dispatch(
    app: Any, callback: Callable[..., Any], environ: dict[str, Any]
) -> tuple[int, list[tuple[str, str]], bytes]:
    """What moto's Flask view (``convert_to_flask_response``) and Flask make of a request: its handler's answer as
    status, headers and body."""
    from botocore.exceptions import ClientError
    from moto.moto_api import recorder

    request = app.request_class(environ)  # moto's server request class (``from_wsgi_server``), as Flask makes it
    keep_plain_url_root(request)
    try:
        recorder._record_request(request)
        try:
            result = callback(request, request.raw_url, dict(request.headers))
        except ClientError as exc:
            result = 400, {}, exc.response["Error"]["Message"]
    except HTTPException as exc:
        if app.trap_http_exception(exc):
            raise
        return answer_of(request.method, int(exc.code or 500), exc.get_headers(environ), exc.get_body(environ), {})
    finally:
        # werkzeug's Request keeps itself in its environ ("werkzeug.request"): a reference cycle that took the
        # request, its headers, streams and parsed forms (some 25 objects) to the collector after every request
        environ.pop("werkzeug.request", None)
    if len(result) == 3:
        status, headers, content = result
    else:
        status, headers, content = 200, {}, result
    return answer_of(request.method, _status_code(status), headers, content, headers)


def keep_plain_url_root(request: Any) -> None:
    """Give a request to a plain host (ASCII, no IDNA label, no escape) its ``url_root`` as werkzeug would compute it:
    moto's ``raw_url`` reads it for every request, and werkzeug gets there through ``uri_to_iri`` and an IDNA decode
    of the host, 4% of the stack's process under load (docs/decisions.md, "Local stack throughput, sixth pass")."""
    host = request.host
    if request.root_path or not host.isascii() or "xn--" in host.lower() or "%" in host:
        return
    request.__dict__["url_root"] = f"{request.scheme}://{host}/"  # werkzeug's cached_property keeps it there


def _status_code(status: Any) -> int:
    return int(str(status).split(" ", 1)[0]) if not isinstance(status, int) else status


def answer_of(
    method: str, status: int, headers: Any, content: Any, moto_headers: Any
) -> tuple[int, list[tuple[str, str]], bytes]:
    """Flask's ``Response(response=content, status=status, headers=headers)`` as werkzeug writes it."""
    items = list(headers.items()) if hasattr(headers, "items") else list(headers or [])
    written = [(str(name), str(value)) for name, value in items]
    names = {name.lower() for name, _ in written}
    if "content-type" not in names:
        written.append(("Content-Type", "text/html; charset=utf-8"))
    if content is None:
        body = b""
    elif isinstance(content, str):
        body = content.encode("utf-8")
    elif isinstance(content, bytes | bytearray):
        body = bytes(content)
    else:  # an iterable of chunks
        body = b"".join(chunk.encode("utf-8") if isinstance(chunk, str) else bytes(chunk) for chunk in content)
    if method == "HEAD" and hasattr(moto_headers, "items") and "content-length" in moto_headers:
        written = [(n, v) for n, v in written if n.lower() != "content-length"]
        written.append(("Content-Length", str(moto_headers["content-length"])))
        names.add("content-length")
    no_body = method == "HEAD" or 100 <= status < 200 or status in (204, 304)
    if "content-length" not in names and not (100 <= status < 200 or status in (204, 304)):
        written.append(("Content-Length", str(len(body))))
    return status, written, b"" if no_body else body


def _call(app: Any, environ: dict[str, Any]) -> tuple[int, list[tuple[str, str]], bytes]:
    answer: dict[str, Any] = {}

    def start_response(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Any:
        answer["status"], answer["headers"] = status, headers
        return lambda data: answer.setdefault("written", []).append(data)

    chunks: Iterable[bytes] = app(environ, start_response)
    try:
        body = b"".join([*answer.get("written", []), *chunks])
    finally:
        close = getattr(chunks, "close", None)
        if close is not None:
            close()
    return int(str(answer["status"]).split(" ", 1)[0]), list(answer["headers"]), body


UNSIGNED_SIGNATURE = "0" * 64
"""The signature an in-process request carries: SigV4's shape (64 hex digits), no HMAC computed."""


def _in_process(url: str) -> bool:
    return bool(_apps) and urlsplit(url).netloc in _apps


def _addressed_in_process(self: SigV4Auth, request: Any) -> None:
    """``SigV4Auth.add_auth`` for a request to this process's moto: the headers SigV4 writes, without computing the
    signature nobody checks (see the module's docstring). Anything else is signed by botocore's own method."""
    if type(self) is not SigV4Auth or not _in_process(request.url):
        _installed_add_auth(self, request)
        return
    if self.credentials is None:
        raise NoCredentialsError()
    from botocore.auth import SIGV4_TIMESTAMP, get_current_datetime

    request.context["timestamp"] = get_current_datetime().strftime(SIGV4_TIMESTAMP)
    self._modify_request_before_signing(request)  # X-Amz-Date, the session token, as SigV4 sets them
    request.headers["Authorization"] = (
        f"AWS4-HMAC-SHA256 Credential={self.scope(request)}, SignedHeaders=host;x-amz-date, "
        f"Signature={UNSIGNED_SIGNATURE}"
    )


_installed_add_auth: Any = SigV4Auth.add_auth


Answer = tuple[int, list[tuple[str, str]], bytes]
DirectAnswer = Callable[[Any], "Answer | None"]
_direct: list[DirectAnswer] = []


def answer_directly(direct: DirectAnswer) -> Callable[[], None]:
    """Let ``direct`` answer the requests of this process to its own moto that it knows (status, headers, body), as
    moto would, before moto parses them; None leaves a request to moto. :func:`devstack.lambdas.invoke_directly`
    answers Lambda's ``Invoke`` of the stack's functions so. Returns the function that takes it back."""
    with _lock:
        if direct not in _direct:
            _direct.append(direct)
    return functools.partial(_stop_answering, direct)


def _stop_answering(direct: DirectAnswer) -> None:
    with _lock:
        if direct in _direct:
            _direct.remove(direct)


def _send_in_process(request: Any = None, **_: Any) -> AWSResponse | None:
    if request is None or not _apps:
        return None
    netloc = urlsplit(request.url).netloc
    app = _apps.get(netloc)
    if app is None:
        return None
    if isinstance(app, Channel):
        status, headers, body = app.call(environ_for(request, netloc))
    else:
        answered = next((found for direct in _direct if (found := direct(request)) is not None), None)
        status, headers, body = answered or _call(app, environ_for(request, netloc))
    from botocore.compat import HTTPHeaders

    response_headers = HTTPHeaders()
    for name, value in headers:
        response_headers[name] = value
    return AWSResponse(request.url, status, response_headers, MockRawResponse(body))


def install(app: Any, host: str, port: int) -> None:
    """Send this process's botocore requests for ``host:port`` (and ``localhost:port``, moto's own name for its
    server) to ``app``. Clients created from now on carry the hook."""
    _register(app, host, port)


def _register(app: Any, host: str, port: int) -> None:
    with _lock:
        for name in {host, "localhost", "127.0.0.1"}:
            _apps[f"{name}:{port}"] = app
        if ("before-send", _send_in_process) not in BUILTIN_HANDLERS:
            BUILTIN_HANDLERS.append(("before-send", _send_in_process))
        if SigV4Auth.__dict__["add_auth"] is not _addressed_in_process:
            SigV4Auth.add_auth = _addressed_in_process
    import boto3

    if boto3.DEFAULT_SESSION is not None:  # made before: its clients to come (moto's Step Functions ones) get it too
        boto3.DEFAULT_SESSION._session.register("before-send", _send_in_process, unique_id=_HOOK_ID)


# ------------------------------------------------------------------ another process's requests, over a channel

_FRAME = struct.Struct("!I")
_STREAMS = ("wsgi.input", "wsgi.errors")


def frame(value: Any) -> bytes:
    """``value`` as one frame: its pickle's length (4 bytes, big-endian), then the pickle (this process's own kin
    only: the channel and the API process's configuration)."""
    data = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
    return _FRAME.pack(len(data)) + data


def read_frame(read: Callable[[int], bytes]) -> Any:
    """The value of the next frame ``read`` (a function that returns up to n bytes, b"" at the end) gives; None when
    it ends before a frame starts."""
    header = _read_exactly(read, _FRAME.size)
    if header is None:
        return None
    data = _read_exactly(read, _FRAME.unpack(header)[0])
    if data is None:
        raise ConnectionError("the channel closed in the middle of a frame")
    return pickle.loads(data)


def _read_exactly(read: Callable[[int], bytes], size: int) -> bytes | None:
    chunks: list[bytes] = []
    while size:
        chunk = read(min(size, 1 << 20))
        if not chunk:
            return None
        chunks.append(chunk)
        size -= len(chunk)
    return b"".join(chunks)


class CallFailed(RuntimeError):
    """The other process raised while it answered a call (its type and message say what)."""


class Caller:
    """One side of a call to another process (:func:`serve_calls` is the other): a request goes as one frame over a
    Unix socket and its answer comes back as one. A connection carries one call at a time, so idle ones are kept for
    the next call of any thread."""

    def __init__(self, address: str, what: str) -> None:
        self.address = address
        self._what = what
        self._idle: list[socket.socket] = []
        self._idle_lock = threading.Lock()

    def _connection(self) -> socket.socket:
        with self._idle_lock:
            if self._idle:
                return self._idle.pop()
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.connect(self.address)
        return sock

    def call(self, request: Any) -> Any:
        sock = self._connection()
        try:
            sock.sendall(frame(request))
            answer = read_frame(sock.recv)
        except BaseException:
            sock.close()
            raise
        if answer is None:
            sock.close()
            raise ConnectionError(f"{self._what} {self.address!r} closed: did the stack stop?")
        with self._idle_lock:
            self._idle.append(sock)
        answered, value = answer
        if not answered:
            raise CallFailed(f"{self._what} {self.address!r} could not answer: {value}")
        return value

    def close(self) -> None:
        with self._idle_lock:
            idle, self._idle = self._idle, []
        for sock in idle:
            sock.close()


def new_address(kind: str) -> str:
    """An abstract Unix socket address (nothing on disk) no other process of this machine uses."""
    return f"\0packyard-{kind}-{os.getpid()}-{uuid.uuid4().hex[:12]}"


def serve_calls(answer: Callable[[Any], Any], address: str, name: str) -> Callable[[], None]:
    """Answer the calls :class:`Caller` s send to ``address`` with ``answer(request)``, one thread (named ``name``)
    per connection. Returns the function that stops listening."""
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(address)
    listener.listen(64)
    closed = threading.Event()

    def serve(sock: socket.socket) -> None:
        with sock:
            while True:
                try:
                    request = read_frame(sock.recv)
                except (ConnectionError, OSError):
                    return
                if request is None:
                    return
                try:
                    answered: tuple[bool, Any] = (True, answer(request))
                except Exception as exc:  # the caller raises CallFailed with it; this connection serves on
                    answered = (False, f"{type(exc).__name__}: {exc}")
                try:
                    sock.sendall(frame(answered))
                except OSError:
                    return

    def accept() -> None:
        while not closed.is_set():
            try:
                sock, _ = listener.accept()
            except OSError:
                return
            threading.Thread(target=serve, args=(sock,), name=name, daemon=True).start()

    threading.Thread(target=accept, name=f"{name}-accept", daemon=True).start()

    def close() -> None:
        closed.set()
        with contextlib.suppress(OSError):
            listener.shutdown(socket.SHUT_RDWR)
        listener.close()

    return close


class Channel(Caller):
    """Another process's way in to this moto app (:func:`serve_channel`): a request goes as its WSGI environ and
    body, and comes back as status, headers and body, with no HTTP parsed or written on either side. The local
    stack's API process (:mod:`devstack.api_process`) reaches the stack's moto through one."""

    def __init__(self, address: str) -> None:
        super().__init__(address, "the local stack's channel")

    def call(self, environ: dict[str, Any]) -> tuple[int, list[tuple[str, str]], bytes]:
        body = environ["wsgi.input"].getvalue()
        carried = {key: value for key, value in environ.items() if key not in _STREAMS}
        status, headers, payload = super().call((carried, body))
        return int(status), list(headers), bytes(payload)


def serve_channel(app: Any) -> tuple[str, Callable[[], None]]:
    """Answer requests that other processes send through a :class:`Channel` with ``app`` (moto's server app, the
    one the HTTP server and this process's own requests use), one thread per connection. Returns the channel's
    address and the function that closes it."""

    def answer(request: tuple[dict[str, Any], bytes]) -> tuple[int, list[tuple[str, str]], bytes]:
        environ, body = request
        environ["wsgi.input"], environ["wsgi.errors"] = io.BytesIO(body), sys.stderr
        return _call(app, environ)

    address = new_address("channel")
    return address, serve_calls(answer, address, "packyard-channel")


def install_channel(address: str, host: str, port: int) -> Channel:
    """Send this process's botocore requests for ``host:port`` through the channel at ``address`` (see
    :func:`install`: the same hook, the same unsigned addressing)."""
    channel = Channel(address)
    _register(channel, host, port)
    return channel


def uninstall() -> None:
    """Back to HTTP (clients that carry the hook find no app and send as usual)."""
    with _lock:
        for app in _apps.values():
            if isinstance(app, Channel):
                app.close()
        _apps.clear()
        if ("before-send", _send_in_process) in BUILTIN_HANDLERS:
            BUILTIN_HANDLERS.remove(("before-send", _send_in_process))
        if SigV4Auth.__dict__["add_auth"] is _addressed_in_process:
            SigV4Auth.add_auth = _installed_add_auth
    import boto3

    if boto3.DEFAULT_SESSION is not None:
        boto3.DEFAULT_SESSION._session.unregister("before-send", unique_id=_HOOK_ID)
