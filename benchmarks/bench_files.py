"""What reading one file costs in S3 (issue 22, item 1), and what the file pack adds to a publish (issue 23's target).

On the local stack (moto, handlers in-process), per file read of a 1 MiB and of a 256 MiB package: the S3 requests
the Files function makes and the bytes S3 sends it (GetObject's Content-Length, counted with a botocore hook), for a
cold read (first read of the release in a process: manifest, pack index, then the file) and a warm one (manifest and
index kept), against what reading the file out of the archive would cost (a streamed GET of the archive up to the
member). Then the S3 requests of publishing a 20-file package, and what the pack adds to them at list prices.

    python benchmarks/bench_files.py            # both sizes
    python benchmarks/bench_files.py --small    # the 1 MiB package and the publish only
"""

from __future__ import annotations

import argparse
import os
import sys
from collections import Counter
from pathlib import Path
from typing import Any

sys.path[:0] = [str(Path(__file__).parents[1]), str(Path(__file__).parents[1] / "shared")]
os.environ.setdefault("POWERTOOLS_METRICS_DISABLED", "true")
os.environ.setdefault("POWERTOOLS_LOG_LEVEL", "ERROR")

from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

import devstack  # noqa: E402
from devstack.api import LocalApi  # noqa: E402
from devstack.apigw import http_event  # noqa: E402
from devstack.caller import Caller  # noqa: E402
from devstack.counting import count_aws_requests  # noqa: E402
from packyard.config import MiB  # noqa: E402
from packyard.publishing import files  # noqa: E402
from packyard.store import aws  # noqa: E402
from packyard_cli.build import BuiltPackage, build_from_files  # noqa: E402

PUT_CLASS = {"PutObject", "CopyObject", "CreateMultipartUpload", "UploadPart", "CompleteMultipartUpload"}
S3_PUT, S3_GET = 0.005 / 1000, 0.0004 / 1000  # us-east-1 list prices (benchmarks/simulate_capacity.py PRICE)
PUBLISH_RUNS = 5


class BytesRead:
    """Sum of the Content-Length of every S3 GetObject answer while active (a botocore after-call hook)."""

    def __init__(self) -> None:
        self.total = 0
        self.active = False

    def __call__(self, parsed: dict[str, Any] | None = None, **_: Any) -> None:
        if self.active and parsed:
            self.total += int(parsed.get("ContentLength") or 0)


def _package(total: int) -> dict[str, bytes]:
    """Text-like content (hex of random bytes: it compresses 2:1, so a 256 MiB package fits the 256 MiB archive
    limit), in 4 MiB files, the last two of 8 MiB (their own objects); the first file is 2 KiB."""
    content: dict[str, bytes] = {"src/first.txt": os.urandom(1024).hex().encode()}
    left = total - len(content["src/first.txt"])
    index = 0
    while left > 0:
        size = min(8 * MiB if left <= 16 * MiB else 4 * MiB, left)
        content[f"data/part-{index:03d}.txt"] = os.urandom(size // 2).hex().encode()[:size]
        left -= size
        index += 1
    return content


def _publish_slowly(caller: Caller, built: BuiltPackage) -> None:
    """``Caller.publish`` with room for a 256 MiB archive on a busy machine (it waits 60 s at most)."""
    session = caller.request_upload("bench", "1.0.0", built).body
    caller.put_archive(session, built.archive)
    done = caller.post(f"/v1/uploads/{session['uploadId']}/complete")
    assert done.status == 202, done.body
    devstack.wait_for_execution(done.body["executionArn"], timeout=1800)
    final = caller.get(f"/v1/uploads/{session['uploadId']}").body
    assert final["state"] == "published", final


def _read(api: LocalApi, caller: Caller, path: str, counter: BytesRead) -> tuple[Counter[str], int, int]:
    counter.total, counter.active = 0, True
    with count_aws_requests() as counted:
        answer = api.call(http_event("GET", path, claims=caller.claims))
    counter.active = False
    assert answer["statusCode"] in (200, 307), answer
    s3 = Counter({op: n for (service, op), n in counted.items() if service == "s3"})
    return s3, counter.total, answer["statusCode"]


def measure_reads(console: Console, label: str, total: int) -> None:
    with devstack.local_aws() as stack:
        api = LocalApi(stack)
        caller = Caller(api, "t-bench")
        content = _package(total)
        built: BuiltPackage = build_from_files(content)
        _publish_slowly(caller, built)
        counter = BytesRead()
        aws.client("s3").meta.events.register("after-call.s3.GetObject", counter)
        files.forget_cached()
        table = Table(title=f"S3 per file read, {label} package ({built.archive_size / MiB:.1f} MiB archive)")
        for column in ("read", "file", "answer", "S3 requests", "bytes from S3"):
            table.add_column(column, justify="right" if column.startswith(("S3", "bytes")) else "left")
        small = "src/first.txt"
        other = next(p for p in content if p != small and len(content[p]) <= 4 * MiB)
        large = max(content, key=lambda p: len(content[p]))
        for read, path in (("cold", small), ("warm", other), ("warm", large)):
            s3, read_bytes, status = _read(api, caller, f"/v1/packages/bench/versions/1.0.0/files/{path}", counter)
            shown = ", ".join(f"{n} {op}" for op, n in sorted(s3.items()))
            table.add_row(read, f"{path} ({len(content[path]):,} B)", str(status), shown, f"{read_bytes:,}")
        # the same file out of the archive (what a reader without the pack pays): a streamed GET up to the member
        files.forget_cached()
        pack = f"files/t-bench/{built.archive_sha256}/pack"
        s3_client = aws.client("s3")
        s3_client.delete_object(Bucket=stack.bucket_name, Key=pack)
        last = sorted(p for p in content if len(content[p]) <= 4 * MiB)[-1]
        s3, read_bytes, status = _read(api, caller, f"/v1/packages/bench/versions/1.0.0/files/{last}", counter)
        table.add_row(
            "no pack", f"{last} (from the archive)", str(status), f"{sum(s3.values())} requests", f"{read_bytes:,}"
        )
        console.print(table)


def measure_publish(console: Console) -> None:
    with devstack.local_aws() as stack:
        caller = Caller(LocalApi(stack), "t-bench")
        total: Counter[str] = Counter()
        for run in range(PUBLISH_RUNS):
            package = {f"src/file-{i:02d}.py": f"# file {i} of run {run}\n".encode() * 20 for i in range(20)}
            with count_aws_requests() as counted:
                final = caller.publish("twenty", f"1.0.{run}", build_from_files(package))
            assert final["state"] == "published", final
            total.update({op: n for (service, op), n in counted.items() if service == "s3"})
        mean = {op: n / PUBLISH_RUNS for op, n in sorted(total.items())}
    table = Table(title=f"S3 requests per publish of a 20-file package (mean of {PUBLISH_RUNS})")
    table.add_column("operation")
    table.add_column("requests", justify="right")
    for op, n in mean.items():
        table.add_row(op, f"{n:g}")
    put = sum(n for op, n in mean.items() if op in PUT_CLASS)
    get = sum(n for op, n in mean.items() if op not in PUT_CLASS and op not in ("DeleteObject", "DeleteObjects"))
    table.add_row("[bold]PUT-class / GET-class", f"[bold]{put:g} / {get:g}")
    console.print(table)
    # the pack adds one PutObject (the pack: one object for a small package) and one HeadObject (is it there?),
    # and one GetObject (the archive, re-read to pack it)
    added = S3_PUT + 2 * S3_GET
    console.print(
        f"  the file pack adds 1 PutObject + 1 HeadObject + 1 GetObject per publish: ${added * 1000:.4f} per 1,000 "
        f"publishes (issue 23's target for a whole publish: $0.040 per 1,000)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--small", action="store_true", help="skip the 256 MiB package")
    args = parser.parse_args()
    console = Console()
    measure_reads(console, "1 MiB", 1 * MiB)
    if not args.small:
        measure_reads(console, "256 MiB", 256 * MiB)
    measure_publish(console)


if __name__ == "__main__":
    main()
