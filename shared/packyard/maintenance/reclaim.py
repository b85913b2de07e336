"""Reclaiming blobs nothing references any more ("remove if unreferenced"). Placeholder: filled in by issue 8's
reclamation work; until then no blob is ever unreferenced."""

from __future__ import annotations

from packyard.store.records import BlobRecord


def is_unreferenced(blob: BlobRecord) -> bool:
    return False


def reclaim_blob(blob: BlobRecord, now: int) -> str:
    return "not_due"
