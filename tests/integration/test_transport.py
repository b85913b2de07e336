"""devstack.transport: this process's requests to its own moto server reach the server's app without a socket, and
without a SigV4 signature nobody checks, while moto still reads the account and region they are for; S3's signer,
presigned URLs and other addresses are signed as before."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from botocore.auth import SigV4Auth
from botocore.config import Config
from moto.moto_server.werkzeug_app import DomainDispatcherApplication, create_backend_app

from devstack import FAKE_CREDENTIALS, transport

PORT = 1  # nothing listens there: a request that left the process would fail to connect
ENDPOINT = f"http://127.0.0.1:{PORT}"


@pytest.fixture
def in_process() -> Iterator[None]:
    transport.install(DomainDispatcherApplication(create_backend_app), "127.0.0.1", PORT)
    try:
        yield
    finally:
        transport.uninstall()


def client(service: str, region: str = "us-east-1", config: Config | None = None) -> Any:
    credentials = {
        "aws_access_key_id": FAKE_CREDENTIALS["AWS_ACCESS_KEY_ID"],
        "aws_secret_access_key": FAKE_CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
        "aws_session_token": FAKE_CREDENTIALS["AWS_SESSION_TOKEN"],
    }
    return boto3.session.Session().client(
        service, region_name=region, endpoint_url=ENDPOINT, config=config, **credentials
    )


def authorization_of(made: Any) -> list[str]:
    """The Authorization header of each request ``made`` sends, as signed (read after the client's signer ran)."""
    seen: list[str] = []
    made.meta.events.register("request-created", lambda request, **_: seen.append(request.headers["Authorization"]))
    return seen


def test_an_in_process_request_carries_the_scope_but_no_computed_signature(in_process: None) -> None:
    dynamodb = client("dynamodb", "eu-west-1")
    seen = authorization_of(dynamodb)
    dynamodb.list_tables()
    (header,) = seen
    assert header.startswith("AWS4-HMAC-SHA256 Credential=testing/")
    assert "/eu-west-1/dynamodb/aws4_request" in header
    assert header.endswith(f"Signature={transport.UNSIGNED_SIGNATURE}")


def test_moto_still_reads_the_region_from_an_unsigned_request(in_process: None) -> None:
    name = f"transport-{uuid.uuid4().hex[:8]}"
    ireland, virginia = client("dynamodb", "eu-west-1"), client("dynamodb", "us-east-1")
    ireland.create_table(
        TableName=name,
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
        BillingMode="PAY_PER_REQUEST",
    )
    try:
        ireland.put_item(TableName=name, Item={"pk": {"S": "a"}, "n": {"N": "1"}})
        assert ireland.get_item(TableName=name, Key={"pk": {"S": "a"}})["Item"]["n"] == {"N": "1"}
        assert name in ireland.list_tables()["TableNames"]
        assert name not in virginia.list_tables()["TableNames"]  # another region, another DynamoDB
        arn = ireland.describe_table(TableName=name)["Table"]["TableArn"]
        assert arn.startswith("arn:aws:dynamodb:eu-west-1:123456789012:table/")  # moto's default account
    finally:
        ireland.delete_table(TableName=name)


def test_s3_requests_and_presigned_urls_are_still_signed(in_process: None) -> None:
    s3 = client("s3", config=Config(signature_version="s3v4"))
    seen = authorization_of(s3)
    s3.list_buckets()
    assert not seen[0].endswith(transport.UNSIGNED_SIGNATURE)  # S3's own signer, untouched
    url = s3.generate_presigned_url("get_object", Params={"Bucket": "b", "Key": "k"})
    assert "X-Amz-Signature=" in url and transport.UNSIGNED_SIGNATURE not in url


def test_a_request_to_another_address_is_signed(in_process: None) -> None:
    elsewhere = boto3.session.Session().client(
        "dynamodb",
        region_name="us-east-1",
        endpoint_url="http://127.0.0.1:2",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )
    seen = authorization_of(elsewhere)
    elsewhere.meta.events.register("before-send", lambda **_: _refused())  # answered here: nothing is sent
    with pytest.raises(_Refused):
        elsewhere.list_tables()
    assert not seen[0].endswith(transport.UNSIGNED_SIGNATURE)


def test_uninstall_puts_botocores_signer_back(in_process: None) -> None:
    transport.uninstall()
    assert SigV4Auth.__dict__["add_auth"] is transport._installed_add_auth


class _Refused(Exception):
    pass


def _refused() -> None:
    raise _Refused()
