"""API response models of the publish side (uploads, packages, releases). ``ApiModel``, the base of them all, and
``ReleaseArchive`` live in ``packyard.api.base`` (re-exported here for existing importers).

One model per route, separate from the domain models and from what the store keeps. Each renders, with
``model_dump(by_alias=True, mode="json")``, exactly the JSON the handlers answered with when the bodies were hand-built
dicts, and gives the OpenAPI document a typed schema instead of ``object``. Build them with ``View.of(domain, ...)``:
constructors only reshape what they are given (clocks and download URLs come in as arguments); they do no I/O.
"""

from __future__ import annotations

from typing import Any, Literal, Self

from pydantic import Field

from packyard.api.base import ApiModel as ApiModel
from packyard.api.base import ReleaseArchive as ReleaseArchive
from packyard.api.signing_responses import AttestationLinkView
from packyard.api.times import Timestamp

# Domain types
from packyard.publishing.manifest import PermissionKind
from packyard.publishing.models import (
    ArchiveLink,
    ArchiveSource,
    Package,
    Rejection,
    Release,
    ReleaseStatus,
    Upload,
    UploadState,
)

# ---- publishing: upload sessions ------------------------------------------------------------------------------------


class UploadArchive(ApiModel):
    size: int = Field(description="archive size in bytes, as declared when the session was created")
    sha256: str = Field(description="sha256 hex of the archive as declared")


class RejectionView(ApiModel):
    code: str = Field(description="stable error code, e.g. archive_rejected")
    detail: str = Field(description="human-readable reason")
    sub_code: str | None = Field(None, alias="subCode", description="finer code, e.g. digest_mismatch")

    @classmethod
    def of(cls, rejection: Rejection) -> Self:
        return cls(code=rejection.code, detail=rejection.detail, sub_code=rejection.sub_code or None)


def _upload_fields(upload: Upload, now: int) -> dict[str, Any]:
    state = UploadState.EXPIRED if upload.is_expired(now) else upload.state
    return {
        "upload_id": upload.upload_id,
        "package": upload.package,
        "version": upload.version,
        "state": state,
        "upload_required": upload.source is ArchiveSource.UPLOAD,
        "archive": UploadArchive(size=upload.archive_size, sha256=upload.archive_sha256),
        "manifest_digest": upload.manifest_digest,
        "content_digest": upload.content_digest,
        "expires_at": upload.expires_at,
        "execution_arn": upload.execution_arn or None,
        "rejection": RejectionView.of(upload.rejection) if upload.rejection else None,
        "release": f"/v1/packages/{upload.package}/versions/{upload.version}"
        if state is UploadState.PUBLISHED
        else None,
    }


class UploadView(ApiModel):
    """An upload session: ``GET /v1/uploads/{id}`` and ``POST /v1/uploads/{id}/complete``."""

    upload_id: str = Field(alias="uploadId", description="the session id")
    package: str
    version: str
    state: UploadState = Field(description="expired once the deadline passes with nothing uploaded")
    upload_required: bool = Field(
        alias="uploadRequired", description="false when the archive is a blob the tenant already holds"
    )
    archive: UploadArchive
    manifest_digest: str = Field(alias="manifestDigest", description="sha256 hex of the canonical manifest")
    content_digest: str = Field(alias="contentDigest", description="sha256 hex over the files' paths and digests")
    expires_at: Timestamp = Field(alias="expiresAt", description="session deadline, RFC 3339 UTC")
    execution_arn: str | None = Field(None, alias="executionArn", description="publish state machine execution")
    rejection: RejectionView | None = Field(None, description="why the upload was rejected (state rejected)")
    release: str | None = Field(None, description="path of the published release (state published)")

    @classmethod
    def of(cls, upload: Upload, now: int) -> Self:
        return cls(**_upload_fields(upload, now))


class UploadTarget(ApiModel):
    method: Literal["PUT"] = Field(description="HTTP method to send the archive bytes with")
    url: str = Field(description="presigned URL to send the archive to")
    headers: dict[str, str] = Field(description="headers to send with the archive")


class UploadLinks(ApiModel):
    self_link: str = Field(alias="self", description="this session")
    complete: str = Field(description="POST here once the archive is uploaded")


class CreatedUploadView(UploadView):
    """``POST /v1/packages/{p}/versions/{v}/uploads`` 201: a new session, and where to send the archive."""

    upload: UploadTarget | None = Field(None, description="absent when the archive is already held (no upload)")
    links: UploadLinks

    @classmethod
    def of(cls, upload: Upload, now: int, upload_url: str | None = None) -> Self:
        location = f"/v1/uploads/{upload.upload_id}"
        return cls(
            **_upload_fields(upload, now),
            upload=UploadTarget(method="PUT", url=upload_url, headers={}) if upload_url else None,
            links=UploadLinks(self_link=location, complete=f"{location}/complete"),
        )


# ---- publishing: packages and releases ------------------------------------------------------------------------------


class PackageView(ApiModel):
    """``GET /v1/packages/{p}``, and the items of ``GET /v1/packages``."""

    package: str
    latest_version: str = Field(alias="latestVersion", description="highest published version")
    version_count: int = Field(alias="versionCount", description="versions ever published (yanked ones too)")
    created_at: Timestamp = Field(alias="createdAt", description="RFC 3339 UTC")

    @classmethod
    def of(cls, package: Package) -> Self:
        return cls(
            package=package.package,
            latest_version=package.latest_version,
            version_count=package.version_count,
            created_at=package.created_at,
        )


class PackagePage(ApiModel):
    """``GET /v1/packages``."""

    keep_null = frozenset({"nextCursor"})
    items: list[PackageView]
    next_cursor: str | None = Field(alias="nextCursor", description="pass as ?cursor= for the next page; null at end")

    @classmethod
    def of(cls, packages: list[Package], next_cursor: str | None) -> Self:
        return cls(items=[PackageView.of(p) for p in packages], next_cursor=next_cursor)


class PermissionView(ApiModel):
    kind: PermissionKind
    resource: str = Field(description='what the permission covers; "*" for everything')
    reason: str | None = Field(None, description="why the package needs it, as declared")


class ReleaseView(ApiModel):
    """The items of ``GET /v1/packages/{p}/versions``."""

    package: str
    version: str = Field(description="semantic version")
    status: ReleaseStatus = Field(description="unavailable when the stored bytes failed an integrity check")
    manifest_digest: str = Field(alias="manifestDigest", description="sha256 hex of the canonical manifest")
    content_digest: str = Field(alias="contentDigest", description="sha256 hex over the files' paths and digests")
    archive: ReleaseArchive
    unpacked_size: int = Field(alias="unpackedSize", description="total bytes of the files")
    file_count: int = Field(alias="fileCount")
    permissions: list[PermissionView] = Field(description="what the package declares it needs")
    published_at: Timestamp = Field(alias="publishedAt", description="RFC 3339 UTC")
    yanked_at: Timestamp | None = Field(None, alias="yankedAt", description="when yanked, RFC 3339 UTC")
    published_by: str | None = Field(None, alias="publishedBy", description="the subject who published it")
    attestation: AttestationLinkView | None = Field(
        None, description="the release's signed statement (absent for releases published before signing)"
    )

    @classmethod
    def _fields(cls, release: Release) -> dict[str, Any]:
        return {
            "package": release.package,
            "version": release.version,
            "status": release.status,
            "manifest_digest": release.manifest_digest,
            "content_digest": release.content_digest,
            "archive": ReleaseArchive(sha256=release.archive_sha256, size=release.archive_size),
            "unpacked_size": release.unpacked_size,
            "file_count": release.file_count,
            "permissions": [PermissionView.model_validate(p) for p in release.permissions],
            "published_at": release.published_at,
            "yanked_at": release.yanked_at,
            "published_by": release.published_by,
            "attestation": AttestationLinkView.of(release.package, release.version, release.attestation)
            if release.attestation
            else None,
        }

    @classmethod
    def of(cls, release: Release) -> Self:
        return cls(**cls._fields(release))


class ReleasePage(ApiModel):
    """``GET /v1/packages/{p}/versions``."""

    keep_null = frozenset({"nextCursor"})
    items: list[ReleaseView]
    next_cursor: str | None = Field(alias="nextCursor", description="pass as ?cursor= for the next page; null at end")

    @classmethod
    def of(cls, releases: list[Release], next_cursor: str | None) -> Self:
        return cls(items=[ReleaseView.of(r) for r in releases], next_cursor=next_cursor)


class ReceiptView(ApiModel):
    """What publishing proved: the stored bytes, re-read and hashed by the verifier, match these digests."""

    package: str
    version: str
    manifest_digest: str = Field(alias="manifestDigest")
    content_digest: str = Field(alias="contentDigest")
    archive: ReleaseArchive
    unpacked_size: int = Field(alias="unpackedSize")
    file_count: int = Field(alias="fileCount")
    upload_id: str = Field(alias="uploadId", description="the session that published it")
    published_at: Timestamp = Field(alias="publishedAt", description="RFC 3339 UTC")

    @classmethod
    def of(cls, release: Release) -> Self:
        return cls(
            package=release.package,
            version=release.version,
            manifest_digest=release.manifest_digest,
            content_digest=release.content_digest,
            archive=ReleaseArchive(sha256=release.archive_sha256, size=release.archive_size),
            unpacked_size=release.unpacked_size,
            file_count=release.file_count,
            upload_id=release.upload_id,
            published_at=release.published_at,
        )


class ReleaseDetailView(ReleaseView):
    """``DELETE /v1/packages/{p}/versions/{v}`` (yank): the release and its publish receipt."""

    receipt: ReceiptView

    @classmethod
    def of(cls, release: Release) -> Self:
        return cls(**cls._fields(release), receipt=ReceiptView.of(release))


class ReleaseManifestView(ReleaseDetailView):
    """``GET /v1/packages/{p}/versions/{v}``: the release, its receipt and its stored manifest."""

    manifest: dict[str, Any] = Field(description="the canonical manifest: files, permissions, metadata")

    @classmethod
    def with_manifest(cls, release: Release, manifest: dict[str, Any]) -> Self:
        return cls(**cls._fields(release), receipt=ReceiptView.of(release), manifest=manifest)


class ExistingReleaseView(ApiModel):
    """``POST /v1/packages/{p}/versions/{v}/uploads`` 200: the identical release exists, nothing to upload."""

    state: Literal["published"]
    upload_required: Literal[False] = Field(alias="uploadRequired", description="the archive is already published")
    release: ReleaseDetailView

    @classmethod
    def of(cls, release: Release) -> Self:
        return cls(state="published", upload_required=False, release=ReleaseDetailView.of(release))


class ArchiveLinkView(ApiModel):
    """``GET /v1/packages/{p}/versions/{v}/archive``: a short-lived download URL."""

    url: str = Field(description="presigned GET URL of the archive")
    expires_at: Timestamp = Field(alias="expiresAt", description="when the URL stops working, RFC 3339 UTC")
    sha256: str = Field(description="verify the downloaded bytes against this")
    size: int = Field(description="archive size in bytes")
    status: Literal[ReleaseStatus.PUBLISHED, ReleaseStatus.YANKED] = Field(
        description="an unavailable release has no download"
    )

    @classmethod
    def of_link(cls, link: ArchiveLink) -> Self:
        if link.status is ReleaseStatus.UNAVAILABLE:
            raise ValueError("an unavailable release has no download")
        return cls(url=link.url, expires_at=link.expires_at, sha256=link.sha256, size=link.size, status=link.status)

    @classmethod
    def of(cls, release: Release, url: str, expires_at: int) -> Self:
        status = release.status
        if status is ReleaseStatus.UNAVAILABLE:
            raise ValueError(f"{release.package}@{release.version} is unavailable: it has no download")
        return cls(
            url=url, expires_at=expires_at, sha256=release.archive_sha256, size=release.archive_size, status=status
        )
