"""Domain models of the publish side: upload sessions and releases.

These are what the domain reasons about. The data access layer stores them with a ``schemaVersion`` and
validates them on read; the HTTP layer renders them with its own response models (``packyard.api``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from packyard.errors import InvalidRequest

# full matches over ASCII classes: "$" would accept a trailing newline, "\\d" non-ASCII digits
PACKAGE_NAME = re.compile(r"[a-z0-9](?:[a-z0-9._-]{0,62}[a-z0-9])?", re.ASCII)
# semver 2.0.0, from the spec's grammar (no leading zeros in numeric identifiers)
SEMVER = re.compile(
    r"(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)"
    r"(?:-((?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*)(?:\.(?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*))*))?"
    r"(?:\+([0-9a-zA-Z-]+(?:\.[0-9a-zA-Z-]+)*))?",
    re.ASCII,
)
SHA256_HEX = re.compile(r"[0-9a-f]{64}", re.ASCII)


def check_package_name(name: str) -> str:
    if not isinstance(name, str) or not PACKAGE_NAME.fullmatch(name):
        raise InvalidRequest(
            f"package name {name!r} must be 1-64 chars of a-z, 0-9, '.', '_', '-', starting and ending alphanumeric"
        )
    return name


def check_version(version: str) -> str:
    if not isinstance(version, str) or len(version) > 128 or not SEMVER.fullmatch(version):
        raise InvalidRequest(f"version {version!r} is not a semantic version (e.g. 1.2.3 or 1.2.3-rc.1)")
    return version


def semver_key(version: str) -> tuple[Any, ...]:
    """Sort key following semver precedence (build metadata ignored, pre-releases before the release)."""
    match = SEMVER.fullmatch(version)
    if not match:
        return (0, 0, 0, 0, ())
    major, minor, patch, pre = int(match[1]), int(match[2]), int(match[3]), match[4]
    if pre is None:
        return (major, minor, patch, 1, ())
    parts = tuple((0, int(p), "") if p.isdigit() else (1, 0, p) for p in pre.split("."))
    return (major, minor, patch, 0, parts)


class UploadState(StrEnum):
    AWAITING_UPLOAD = "awaiting_upload"
    VERIFYING = "verifying"
    PUBLISHED = "published"
    REJECTED = "rejected"
    EXPIRED = "expired"


class ArchiveSource(StrEnum):
    """Where verify reads the archive: the session's staging object, or a blob the tenant already holds."""

    UPLOAD = "upload"
    BLOB = "blob"


class Rejection(BaseModel):
    model_config = ConfigDict(populate_by_name=True, frozen=True, defer_build=True)

    code: str
    sub_code: str | None = Field(default=None, alias="subCode")
    detail: str

    def as_output(self) -> dict[str, Any]:
        """How a rejection reads in the publish state machine's output."""
        body = {"code": self.code, "detail": self.detail}
        if self.sub_code:
            body["subCode"] = self.sub_code
        return body


class Upload(BaseModel):
    """One upload session: a per-attempt token and staging keys, a deadline and a quota reservation."""

    model_config = ConfigDict(populate_by_name=True, frozen=True, defer_build=True)

    tenant: str
    upload_id: str = Field(alias="uploadId")
    token: str
    package: str
    version: str
    state: UploadState
    source: ArchiveSource
    archive_size: int = Field(alias="archiveSize")
    archive_sha256: str = Field(alias="archiveSha256")
    manifest_digest: str = Field(alias="manifestDigest")
    manifest_size: int = Field(alias="manifestSize")
    content_digest: str = Field(alias="contentDigest")
    reserved_bytes: int = Field(alias="reservedBytes")
    created_at: int = Field(alias="createdAt")
    # the session deadline; not the table's TTL attribute (expiresAt), which only settled sessions get
    expires_at: int = Field(alias="deadlineAt")
    execution_arn: str | None = Field(default=None, alias="executionArn")
    # how many times the sweep started verification again (publishing.resumption): a fenced count, never a lookup
    resumes: int = 0
    rejection: Rejection | None = None
    settled_at: int | None = Field(default=None, alias="settledAt")
    created_by: str | None = Field(default=None, alias="createdBy")
    # the request an Idempotency-Key created it for (a replay with another request is refused)
    request_digest: str | None = Field(default=None, alias="requestDigest")

    @property
    def is_verifying(self) -> bool:
        return self.state is UploadState.VERIFYING

    def is_expired(self, now: int) -> bool:
        return self.state is UploadState.EXPIRED or (
            self.state is UploadState.AWAITING_UPLOAD and now >= self.expires_at
        )


class ReleaseStatus(StrEnum):
    PUBLISHED = "published"
    YANKED = "yanked"
    UNAVAILABLE = "unavailable"


class AttestationRef(BaseModel):
    """A release's signed statement (a DSSE envelope, ``publishing.signing``): the envelope's sha256 and size and
    the kid of the KMS key behind it (``GET /v1/signing-keys``). Signed by a short-lived key (``signer`` set): the
    signature, that key's kid and the statement's verifier are here, and the envelope is rebuilt from the release
    and the key's certificate (about 190 bytes more on the release item, no object). Signed by KMS itself (older
    releases): the envelope is an S3 object."""

    model_config = ConfigDict(populate_by_name=True, frozen=True)

    sha256: str
    size: int
    key_id: str = Field(alias="keyId")
    sig: str | None = None
    """base64 of the short-lived key's DER ECDSA signature over the statement's PAE."""
    signer: str | None = None
    """kid of the short-lived key (its certificate is recorded by store.signing)."""
    verifier: str | None = None


class SigningKey(BaseModel):
    """A public key that signed releases (its JWK), recorded the first time it signed: a rotated-out key stays
    listed at ``GET /v1/signing-keys``, so releases it signed keep verifying."""

    model_config = ConfigDict(populate_by_name=True, frozen=True)

    kid: str
    key_arn: str = Field(alias="keyArn")
    x: str
    y: str
    first_signed_at: int = Field(alias="firstSignedAt")


class Release(BaseModel):
    """``package@version``: immutable once written. Status may move to yanked/unavailable; the version never frees."""

    model_config = ConfigDict(populate_by_name=True, frozen=True)

    tenant: str
    package: str
    version: str
    status: ReleaseStatus
    manifest_digest: str = Field(alias="manifestDigest")
    content_digest: str = Field(alias="contentDigest")
    manifest_size: int = Field(alias="manifestSize")
    archive_sha256: str = Field(alias="archiveSha256")
    archive_size: int = Field(alias="archiveSize")
    unpacked_size: int = Field(alias="unpackedSize")
    file_count: int = Field(alias="fileCount")
    permissions: list[dict[str, Any]] = Field(default_factory=list)
    upload_id: str = Field(alias="uploadId")
    published_at: int = Field(alias="publishedAt")
    yanked_at: int | None = Field(default=None, alias="yankedAt")
    published_by: str | None = Field(default=None, alias="publishedBy")
    # reclamation: bumped by every change of who holds the release (installations: store/reclaims.py), and when
    # a yanked release nobody held gave its blobs back (then nothing may hold it again)
    hold_generation: int = Field(default=0, alias="holdGeneration")
    blobs_released_at: int | None = Field(default=None, alias="blobsReleased")
    # the signed statement (None: published before releases were signed)
    attestation: AttestationRef | None = None

    def receipt(self) -> dict[str, Any]:
        """What publishing proved: the stored bytes, re-read and hashed by the verifier, match these digests."""
        return {
            "package": self.package,
            "version": self.version,
            "manifestDigest": self.manifest_digest,
            "contentDigest": self.content_digest,
            "archive": {"sha256": self.archive_sha256, "size": self.archive_size},
            "unpackedSize": self.unpacked_size,
            "fileCount": self.file_count,
            "uploadId": self.upload_id,
            "publishedAt": self.published_at,
        }


class Package(BaseModel):
    model_config = ConfigDict(populate_by_name=True, frozen=True, defer_build=True)

    tenant: str
    package: str
    created_at: int = Field(alias="createdAt")
    latest_version: str = Field(alias="latestVersion")
    version_count: int = Field(alias="versionCount")


@dataclass(frozen=True)
class ArchiveLink:
    """A short-lived download URL of a release's archive, with the digest to check the bytes against."""

    url: str
    expires_at: int
    sha256: str
    size: int
    status: ReleaseStatus
