"""Least privilege, proven by observation: every role in template.yaml allows what its function or state machine does,
and grants nothing it does not use unless the template says why.

moto does not enforce IAM, so a missing permission would only show after ``sam deploy``, and an excessive one never.

* **Functions are checked from what they do.** The journeys below run every handler through its paths: publish,
  already-held content, a rejected upload, a copy whose checksum differs (then the same content again), a staged
  archive gone before verification, yank, an expired session; installs waiting for consent that are approved,
  rejected, superseded and timed out, a Consent task retried; update, rollback, archive, restore, promote,
  previews, uninstall; a deferred and resumed operation, an operation taken over after a lost settle; every query
  route; and the sweeps (expired upload, verification whose runs never ran rejected once its resumes are spent,
  operation never started, settle lost, a consent wait that timed out while Settle was down). Each AWS call is
  recorded with the function whose handler made it (:func:`devstack.counting.record_aws_calls`), mapped to the IAM
  actions and resources AWS authorizes it against (:func:`devstack.iam.needs_of`: a transaction's items, an index's
  ARN, a copy's source and target, a presigned URL's signed action), and checked against the function's role as
  the SAM translator expands template.yaml, its intrinsics resolved to this local stack's physical names and ARNs.
* **State machines are checked from their definitions**: moto's interpreter invokes Lambda without a role, so what a
  machine's role needs is derived from its ASL (every function a Task invokes, ``lambda:invoke.waitForTaskToken``'s
  ``FunctionName`` included) and its ``Logging`` (vended-log delivery); the invocations observed are checked to be
  among them.
* **Both directions.** A call the role does not allow fails the test. A grant — one (action, resource) pair of a
  statement — that no observed call and no definition uses fails it too, unless it is in :data:`UNEXERCISED` with a
  reason *and* its statement carries a reason comment in template.yaml. A stale :data:`UNEXERCISED` entry fails.

What no journey does is not observed: a handler that grows a path with a new kind of call needs a journey step (the
test then fails until the role allows it). The template is expanded by the SAM translator in-process when
``samtranslator`` imports, else by ``.venv-sam``'s (:mod:`devstack.sam_transform`, the translator sam-cli deploys with).

The report (per function: actions observed; per role: grants unused) is printed by
``test_no_role_grants_what_nothing_uses_unless_the_template_says_why`` (``pytest -s`` shows it).
``pytest -p tests.support.iam_observer tests/integration`` records the same for the whole integration suite.
"""

from __future__ import annotations

import json
import random
from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import boto3
import pytest

import devstack
from devstack import iam, lambdas
from devstack.api import LocalApi
from devstack.caller import Caller
from devstack.counting import AwsCall, record_aws_calls
from packyard import clock, config
from packyard.consent import waiting as consent_waiting
from packyard.errors import TransientStoreError
from packyard.operations import commit, settlement
from packyard.publishing import file_pack, resumption, verification
from packyard.store import aws, workflows
from packyard.store.due import DueKind
from packyard_cli.build import build_from_files
from tests.support.sweeping import run_maintenance, sweep_kinds

pytestmark = pytest.mark.xdist_group("iam")

_TEMPLATE = devstack.load_template(devstack.DEFAULT_TEMPLATE)["Resources"]
# the functions the journeys' stack (the template's defaults) has; TokenClaimsFunction exists only with
# CreateUserPool=true, and tests/integration/test_user_pool.py checks it makes no AWS call and its role grants nothing
FUNCTIONS = sorted(k for k, v in _TEMPLATE.items() if v["Type"] == "AWS::Serverless::Function" and "Condition" not in v)
MACHINES = sorted(k for k, v in _TEMPLATE.items() if v["Type"] == "AWS::Serverless::StateMachine")

FUNCTION_MANAGED = {
    "arn:aws:iam::aws:policy/service-role/AWSLambdaBasicExecutionRole",  # the runtime's own logs
    "arn:aws:iam::aws:policy/AWSXrayWriteOnlyAccess",  # Tracing: Active
}
MACHINE_MANAGED = {"arn:aws:iam::aws:policy/AWSXrayWriteOnlyAccess"}  # Tracing: Enabled

# Grants no journey can exercise, each with why it stays: (owner, statement Sid, action, resource as ${…}) → reason;
# the statement must also carry a comment in template.yaml saying so. Empty today: every grant is exercised, the
# task-token callbacks on "*" included (approve, reject, a superseded wait).
UNEXERCISED: dict[tuple[str, str, str, str], str] = {
    (
        "SweeperFunction",
        "SettleWhatIsDue",
        "dynamodb:ConditionCheckItem",
        "arn:aws:dynamodb:${AWS::Region}:${AWS::AccountId}:table/${PackyardTable}",
    ): (
        "the sweep settles an operation committed before commits settled (confirming the installation), or one "
        "planned and out of restarts (taking back its holds): the journeys' commits settle themselves and no run "
        "dies past the restart limit"
    ),
    ("CatalogFunction", "ReadAttestations", "s3:GetObject", "arn:aws:s3:::${PackyardBucket}/attestations/*"): (
        "only releases signed by KMS itself, before short-lived keys, have an envelope object; the journeys publish "
        "new releases (test_signing reads such an old release through the route)"
    ),
}

TENANT = "t-iam"
HOUR = 3600
DAY = 24 * HOUR


# ------------------------------------------------------------------ the journeys


def _v(files: bytes, *permissions: dict[str, str]) -> Any:
    return build_from_files({"SKILL.md": files}, permissions=list(permissions) or [{"kind": "api_read"}])


API_READ = {"kind": "api_read"}
NETWORK = {"kind": "network", "resource": "api.example"}


def _ok(response: Any, *statuses: int) -> Any:
    assert response.status in (statuses or (200, 201, 202)), (response.status, response.body)
    return response.body


def _published(upload: dict[str, Any]) -> dict[str, Any]:
    assert upload["state"] == "published", upload  # a rejected one says why
    return upload


def _op(acme: Caller, ws: str, op: dict[str, Any]) -> dict[str, Any]:
    body: dict[str, Any] = _ok(acme.get(f"/v1/workspaces/{ws}/operations/{op['operationId']}"), 200)
    return body


def _version(acme: Caller, ws: str, installation: str) -> str:
    return str(_ok(acme.get(f"/v1/workspaces/{ws}/installations/{installation}"), 200)["version"])


def _post(acme: Caller, ws: str, installation: str, action: str, key: str, body: Any = None) -> Any:
    headers = {"Idempotency-Key": key, "If-Match": f'"{_version(acme, ws, installation)}"'}
    return acme.post(f"/v1/workspaces/{ws}/installations/{installation}/{action}", body, headers=headers)


def _decided(
    acme: Caller, ws: str, admitted: Any, decision: str, *, retry_consent_task: bool = False
) -> dict[str, Any]:
    waiting = acme.wait_for_consent(ws, admitted)
    assert waiting["state"] == "awaiting_consent", waiting
    if retry_consent_task:
        _consent_task_again(acme.api.stack, ws, waiting)
    _ok(acme.decide(ws, waiting, decision), 200)
    return acme.wait_settled(ws, acme.get(f"/v1/workspaces/{ws}/operations/{waiting['operationId']}"))


def _consent_task_again(stack: devstack.Stack, ws: str, waiting: dict[str, Any]) -> None:
    """The Consent task runs again for a wait it already recorded, as Step Functions' Retry (or an Express
    duplicate) would after a lost answer: it reads the operation and finds the wait recorded."""
    event = {
        "tenant": TENANT,
        "workspace": ws,
        "installationId": waiting["installationId"],
        "operationId": waiting["operationId"],
    }
    assert lambdas.invoke_handler(stack.functions["ConsentFunction"], event) == {"waiting": True, "replay": True}


def publishing(stack: devstack.Stack, acme: Caller, mp: pytest.MonkeyPatch) -> None:
    """Publish, republish, already-held content, a rejected upload, a copy whose checksum differs and the same
    content published after it (orphan blob records), yank, expiry."""
    v1 = _v(b"v1\n")
    _published(acme.publish("hello", "1.0.0", v1))
    _published(acme.publish("hello", "1.1.0", _v(b"v1.1\n", API_READ, NETWORK)))
    _ok(acme.request_upload("hello", "1.0.0", v1), 200)  # identical content again: the release
    held = _ok(acme.request_upload("hello", "1.0.1", v1), 201)  # content the tenant holds: no upload
    assert held["uploadRequired"] is False
    _published(acme.complete_and_wait(held["uploadId"]))

    session = _ok(acme.request_upload("hello", "2.0.0", _v(b"v2\n")), 201)
    assert acme.post(f"/v1/uploads/{session['uploadId']}/complete").code == "upload_incomplete"  # HEAD: 404
    acme.put_archive(session, b"not the archive the manifest describes")
    assert acme.complete_and_wait(session["uploadId"])["state"] == "rejected"

    # S3's checksum of the copy differs from the verified digest: Publish deletes the bad copy, the upload is rejected
    tampered: list[str] = []

    def bad_checksum(parsed: dict[str, Any] | None = None, **_: Any) -> None:
        if parsed is not None and not tampered:
            tampered.append("once")
            parsed.setdefault("CopyObjectResult", {})["ChecksumSHA256"] = "AAAA"

    s3 = aws.client("s3")
    s3.meta.events.register("after-call.s3.CopyObject", bad_checksum, unique_id="iam-bad-checksum")
    # an archive large enough to have a file pack (file_pack.packs), so the orphan's pack is asked for below
    packed = build_from_files(
        {"SKILL.md": b"v1.2\n", "data.bin": random.Random(12).randbytes(file_pack.PACKED_ARCHIVE_MIN_BYTES + 1)},
        permissions=[API_READ],
    )
    try:
        refused = acme.publish("hello", "1.2.0", packed)
    finally:
        s3.meta.events.unregister("after-call.s3.CopyObject", unique_id="iam-bad-checksum")
    assert tampered == ["once"]
    assert (refused["state"], refused["rejection"]["subCode"]) == ("rejected", "digest_mismatch")
    # the same content again: its blob records are the refused publish's orphans, so Publish asks S3 whether their
    # objects are there before writing them (the archive blob's HEAD and its pack's: both 404, the bad copy is gone)
    _published(acme.publish("hello", "1.2.0", packed))

    # the staged archive vanishes between complete and verification: Verify reads a 404 and rejects the upload
    vanishing = _v(b"vanishing\n")
    gone = _ok(acme.request_upload("hello", "2.1.0", vanishing), 201)
    acme.put_archive(gone, vanishing.archive)
    started: list[tuple[str, str, dict[str, Any]]] = []
    mp.setattr(workflows, "start", lambda *args: started.append(args) or workflows.execution_arn(args[0], args[1]))
    _ok(acme.post(f"/v1/uploads/{gone['uploadId']}/complete"), 202)
    mp.undo()
    s3_test = boto3.client("s3", region_name=stack.region)
    for key in [o["Key"] for o in s3_test.list_objects_v2(Bucket=stack.bucket_name, Prefix="uploads/")["Contents"]]:
        if gone["uploadId"] in key and key.endswith("archive.tar.gz"):
            s3_test.delete_object(Bucket=stack.bucket_name, Key=key)
    ((machine, name, payload),) = started
    execution = boto3.client("stepfunctions", region_name=stack.region).start_execution(
        stateMachineArn=machine, name=name, input=json.dumps(payload, sort_keys=True)
    )
    devstack.wait_for_execution(execution["executionArn"], timeout=60)
    assert _ok(acme.get(f"/v1/uploads/{gone['uploadId']}"), 200)["state"] == "rejected"

    _published(acme.publish("hello", "0.9.0", _v(b"v0.9\n")))
    assert _ok(acme.delete("/v1/packages/hello/versions/0.9.0"), 200)["status"] == "yanked"

    late = _ok(acme.request_upload("hello", "3.0.0", _v(b"v3\n")), 201)
    acme.put_archive(late, _v(b"v3\n").archive)
    later = clock.now() + HOUR
    mp.setattr(clock, "now", lambda: later)
    assert acme.post(f"/v1/uploads/{late['uploadId']}/complete").code == "upload_expired"
    mp.undo()

    for path in (
        "/v1/packages",
        "/v1/packages/hello",
        "/v1/packages/hello/versions",
        "/v1/packages/hello/versions/1.0.0",
        "/v1/packages/hello/versions/1.0.0/archive",
        "/v1/packages/hello/versions/1.0.0/attestation",
        "/v1/signing-keys",
        f"/v1/uploads/{session['uploadId']}",
        "/v1/usage",
    ):
        _ok(acme.get(path), 200)


def installations(stack: devstack.Stack, acme: Caller, mp: pytest.MonkeyPatch) -> None:
    """Consent approved and rejected, update, preview, rollback, archive, restore, promote, uninstall, every read."""
    ws = "ws-iam"
    first = acme.install(ws, "hello", "hello", "1.0.0", key="k-1")
    assert _decided(acme, ws, first, "approve", retry_consent_task=True)["outcome"] == {"result": "succeeded"}
    _ok(acme.get(f"/v1/workspaces/{ws}/approvals"), 200)
    update = acme.install(ws, "hello", "hello", "1.1.0", key="k-2", if_match='"1"')
    assert _decided(acme, ws, update, "reject")["outcome"]["code"] == "consent_rejected"
    update = acme.install(ws, "hello", "hello", "1.1.0", key="k-3", if_match='"1"')
    assert _decided(acme, ws, update, "approve")["outcome"] == {"result": "succeeded"}

    _ok(_post(acme, ws, "hello", "preview", "k-preview", {"package": "hello", "version": "1.0.0"}), 200)
    rollback_preview = acme.post(
        f"/v1/workspaces/{ws}/installations/hello/preview",
        {"package": "hello", "version": "1.0.0"},
        query={"action": "rollback"},
    )
    _ok(rollback_preview, 200)  # a preview of a rollback reads the previous release at once
    for action in ("rollback", "archive", "restore"):
        assert acme.wait_settled(ws, _post(acme, ws, "hello", action, f"k-{action}"))["outcome"] == {
            "result": "succeeded"
        }

    task = acme.install(ws, "tasked", "hello", "1.0.0", key="k-task", scope={"kind": "task", "id": "t-1"})
    assert _decided(acme, ws, task, "approve")["outcome"] == {"result": "succeeded"}
    promote = _post(acme, ws, "tasked", "promote", "k-promote", {"scope": {"kind": "workspace"}})
    assert _decided(acme, ws, promote, "approve")["outcome"] == {"result": "succeeded"}

    for path in ("installations", "installations/hello", "resolved", "usage"):
        _ok(acme.get(f"/v1/workspaces/{ws}/{path}"), 200)
    uninstall = acme.uninstall(ws, "tasked", key="k-uninstall", if_match=f'"{_version(acme, ws, "tasked")}"')
    assert acme.wait_settled(ws, uninstall)["outcome"] == {"result": "succeeded"}
    again = acme.uninstall(ws, "never-installed", key="k-nothing")  # settled at admission: not installed
    assert again.status in (200, 202), again.body


def consent_ends(stack: devstack.Stack, acme: Caller, mp: pytest.MonkeyPatch) -> None:
    """A wait superseded after its window; a wait that times out (the sweep settles it: no run waits with it)."""
    ws = "ws-iam-superseded"
    waiting = acme.wait_for_consent(ws, acme.install(ws, "hello", "hello", "1.0.0", key="k-wait"))
    assert waiting["state"] == "awaiting_consent"
    later = clock.now() + 8 * DAY
    mp.setattr(clock, "now", lambda: later)
    again = _ok(acme.install(ws, "hello", "hello", "1.0.0", key="k-again"), 202)
    assert again["supersedes"] == waiting["operationId"]
    mp.undo()

    ws = "ws-iam-timeout"
    mp.setenv("PACKYARD_CONSENT_WINDOW_SECONDS", "1")
    config.reset()
    admitted = acme.install(ws, "hello", "hello", "1.0.0", key="k-timeout")
    waiting = acme.wait_for_consent(ws, admitted, timeout=60)
    mp.undo()
    config.reset()
    assert waiting["state"] == "awaiting_consent"
    run_maintenance(stack, clock.now() + 2)
    assert _op(acme, ws, waiting)["outcome"]["code"] == "consent_expired"


def recovery(stack: devstack.Stack, acme: Caller, mp: pytest.MonkeyPatch) -> None:
    """A commit failing past its retries defers the operation; the same key resumes it; so does a consent wait
    whose task's answers kept failing (its wait dropped by Settle). A lost settle (after a commit that broke) is taken
    over by the same key once the lease ran out (past its lease no run is left: nothing is looked up). A commit
    refused after it held its release: its settlement takes the hold back."""
    ws = "ws-iam-recovery"
    acme.publish("plain", "1.0.0", build_from_files({"SKILL.md": b"plain\n"}))

    def flaky_commit(*args: object, **kwargs: object) -> dict[str, Any]:
        raise TransientStoreError("DynamoDB: ThrottlingException")

    mp.setattr(commit, "commit_task", flaky_commit)
    deferred = acme.wait_settled(ws, acme.install(ws, "plain", "plain", "1.0.0", key="k-flaky"))
    assert deferred["state"] == "pending"
    mp.undo()
    assert acme.wait_settled(ws, acme.install(ws, "plain", "plain", "1.0.0", key="k-flaky"))["outcome"] == {
        "result": "succeeded"
    }

    # the consent task records the wait, then its answers keep failing: past its retries Settle defers the
    # operation and drops its wait; the same key resumes it and it waits again
    real_wait = consent_waiting.await_consent

    def wait_answer_lost(*args: Any, **kwargs: Any) -> dict[str, Any]:
        real_wait(*args, **kwargs)
        raise TransientStoreError("DynamoDB: ThrottlingException")

    mp.setattr(consent_waiting, "await_consent", wait_answer_lost)
    asking = _ok(acme.install(ws, "asks", "hello", "1.0.0", key="k-asks"), 202)
    # the run ends past the task's retries (each retry records the wait again first, so the operation reads
    # awaiting_consent until then): wait for the run, not for the first read that says awaiting_consent
    install_machine = stack.state_machine_arns["InstallStateMachine"]
    devstack.wait_for_execution(workflows.execution_arn(install_machine, asking["operationId"]), timeout=60)
    asks = _op(acme, ws, asking)
    assert asks["state"] == "pending", asks
    mp.undo()
    assert acme.wait_for_consent(ws, acme.install(ws, "asks", "hello", "1.0.0", key="k-asks"))["state"] == (
        "awaiting_consent"
    )

    def broken_settle(*args: object, **kwargs: object) -> dict[str, Any]:
        raise RuntimeError("settlement is down")

    # (a commit settles what it commits, so the lost settle is of a run whose commit broke too)
    mp.setattr(commit, "commit_task", broken_settle)
    mp.setattr(settlement, "settle_task", broken_settle)
    lost = _ok(acme.install(ws, "other", "plain", "1.0.0", key="k-lost"), 202)
    machine = stack.state_machine_arns["InstallStateMachine"]
    assert devstack.wait_for_execution(workflows.execution_arn(machine, lost["operationId"]), timeout=60)
    mp.undo()
    later = clock.now() + HOUR
    mp.setattr(clock, "now", lambda: later)
    taken_over = acme.install(ws, "other", "plain", "1.0.0", key="k-lost")
    assert taken_over.body["attempt"] == 1, taken_over.body
    mp.undo()
    assert acme.wait_settled(ws, taken_over)["outcome"] == {"result": "succeeded"}

    # two installs admitted under a limit of one, before either runs: the second's commit is refused after it held
    # its release, and its settlement takes the hold back (reclaims.drop_hold)
    refused_ws = "ws-iam-refused"
    mp.setenv("PACKYARD_MAX_INSTALLATIONS_PER_WORKSPACE", "1")
    config.reset()
    started: list[tuple[str, str, dict[str, Any]]] = []
    with mp.context() as patched:
        patched.setattr(workflows, "start", lambda arn, name, payload: started.append((arn, name, payload)) or name)
        first = acme.install(refused_ws, "first", "plain", "1.0.0", key="k-first")
        second = acme.install(refused_ws, "second", "plain", "1.0.0", key="k-second")
    workflows.start(*started[0])
    assert acme.wait_settled(refused_ws, first)["outcome"] == {"result": "succeeded"}
    workflows.start(*started[1])
    assert acme.wait_settled(refused_ws, second)["outcome"]["code"] == "limit_exceeded"
    mp.delenv("PACKYARD_MAX_INSTALLATIONS_PER_WORKSPACE")
    config.reset()


def sweeps(stack: devstack.Stack, acme: Caller, mp: pytest.MonkeyPatch) -> None:
    """The maintenance sweeps: an abandoned session expires, a verification whose runs never ran is rejected once its
    resumes are spent, a verification a transient failure stopped past its retries (Deferred) is started again, an
    operation whose workflow never started is started, a committed operation whose settle was lost is settled, a
    wait for consent that timed out while Settle was down is settled consent_expired."""
    ws = "ws-iam-sweep"
    built = _v(b"never verified\n")
    never = _ok(acme.request_upload("unverified", "1.0.0", built), 201)
    acme.put_archive(never, built.archive)
    mp.setattr(workflows, "start", lambda *args: "never started")
    _ok(acme.post(f"/v1/uploads/{never['uploadId']}/complete"), 202)
    # its resumes spent in-process (each renewal's run never starts), before anything else is due
    window = config.limits().reservation_ttl_seconds
    for renewal in range(resumption.MAX_RESUMES):
        assert sweep_kinds([DueKind.UPLOAD], clock.now() + (renewal + 1) * window)["resumed"] == 1
    orphan = _ok(acme.install(ws, "orphan", "plain", "1.0.0", key="k-orphan"), 202)
    mp.undo()
    _ok(acme.request_upload("abandoned", "1.0.0", _v(b"abandoned\n")), 201)

    def verify_down(*args: object, **kwargs: object) -> dict[str, Any]:
        raise TransientStoreError("DynamoDB: ThrottlingException")

    built = _v(b"deferred\n")
    deferred = _ok(acme.request_upload("deferred", "1.0.0", built), 201)
    acme.put_archive(deferred, built.archive)
    mp.setattr(verification, "verify", verify_down)
    started = _ok(acme.post(f"/v1/uploads/{deferred['uploadId']}/complete"), 202)
    assert devstack.wait_for_execution(started["executionArn"], timeout=60)["error"] == "Deferred"
    mp.undo()

    def broken_settle(*args: object, **kwargs: object) -> dict[str, Any]:
        raise RuntimeError("settlement is down")

    mp.setattr(settlement, "settle_task", broken_settle)
    stuck = _ok(acme.install(ws, "stuck", "plain", "1.0.0", key="k-stuck"), 202)
    machine = stack.state_machine_arns["InstallStateMachine"]
    devstack.wait_for_execution(workflows.execution_arn(machine, stuck["operationId"]), timeout=60)
    mp.undo()

    # a wait for consent that timed out while Settle was down: the execution failed, the sweep settles it
    mp.setenv("PACKYARD_CONSENT_WINDOW_SECONDS", "1")
    config.reset()
    mp.setattr(settlement, "settle_task", broken_settle)
    waiting = _ok(acme.install(ws, "waiting", "hello", "1.0.0", key="k-waiting"), 202)
    devstack.wait_for_execution(workflows.execution_arn(machine, waiting["operationId"]), timeout=60)
    mp.undo()
    config.reset()
    assert _op(acme, ws, waiting)["state"] == "awaiting_consent"

    run_maintenance(stack, clock.now() + (resumption.MAX_RESUMES + 2) * window)

    assert _ok(acme.get(f"/v1/uploads/{never['uploadId']}"), 200)["state"] == "rejected"
    publish_machine = stack.state_machine_arns["PublishStateMachine"]
    resumed = workflows.execution_arn(publish_machine, resumption.attempt_names(deferred["uploadId"])[1])
    assert devstack.wait_for_execution(resumed, timeout=60)["status"] == "SUCCEEDED"
    _published(_ok(acme.get(f"/v1/uploads/{deferred['uploadId']}"), 200))
    assert _op(acme, ws, stuck)["state"] == "settled"
    assert _op(acme, ws, waiting)["outcome"]["code"] == "consent_expired"
    assert acme.wait_settled(ws, acme.get(f"/v1/workspaces/{ws}/operations/{orphan['operationId']}"))["outcome"] == {
        "result": "succeeded"
    }


def scrub(stack: devstack.Stack, acme: Caller, mp: pytest.MonkeyPatch) -> None:
    """The integrity scrub a scrub interval later: healthy blobs re-hashed, missing ones (the archive and the
    manifest) mark their release unavailable and the installation of it needing attention, until the same bytes
    uploaded again heal it; the catalogue reads the
    missing manifest as absent (a 404, which S3 answers only to a role allowed s3:ListBucket: else 403, a 500)."""
    ws = "ws-iam-scrub"
    published = acme.publish("scrubbed", "1.0.0", _v(b"to rot\n"))
    assert acme.wait_settled(ws, acme.install(ws, "scrubbed", "scrubbed", "1.0.0", key="k-scrub"))["outcome"] == {
        "result": "succeeded"
    }
    s3 = boto3.client("s3", region_name=stack.region)
    for digest in (published["archive"]["sha256"], published["manifestDigest"]):
        s3.delete_object(Bucket=stack.bucket_name, Key=f"blobs/{TENANT}/sha256/{digest}")

    run_maintenance(stack, clock.now() + 8 * 24 * HOUR)

    assert _ok(acme.get("/v1/packages/scrubbed/versions/1.0.0"), 200)["status"] == "unavailable"
    assert _ok(acme.get(f"/v1/workspaces/{ws}/installations/scrubbed"), 200)["status"] == "needs_attention"

    # healed: the same bytes uploaded again are verified and written over the missing blobs; the release is
    # published again, its installation active (by Publish itself, and the cleanup job the sweep then runs)
    _published(acme.publish("scrubbed", "1.0.0", _v(b"to rot\n")))
    assert _ok(acme.get(f"/v1/workspaces/{ws}/installations/scrubbed"), 200)["status"] == "active"
    assert run_maintenance(stack, clock.now() + 60)["done"] >= 1


def manifest_reads(stack: devstack.Stack, acme: Caller, mp: pytest.MonkeyPatch) -> None:
    """A manifest gone from storage, found by the version route, the resolved view and planning (each hash-checks
    it before use): the release is marked unavailable and its installation needing attention at once."""
    ws = "ws-iam-manifests"
    s3 = boto3.client("s3", region_name=stack.region)
    digests = {}
    for name in ("read", "resolved", "planned"):
        digests[name] = acme.publish(f"m-{name}", "1.0.0", build_from_files({"SKILL.md": name.encode()}))[
            "manifestDigest"
        ]
        settled = acme.wait_settled(ws, acme.install(ws, f"m-{name}", f"m-{name}", "1.0.0", key=f"k-m-{name}"))
        assert settled["outcome"] == {"result": "succeeded"}

    def lose(name: str) -> None:
        s3.delete_object(Bucket=stack.bucket_name, Key=f"blobs/{TENANT}/sha256/{digests[name]}")

    lose("read")
    assert _ok(acme.get("/v1/packages/m-read/versions/1.0.0"), 200)["status"] == "unavailable"
    lose("resolved")
    resolved = _ok(acme.get(f"/v1/workspaces/{ws}/resolved"), 200)
    assert [entry["installationId"] for entry in resolved["items"]] == ["m-planned"]
    lose("planned")
    refused = acme.wait_settled(ws, acme.install(ws, "m-planned-2", "m-planned", "1.0.0", key="k-m-planned-2"))
    assert refused["outcome"]["code"] == "release_unavailable"
    assert _ok(acme.get(f"/v1/workspaces/{ws}/installations/m-planned"), 200)["status"] == "needs_attention"


def file_reads(stack: devstack.Stack, acme: Caller, mp: pytest.MonkeyPatch) -> None:
    """One file of a release and of an installation (packed, and a large file's own object); a pack altered in
    storage marks its release (the scrub's writes); a release without a pack is read from its archive."""
    ws = "ws-iam-files"
    big = bytes(range(256)) * (4 * 4096 + 1)  # just over 4 MiB: its own object, answered by a redirect
    built = build_from_files({"SKILL.md": b"files\n", "big.bin": big})
    _published(acme.publish("filed", "1.0.0", built))
    assert acme.wait_settled(ws, acme.install(ws, "filed", "filed", "1.0.0", key="k-filed"))["outcome"] == {
        "result": "succeeded"
    }
    assert acme.get("/v1/packages/filed/versions/1.0.0/files/SKILL.md").status == 200
    assert acme.get(f"/v1/workspaces/{ws}/installations/filed/files/big.bin").status == 307
    s3 = boto3.client("s3", region_name=stack.region)
    pack = f"files/{TENANT}/{built.archive_sha256}/pack"
    s3.delete_object(Bucket=stack.bucket_name, Key=pack)
    from packyard.publishing import files

    files.forget_cached()
    assert acme.get("/v1/packages/filed/versions/1.0.0/files/SKILL.md").status == 200  # from the archive
    s3.put_object(Bucket=stack.bucket_name, Key=pack, Body=b"not a pack")
    files.forget_cached()
    assert acme.get("/v1/packages/filed/versions/1.0.0/files/SKILL.md").code == "release_unavailable"


JOURNEYS: list[Callable[[devstack.Stack, Caller, pytest.MonkeyPatch], None]] = [
    publishing,
    installations,
    consent_ends,
    recovery,
    sweeps,
    scrub,
    manifest_reads,
    file_reads,
]


# ------------------------------------------------------------------ what was observed


@dataclass
class Observation:
    stack: devstack.Stack
    calls: list[AwsCall]
    roles: dict[str, iam.Role]
    needs: dict[str, set[iam.Need]] = field(default_factory=lambda: defaultdict(set))
    unmapped: list[str] = field(default_factory=list)

    def sym(self, text: str) -> str:
        return iam.symbolic(text, self.stack)


@pytest.fixture(scope="module")
def observed() -> Iterator[Observation]:
    with (
        devstack.local_aws() as stack,
        iam.attributing_invocations(),
        record_aws_calls() as recorder,
        pytest.MonkeyPatch.context() as mp,
    ):
        acme = Caller(LocalApi(stack), TENANT)
        for journey in JOURNEYS:
            journey(stack, acme, mp)
            mp.undo()
        calls = list(recorder.calls)
    observation = Observation(stack, calls, iam.roles(iam.expand_template(), stack))
    for call in calls:
        if call.principal is None or call.internal:
            continue
        try:
            observation.needs[call.principal].update(iam.needs_of(call, stack.region, stack.account))
        except iam.UnmappedCall as exc:
            observation.unmapped.append(f"{call.principal}: {exc}")
    for machine, needs in iam.machine_needs(stack).items():
        observation.needs[machine].update(needs)
    yield observation


# ------------------------------------------------------------------ the checks


def test_every_function_ran_and_every_call_it_made_maps_to_iam_actions(observed: Observation) -> None:
    assert observed.unmapped == []
    ran = {c.principal for c in observed.calls if c.principal is not None}
    assert sorted(set(FUNCTIONS) - ran) == [], "functions no journey ran: their roles are unchecked"


@pytest.mark.parametrize("function", FUNCTIONS)
def test_the_role_of_each_function_allows_every_action_it_was_seen_to_perform(
    observed: Observation, function: str
) -> None:
    role = observed.roles[function]
    missing = sorted(observed.sym(f"{n.action} {n.resource}") for n in observed.needs[function] if not role.allows(n))
    assert missing == [], f"{function}'s role ({role.role}) lacks what its handler does"


@pytest.mark.parametrize("machine", MACHINES)
def test_the_role_of_each_state_machine_allows_what_its_definition_invokes(observed: Observation, machine: str) -> None:
    role = observed.roles[machine]
    missing = sorted(observed.sym(f"{n.action} {n.resource}") for n in observed.needs[machine] if not role.allows(n))
    assert missing == [], f"{machine}'s role ({role.role}) lacks what its definition invokes"


def test_state_machines_invoked_only_functions_their_definitions_name(observed: Observation) -> None:
    named = {n.resource for m in MACHINES for n in observed.needs[m] if n.action == "lambda:InvokeFunction"}
    invoked = set()
    for call in observed.calls:
        if call.internal and call.operation == "Invoke":
            (need,) = iam.needs_of(call, observed.stack.region, observed.stack.account)
            invoked.add(need.resource)
    assert invoked and invoked <= named


def test_roles_carry_only_the_runtime_managed_policies(observed: Observation) -> None:
    for owner, role in observed.roles.items():
        expected = FUNCTION_MANAGED if role.kind == "function" else MACHINE_MANAGED
        assert set(role.managed) == expected, owner


def test_no_role_grants_what_nothing_uses_unless_the_template_says_why(observed: Observation) -> None:
    reasons = iam.reason_comments()
    unused: dict[tuple[str, str, str, str], iam.Grant] = {}
    for owner in [*FUNCTIONS, *MACHINES]:
        for grant in iam.unused_grants(observed.roles[owner], observed.needs[owner]):
            unused[(grant.owner, grant.statement, grant.action, observed.sym(grant.resource))] = grant
    print("\n" + report(observed, sorted(unused)))

    unexplained = sorted(k for k in unused if k not in UNEXERCISED)
    assert unexplained == [], "granted but never used: narrow the role, or say why in the template and UNEXERCISED"
    stale = sorted(k for k in UNEXERCISED if k not in unused)
    assert stale == [], "UNEXERCISED lists grants that are used now, or no longer granted: remove them"
    uncommented = sorted(k for k in unused if (k[0], k[1]) not in reasons)
    assert uncommented == [], "an unused grant's statement needs a comment in template.yaml saying why it stays"


def wide(observed: Observation, roles: dict[str, iam.Role], template: Any = devstack.DEFAULT_TEMPLATE) -> list[str]:
    """Grants wider than the calls observed need (symbolic), less those the template says why it keeps."""
    stated = iam.stated_wider(template)
    reach = iam.probes(observed.stack, template)
    found = []
    for owner in [*FUNCTIONS, *MACHINES]:
        for wider in iam.wider_grants(roles[owner], observed.needs[owner], observed.stack, reach):
            grant = wider.grant
            if (grant.owner, grant.statement, grant.action) not in stated:
                found.append(
                    f"{owner} / {grant.statement}: {grant.action} on {observed.sym(grant.resource)} "
                    f"also reaches {', '.join(wider.beyond)}"
                )
    return found


def test_no_role_grants_a_wider_resource_than_its_calls_need_unless_the_template_says_why(
    observed: Observation,
) -> None:
    assert wide(observed, observed.roles) == [], "narrow the resource, or say why in the resource's Metadata"


# the widenings the check must catch: (function, statement Sid, the wider Resource, a kind it then reaches)
WIDENINGS = [
    ("VerifyFunction", "ReadStagedAndHeldContent", {"Fn::Sub": "${PackyardBucket.Arn}/*"}, f"/{iam.OTHER}/*"),
    ("AdmissionFunction", "StartInstallWorkflows", "*", f"stateMachine:{iam.OTHER}"),
]


def _widened_copy(directory: Any, function: str, sid: str, resource: Any, why: str | None = None) -> Any:
    document = devstack.load_template(devstack.DEFAULT_TEMPLATE)
    props = document["Resources"][function]["Properties"]
    (statement,) = [s for p in props["Policies"] for s in p.get("Statement", []) if s.get("Sid") == sid]
    statement["Resource"] = resource
    if why is not None:
        metadata = document["Resources"][function].setdefault("Metadata", {})
        entries = [{"Sid": sid, "Action": a, "Why": why} for a in iam._as_tuple(statement["Action"])]
        metadata.setdefault("packyard", {})["iam-wider"] = entries
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "statemachines").mkdir(exist_ok=True)
    for definition in (devstack.ROOT / "statemachines").glob("*.json"):
        (directory / "statemachines" / definition.name).write_text(definition.read_text())
    path = directory / "template.yaml"
    path.write_text(json.dumps(document))  # JSON is YAML
    return path


@pytest.mark.parametrize(("function", "sid", "resource", "reaches"), WIDENINGS, ids=[w[0] for w in WIDENINGS])
def test_widening_a_grant_fails_the_check_unless_the_template_says_why(
    observed: Observation, tmp_path: Any, function: str, sid: str, resource: Any, reaches: str
) -> None:
    template = _widened_copy(tmp_path / "widened", function, sid, resource)
    roles = iam.roles(iam.expand_template(template), observed.stack, template)
    (found,) = wide(observed, roles, template)
    assert found.startswith(f"{function} / {sid}: ") and reaches in found, found

    stated = _widened_copy(tmp_path / "stated", function, sid, resource, why="needed on every key, because …")
    assert wide(observed, iam.roles(iam.expand_template(stated), observed.stack, stated), stated) == []


def report(observed: Observation, unused: list[tuple[str, str, str, str]]) -> str:
    """Per function and state machine: the actions it needs and on what; then the grants nothing uses, by statement."""
    lines = ["IAM by observation: actions observed (functions) or derived from the definition (state machines)"]
    for owner in [*FUNCTIONS, *MACHINES]:
        by_action: dict[str, set[str]] = defaultdict(set)
        for need in observed.needs[owner]:
            by_action[need.action].add(iam.resource_kind(need.resource, observed.stack))
        lines.append(f"  {owner}: {len(by_action)} actions")
        lines += [f"    {action:<30} {', '.join(sorted(by_action[action]))}" for action in sorted(by_action)]
    lines.append(f"Granted but never used: {len(unused) or 'nothing'}")
    by_statement: dict[tuple[str, str], list[str]] = defaultdict(list)
    for owner, statement, action, resource in unused:
        why = UNEXERCISED.get((owner, statement, action, resource), "NO REASON")
        by_statement[(owner, statement)].append(f"{action} on {resource}: {why}")
    for (owner, statement), entries in sorted(by_statement.items()):
        lines.append(f"  {owner} / {statement}")
        lines += [f"    {entry}" for entry in entries]
    return "\n".join(lines)


# ------------------------------------------------------------------ the checker itself catches both directions


def test_a_call_the_role_does_not_allow_is_caught(observed: Observation) -> None:
    stack = observed.stack
    delete = AwsCall("VerifyFunction", "s3", "DeleteObject", {"Bucket": stack.bucket_name, "Key": "blobs/t/x"})
    scan = AwsCall("QueriesFunction", "dynamodb", "Scan", {"TableName": stack.table_name})
    for call in (delete, scan):
        (need,) = iam.needs_of(call, stack.region, stack.account)
        assert not observed.roles[str(call.principal)].allows(need)


def test_a_grant_nothing_uses_is_caught(observed: Observation) -> None:
    role = observed.roles["VerifyFunction"]
    extra = iam.Statement("VerifyFunction", "extra", "Extra", "Allow", ("s3:PutObject",), ("arn:aws:s3:::b/*",))
    widened = iam.Role(role.owner, role.kind, role.role, (*role.statements, extra), role.managed)
    unused = iam.unused_grants(widened, observed.needs["VerifyFunction"])
    assert iam.Grant("VerifyFunction", "Extra", "s3:PutObject", "arn:aws:s3:::b/*") in unused


def test_the_reason_next_to_a_statement_is_read_from_the_template() -> None:
    reasons = iam.reason_comments()
    assert 'Resource "*"' in reasons[("InstallStateMachine", "DeliverExecutionLogs")]
    assert "s3:ListBucket" in reasons[("PublishFunction", "TellMissingObjects")]


def test_calls_map_to_the_iam_actions_aws_authorizes_them_against() -> None:
    def needs(operation: str, service: str = "s3", **params: Any) -> list[tuple[str, str]]:
        call = AwsCall("F", service, operation, params)
        return [(n.action, n.resource) for n in iam.needs_of(call, "eu-west-1", "111122223333")]

    table = "arn:aws:dynamodb:eu-west-1:111122223333:table/T"
    transaction = [{"Put": {"TableName": "T"}}, {"ConditionCheck": {"TableName": "T"}}, {"Delete": {"TableName": "U"}}]
    assert needs("TransactWriteItems", "dynamodb", TransactItems=transaction) == [
        ("dynamodb:PutItem", table),
        ("dynamodb:ConditionCheckItem", table),
        ("dynamodb:DeleteItem", "arn:aws:dynamodb:eu-west-1:111122223333:table/U"),
    ]
    assert needs("Query", "dynamodb", TableName="T", IndexName="I") == [("dynamodb:Query", f"{table}/index/I")]
    assert needs("BatchGetItem", "dynamodb", RequestItems={"T": {}}) == [("dynamodb:BatchGetItem", table)]
    assert needs("CopyObject", Bucket="b", Key="blobs/x", CopySource="b/uploads/a%20b") == [
        ("s3:GetObject", "arn:aws:s3:::b/uploads/a b"),
        ("s3:PutObject", "arn:aws:s3:::b/blobs/x"),
    ]
    assert needs("DeleteObjects", Bucket="b", Delete={"Objects": [{"Key": "k1"}, {"Key": "k2"}]}) == [
        ("s3:DeleteObject", "arn:aws:s3:::b/k1"),
        ("s3:DeleteObject", "arn:aws:s3:::b/k2"),
    ]
    assert needs("HeadObject", Bucket="b", Key="k") == [("s3:GetObject", "arn:aws:s3:::b/k")]
    missing = AwsCall("F", "s3", "HeadObject", {"Bucket": "b", "Key": "k"}, outcome={"status": 404})
    assert iam.needs_of(missing, "r", "a")[-1] == iam.Need("s3:ListBucket", "arn:aws:s3:::b")
    presigned = AwsCall("F", "s3", "PutObject", {"Bucket": "b", "Key": "k"}, presigned=True)
    assert iam.needs_of(presigned, "r", "a") == [iam.Need("s3:PutObject", "arn:aws:s3:::b/k")]
    assert needs("SendTaskSuccess", "stepfunctions", taskToken="t") == [("states:SendTaskSuccess", "*")]
    with pytest.raises(iam.UnmappedCall):
        needs("PutBucketPolicy", Bucket="b")
