"""Cleanup jobs: claimed, retried with exponential backoff, parked after their last attempt. Placeholder: filled in
by issue 8's cleanup-job work."""

from __future__ import annotations

from typing import Any


def run_job(item: dict[str, Any], now: int) -> str:
    return "not_due"
