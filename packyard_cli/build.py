"""Build a package the same way every time: sorted entries, fixed mtimes and owners, gzip mtime 0.

The same folder therefore gives the same archive digest and the same manifest digest.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import tarfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

FIXED_MTIME = 0


@dataclass(frozen=True)
class BuiltPackage:
    archive: bytes
    manifest: dict[str, Any]

    @property
    def archive_sha256(self) -> str:
        return hashlib.sha256(self.archive).hexdigest()

    @property
    def archive_size(self) -> int:
        return len(self.archive)

    def upload_request(self) -> dict[str, Any]:
        return {"manifest": self.manifest, "archive": {"size": self.archive_size, "sha256": self.archive_sha256}}


def build_from_files(
    files: Mapping[str, bytes],
    *,
    modes: Mapping[str, int] | None = None,
    permissions: list[dict[str, Any]] | None = None,
    metadata: Mapping[str, Any] | None = None,
) -> BuiltPackage:
    """Archive ``{relative path: bytes}`` and describe it in a manifest."""
    modes = modes or {}
    buffer = io.BytesIO()
    with (
        gzip.GzipFile(fileobj=buffer, mode="wb", mtime=FIXED_MTIME, compresslevel=6) as gz,
        tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as tar,
    ):
        for path in sorted(files):
            data = files[path]
            info = tarfile.TarInfo(path)
            info.size = len(data)
            info.mode = modes.get(path, 0o644)
            info.mtime = FIXED_MTIME
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            tar.addfile(info, io.BytesIO(data))
    manifest_files = []
    for path in sorted(files):
        entry: dict[str, Any] = {
            "path": path,
            "size": len(files[path]),
            "sha256": hashlib.sha256(files[path]).hexdigest(),
        }
        if path in modes:
            entry["mode"] = modes[path]
        manifest_files.append(entry)
    manifest = {
        "protocolVersion": 1,
        "files": manifest_files,
        "permissions": list(permissions or []),
        "metadata": dict(metadata or {}),
    }
    return BuiltPackage(archive=buffer.getvalue(), manifest=manifest)


def build_from_directory(root: str | Path, **kwargs: Any) -> BuiltPackage:
    """Every regular file under ``root`` that the ignore rules keep (:mod:`packyard_cli.folder`: the defaults, then
    ``.packyardignore``); symbolic links and special files are refused, not followed."""
    from packyard_cli.folder import collect, read_files

    files, modes = read_files(collect(root))
    return build_from_files(files, modes=modes, **kwargs)
