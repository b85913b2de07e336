"""Answers of the file routes: the verified bytes inline, or a redirect to exactly them with a ``FileLinkView``.

Both carry the file's digest as ``Repr-Digest`` (RFC 9530: the sha256 of the file's bytes, its representation, as
a structured-field byte sequence), the older ``Digest`` (RFC 3230, which RFC 9530 obsoletes; some clients still
read it) and a strong ``ETag`` (the sha256 in hex): a client checks what it got without trusting the transport.
"""

from __future__ import annotations

import base64
import re
from typing import Any, Self

from aws_lambda_powertools.event_handler import Response
from pydantic import Field

from packyard.api.base import ApiModel
from packyard.api.times import Timestamp
from packyard.publishing.files import NOTHING_HELD, Held, ReleaseFile

OCTET_STREAM = "application/octet-stream"
_SHA256 = re.compile(r"[0-9a-f]{64}")


class FileLinkView(ApiModel):
    """The body of a 307 to a large file's short-lived URL (its ``Location``)."""

    path: str = Field(description="the file's path in the release")
    url: str = Field(description="presigned GET URL of exactly the file's bytes")
    expires_at: Timestamp = Field(alias="expiresAt", description="when the URL stops working, RFC 3339 UTC")
    size: int = Field(description="the file's size in bytes (the manifest's)")
    sha256: str = Field(description="the file's sha256 (the manifest's): check the downloaded bytes against it")

    @classmethod
    def of(cls, found: ReleaseFile) -> Self:
        if found.url is None or found.expires_at is None:
            raise ValueError(f"{found.path!r} is answered inline, not by a link")
        return cls(path=found.path, url=found.url, expires_at=found.expires_at, size=found.size, sha256=found.sha256)


def digest_headers(found: ReleaseFile) -> dict[str, str]:
    digest = base64.b64encode(bytes.fromhex(found.sha256)).decode()
    return {
        "Repr-Digest": f"sha-256=:{digest}:",
        "Digest": f"sha-256={digest}",
        "ETag": f'"{found.sha256}"',
        "Packyard-File-Size": str(found.size),
    }


def held_by(if_none_match: str | None) -> Held:
    """The entity tags of an ``If-None-Match`` (RFC 9110 13.1.2: weak comparison, so ``W/`` is ignored; ``*``
    matches any file); a tag that is not a sha256 holds nothing."""
    if not if_none_match:
        return NOTHING_HELD
    if if_none_match.strip() == "*":
        return Held(anything=True)
    tags = (tag.strip().removeprefix("W/").strip('"') for tag in if_none_match.split(","))
    return Held(sha256s=frozenset(tag for tag in tags if _SHA256.fullmatch(tag)))


def file_response(found: ReleaseFile, *, cache_control: str) -> Response[Any]:
    """200 with the bytes (base64 through API Gateway), 307 to the file's own object, or 304 (no body) to a caller
    that holds them."""
    headers = {**digest_headers(found), "Cache-Control": cache_control}
    if found.not_modified:
        return Response(status_code=304, headers=headers)
    if found.content is not None:
        headers["Content-Length"] = str(len(found.content))
        return Response(status_code=200, content_type=OCTET_STREAM, body=found.content, headers=headers)
    link = FileLinkView.of(found)
    headers["Location"] = link.url
    return Response(
        status_code=307, content_type="application/json", body=link.model_dump_json(by_alias=True), headers=headers
    )


def file_responses(documented: dict[int, Any]) -> dict[int, Any]:
    """A file route's OpenAPI responses: ``documented`` (its problem+json errors) with the bytes and the link."""
    return {
        **documented,
        200: {
            "description": "The file's bytes, checked against the manifest's sha256 (Repr-Digest, ETag)",
            "content": {OCTET_STREAM: {"schema": {"type": "string", "format": "binary"}}},
        },
        307: {
            "description": "A large file: Location is a short-lived URL of exactly its bytes (Repr-Digest, ETag)",
            "content": {"application/json": {"model": FileLinkView}},
        },
        304: {"description": "If-None-Match names the file's ETag (its sha256): the caller holds these bytes"},
    }
