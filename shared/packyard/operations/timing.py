"""Deadlines of an operation: its lease while in flight, and how long it is retained once settled."""

from __future__ import annotations

from packyard.config import limits


def lease_until(now: int) -> int:
    """A running operation holds its installation until this time; past it, the same intent may supersede it."""
    return now + limits().operation_lease_seconds


def lease_kept(current: int, now: int) -> bool:
    """Whether a phase keeps the lease it found instead of renewing it: while at least half of it is left. The
    slot's copy of the lease was written with the operation's, so a kept lease is one write (the operation alone)
    where a renewal is a transaction with the slot (docs/decisions.md, "Commit settles")."""
    return current - now >= limits().operation_lease_seconds // 2


def retained_until(settled_at: int) -> int:
    """A settled operation that is no longer the installation's latest expires (TTL) this long after settling."""
    return settled_at + limits().settled_operation_retention_seconds
