"""What the local stack's memory holds: the data moto stores (S3 objects, DynamoDB items, Step Functions executions
and their histories), counted and sized in this process, beside the process's RSS.

``packyard local`` writes :func:`report` to ``<state dir>/memory.json`` when it receives ``SIGUSR1``
(``benchmarks/bench_local_stack.py`` asks for it after each phase), so a benchmark can tell growth that is the
stored data itself from growth that is not (a leak). Sizes are deep sizes of moto's own objects
(``sys.getsizeof`` over everything reachable from a backend's stored records, each object counted once), i.e. what
keeping that data costs in Python, not its size on the wire.
"""

from __future__ import annotations

import gc
import json
import os
import sys
import threading
import types
from collections.abc import Iterable
from pathlib import Path
from typing import Any

MIB = 1024 * 1024
_SKIP = (type, types.ModuleType, types.FunctionType, types.BuiltinFunctionType, types.MethodType, types.CodeType)


def rss_mib() -> float:
    """This process's resident set size (VmRSS), in MiB (0 where /proc is not there)."""
    try:
        for line in Path(f"/proc/{os.getpid()}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def deep_size(roots: Iterable[Any], seen: set[int]) -> int:
    """Bytes of everything reachable from ``roots`` not in ``seen`` (which it extends): classes, modules,
    functions, code, threads and moto's backends themselves are not followed (they are not the stored data)."""
    from moto.core.base_backend import BaseBackend

    total = 0
    stack = list(roots)
    while stack:
        obj = stack.pop()
        if id(obj) in seen or isinstance(obj, (*_SKIP, threading.Thread, BaseBackend)):
            continue
        seen.add(id(obj))
        try:
            total += sys.getsizeof(obj)
        except TypeError:
            continue
        stack.extend(gc.get_referents(obj))
    return total


def _s3(seen: set[int]) -> dict[str, Any]:
    from moto.s3.models import s3_backends

    objects, stored, roots = 0, 0, list[Any]()
    for account in s3_backends.values():
        for backend in account.values():
            for bucket in backend.buckets.values():
                for versions in bucket.keys.lists():
                    for key in versions[1]:
                        objects += 1
                        stored += int(getattr(key, "size", 0) or 0)
                        roots.append(key)
    return {"objects": objects, "bytes": stored, "pythonBytes": deep_size(roots, seen)}


def _dynamodb(seen: set[int]) -> dict[str, Any]:
    from moto.dynamodb.models import dynamodb_backends

    items, roots = 0, list[Any]()
    for account in dynamodb_backends.values():
        for backend in account.values():
            for table in backend.tables.values():
                for item in table.all_items():
                    items += 1
                    roots.append(item)
                roots.append(table.items)
    return {"items": items, "pythonBytes": deep_size(roots, seen)}


def _stepfunctions(seen: set[int]) -> dict[str, Any]:
    from moto.stepfunctions.models import stepfunctions_backends
    from moto.stepfunctions.parser.models import stepfunctions_parser_backends

    executions, events, running, roots, histories = 0, 0, 0, list[Any](), list[Any]()
    for backends in (stepfunctions_backends, stepfunctions_parser_backends):  # moto's interpreter uses the second
        for backend in (backend for account in backends.values() for backend in account.values()):
            for machine in getattr(backend, "state_machines", []):
                for execution in getattr(machine, "executions", []):
                    executions += 1
                    roots.append(execution)
                    running += str(getattr(execution, "exec_status", "")).endswith("RUNNING")
                    env = getattr(getattr(execution, "exec_worker", None), "env", None)
                    history = getattr(getattr(env, "event_manager", None), "_history_event_list", None)
                    if history is not None:
                        events += len(history)
                        histories.append(history)
    history_bytes = deep_size(histories, seen)  # first: the part of each execution that is its history
    total = history_bytes + deep_size(roots, seen)
    return {
        "executions": executions,
        "running": running,
        "events": events,
        "historyBytes": history_bytes,
        "pythonBytes": total,
    }


_last_snapshot: Any = None


def traced_growth(limit: int = 25) -> list[dict[str, Any]]:
    """Where Python's allocations grew since the previous report, by the line that allocated them, when the process
    runs with ``PYTHONTRACEMALLOC`` (e.g. ``PYTHONTRACEMALLOC=1 packyard local``); empty otherwise."""
    import tracemalloc

    global _last_snapshot
    if not tracemalloc.is_tracing():
        return []
    snapshot = tracemalloc.take_snapshot().filter_traces([tracemalloc.Filter(False, tracemalloc.__file__)])
    previous, _last_snapshot = _last_snapshot, snapshot
    if previous is None:
        return []
    top = snapshot.compare_to(previous, "lineno")[:limit]
    return [
        {"where": str(stat.traceback), "growthKiB": round(stat.size_diff / 1024), "blocks": stat.count_diff}
        for stat in top
    ]


def report() -> dict[str, Any]:
    """RSS, threads, and each service's stored data: counts and deep size in MiB (and, when tracing allocations,
    where they grew since the previous report)."""
    gc.collect()
    seen: set[int] = set()
    stored: dict[str, Any] = {}
    for name, measure in (("s3", _s3), ("dynamodb", _dynamodb), ("stepfunctions", _stepfunctions)):
        try:
            stored[name] = measure(seen)
        except Exception as exc:  # moto's internals moved: say so rather than guess
            stored[name] = {"error": f"{type(exc).__name__}: {exc}", "pythonBytes": 0}
    from moto.stepfunctions.parser.utils import TMP_THREADS

    return {
        "rssMiB": round(rss_mib(), 1),
        # Python's own count of the memory blocks it holds, and of the objects the collector tracks: growth here
        # beyond the stored data is a leak of Python objects; growth of RSS alone is the allocator's
        "allocatedBlocks": sys.getallocatedblocks(),
        "gcObjects": len(gc.get_objects()),
        "threads": threading.active_count(),
        "interpreterThreadsKept": len(TMP_THREADS),  # moto's list of its ASL threads (devstack/moto_fixes.py)
        "storedMiB": round(sum(part["pythonBytes"] for part in stored.values()) / MIB, 1),
        "stored": stored,
        "tracedGrowth": traced_growth(),
    }


def write_report(path: Path) -> None:
    """:func:`report` as JSON, written atomically (a reader never sees half a file)."""
    partial = path.with_suffix(".partial")
    partial.write_text(json.dumps(report()), "utf-8")
    partial.replace(path)
