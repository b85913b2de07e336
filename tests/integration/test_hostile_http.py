"""Hostile and careless requests through the API: each class answers a 4xx problem+json with a stable code, never a
5xx, never AWS text, and nothing is admitted that would be stored as something else than was sent."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest

from devstack.caller import Caller
from packyard_cli.build import build_from_files

WS = "ws-hostile"
PUT_PATH = f"/v1/workspaces/{WS}/installations/hello"


@pytest.fixture
def published(acme: Caller) -> Caller:
    acme.publish("hello", "1.0.0", build_from_files({"SKILL.md": b"v1\n"}))
    return acme


def _send(caller: Caller, method: str, path: str, body: Any, **headers: str):
    answer = caller.api.request(
        method, path, claims=caller.claims, body=body, headers={"Idempotency-Key": "k-hostile", **headers}
    )
    assert answer.status < 500, answer.body
    assert answer.headers["content-type"] == "application/problem+json", answer
    assert "ClientError" not in json.dumps(answer.body) and "botocore" not in json.dumps(answer.body)
    return answer


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        pytest.param('{"package": "hello", "version": "1.0.0", "config": {"x": NaN}}', "NaN", id="NaN"),
        pytest.param('{"package": "hello", "version": "1.0.0", "config": {"x": Infinity}}', "Infinity", id="Infinity"),
        pytest.param(
            '{"package": "hello", "version": "1.0.0", "config": {"x": -Infinity}}', "Infinity", id="-Infinity"
        ),
        pytest.param('{"package": "hello", "version": "1.0.0", "config": {"x": 1e400}}', "range", id="1e400"),
        pytest.param('{"package": "hello", "version": "1.0.0", "config": {"x": 1e-400}}', "range", id="1e-400"),
        pytest.param(
            '{"package": "hello", "version": "1.0.0", "config": {"x": 1' + "0" * 40 + "}}", "digits", id="41-digit int"
        ),
        pytest.param('{"package": "hello", "version": "1.0.0", "config": {"": 1}}', "empty key", id="empty key"),
        pytest.param('{"package": "hello", "version": "1.0.0", "version": "2.0.0"}', "twice", id="duplicate key"),
        pytest.param(
            '{"package": "hello", "version": "1.0.0", "config": ' + "[" * 5000 + "]" * 5000 + "}", "deeper", id="deep"
        ),
        pytest.param('{"package": "hello", "version": ', "", id="truncated"),
    ],
)
def test_given_json_that_would_not_be_stored_as_sent_then_invalid_request(
    published: Caller, raw: str, reason: str
) -> None:
    refused = _send(published, "PUT", PUT_PATH, raw)
    assert (refused.status, refused.body["code"]) == (400, "invalid_request")
    assert reason in json.dumps(refused.body)
    assert published.get(f"/v1/workspaces/{WS}/installations").body["items"] == []


def test_given_a_body_that_is_not_utf8_then_invalid_request(published: Caller) -> None:
    refused = _send(published, "PUT", PUT_PATH, b'{"package": "hello\xff\xfe", "version": "1.0.0"}')
    assert (refused.status, refused.body["code"]) == (400, "invalid_request")


@pytest.mark.parametrize(
    "content_type",
    ["text/plain", "application/octet-stream", "multipart/form-data", "application/x-www-form-urlencoded"],
)
def test_given_a_body_that_is_not_json_then_unsupported_media_type(published: Caller, content_type: str) -> None:
    refused = _send(published, "PUT", PUT_PATH, "package=hello&version=1.0.0", **{"content-type": content_type})
    assert (refused.status, refused.body["code"]) == (415, "unsupported_media_type")


def test_given_a_config_larger_than_its_limit_then_limit_exceeded_up_front(published: Caller) -> None:
    # a size bound of what is copied into items answers 422 limit_exceeded naming the limit (issue 20, item 2)
    body = {"package": "hello", "version": "1.0.0", "config": {"blob": "x" * 250_000}}
    refused = _send(published, "PUT", PUT_PATH, body)
    assert (refused.status, refused.body["code"], refused.body["limit"]) == (422, "limit_exceeded", "max_config_bytes")
    assert published.get(f"/v1/workspaces/{WS}/installations").body["items"] == []


@pytest.mark.parametrize(
    "cursor",
    [
        {"pk": {"S": f"TENANT#t-acme#WS#{WS}"}},
        {"pk": {"S": f"TENANT#t-acme#WS#{WS}"}, "sk": {"N": "1"}},
        {"pk": {"N": "1"}, "sk": {"S": "INST#a"}},
        {"pk": {"S": "TENANT#t-other#WS#x"}, "sk": {"S": "INST#a"}},
        ["not", "an", "object"],
    ],
    ids=["missing-sk", "sk-number", "pk-number", "other-tenant", "list"],
)
def test_given_a_cursor_with_missing_or_wrongly_typed_fields_then_invalid_request(acme: Caller, cursor: Any) -> None:
    encoded = base64.urlsafe_b64encode(json.dumps(cursor).encode()).decode()
    answer = acme.get(f"/v1/workspaces/{WS}/installations", query={"cursor": encoded})
    assert (answer.status, answer.body["code"]) == (400, "invalid_request")


def test_given_a_weak_if_match_then_version_conflict(published: Caller) -> None:
    published.wait_settled(WS, published.install(WS, "hello", "hello", "1.0.0", key="k-1"))
    refused = published.install(WS, "hello", "hello", "1.0.0", key="k-2", if_match='W/"1"')
    assert (refused.status, refused.body["code"]) == (412, "version_conflict")


def test_given_a_version_with_build_metadata_percent_encoded_in_the_path_then_it_is_decoded(acme: Caller) -> None:
    built = build_from_files({"SKILL.md": b"build metadata\n"})
    session = acme.post("/v1/packages/hello/versions/1.0.1%2Bbuild.5/uploads", built.upload_request())
    assert session.status == 201, session.body
    assert session.body["version"] == "1.0.1+build.5"


@pytest.mark.parametrize(
    "name", ["hello%0A", "hel%E2%80%AElo", "h%D0%B5llo"], ids=["trailing-newline", "bidi-override", "cyrillic"]
)
def test_given_a_package_name_that_only_looks_valid_then_it_is_refused(acme: Caller, name: str) -> None:
    built = build_from_files({"SKILL.md": b"x\n"})
    refused = acme.post(f"/v1/packages/{name}/versions/1.0.0/uploads", built.upload_request())
    # refused as invalid, or (a newline or a format character the route's id pattern does not take) as no such route
    assert (refused.status, refused.body["code"]) in {(400, "invalid_request"), (404, "not_found")}
    assert acme.get("/v1/packages").body["items"] == []


def test_given_bytes_swapped_after_verification_then_rejected_at_once_with_digest_mismatch(
    stack, acme: Caller, monkeypatch: pytest.MonkeyPatch
) -> None:
    import boto3

    import devstack
    from packyard.publishing import verification

    built = build_from_files({"SKILL.md": b"honest\n"})
    session = acme.request_upload("hello", "1.0.0", built)
    acme.put_archive(session.body, built.archive)
    real_verify = verification.verify

    def verify_then_swap(tenant: str, upload_id: str, token: str) -> dict:
        verdict = real_verify(tenant, upload_id, token)
        key = f"uploads/{tenant}/{upload_id}/{token}/archive.tar.gz"
        boto3.client("s3").put_object(Bucket=stack.bucket_name, Key=key, Body=b"swapped after verification")
        return verdict

    monkeypatch.setattr(verification, "verify", verify_then_swap)
    devstack.retry_clock().clear()
    final = acme.complete_and_wait(session.body["uploadId"])

    assert final["state"] == "rejected"
    assert (final["rejection"]["code"], final["rejection"]["subCode"]) == ("archive_rejected", "digest_mismatch")
    assert devstack.retry_clock().waits == []  # refused at once, never retried as if transient
    assert acme.get("/v1/packages/hello/versions/1.0.0").status == 404


def test_given_the_same_idempotency_key_then_one_upload_session_and_one_reservation(stack, acme: Caller) -> None:
    from tests.support.callers import used_bytes

    built = build_from_files({"SKILL.md": b"once\n"})
    path = "/v1/packages/hello/versions/1.0.0/uploads"
    first = acme.post(path, built.upload_request(), headers={"Idempotency-Key": "k-upload"})
    reserved = used_bytes(stack, "t-acme")
    again = [acme.post(path, built.upload_request(), headers={"Idempotency-Key": "k-upload"}) for _ in range(2)]

    assert [s.status for s in (first, *again)] == [201, 201, 201]
    assert {s.body["uploadId"] for s in again} == {first.body["uploadId"]}
    assert reserved > 0 and used_bytes(stack, "t-acme") == reserved  # one session's reservation, not three
    other = build_from_files({"SKILL.md": b"something else\n"})
    reused = acme.post(path, other.upload_request(), headers={"Idempotency-Key": "k-upload"})
    assert (reused.status, reused.body["code"]) == (422, "idempotency_key_reused")
    assert used_bytes(stack, "t-acme") == reserved
