"""The API answers times as RFC 3339 UTC strings while the table keeps epoch seconds: every time a published release,
a settled operation, an installation and a consent decision answer reads back to exactly the stored number."""

from __future__ import annotations

import re
from typing import Any

import boto3
import pytest

import devstack
from devstack.caller import Caller
from packyard.api.times import epoch_of
from packyard_cli.build import build_from_files

WS = "ws-times"
RFC3339_UTC = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z")


def _stored(stack: devstack.Stack, pk: str, sk: str) -> dict[str, Any]:
    item: dict[str, Any] = boto3.client("dynamodb", region_name=stack.region).get_item(
        TableName=stack.table_name, Key={"pk": {"S": pk}, "sk": {"S": sk}}, ConsistentRead=True
    )["Item"]
    return item


def _epoch(attribute: dict[str, Any]) -> int:
    """A stored time: a DynamoDB number of epoch seconds, never a string."""
    assert set(attribute) == {"N"}, f"a stored time is a number: {attribute}"
    return int(attribute["N"])


def _same_instant(answered: Any, stored: dict[str, Any]) -> None:
    assert isinstance(answered, str) and RFC3339_UTC.fullmatch(answered), answered
    assert epoch_of(answered) == _epoch(stored)


@pytest.fixture
def published(acme: Caller) -> Caller:
    acme.publish("hello", "1.0.0", build_from_files({"SKILL.md": b"v1\n"}, permissions=[{"kind": "api_read"}]))
    return acme


def test_a_published_and_yanked_release_answers_the_stored_times(published: Caller, stack: devstack.Stack) -> None:
    release = published.get("/v1/packages/hello/versions/1.0.0").body
    stored = _stored(stack, "TENANT#t-acme#PACKAGE#hello", "VERSION#1.0.0")
    _same_instant(release["publishedAt"], stored["publishedAt"])
    _same_instant(release["receipt"]["publishedAt"], stored["publishedAt"])
    assert "yankedAt" not in release

    package = published.get("/v1/packages/hello").body
    _same_instant(package["createdAt"], _stored(stack, "TENANT#t-acme#PACKAGES", "PACKAGE#hello")["createdAt"])

    yanked = published.delete("/v1/packages/hello/versions/1.0.0").body
    stored = _stored(stack, "TENANT#t-acme#PACKAGE#hello", "VERSION#1.0.0")
    _same_instant(yanked["yankedAt"], stored["yankedAt"])
    _same_instant(published.get("/v1/packages/hello/versions").body["items"][0]["yankedAt"], stored["yankedAt"])


def test_an_upload_session_answers_its_stored_deadline(acme: Caller, stack: devstack.Stack) -> None:
    built = build_from_files({"SKILL.md": b"v1\n"})
    session = acme.request_upload("hello", "1.0.0", built).body

    stored = _stored(stack, f"TENANT#t-acme#UPLOAD#{session['uploadId']}", "UPLOAD")
    _same_instant(session["expiresAt"], stored["deadlineAt"])
    _same_instant(acme.get(f"/v1/uploads/{session['uploadId']}").body["expiresAt"], stored["deadlineAt"])


def test_a_settled_operation_its_consent_and_its_installation_answer_the_stored_times(
    published: Caller, stack: devstack.Stack
) -> None:
    admitted = published.install(WS, "hello", "hello", "1.0.0", key="k-times")
    waiting = published.wait_for_consent(WS, admitted)
    assert waiting["state"] == "awaiting_consent", waiting
    pk = f"TENANT#t-acme#WS#{WS}"
    wait_item = _stored(stack, pk, "CONSENT#hello")
    listed = published.get(f"/v1/workspaces/{WS}/approvals").body["items"][0]
    _same_instant(listed["since"], wait_item["since"])
    _same_instant(listed["deadline"], wait_item["deadline"])

    decided = published.decide(WS, waiting, "approve", key="k-times-approve").body
    op = published.wait_settled(WS, published.get(f"/v1/workspaces/{WS}/operations/{waiting['operationId']}"))
    assert op["state"] == "settled" and op["outcome"] == {"result": "succeeded"}, op

    stored_op = _stored(stack, pk, f"OP#{op['operationId']}")
    for name in ("createdAt", "updatedAt", "settledAt"):
        _same_instant(op[name], stored_op[name])
    consent = stored_op["consent"]["M"]
    for name in ("requestedAt", "deadline", "decidedAt"):
        _same_instant(op["consent"][name], consent[name])
    _same_instant(decided["decidedAt"], consent["decidedAt"])

    inst = published.get(f"/v1/workspaces/{WS}/installations/hello").body
    _same_instant(inst["updatedAt"], _stored(stack, pk, "INST#hello")["updatedAt"])
