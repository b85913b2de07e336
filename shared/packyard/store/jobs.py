"""DynamoDB items of cleanup jobs (``maintenance.jobs``): one item per (tenant, kind, subject), in the due index
(``job#<n>``) while it waits for its next attempt, parked (``parked#job``) after its last.

    job    pk TENANT#<t>#JOB#<kind>#<digest>    sk JOB     digest = sha256 of kind + the canonical subject (first 32
                                                           hex): enqueueing the same job twice is one item
    attributes: tenant, kind, subject (map of strings), createdAt,
                dueAttempts (attempts started so far), dueError (the last failure, short), parkedAt (store/due.py),
                claim, claimedAt (the attempt running now; dueAt is then its claim's end)

Every write after the enqueue is fenced: the claim on the due attributes the sweep observed (a concurrent sweep that
read the same item loses), the rest on the claim token (a sweep whose claim ran out and was taken over changes
nothing).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from uuid import uuid4

from pydantic import BaseModel, ConfigDict, Field

from packyard.store import due, dynamo
from packyard.store.due import DueKind, DueMark
from packyard.store.dynamo import from_item, key, marshal, table_name, to_item

SORT_KEY = "JOB"
CLAIM_ATTRIBUTE = "claim"
CLAIMED_AT_ATTRIBUTE = "claimedAt"


class JobRecord(BaseModel):
    """A cleanup job as stored (without its due attributes and claim, which ``StoredJob`` carries)."""

    model_config = ConfigDict(frozen=True, populate_by_name=True)

    tenant: str = Field(min_length=1)
    kind: str = Field(min_length=1)
    subject: dict[str, str]
    created_at: int = Field(alias="createdAt")


@dataclass(frozen=True)
class StoredJob:
    record: JobRecord
    mark: DueMark
    claim: str | None = None

    @property
    def attempts(self) -> int:
        return self.mark.attempts

    @property
    def parked(self) -> bool:
        return self.mark.shard.startswith(due.PARKED_PREFIX)


def subject_digest(kind: str, subject: Mapping[str, str]) -> str:
    canonical = json.dumps({"kind": kind, "subject": dict(subject)}, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()[:32]


def job_key(tenant: str, kind: str, subject: Mapping[str, str]) -> tuple[str, str]:
    return f"TENANT#{tenant}#JOB#{kind}#{subject_digest(kind, subject)}", SORT_KEY


def put_item(tenant: str, kind: str, subject: Mapping[str, str], *, due_at: int, now: int) -> dict[str, Any]:
    """A TransactWriteItems ``Put`` of the job, due at ``due_at`` with no attempt made. Unconditional on purpose: the
    same job enqueued again (a retried yank, a second failure) is the same item, re-armed (its attempts start over,
    a park is lifted); a run in flight then only fails to delete it (its claim is gone) and the job runs once more,
    which every job action tolerates (they are idempotent)."""
    pk, sk = job_key(tenant, kind, subject)
    record = JobRecord(tenant=tenant, kind=kind, subject=dict(subject), created_at=now)
    extra = {**due.attributes(DueKind.JOB, pk, due_at), due.ATTEMPTS_ATTRIBUTE: 0}
    return {"Put": {"TableName": table_name(), "Item": to_item(pk, sk, record, **extra)}}


def put(tenant: str, kind: str, subject: Mapping[str, str], *, due_at: int, now: int) -> None:
    # every enqueue re-arms the job (see put_item), even one identical to an enqueue a minute ago: its own attempt
    dynamo.transact([put_item(tenant, kind, subject, due_at=due_at, now=now)], step="job.enqueue", attempt=uuid4().hex)


def job_from_item(item: dict[str, Any]) -> StoredJob:
    values = {name: value for name, value in item.items() if name not in (CLAIM_ATTRIBUTE, CLAIMED_AT_ATTRIBUTE)}
    claim = item.get(CLAIM_ATTRIBUTE, {}).get("S")
    return StoredJob(record=from_item(JobRecord, values), mark=due.mark_of(item), claim=claim)


def find(tenant: str, kind: str, subject: Mapping[str, str]) -> StoredJob | None:
    item = dynamo.get(*job_key(tenant, kind, subject))
    return job_from_item(item) if item else None


def claim(job: StoredJob, token: str, *, now: int, until: int) -> StoredJob | None:
    """Start an attempt: count it, take the claim and hide the job from other sweeps until ``until`` (if this attempt
    dies without a word, the job is due again then, its attempt counted). Fenced on the due attributes the sweep
    read: None if anything moved them (another sweep claimed it first, it was re-enqueued or parked)."""
    mark = job.mark
    update = "SET #claim = :token, #claimedAt = :now, #at = :until, #n = :next"
    condition = "#shard = :shard AND #at = :at AND #n = :n"
    updated = dynamo.update(
        {
            "Key": key(mark.pk, mark.sk),
            "UpdateExpression": update,
            "ConditionExpression": condition,
            "ExpressionAttributeNames": _names(update, condition),
            "ExpressionAttributeValues": marshal(
                {
                    ":token": token,
                    ":now": now,
                    ":until": due.at_value(until),
                    ":next": mark.attempts + 1,
                    ":shard": mark.shard,
                    ":at": mark.at,
                    ":n": mark.attempts,
                }
            ),
        }
    )
    return job_from_item(updated) if updated is not None else None


def finish(job: StoredJob, token: str) -> bool:
    """The attempt succeeded: delete the job if it is still ours (False: it was re-enqueued or taken over, and will
    run again, harmlessly)."""
    try:
        dynamo.dynamodb().delete_item(
            TableName=table_name(),
            Key=key(job.mark.pk, job.mark.sk),
            ConditionExpression="#claim = :token",
            ExpressionAttributeNames={"#claim": CLAIM_ATTRIBUTE},
            ExpressionAttributeValues=marshal({":token": token}),
        )
    except Exception as exc:
        from packyard.store.aws import error_code

        if error_code(exc) == "ConditionalCheckFailedException":
            return False
        raise dynamo.translate_error(exc) from exc
    return True


def release(job: StoredJob, token: str, *, retry_at: int, error: str) -> bool:
    """The attempt failed: due again at ``retry_at``, the claim dropped, the failure recorded. Fenced on the claim."""
    return _after_attempt(job, token, "SET #at = :at, #error = :error", {":at": due.at_value(retry_at)}, error)


def park(job: StoredJob, token: str | None, *, now: int, error: str) -> bool:
    """The last attempt failed (or died): out of the due index, into ``parked#job``. Fenced on the claim (``token``),
    or, with no claim (the last attempt died without a word), on the due attributes the sweep read."""
    update = "SET #shard = :parkedShard, #at = :at, #parked = :now, #error = :error"
    values = {":parkedShard": due.parked_shard(DueKind.JOB), ":at": due.at_value(now), ":now": now}
    return _after_attempt(job, token, update, values, error)


def _after_attempt(job: StoredJob, token: str | None, update: str, values: dict[str, Any], error: str) -> bool:
    mark = job.mark
    values = {**values, ":error": due.short_error(error)}
    if token is None:
        condition = "#shard = :shard AND #at = :observedAt AND #n = :n"
        values.update({":shard": mark.shard, ":observedAt": mark.at, ":n": mark.attempts})
    else:
        condition = "#claim = :token"
        values[":token"] = token
    update = f"{update} REMOVE #claim, #claimedAt"
    updated = dynamo.update(
        {
            "Key": key(mark.pk, mark.sk),
            "UpdateExpression": update,
            "ConditionExpression": condition,
            "ExpressionAttributeNames": _names(update, condition),
            "ExpressionAttributeValues": marshal(values),
        }
    )
    return updated is not None


def _names(*expressions: str) -> dict[str, str]:
    """The attribute names the expressions use (DynamoDB refuses unused ones)."""
    used = {name for expression in expressions for name in re.findall(r"#\w+", expression)}
    names = {
        "#shard": due.SHARD_ATTRIBUTE,
        "#at": due.AT_ATTRIBUTE,
        "#n": due.ATTEMPTS_ATTRIBUTE,
        "#error": due.ERROR_ATTRIBUTE,
        "#parked": due.PARKED_ATTRIBUTE,
        "#claim": CLAIM_ATTRIBUTE,
        "#claimedAt": CLAIMED_AT_ATTRIBUTE,
    }
    return {placeholder: name for placeholder, name in names.items() if placeholder in used}
