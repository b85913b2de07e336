"""The release catalogue: packages and their releases, a release's manifest, download links, and yanking (a
yanked version is never reused)."""

from __future__ import annotations

import json
from typing import Any

from aws_lambda_powertools.metrics import MetricUnit

from packyard import changes, clock
from packyard.config import limits
from packyard.errors import ReleaseUnavailable
from packyard.observability import logger, metrics, tracer
from packyard.publishing import integrity
from packyard.publishing.models import (
    ArchiveLink,
    Package,
    Release,
    ReleaseStatus,
    check_package_name,
    check_version,
    semver_key,
)
from packyard.store import blobs, catalog

MAX_PAGE = 100


def list_packages(tenant: str, limit: int, cursor: str | None) -> tuple[list[Package], str | None]:
    return catalog.list_packages(tenant, limit=min(limit, MAX_PAGE), cursor=cursor)


def get_package(tenant: str, package: str) -> Package:
    return catalog.get_package(tenant, check_package_name(package))


def list_versions(tenant: str, package: str, limit: int, cursor: str | None) -> tuple[list[Release], str | None]:
    """A page of the package's releases, newest semver first within the page."""
    check_package_name(package)
    catalog.get_package(tenant, package)
    releases, next_cursor = catalog.list_releases(tenant, package, limit=min(limit, MAX_PAGE), cursor=cursor)
    return sorted(releases, key=lambda r: semver_key(r.version), reverse=True), next_cursor


def get_version(tenant: str, package: str, version: str) -> tuple[Release, dict[str, Any]]:
    """The release and its manifest (from the content-addressed blob)."""
    release = catalog.get_release(tenant, check_package_name(package), check_version(version))
    if release.blobs_released_at is not None:
        return release, {}  # yanked, nothing held it, and its stored bytes were reclaimed
    if release.status is ReleaseStatus.UNAVAILABLE:
        # its stored bytes failed an integrity check: the manifest is shown only if it still reads as published
        intact = integrity.intact_manifest(tenant, release)
        if intact is None:
            return release, {}
        raw = intact
    else:
        checked = integrity.read_manifest(tenant, release, found_by="version_route")
        if checked is None:
            # missing or altered in storage: now unavailable, answered as an unavailable release is (no manifest)
            return release.model_copy(update={"status": ReleaseStatus.UNAVAILABLE}), {}
        raw = checked
    manifest: dict[str, Any] = json.loads(raw)
    return release, manifest


def archive_link(tenant: str, package: str, version: str) -> ArchiveLink:
    release = catalog.get_release(tenant, check_package_name(package), check_version(version))
    if release.status is ReleaseStatus.UNAVAILABLE:
        raise ReleaseUnavailable(f"{package}@{version} is unavailable: its stored bytes failed integrity checks")
    if release.blobs_released_at is not None:
        raise ReleaseUnavailable(f"{package}@{version} was yanked and its stored bytes reclaimed")
    ttl = limits().download_url_ttl_seconds
    url = blobs.presigned_get(
        blobs.blob_key(tenant, release.archive_sha256), ttl, filename=f"{package}-{version}.tar.gz"
    )
    return ArchiveLink(
        url=url,
        expires_at=clock.now() + ttl,
        sha256=release.archive_sha256,
        size=release.archive_size,
        status=release.status,
    )


@tracer.capture_method(capture_response=False)
def yank(tenant: str, package: str, version: str) -> Release:
    logger.append_keys(tenant=tenant, package=package, version=version)
    release = catalog.yank_release(tenant, check_package_name(package), check_version(version), clock.now())
    # every yank of it (the first and each repeat, which keeps yankedAt) puts the same event: at least once
    changes.emit(changes.release_yanked(release))
    metrics.add_metric(name="ReleasesYanked", unit=MetricUnit.Count, value=1)
    logger.info("release yanked")
    return release
