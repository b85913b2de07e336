"""devstack.transport: this process's requests to its own moto server reach the server's app without a socket, and
without a SigV4 signature nobody checks, while moto still reads the account and region they are for; S3's signer,
presigned URLs and other addresses are signed as before."""

from __future__ import annotations

import functools
import io
import sys
import time
import uuid
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from botocore.auth import SigV4Auth
from botocore.config import Config
from moto.moto_server.werkzeug_app import DomainDispatcherApplication, create_backend_app

from devstack import FAKE_CREDENTIALS, transport
from tests.support.collector import cyclic_garbage

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


# ------------------------------------------------------------------ InProcessDispatcher: Flask's answers, without Flask

FLASK_PORT = 3  # the same dispatcher, the request's in-process mark removed: moto's Flask app answers it
VARYING = {"date", "x-amzn-requestid", "x-amz-request-id", "x-amz-id-2", "x-amz-crc32", "server"}
"""Headers that differ from one request to the next whoever answers (and the CRC of a body holding a request id)."""


@pytest.fixture
def dispatcher() -> Iterator[transport.InProcessDispatcher]:
    app = transport.InProcessDispatcher(create_backend_app)

    def through_flask(environ: dict[str, Any], start_response: Any) -> Any:
        environ.pop(transport.IN_PROCESS, None)
        return app(environ, start_response)

    transport.install(app, "127.0.0.1", PORT)
    transport._apps[f"127.0.0.1:{FLASK_PORT}"] = through_flask
    try:
        yield app
    finally:
        transport.uninstall()


def both(service: str, config: Config | None = None) -> tuple[Any, Any]:
    """A client of the dispatched path and one of Flask's, for the same moto."""
    flask_client = boto3.session.Session().client(
        service,
        region_name="us-east-1",
        endpoint_url=f"http://127.0.0.1:{FLASK_PORT}",
        config=config,
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )
    return client(service, config=config), flask_client


def answer(call: Any) -> dict[str, Any]:
    """A call's answer as the caller sees it (its error if it failed), without what varies per request."""
    try:
        result = dict(call())
    except Exception as exc:  # botocore's ClientError: what moto answered, parsed
        result = {"error": type(exc).__name__, **getattr(exc, "response", {})}
    metadata = dict(result.pop("ResponseMetadata", {}))
    headers = {k: v for k, v in metadata.get("HTTPHeaders", {}).items() if k not in VARYING}
    headers = {k: v for k, v in headers.items() if not k.startswith("access-control-")}  # flask_cors, for browsers
    if "Body" in result:
        result["Body"] = result["Body"].read()
    return {"status": metadata.get("HTTPStatusCode"), "headers": headers, **result}


def same_answers(dispatched: Any, flask: Any, *calls: tuple[str, dict[str, Any]]) -> None:
    for operation, parameters in calls:
        got = answer(functools.partial(getattr(dispatched, operation), **parameters))
        expected = answer(functools.partial(getattr(flask, operation), **parameters))
        for found in (got, expected):
            found.get("Error", {}).pop("RequestId", None)
        assert got == expected, operation


def test_dynamodb_answers_as_through_flask(dispatcher: transport.InProcessDispatcher) -> None:
    dispatched, flask = both("dynamodb")
    name = f"dispatch-{uuid.uuid4().hex[:8]}"
    dispatched.create_table(
        TableName=name,
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
        BillingMode="PAY_PER_REQUEST",
    )
    item = {"pk": {"S": "a"}, "n": {"N": "1"}, "b": {"B": b"\x00\xff"}, "m": {"M": {"l": {"L": [{"S": "x"}]}}}}
    dispatched.put_item(TableName=name, Item=item)
    same_answers(
        dispatched,
        flask,
        ("get_item", {"TableName": name, "Key": {"pk": {"S": "a"}}}),
        ("get_item", {"TableName": name, "Key": {"pk": {"S": "missing"}}}),
        ("batch_get_item", {"RequestItems": {name: {"Keys": [{"pk": {"S": "a"}}, {"pk": {"S": "b"}}]}}}),
        # errors: a failed condition, a cancelled transaction, a table that is not there, a malformed request
        ("put_item", {"TableName": name, "Item": item, "ConditionExpression": "attribute_not_exists(pk)"}),
        (
            "transact_write_items",
            {
                "TransactItems": [
                    {
                        "ConditionCheck": {
                            "TableName": name,
                            "Key": {"pk": {"S": "a"}},
                            "ConditionExpression": "n = :v",
                            "ExpressionAttributeValues": {":v": {"N": "2"}},
                        }
                    }
                ]
            },
        ),
        ("get_item", {"TableName": "no-such-table", "Key": {"pk": {"S": "a"}}}),
        ("update_item", {"TableName": name, "Key": {"pk": {"S": "a"}}, "UpdateExpression": "SET"}),
        ("describe_table", {"TableName": name}),
    )


def test_s3_answers_as_through_flask(dispatcher: transport.InProcessDispatcher) -> None:
    config = Config(s3={"addressing_style": "path"})
    dispatched, flask = both("s3", config)
    bucket = f"dispatch-{uuid.uuid4().hex[:8]}"
    dispatched.create_bucket(Bucket=bucket)
    dispatched.put_object(Bucket=bucket, Key="dir/a b.bin", Body=b"\x00" * 1000, ContentType="application/x-thing")
    dispatched.put_object(Bucket=bucket, Key="untyped", Body=b"plain")
    same_answers(
        dispatched,
        flask,
        ("get_object", {"Bucket": bucket, "Key": "dir/a b.bin"}),
        ("get_object", {"Bucket": bucket, "Key": "dir/a b.bin", "Range": "bytes=10-19"}),
        ("get_object", {"Bucket": bucket, "Key": "untyped"}),
        ("head_object", {"Bucket": bucket, "Key": "dir/a b.bin"}),
        ("head_object", {"Bucket": bucket, "Key": "missing"}),  # a 404 without a body
        ("get_object", {"Bucket": bucket, "Key": "missing"}),
        ("list_objects_v2", {"Bucket": bucket}),
        ("get_object", {"Bucket": "no-such-bucket", "Key": "k"}),
    )


def test_other_services_answer_as_through_flask(dispatcher: transport.InProcessDispatcher) -> None:
    events, events_flask = both("events")
    same_answers(
        events,
        events_flask,
        ("list_event_buses", {}),
        (
            "put_events",
            {"Entries": [{"Source": "s", "DetailType": "d"}]},
        ),  # refused: no Detail (a new event's id varies)
        ("list_rules", {}),
        ("describe_event_bus", {"Name": "no-such-bus"}),
    )
    sfn, sfn_flask = both("stepfunctions")
    same_answers(
        sfn,
        sfn_flask,
        ("list_state_machines", {}),
        ("describe_execution", {"executionArn": "arn:aws:states:us-east-1:123456789012:execution:none:none"}),
    )
    lambdas, lambdas_flask = both("lambda")
    same_answers(lambdas, lambdas_flask, ("list_functions", {}), ("get_function", {"FunctionName": "none"}))


def test_an_in_process_request_skips_flask_and_one_over_http_does_not(
    dispatcher: transport.InProcessDispatcher, monkeypatch: pytest.MonkeyPatch
) -> None:
    import flask

    through_flask: list[str] = []
    wsgi_app = flask.Flask.wsgi_app

    def counted(self: Any, environ: dict[str, Any], start_response: Any) -> Any:
        through_flask.append(environ["PATH_INFO"])
        return wsgi_app(self, environ, start_response)

    monkeypatch.setattr(flask.Flask, "wsgi_app", counted)
    dispatched, over_flask = both("dynamodb")
    dispatched.list_tables()
    dispatched.list_tables()
    assert through_flask == []
    over_flask.list_tables()
    assert through_flask == ["/"]


def test_a_dispatched_request_is_freed_when_answered_not_left_to_the_collector(
    dispatcher: transport.InProcessDispatcher,
) -> None:
    """werkzeug's Request keeps itself in its environ: each dispatched request was a reference cycle (the request,
    its headers, streams and forms) that only the cycle collector freed. Once answered, nothing of it is left for the
    collector to find."""
    from werkzeug.wrappers import Request

    dispatched, _ = both("dynamodb")
    dispatched.list_tables()  # first use: clients, routes and lookups made once
    garbage = cyclic_garbage(lambda: [dispatched.list_tables() for _ in range(5)])
    assert [found for found in garbage if isinstance(found, Request)] == []


def test_a_path_no_service_serves_is_answered_by_flask(dispatcher: transport.InProcessDispatcher) -> None:
    environ = {
        "REQUEST_METHOD": "GET",
        "PATH_INFO": "/no/such/route",
        "QUERY_STRING": "",
        "SERVER_NAME": "127.0.0.1",
        "SERVER_PORT": str(PORT),
        "HTTP_HOST": f"127.0.0.1:{PORT}",
        "HTTP_AUTHORIZATION": "AWS4-HMAC-SHA256 Credential=testing/20260101/us-east-1/dynamodb/aws4_request, "
        "SignedHeaders=host, Signature=0",
        "HTTP_X_AMZ_TARGET": "DynamoDB_20120810.ListTables",
        "wsgi.input": io.BytesIO(b""),
        "wsgi.url_scheme": "http",
        "wsgi.errors": sys.stderr,
        transport.IN_PROCESS: True,
    }
    statuses: list[str] = []
    body = b"".join(dispatcher(dict(environ), lambda status, headers, exc_info=None: statuses.append(status)))
    del environ[transport.IN_PROCESS]
    expected = b"".join(dispatcher(environ, lambda status, headers, exc_info=None: statuses.append(status)))
    assert statuses[0] == statuses[1] == "404 NOT FOUND"
    assert body == expected


# ------------------------------------------------------------------ Lambda's Invoke answered directly


def _invoked(client_: Any, name: str, payload: bytes, invocation_type: str = "RequestResponse") -> dict[str, Any]:
    def call() -> Any:
        answered = client_.invoke(FunctionName=name, InvocationType=invocation_type, Payload=payload)
        answered["Payload"] = answered["Payload"].read()
        return answered

    return answer(call)


def test_lambda_invoke_of_a_stack_function_is_answered_directly_as_moto_answers_it(
    dispatcher: transport.InProcessDispatcher, monkeypatch: pytest.MonkeyPatch
) -> None:
    import json
    from pathlib import Path

    from botocore.config import Config
    from moto.awslambda.responses import LambdaResponse

    from devstack import lambdas, limits
    from devstack.template import FunctionSpec
    from tests.support.fake_functions import limits_app

    reached_moto: list[str] = []
    moto_invoke = LambdaResponse.invoke

    def counted(self: Any) -> Any:
        reached_moto.append(self.path)
        return moto_invoke(self)

    monkeypatch.setattr(LambdaResponse, "invoke", counted)

    def fake(name: str, handler: str, reserved: int | None = None) -> str:
        lambdas.register(
            FunctionSpec(
                logical_id=name,
                name=name,
                arn=f"arn:aws:lambda:us-east-1:123456789012:function:{name}",
                code_uri=Path(limits_app.__file__).parent,
                handler=f"limits_app.{handler}",
                timeout=30,
                reserved_concurrency=reserved,
            )
        )
        return name

    with lambdas.dispatching():
        echo, fails, sized, throttled = (
            fake("echo", "echo"),
            fake("fails", "fails"),
            fake("sized", "sized"),
            fake("throttled", "echo", reserved=0),
        )
        made = client("lambda", config=Config(retries={"total_max_attempts": 1}))
        too_large = b'"' + b"x" * limits.LAMBDA_SYNC_REQUEST_BYTES + b'"'
        cases = [
            (echo, b"{}", "RequestResponse"),
            (f"arn:aws:lambda:us-east-1:123456789012:function:{echo}", b"{}", "RequestResponse"),
            (fails, b"{}", "RequestResponse"),  # the handler raised: 200, X-Amz-Function-Error, its error payload
            (sized, json.dumps({"bytes": limits.LAMBDA_SYNC_RESPONSE_BYTES + 1}).encode(), "RequestResponse"),
            (echo, too_large, "RequestResponse"),  # 413
            (throttled, b"{}", "RequestResponse"),  # 429: no concurrency reserved
            (echo, b"{}", "DryRun"),
            (echo, b"{}", "Event"),
        ]
        direct = [_invoked(made, name, payload, kind) for name, payload, kind in cases]
        assert reached_moto == []  # moto's Lambda API parsed none of them
        transport._stop_answering(lambdas.invoke_directly)
        through_moto = [_invoked(made, name, payload, kind) for name, payload, kind in cases]
        assert len(reached_moto) == len(cases)
        deadline = time.monotonic() + 10
        while limits.in_flight(echo) and time.monotonic() < deadline:  # the Event runs end before the runtime goes
            time.sleep(0.01)
        assert limits.in_flight(echo) == 0

    for (name, _, kind), got, expected in zip(cases, direct, through_moto, strict=True):
        for found in (got, expected):
            found.get("Error", {}).pop("RequestId", None)
            found["headers"].pop("status", None)  # moto writes its status code as a header too; nothing reads it
        assert got == expected, (name, kind)
    assert direct[0]["Payload"] == b'{"echo": true}' and direct[2]["FunctionError"] == "Unhandled"
    assert [found["status"] for found in direct] == [200, 200, 200, 200, 413, 429, 204, 202]


def test_a_plain_hosts_url_root_is_werkzeugs() -> None:
    """The url_root kept for a plain host is the one werkzeug computes; any other host is left to werkzeug."""
    from werkzeug.test import EnvironBuilder
    from werkzeug.wrappers import Request

    for host, root in (
        ("127.0.0.1:4566", ""),
        ("localhost:5000", ""),
        ("bucket.s3.localhost:4566", ""),
        ("example.com", ""),
        ("xn--bcher-kva.example:80", ""),
        ("127.0.0.1:4566", "/mounted"),
    ):
        environ = EnvironBuilder(path="/a%20b/c", base_url=f"http://{host}{root}", query_string="x=1").get_environ()
        kept = Request(environ)
        transport.keep_plain_url_root(kept)
        assert kept.url_root == Request(environ).url_root, host
