"""What the local stack's memory holds: the data moto stores (S3 objects, DynamoDB items, Step Functions executions
and their histories, CloudWatch Logs events), counted and sized, beside the process's RSS and the two allocators'
heaps behind it.

``packyard local`` writes :func:`write_report` to ``<state dir>/memory.json`` when it receives ``SIGUSR1``
(``benchmarks/bench_local_stack.py`` asks for it after each phase), so a benchmark can tell growth that is the
stored data itself from growth that is not (a leak). Sizes are deep sizes of moto's own objects
(``sys.getsizeof`` over everything reachable from a backend's stored records, each object counted once, plus the
attribute values CPython 3.12 allocates apart from an instance: :func:`_attribute_values_size`), i.e. what keeping
that data costs in Python, not its size on the wire.

The measurement must not be in what it measures: the process's figures are read before the stored data is walked,
and on Linux the walk runs in a forked copy of the process, so its bookkeeping (a set of every object's id, tens of
MiB) is never freed into the heap whose RSS the next report reads."""

from __future__ import annotations

import gc
import json
import os
import signal
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


YOUNG_COLLECTION_THRESHOLD = 10_000


def freeze_what_start_built() -> int:
    """Move every object alive once the stack has started (moto's and botocore's modules and service models, the
    template's resources: some 334,000 tracked objects) into the collector's permanent generation, after a
    collection, and return how many. They live as long as the process, and every full collection walked them again:
    after the benchmark's soak a full collection of the stack's process took 0.5 s, the GIL held throughout, twice a
    minute under load. Objects made later (the stored data, each request's) are collected as before; a frozen object
    is still freed when its last reference goes (docs/decisions.md, "The stack's collector walks what it stores")."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(YOUNG_COLLECTION_THRESHOLD, *gc.get_threshold()[1:])
    return gc.get_freeze_count()


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
        referents = gc.get_referents(obj)
        total += _attribute_values_size(obj, referents)
        stack.extend(referents)
    return total


_MANAGED_DICT = 1 << 4  # Py_TPFLAGS_MANAGED_DICT
_VALUES_APART = sys.version_info[:2] == (3, 12)


def _attribute_values_size(obj: Any, referents: list[Any]) -> int:
    """Bytes of an instance's attribute values that ``sys.getsizeof`` leaves out. On CPython 3.12 an instance of a
    class without ``__slots__`` keeps its attributes in a values array allocated apart from the object (until
    something asks for its ``__dict__``): ``PyMem_Malloc(round_up(size + 2, 8) + 8 * size)`` in
    ``Objects/dictobject.c`` (``new_values``), ``size`` the class's shared keys' capacity, one more than the
    attributes an instance sets in the common case. The collector then reports the values themselves and the class
    as the instance's referents. Without this, a moto ``Item`` or ``DynamoType`` cost 40 to 100 bytes more than the
    walk counted (held against ``tracemalloc`` in tests/integration/test_memory_report.py)."""
    if not _VALUES_APART or not type(obj).__flags__ & _MANAGED_DICT:
        return 0
    values = len(referents) - 1  # the class is a referent too
    if values < 1 or (values == 1 and type(referents[0]) is dict):  # none set, or a __dict__ made from them
        return 0
    size = values + 1
    return (size + 2 + 7) // 8 * 8 + 8 * size


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


def _logs(seen: set[int]) -> dict[str, Any]:
    """CloudWatch Logs: the events delivered to log groups (the change events the bus's rule copies to its log
    group, one or two an operation), with their streams."""
    from moto.logs.models import logs_backends

    events, roots = 0, list[Any]()
    for account in logs_backends.values():
        for backend in account.values():
            for group in backend.groups.values():
                for stream in group.streams.values():
                    events += len(stream.events)
                    roots.append(stream.events)
    return {"events": events, "pythonBytes": deep_size(roots, seen)}


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


def pymalloc_stats() -> dict[str, int]:
    """pymalloc's own account of its arenas (``sys._debugmallocstats``, which writes to C's stderr): bytes in live
    blocks, in free blocks of used pools, in empty pools, and the arenas' total."""
    import tempfile

    with tempfile.TemporaryFile() as captured:
        saved = os.dup(2)
        os.dup2(captured.fileno(), 2)
        try:
            sys._debugmallocstats()
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        captured.seek(0)
        text = captured.read().decode("utf-8", "replace")
    labels = {
        "# bytes in allocated blocks": "allocated",
        "# bytes in available blocks": "available",
        "unused pools": "unusedPools",
        "arenas * ": "arenas",
    }
    stats: dict[str, int] = {}
    for line in text.splitlines():
        for label, name in labels.items():
            if label in line and name not in stats:
                stats[name] = int(line.rpartition("=")[2].replace(",", "").strip() or 0)
    return stats


def glibc_malloc_stats() -> dict[str, int]:
    """glibc's ``mallinfo2``: bytes of its heaps (``arena``), of large blocks it mapped on their own (``mmapped``),
    in use (``inUse``) and free inside its heaps (``free``); empty where that is not glibc."""
    import ctypes
    import ctypes.util

    class MallInfo2(ctypes.Structure):
        _fields_ = [
            (name, ctypes.c_size_t)
            for name in (
                "arena",
                "ordblks",
                "smblks",
                "hblks",
                "hblkhd",
                "usmblks",
                "fsmblks",
                "uordblks",
                "fordblks",
                "keepcost",
            )
        ]

    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        libc.mallinfo2.restype = MallInfo2
        info = libc.mallinfo2()
    except (OSError, AttributeError):
        return {}
    return {"arena": info.arena, "mmapped": info.hblkhd, "inUse": info.uordblks, "free": info.fordblks}


def allocator() -> dict[str, float]:
    """The heap behind the RSS, in MiB: pymalloc (objects up to 512 bytes) and the C allocator (everything else),
    each split into what live objects use and what is held free."""
    py = pymalloc_stats()
    c = glibc_malloc_stats()
    figures = {
        "pymallocArenas": py.get("arenas", 0),
        "pymallocLive": py.get("allocated", 0),
        "pymallocFreeBlocks": py.get("available", 0),
        "pymallocEmptyPools": py.get("unusedPools", 0),
        "mallocHeap": c.get("arena", 0),
        "mallocMapped": c.get("mmapped", 0),
        "mallocInUse": c.get("inUse", 0),
        "mallocFree": c.get("free", 0),
    }
    return {name: round(value / MIB, 1) for name, value in figures.items()}


def unstored_objects(seen: set[int], limit: int = 15) -> list[dict[str, Any]]:
    """The objects the collector tracks that the stored data does not reach (``seen`` after the walk), by type,
    largest count first: a type that grows here from report to report is held by something other than the data."""
    counts: dict[str, list[int]] = {}
    for obj in gc.get_objects():
        if obj is seen or id(obj) in seen or isinstance(obj, _SKIP):  # nor the walk's own bookkeeping
            continue
        entry = counts.setdefault(type(obj).__qualname__, [0, 0])
        entry[0] += 1
        entry[1] += sys.getsizeof(obj)
    top = sorted(counts.items(), key=lambda item: item[1][0], reverse=True)[:limit]
    return [{"type": name, "count": count, "KiB": round(size / 1024)} for name, (count, size) in top]


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


def process_figures() -> dict[str, Any]:
    """The process's own memory, after a collection: RSS, the allocators' heaps, Python's blocks, threads."""
    from moto.stepfunctions.parser.utils import TMP_THREADS

    gc.collect()
    return {
        "rssMiB": round(rss_mib(), 1),
        "allocatorMiB": allocator(),
        # Python's own count of the memory blocks it holds: growth here beyond the stored data is a leak of Python
        # objects; growth of RSS alone is the allocator's
        "allocatedBlocks": sys.getallocatedblocks(),
        "threads": threading.active_count(),
        "interpreterThreadsKept": len(TMP_THREADS),  # moto's list of its ASL threads (devstack/moto_fixes.py)
        "gcFrozen": gc.get_freeze_count(),  # left out of gcObjects: what start-up built (freeze_what_start_built)
    }


def stored_figures() -> dict[str, Any]:
    """Each service's stored data (counts, deep size), the objects the collector tracks, and those of them the
    stored data does not reach. Walking allocates a set of every object's id: tens of MiB at a few hundred thousand
    objects, which is why :func:`write_report` walks in a forked copy of the process (on Linux)."""
    seen: set[int] = set()
    stored: dict[str, Any] = {}
    for name, measure in (("s3", _s3), ("dynamodb", _dynamodb), ("stepfunctions", _stepfunctions), ("logs", _logs)):
        try:
            stored[name] = measure(seen)
        except Exception as exc:  # moto's internals moved: say so rather than guess
            stored[name] = {"error": f"{type(exc).__name__}: {exc}", "pythonBytes": 0}
    return {
        "gcObjects": len(gc.get_objects()),
        "storedMiB": round(sum(part["pythonBytes"] for part in stored.values()) / MIB, 1),
        "stored": stored,
        "unstoredObjects": unstored_objects(seen),
    }


WALK_TIMEOUT_SECONDS = 300.0


def write_report(path: Path) -> None:
    """The report as JSON, written atomically (a reader never sees half a file).

    On Linux the stored data is walked in a forked child, a copy-on-write snapshot of this process at this instant:
    the walk's set of ids and the collector's object list are then allocated in the child and die with it, instead
    of leaving tens of MiB of freed heap behind that the *next* report's RSS would count as growth. The child runs
    no handler code and takes no lock another thread could hold (no logging, no imports that are not done)."""
    process = process_figures()
    stored = _stored_in_child(path.with_suffix(".stored")) if sys.platform == "linux" else stored_figures()
    partial = path.with_suffix(".partial")
    partial.write_text(json.dumps({**process, **stored, "tracedGrowth": traced_growth()}), "utf-8")
    partial.replace(path)


def _stored_in_child(out: Path) -> dict[str, Any]:
    import time
    import warnings

    with warnings.catch_warnings():  # 3.12 warns about fork in a threaded process: the child above is why it is safe
        warnings.simplefilter("ignore", DeprecationWarning)
        pid = os.fork()
    if pid == 0:  # the child: walk, write, leave without running the parent's exit handlers
        code = 1
        try:
            out.write_text(json.dumps(stored_figures()), "utf-8")
            code = 0
        finally:
            os._exit(code)
    deadline = time.monotonic() + WALK_TIMEOUT_SECONDS
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            return {"stored": {"error": f"the walk did not finish in {WALK_TIMEOUT_SECONDS:.0f} s"}, "storedMiB": 0}
        time.sleep(0.05)
    try:
        if os.waitstatus_to_exitcode(status) != 0:
            return {"stored": {"error": f"the walk failed (exit {os.waitstatus_to_exitcode(status)})"}, "storedMiB": 0}
        found: dict[str, Any] = json.loads(out.read_text("utf-8"))
        return found
    finally:
        out.unlink(missing_ok=True)
