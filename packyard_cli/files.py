"""One file of a release or of an installation, verified: what ``packyard cat`` prints and ``packyard sync`` can
call (``read_release_file``, ``read_installation_file``).

The API answers a small file inline (200) and a large one with a 307 to a short-lived URL of exactly its bytes;
either way it sends the file's sha256 as ``Repr-Digest`` (RFC 9530) and its size. The bytes are checked against
both here too before anything is returned: a mismatch is a ``CliError`` (``digest_mismatch``), never bytes.
"""

from __future__ import annotations

import base64
import hashlib
import re
from dataclasses import dataclass
from urllib.parse import quote

from packyard_cli.client import EXIT_REFUSED, Client, CliError, segment

_REPR_DIGEST = re.compile(r"(?:^|,)\s*sha-256=:([A-Za-z0-9+/=]+):")


@dataclass(frozen=True)
class FetchedFile:
    path: str
    data: bytes
    sha256: str
    size: int


def release_file_path(package: str, version: str, file_path: str) -> str:
    return f"/v1/packages/{segment(package)}/versions/{segment(version)}/files/{quote(file_path, safe='/')}"


def installation_file_path(workspace: str, installation: str, file_path: str) -> str:
    return (
        f"/v1/workspaces/{segment(workspace)}/installations/{segment(installation)}/files/{quote(file_path, safe='/')}"
    )


def read_release_file(client: Client, package: str, version: str, file_path: str) -> FetchedFile:
    """The verified bytes of ``file_path`` of ``package@version``."""
    return read_file(client, release_file_path(package, version, file_path), file_path)


def read_installation_file(client: Client, workspace: str, installation: str, file_path: str) -> FetchedFile:
    """The verified bytes of ``file_path`` of the installation's active release."""
    return read_file(client, installation_file_path(workspace, installation, file_path), file_path)


def read_file(client: Client, api_path: str, file_path: str) -> FetchedFile:
    response = client.fetch(api_path)
    found = _REPR_DIGEST.search(response.headers.get("Repr-Digest", ""))
    if found is None:
        raise CliError(f"the answer for {file_path!r} carries no sha-256 Repr-Digest", code="digest_missing")
    sha256 = base64.b64decode(found.group(1)).hex()
    size = int(response.headers.get("Packyard-File-Size", "-1"))
    if response.status_code in (301, 302, 303, 307, 308):
        data = b"".join(client.download(response.headers["Location"]))
    else:
        data = response.content
    if len(data) != size or hashlib.sha256(data).hexdigest() != sha256:
        raise CliError(
            f"the bytes of {file_path!r} do not match their digest",
            code="digest_mismatch",
            detail=f"got {len(data)} bytes, sha256 {hashlib.sha256(data).hexdigest()}; expected {size} bytes, "
            f"sha256 {sha256}. Nothing was printed.",
            exit_code=EXIT_REFUSED,
        )
    return FetchedFile(path=file_path, data=data, sha256=sha256, size=size)
