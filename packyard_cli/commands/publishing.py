"""Publishing releases: ``build`` (archive and manifest on disk), ``publish`` (upload, verification by the service,
the published release), ``releases`` (packages, versions, one release) and ``yank``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from packyard_cli.arguments import package_at_version
from packyard_cli.client import EXIT_OK, EXIT_REFUSED, EXIT_USAGE, CliError, segment
from packyard_cli.commands.context import Context, all_pages, wait_for
from packyard_cli.render import human_size, make_table, print_error, render_release, short_digest, utc_time

UPLOAD_STOPS = frozenset({"published", "rejected", "expired"})


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
            f"built {summary['files']} files → {archive_path} ({human_size(len(archive))}, sha256 "
            f"{summary['sha256']}) and {manifest_path}",
            highlight=False,
            soft_wrap=True,
        ),
    )
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


def cmd_publish(ctx: Context, args: argparse.Namespace) -> int:
    package, version = args.package, args.version
    archive, manifest = _build(args)
    request = {"manifest": manifest, "archive": {"size": len(archive), "sha256": hashlib.sha256(archive).hexdigest()}}
    ctx.note(
        f"publishing [bold]{package}@{version}[/]: {len(manifest.get('files', []))} files, archive "
        f"{human_size(len(archive))} sha256 {short_digest(request['archive']['sha256'], 16)}"
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
        ctx.note(f"uploaded {human_size(len(archive))} to the presigned URL")
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
    if final.get("state") == "published":
        release = ctx.client.request("GET", base).body
        ctx.emit(release, lambda: render_release(ctx, release, "published"))
        return EXIT_OK
    return _not_published(ctx, final, package, version)


def _not_published(ctx: Context, final: dict[str, Any], package: str, version: str) -> int:
    """A rejected or expired upload: the service's rejection (code, detail, sub-code) with exit code 3."""
    if ctx.json:
        print(json.dumps(final, indent=2))
        return EXIT_REFUSED
    state = final.get("state")
    rejection = final.get("rejection") or {}
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


# ------------------------------------------------------------------ releases


def cmd_releases(ctx: Context, args: argparse.Namespace) -> int:
    if args.package_or_release and "@" in args.package_or_release:
        package, version = package_at_version(args.package_or_release)
        release = ctx.client.request("GET", f"/v1/packages/{segment(package)}/versions/{segment(version)}").body
        ctx.emit(release, lambda: render_release(ctx, release, "release"))
        return EXIT_OK
    path = f"/v1/packages/{segment(args.package_or_release)}/versions" if args.package_or_release else "/v1/packages"
    items = all_pages(ctx, path)
    table = _versions_table(items) if args.package_or_release else _packages_table(items)
    ctx.emit({"items": items}, lambda: ctx.out.print(table) if items else ctx.out.print("no releases yet"))
    return EXIT_OK


def _versions_table(items: list[dict[str, Any]]) -> Any:
    table = make_table("version", "status", "archive", "files", "manifest digest", "published")
    for r in items:
        table.add_row(
            str(r.get("version")),
            str(r.get("status")),
            human_size((r.get("archive") or {}).get("size")),
            str(r.get("fileCount", "")),
            short_digest(r.get("manifestDigest")),
            utc_time(r.get("publishedAt")),
        )
    return table


def _packages_table(items: list[dict[str, Any]]) -> Any:
    table = make_table("package", "latest", "versions", "created")
    for p in items:
        table.add_row(
            str(p.get("package")),
            str(p.get("latestVersion")),
            str(p.get("versionCount")),
            utc_time(p.get("createdAt")),
        )
    return table


def cmd_yank(ctx: Context, args: argparse.Namespace) -> int:
    package, version = args.release
    release = ctx.client.request("DELETE", f"/v1/packages/{segment(package)}/versions/{segment(version)}").body
    ctx.emit(release, lambda: render_release(ctx, release, "yanked"))
    ctx.note("  (a yanked version is never reused; installs of it are refused)")
    return EXIT_OK
