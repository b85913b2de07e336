"""Deadlines of an operation: its lease while in flight, and how long it is retained once settled."""

from __future__ import annotations

from packyard.config import limits


def lease_until(now: int) -> int:
    """A running operation holds its installation until this time; past it, the same intent may supersede it."""
    return now + limits().operation_lease_seconds


def retained_until(settled_at: int) -> int:
    """A settled operation that is no longer the installation's latest expires (TTL) this long after settling."""
    return settled_at + limits().settled_operation_retention_seconds
