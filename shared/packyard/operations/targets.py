"""The release an operation installs: it must be published (not yanked, not unavailable), and the operation pins it
by digest."""

from __future__ import annotations

from packyard.errors import ReleaseUnavailable
from packyard.installations.models import ReleaseRef
from packyard.operations.models import Operation
from packyard.publishing.models import Release, ReleaseStatus


def usable_release(release: Release | None, package: str, version: str) -> Release:
    if release is None:
        raise ReleaseUnavailable(f"{package}@{version} is not published")
    if release.status is not ReleaseStatus.PUBLISHED:
        raise ReleaseUnavailable(f"{package}@{version} is {release.status}")
    return release


def release_ref(release: Release) -> ReleaseRef:
    return ReleaseRef(
        package=release.package,
        version=release.version,
        manifest_digest=release.manifest_digest,
        archive_sha256=release.archive_sha256,
        archive_size=release.archive_size,
    )


def checked_target(op: Operation, release: Release | None) -> Operation:
    """``op`` whose target came from its installation, once its release (as read now) is known to be usable: with
    the permissions the release declares."""
    if op.target_checked or op.target is None:
        return op
    usable = usable_release(release, op.target.package, op.target.version)
    return op.model_copy(update={"target_permissions": usable.permissions, "target_checked": True})
