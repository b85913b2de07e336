"""The stack's event bus (EventBridge): the change events of :mod:`packyard.changes`, put after the change they
describe is committed.

One ``PutEvents`` request per call (at most 10 entries, EventBridge's limit per request). An entry EventBridge did
not take (``FailedEntryCount``) or a throttled or lost request raises :class:`TransientStoreError` (another refusal
is a ``StoreFailure``, as for every store call, ``aws.translate``): the step (or the HTTP call)
fails after its change is committed, and its retry, which finds the change done, puts the same event again (same
``detail.eventId``): at least once, never silently dropped.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from packyard.config import required
from packyard.errors import TransientStoreError
from packyard.store.aws import client, translate

SOURCE = "packyard"
MAX_ENTRIES = 10  # PutEvents takes at most 10 entries per request


def put(events: Sequence[tuple[str, dict[str, Any]]]) -> None:
    """Put ``(detail type, detail)`` events on the stack's bus (``EVENT_BUS_NAME``)."""
    if not events:
        return
    bus = required("event_bus_name").event_bus_name
    for start in range(0, len(events), MAX_ENTRIES):
        entries = [
            {"EventBusName": bus, "Source": SOURCE, "DetailType": kind, "Detail": json.dumps(detail, sort_keys=True)}
            for kind, detail in events[start : start + MAX_ENTRIES]
        ]
        try:
            answer = client("events").put_events(Entries=entries)
        except Exception as exc:  # a throttle or a lost connection is transient: the caller's retry puts again
            raise translate(exc, "EventBridge") from exc
        if answer.get("FailedEntryCount"):
            failed = [e.get("ErrorCode") for e in answer.get("Entries", []) if e.get("ErrorCode")]
            raise TransientStoreError(f"the event bus did not take {answer['FailedEntryCount']} event(s): {failed}")
