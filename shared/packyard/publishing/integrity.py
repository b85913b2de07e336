"""Stored manifests are checked on every read, not only by the weekly scrub.

A release's manifest blob holds the files, their digests and the permissions a runtime grants. Every reader that
uses one (the version route, planning, the resolved view) first compares the stored bytes' sha256 with the
release's ``manifestDigest``. A missing or altered object makes the release ``unavailable`` at once, exactly as the
integrity scrub would a week later (``scrub.found_unusable``: the same marking code), and the caller gets the answer
of an unavailable release; the altered bytes are never served.
"""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING

from packyard import clock
from packyard.config import limits
from packyard.errors import ReleaseUnavailable
from packyard.installations.models import ReleaseRef
from packyard.store import blobs

if TYPE_CHECKING:
    from packyard.publishing.models import Release


def _found_unusable(
    tenant: str, digest: str, found: tuple[str, int] | None, release: tuple[str, str], found_by: str
) -> None:
    # The scrub's marking (and the publish side it imports: release models, the catalogue's store) is loaded only
    # when a manifest fails its check, so the Queries function's cold start stays without it (issue 11).
    from packyard.maintenance import scrub

    scrub.found_unusable(tenant, digest, clock.now(), found=found, release=release, found_by=found_by)


def _read_stored(tenant: str, release: Release) -> tuple[bytes, str] | None:
    """The release's stored manifest bytes and their sha256; None when the object is missing."""
    raw = blobs.read_bytes(blobs.blob_key(tenant, release.manifest_digest), at_most=release.manifest_size)
    return None if raw is None else (raw, hashlib.sha256(raw).hexdigest())


def intact_manifest(tenant: str, release: Release) -> bytes | None:
    """The release's stored manifest when its sha256 equals ``manifestDigest``, else None (nothing is marked)."""
    stored = _read_stored(tenant, release)
    return stored[0] if stored is not None and stored[1] == release.manifest_digest else None


def read_manifest(tenant: str, release: Release, *, found_by: str) -> bytes | None:
    """The release's canonical manifest as stored, once its sha256 equals ``manifestDigest``; None when it is
    missing or altered (the release and its installations are then marked as the scrub marks them)."""
    stored = _read_stored(tenant, release)
    if stored is not None and stored[1] == release.manifest_digest:
        return stored[0]
    found = None if stored is None else (stored[1], len(stored[0]))
    _found_unusable(tenant, release.manifest_digest, found, (release.package, release.version), found_by)
    return None


def manifest_intact(tenant: str, ref: ReleaseRef, *, found_by: str) -> bool:
    """The pinned release's stored manifest hashes to its ``manifestDigest`` (streamed, nothing kept); when it does
    not, it is marked as the scrub marks it and False is answered."""
    found = blobs.sha256_of(blobs.blob_key(tenant, ref.manifest_digest), stop_after=limits().manifest_max_bytes)
    if found is not None and found[0] == ref.manifest_digest:
        return True
    _found_unusable(tenant, ref.manifest_digest, found, (ref.package, ref.version), found_by)
    return False


def require_manifest(tenant: str, ref: ReleaseRef, *, found_by: str) -> None:
    """``manifest_intact`` or ``ReleaseUnavailable`` (what an operation on an unavailable release is refused)."""
    if not manifest_intact(tenant, ref, found_by=found_by):
        raise ReleaseUnavailable(
            f"{ref.package}@{ref.version} is unavailable: its stored manifest does not match its digest"
        )
