"""The integrity scrub: re-hash stored blobs on a rolling schedule. Placeholder: filled in by issue 8's scrub work."""

from __future__ import annotations

from packyard.store.records import BlobRecord


def check_blob(blob: BlobRecord, now: int) -> str:
    return "not_due"
