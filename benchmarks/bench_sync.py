"""What ``packyard sync`` costs (issue 22, item 2): a cold sync of one installation, an unchanged rerun, a second
folder from the warm cache, and an update that changed one file, against the local stack; wall time, requests,
bytes downloaded, and the Python heap's peak during each (tracemalloc: the archive is streamed to a temporary file,
so the peak must not grow with the package).

    python benchmarks/bench_sync.py              # a 64 MiB package of 256 files
    python benchmarks/bench_sync.py --mib 16     # smaller
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

import requests

sys.path[:0] = [str(Path(__file__).parents[1]), str(Path(__file__).parents[1] / "shared")]
from stack_client import Client, StackProcess  # noqa: E402

from packyard_cli import tokens  # noqa: E402
from packyard_cli.build import build_from_files  # noqa: E402
from packyard_cli.client import Client as ApiClient  # noqa: E402
from packyard_cli.sync import SyncResult, sync_workspace  # noqa: E402

MiB = 1 << 20


class Counting(requests.Session):
    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def request(self, *args: Any, **kwargs: Any) -> requests.Response:  # type: ignore[override]
        self.count += 1
        return super().request(*args, **kwargs)


def _files(total_mib: int, count: int, marker: bytes) -> dict[str, bytes]:
    """Text-like files (hex of random bytes: compresses about 2:1), the first one carrying ``marker``."""
    size = total_mib * MiB // count
    files = {f"data/{i // 16:02d}/part-{i:04d}.txt": os.urandom(size // 2).hex().encode() for i in range(count)}
    files["data/00/part-0000.txt"] = marker + files["data/00/part-0000.txt"][len(marker) :]
    return files


def _measure(label: str, run: Callable[[], SyncResult], session: Counting) -> dict[str, Any]:
    session.count = 0
    tracemalloc.start()
    started = time.perf_counter()
    result = run()
    seconds = time.perf_counter() - started
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return {
        "run": label,
        "seconds": seconds,
        "requests": session.count,
        "downloaded MiB": result.downloaded_bytes / MiB,
        "files fetched": result.files_fetched,
        "heap peak MiB": peak / MiB,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mib", type=int, default=64)
    parser.add_argument("--files", type=int, default=256)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch)
        stack = StackProcess.start(root / "state")
        try:
            caller = Client(stack, "t-bench-sync")
            v1 = _files(args.mib, args.files, b"v1")
            v2 = {**v1, "data/00/part-0000.txt": b"v2" + v1["data/00/part-0000.txt"][2:]}
            for version, files in (("1.0.0", v1), ("1.1.0", v2)):
                caller.publish("big", version, build_from_files(files))
            body = {"package": "big", "version": "1.0.0", "scope": {"kind": "workspace"}, "config": {}}
            caller.settle("ws-bench", caller.change("PUT", "ws-bench", "big", body))

            key = tokens.load_key(stack.state_dir)
            assert key is not None
            token = key.mint(tenant="t-bench-sync", subject="bench")
            session = Counting()
            api = ApiClient(stack.api, token=lambda: token, session=session)
            cache = root / "cache"

            def sync(target: str) -> Callable[[], SyncResult]:
                return lambda: sync_workspace("ws-bench", root / target, client=api, cache_dir=cache)

            rows = [
                _measure("cold (nothing cached)", sync("one"), session),
                _measure("unchanged rerun", sync("one"), session),
                _measure("second folder, warm cache", sync("two"), session),
            ]
            etag = caller.installation_version("ws-bench", "big")
            caller.settle("ws-bench", caller.change("PUT", "ws-bench", "big", {**body, "version": "1.1.0"}, etag))
            rows.append(_measure("update: 1 file changed", sync("one"), session))
        finally:
            stack.stop()

    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"packyard sync of a {args.mib} MiB package of {args.files} files (local stack)")
    for column in rows[0]:
        table.add_column(column, justify="left" if column == "run" else "right")
    for row in rows:
        table.add_row(*(f"{v:.2f}" if isinstance(v, float) else str(v) for v in row.values()))
    Console().print(table)


if __name__ == "__main__":
    main()
