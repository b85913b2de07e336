"""DynamoDB's 400 KB item limit, counted as DynamoDB counts it, in every write path of the local runtime.

moto checks item size loosely: only the top-level attributes as they are set, at 405,000 bytes, without the
3 bytes of every List or Map and the 1 byte of each of their elements, and numbers by their decimal length. An item
of many small nested values (grants, permissions: lists of maps) can pass moto and be refused by DynamoDB. Here
every write is measured by the rules of the DynamoDB Developer Guide ("DynamoDB item sizes and formats"): names and
strings by their UTF-8 bytes, binary by its raw bytes, a number by 1 byte per two significant digits plus 1, a
Boolean or null 1 byte, a List or Map 3 bytes plus 1 byte per element plus its elements (a Map's keys too), sets by
their members, against the 400 KB (409,600 bytes) maximum item size of the DynamoDB quotas page, with DynamoDB's
own errors:

- ``PutItem``, a ``BatchWriteItem`` put: ``ValidationException`` "Item size has exceeded the maximum allowed size";
- ``UpdateItem``: ``ValidationException`` "Item size to update has exceeded the maximum allowed size" (the item
  is left as it was);
- ``TransactWriteItems``: the transaction is cancelled, ``TransactionCanceledException`` with the reason
  ``ValidationError`` at the item that grew too large and ``None`` at the others (API reference,
  TransactWriteItems: "An item size becomes too large (bigger than 400 KB) ... because of changes made by the
  transaction"); nothing is written.

Installed by :func:`devstack.moto_fixes.install` (so by every local runtime); :func:`relaxed` switches it off in a
block, for a test that needs moto's own behaviour.
"""

from __future__ import annotations

import base64
import copy
import json
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from moto.dynamodb.exceptions import ItemSizeTooLarge, ItemSizeToUpdateTooLarge, TransactionCanceledException
from moto.dynamodb.models import DynamoDBBackend
from moto.dynamodb.models.dynamo_type import DynamoType, LimitedSizeDict
from moto.dynamodb.models.table import Table

from packyard.store.pages import number_bytes

MAX_ITEM_BYTES = 400 * 1024  # 409,600: "Maximum item size in DynamoDB: 400 KB" (DynamoDB quotas)
_CONTAINER_BYTES = 3  # "An attribute of type List or Map requires 3 bytes of overhead, regardless of its contents"
_ELEMENT_BYTES = 1  # "Each List or Map element also requires 1 byte of overhead"

_installed: dict[str, Any] = {}
_state = threading.local()
_switch = {"enforced": True}


number_size = number_bytes  # 1 byte per two significant digits, plus 1: the store's page budget counts the same


def _binary_size(value: Any) -> int:
    if isinstance(value, bytes | bytearray):
        return len(value)
    return len(base64.b64decode(value))


def value_size(value: DynamoType | dict[str, Any]) -> int:
    """The size of one attribute value (without its name), by DynamoDB's rules."""
    typed = value if isinstance(value, DynamoType) else DynamoType(value)
    kind, inner = typed.type, typed.value
    if kind == "S":
        return len(inner.encode("utf-8"))
    if kind == "N":
        return number_size(inner)
    if kind == "B":
        return _binary_size(inner)
    if kind in ("BOOL", "NULL"):
        return 1
    if kind == "SS":
        return sum(len(member.encode("utf-8")) for member in inner)
    if kind == "NS":
        return sum(number_size(member) for member in inner)
    if kind == "BS":
        return sum(_binary_size(member) for member in inner)
    if kind == "L":
        return _CONTAINER_BYTES + sum(_ELEMENT_BYTES + value_size(element) for element in inner)
    if kind == "M":
        return _CONTAINER_BYTES + sum(
            _ELEMENT_BYTES + len(name.encode("utf-8")) + value_size(element) for name, element in inner.items()
        )
    raise ValueError(f"unknown DynamoDB type {kind!r}")


def item_size(attributes: dict[str, Any]) -> int:
    """The size of an item: each attribute's name in UTF-8 bytes plus its value's size."""
    return sum(len(name.encode("utf-8")) + value_size(value) for name, value in attributes.items())


@contextmanager
def relaxed() -> Iterator[None]:
    """Inside the block the local runtime does not measure items (moto's own, looser check remains)."""
    previous = _switch["enforced"]
    _switch["enforced"] = False
    try:
        yield
    finally:
        _switch["enforced"] = previous


def _refuse(table: Table, attributes: dict[str, Any], error: type[Exception]) -> None:
    _state.refused = (table.name, _key_of(table, attributes))
    raise error()


def _key_of(table: Table, attributes: dict[str, Any]) -> str:
    names = [table.hash_key_attr, *([table.range_key_attr] if table.range_key_attr else [])]
    return json.dumps({name: _plain(attributes.get(name)) for name in names}, sort_keys=True, default=str)


def _plain(value: Any) -> Any:
    return value.to_json() if isinstance(value, DynamoType) else value


def _measured_put(inner: Callable[..., Any]) -> Callable[..., Any]:
    def put_item(self: Table, item_attrs: dict[str, Any], *args: Any, **kwargs: Any) -> Any:
        if _switch["enforced"] and item_size(item_attrs) > MAX_ITEM_BYTES:
            _refuse(self, item_attrs, ItemSizeTooLarge)
        return inner(self, item_attrs, *args, **kwargs)

    put_item.__doc__ = "moto's Table.put_item, refusing an item over 400 KB as DynamoDB counts it (devstack)"
    return put_item


def _measured_update(inner: Callable[..., Any]) -> Callable[..., Any]:
    def update_item(self: Any, table_name: str, key: dict[str, Any], *args: Any, **kwargs: Any) -> Any:
        if not _switch["enforced"]:
            return inner(self, table_name, key, *args, **kwargs)
        table = self.get_table(table_name)
        before = self.get_item(table_name, key)
        saved = copy.deepcopy(before)
        item = inner(self, table_name, key, *args, **kwargs)
        if item is not None and item_size(item.attrs) > MAX_ITEM_BYTES:
            _put_back(table, key, saved)
            _refuse(table, key, ItemSizeToUpdateTooLarge)
        return item

    update_item.__doc__ = "moto's update_item, refusing a result over 400 KB as DynamoDB counts it (devstack)"
    return update_item


def _put_back(table: Table, key: dict[str, Any], saved: Any) -> None:
    hash_value = DynamoType(key[table.hash_key_attr])
    range_value = DynamoType(key[table.range_key_attr]) if table.range_key_attr else None
    put_back_at(table, hash_value, range_value, saved)


def put_back_at(table: Table, hash_value: DynamoType, range_value: DynamoType | None, saved: Any) -> None:
    """Put an item's saved copy back in moto's table (or remove the item when there was none)."""
    if range_value is None:
        if saved is None:
            table.items.pop(hash_value, None)
        else:
            table.items[hash_value] = saved
    elif saved is None:
        table.items[hash_value].pop(range_value, None)
    else:
        table.items[hash_value][range_value] = saved


def _cancelling(inner: Callable[..., Any]) -> Callable[..., Any]:
    def transact_write_items(self: Any, transact_items: list[dict[str, Any]], *args: Any, **kwargs: Any) -> Any:
        _state.refused = None
        try:
            return inner(self, transact_items, *args, **kwargs)
        except (ItemSizeTooLarge, ItemSizeToUpdateTooLarge) as exc:
            refused = getattr(_state, "refused", None)
            reasons: list[Any] = []
            for entry in transact_items:
                (op_type, op), *_ = entry.items()
                table = self.get_table(op["TableName"])
                key = _key_of(table, op["Item"] if op_type == "Put" else op["Key"])
                if refused == (table.name, key):
                    reasons.append(("ValidationError", exc.message, None))
                    refused = None  # one item per transaction is named
                else:
                    reasons.append((None, None, None))
            if reasons and all(code is None for code, _, _ in reasons):
                reasons[0] = ("ValidationError", exc.message, None)  # moto's own check refused it first: name one
            raise TransactionCanceledException(reasons) from exc
        finally:
            _state.refused = None

    transact_write_items.__doc__ = f"{inner.__doc__}, cancelled with ValidationError on an item over 400 KB (devstack)"
    return transact_write_items


def _set_attribute(inner: Callable[..., Any]) -> Callable[..., Any]:
    def __setitem__(self: LimitedSizeDict, key: str, value: Any) -> None:
        if _switch["enforced"]:  # measured whole, by the rules above, once the write is known
            dict.__setitem__(self, key, value)
        else:
            inner(self, key, value)

    __setitem__.__doc__ = "moto's per-attribute size check, left to devstack.item_size while it is enforced"
    return __setitem__


def install() -> None:
    """Measure every write (idempotent). Wraps whatever ``transact_write_items`` is installed at the time. moto's
    own check (405,000 bytes of top-level attributes, as each is set) stands aside while this one is enforced."""
    if _installed:
        return
    _installed["LimitedSizeDict.__setitem__"] = LimitedSizeDict.__dict__["__setitem__"]
    setattr(LimitedSizeDict, "__setitem__", _set_attribute(_installed["LimitedSizeDict.__setitem__"]))  # noqa: B010
    _installed["Table.put_item"] = Table.__dict__["put_item"]
    setattr(Table, "put_item", _measured_put(_installed["Table.put_item"]))  # noqa: B010
    _installed["update_item"] = DynamoDBBackend.__dict__["update_item"]
    setattr(DynamoDBBackend, "update_item", _measured_update(_installed["update_item"]))  # noqa: B010
    _installed["transact_write_items"] = DynamoDBBackend.__dict__["transact_write_items"]
    setattr(DynamoDBBackend, "transact_write_items", _cancelling(_installed["transact_write_items"]))  # noqa: B010


def uninstall() -> None:
    if not _installed:
        return
    setattr(LimitedSizeDict, "__setitem__", _installed.pop("LimitedSizeDict.__setitem__"))  # noqa: B010
    setattr(Table, "put_item", _installed.pop("Table.put_item"))  # noqa: B010
    setattr(DynamoDBBackend, "update_item", _installed.pop("update_item"))  # noqa: B010
    setattr(DynamoDBBackend, "transact_write_items", _installed.pop("transact_write_items"))  # noqa: B010
    _switch["enforced"] = True
