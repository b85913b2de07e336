"""One-off backfill of the integrity scrub over records written before it: every blob record gets the releases it
belongs to (``releases``, from each release's archive and manifest digests) and, if it has no due time, a first check
spread over one scrub interval (by its digest, so a large backfill is not checked all at once).

Both writes are idempotent (a set ADD; a due time only where there is none), so the pass can be stopped and run
again from the start or from the key it printed. It reads the whole table (a Scan, page by page): an operator runs it
once after deploying the scrub, with the stack's ``TABLE_NAME``:

    TABLE_NAME=packyard-prod-PackyardTable-… python -m packyard.maintenance.backfill [--page 500]
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from typing import Any

from packyard import clock
from packyard.config import limits
from packyard.store import backfill

PAGE = 500


def first_check_at(sha256: str, now: int) -> int:
    """When a backfilled blob is first checked: within one scrub interval from ``now``, spread by its digest."""
    return now + int(sha256[:8], 16) % limits().scrub_interval_seconds


def backfill_page(now: int, *, start: dict[str, Any] | None = None, limit: int = PAGE) -> tuple[Counter[str], Any]:
    """One page of the pass: what it did, and where the next page starts (None: the table is done)."""
    scanned, next_start = backfill.scan_page(limit=limit, start=start)
    counts: Counter[str] = Counter()
    for entry in scanned:
        if isinstance(entry, backfill.ScannedBlob):
            if entry.reclaimed:
                counts["blob_skipped"] += 1  # an orphan (or its tombstone): reclamation's, not the scrub's
            elif backfill.schedule_first_check(entry.tenant, entry.sha256, first_check_at(entry.sha256, now)):
                counts["blob_scheduled"] += 1
            else:
                counts["blob_already_due"] += 1
            continue
        release = f"{entry.package}@{entry.version}"
        for sha256 in entry.digests:
            recorded = backfill.add_release_to_blob(entry.tenant, sha256, release)
            counts["release_recorded" if recorded else "blob_gone"] += 1
    return counts, next_start


def backfill_all(now: int, *, limit: int = PAGE) -> Counter[str]:
    totals: Counter[str] = Counter()
    start: dict[str, Any] | None = None
    while True:
        counts, start = backfill_page(now, start=start, limit=limit)
        totals.update(counts)
        if not start:
            return totals


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--page", type=int, default=PAGE, help="items per Scan page")
    args = parser.parse_args(argv)
    print(json.dumps(dict(backfill_all(clock.now(), limit=args.page)), sort_keys=True))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
