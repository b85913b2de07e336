"""What workspace reads answer beyond the installation and operation models themselves."""

from __future__ import annotations

from dataclasses import dataclass

from packyard.installations.models import Installation


@dataclass(frozen=True)
class ResolvedEntry:
    """One active installation as a runtime loads it: the pinned release and short-lived download URLs."""

    installation: Installation
    archive_url: str
    manifest_url: str


@dataclass(frozen=True)
class Resolved:
    workspace: str
    entries: list[ResolvedEntry]
    expires_at: int
    next_cursor: str | None = None  # the next page's (store/cursors.py); None at the end
