"""``packyard``: publish packages and manage installations against the local stack or a deployed one.

Exit codes: 0 ok, 1 error, 2 usage (or a local-stack port in use), 3 refused (archive rejected, operation
refused, consent needed), 4 conflict (409, 412, 428), 5 unavailable (cannot connect, 5xx/429 after retries,
release_unavailable, an unconfirmed outcome). Errors print the problem's title, code and detail, never a
traceback; ``--json`` prints the API's JSON (or the problem) on stdout for scripts.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from packyard_cli import __version__
from packyard_cli.client import (
    EXIT_CONFLICT,
    EXIT_ERROR,
    EXIT_OK,
    EXIT_REFUSED,
    EXIT_UNAVAILABLE,
    EXIT_USAGE,
    ApiError,
    Client,
    CliError,
    Reply,
    segment,
)
from packyard_cli.ports import DEFAULT_API_PORT

LOCAL_HOSTS = frozenset({"127.0.0.1", "localhost", "::1", "[::1]"})
SCOPE_KINDS = ("workspace", "task", "session", "repository")
OPERATION_STOPS = frozenset({"settled", "awaiting_consent", "pending"})
UPLOAD_STOPS = frozenset({"published", "rejected", "expired"})


# ------------------------------------------------------------------ context


@dataclass
class Context:
    args: argparse.Namespace
    json: bool
    out: Any  # rich Console on stdout
    err: Any  # rich Console on stderr (spinners, progress, errors)
    _client: Client | None = field(default=None, repr=False)
    _token: str | None = field(default=None, repr=False)

    @property
    def endpoint(self) -> str:
        return str(self.args.endpoint or default_endpoint(self.args.state_dir))

    @property
    def client(self) -> Client:
        if self._client is None:
            self._client = Client(self.endpoint, token=self.bearer_token)
        return self._client

    def bearer_token(self) -> str | None:
        if self._token is None:
            self._token = resolve_token(self.args, self.endpoint)
        return self._token or None

    def emit(self, body: Any, render: Callable[[], None]) -> None:
        if self.json:
            print(json.dumps(body, indent=2, sort_keys=False))
        else:
            render()

    def note(self, text: str) -> None:
        if not self.json:
            self.out.print(text, highlight=False, soft_wrap=True)

    def status(self, text: str) -> Any:
        """A spinner on a terminal; nothing when stderr is a pipe or a file (logs stay clean)."""
        if self.json or not self.err.is_terminal:
            return _Quiet()
        return self.err.status(text, spinner="dots")


class _Quiet:
    def __enter__(self) -> _Quiet:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def update(self, *args: Any, **kwargs: Any) -> None:
        return None


def default_endpoint(state_dir: str | None = None) -> str:
    """$PACKYARD_ENDPOINT, else the running local stack (its local.json), else the local default port."""
    env = os.environ.get("PACKYARD_ENDPOINT")
    if env:
        return env
    from packyard_cli import tokens

    state = tokens.read_state(state_dir)
    if state and isinstance(state.get("api"), str) and _alive(state.get("pid")):
        return str(state["api"])
    return f"http://127.0.0.1:{DEFAULT_API_PORT}"


def _alive(pid: Any) -> bool:
    if not isinstance(pid, int) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def is_local(endpoint: str) -> bool:
    return (urlsplit(endpoint).hostname or "") in LOCAL_HOSTS


def resolve_token(args: argparse.Namespace, endpoint: str) -> str:
    """--token, else $PACKYARD_TOKEN, else (local stack only) a token minted with the local key."""
    explicit = args.token or os.environ.get("PACKYARD_TOKEN")
    if explicit:
        return str(explicit)
    if not is_local(endpoint):
        return ""
    from packyard_cli import tokens

    key = tokens.load_key(args.state_dir)
    if key is None:
        return ""
    tenant = args.tenant or os.environ.get("PACKYARD_TENANT") or "local"
    subject = os.environ.get("PACKYARD_SUBJECT") or "cli"
    return key.mint(tenant=tenant, subject=subject, ttl_seconds=900)


# ------------------------------------------------------------------ argument helpers


def package_at_version(text: str) -> tuple[str, str]:
    package, at, version = text.partition("@")
    if not at or not package or not version:
        raise argparse.ArgumentTypeError(f"expected PACKAGE@VERSION, got {text!r}")
    return package, version


def scope_value(text: str) -> dict[str, str]:
    kind, _, ident = text.partition(":")
    if kind not in SCOPE_KINDS:
        raise argparse.ArgumentTypeError(f"scope kind must be one of {', '.join(SCOPE_KINDS)}; got {kind!r}")
    if kind == "workspace":
        if ident:
            raise argparse.ArgumentTypeError("a workspace scope takes no id")
        return {"kind": "workspace"}
    if not ident:
        raise argparse.ArgumentTypeError(f"a {kind} scope needs an id: {kind}:ID")
    return {"kind": kind, "id": ident}


def json_object(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"not JSON: {exc}") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError("expected a JSON object")
    return value


def permission(text: str) -> dict[str, str]:
    kind, _, resource = text.partition(":")
    if not kind:
        raise argparse.ArgumentTypeError("expected KIND[:RESOURCE], e.g. network:api.example.com")
    return {"kind": kind, "resource": resource or "*"}


def key_value(text: str) -> tuple[str, str]:
    key, eq, value = text.partition("=")
    if not eq or not key:
        raise argparse.ArgumentTypeError("expected KEY=VALUE")
    return key, value


def workspace_of(args: argparse.Namespace) -> str:
    workspace = getattr(args, "workspace_arg", None) or getattr(args, "workspace", None)
    if not workspace:
        raise CliError("a workspace is required", detail="pass WORKSPACE or --workspace W", exit_code=EXIT_USAGE)
    return str(workspace)


# ------------------------------------------------------------------ rendering


def _short(digest: Any, width: int = 12) -> str:
    text = str(digest or "")
    return text[:width] + "…" if len(text) > width else text


def _when(epoch: Any) -> str:
    if not isinstance(epoch, int | float):
        return ""
    return time.strftime("%Y-%m-%d %H:%M:%SZ", time.gmtime(epoch))


def _size(n: Any) -> str:
    if not isinstance(n, int):
        return ""
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{int(value)} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return str(n)


def _table(*columns: str) -> Any:
    from rich.table import Table

    table = Table(box=None, pad_edge=False, header_style="bold")
    for column in columns:
        table.add_column(column)
    return table


def render_release(ctx: Context, release: dict[str, Any], heading: str) -> None:
    archive = release.get("archive") or {}
    lines = [
        f"[bold green]{heading}[/] [bold]{release.get('package')}@{release.get('version')}[/] "
        f"(status [bold]{release.get('status')}[/])",
        f"  manifest digest  {release.get('manifestDigest')}",
        f"  content digest   {release.get('contentDigest')}",
        f"  archive          sha256 {archive.get('sha256')} ({_size(archive.get('size'))})",
        f"  files            {release.get('fileCount')} ({_size(release.get('unpackedSize'))} unpacked)",
    ]
    if release.get("permissions"):
        declared = ", ".join(f"{p.get('kind')}:{p.get('resource', '*')}" for p in release["permissions"])
        lines.append(f"  permissions      {declared}")
    if release.get("publishedAt"):
        lines.append(f"  published        {_when(release.get('publishedAt'))}")
    if release.get("yankedAt"):
        lines.append(f"  yanked           {_when(release.get('yankedAt'))}")
    for line in lines:
        ctx.out.print(line, highlight=False, soft_wrap=True)


def render_operation(ctx: Context, op: dict[str, Any]) -> None:
    outcome = op.get("outcome") or {}
    result = outcome.get("result")
    colour = {"succeeded": "green", "refused": "red", "unconfirmed": "yellow"}.get(str(result), "cyan")
    release = op.get("release") or {}
    target = f" → {release.get('package')}@{release.get('version')}" if release else ""
    ctx.out.print(
        f"operation [bold]{op.get('operationId')}[/] ({op.get('kind')} of {op.get('installationId')}{target}): "
        f"state [bold]{op.get('state')}[/]" + (f", outcome [bold {colour}]{result}[/]" if result else ""),
        highlight=False,
        soft_wrap=True,
    )
    if outcome.get("code") or outcome.get("detail"):
        status = f" ({outcome['status']})" if outcome.get("status") else ""
        ctx.out.print(f"  {outcome.get('code', '')}{status}: {outcome.get('detail', '')}", highlight=False)
    if op.get("note"):
        ctx.out.print(f"  note: {op['note']}", highlight=False)


def render_installation(ctx: Context, inst: dict[str, Any]) -> None:
    release = inst.get("release") or {}
    scope = inst.get("scope") or {}
    where = scope.get("kind", "workspace") + (f":{scope['id']}" if scope.get("id") else "")
    grants = ", ".join(f"{g.get('kind')}:{g.get('resource')}" for g in inst.get("grants") or []) or "none"
    ctx.out.print(
        f"installation [bold]{inst.get('installationId')}[/] in {inst.get('workspace')}: "
        f"[bold]{release.get('package', inst.get('package'))}@{release.get('version', '-')}[/] "
        f"status [bold]{inst.get('status')}[/], version {inst.get('version')} (ETag {inst.get('etag')}), "
        f"scope {where}, grants {grants}",
        highlight=False,
        soft_wrap=True,
    )


def print_error(ctx: Context, error: CliError) -> None:
    if ctx.json:
        print(json.dumps(error.as_json(), indent=2))
        return
    from rich.markup import escape

    bits = [str(error.status)] if error.status else []
    if error.code:
        bits.append(error.code)
    sub_code = error.body.get("subCode") if isinstance(error.body, dict) else None
    if sub_code:
        bits.append(f"sub-code {sub_code}")
    suffix = f" [dim]({escape(', '.join(bits))})[/]" if bits else ""
    ctx.err.print(f"[bold red]✗ {escape(error.title)}[/]{suffix}", highlight=False, soft_wrap=True)
    if error.detail:
        ctx.err.print(f"  {escape(error.detail)}", highlight=False, soft_wrap=True)
    if isinstance(error.body, dict):
        for name in ("expected", "actual", "blockingOperation", "operationId", "errors"):
            if name in error.body:
                ctx.err.print(f"  {name}: {escape(json.dumps(error.body[name]))}", highlight=False, soft_wrap=True)
    if error.status == 401 and is_local(ctx.endpoint) and not (ctx.args.token or os.environ.get("PACKYARD_TOKEN")):
        ctx.err.print("  hint: start the local stack (packyard local) so its signing key exists, or pass --token")


# ------------------------------------------------------------------ waiting


def wait_for(
    ctx: Context,
    fetch: Callable[[], dict[str, Any]],
    *,
    done: Callable[[dict[str, Any]], bool],
    label: Callable[[dict[str, Any]], str],
    timeout: float,
) -> dict[str, Any]:
    """Poll ``fetch`` until ``done``; a spinner shows the current state. Times out with exit code 5."""
    started = time.monotonic()
    deadline = started + timeout
    current = fetch()
    with ctx.status(label(current)) as spinner:
        while not done(current):
            if time.monotonic() >= deadline:
                raise CliError(
                    f"still {current.get('state')} after {timeout:.0f}s",
                    detail="it goes on in the service; check again later",
                    exit_code=EXIT_UNAVAILABLE,
                    body=current,
                )
            # a few polls a second while the outcome is likely near, then once a second
            time.sleep(0.2 if time.monotonic() - started < 15 else 1.0)
            current = fetch()
            spinner.update(label(current))
    return current


# ------------------------------------------------------------------ commands: local


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
    scopes = args.scope or list(tokens.DEFAULT_SCOPES)
    tenant = args.tenant or os.environ.get("PACKYARD_TENANT") or "local"
    token = key.mint(tenant=tenant, subject=args.subject, scopes=scopes, ttl_seconds=args.ttl)
    if ctx.json:
        print(json.dumps({"token": token, "tenant": tenant, "subject": args.subject, "expiresIn": args.ttl}))
    else:
        print(token)
    return EXIT_OK


# ------------------------------------------------------------------ commands: publishing


def _build(args: argparse.Namespace) -> tuple[bytes, dict[str, Any]]:
    from packyard_cli.build import build_from_directory

    if args.directory and (args.archive or args.manifest):
        raise CliError("give either DIR or --archive with --manifest", exit_code=EXIT_USAGE)
    if args.archive or args.manifest:
        if not (args.archive and args.manifest):
            raise CliError("--archive and --manifest go together", exit_code=EXIT_USAGE)
        try:
            manifest = json.loads(Path(args.manifest).read_text("utf-8"))
            return Path(args.archive).read_bytes(), manifest
        except (OSError, ValueError) as exc:
            raise CliError("cannot read the prebuilt package", detail=str(exc)) from None
    if not args.directory:
        raise CliError("nothing to publish", detail="give a DIR (or --archive and --manifest)", exit_code=EXIT_USAGE)
    try:
        built = build_from_directory(
            args.directory, permissions=args.permission or [], metadata=dict(args.metadata or [])
        )
    except (OSError, ValueError) as exc:
        raise CliError("cannot build the package", detail=str(exc)) from None
    return built.archive, built.manifest


def cmd_build(ctx: Context, args: argparse.Namespace) -> int:
    import hashlib

    args.archive = args.manifest = None
    archive, manifest = _build(args)
    prefix = Path(args.out) if args.out else Path(Path(args.directory).resolve().name)
    archive_path = prefix.with_name(prefix.name + ".tar.gz")
    manifest_path = prefix.with_name(prefix.name + ".manifest.json")
    archive_path.parent.mkdir(parents=True, exist_ok=True)
    archive_path.write_bytes(archive)
    manifest_path.write_text(json.dumps(manifest, indent=2) + "\n", "utf-8")
    summary = {
        "archive": str(archive_path),
        "manifest": str(manifest_path),
        "sha256": hashlib.sha256(archive).hexdigest(),
        "size": len(archive),
        "files": len(manifest["files"]),
    }
    ctx.emit(
        summary,
        lambda: ctx.out.print(
            f"built {summary['files']} files → {archive_path} ({_size(len(archive))}, sha256 "
            f"{summary['sha256']}) and {manifest_path}",
            highlight=False,
            soft_wrap=True,
        ),
    )
    return EXIT_OK


class _ProgressReader:
    """A file-like view of bytes that reports how much was read: requests sends it with a Content-Length
    (no chunked encoding, which presigned S3 PUTs refuse) and reads it in blocks as the socket takes them."""

    def __init__(self, data: bytes, advance: Callable[[int], None], rewound: Callable[[], None]) -> None:
        self._data = data
        self._pos = 0
        self._advance = advance
        self._rewound = rewound

    def __len__(self) -> int:
        return len(self._data)

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = 0) -> int:
        base = {0: 0, 1: self._pos, 2: len(self._data)}[whence]
        self._pos = max(0, min(len(self._data), base + offset))
        if self._pos == 0:
            self._rewound()  # a retry starts over
        return self._pos

    def read(self, size: int | None = -1) -> bytes:
        end = len(self._data) if size is None or size < 0 else min(len(self._data), self._pos + size)
        chunk = self._data[self._pos : end]
        self._pos = end
        self._advance(len(chunk))
        return chunk


def upload_with_progress(ctx: Context, url: str, data: bytes, headers: dict[str, str]) -> None:
    from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TransferSpeedColumn

    columns = (TextColumn("uploading"), BarColumn(), DownloadColumn(), TransferSpeedColumn())
    with Progress(*columns, console=ctx.err, transient=True, disable=ctx.json or not ctx.err.is_terminal) as progress:
        task = progress.add_task("upload", total=len(data))
        reader = _ProgressReader(
            data,
            advance=lambda n: progress.advance(task, n),
            rewound=lambda: progress.reset(task, total=len(data)),
        )
        ctx.client.put_bytes(url, reader, headers)


def cmd_publish(ctx: Context, args: argparse.Namespace) -> int:
    import hashlib

    package, version = args.package, args.version
    archive, manifest = _build(args)
    request = {"manifest": manifest, "archive": {"size": len(archive), "sha256": hashlib.sha256(archive).hexdigest()}}
    ctx.note(
        f"publishing [bold]{package}@{version}[/]: {len(manifest.get('files', []))} files, archive "
        f"{_size(len(archive))} sha256 {_short(request['archive']['sha256'], 16)}"
    )
    base = f"/v1/packages/{segment(package)}/versions/{segment(version)}"
    session = ctx.client.request("POST", f"{base}/uploads", body=request)
    if session.status == 200:
        ctx.note("already published with identical content: nothing to upload")
        release = session.body.get("release", session.body)
        ctx.emit(release, lambda: render_release(ctx, release, "release"))
        return EXIT_OK
    upload = session.body
    upload_id = upload["uploadId"]
    if upload.get("uploadRequired", True):
        target = upload.get("upload") or {}
        upload_with_progress(ctx, target["url"], archive, dict(target.get("headers") or {}))
        ctx.note(f"uploaded {_size(len(archive))} to the presigned URL")
    else:
        ctx.note("the service already holds this archive: nothing to upload")
    completed = ctx.client.request("POST", f"/v1/uploads/{segment(upload_id)}/complete")
    if args.no_wait:
        ctx.emit(
            completed.body,
            lambda: ctx.note(f"upload [bold]{upload_id}[/] is {completed.body.get('state')}; it goes on without us"),
        )
        return EXIT_OK

    def fetch() -> dict[str, Any]:
        return dict(ctx.client.request("GET", f"/v1/uploads/{segment(upload_id)}").body)

    final = wait_for(
        ctx,
        fetch,
        done=lambda body: body.get("state") in UPLOAD_STOPS,
        label=lambda body: f"verifying {package}@{version}: {body.get('state')}",
        timeout=args.wait_timeout,
    )
    state = final.get("state")
    if state == "published":
        release = ctx.client.request("GET", base).body
        ctx.emit(release, lambda: render_release(ctx, release, "published"))
        return EXIT_OK
    rejection = final.get("rejection") or {}
    if ctx.json:
        print(json.dumps(final, indent=2))
        return EXIT_REFUSED
    title = "Archive rejected" if state == "rejected" else f"Upload {state}"
    error = CliError(
        f"{title}: {package}@{version} was not published",
        code=rejection.get("code") or ("upload_expired" if state == "expired" else None),
        detail=rejection.get("detail"),
        exit_code=EXIT_REFUSED,
        body={"subCode": rejection["subCode"]} if rejection.get("subCode") else None,
    )
    print_error(ctx, error)
    return EXIT_REFUSED


def cmd_releases(ctx: Context, args: argparse.Namespace) -> int:
    if args.package_or_release and "@" in args.package_or_release:
        package, version = package_at_version(args.package_or_release)
        release = ctx.client.request("GET", f"/v1/packages/{segment(package)}/versions/{segment(version)}").body
        ctx.emit(release, lambda: render_release(ctx, release, "release"))
        return EXIT_OK
    path = f"/v1/packages/{segment(args.package_or_release)}/versions" if args.package_or_release else "/v1/packages"
    items = _all_pages(ctx, path)
    body = {"items": items}
    if args.package_or_release:
        table = _table("version", "status", "archive", "files", "manifest digest", "published")
        for r in items:
            table.add_row(
                str(r.get("version")),
                str(r.get("status")),
                _size((r.get("archive") or {}).get("size")),
                str(r.get("fileCount", "")),
                _short(r.get("manifestDigest")),
                _when(r.get("publishedAt")),
            )
    else:
        table = _table("package", "latest", "versions", "created")
        for p in items:
            table.add_row(
                str(p.get("package")),
                str(p.get("latestVersion")),
                str(p.get("versionCount")),
                _when(p.get("createdAt")),
            )
    ctx.emit(body, lambda: ctx.out.print(table) if items else ctx.out.print("no releases yet"))
    return EXIT_OK


def _all_pages(ctx: Context, path: str, max_pages: int = 50) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    cursor = None
    for _ in range(max_pages):
        params = {"limit": 100, **({"cursor": cursor} if cursor else {})}
        body = ctx.client.request("GET", path, params=params).body or {}
        items.extend(body.get("items") or [])
        cursor = body.get("nextCursor")
        if not cursor:
            break
    return items


def cmd_yank(ctx: Context, args: argparse.Namespace) -> int:
    package, version = args.release
    release = ctx.client.request("DELETE", f"/v1/packages/{segment(package)}/versions/{segment(version)}").body
    ctx.emit(release, lambda: render_release(ctx, release, "yanked"))
    ctx.note("  (a yanked version is never reused; installs of it are refused)")
    return EXIT_OK


# ------------------------------------------------------------------ commands: installations


def _installation_path(workspace: str, installation: str) -> str:
    return f"/v1/workspaces/{segment(workspace)}/installations/{segment(installation)}"


def read_installation(ctx: Context, workspace: str, installation: str) -> Reply | None:
    reply = ctx.client.request("GET", _installation_path(workspace, installation), ok=(404,))
    return None if reply.status == 404 else reply


def version_tag(reply: Reply) -> str:
    etag = reply.header("ETag") or (reply.body or {}).get("etag")
    if etag:
        return str(etag)
    return f'"{(reply.body or {}).get("version")}"'


def _if_match(value: str) -> str:
    value = value.strip()
    return value if value.startswith(('"', "W/")) else f'"{value}"'


def _mutation(
    ctx: Context,
    args: argparse.Namespace,
    method: str,
    path: str,
    body: dict[str, Any] | None,
    if_match: str | None,
) -> int:
    key = args.idempotency_key or str(uuid.uuid4())
    headers = {"If-Match": if_match} if if_match else {}
    reply = ctx.client.request(method, path, body=body, headers=headers, idempotency_key=key)
    op = dict(reply.body or {})
    workspace = workspace_of(args)
    location = reply.header("Location") or f"/v1/workspaces/{segment(workspace)}/operations/{op.get('operationId')}"
    if not ctx.json:
        ctx.out.print(
            f"{op.get('kind', 'operation')} of {op.get('installationId')} admitted as [bold]{op.get('operationId')}[/] "
            f"[dim](HTTP {reply.status}, Idempotency-Key {key})[/]",
            highlight=False,
            soft_wrap=True,
        )
    if args.no_wait or op.get("state") in OPERATION_STOPS:
        final = op
    else:
        final = wait_for(
            ctx,
            lambda: dict(ctx.client.request("GET", location).body),
            done=lambda o: o.get("state") in OPERATION_STOPS,
            label=lambda o: f"{o.get('kind')} {o.get('installationId')}: {o.get('state')}",
            timeout=args.wait_timeout,
        )
    return finish_operation(ctx, final, workspace)


def finish_operation(ctx: Context, op: dict[str, Any], workspace: str) -> int:
    outcome = (op.get("outcome") or {}).get("result")
    if ctx.json:
        print(json.dumps(op, indent=2))
    else:
        render_operation(ctx, op)
        if outcome == "succeeded" and op.get("kind") != "uninstall":
            found = read_installation(ctx, workspace, str(op.get("installationId")))
            if found is not None:
                render_installation(ctx, found.body)
        elif op.get("state") == "awaiting_consent":
            ctx.out.print("  waiting for an owner to approve the permissions it needs", highlight=False)
    if outcome == "refused":
        return EXIT_REFUSED
    if outcome == "unconfirmed":
        return EXIT_UNAVAILABLE
    return EXIT_OK


def _install_body(args: argparse.Namespace, package: str, version: str) -> dict[str, Any]:
    body: dict[str, Any] = {
        "package": package,
        "version": version,
        "scope": args.scope or {"kind": "workspace"},
        "config": args.config or {},
        "intent": args.intent,
        "origin": args.origin,
    }
    if getattr(args, "plan_digest", None):
        body["planDigest"] = args.plan_digest
    return body


def cmd_install(ctx: Context, args: argparse.Namespace, *, must_exist: bool = False) -> int:
    package, version = args.release
    workspace = workspace_of(args)
    installation = args.id or package
    if_match = _if_match(args.if_match) if args.if_match else None
    if if_match is None:
        current = read_installation(ctx, workspace, installation)
        if current is None and must_exist:
            raise CliError(
                f"no installation {installation!r} in workspace {workspace!r}",
                code="not_found",
                detail="install it first (packyard install)",
            )
        if current is not None:
            if_match = version_tag(current)
    path = _installation_path(workspace, installation)
    return _mutation(ctx, args, "PUT", path, _install_body(args, package, version), if_match)


def cmd_update(ctx: Context, args: argparse.Namespace) -> int:
    return cmd_install(ctx, args, must_exist=True)


def _change(ctx: Context, args: argparse.Namespace, method: str, suffix: str) -> int:
    workspace = workspace_of(args)
    if_match = _if_match(args.if_match) if args.if_match else None
    if if_match is None:
        current = read_installation(ctx, workspace, args.installation)
        if current is None:
            raise CliError(f"no installation {args.installation!r} in workspace {workspace!r}", code="not_found")
        if_match = version_tag(current)
    path = _installation_path(workspace, args.installation) + suffix
    return _mutation(ctx, args, method, path, {"origin": args.origin}, if_match)


def cmd_uninstall(ctx: Context, args: argparse.Namespace) -> int:
    return _change(ctx, args, "DELETE", "")


def cmd_rollback(ctx: Context, args: argparse.Namespace) -> int:
    return _change(ctx, args, "POST", "/rollback")


def cmd_preview(ctx: Context, args: argparse.Namespace) -> int:
    package, version = args.release
    workspace = workspace_of(args)
    installation = args.id or package
    path = _installation_path(workspace, installation) + "/preview"
    body = ctx.client.request("POST", path, body=_install_body(args, package, version)).body or {}

    def render() -> None:
        ctx.out.print(
            f"preview of [bold]{installation}[/] in {workspace}: {body.get('kind', '')}"
            + (f" — {body['note']}" if body.get("note") else ""),
            highlight=False,
        )
        if body.get("plan") is not None:
            ctx.out.print_json(json.dumps(body["plan"]))
        if body.get("planDigest"):
            ctx.out.print(f"plan digest {body['planDigest']}  (pass --plan-digest to install exactly this plan)")

    ctx.emit(body, render)
    return EXIT_OK


def cmd_status(ctx: Context, args: argparse.Namespace) -> int:
    workspace = workspace_of(args)
    path = f"/v1/workspaces/{segment(workspace)}/operations/{segment(args.operation)}"
    op = dict(ctx.client.request("GET", path).body)
    if args.wait and op.get("state") not in OPERATION_STOPS:
        op = wait_for(
            ctx,
            lambda: dict(ctx.client.request("GET", path).body),
            done=lambda o: o.get("state") in OPERATION_STOPS,
            label=lambda o: f"{o.get('kind')} {o.get('installationId')}: {o.get('state')}",
            timeout=args.wait_timeout,
        )
    return finish_operation(ctx, op, workspace)


def cmd_ls(ctx: Context, args: argparse.Namespace) -> int:
    workspace = workspace_of(args)
    items = _all_pages(ctx, f"/v1/workspaces/{segment(workspace)}/installations")
    table = _table("installation", "release", "status", "version", "scope", "grants", "updated")
    for inst in items:
        release = inst.get("release") or {}
        scope = inst.get("scope") or {}
        table.add_row(
            str(inst.get("installationId")),
            f"{release.get('package', inst.get('package'))}@{release.get('version', '-')}",
            str(inst.get("status")),
            str(inst.get("version")),
            scope.get("kind", "") + (f":{scope['id']}" if scope.get("id") else ""),
            ", ".join(f"{g.get('kind')}:{g.get('resource')}" for g in inst.get("grants") or []),
            _when(inst.get("updatedAt")),
        )
    ctx.emit(
        {"items": items}, lambda: ctx.out.print(table) if items else ctx.out.print(f"no installations in {workspace}")
    )
    return EXIT_OK


def cmd_resolved(ctx: Context, args: argparse.Namespace) -> int:
    workspace = workspace_of(args)
    body = ctx.client.request("GET", f"/v1/workspaces/{segment(workspace)}/resolved").body or {}
    items = body.get("items") or []
    table = _table("installation", "release", "manifest digest", "archive sha256", "scope", "grants")
    for item in items:
        scope = item.get("scope") or {}
        table.add_row(
            str(item.get("installationId")),
            f"{item.get('package')}@{item.get('release')}",
            _short(item.get("manifestDigest")),
            _short((item.get("archive") or {}).get("sha256")),
            scope.get("kind", "") + (f":{scope['id']}" if scope.get("id") else ""),
            ", ".join(f"{g.get('kind')}:{g.get('resource')}" for g in item.get("grants") or []),
        )
    ctx.emit(body, lambda: ctx.out.print(table) if items else ctx.out.print(f"nothing resolved in {workspace}"))
    return EXIT_OK


def cmd_usage(ctx: Context, args: argparse.Namespace) -> int:
    workspace = workspace_of(args)
    body = ctx.client.request("GET", f"/v1/workspaces/{segment(workspace)}/usage").body
    ctx.emit(body, lambda: ctx.out.print_json(json.dumps(body)))
    return EXIT_OK


# ------------------------------------------------------------------ the parser


def _common(parser: argparse.ArgumentParser, *, top: bool) -> None:
    """Global options, accepted before or after the command (a command's copy never overrides with a default)."""

    def default(value: Any) -> Any:
        return value if top else argparse.SUPPRESS

    group = parser.add_argument_group("global options")
    group.add_argument(
        "--endpoint",
        default=default(None),
        help="API base URL (default: $PACKYARD_ENDPOINT, else the running local stack, else "
        f"http://127.0.0.1:{DEFAULT_API_PORT})",
    )
    group.add_argument(
        "--token", default=default(None), help="bearer token (default: $PACKYARD_TOKEN; locally: minted)"
    )
    group.add_argument(
        "--tenant", default=default(None), help="tenant of tokens minted locally (default: $PACKYARD_TENANT or local)"
    )
    group.add_argument(
        "--state-dir",
        default=default(None),
        help="local stack state (key, address; default: $PACKYARD_LOCAL_DIR or <repo>/.packyard-local)",
    )
    group.add_argument("--json", action="store_true", default=default(False), help="print JSON for scripts")


def _waiting(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--no-wait", action="store_true", help="return once accepted; do not wait for the outcome")
    parser.add_argument("--wait-timeout", type=float, default=120.0, help="seconds to wait (default: %(default)s)")


def _mutating(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--idempotency-key",
        help="default: a fresh UUID per command, kept across its retries; a replay sends the same key with the "
        "same request (same --if-match)",
    )
    parser.add_argument("--if-match", help="installation version to require (default: the one just read), e.g. 3")
    parser.add_argument("--origin", choices=("owner", "workflow"), default="owner", help="default: %(default)s")
    _waiting(parser)


def _workspace(parser: argparse.ArgumentParser, *, positional: bool = False) -> None:
    if positional:
        parser.add_argument("workspace_arg", nargs="?", metavar="WORKSPACE", help="the workspace")
    parser.add_argument("--workspace", "-w", required=not positional, help="the workspace")


def _install_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("release", type=package_at_version, metavar="PACKAGE@VERSION")
    _workspace(parser)
    parser.add_argument("--id", help="installation id (default: the package name)")
    parser.add_argument("--scope", type=scope_value, help="workspace (default), task:ID, session:ID or repository:ID")
    parser.add_argument("--config", type=json_object, help="installation config as a JSON object")
    parser.add_argument(
        "--intent",
        choices=("install-or-select", "create-only", "install-or-remint"),
        default="install-or-select",
        help="default: %(default)s",
    )
    parser.add_argument("--plan-digest", help="require exactly the plan a preview returned")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="packyard",
        description="Publish immutable packages and install them into workspaces.",
        epilog="Exit codes: 0 ok, 1 error, 2 usage, 3 refused, 4 conflict, 5 unavailable.",
    )
    parser.add_argument("--version", action="version", version=f"packyard {__version__}")
    _common(parser, top=True)
    common = argparse.ArgumentParser(add_help=False)
    _common(common, top=False)
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    def command(name: str, help_text: str, handler: Callable[[Context, argparse.Namespace], int]) -> Any:
        sub = commands.add_parser(name, help=help_text, description=help_text, parents=[common])
        sub.set_defaults(handler=handler)
        return sub

    from packyard_cli.ports import add_local_arguments

    local = command("local", "serve the whole stack on 127.0.0.1 (moto + HTTP API); Ctrl-C stops it", cmd_local)
    add_local_arguments(local)

    token = command("token", "mint a token for the local stack (signed with its local key)", cmd_token)
    token.add_argument("--subject", "--sub", default="me", help="the sub claim (default: %(default)s)")
    token.add_argument(
        "--scope", action="append", help="a scope (repeatable; default: packyard/publish packyard/install)"
    )
    token.add_argument("--ttl", type=int, default=3600, help="lifetime in seconds (default: %(default)s)")

    build = command("build", "build a deterministic archive and manifest from a folder", cmd_build)
    build.add_argument("directory", metavar="DIR")
    build.add_argument("--out", help="output path prefix (default: ./<DIR name>): PREFIX.tar.gz, PREFIX.manifest.json")
    build.add_argument("--permission", type=permission, action="append", help="declare KIND[:RESOURCE] (repeatable)")
    build.add_argument("--metadata", type=key_value, action="append", help="manifest metadata KEY=VALUE (repeatable)")

    publish = command("publish", "build, upload, verify and publish a release", cmd_publish)
    publish.add_argument("directory", metavar="DIR", nargs="?", help="folder to package")
    publish.add_argument("--package", "-p", required=True)
    publish.add_argument("--version", "-v", required=True)
    publish.add_argument("--permission", type=permission, action="append", help="declare KIND[:RESOURCE] (repeatable)")
    publish.add_argument("--metadata", type=key_value, action="append", help="manifest metadata KEY=VALUE (repeatable)")
    publish.add_argument("--archive", help="publish a prebuilt archive (with --manifest) instead of DIR")
    publish.add_argument("--manifest", help="the prebuilt archive's manifest (JSON)")
    _waiting(publish)

    releases = command("releases", "list packages, a package's versions, or show PACKAGE@VERSION", cmd_releases)
    releases.add_argument("package_or_release", nargs="?", metavar="PACKAGE[@VERSION]")

    yank = command("yank", "yank a release (its version is never reused)", cmd_yank)
    yank.add_argument("release", type=package_at_version, metavar="PACKAGE@VERSION")

    install = command("install", "install a release into a workspace", cmd_install)
    _install_options(install)
    _mutating(install)

    update = command("update", "move an installation to another release", cmd_update)
    _install_options(update)
    _mutating(update)

    for name, help_text, handler in (
        ("uninstall", "uninstall an installation", cmd_uninstall),
        ("rollback", "roll an installation back to its previous release", cmd_rollback),
    ):
        sub = command(name, help_text, handler)
        sub.add_argument("installation", metavar="INSTALLATION")
        _workspace(sub)
        _mutating(sub)

    preview = command("preview", "show the plan an install/update would commit, without changing anything", cmd_preview)
    _install_options(preview)
    preview.add_argument("--origin", choices=("owner", "workflow"), default="owner", help="default: %(default)s")

    status = command("status", "show an operation (and its outcome)", cmd_status)
    status.add_argument("operation", metavar="OPERATION")
    _workspace(status)
    status.add_argument("--wait", action="store_true", help="wait until it settles")
    status.add_argument("--wait-timeout", type=float, default=120.0)

    ls = command("ls", "list a workspace's installations", cmd_ls)
    _workspace(ls, positional=True)

    resolved = command("resolved", "what a runtime loads: active releases, digests, grants", cmd_resolved)
    _workspace(resolved, positional=True)

    usage = command("usage", "a workspace's storage usage", cmd_usage)
    _workspace(usage, positional=True)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    from rich.console import Console

    ctx = Context(args=args, json=bool(args.json), out=Console(highlight=False), err=Console(stderr=True))
    try:
        return int(args.handler(ctx, args))
    except CliError as error:
        print_error(ctx, error)
        return error.exit_code
    except KeyboardInterrupt:
        ctx.err.print("interrupted")
        return 130
    except BrokenPipeError:
        return EXIT_ERROR
    except (KeyError, TypeError, ValueError) as exc:
        # an answer without the fields this CLI expects (e.g. an older or newer service)
        print_error(ctx, CliError("unexpected answer from the service", detail=f"{type(exc).__name__}: {exc}"))
        return EXIT_ERROR


__all__ = ["EXIT_CONFLICT", "EXIT_REFUSED", "ApiError", "build_parser", "main"]


if __name__ == "__main__":
    sys.exit(main())
