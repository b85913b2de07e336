"""The local stack's state on disk (``packyard local --data DIR``): an append-only journal of moto's changes.

moto keeps every table, bucket and execution in this process's memory. Here each change is also written to
``<data>/journal.log`` as it happens, one record per change, and the next start reads the journal back into moto's
backends before the stack serves anything:

* **DynamoDB**: every item write (PutItem, UpdateItem, DeleteItem, each item of a BatchWriteItem, a
  TransactWriteItems as a whole) is recorded as the *images* of the items it touched (the item as it now is, or its
  key when it is gone), written while the write still holds the journal's lock: records are in the order the writes
  happened, and a transaction's items are one record (all or nothing). Indexes (the due index) are derived from the
  items, as DynamoDB derives them.
* **S3**: every object write or delete (PutObject, presigned PUTs, CopyObject, CompleteMultipartUpload,
  DeleteObject(s)) is recorded at the end of its request as the object's image: its body goes to
  ``<data>/objects/<sha256>`` first (temporary file, fsync, rename), then the record names it.
* **Step Functions**: each execution is recorded when it starts and when it settles (status, output, error,
  cause). State machines are created from template.yaml at every start (same names, same ARNs). An execution that
  was running when the stack died cannot resume (moto's interpreter keeps its place in memory only): it comes back
  ``ABORTED`` (error ``States.Runtime``), as if stopped, and the maintenance sweeps settle what it was doing, exactly
  as they settle an execution that ended on AWS without settling.

A record is one line ``<crc32 hex> <json>\\n``. One flusher thread writes the records queued meanwhile with one
``write`` and one ``fdatasync`` (group commit, never under moto's locks), and the request that made a change is
answered only once its records are synced: a ``kill -9`` at any point loses nothing that was answered, and leaves
whole records plus at most one torn last line, which the next start recognises (its checksum) and cuts off.
Each start folds the journal into the latest image per item, object, execution and key set and writes that as a new
journal (temporary file, fsync, rename), so the journal holds one record per live thing plus what changed since the
last start.

Not kept: TransactWriteItems idempotency tokens (10 minutes), execution histories (GetExecutionHistory of an
execution from before the restart answers no events), in-flight multipart uploads (their parts), and anything
outside the stack's table, bucket and state machines.

Entry points: :func:`open_data` (lock the directory, read the journal), :meth:`DataDir.restore` (load it into moto,
after :func:`devstack.template.create_stack`), :meth:`DataDir.start_journal` (compact, then record every change),
:func:`journaled_app` (the WSGI wrapper around moto's server that writes S3 images), :meth:`DataDir.close`.
:func:`install_exit_point` is the fault hook the restart tests use: ``PACKYARD_LOCAL_EXIT_AT`` names a step at which
the process dies (``os._exit``), deterministically.
"""

from __future__ import annotations

import base64
import contextlib
import datetime
import fcntl
import functools
import hashlib
import json
import os
import threading
import uuid
import zlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

JOURNAL = "journal.log"
OBJECTS = "objects"
STACK_FILE = "stack.json"
LOCK_FILE = "lock"
FORMAT = 1
EXIT_AT = "PACKYARD_LOCAL_EXIT_AT"
EXIT_CODE = 137  # what a shell reports for a process killed by SIGKILL
LOST_EXECUTION_ERROR = "States.Runtime"
LOST_EXECUTION_CAUSE = "the local stack stopped while this execution ran; it did not resume after the restart"

__all__ = [
    "DataDir",
    "DataDirInUse",
    "World",
    "install_exit_point",
    "journaled_app",
    "open_data",
    "read_journal",
]


class DataDirInUse(Exception):
    """Another running stack holds the data directory."""


# ------------------------------------------------------------------ records


def encode_record(record: dict[str, Any]) -> bytes:
    body = json.dumps(record, separators=(",", ":"), sort_keys=True).encode("utf-8")
    return b"%08x %s\n" % (zlib.crc32(body), body)


def decode_line(line: bytes) -> dict[str, Any] | None:
    """The record of one journal line, or None when the line is torn or altered (its checksum does not match)."""
    if not line.endswith(b"\n") or len(line) < 11 or line[8:9] != b" ":
        return None
    body = line[9:-1]
    try:
        if int(line[:8], 16) != zlib.crc32(body):
            return None
        record = json.loads(body)
    except ValueError:
        return None
    return record if isinstance(record, dict) else None


def read_journal(path: Path) -> tuple[list[dict[str, Any]], int]:
    """Every whole record of the journal at ``path``, in order, and the length of the good part: reading stops at
    the first torn or altered line (a write the process died in), and what follows it is not trusted."""
    records: list[dict[str, Any]] = []
    good = 0
    try:
        handle = path.open("rb")
    except FileNotFoundError:
        return records, 0
    with handle:
        for line in handle:
            record = decode_line(line)
            if record is None:
                break
            records.append(record)
            good += len(line)
    return records, good


def _fsync_directory(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomically(path: Path, chunks: Iterable[bytes]) -> None:
    """Write ``path`` so that it is either its old content or all of the new one: temporary file, fsync, rename."""
    temporary = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
    with temporary.open("wb") as handle:
        for chunk in chunks:
            handle.write(chunk)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(temporary, path)
    _fsync_directory(path.parent)


class Journal:
    """The open journal, written by one flusher thread (group commit). :meth:`append` only queues a whole record, in
    the order of the callers' lock, and returns at once; the flusher writes whatever was queued meanwhile with one
    ``write`` and one ``fdatasync``, and :meth:`wait_durable` (called outside every lock, before the request that made
    the change is answered) returns once that covered the record. No write or sync happens under a caller's lock:
    appending to the page a sync is writing back can block ``write`` for the length of the device's write, and
    DynamoDB's lock (held through a whole transaction) would wait with it. A record not yet written when the process
    dies was never acknowledged: the request that made it was still waiting."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        self._changed = threading.Condition()
        self._pending: list[bytes] = []
        self._queued = 0
        self._synced = 0
        self._closed = False
        self._flusher = threading.Thread(target=self._write_queued, name="packyard-journal", daemon=True)
        self._flusher.start()

    @property
    def records(self) -> int:
        return self._queued

    def append(self, record: dict[str, Any]) -> int:
        """Queue ``record``; its sequence number (for :meth:`wait_durable`)."""
        line = encode_record(record)
        with self._changed:
            self._pending.append(line)
            self._queued += 1
            self._changed.notify_all()
            return self._queued

    def wait_durable(self, sequence: int) -> None:
        with self._changed:
            while self._synced < sequence and not self._closed:
                self._changed.wait()

    def _write_queued(self) -> None:
        while True:
            with self._changed:
                while not self._pending and not self._closed:
                    self._changed.wait()
                if not self._pending:
                    return  # closed, and everything queued is written
                lines, self._pending = self._pending, []
                target = self._queued
            batch = memoryview(b"".join(lines))
            while batch:
                batch = batch[os.write(self._fd, batch) :]
            os.fdatasync(self._fd)
            with self._changed:
                self._synced = target
                self._changed.notify_all()

    def close(self) -> None:
        """Write and sync what is queued, then close."""
        with self._changed:
            self._closed = True
            self._changed.notify_all()
        self._flusher.join()
        with contextlib.suppress(OSError):
            os.close(self._fd)


# ------------------------------------------------------------------ the folded state


@dataclass
class World:
    """What a journal describes: the latest image of every item, object and execution."""

    items: dict[str, dict[str, dict[str, Any]]] = field(default_factory=dict)  # table → key json → item
    objects: dict[str, dict[str, dict[str, Any]]] = field(default_factory=dict)  # bucket → key → object image
    executions: dict[str, dict[str, Any]] = field(default_factory=dict)  # execution ARN → its record
    keys: dict[str, list[dict[str, Any]]] = field(default_factory=dict)  # "account/region" → its KMS keys' images
    suffix: str | None = None

    def apply(self, record: dict[str, Any]) -> None:
        kind = record.get("k")
        if kind == "ddb":
            for table, changes in record["tables"].items():
                items = self.items.setdefault(table, {})
                for key, item in changes:
                    if item is None:
                        items.pop(key, None)
                    else:
                        items[key] = item
        elif kind == "s3":
            objects = self.objects.setdefault(record["bucket"], {})
            for key, image in record["objects"]:
                if image is None:
                    objects.pop(key, None)
                else:
                    objects[key] = image
        elif kind == "sfn":
            execution = record["execution"]
            if execution.get("gone"):  # its start failed: it never ran
                self.executions.pop(execution["arn"], None)
            else:
                self.executions.setdefault(execution["arn"], {}).update(execution)
        elif kind == "kms":
            self.keys[record["backend"]] = record["keys"]

    def records(self) -> Iterator[dict[str, Any]]:
        """The world as journal records: one per table's items (in pages), object and execution."""
        for table, items in self.items.items():
            page: list[list[Any]] = []
            for key, item in items.items():
                page.append([key, item])
                if len(page) == 500:
                    yield {"k": "ddb", "tables": {table: page}}
                    page = []
            if page:
                yield {"k": "ddb", "tables": {table: page}}
        for bucket, objects in self.objects.items():
            for key, image in objects.items():
                yield {"k": "s3", "bucket": bucket, "objects": [[key, image]]}
        for execution in self.executions.values():
            yield {"k": "sfn", "execution": execution}
        for backend, keys in self.keys.items():
            yield {"k": "kms", "backend": backend, "keys": keys}

    def blobs(self) -> set[str]:
        return {image["body"] for objects in self.objects.values() for image in objects.values()}


def fold(records: Iterable[dict[str, Any]]) -> World:
    world = World()
    for record in records:
        world.apply(record)
    return world


# ------------------------------------------------------------------ the data directory


@dataclass
class DataDir:
    """An open (locked) data directory and the world its journal holds."""

    path: Path
    world: World
    torn_bytes: int = 0  # what the last start found after the last whole record (a write it died in)
    loaded: dict[str, int] = field(default_factory=dict)  # what this start loaded (summary() before the journal opened)
    _lock_fd: int | None = None
    journal: Journal | None = None
    _hooks: list[Callable[[], None]] = field(default_factory=list)

    @property
    def suffix(self) -> str:
        """The physical names' suffix of this stack (its bucket's name): the same at every start."""
        assert self.world.suffix is not None
        return self.world.suffix

    def summary(self) -> dict[str, int]:
        return {
            "items": sum(len(items) for items in self.world.items.values()),
            "objects": sum(len(objects) for objects in self.world.objects.values()),
            "executions": len(self.world.executions),
        }

    def restore(self, region: str, account: str = "123456789012") -> None:
        """Put the world back into moto's backends (the stack's resources exist: create_stack ran)."""
        _restore_items(self.world, region, account)
        _restore_objects(self.world, self.path / OBJECTS, account)
        _restore_executions(self.world, region, account)
        _restore_keys(self.world)

    def start_journal(self) -> None:
        """Compact (the world as a new journal, atomically), drop unreferenced bodies, then record every change."""
        journal_path = self.path / JOURNAL
        self.world.keys = _key_images()  # the KMS keys as they are now: the template's own on a first start
        write_atomically(journal_path, (encode_record(record) for record in self.world.records()))
        referenced = self.world.blobs()
        for body in (self.path / OBJECTS).iterdir():
            if body.name not in referenced:
                with contextlib.suppress(OSError):
                    body.unlink()
        self.loaded = self.summary()
        # moto holds the items, objects and executions now; only the key set is compared with later changes
        self.world = World(keys=self.world.keys, suffix=self.world.suffix)
        self.journal = Journal(journal_path)
        self._hooks = _install_hooks(self.journal, self.path / OBJECTS)

    def close(self) -> None:
        for uninstall in reversed(self._hooks):
            with contextlib.suppress(Exception):
                uninstall()
        self._hooks = []
        if self.journal is not None:
            self.journal.close()
            self.journal = None
        if self._lock_fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._lock_fd)
            self._lock_fd = None


def open_data(path: str | Path) -> DataDir:
    """Lock ``path`` (one stack per data directory; the lock dies with the process) and read its journal."""
    directory = Path(path).resolve()
    (directory / OBJECTS).mkdir(parents=True, exist_ok=True)
    lock_fd = os.open(directory / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(lock_fd)
        raise DataDirInUse(f"{directory} is used by another running local stack") from None
    try:
        stack_file = directory / STACK_FILE
        try:
            stack = json.loads(stack_file.read_text("utf-8"))
        except FileNotFoundError:
            stack = {"format": FORMAT, "suffix": uuid.uuid4().hex[:12]}
            write_atomically(stack_file, [json.dumps(stack, indent=2).encode("utf-8")])
        if stack.get("format") != FORMAT:
            raise ValueError(f"{stack_file}: data format {stack.get('format')!r}, this stack reads {FORMAT}")
        journal_path = directory / JOURNAL
        records, good = read_journal(journal_path)
        size = journal_path.stat().st_size if journal_path.exists() else 0
        world = fold(records)
        world.suffix = str(stack["suffix"])
    except BaseException:
        os.close(lock_fd)
        raise
    return DataDir(path=directory, world=world, torn_bytes=size - good, _lock_fd=lock_fd)


# ------------------------------------------------------------------ restoring into moto


def _restore_items(world: World, region: str, account: str) -> None:
    from moto.dynamodb.models import dynamodb_backends

    backend = dynamodb_backends[account][region]
    for table_name, items in world.items.items():
        if table_name not in backend.tables:
            continue  # a table the template no longer has
        table = backend.get_table(table_name)
        for item in items.values():
            table.put_item(_moto_image(item))


def _restore_objects(world: World, bodies: Path, account: str) -> None:
    from moto.s3.models import s3_backends

    backend = s3_backends[account]["global"]
    for bucket_name, objects in world.objects.items():
        if bucket_name not in backend.buckets:
            continue
        for key_name, image in objects.items():
            value = (bodies / image["body"]).read_bytes()
            key = backend.put_object(bucket_name, key_name, value, disable_notification=True)
            for name, attribute in image["attributes"].items():
                setattr(key, name, attribute)
            key.set_metadata(image["metadata"], replace=True)
            key.last_modified = datetime.datetime.fromisoformat(image["lastModified"])


def _restore_executions(world: World, region: str, account: str) -> None:
    from moto.stepfunctions.parser.api import ExecutionStatus
    from moto.stepfunctions.parser.backend.execution import Execution
    from moto.stepfunctions.parser.models import stepfunctions_parser_backends

    backend = stepfunctions_parser_backends[account][region]
    machines: dict[str, Any] = {machine.arn: machine for machine in backend.state_machines}
    now = datetime.datetime.now(tz=datetime.UTC)
    for record in world.executions.values():
        machine = machines.get(record.get("machine", ""))
        if machine is None:  # a state machine the template no longer has (or a start never recorded)
            continue
        execution = Execution(
            name=record["name"],
            sm_type=machine.sm_type,
            role_arn=machine.roleArn,
            exec_arn=record["arn"],
            account_id=account,
            region_name=region,
            state_machine=machine,
            start_date=datetime.datetime.fromisoformat(record["startDate"]),
            cloud_watch_logging_session=None,
            activity_store={},
            input_data=record["input"],
        )
        if "status" in record:
            execution.exec_status = ExecutionStatus(record["status"])
            execution.stop_date = datetime.datetime.fromisoformat(record["stopDate"])
            execution.output = json.loads(record["output"]) if record.get("output") is not None else None
            execution.error = record.get("error")
            execution.cause = record.get("cause")
        else:  # running when the stack died: it cannot go on, it ended
            execution.exec_status = ExecutionStatus.ABORTED
            execution.stop_date = now
            execution.error = LOST_EXECUTION_ERROR
            execution.cause = LOST_EXECUTION_CAUSE
            record.update(status="ABORTED", stopDate=now.isoformat(), error=execution.error, cause=execution.cause)
        machine.executions.append(execution)  # moto's own list of the machine's executions (any kind)


def _restore_keys(world: World) -> None:
    """The journaled KMS keys replace the ones create_stack just made (the template's key, made anew at each start,
    with its alias): signatures made before the restart verify with the same key id and key after it."""
    from moto.kms.models import kms_backends

    for name, images in world.keys.items():
        account, region = name.split("/", 1)
        backend = kms_backends[account][region]
        backend.keys = {key.id: key for key in (_key_from_image(image, account, region) for image in images)}


def _key_from_image(image: dict[str, Any], account: str, region: str) -> Any:
    import base64

    from cryptography.hazmat.primitives.serialization import load_pem_private_key
    from moto.kms.models import Alias, Key

    alias: Any = Alias
    new_key: Any = Key
    key: Any = new_key(
        image["policy"], image["key_usage"], image["key_spec"], image["description"], account, region,
        multi_region=image["multi_region"], origin=image["origin"],
    )  # fmt: skip
    for name, value in image["attributes"].items():
        setattr(key, name, value)
    key.key_material = base64.b64decode(image["key_material"])
    if image.get("private_key"):
        key.private_key.private_key = load_pem_private_key(image["private_key"].encode("ascii"), password=None)
    key.aliases = {name: alias(account, region, name, key) for name in image["aliases"]}
    return key


_KEY_ATTRIBUTES = ("id", "arn", "creation_date", "key_state", "enabled", "key_rotation_status", "key_manager")


def _key_image(key: Any) -> dict[str, Any]:
    import base64

    from cryptography.hazmat.primitives import serialization

    private = getattr(key.private_key, "private_key", None)
    pem = None
    if private is not None and hasattr(private, "private_bytes"):
        pem = private.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        ).decode("ascii")
    return {
        "policy": key.policy,
        "key_usage": key.key_usage,
        "key_spec": key.key_spec,
        "description": key.description,
        "multi_region": key.multi_region,
        "origin": key.origin,
        "attributes": {name: getattr(key, name) for name in _KEY_ATTRIBUTES},
        "key_material": base64.b64encode(key.key_material).decode("ascii"),
        "private_key": pem,
        "aliases": sorted(key.aliases),
    }


def _key_images() -> dict[str, list[dict[str, Any]]]:
    """Every KMS key moto holds, per "account/region" (a few keys: the whole set is recorded at each change)."""
    from moto.kms.models import kms_backends

    images: dict[str, list[dict[str, Any]]] = {}
    for account, regions in list(kms_backends.items()):
        for region, backend in list(regions.items()):
            if backend.keys:
                images[f"{account}/{region}"] = [_key_image(key) for key in list(backend.keys.values())]
    return images


# KMS calls that change keys or aliases (Sign, GetPublicKey, Describe*, List* … change nothing)
_KEY_CHANGES = ("Create", "Update", "Delete", "Put", "Schedule", "Cancel", "Enable", "Disable", "Tag", "Untag",
                "Import", "Rotate", "Replicate")  # fmt: skip


def record_keys(journal: Journal, world: World) -> None:
    sequence = 0
    with _objects_lock:
        images = _key_images()
        for backend, keys in images.items():
            if world.keys.get(backend) != keys:
                world.keys[backend] = keys
                sequence = journal.append({"k": "kms", "backend": backend, "keys": keys})
    _awaits(sequence)


# ------------------------------------------------------------------ recording changes


_writes = threading.RLock()  # a DynamoDB write and its record, as one step (reentrant: a transaction's items)
_objects_lock = threading.Lock()  # an S3 image read and its record, as one step
_local = threading.local()


def _item_key(table: Any, attributes: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    names = [table.hash_key_attr] + ([table.range_key_attr] if table.range_key_attr else [])
    key = {name: attributes[name] for name in names}
    return json.dumps(key, sort_keys=True, separators=(",", ":")), key


def _awaits(sequence: int) -> None:
    """This request's answer waits until record ``sequence`` is durable: :func:`journaled_app` waits at the
    request's end, outside every lock moto or devstack holds while it writes (moto_fixes holds DynamoDB's lock
    through a whole TransactWriteItems; a sync waited for in there would serialise every DynamoDB call behind it)."""
    if sequence > getattr(_local, "sequence", 0):
        _local.sequence = sequence


def _touched_items() -> dict[tuple[str, str], dict[str, Any]]:
    touched: dict[tuple[str, str], dict[str, Any]] | None = getattr(_local, "items", None)
    if touched is None:
        touched = _local.items = {}
    return touched


def _item_images(backend: Any, touched: dict[tuple[str, str], dict[str, Any]]) -> dict[str, list[list[Any]]]:
    from moto.dynamodb.models.dynamo_type import DynamoType

    tables: dict[str, list[list[Any]]] = {}
    for (table_name, key_json), key in touched.items():
        table = backend.get_table(table_name)
        hash_value = DynamoType(key[table.hash_key_attr])
        range_value = DynamoType(key[table.range_key_attr]) if table.range_key_attr else None
        item = table.get_item(hash_value, range_value)
        tables.setdefault(table_name, []).append(
            [key_json, _json_image(item.to_json()["Attributes"]) if item else None]
        )
    return tables


def _json_image(attributes: dict[str, Any]) -> dict[str, Any]:
    """An item's image as JSON can hold it: binary values (``B``, ``BS``, at any depth: moto's ``Item.to_json``
    hands them over as bytes) in base64, as DynamoDB's own JSON carries them."""
    return {name: _binary_value(value, _to_base64) for name, value in attributes.items()}


def _moto_image(attributes: dict[str, Any]) -> dict[str, Any]:
    """The inverse of :func:`_json_image`: binary values back to bytes, as moto holds a written one."""
    return {name: _binary_value(value, _from_base64) for name, value in attributes.items()}


def _binary_value(value: dict[str, Any], convert: Callable[[Any], Any]) -> dict[str, Any]:
    ((kind, inner),) = value.items()
    if kind == "B":
        return {"B": convert(inner)}
    if kind == "BS":
        return {"BS": [convert(member) for member in inner]}
    if kind == "M":
        return {"M": {name: _binary_value(member, convert) for name, member in inner.items()}}
    if kind == "L":
        return {"L": [_binary_value(member, convert) for member in inner]}
    return value


def _to_base64(value: Any) -> Any:
    return base64.b64encode(value).decode("ascii") if isinstance(value, bytes | bytearray) else value


def _from_base64(value: Any) -> Any:
    return base64.b64decode(value) if isinstance(value, str) else value


def item_written(
    backend: Any, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> tuple[str, str, dict[str, Any]] | None:
    """The table, key (as JSON) and key attributes of the item a DynamoDBBackend put_item/update_item/delete_item call
    names (moto's own argument names and order; a transaction makes these calls for each of its items), or None for
    a call that names none (no such table, a key attribute missing: moto refuses it with its own error)."""
    try:
        table_name = kwargs["table_name"] if "table_name" in kwargs else args[0]
        argument = "item_attrs" if name == "put_item" else "key"
        attributes = kwargs[argument] if argument in kwargs else args[1]
        key_json, key = _item_key(backend.get_table(table_name), attributes)
    except Exception:
        return None
    return table_name, key_json, key


def _touch_item(
    backend: Any, name: str, args: tuple[Any, ...], kwargs: dict[str, Any], touched: dict[tuple[str, str], Any]
) -> None:
    """Note the item a put_item/update_item/delete_item call names."""
    written = item_written(backend, name, args, kwargs)
    if written is not None:
        table_name, key_json, key = written
        touched[(table_name, key_json)] = key


def _journaled_write(journal: Journal, name: str, original: Callable[..., Any]) -> Callable[..., Any]:
    """``original`` (a DynamoDBBackend write) that records the images of the items it touched once it succeeded; a
    write inside another one (a transaction's Put) adds its item to the outer one's record."""

    @functools.wraps(original)
    def write(self: Any, *args: Any, **kwargs: Any) -> Any:
        result, sequence = _write_and_record(self, args, kwargs)
        _awaits(sequence)
        return result

    def _write_and_record(self: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, int]:
        sequence = 0
        with _writes:
            depth = getattr(_local, "depth", 0)
            touched = _touched_items()
            if depth == 0:
                touched.clear()
            if name != "transact_write_items":
                _touch_item(self, name, args, kwargs, touched)
            _local.depth = depth + 1
            try:
                result = original(self, *args, **kwargs)
            except BaseException:
                if depth == 0:
                    touched.clear()
                raise
            finally:
                _local.depth = depth
            if depth == 0 and touched:
                sequence = journal.append({"k": "ddb", "tables": _item_images(self, touched)})
                touched.clear()
            return result, sequence

    return write


def _touch_object(original: Callable[..., Any]) -> Callable[..., Any]:
    """``original`` (an S3Backend write) that marks the object it names; the request's end records its image."""

    @functools.wraps(original)
    def write(self: Any, bucket_name: str, key_name: str, *args: Any, **kwargs: Any) -> Any:
        result = original(self, bucket_name, key_name, *args, **kwargs)
        touched: set[tuple[str, str]] | None = getattr(_local, "objects", None)
        if touched is None:
            touched = _local.objects = set()
        touched.add((bucket_name, key_name))
        return result

    return write


_SIMPLE = (str, int, float, bool, type(None))
_KEY_SKIPPED = {"name", "bucket_name", "account_id", "region_name", "partition", "last_modified", "_metadata",
                "_max_buffer_size", "disposed", "value", "_version_id", "_is_versioned"}  # fmt: skip


def _object_image(key: Any, bodies: Path) -> dict[str, Any]:
    value: bytes = key.value
    body = hashlib.sha256(value).hexdigest()
    path = bodies / body
    if not path.exists():
        write_atomically(path, [value])
    attributes = {
        name: attribute
        for name, attribute in vars(key).items()
        if name not in _KEY_SKIPPED and isinstance(attribute, _SIMPLE)
    }
    return {
        "body": body,
        "size": len(value),
        "attributes": attributes,
        "metadata": dict(key.metadata),
        "lastModified": key.last_modified.isoformat(),
    }


def record_objects(journal: Journal, bodies: Path) -> None:
    """Record the images of the objects this thread's request wrote or deleted (called at the request's end)."""
    touched: set[tuple[str, str]] | None = getattr(_local, "objects", None)
    if not touched:
        return
    from moto.s3.models import s3_backends

    pending, _local.objects = touched, set()
    sequence = 0
    with _objects_lock:
        for account in list(s3_backends.keys()):
            backend = s3_backends[account]["global"]
            by_bucket: dict[str, list[list[Any]]] = {}
            for bucket_name, key_name in sorted(pending):
                bucket = backend.buckets.get(bucket_name)
                if bucket is None:
                    continue
                key = bucket.keys.get(key_name)
                image = _object_image(key, bodies) if key is not None and hasattr(key, "value") else None
                by_bucket.setdefault(bucket_name, []).append([key_name, image])
            for bucket_name, objects in by_bucket.items():
                sequence = journal.append({"k": "s3", "bucket": bucket_name, "objects": objects})
    _awaits(sequence)


def journaled_app(app: Callable[..., Any], data: DataDir) -> Callable[..., Any]:
    """moto's WSGI app, recording at the end of each request the S3 objects it wrote (once the journal is open)."""

    def application(environ: dict[str, Any], start_response: Callable[..., Any]) -> Any:
        # a request may run inside another on the same thread (an in-process Lambda invoked through the app calls S3
        # through it too): each records its own objects, and the outer one's are kept for its own end
        outer: set[tuple[str, str]] | None = getattr(_local, "objects", None)
        outer_sequence: int = getattr(_local, "sequence", 0)
        _local.objects, _local.sequence = set(), 0
        target = str(environ.get("HTTP_X_AMZ_TARGET", ""))
        try:
            return app(environ, start_response)
        finally:
            journal = data.journal
            if journal is not None:
                record_objects(journal, data.path / OBJECTS)
                if target.startswith("TrentService.") and target.partition(".")[2].startswith(_KEY_CHANGES):
                    record_keys(journal, data.world)
                journal.wait_durable(_local.sequence)  # what this request changed is on disk before its answer
            _local.objects = outer if outer is not None else set()
            _local.sequence = outer_sequence

    return application


def _execution_started(journal: Journal, original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def start(self: Any) -> Any:
        # recorded before it runs, so its settle record (from the execution's own thread) always follows it
        started = {
            "arn": self.exec_arn,
            "machine": self.state_machine.arn,
            "name": self.name,
            "input": self.execution_input,
            "startDate": self.start_date.isoformat(),
        }
        _awaits(journal.append({"k": "sfn", "execution": started}))
        try:
            return original(self)
        except BaseException:
            _awaits(journal.append({"k": "sfn", "execution": {"arn": self.exec_arn, "gone": True}}))
            raise

    return start


def _execution_settled(journal: Journal, original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def terminated(self: Any) -> Any:
        result = original(self)
        execution = self.execution
        output = execution.output
        sequence = journal.append(
            {
                "k": "sfn",
                "execution": {
                    "arn": execution.exec_arn,
                    "status": execution.exec_status.value,
                    "stopDate": (execution.stop_date or datetime.datetime.now(tz=datetime.UTC)).isoformat(),
                    "output": None if output is None else json.dumps(output, separators=(",", ":")),
                    "error": execution.error,
                    "cause": execution.cause,
                },
            }
        )
        journal.wait_durable(sequence)
        return result

    return terminated


def _no_history_without_worker(original: Callable[..., Any]) -> Callable[..., Any]:
    """An execution restored from the journal has no interpreter: its history is empty (not kept)."""

    @functools.wraps(original)
    def to_history_output(self: Any) -> Any:
        if self.exec_worker is None:
            return {"events": []}
        return original(self)

    return to_history_output


def _patch(owner: type, name: str, wrap: Callable[[Callable[..., Any]], Callable[..., Any]]) -> Callable[[], None]:
    original = owner.__dict__[name]
    setattr(owner, name, wrap(original))
    return lambda: setattr(owner, name, original)


def _install_hooks(journal: Journal, bodies: Path) -> list[Callable[[], None]]:
    from moto.dynamodb.models import DynamoDBBackend
    from moto.s3.models import S3Backend
    from moto.stepfunctions.parser.backend.execution import BaseExecutionWorkerCommunication, Execution

    undo = [
        _patch(DynamoDBBackend, name, functools.partial(_journaled_write, journal, name))
        for name in ("put_item", "update_item", "delete_item", "transact_write_items")
    ]
    undo += [_patch(S3Backend, name, _touch_object) for name in ("put_object", "delete_object")]
    undo.append(_patch(Execution, "start", functools.partial(_execution_started, journal)))
    undo.append(_patch(BaseExecutionWorkerCommunication, "terminated", functools.partial(_execution_settled, journal)))
    undo.append(_patch(Execution, "to_history_output", _no_history_without_worker))
    return undo


# ------------------------------------------------------------------ the fault hook of the restart tests


def install_exit_point(spec: str | None = None, die: Callable[[], None] | None = None) -> Callable[[], None] | None:
    """Die (``os._exit(137)``, what SIGKILL leaves; or ``die()``) at the step ``spec`` (default:
    ``$PACKYARD_LOCAL_EXIT_AT``) names:

    * ``invoke:NAME``: as Step Functions invokes the Lambda function whose name or ARN contains NAME (before it runs);
    * ``after:OPERATION@SITE``: right after AWS answered ``OPERATION`` (e.g. ``TransactWriteItems``) called by the data
      access layer's function ``SITE`` (``module.function``, e.g. ``workspace.commit``), so its change is stored.

    Returns the uninstaller, or None when no step is named."""
    spec = spec if spec is not None else os.environ.get(EXIT_AT)
    if not spec:
        return None
    exit_now = die or functools.partial(os._exit, EXIT_CODE)
    from botocore.handlers import BUILTIN_HANDLERS

    from devstack.faults import calling_site

    when, _, what = spec.partition(":")
    if when == "invoke":

        def on_invoke(params: Any = None, **_: Any) -> None:
            if isinstance(params, dict) and what in str(params.get("FunctionName", "")):
                exit_now()

        handler: tuple[str, Callable[..., None]] = ("before-parameter-build.lambda.Invoke", on_invoke)
    elif when == "after":
        operation, _, site = what.partition("@")

        def on_answer(model: Any = None, **_: Any) -> None:
            if model is not None and model.name == operation and (not site or calling_site() == site):
                exit_now()

        handler = ("after-call", on_answer)
    else:
        raise ValueError(f"{EXIT_AT}={spec!r}: expected invoke:NAME or after:OPERATION@SITE")
    BUILTIN_HANDLERS.append(handler)
    return lambda: BUILTIN_HANDLERS.remove(handler)
