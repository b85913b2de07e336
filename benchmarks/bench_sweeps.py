"""Sweeps (issue 8): what a sweep reads against what is due, and what each reclaimed thing costs.

1. **Items read per sweep vs due items** (target ≤ 1.2): N upload sessions are stored (N = 10,000 and 100,000), all
   in the due index, 1% of them past their deadline; one full sweep (every kind x shard, page after page, as the
   maintenance state machine's Map runs it) is run as of "now". DynamoDB items read are counted from the responses
   (a Query's ``ScannedCount``, a GetItem's item, a BatchGetItem's items) with a botocore ``after-call`` hook.
2. **Requests per expired session**: the same sweep's requests (DynamoDB and S3) divided by the sessions it expired,
   beside the index reads (Query pages) it needed.
3. **Requests per reclaimed blob**: releases are published, yanked, and the sweeps run until their blobs are
   reclaimed; the requests of those sweeps divided by the blobs removed.
4. **Scrub throughput vs plain read + sha256**: the integrity scrub re-hashes every stored blob; the same objects are
   read and hashed by a bare ``get_object`` + ``hashlib.sha256`` loop on the same moto; the ratio is printed.

Seeding writes the stored items with ``BatchWriteItem`` in the store's own item shape (``dynamo.to_item`` with the
due index's attributes), so 100,000 sessions take seconds, not a transaction each. Prints figures with their targets;
asserts nothing. Run: .venv/bin/python benchmarks/bench_sweeps.py [--sizes 10000 100000]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

sys.path[:0] = [str(Path(__file__).parents[1]), str(Path(__file__).parents[1] / "shared")]
os.environ.setdefault("POWERTOOLS_METRICS_DISABLED", "true")
os.environ.setdefault("POWERTOOLS_TRACE_DISABLED", "true")
os.environ.setdefault("POWERTOOLS_LOG_LEVEL", "ERROR")

import boto3  # noqa: E402
import botocore.session  # noqa: E402

import devstack  # noqa: E402
from devstack.counting import count_aws_requests  # noqa: E402
from packyard.maintenance import scrub, sweeps  # noqa: E402
from packyard.publishing.models import ArchiveSource, Upload, UploadState  # noqa: E402
from packyard.store import aws, catalog, counters, due, dynamo  # noqa: E402
from packyard.store.due import DueKind  # noqa: E402

TARGET_READ_RATIO = 1.2
DUE_FRACTION = 0.01
NOW = 1_800_000_000
TENANT = "t-sweep"


class ItemsRead:
    """Items DynamoDB read for us, from the responses: Query ScannedCount, GetItem's item, BatchGetItem's items."""

    def __init__(self) -> None:
        self.by_operation: Counter[str] = Counter()

    def __call__(self, http_response: Any = None, parsed: Any = None, model: Any = None, **_: Any) -> None:
        if model is None or not isinstance(parsed, dict):
            return
        name = model.name
        if name in ("Query", "Scan"):
            self.by_operation[name] += int(parsed.get("ScannedCount", 0))
        elif name == "GetItem":
            self.by_operation[name] += 1 if parsed.get("Item") else 0
        elif name == "BatchGetItem":
            self.by_operation[name] += sum(len(items) for items in parsed.get("Responses", {}).values())

    @property
    def total(self) -> int:
        return sum(self.by_operation.values())


@contextmanager
def items_read() -> Iterator[ItemsRead]:
    """Count items read by every DynamoDB client created while active (the store's client included)."""
    counter = ItemsRead()
    original = botocore.session.Session.create_client

    def create_client(self: Any, *args: Any, **kwargs: Any) -> Any:
        client = original(self, *args, **kwargs)
        client.meta.events.register("after-call.dynamodb", counter)
        return client

    botocore.session.Session.create_client = create_client  # type: ignore[method-assign]
    aws.reset_clients()  # the store's cached client is made anew, with the hook
    try:
        yield counter
    finally:
        botocore.session.Session.create_client = original  # type: ignore[method-assign]


@contextmanager
def dynamodb_time() -> Iterator[list[float]]:
    """Wall time spent inside DynamoDB calls (before-call to after-call) while active: [seconds]."""
    spent = [0.0]
    started: dict[int, float] = {}
    original = botocore.session.Session.create_client

    def before(context: Any = None, **_: Any) -> None:
        started[id(context)] = time.perf_counter()

    def after(context: Any = None, **_: Any) -> None:
        begun = started.pop(id(context), None)
        if begun is not None:
            spent[0] += time.perf_counter() - begun

    def create_client(self: Any, *args: Any, **kwargs: Any) -> Any:
        client = original(self, *args, **kwargs)
        client.meta.events.register("before-call.dynamodb", before)
        client.meta.events.register("after-call.dynamodb", after)
        return client

    botocore.session.Session.create_client = create_client  # type: ignore[method-assign]
    aws.reset_clients()
    try:
        yield spent
    finally:
        botocore.session.Session.create_client = original  # type: ignore[method-assign]
        aws.reset_clients()


class _WithoutMetrics:
    """stdout without the handlers' EMF metric lines (one JSON object per invocation, flushed by Powertools)."""

    def __init__(self, target: Any) -> None:
        self.target = target

    def write(self, text: str) -> int:
        if text.startswith('{"_aws"'):
            return len(text)
        return int(self.target.write(text))

    def flush(self) -> None:
        self.target.flush()


def session(i: int, deadline: int) -> Upload:
    return Upload(
        tenant=TENANT,
        upload_id=f"u{i:07d}",
        token=f"tok{i:07d}",
        package="bench",
        version=f"1.0.{i}",
        state=UploadState.AWAITING_UPLOAD,
        source=ArchiveSource.UPLOAD,
        archive_size=1024,
        archive_sha256="0" * 64,
        manifest_digest="0" * 64,
        manifest_size=100,
        content_digest="0" * 64,
        reserved_bytes=1124,
        created_at=deadline - 600,
        expires_at=deadline,
    )


def seed_sessions(count: int) -> int:
    """``count`` awaiting sessions in the due index, 1% past their deadline; the ledger holds their reservations."""
    client = boto3.client("dynamodb")
    table = dynamo.table_name()
    due_every = round(1 / DUE_FRACTION)
    expired = 0
    batch: list[dict[str, Any]] = []
    for i in range(count):
        is_due = i % due_every == 0
        expired += is_due
        upload = session(i, NOW - 60 if is_due else NOW + 3600 + i)
        pk, sk = catalog.upload_key(TENANT, upload.upload_id)
        item = dynamo.to_item(pk, sk, upload, **due.attributes(DueKind.UPLOAD, upload.upload_id, upload.expires_at))
        batch.append({"PutRequest": {"Item": item}})
        if len(batch) == 25:
            client.batch_write_item(RequestItems={table: batch})
            batch = []
    if batch:
        client.batch_write_item(RequestItems={table: batch})
    upk, usk = counters.usage_key(TENANT)
    client.put_item(
        TableName=table,
        Item=dynamo.marshal({"pk": upk, "sk": usk, "usedBytes": count * 1124, "schemaVersion": dynamo.SCHEMA_VERSION}),
    )
    return expired


def full_sweep(now: int) -> Counter[str]:
    """Every kind x shard, page after page until nothing more is due: what the maintenance Map does."""
    outcomes: Counter[str] = Counter()
    for kind in DueKind:
        for shard in range(due.SHARDS):
            cursor = None
            while True:
                page = sweeps.sweep(kind, shard, now, cursor)
                outcomes.update(page.counts)
                outcomes["pages"] += 1
                cursor = page.cursor
                if not cursor:
                    break
    return outcomes


def bench_read_ratio(sizes: list[int]) -> None:
    print(f"1-2. Items read per sweep vs due items (target ≤ {TARGET_READ_RATIO}), requests per expired session")
    print(
        f"   {'stored':>8} {'due':>6} {'expired':>8} {'index read':>10} {'all read':>9} {'ratio':>6}"
        f" {'req/expired':>12} {'sweep s':>8}"
    )
    for size in sizes:
        with devstack.local_aws():
            started = time.perf_counter()
            due_count = seed_sessions(size)
            seeded = time.perf_counter() - started
            with items_read() as read, count_aws_requests() as requests:
                started = time.perf_counter()
                outcomes = full_sweep(NOW)
                swept = time.perf_counter() - started
            index_read = read.by_operation["Query"]
            queries = requests[("dynamodb", "Query")]
            per_expired = (sum(requests.values()) - queries) / max(outcomes["expired"], 1)
            print(
                f"   {size:>8,} {due_count:>6,} {outcomes['expired']:>8,} {index_read:>10,} {read.total:>9,}"
                f" {read.total / max(due_count, 1):>6.2f} {per_expired:>12.1f} {swept:>8.1f}"
                f"   (seeded in {seeded:.0f} s; {queries} index pages)"
            )
            other = {k: v for k, v in requests.items() if k != ("dynamodb", "Query")}
            print(
                "      per expired session: "
                + ", ".join(f"{s} {o} {n / max(outcomes['expired'], 1):.1f}" for (s, o), n in sorted(other.items()))
            )


def bench_reclaim(count: int) -> None:
    """Publish ``count`` releases of distinct content, yank them all, sweep until their blobs are gone."""
    from devstack.api import LocalApi
    from devstack.caller import Caller
    from packyard_cli.build import build_from_files

    print(f"\n3. Requests per reclaimed blob ({count} releases published, yanked, swept)")
    with devstack.local_aws() as stack:
        caller = Caller(LocalApi(stack), TENANT)
        for i in range(count):
            built = build_from_files({"SKILL.md": f"release {i}\n".encode() * 64})
            assert caller.publish("reclaimed", f"1.0.{i}", built)["state"] == "published"
            assert caller.delete(f"/v1/packages/reclaimed/versions/1.0.{i}").status == 200
        now = int(time.time()) + 60
        outcomes: Counter[str] = Counter()
        with count_aws_requests() as requests:
            for _ in range(3):  # the yanked release gives its blobs back, then the blobs are reclaimed
                outcomes.update(full_sweep(now))
        listed = boto3.client("s3").list_objects_v2(Bucket=stack.bucket_name, Prefix=f"blobs/{TENANT}/")
        left = listed.get("KeyCount", 0)
        reclaimed = outcomes["reclaimed"]
        queries = requests[("dynamodb", "Query")]
        per_blob = (sum(requests.values()) - queries) / max(reclaimed, 1)
        print(f"   blobs reclaimed {reclaimed} (objects left {left}), releases given back {outcomes['released']}")
        print(f"   requests per reclaimed blob (index pages aside): {per_blob:.1f}; index pages: {queries}")
        other = {k: v for k, v in requests.items() if k != ("dynamodb", "Query")}
        print("      " + ", ".join(f"{s} {o} {n / max(reclaimed, 1):.2f}" for (s, o), n in sorted(other.items())))


def bench_scrub(count: int, size_mib: int) -> None:
    """Publish ``count`` packages of incompressible content, then time one scrub of every blob against a bare
    ``get_object`` + sha256 loop over the same objects."""
    import hashlib

    from devstack.api import LocalApi
    from devstack.caller import Caller
    from packyard.config import limits
    from packyard_cli.build import build_from_files

    print(f"\n4. Scrub throughput vs plain read + sha256 ({count} packages of {size_mib} MiB, incompressible)")
    with devstack.local_aws() as stack:
        caller = Caller(LocalApi(stack), TENANT)
        for i in range(count):
            built = build_from_files({"payload.bin": os.urandom(size_mib * 1024 * 1024)})
            assert caller.publish("scrubbed", f"1.0.{i}", built)["state"] == "published"
        s3 = boto3.client("s3")
        keys = [o["Key"] for o in s3.list_objects_v2(Bucket=stack.bucket_name, Prefix=f"blobs/{TENANT}/")["Contents"]]
        total = sum(o["Size"] for o in s3.list_objects_v2(Bucket=stack.bucket_name, Prefix="blobs/")["Contents"])
        started = time.perf_counter()
        for key in keys:
            body = s3.get_object(Bucket=stack.bucket_name, Key=key)["Body"]
            digest = hashlib.sha256()
            while chunk := body.read(1024 * 1024):
                digest.update(chunk)
        plain = time.perf_counter() - started
        at = int(time.time()) + limits().scrub_interval_seconds + 60
        checking = [0.0]
        check_blob = scrub.check_blob

        def timed_check(blob: Any, now: int) -> str:
            begun = time.perf_counter()
            try:
                return check_blob(blob, now)
            finally:
                checking[0] += time.perf_counter() - begun

        scrub.check_blob = timed_check  # type: ignore[assignment]
        try:
            with dynamodb_time() as in_dynamodb:
                started = time.perf_counter()
                outcomes = full_sweep(at)
                scrubbed = time.perf_counter() - started
        finally:
            scrub.check_blob = check_blob  # type: ignore[assignment]
        mib = total / 1024 / 1024
        print(f"   blobs checked {outcomes['healthy']} of {len(keys)}, {mib:.0f} MiB")
        print(f"   plain read + sha256: {mib / plain:7.0f} MiB/s ({plain:.2f} s)")
        print(f"   scrub (full sweep):  {mib / scrubbed:7.0f} MiB/s ({scrubbed:.2f} s)")
        print(f"   ratio scrub / plain: {plain / scrubbed:.2f}")
        print(
            f"   the checks themselves (read, sha256, record update): {checking[0]:.2f} s,"
            f" {mib / checking[0]:.0f} MiB/s, ratio {plain / checking[0]:.2f}"
        )
        print(
            f"   the rest is per page: {scrubbed - checking[0]:.2f} s for {outcomes['pages']} pages over every shard"
            f" (index queries, logs, metrics); DynamoDB calls in all: {in_dynamodb[0]:.2f} s (moto)"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--reclaim", type=int, default=50, help="releases published, yanked and reclaimed")
    parser.add_argument("--scrub", type=int, default=16, help="packages published, then scrubbed")
    parser.add_argument("--scrub-mib", type=int, default=8, help="size of each scrubbed package")
    args = parser.parse_args()
    sys.stdout = _WithoutMetrics(sys.stdout)  # type: ignore[assignment]
    bench_read_ratio(args.sizes)
    bench_reclaim(args.reclaim)
    bench_scrub(args.scrub, args.scrub_mib)


if __name__ == "__main__":
    main()
