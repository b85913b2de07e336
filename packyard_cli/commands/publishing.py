"""Publishing releases: ``build`` (archive and manifest on disk), ``publish`` (upload, verification by the service,
the published release), ``releases`` (packages, versions, one release) and ``yank``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from packyard_cli import rules
from packyard_cli.arguments import ReleaseRef, release_ref
from packyard_cli.client import EXIT_OK, EXIT_REFUSED, EXIT_USAGE, CliError, segment
from packyard_cli.commands.context import Context, paginate, resolve_release, wait_for, wait_seconds
from packyard_cli.folder import FolderFiles, PackageConfig, collect, load_config, read_files
from packyard_cli.output import Column, dig
from packyard_cli.render import (
    PACKAGE_COLUMNS,
    RELEASE_COLUMNS,
    human_size,
    print_error,
    release_row_columns,
    render_release,
    short_digest,
)

UPLOAD_STOPS = frozenset({"published", "rejected", "expired"})


@dataclass(frozen=True)
class Prepared:
    """What a build or publish packs: the archive, its manifest, and the name and version it goes out under."""

    archive: bytes
    manifest: dict[str, Any]
    package: str | None
    version: str | None
    config: PackageConfig
    found: FolderFiles | None = None  # what a folder build packed and left out (None for --archive/--manifest)


def _usage(title: str, detail: str | None = None) -> CliError:
    return CliError(title, detail=detail, exit_code=EXIT_USAGE)


def _prepare(args: argparse.Namespace) -> Prepared:
    """Build from DIR (its package file, flags winning) or read --archive with --manifest."""
    from packyard_cli.build import build_from_files

    package = getattr(args, "package", None)
    version = getattr(args, "version", None)
    archive_file, manifest_file = getattr(args, "archive", None), getattr(args, "manifest", None)
    if args.directory and (archive_file or manifest_file):
        raise _usage("give either DIR or --archive with --manifest")
    if archive_file or manifest_file:
        if not (archive_file and manifest_file):
            raise _usage("--archive and --manifest go together")
        try:
            manifest = json.loads(Path(manifest_file).read_text("utf-8"))
            data = Path(archive_file).read_bytes()
        except (OSError, ValueError) as exc:
            raise CliError("cannot read the prebuilt package", detail=str(exc), exit_code=EXIT_USAGE) from None
        return Prepared(data, manifest, package, version, PackageConfig())
    if not args.directory:
        raise _usage("nothing to publish", "give a DIR (or --archive and --manifest)")
    config = load_config(args.directory)
    permissions = args.permission if args.permission is not None else (config.permissions or [])
    metadata = {**config.metadata, **dict(args.metadata or [])}
    found = collect(args.directory, follow_links=getattr(args, "follow_links", False))
    try:
        files, modes = read_files(found)
        built = build_from_files(files, modes=modes, permissions=permissions, metadata=metadata)
    except OSError as exc:
        raise CliError("cannot build the package", detail=str(exc)) from None
    return Prepared(built.archive, built.manifest, package or config.name, version or config.version, config, found)


PACKING_SHOWN = 5  # ignored paths named in the summary without --list


def packing_summary(found: FolderFiles, list_all: bool) -> dict[str, Any]:
    """How many files were packed, what the ignore rules left out (all of it with --list), the links followed."""
    return {
        "packed": len(found.files),
        "ignored": len(found.ignored),
        "ignoredPaths": found.ignored if list_all else found.ignored[:PACKING_SHOWN],
        "followedLinks": dict(found.followed),
    }


def report_packing(ctx: Context, folder: str, found: FolderFiles, list_all: bool) -> None:
    """On stderr, always (like ``npm pack``): nothing the ignore rules drop goes unsaid."""
    from rich.markup import escape

    summary = packing_summary(found, list_all)
    text = f"packed {summary['packed']} file{'s' if summary['packed'] != 1 else ''} from {folder}"
    if found.ignored:
        shown = summary["ignoredPaths"]
        more = len(found.ignored) - len(shown)
        text += f"; the ignore rules left out {len(found.ignored)}: {', '.join(shown)}"
        if more:
            text += f" and {more} more (--list shows all)"
    else:
        text += "; the ignore rules left out nothing"
    if found.followed:
        text += "; followed links: " + ", ".join(f"{link} → {target}" for link, target in found.followed.items())
    ctx.err.print(escape(text), highlight=False, soft_wrap=True)


def cmd_build(ctx: Context, args: argparse.Namespace) -> int:
    args.archive = args.manifest = None
    if args.list:
        return _list_files(ctx, args)
    prepared = _prepare(args)
    archive, manifest = prepared.archive, prepared.manifest
    if prepared.found is not None:
        report_packing(ctx, args.directory, prepared.found, list_all=False)
    default_prefix = Path(Path(args.directory).resolve().name)
    if prepared.package and prepared.version:
        default_prefix = Path(f"{prepared.package}-{prepared.version}")
    prefix = Path(args.out) if args.out else default_prefix
    archive_path = prefix.with_name(prefix.name + ".tar.gz")
    manifest_path = prefix.with_name(prefix.name + ".manifest.json")
    archive_path.parent.mkdir(parents=True, exist_ok=True)
    archive_path.write_bytes(archive)
    manifest_path.write_text(json.dumps(manifest, indent=2) + "\n", "utf-8")
    summary = {
        "package": prepared.package,
        "version": prepared.version,
        "archive": str(archive_path),
        "manifest": str(manifest_path),
        "sha256": hashlib.sha256(archive).hexdigest(),
        "size": len(archive),
        "files": len(manifest["files"]),
        **({"packing": packing_summary(prepared.found, list_all=True)} if prepared.found is not None else {}),
    }
    columns = (
        Column("archive", dig("archive"), key=True),
        Column("manifest", dig("manifest"), key=True),
        Column("sha256", dig("sha256")),
        Column("size", dig("size")),
        Column("files", dig("files")),
    )
    ctx.show(
        summary,
        columns=columns,
        render=lambda: ctx.out.print(
            f"built {summary['files']} files → {archive_path} ({human_size(len(archive))}, sha256 "
            f"{summary['sha256']}) and {manifest_path}",
            highlight=False,
            soft_wrap=True,
        ),
    )
    return EXIT_OK


def _list_files(ctx: Context, args: argparse.Namespace) -> int:
    """``build --list``: what the ignore rules keep and leave out, without building anything."""
    from packyard_cli.folder import collect

    found = collect(args.directory, follow_links=args.follow_links)
    items = [{"path": p, "packed": True} for p in found.files] + [{"path": p, "packed": False} for p in found.ignored]
    columns = (Column("path", dig("path"), key=True), Column("packed", dig("packed")))

    def render() -> None:
        for path in found.files:
            ctx.out.print(path, highlight=False)
        if found.ignored:
            ctx.out.print(f"[dim]ignored: {', '.join(found.ignored)}[/]", highlight=False, soft_wrap=True)

    ctx.show({"items": items}, columns=columns, render=render)
    return EXIT_OK


# ------------------------------------------------------------------ publish


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


def _name_and_version(args: argparse.Namespace, prepared: Prepared) -> tuple[str, str]:
    where = f"{args.directory}/packyard.toml" if args.directory else "a packyard.toml"
    if not prepared.package:
        raise _usage("which package?", f"set name in {where} (packyard init makes one), or pass --package NAME")
    if not prepared.version:
        raise _usage("which version?", f"set version in {where}, or pass --version X.Y.Z")
    for problem in (rules.package_problem(prepared.package), rules.version_problem(prepared.version)):
        if problem:
            raise _usage(problem)
    return prepared.package, prepared.version


def _warn_dropped_permissions(ctx: Context, package: str, version: str, manifest: dict[str, Any]) -> None:
    """A new version that declares fewer permissions than the newest published one: say so (installs updated to
    it lose those grants). Best effort: any error here is ignored."""
    try:
        _, latest = resolve_release(ctx, ReleaseRef(package, None), quiet=True)
        if latest == version:
            return
        newest = ctx.client.request("GET", f"/v1/packages/{segment(package)}/versions/{segment(latest)}").body
    except CliError:
        return
    declared = {(p.get("kind"), p.get("resource", "*")) for p in manifest.get("permissions") or []}
    dropped = [
        f"{k}:{r}"
        for k, r in ((p.get("kind"), p.get("resource", "*")) for p in newest.get("permissions") or [])
        if (k, r) not in declared
    ]
    if dropped:
        ctx.warn(
            f"{package}@{version} does not declare {', '.join(dropped)}, which {package}@{latest} does: "
            "installations updated to it lose that grant (declare it with --permission or in packyard.toml)"
        )


def cmd_publish(ctx: Context, args: argparse.Namespace) -> int:
    prepared = _prepare(args)
    if prepared.found is not None:
        report_packing(ctx, args.directory, prepared.found, list_all=args.list)
    package, version = _name_and_version(args, prepared)
    archive, manifest = prepared.archive, prepared.manifest
    _warn_dropped_permissions(ctx, package, version, manifest)
    request = {"manifest": manifest, "archive": {"size": len(archive), "sha256": hashlib.sha256(archive).hexdigest()}}
    ctx.note(
        f"publishing [bold]{package}@{version}[/]: {len(manifest.get('files', []))} files, archive "
        f"{human_size(len(archive))} sha256 {short_digest(request['archive']['sha256'], 16)}"
    )
    base = f"/v1/packages/{segment(package)}/versions/{segment(version)}"
    # one key per command, kept across the client's retries: a retry after a lost answer gets the same session
    # (one reservation), not a second one holding quota until it expires
    key = args.idempotency_key or str(uuid.uuid4())
    session = ctx.client.request("POST", f"{base}/uploads", body=request, idempotency_key=key)
    if session.status == 200:
        ctx.note("already published with identical content: nothing to upload")
        release = session.body.get("release", session.body)
        ctx.show(release, render=lambda: render_release(ctx, release, "release"), columns=release_row_columns())
        return EXIT_OK
    upload = session.body
    upload_id = upload["uploadId"]
    if upload.get("uploadRequired", True):
        target = upload.get("upload") or {}
        upload_with_progress(ctx, target["url"], archive, dict(target.get("headers") or {}))
        ctx.note(f"uploaded {human_size(len(archive))} to the presigned URL")
    else:
        ctx.note("the service already holds this archive: nothing to upload")
    deadline = time.monotonic() + args.wait_timeout
    # the service answers once the upload is published or rejected, within the wait: most need no further request
    prefer = {} if args.no_wait else {"Prefer": f"wait={wait_seconds(deadline)}"}
    completed = ctx.client.request("POST", f"/v1/uploads/{segment(upload_id)}/complete", headers=prefer)
    if args.no_wait:
        ctx.show(
            completed.body,
            render=lambda: ctx.note(f"upload [bold]{upload_id}[/] is {completed.body.get('state')}; it goes on"),
            columns=(Column("upload", dig("uploadId"), key=True), Column("state", dig("state"))),
        )
        return EXIT_OK

    def fetch() -> dict[str, Any]:
        path = f"/v1/uploads/{segment(upload_id)}"
        return dict(ctx.client.request("GET", path, params={"wait": wait_seconds(deadline)}).body)

    if completed.body.get("state") in UPLOAD_STOPS:
        final = dict(completed.body)
    else:
        final = wait_for(
            ctx,
            fetch,
            done=lambda body: body.get("state") in UPLOAD_STOPS,
            label=lambda body: f"verifying {package}@{version}: {body.get('state')}",
            timeout=max(0.0, deadline - time.monotonic()),
            server_waits=True,
        )
    if final.get("state") == "published":
        release = ctx.client.request("GET", base).body
        ctx.show(release, render=lambda: render_release(ctx, release, "published"), columns=release_row_columns())
        return EXIT_OK
    return _not_published(ctx, final, package, version)


def _not_published(ctx: Context, final: dict[str, Any], package: str, version: str) -> int:
    """A rejected or expired upload: the service's rejection (code, detail, sub-code) with exit code 3. Printed in
    the shape of a refusal at session creation (problem+json ``code``, ``subCode``, ``detail`` at the top, so
    ``--query code`` reads both), with the upload's ``uploadId``, ``state`` and ``rejection`` beside them."""
    state = final.get("state")
    rejection = final.get("rejection") or {}
    code = rejection.get("code") or ("upload_expired" if state == "expired" else None)
    title = "Archive rejected" if state == "rejected" else f"Upload {state}"
    problem: dict[str, Any] = {
        **final,
        "type": f"https://packyard.dev/problems/{code}" if code else "about:blank",
        "title": title,
        "status": 422 if state == "rejected" else 410,
        "code": code,
        **({"subCode": rejection["subCode"]} if rejection.get("subCode") else {}),
        "detail": rejection.get("detail") or f"the upload is {state}",
    }
    error = CliError(
        f"{title}: {package}@{version} was not published",
        code=code,
        detail=rejection.get("detail"),
        exit_code=EXIT_REFUSED,
        body=problem,
    )
    print_error(ctx, error)
    return EXIT_REFUSED


# ------------------------------------------------------------------ releases


def _release_path(package: str, version: str) -> str:
    return f"/v1/packages/{segment(package)}/versions/{segment(version)}"


def cmd_releases(ctx: Context, args: argparse.Namespace) -> int:
    target: str | None = args.package_or_release
    if target and "@" in target:
        package, version = resolve_release(ctx, release_ref(target))
        release = ctx.client.request("GET", _release_path(package, version)).body
        ctx.show(release, render=lambda: render_release(ctx, release, "release"), columns=release_row_columns())
        return EXIT_OK
    if target:
        problem = rules.package_problem(target)
        if problem:
            raise _usage(problem)
        listing = paginate(ctx, f"/v1/packages/{segment(target)}/versions", "versions")
        listing.items.sort(key=lambda r: rules.semver_key(str(r.get("version"))), reverse=True)
        ctx.show(listing.body(), columns=RELEASE_COLUMNS, empty=f"{target} has no versions")
        return EXIT_OK
    listing = paginate(ctx, "/v1/packages", "packages")
    ctx.show(listing.body(), columns=PACKAGE_COLUMNS, empty="no packages yet: packyard publish DIR")
    return EXIT_OK


def cmd_yank(ctx: Context, args: argparse.Namespace) -> int:
    package, version = args.release
    release = ctx.client.request("DELETE", _release_path(package, version)).body

    def render() -> None:
        render_release(ctx, release, "yanked")
        ctx.note("  (a yanked version is never reused; installs of it are refused)")

    ctx.show(release, render=render, columns=release_row_columns())
    return EXIT_OK


# ------------------------------------------------------------------ pull


def _destination(out: str | None, package: str, version: str) -> Path:
    name = f"{package}-{version}.tar.gz"
    if not out:
        return Path(name)
    path = Path(out)
    if out.endswith(("/", os.sep)) or path.is_dir():
        return path / name
    return path


def cmd_pull(ctx: Context, args: argparse.Namespace) -> int:
    """Download a release's archive and check its size and sha256 against the release before keeping it."""
    package, version = resolve_release(ctx, args.release)
    release = ctx.client.request("GET", _release_path(package, version)).body or {}
    expected = dict(release.get("archive") or {})
    link = ctx.client.request("GET", _release_path(package, version) + "/archive").body or {}
    for name in ("sha256", "size"):
        if link.get(name) != expected.get(name):
            raise CliError(
                f"the download link disagrees with the release about the archive's {name}",
                detail=f"release {expected.get(name)!r}, link {link.get(name)!r}",
            )
    target = _destination(args.out, package, version)
    target.parent.mkdir(parents=True, exist_ok=True)
    scratch = target.with_name(f".{target.name}.partial")
    digest = hashlib.sha256()
    size = 0
    try:
        with ctx.status(f"downloading {package}@{version}"), scratch.open("wb") as sink:
            for chunk in ctx.client.download(str(link["url"])):
                digest.update(chunk)
                size += len(chunk)
                sink.write(chunk)
        if size != expected.get("size") or digest.hexdigest() != expected.get("sha256"):
            raise CliError(
                f"the downloaded archive of {package}@{version} does not match the release",
                code="digest_mismatch",
                detail=f"got {size} bytes, sha256 {digest.hexdigest()}; the release has {expected.get('size')} "
                f"bytes, sha256 {expected.get('sha256')}. Nothing was kept.",
                exit_code=EXIT_REFUSED,
            )
        os.replace(scratch, target)
    finally:
        scratch.unlink(missing_ok=True)
    summary = {
        "package": package,
        "version": version,
        "status": release.get("status"),
        "path": str(target),
        "sha256": digest.hexdigest(),
        "size": size,
        "verified": True,
    }
    columns = (
        Column("path", dig("path"), key=True),
        Column("sha256", dig("sha256")),
        Column("size", dig("size")),
        Column("release", lambda d: f"{d['package']}@{d['version']}", key=True),
    )

    def render() -> None:
        ctx.out.print(
            f"[bold green]pulled[/] {package}@{version} → [bold]{target}[/] ({human_size(size)}, sha256 "
            f"{digest.hexdigest()}: matches the release)",
            highlight=False,
            soft_wrap=True,
        )
        if release.get("status") == "yanked":
            ctx.out.print("  note: this release is yanked", highlight=False)

    ctx.show(summary, render=render, columns=columns)
    return EXIT_OK
