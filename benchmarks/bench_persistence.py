"""The local stack's persistence (issue 24, item 1): what a journaled write costs, against re-writing the world.

1. **A DynamoDB write, with and without the journal**: N PutItem calls (1 KB items) on the in-process moto of
   ``devstack.local_aws``, first ephemeral, then with ``devstack.persistence`` recording each one and waiting until
   its record is synced (what the local stack's answer waits for); the difference is the journal's cost per write,
   one writer (the worst case: no other writer shares its sync).
2. **What a snapshot per write would cost**: the whole world (the N items) encoded as the journal's compacted
   records and written with temporary file + fsync + rename, once: a design that re-serialises everything on every
   write pays this on each one, and it grows with the data.
3. **A restart**: reading and folding the journal of N items, and compacting it again.

Prints figures; asserts nothing. Run: .venv/bin/python benchmarks/bench_persistence.py [--items 2000]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "shared")]

import boto3  # noqa: E402

import devstack  # noqa: E402
from devstack import persistence  # noqa: E402


def _put_items(table: str, count: int, start: int, journal: persistence.Journal | None = None) -> float:
    """Seconds per PutItem; with ``journal``, each waits until its record is synced, as the local stack's answer
    does (``journaled_app`` waits at the request's end; the in-process mock here has no request end)."""
    ddb = boto3.client("dynamodb")
    payload = "x" * 1000
    began = time.perf_counter()
    for n in range(start, start + count):
        ddb.put_item(TableName=table, Item={"pk": {"S": f"P#{n}"}, "sk": {"S": "S"}, "v": {"S": payload}})
        if journal is not None:
            journal.wait_durable(journal.records)
    return (time.perf_counter() - began) / count


def _journal_rates(directory: Path, writers: int, per_writer: int) -> tuple[float, float]:
    """Records per second through one Journal: written (append), and durable (append + wait_durable)."""
    import threading

    journal = persistence.Journal(directory / f"rates-{writers}.log")
    record = {"k": "ddb", "tables": {"t": [["k", {"v": {"S": "x" * 1000}}]]}}

    def write(durable: bool) -> None:
        for _ in range(per_writer):
            sequence = journal.append(record)
            if durable:
                journal.wait_durable(sequence)

    rates = []
    for durable in (False, True):
        threads = [threading.Thread(target=write, args=(durable,)) for _ in range(writers)]
        began = time.perf_counter()
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        rates.append(writers * per_writer / (time.perf_counter() - began))
    journal.close()
    return rates[0], rates[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=2000)
    count = parser.parse_args().items
    with tempfile.TemporaryDirectory() as scratch, devstack.local_aws() as stack:
        _put_items(stack.table_name, 50, 10**9)  # warm up clients and moto
        plain = _put_items(stack.table_name, count, 0)
        data = persistence.open_data(Path(scratch) / "data")
        data.start_journal()
        assert data.journal is not None
        journaled = _put_items(stack.table_name, count, count, data.journal)
        data.close()

        journal = Path(scratch) / "data" / persistence.JOURNAL
        began = time.perf_counter()
        records, _ = persistence.read_journal(journal)
        world = persistence.fold(records)
        folded = time.perf_counter() - began
        items = sum(len(v) for v in world.items.values())
        began = time.perf_counter()
        persistence.write_atomically(
            Path(scratch) / "snapshot.log", (persistence.encode_record(r) for r in world.records())
        )
        snapshot = time.perf_counter() - began
        size = journal.stat().st_size

    for writers in (1, 16):
        written, durable = _journal_rates(Path(tempfile.mkdtemp()), writers, 200)
        print(f"journal, {writers:2d} writer(s): {written:9.0f} records/s written, {durable:7.0f} records/s durable")
    print(f"PutItem, ephemeral                 {plain * 1e3:8.3f} ms per write")
    print(f"PutItem, journaled (fdatasync)     {journaled * 1e3:8.3f} ms per write")
    print(f"  the journal's cost               {(journaled - plain) * 1e3:8.3f} ms per write")
    print(f"whole-world snapshot, {items} items {snapshot * 1e3:8.1f} ms  (a snapshot-per-write design: each write)")
    print(f"restart: read + fold the journal   {folded * 1e3:8.1f} ms  ({len(records)} records, {size} bytes)")


if __name__ == "__main__":
    main()
