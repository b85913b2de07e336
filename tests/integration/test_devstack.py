"""The local runtime itself: stack from template.yaml, real executions with in-process Lambda, counting."""

from __future__ import annotations

import json
import os
from collections import Counter
from pathlib import Path
from typing import Any

import boto3
import pytest

import devstack
from devstack import lambdas
from devstack.template import FunctionSpec, Stack, create_state_machine, load_template

FIXTURE_CODE = Path(__file__).parent / "fixtures" / "devstack_fn"
PUBLISH_ASL = Path(__file__).resolve().parents[2] / "statemachines" / "publish.asl.json"


def fake_function(stack: Stack, name: str, handler: str) -> FunctionSpec:
    """Register a test-only handler from fixtures/devstack_fn/app.py under ``name``; return its spec."""
    spec = FunctionSpec(
        logical_id=name,
        name=name,
        arn=f"arn:aws:lambda:{stack.region}:{stack.account}:function:{name}",
        code_uri=FIXTURE_CODE,
        handler=f"app.{handler}",
        timeout=30,
    )
    lambdas.register(spec)
    return spec


def run(state_machine_arn: str, execution_input: dict[str, Any]) -> dict[str, Any]:
    sfn = boto3.client("stepfunctions")
    started = sfn.start_execution(stateMachineArn=state_machine_arn, input=json.dumps(execution_input))
    return devstack.wait_for_execution(started["executionArn"], timeout=30)


def throwaway_machine(tmp_path: Path, name: str, definition: dict[str, Any], substitutions: dict[str, str]) -> str:
    asl = tmp_path / f"{name}.asl.json"
    asl.write_text(json.dumps(definition), "utf-8")
    return create_state_machine(
        boto3.client("stepfunctions"),
        name=name,
        definition=asl,
        substitutions=substitutions,
        role_arn="arn:aws:iam::123456789012:role/test",
    )


def invoke_task(function_arn_placeholder: str, **fields: Any) -> dict[str, Any]:
    return {
        "Type": "Task",
        "Resource": "arn:aws:states:::lambda:invoke",
        "Parameters": {"FunctionName": function_arn_placeholder, "Payload.$": "$"},
        **fields,
    }


# ------------------------------------------------------------------ (1) resources from template.yaml


def test_table_is_created_from_the_template(stack: Stack) -> None:
    # Given the template's declaration of the table
    declared = load_template()["Resources"]["PackyardTable"]["Properties"]
    ddb = boto3.client("dynamodb")

    # When the local stack describes the table it created
    table = ddb.describe_table(TableName=stack.table_name)["Table"]
    ttl = ddb.describe_time_to_live(TableName=stack.table_name)["TimeToLiveDescription"]
    backups = ddb.describe_continuous_backups(TableName=stack.table_name)["ContinuousBackupsDescription"]

    # Then keys, billing, GSIs, TTL and PITR are exactly the template's
    assert stack.table_name == "packyard-PackyardTable"
    assert table["KeySchema"] == declared["KeySchema"]
    assert sorted(table["AttributeDefinitions"], key=str) == sorted(declared["AttributeDefinitions"], key=str)
    assert table["BillingModeSummary"]["BillingMode"] == declared["BillingMode"] == "PAY_PER_REQUEST"
    created = {index["IndexName"]: index for index in table["GlobalSecondaryIndexes"]}
    assert set(created) == {index["IndexName"] for index in declared["GlobalSecondaryIndexes"]} == {"DueIndex"}
    for index in declared["GlobalSecondaryIndexes"]:
        assert created[index["IndexName"]]["KeySchema"] == index["KeySchema"]
        assert created[index["IndexName"]]["Projection"] == index["Projection"]
    assert ttl == {"TimeToLiveStatus": "ENABLED", "AttributeName": declared["TimeToLiveSpecification"]["AttributeName"]}
    assert ttl["AttributeName"] == "expiresAt"
    assert backups["PointInTimeRecoveryDescription"]["PointInTimeRecoveryStatus"] == "ENABLED"
    assert table["SSEDescription"]["Status"] == "ENABLED"


def test_bucket_is_created_from_the_template(stack: Stack) -> None:
    s3 = boto3.client("s3")

    block = s3.get_public_access_block(Bucket=stack.bucket_name)["PublicAccessBlockConfiguration"]
    encryption = s3.get_bucket_encryption(Bucket=stack.bucket_name)["ServerSideEncryptionConfiguration"]
    rules = {rule["ID"]: rule for rule in s3.get_bucket_lifecycle_configuration(Bucket=stack.bucket_name)["Rules"]}

    assert stack.bucket_name.startswith("packyard-packyardbucket-")
    assert stack.bucket_name == stack.bucket_name.lower()
    assert all(block.values()) and len(block) == 4
    assert encryption["Rules"][0]["ApplyServerSideEncryptionByDefault"]["SSEAlgorithm"] == "AES256"
    assert rules["ExpireStagedUploads"]["Filter"] == {"Prefix": "uploads/"}
    assert rules["ExpireStagedUploads"]["Expiration"] == {"Days": 1}
    assert rules["AbortIncompleteMultipartUploads"]["AbortIncompleteMultipartUpload"] == {"DaysAfterInitiation": 1}
    assert s3.get_bucket_ownership_controls(Bucket=stack.bucket_name)["OwnershipControls"]["Rules"] == [
        {"ObjectOwnership": "BucketOwnerEnforced"}
    ]


def test_state_machine_and_environment_come_from_the_template(stack: Stack) -> None:
    sfn = boto3.client("stepfunctions")
    arn = stack.state_machine_arns["PublishStateMachine"]

    described = sfn.describe_state_machine(stateMachineArn=arn)
    states = json.loads(described["definition"])["States"]

    assert described["name"] == "packyard-PublishStateMachine"
    assert described["type"] == "EXPRESS"  # issue 23: the template's Type
    assert "${" not in described["definition"]
    for state, function in (("Verify", "VerifyFunction"), ("Publish", "PublishFunction"), ("Reject", "RejectFunction")):
        assert states[state]["Resource"] == stack.functions[function].arn
    assert stack.functions["VerifyFunction"].arn == "arn:aws:lambda:us-east-1:123456789012:function:VerifyFunction"
    assert (stack.functions["VerifyFunction"].timeout, stack.functions["VerifyFunction"].memory_size) == (900, 2048)
    assert stack.functions["QueriesFunction"].code_uri == stack.root / "functions" / "queries"
    assert "PUBLISH_STATE_MACHINE_ARN" not in stack.functions["QueriesFunction"].environment
    assert os.environ["TABLE_NAME"] == stack.table_name
    assert os.environ["BUCKET_NAME"] == stack.bucket_name
    assert os.environ["PUBLISH_STATE_MACHINE_ARN"] == arn
    assert os.environ["TENANT_CLAIM"] == "tenant"
    assert os.environ["POWERTOOLS_SERVICE_NAME"] == "packyard"


def test_stop_restores_the_environment() -> None:
    before = os.environ.get("TABLE_NAME")
    with devstack.local_aws() as stack:
        assert os.environ["TABLE_NAME"] == stack.table_name
    assert os.environ.get("TABLE_NAME") == before
    assert devstack.current() is None


# ------------------------------------------------------------------ (2) real executions, in-process Lambda


def test_direct_invoke_dispatches_to_the_handler(stack: Stack) -> None:
    fake_function(stack, "Echo", "echo")
    fake_function(stack, "Invalid", "fail_invalid")
    client = boto3.client("lambda")

    ok = client.invoke(FunctionName="Echo", Payload=json.dumps({"a": 1}))
    failed = client.invoke(FunctionName=f"arn:aws:lambda:{stack.region}:{stack.account}:function:Invalid")

    body = json.loads(ok["Payload"].read())
    assert "FunctionError" not in ok
    assert body["seen"] == {"a": 1}
    assert body["function"] == "Echo"
    assert body["arn"].endswith(":function:Echo")
    assert body["hasTimeLeft"] is True
    assert failed["FunctionError"] == "Unhandled"
    error = json.loads(failed["Payload"].read())
    assert error["errorType"] == "ValueError"
    assert error["errorMessage"] == "not retryable"
    assert "devstack_fn/app.py" in error["stackTrace"][0]  # the trace starts at the handler, as on AWS


def test_unknown_function_falls_through_to_moto(stack: Stack) -> None:
    with pytest.raises(boto3.client("lambda").exceptions.ResourceNotFoundException):
        boto3.client("lambda").invoke(FunctionName="NoSuchFunction")


def test_custom_error_is_retried_then_caught_by_its_name(stack: Stack, tmp_path: Path) -> None:
    # Given a task whose handler always raises TransientStoreError, retried twice, then caught
    flaky = fake_function(stack, "Flaky", "fail_transient")
    echo = fake_function(stack, "Echo", "echo")
    machine = throwaway_machine(
        tmp_path,
        "retry-catch",
        {
            "StartAt": "Flaky",
            "States": {
                "Flaky": invoke_task(
                    "${FlakyArn}",
                    Retry=[
                        {
                            "ErrorEquals": ["TransientStoreError"],
                            "IntervalSeconds": 1,
                            "MaxAttempts": 2,
                            "BackoffRate": 2,
                        }
                    ],
                    Catch=[{"ErrorEquals": ["States.ALL"], "ResultPath": "$.error", "Next": "Recover"}],
                    End=True,
                ),
                "Recover": invoke_task(
                    "${EchoArn}", ResultSelector={"echo.$": "$.Payload"}, ResultPath="$.recovered", End=True
                ),
            },
        },
        {"FlakyArn": flaky.arn, "EchoArn": echo.arn},
    )

    # When it runs
    execution = run(machine, {"uploadId": "u-1"})

    # Then the handler ran 1 + MaxAttempts times with the ASL's backoff, and Catch saw the class name
    assert execution["status"] == "SUCCEEDED"
    output = json.loads(execution["output"])
    assert output["error"]["Error"] == "TransientStoreError"
    cause = json.loads(output["error"]["Cause"])
    assert cause["errorType"] == "TransientStoreError"
    assert cause["errorMessage"] == "store throttled for u-1"
    assert [i.error_type for i in lambdas.invocations("Flaky")] == ["TransientStoreError"] * 3
    assert devstack.retry_clock().waits == [1.0, 2.0]
    assert output["recovered"]["echo"]["seen"]["error"]["Error"] == "TransientStoreError"
    assert output["recovered"]["echo"]["function"] == "Echo"


def test_error_outside_the_retry_list_is_caught_at_once(stack: Stack, tmp_path: Path) -> None:
    invalid = fake_function(stack, "Invalid", "fail_invalid")
    machine = throwaway_machine(
        tmp_path,
        "no-retry",
        {
            "StartAt": "Invalid",
            "States": {
                "Invalid": invoke_task(
                    "${InvalidArn}",
                    Retry=[{"ErrorEquals": ["TransientStoreError"], "MaxAttempts": 3}],
                    Catch=[{"ErrorEquals": ["ValueError"], "ResultPath": "$.error", "Next": "Caught"}],
                    End=True,
                ),
                "Caught": {"Type": "Pass", "End": True},
            },
        },
        {"InvalidArn": invalid.arn},
    )

    execution = run(machine, {"uploadId": "u-2"})

    assert execution["status"] == "SUCCEEDED"
    assert json.loads(execution["output"])["error"]["Error"] == "ValueError"
    assert len(lambdas.invocations("Invalid")) == 1
    assert devstack.retry_clock().waits == []


def test_unnamed_executions_get_distinct_names(stack: Stack, tmp_path: Path) -> None:
    machine = throwaway_machine(tmp_path, "pass", {"StartAt": "P", "States": {"P": {"Type": "Pass", "End": True}}}, {})
    sfn = boto3.client("stepfunctions")

    first = sfn.start_execution(stateMachineArn=machine, input="{}")["executionArn"]
    second = sfn.start_execution(stateMachineArn=machine, input="{}")["executionArn"]

    assert first != second
    assert not first.endswith(":None")
    assert devstack.wait_for_execution(second)["status"] == "SUCCEEDED"


@pytest.fixture
def publish_flow(stack: Stack) -> str:
    """statemachines/publish.asl.json as shipped, its substitutions pointing at test-only handlers."""
    fakes = {
        "VerifyFunctionArn": fake_function(stack, "FakeVerify", "verify").arn,
        "PublishFunctionArn": fake_function(stack, "FakePublish", "publish").arn,
        "RejectFunctionArn": fake_function(stack, "FakeReject", "reject").arn,
    }
    return create_state_machine(
        boto3.client("stepfunctions"),
        name="publish-with-fakes",
        definition=PUBLISH_ASL,
        substitutions=fakes,
        role_arn="arn:aws:iam::123456789012:role/test",
    )


PUBLISH_INPUT = {"tenant": "t-acme", "uploadId": "up-1", "token": "tok-1"}


def test_publish_flow_accepted_goes_to_publish(publish_flow: str) -> None:
    execution = run(publish_flow, {**PUBLISH_INPUT, "scenario": "accept"})

    output = json.loads(execution["output"])
    assert execution["status"] == "SUCCEEDED"
    assert output["verify"] == {"verdict": "accepted", "contentDigest": "0" * 64}
    assert output["publish"] == {"published": "up-1"}
    assert "error" not in output
    (published,) = lambdas.invocations("FakePublish")
    assert published.event["verify"]["verdict"] == "accepted"
    assert lambdas.invocations("FakeReject") == []


def test_publish_flow_rejected_verdict_goes_to_reject(publish_flow: str) -> None:
    execution = run(publish_flow, {**PUBLISH_INPUT, "scenario": "reject"})

    assert execution["status"] == "SUCCEEDED"
    (rejected,) = lambdas.invocations("FakeReject")
    # The handler's dict arrives unchanged at $.verify (the reject handler reads code/detail from it).
    assert rejected.event["verify"] == {
        "verdict": "rejected",
        "code": "digest_mismatch",
        "detail": "SKILL.md: sha256 differs",
    }
    assert "error" not in rejected.event
    assert lambdas.invocations("FakePublish") == []


@pytest.mark.parametrize(
    ("scenario", "failing", "calls"),
    [("transient", "FakeVerify", 4), ("publish_transient", "FakePublish", 4)],
)
def test_publish_flow_exhausted_transient_retries_defer_and_never_reject(
    publish_flow: str, scenario: str, failing: str, calls: int
) -> None:
    execution = run(publish_flow, {**PUBLISH_INPUT, "scenario": scenario})

    # issue 20: a transient failure past the retries is not a verdict: the upload stays verifying (the sweep
    # starts verification again, publishing.resumption), nothing is rejected
    assert (execution["status"], execution["error"]) == ("FAILED", "Deferred")
    assert len(lambdas.invocations(failing)) == calls
    assert devstack.retry_clock().waits == [1.0, 2.0, 4.0]
    assert lambdas.invocations("FakeReject") == []


# ------------------------------------------------------------------ (3) counting requests


def test_counts_requests_by_service_and_operation(stack: Stack) -> None:
    # Given clients created before counting starts (as a data access layer caches them)
    ddb = boto3.session.Session().client("dynamodb")
    s3 = devstack.observe(boto3.client("s3"))  # observe() on a hooked client must not double count
    key = {"pk": {"S": "T#t-acme"}, "sk": {"S": "UPLOAD#1"}}

    # When code makes requests
    with devstack.count_aws_requests() as counter:
        ddb.put_item(TableName=stack.table_name, Item=key)
        ddb.put_item(TableName=stack.table_name, Item={**key, "sk": {"S": "UPLOAD#2"}})
        ddb.get_item(TableName=stack.table_name, Key=key)
        ddb.query(
            TableName=stack.table_name,
            KeyConditionExpression="pk = :pk",
            ExpressionAttributeValues={":pk": {"S": "T#t-acme"}},
        )
        s3.put_object(Bucket=stack.bucket_name, Key="blobs/t-acme/sha256/00", Body=b"x")
        s3.get_object(Bucket=stack.bucket_name, Key="blobs/t-acme/sha256/00")["Body"].read()
    ddb.get_item(TableName=stack.table_name, Key=key)  # after the block: not counted

    # Then each is counted once, by operation and by service
    assert counter == Counter(
        {
            ("dynamodb", "PutItem"): 2,
            ("dynamodb", "GetItem"): 1,
            ("dynamodb", "Query"): 1,
            ("s3", "PutObject"): 1,
            ("s3", "GetObject"): 1,
        }
    )
    assert counter.by_service() == Counter({"dynamodb": 4, "s3": 2})
    assert counter.of("dynamodb") == 4
    table = counter.table()
    assert "dynamodb PutItem" in table
    assert table.splitlines()[-1].split() == ["all", "services", "6"]


def test_counts_handler_requests_made_inside_executions(stack: Stack, tmp_path: Path) -> None:
    recorder = fake_function(stack, "Recorder", "record")
    machine = throwaway_machine(
        tmp_path,
        "record",
        {"StartAt": "Record", "States": {"Record": invoke_task("${RecorderArn}", End=True)}},
        {"RecorderArn": recorder.arn},
    )

    with devstack.count_aws_requests() as counter:
        execution = run(machine, {"uploadId": "u-3"})

    assert execution["status"] == "SUCCEEDED"
    assert counter[("dynamodb", "PutItem")] == 1
    assert counter[("stepfunctions", "StartExecution")] == 1
    # The interpreter's own Lambda call is the Task dispatch, not a request of the code under test.
    assert ("lambda", "Invoke") not in counter
    assert counter.dispatched == Counter({("lambda", "Invoke"): 1})
