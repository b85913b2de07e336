"""Reading the catalogue of releases, download links, and yanking (a yanked version is never reused)."""

from __future__ import annotations

import base64
import json
from typing import Any

from packyard import clock
from packyard.config import limits
from packyard.errors import InvalidRequest, ReleaseUnavailable, StoredItemInvalid
from packyard.models import Package, Release, ReleaseStatus, check_package_name, check_version, semver_key
from packyard.observability import metrics
from packyard.store import blobs, catalog

MAX_PAGE = 100


def encode_cursor(last_key: dict[str, Any] | None) -> str | None:
    if not last_key:
        return None
    return base64.urlsafe_b64encode(json.dumps(last_key, sort_keys=True).encode()).decode()


def decode_cursor(cursor: str | None, tenant: str) -> dict[str, Any] | None:
    """Cursors are opaque to callers; one minted for another tenant's partition is refused."""
    if not cursor:
        return None
    try:
        decoded = json.loads(base64.urlsafe_b64decode(cursor.encode()))
        pk = decoded["pk"]["S"]
    except (ValueError, KeyError, TypeError) as exc:
        raise InvalidRequest("cursor is not valid") from exc
    if not pk.startswith(f"TENANT#{tenant}#"):
        raise InvalidRequest("cursor is not valid")
    return dict(decoded)


def list_packages(tenant: str, limit: int, cursor: str | None) -> tuple[list[Package], str | None]:
    packages, last = catalog.list_packages(tenant, limit=min(limit, MAX_PAGE), cursor=decode_cursor(cursor, tenant))
    return packages, encode_cursor(last)


def get_package(tenant: str, package: str) -> Package:
    return catalog.get_package(tenant, check_package_name(package))


def list_versions(tenant: str, package: str, limit: int, cursor: str | None) -> tuple[list[Release], str | None]:
    check_package_name(package)
    catalog.get_package(tenant, package)
    releases, last = catalog.list_releases(
        tenant, package, limit=min(limit, MAX_PAGE), cursor=decode_cursor(cursor, tenant)
    )
    return sorted(releases, key=lambda r: semver_key(r.version), reverse=True), encode_cursor(last)


def get_version(tenant: str, package: str, version: str) -> tuple[Release, dict[str, Any]]:
    """The release, its manifest (from the content-addressed blob) and its publish receipt."""
    release = catalog.get_release(tenant, check_package_name(package), check_version(version))
    raw = blobs.read_bytes(blobs.blob_key(tenant, release.manifest_digest))
    if raw is None:
        raise StoredItemInvalid(f"manifest blob of {package}@{version} is missing")
    return release, json.loads(raw)


def archive_link(tenant: str, package: str, version: str) -> dict[str, Any]:
    release = catalog.get_release(tenant, check_package_name(package), check_version(version))
    if release.status is ReleaseStatus.UNAVAILABLE:
        raise ReleaseUnavailable(f"{package}@{version} is unavailable: its stored bytes failed integrity checks")
    ttl = limits().download_url_ttl_seconds
    url = blobs.presigned_get(
        blobs.blob_key(tenant, release.archive_sha256), ttl, filename=f"{package}-{version}.tar.gz"
    )
    return {
        "url": url,
        "expiresAt": clock.now() + ttl,
        "sha256": release.archive_sha256,
        "size": release.archive_size,
        "status": str(release.status),
    }


def yank(tenant: str, package: str, version: str) -> Release:
    release = catalog.yank_release(tenant, check_package_name(package), check_version(version), clock.now())
    metrics.add_metric(name="ReleasesYanked", unit="Count", value=1)
    return release


def release_view(release: Release, manifest: dict[str, Any] | None = None) -> dict[str, Any]:
    body = release.to_api()
    body["receipt"] = release.receipt()
    if manifest is not None:
        body["manifest"] = manifest
    return body
