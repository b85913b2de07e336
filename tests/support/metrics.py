"""The metrics the code emits, seen in a test while they still reach Powertools."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from packyard.observability import metrics


@contextmanager
def emitted_metrics() -> Iterator[Counter[str]]:
    """Metrics the code emits (by name, values summed), as Powertools would flush them. Its own patch: a test's
    ``monkeypatch.undo()`` leaves it in place."""
    seen: Counter[str] = Counter()
    real = metrics.add_metric

    def spy(name: str, unit: Any, value: float, **kwargs: Any) -> None:
        seen[name] += int(value)
        real(name=name, unit=unit, value=value, **kwargs)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(metrics, "add_metric", spy)
        yield seen
