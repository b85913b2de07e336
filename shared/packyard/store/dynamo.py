"""DynamoDB plumbing shared by the table modules: (de)serialisation, keys, stored-item validation, transactions.

Stored items carry ``schemaVersion``; an item that fails validation on read is refused (StoredItemInvalid),
never guessed at.
"""

from __future__ import annotations

import hashlib
import json
import random
import time
from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Clamped, Context, Decimal, Inexact, Overflow, Rounded, Underflow
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from packyard.config import required
from packyard.errors import StoredItemInvalid, StoreFailure, TransientStoreError
from packyard.store import cursors, pages
from packyard.store.aws import client, error_code, translate

SCHEMA_VERSION = 1
# the table's TimeToLive attribute (epoch seconds): DynamoDB deletes the item some time after it passes
TTL_ATTRIBUTE = "expiresAt"
M = TypeVar("M", bound=BaseModel)
# attributes of the storage, not of the domain model: keys, the TTL and the due index (with a failed sweep action's
# attempts, last error and park: store/due.py)
STORAGE_ATTRIBUTES = ("pk", "sk", TTL_ATTRIBUTE, "dueShard", "dueAt", "dueAttempts", "dueError", "parkedAt")

# DynamoDB numbers: at most 38 significant digits, exponents -130..125; a number outside is refused, never rounded
# (the context boto3's serializer uses)
# BatchGetItem: attempts at the keys DynamoDB left unprocessed, and the backoff between them (0.05, 0.1, … 1 s)
BATCH_GET_ATTEMPTS = 8
BACKOFF_BASE_SECONDS = 0.05
BACKOFF_CAP_SECONDS = 1.0
# TransactWriteItems' ClientRequestToken: 1 to 36 characters
REQUEST_TOKEN_LENGTH = 36

NUMBER_CONTEXT = Context(Emin=-128, Emax=126, prec=38, traps=[Clamped, Overflow, Inexact, Rounded, Underflow])


def table_name() -> str:
    return required("table_name").table_name


def dynamodb() -> Any:
    return client("dynamodb")


def marshal(values: Mapping[str, Any]) -> dict[str, Any]:
    """Attribute values of a JSON-like mapping (None values are left out), as boto3's TypeSerializer writes them."""
    return {key: attribute_value(value) for key, value in values.items() if value is not None}


def attribute_value(value: Any) -> dict[str, Any]:
    """One DynamoDB attribute value: str S, bool BOOL, int/float/Decimal N (a float through its repr), bytes B,
    None NULL, list L, mapping M, and a non-empty set of strings SS or of numbers NS. The data access layer writes
    JSON-like values only (models are dumped in JSON mode); anything else is a bug, refused with TypeError."""
    if isinstance(value, str):
        return {"S": value}
    if isinstance(value, bool):
        return {"BOOL": value}
    if isinstance(value, int | float | Decimal):
        return {"N": _number(value)}
    if value is None:
        return {"NULL": True}
    if isinstance(value, Mapping):
        return {"M": {str(k): attribute_value(v) for k, v in value.items()}}
    if isinstance(value, list | tuple):
        return {"L": [attribute_value(v) for v in value]}
    if isinstance(value, set | frozenset) and value:
        if all(isinstance(v, str) for v in value):
            return {"SS": sorted(value)}  # sorted: the same set is the same request (and request token)
        if all(isinstance(v, int | float | Decimal) and not isinstance(v, bool) for v in value):
            return {"NS": sorted(_number(v) for v in value)}
    if isinstance(value, bytes | bytearray):
        return {"B": bytes(value)}
    raise TypeError(f"no DynamoDB attribute value for {type(value).__name__} {value!r:.80}")


def _number(value: int | float | Decimal) -> str:
    """A float goes through its repr, as JSON writes it; a number DynamoDB cannot hold exactly raises decimal's
    Inexact/Rounded/Overflow, as boto3's serializer does."""
    number = Decimal(repr(value)) if isinstance(value, float) else value
    if isinstance(number, Decimal) and not number.is_finite():
        raise TypeError(f"DynamoDB stores finite numbers only, not {value!r}")
    return str(NUMBER_CONTEXT.create_decimal(number))


def unmarshal(item: Mapping[str, Any]) -> dict[str, Any]:
    """The values of an item, as :func:`marshal` was given them: numbers as int (integral) or float."""
    return {key: plain_value(value) for key, value in item.items()}


def plain_value(attribute: Mapping[str, Any]) -> Any:
    """One attribute value read back: the inverse of :func:`attribute_value`."""
    ((kind, value),) = attribute.items()
    if kind in ("S", "BOOL", "B"):
        return value
    if kind == "N":
        return _read_number(value)
    if kind == "M":
        return {k: plain_value(v) for k, v in value.items()}
    if kind == "L":
        return [plain_value(v) for v in value]
    if kind == "SS":
        return set(value)
    if kind == "NS":
        return {_read_number(v) for v in value}
    if kind == "NULL":
        return None
    raise TypeError(f"unknown DynamoDB attribute type {kind}")


def _read_number(text: str) -> int | float:
    number = Decimal(text)
    return int(number) if number == number.to_integral_value() else float(number)


def key(pk: str, sk: str) -> dict[str, Any]:
    return {"pk": {"S": pk}, "sk": {"S": sk}}


def to_item(pk: str, sk: str, model: BaseModel, **extra: Any) -> dict[str, Any]:
    values = model.model_dump(by_alias=True, mode="json", exclude_none=True)
    values.update(pk=pk, sk=sk, schemaVersion=SCHEMA_VERSION, **extra)
    return marshal(values)


def from_item(model: type[M], item: Mapping[str, Any]) -> M:
    return from_values(model, unmarshal(item))


def from_values(model: type[M], values: dict[str, Any]) -> M:
    """The model a stored item's values (:func:`unmarshal`) hold, validated (``values`` is consumed)."""
    version = values.pop("schemaVersion", None)
    if version != SCHEMA_VERSION:
        raise StoredItemInvalid(f"{model.__name__} item has schemaVersion {version!r}, expected {SCHEMA_VERSION}")
    for attr in STORAGE_ATTRIBUTES:
        values.pop(attr, None)
    try:
        return model.model_validate(values)
    except ValidationError as exc:
        fields = ", ".join(".".join(str(p) for p in e["loc"]) for e in exc.errors()[:5])
        raise StoredItemInvalid(f"stored {model.__name__} failed validation at: {fields}") from exc


def batch_get(keys: list[tuple[str, str]]) -> dict[tuple[str, str], dict[str, Any]]:
    """Strongly consistent BatchGetItem of up to 100 keys of our table, in as few requests as DynamoDB allows."""
    wanted = list(dict.fromkeys(keys))
    found: dict[tuple[str, str], dict[str, Any]] = {}
    request: dict[str, Any] = {table_name(): {"Keys": [key(pk, sk) for pk, sk in wanted], "ConsistentRead": True}}
    for attempt in range(BATCH_GET_ATTEMPTS):
        if attempt:
            # DynamoDB's advice for unprocessed keys: retry them with exponential backoff (an immediate retry meets
            # the same throttle); full jitter spreads the retries of concurrent callers apart
            time.sleep(backoff_delay(attempt, random.random()))
        try:
            response = dynamodb().batch_get_item(RequestItems=request)
        except Exception as exc:
            raise translate_error(exc) from exc
        for item in response.get("Responses", {}).get(table_name(), []):
            found[(item["pk"]["S"], item["sk"]["S"])] = item
        request = response.get("UnprocessedKeys") or {}
        if not request:
            return found
    raise TransientStoreError("BatchGetItem kept returning unprocessed keys")


def backoff_delay(attempt: int, fraction: float) -> float:
    """Seconds to wait before retry ``attempt`` (1, 2, …) of unprocessed keys: "full jitter", a ``fraction`` (0..1)
    of an exponentially growing ceiling, ``BACKOFF_BASE_SECONDS * 2**(attempt - 1)`` capped at
    ``BACKOFF_CAP_SECONDS``."""
    ceiling: float = min(BACKOFF_CAP_SECONDS, BACKOFF_BASE_SECONDS * 2.0 ** (attempt - 1))
    return ceiling * min(max(fraction, 0.0), 1.0)


def get(pk: str, sk: str, *, consistent: bool = True) -> dict[str, Any] | None:
    try:
        response = dynamodb().get_item(TableName=table_name(), Key=key(pk, sk), ConsistentRead=consistent)
    except Exception as exc:
        raise translate_error(exc) from exc
    item: dict[str, Any] | None = response.get("Item")
    return item


def query(
    pk: str,
    *,
    prefix: str | None = None,
    limit: int = 100,
    cursor: str | None = None,
    forward: bool = True,
    consistent: bool = False,
    answered: bool = False,
) -> tuple[list[dict[str, Any]], str | None]:
    """One page of a partition (optionally of sort keys starting with ``prefix``) and the opaque cursor of the next
    page (None at the end). A cursor minted for another partition is refused. ``answered``: the page is rendered into
    an API answer, so it also stops before its items pass ``pages.PAGE_BYTES`` (then the cursor resumes after the
    last item kept)."""
    params: dict[str, Any] = {
        "TableName": table_name(),
        "KeyConditionExpression": "pk = :pk" + (" AND begins_with(sk, :prefix)" if prefix else ""),
        "ExpressionAttributeValues": {":pk": {"S": pk}, **({":prefix": {"S": prefix}} if prefix else {})},
        "Limit": limit,
        "ScanIndexForward": forward,
    }
    if consistent:
        params["ConsistentRead"] = True
    start = cursors.decode(cursor, pk)
    if start:
        params["ExclusiveStartKey"] = start
    try:
        response = dynamodb().query(**params)
    except Exception as exc:
        raise translate_error(exc) from exc
    items = response.get("Items", [])
    if answered:
        kept = pages.within_budget(items)
        if kept < len(items):
            last = items[kept - 1]
            return items[:kept], cursors.encode({name: last[name] for name in cursors.TABLE_KEY})
    return items, cursors.encode(response.get("LastEvaluatedKey"))


@dataclass
class TransactionCancelled(Exception):
    """A transaction was cancelled; ``reasons[i]`` is the cancellation reason of item i (Code, Item)."""

    reasons: list[dict[str, Any]]

    def failed(self, index: int) -> bool:
        return index < len(self.reasons) and self.reasons[index].get("Code") == "ConditionalCheckFailed"

    def old_item(self, index: int) -> dict[str, Any] | None:
        return self.reasons[index].get("Item") if index < len(self.reasons) else None


# cancellation reasons a retry cannot fix (TransactWriteItems API reference, CancellationReason): an item over 400 KB
# or another validation error, an item collection over 10 GB
REFUSED_REASONS = frozenset({"ValidationError", "ItemCollectionSizeLimitExceeded"})


def transact(items: list[dict[str, Any]], *, step: str, attempt: str | None = None) -> None:
    """TransactWriteItems; condition failures surface as TransactionCancelled with per-item reasons.

    Every transaction carries a ``ClientRequestToken`` derived from ``step`` (what the write is, e.g.
    ``upload.create``), ``attempt`` (only where the same step may legitimately write the same items twice within
    DynamoDB's 10-minute idempotency window) and the items themselves (whose keys name the upload, operation or
    blob, and whose conditions name the fence). A retry of a transaction that committed but whose answer was lost
    (botocore's own retry, or a re-run that builds the same items) is then answered as the success it was, instead
    of being cancelled by its own condition. Other parameters under the same token are refused by DynamoDB
    (IdempotentParameterMismatch); the items are part of the token, so that cannot happen here."""
    try:
        dynamodb().transact_write_items(TransactItems=items, ClientRequestToken=request_token(step, items, attempt))
    except Exception as exc:
        if error_code(exc) == "TransactionCanceledException":
            reasons = getattr(exc, "response", {}).get("CancellationReasons", [])
            if any(r.get("Code") == "ConditionalCheckFailed" for r in reasons):
                raise TransactionCancelled(reasons) from exc
            refused = next((r["Code"] for r in reasons if r.get("Code") in REFUSED_REASONS), None)
            if refused is not None:  # an item grew past 400 KB (or the like): a retry meets the same refusal
                raise StoreFailure(f"DynamoDB refused the transaction ({refused})") from exc
            raise TransientStoreError("transaction conflict, retry") from exc
        raise translate_error(exc) from exc


def request_token(step: str, items: list[dict[str, Any]], attempt: str | None = None) -> str:
    """The ``ClientRequestToken`` of a transaction (see :func:`transact`): 36 hex digits (DynamoDB's maximum length)
    of a sha256 over the step, the attempt and the items (sets are written sorted; bytes count as hex)."""
    canonical = json.dumps(
        {"step": step, "attempt": attempt, "items": items}, sort_keys=True, separators=(",", ":"), default=_canonical
    )
    return hashlib.sha256(canonical.encode()).hexdigest()[:REQUEST_TOKEN_LENGTH]


def _canonical(value: Any) -> Any:
    if isinstance(value, bytes | bytearray):
        return bytes(value).hex()
    raise TypeError(f"no canonical form for {type(value).__name__}")


def put_if(params: dict[str, Any]) -> dict[str, Any] | None:
    """A conditional PutItem (``params``: Item, ConditionExpression, ...); None when written, else the item as it
    was when the condition failed (empty when there was none)."""
    try:
        dynamodb().put_item(TableName=table_name(), ReturnValuesOnConditionCheckFailure="ALL_OLD", **params)
    except Exception as exc:
        if error_code(exc) == "ConditionalCheckFailedException":
            return dict(getattr(exc, "response", {}).get("Item") or {})
        raise translate_error(exc) from exc
    return None


def update(params: dict[str, Any]) -> dict[str, Any] | None:
    """UpdateItem with ``ReturnValues=ALL_NEW``; None when its condition failed."""
    try:
        response = dynamodb().update_item(TableName=table_name(), ReturnValues="ALL_NEW", **params)
    except Exception as exc:
        if error_code(exc) == "ConditionalCheckFailedException":
            return None
        raise translate_error(exc) from exc
    return dict(response["Attributes"])


def translate_error(exc: Exception) -> Exception:
    return translate(exc, "DynamoDB")
