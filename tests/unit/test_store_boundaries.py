"""The data access layer's boundary: botocore errors become domain errors (never AWS text), and list cursors are
opaque, accepted only for the partition they were minted for."""

from __future__ import annotations

import base64
import json

import pytest
from botocore.exceptions import ClientError, EndpointConnectionError, ReadTimeoutError

from packyard.errors import InvalidRequest, StoreFailure, TransientStoreError
from packyard.store import cursors
from packyard.store.aws import translate

PARTITION = "TENANT#t1#WS#ws1"


def _client_error(code: str, message: str = "the AWS text a caller must never see") -> ClientError:
    return ClientError({"Error": {"Code": code, "Message": message}}, "UpdateItem")


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        (_client_error("ThrottlingException"), TransientStoreError),
        (_client_error("ProvisionedThroughputExceededException"), TransientStoreError),
        (_client_error("InternalServerError"), TransientStoreError),
        (_client_error("ValidationException"), StoreFailure),
        (_client_error("AccessDeniedException"), StoreFailure),
        (EndpointConnectionError(endpoint_url="http://127.0.0.1:1"), TransientStoreError),
        (ReadTimeoutError(endpoint_url="http://127.0.0.1:1"), TransientStoreError),
    ],
    ids=["throttle", "throughput", "internal", "validation", "access-denied", "no-connection", "read-timeout"],
)
def test_given_a_botocore_error_when_translated_then_it_is_a_domain_error_without_aws_text(
    error: Exception, expected: type[Exception]
) -> None:
    translated = translate(error, "DynamoDB")
    assert type(translated) is expected
    assert "the AWS text" not in str(translated)
    assert str(translated).startswith("DynamoDB")


def test_given_an_error_that_is_not_botocores_when_translated_then_it_is_left_alone() -> None:
    bug = KeyError("ours")
    assert translate(bug, "S3") is bug


def _cursor(value: object) -> str:
    return base64.urlsafe_b64encode(json.dumps(value).encode()).decode()


def test_given_a_minted_cursor_when_decoded_for_its_partition_then_the_start_key_comes_back() -> None:
    last_key = {"pk": {"S": PARTITION}, "sk": {"S": "INST#app"}}
    minted = cursors.encode(last_key)
    assert minted is not None
    assert cursors.decode(minted, PARTITION) == last_key
    assert cursors.encode(None) is None and cursors.decode(None, PARTITION) is None


@pytest.mark.parametrize(
    "cursor",
    [
        _cursor({"pk": {"S": "TENANT#t2#WS#ws1"}, "sk": {"S": "INST#app"}}),
        _cursor({"pk": {"S": "TENANT#t1#WS#other"}, "sk": {"S": "INST#app"}}),
        _cursor({"pk": {"S": PARTITION}}),
        _cursor({"pk": {"S": PARTITION}, "sk": {"N": "1"}}),
        _cursor({"pk": PARTITION, "sk": "INST#app"}),
        _cursor({"pk": {"S": PARTITION}, "sk": {"S": "INST#app"}, "extra": {"S": "x"}}),
        _cursor(["pk", "sk"]),
        "not base64 at all!",
        base64.urlsafe_b64encode(b"\xff\xfe").decode(),
        "é",
        "A" * 4096,
    ],
    ids=[
        "other-tenant",
        "other-workspace",
        "missing-sk",
        "sk-not-string",
        "untyped-attributes",
        "extra-attribute",
        "not-an-object",
        "not-base64",
        "not-json",
        "non-ascii",
        "too-long",
    ],
)
def test_given_a_cursor_not_minted_for_this_partition_when_decoded_then_it_is_invalid_request(cursor: str) -> None:
    with pytest.raises(InvalidRequest):
        cursors.decode(cursor, PARTITION)


def test_the_clients_load_their_models_without_walking_every_service_directory(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Issue 11: botocore's loader lists every service directory before loading a model; ours is told the services
    it serves. Each of them still gets its own model from botocore's data, and another service is refused."""
    import os

    from botocore.exceptions import UnknownServiceError

    from packyard.store import aws

    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.delenv("AWS_DATA_PATH", raising=False)
    listed: list[str] = []
    real_listdir = os.listdir

    def counting_listdir(path: str) -> list[str]:
        listed.append(str(path))
        return real_listdir(path)

    aws.reset_clients()
    monkeypatch.setattr(os, "listdir", counting_listdir)
    try:
        models = {name: aws.client(name).meta.service_model.service_name for name in aws.SERVICES}
        with pytest.raises(UnknownServiceError):
            aws._session().create_client("sqs")
    finally:
        aws.reset_clients()

    assert models == {
        "dynamodb": "dynamodb",
        "s3": "s3",
        "stepfunctions": "stepfunctions",
        "kms": "kms",
        "events": "events",  # the change events (store.bus)
    }
    assert len(listed) <= 3 * len(aws.SERVICES)  # its own versions per service, not ~900 directories
