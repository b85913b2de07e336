"""Change events: what Packyard tells consumers when a release or an operation changes, so a platform can react
instead of polling (README, "Change events"; docs/events/). Four kinds, put on the stack's EventBridge bus
(``store.bus``) with source ``packyard``:

* ``Release Published``: a release was recorded (``publishing.publication``);
* ``Release Yanked``: a release was yanked (``publishing.catalog.yank``);
* ``Release Unavailable``: a stored blob of a release failed an integrity check and the release was marked
  ``unavailable`` (``maintenance.scrub``: the scrub, or a read that found it);
* ``Operation Settled``: an installation operation reached its terminal outcome (``operations.commit`` for one its
  commit settled, ``operations.settlement`` for the rest);

Each is put after its change is committed, and again by every retry that finds the change already done: at least
once. ``detail.eventId`` is derived from the change itself (a UUID v5 of its kind and identity), so every copy of one
change carries the same id and a consumer deduplicates on it (EventBridge's own ``id`` differs per put). Details
hold tenant, workspace, ids, digests and times, never a secret, a token or a caller's identity.
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Any

from packyard.api.times import rfc3339
from packyard.store import bus

if TYPE_CHECKING:  # the models are only read here: importing them would widen the handlers' cold starts
    from packyard.operations.models import Operation, Outcome
    from packyard.publishing.models import Release

RELEASE_PUBLISHED = "Release Published"
RELEASE_YANKED = "Release Yanked"
RELEASE_UNAVAILABLE = "Release Unavailable"
OPERATION_SETTLED = "Operation Settled"
KINDS = (RELEASE_PUBLISHED, RELEASE_YANKED, RELEASE_UNAVAILABLE, OPERATION_SETTLED)
_NAMESPACE = uuid.UUID("3f0c6a52-5b8e-4d1a-9a77-2f4c1d6e8b90")  # Packyard's change events (fixed: ids are stable)

Event = tuple[str, dict[str, Any]]  # (detail type, detail)


def event_id(kind: str, *identity: str | int) -> str:
    """The id every copy of one change carries: a UUID v5 of its kind and what identifies the change."""
    return str(uuid.uuid5(_NAMESPACE, "\x1f".join([kind, *(str(part) for part in identity)])))


def _release(release: Release) -> dict[str, Any]:
    return {"tenant": release.tenant, "package": release.package, "version": release.version}


def release_published(release: Release) -> Event:
    """A release recorded from its upload (one per upload: a replayed publish is the same change)."""
    detail = {
        "eventId": event_id(RELEASE_PUBLISHED, release.tenant, release.package, release.version, release.upload_id),
        **_release(release),
        "uploadId": release.upload_id,
        "manifestDigest": release.manifest_digest,
        "contentDigest": release.content_digest,
        "archive": {"sha256": release.archive_sha256, "size": release.archive_size},
        "publishedAt": rfc3339(release.published_at),
    }
    if release.attestation is not None:
        detail["attestation"] = {"sha256": release.attestation.sha256, "keyId": release.attestation.key_id}
    return RELEASE_PUBLISHED, detail


def release_yanked(release: Release) -> Event:
    """A release yanked (its first yank: ``yankedAt`` is kept by every later one, which re-sends the same id)."""
    yanked_at = release.yanked_at if release.yanked_at is not None else release.published_at
    detail = {
        "eventId": event_id(RELEASE_YANKED, release.tenant, release.package, release.version, yanked_at),
        **_release(release),
        "manifestDigest": release.manifest_digest,
        "yankedAt": rfc3339(yanked_at),
    }
    return RELEASE_YANKED, detail


def release_unavailable(
    tenant: str, package: str, version: str, *, blob: str, problem: str, found_by: str, marked_at: int
) -> Event:
    """A release marked unavailable because its blob ``blob`` is ``problem`` (missing or corrupt), found by the
    scrub or a read (``found_by``), first at ``marked_at`` (the blob's ``corruptAt``, so a re-check re-sends it)."""
    detail = {
        "eventId": event_id(RELEASE_UNAVAILABLE, tenant, package, version, blob, marked_at),
        "tenant": tenant,
        "package": package,
        "version": version,
        "blob": {"sha256": blob, "problem": problem},
        "foundBy": found_by,
        "unavailableAt": rfc3339(marked_at),
    }
    return RELEASE_UNAVAILABLE, detail


def operation_settled(op: Operation, outcome: Outcome) -> Event:
    """An operation's terminal outcome (an operation settles once)."""
    detail: dict[str, Any] = {
        "eventId": event_id(OPERATION_SETTLED, op.tenant, op.workspace, op.operation_id),
        "tenant": op.tenant,
        "workspace": op.workspace,
        "installationId": op.installation_id,
        "operationId": op.operation_id,
        "kind": str(op.kind),
        "result": outcome.result,
        "code": outcome.code,
        "settledAt": rfc3339(op.settled_at if op.settled_at is not None else op.updated_at),
    }
    if op.target is not None:
        detail["release"] = {
            "package": op.target.package,
            "version": op.target.version,
            "manifestDigest": op.target.manifest_digest,
            "archiveSha256": op.target.archive_sha256,
        }
    return OPERATION_SETTLED, detail


def emit(*events: Event) -> None:
    """Put the events on the stack's bus (after their change is committed; raises TransientStoreError if the bus
    did not take them, so the caller's retry puts them again)."""
    bus.put(list(events))
