"""Archive verifier benchmark (docs/architecture.md, "Targets"): throughput and peak memory. Prints figures;
asserts nothing.

    python benchmarks/bench_verify.py

(a) Throughput: a ~200 MiB-unpacked package of moderately compressible files, kept compressed in memory; verify_archive
    against the plain baseline "read + sha256 of compressed + zlib gunzip + sha256 of decompressed" over the same bytes,
    best of 3 each. Target: ratio >= 0.8.
(b) Peak memory: verify a 5 MiB-unpacked and a 512 MiB-unpacked package, each streamed from a temp file in its own
    child process; each child reports its own peak RSS. Target: difference <= 64 MiB.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import io
import json
import os
import random
import resource
import subprocess
import sys
import tarfile
import tempfile
import time
import zlib
from pathlib import Path
from typing import Any, BinaryIO

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "shared"))

from packyard.config import Limits, MiB  # noqa: E402
from packyard.publishing.archive_verifier import READ_CHUNK, verify_archive  # noqa: E402
from packyard.publishing.manifest import parse_manifest  # noqa: E402

THROUGHPUT_UNPACKED = 200 * MiB
MEMORY_SMALL_UNPACKED = 5 * MiB
MEMORY_LARGE_UNPACKED = 512 * MiB
RUNS = 3
_POOL_SIZE = 8 * MiB


def _content_pool(seed: int) -> bytes:
    """Random bytes over a 6-letter alphabet: ~2.6 bits of entropy per byte, so gzip -1 keeps roughly 35-40%."""
    alphabet = b"acgtAC"
    table = bytes(alphabet[i % len(alphabet)] for i in range(256))
    return random.Random(seed).randbytes(_POOL_SIZE).translate(table)


def build_package(out: BinaryIO, unpacked: int, *, seed: int = 7) -> dict[str, Any]:
    """Write a tar.gz of files adding up to ``unpacked`` bytes to ``out``; return its manifest (a dict)."""
    pool = _content_pool(seed)
    rng = random.Random(seed)
    files: list[dict[str, Any]] = []
    written = 0
    with (
        gzip.GzipFile(fileobj=out, mode="wb", compresslevel=1, mtime=0, filename="") as gz,
        tarfile.open(fileobj=gz, mode="w|", format=tarfile.PAX_FORMAT) as tar,
    ):
        index = 0
        while written < unpacked:
            # Mostly 256 KiB - 4 MiB files, with a few small ones mixed in.
            size = rng.choice([rng.randrange(256 * 1024, 4 * MiB), rng.randrange(0, 16 * 1024)])
            size = min(size, unpacked - written)
            start = rng.randrange(0, _POOL_SIZE - size) if size < _POOL_SIZE else 0
            content = pool[start : start + size]
            path = f"pkg/part{index // 100:03d}/file{index:05d}.dat"
            info = tarfile.TarInfo(path)
            info.size, info.mode, info.mtime = size, 0o644, 1_700_000_000
            tar.addfile(info, io.BytesIO(content))
            files.append({"path": path, "size": size, "sha256": hashlib.sha256(content).hexdigest()})
            written += size
            index += 1
    return {"protocolVersion": 1, "files": files}


def plain_baseline(raw: bytes) -> tuple[str, str]:
    """What any verifier must at least do: read, hash the compressed bytes, gunzip, hash the decompressed bytes."""
    stream = io.BytesIO(raw)
    compressed, decompressed = hashlib.sha256(), hashlib.sha256()
    inflater = zlib.decompressobj(31)
    while chunk := stream.read(READ_CHUNK):
        compressed.update(chunk)
        decompressed.update(inflater.decompress(chunk))
    decompressed.update(inflater.flush())
    return compressed.hexdigest(), decompressed.hexdigest()


def _timed(fn: Any) -> float:
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started


def throughput() -> dict[str, float]:
    out = io.BytesIO()
    manifest = parse_manifest(build_package(out, THROUGHPUT_UNPACKED), Limits())
    raw = out.getvalue()
    digest = hashlib.sha256(raw).hexdigest()
    limits = Limits()

    def verify() -> None:
        verify_archive(io.BytesIO(raw), manifest, declared_size=len(raw), declared_sha256=digest, limits=limits)

    verify()  # warm-up, and proof it passes
    baseline_s, verify_s = float("inf"), float("inf")
    for _ in range(RUNS):  # interleaved, so drift in machine speed hits both alike
        baseline_s = min(baseline_s, _timed(lambda: plain_baseline(raw)))
        verify_s = min(verify_s, _timed(verify))
    return {
        "compressed_mib": len(raw) / MiB,
        "unpacked_mib": THROUGHPUT_UNPACKED / MiB,
        "files": len(manifest.files),
        "baseline_mbs": len(raw) / baseline_s / 1e6,
        "verify_mbs": len(raw) / verify_s / 1e6,
        "baseline_unpacked_mbs": THROUGHPUT_UNPACKED / baseline_s / 1e6,
        "verify_unpacked_mbs": THROUGHPUT_UNPACKED / verify_s / 1e6,
        "ratio": baseline_s / verify_s,
    }


def _peak_rss_bytes() -> int:
    """This process's own peak RSS. VmHWM, not ru_maxrss: on Linux ru_maxrss survives exec, so a child forked from
    a big parent would report the parent's size."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux


def child_verify(archive: str, manifest_path: str) -> None:
    """Runs in a child process: verify one archive streamed from disk, print peak RSS before and after as JSON."""
    limits = Limits()
    manifest = parse_manifest(Path(manifest_path).read_bytes(), limits)
    size = os.path.getsize(archive)
    declared_sha256 = Path(archive + ".sha256").read_text().strip()
    before = _peak_rss_bytes()
    with open(archive, "rb") as stream:
        result = verify_archive(stream, manifest, declared_size=size, declared_sha256=declared_sha256, limits=limits)
    print(json.dumps({"before": before, "after": _peak_rss_bytes(), "unpacked": result.unpacked_size}))


def _write_package_file(directory: Path, name: str, unpacked: int) -> tuple[Path, Path]:
    archive, manifest = directory / f"{name}.tar.gz", directory / f"{name}.manifest.json"
    with archive.open("wb") as out:
        manifest.write_text(json.dumps(build_package(out, unpacked)))
    digest = hashlib.sha256()
    with archive.open("rb") as stream:
        while chunk := stream.read(READ_CHUNK):
            digest.update(chunk)
    Path(str(archive) + ".sha256").write_text(digest.hexdigest())
    return archive, manifest


def peak_memory() -> dict[str, dict[str, float]]:
    figures: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory(prefix="packyard-bench-") as tmp:
        for name, unpacked in (("small", MEMORY_SMALL_UNPACKED), ("large", MEMORY_LARGE_UNPACKED)):
            archive, manifest = _write_package_file(Path(tmp), name, unpacked)
            started = time.perf_counter()
            done = subprocess.run(
                [sys.executable, __file__, "--child-verify", str(archive), str(manifest)],
                check=True,
                capture_output=True,
                text=True,
            )
            report = json.loads(done.stdout)
            figures[name] = {
                "unpacked_mib": report["unpacked"] / MiB,
                "compressed_mib": archive.stat().st_size / MiB,
                "rss_before_mib": report["before"] / MiB,
                "rss_peak_mib": report["after"] / MiB,
                "seconds": time.perf_counter() - started,
            }
    return figures


def _print(throughput_figures: dict[str, float], memory: dict[str, dict[str, float]]) -> None:
    try:
        from rich.console import Console
        from rich.table import Table
    except ImportError:  # plain output is enough
        print(json.dumps({"throughput": throughput_figures, "memory": memory}, indent=2))
        return
    t = throughput_figures
    table = Table(title="verify_archive throughput (best of 3, same bytes, same run)")
    for column in ("", "compressed MB/s", "unpacked MB/s"):
        table.add_column(column, justify="right")
    table.add_row("plain read+sha256+gunzip+sha256", f"{t['baseline_mbs']:.0f}", f"{t['baseline_unpacked_mbs']:.0f}")
    table.add_row("verify_archive", f"{t['verify_mbs']:.0f}", f"{t['verify_unpacked_mbs']:.0f}")
    table.caption = (
        f"{t['unpacked_mib']:.0f} MiB unpacked in {t['files']:.0f} files, {t['compressed_mib']:.1f} MiB compressed; "
        f"ratio verify/plain = {t['ratio']:.2f} (target >= 0.8)"
    )
    console = Console()
    console.print(table)

    table = Table(title="verify_archive peak memory (child process per package, streamed from a temp file)")
    for column in ("package", "unpacked MiB", "compressed MiB", "RSS before verify MiB", "peak RSS MiB", "seconds"):
        table.add_column(column, justify="right")
    for name, row in memory.items():
        table.add_row(
            name,
            f"{row['unpacked_mib']:.0f}",
            f"{row['compressed_mib']:.1f}",
            f"{row['rss_before_mib']:.1f}",
            f"{row['rss_peak_mib']:.1f}",
            f"{row['seconds']:.1f}",
        )
    difference = memory["large"]["rss_peak_mib"] - memory["small"]["rss_peak_mib"]
    table.caption = f"peak RSS difference large - small = {difference:.1f} MiB (target <= 64 MiB)"
    console.print(table)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--child-verify", nargs=2, metavar=("ARCHIVE", "MANIFEST"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child_verify:
        child_verify(*args.child_verify)
        return
    started = time.perf_counter()
    throughput_figures = throughput()
    memory = peak_memory()
    _print(throughput_figures, memory)
    print(f"total benchmark time: {time.perf_counter() - started:.1f} s")


if __name__ == "__main__":
    main()
