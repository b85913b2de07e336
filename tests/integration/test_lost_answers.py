"""A lost answer on every transactional write of the store converges on the answer a clean run gives.

DynamoDB applies a ``TransactWriteItems`` whose answer the network then drops; botocore retries it (the same
request). Each case runs one journey twice on one local stack, in two tenants: clean, and with the answer of the
first transaction a given store function makes lost (``devstack.faults.lose_answers``: applied, then the connection
closes). What the callers were answered and what is stored afterwards must be the same. The cases are checked to
cover every function of ``packyard.store`` that calls ``transact`` (found in the source, so a new transactional
write without a case fails here).
"""

from __future__ import annotations

import ast
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import boto3
import pytest

import devstack
from devstack.api import LocalApi
from devstack.caller import Caller
from devstack.faults import lose_answers
from packyard import clock, config
from packyard.consent import waiting
from packyard.maintenance import jobs
from packyard.publishing import resumption
from packyard.publishing.manifest import canonical_manifest_bytes, parse_manifest
from packyard.store import catalog, workflows
from packyard.store import jobs as job_store
from packyard.store.due import DueKind
from packyard_cli.build import build_from_files
from tests.support import stacks
from tests.support.callers import used_bytes
from tests.support.sweeping import sweep_kinds

stack = stacks.stack
fresh_config = stacks.fresh_config

STORE = Path(__file__).parents[2] / "shared" / "packyard" / "store"
WS = "ws-lost"
HOUR = 3600
DAY = 24 * HOUR


def transactional_writes() -> set[str]:
    """``module.function`` of every function in packyard/store/ that calls ``transact`` (or ``dynamo.transact``)."""
    found: set[str] = set()
    for path in sorted(STORE.glob("*.py")):
        if path.name == "dynamo.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.FunctionDef):
                continue
            for call in ast.walk(node):
                if isinstance(call, ast.Call):
                    name = call.func.attr if isinstance(call.func, ast.Attribute) else getattr(call.func, "id", "")
                    if name == "transact":
                        found.add(f"{path.stem}.{node.name}")
    return found


def _staged(stack: devstack.Stack, tenant: str) -> int:
    listed = boto3.client("s3").list_objects_v2(Bucket=stack.bucket_name, Prefix=f"uploads/{tenant}/")
    return len(listed.get("Contents", []))


def _blobs(stack: devstack.Stack, tenant: str) -> int:
    listed = boto3.client("s3").list_objects_v2(Bucket=stack.bucket_name, Prefix=f"blobs/{tenant}/")
    return len(listed.get("Contents", []))


def _blob_records(stack: devstack.Stack, tenant: str) -> list[tuple[Any, ...]]:
    found = boto3.client("dynamodb").scan(
        TableName=stack.table_name,
        FilterExpression="begins_with(pk, :p) AND sk = :blob",
        ExpressionAttributeValues={":p": {"S": f"TENANT#{tenant}#BLOB#"}, ":blob": {"S": "BLOB"}},
        ConsistentRead=True,
    )["Items"]
    return sorted(
        (i.get("refs", {}).get("N"), i.get("generation", {}).get("N"), i.get("orphan", {}).get("BOOL")) for i in found
    )


def _op(answer: Any) -> tuple[Any, ...]:
    body = answer.body if hasattr(answer, "body") else answer
    return (body.get("state"), body.get("outcome"), body.get("version"), body.get("kind"))


Journey = Callable[[devstack.Stack, Caller, pytest.MonkeyPatch], list[Any]]


def _publish(stack: devstack.Stack, caller: Caller, mp: pytest.MonkeyPatch) -> list[Any]:
    """A publish within a tenant quota that holds exactly its own reservation: a retried reservation that counted
    itself again would be refused 409 quota_exceeded while the session and its reservation exist."""
    built = build_from_files({"SKILL.md": b"v1\n"})
    manifest = canonical_manifest_bytes(parse_manifest(built.manifest, config.limits()))
    mp.setenv("PACKYARD_TENANT_QUOTA_BYTES", str(len(manifest) + built.archive_size))
    config.reset()
    session = caller.request_upload("hello", "1.0.0", built)
    seen: list[Any] = [session.status, session.body.get("code"), session.body.get("state")]
    if session.status == 201:
        caller.put_archive(session.body, built.archive)
        final = caller.complete_and_wait(session.body["uploadId"])
        seen += [final["state"], caller.get("/v1/packages/hello/versions/1.0.0").body.get("status")]
    return [*seen, used_bytes(stack, caller.tenant), _staged(stack, caller.tenant), _blobs(stack, caller.tenant)]


def _duplicate(stack: devstack.Stack, caller: Caller, mp: pytest.MonkeyPatch) -> list[Any]:
    """Two sessions of the identical content, both open before either publishes: the second settles as a
    duplicate (published, its reservation returned)."""
    built = build_from_files({"SKILL.md": b"same\n"})
    first = caller.request_upload("hello", "1.0.0", built)
    second = caller.post(
        "/v1/packages/hello/versions/1.0.0/uploads", built.upload_request(), headers={"Idempotency-Key": "k-dup"}
    )
    seen: list[Any] = [first.status, second.status]
    for session in (first, second):
        caller.put_archive(session.body, built.archive)
        seen.append(caller.complete_and_wait(session.body["uploadId"])["state"])
    return [*seen, used_bytes(stack, caller.tenant), _staged(stack, caller.tenant), _blobs(stack, caller.tenant)]


def _rejected(stack: devstack.Stack, caller: Caller, mp: pytest.MonkeyPatch) -> list[Any]:
    """An archive whose bytes are not the manifest's: verification rejects it, the reservation comes back."""
    built = build_from_files({"SKILL.md": b"declared\n"})
    other = build_from_files({"SKILL.md": b"something else\n"})
    final = caller.publish("hello", "1.0.0", built, archive=other.archive)
    rejection = final.get("rejection") or {}
    return [final["state"], rejection.get("code"), used_bytes(stack, caller.tenant), _staged(stack, caller.tenant)]


def _expired(stack: devstack.Stack, caller: Caller, mp: pytest.MonkeyPatch) -> list[Any]:
    """A session nobody completes: the sweep expires it after its deadline."""
    session = caller.request_upload("hello", "1.0.0", build_from_files({"SKILL.md": b"v1\n"}))
    sweep_kinds([DueKind.UPLOAD], clock.now() + HOUR)
    upload = caller.get(f"/v1/uploads/{session.body['uploadId']}").body
    return [upload["state"], used_bytes(stack, caller.tenant), _staged(stack, caller.tenant)]


def _verify_never_ran(stack: devstack.Stack, caller: Caller, mp: pytest.MonkeyPatch) -> list[Any]:
    """Completed, but no run of its verification ever starts (nor any the sweep starts again): once its resumes are
    spent the sweep rejects it, recording what a publish might have written as orphans (reclaimed by a later sweep,
    their records kept a while as tombstones). (Before the workflows were Express, the sweep looked the execution up
    and rejected a never-started one at once; now a session past its window is started again, up to MAX_RESUMES.)"""
    built = build_from_files({"SKILL.md": b"v1\n"})
    session = caller.request_upload("hello", "1.0.0", built)
    caller.put_archive(session.body, built.archive)
    at = clock.now() + HOUR
    with pytest.MonkeyPatch.context() as patched:
        patched.setattr(workflows, "start", lambda *args: "never started")
        assert caller.post(f"/v1/uploads/{session.body['uploadId']}/complete").status == 202
        for renewal in range(resumption.MAX_RESUMES + 1):  # each renewal's window ends within the hour
            sweep_kinds([DueKind.UPLOAD], at + renewal * HOUR)
    at += resumption.MAX_RESUMES * HOUR
    orphans = _blob_records(stack, caller.tenant)
    sweep_kinds([DueKind.BLOB], at + DAY)
    upload = caller.get(f"/v1/uploads/{session.body['uploadId']}").body
    return [upload["state"], orphans, _blob_records(stack, caller.tenant), used_bytes(stack, caller.tenant)]


def _resumed(stack: devstack.Stack, caller: Caller, mp: pytest.MonkeyPatch) -> list[Any]:
    """A session still verifying past the reservation window (complete died before starting its run): the sweep
    renews it (resumes + 1, the window renewed) and starts verification again, which publishes it. (It replaces a
    case of the old rule, a run still going past the window, looked at again later: an Express run cannot outlive
    the window, and nothing looks runs up any more.)"""
    built = build_from_files({"SKILL.md": b"v1\n"})
    session = caller.request_upload("hello", "1.0.0", built)
    caller.put_archive(session.body, built.archive)
    with pytest.MonkeyPatch.context() as patched:
        patched.setattr(workflows, "start", lambda *args: "died before starting it")
        assert caller.post(f"/v1/uploads/{session.body['uploadId']}/complete").status == 202
    swept = sweep_kinds([DueKind.UPLOAD], clock.now() + HOUR)
    machine = stack.state_machine_arns["PublishStateMachine"]
    again = workflows.execution_arn(machine, resumption.attempt_name(session.body["uploadId"], 1))
    run = devstack.wait_for_execution(again, timeout=60)
    pk, sk = catalog.upload_key(caller.tenant, session.body["uploadId"])
    item = boto3.client("dynamodb").get_item(
        TableName=stack.table_name, Key={"pk": {"S": pk}, "sk": {"S": sk}}, ConsistentRead=True
    )["Item"]
    upload = caller.get(f"/v1/uploads/{session.body['uploadId']}").body
    return [swept["resumed"], run["status"], item["resumes"]["N"], upload["state"], _blobs(stack, caller.tenant)]


def _install(stack: devstack.Stack, caller: Caller, mp: pytest.MonkeyPatch) -> list[Any]:
    """Install, then uninstall: admission, the plan (one write of the operation alone: see the test of lone
    writes below), and the commit that settles (holding and letting go)."""
    caller.publish("hello", "1.0.0", build_from_files({"SKILL.md": b"v1\n"}))
    admitted = caller.install(WS, "hello", "hello", "1.0.0", key="k-install")
    installed = caller.wait_settled(WS, admitted)
    installation = caller.get(caller.installation_path(WS, "hello")).body
    removed = caller.wait_settled(WS, caller.uninstall(WS, "hello", key="k-remove", if_match='"1"'))
    after = caller.get(caller.installation_path(WS, "hello"))
    return [
        admitted.status,
        _op(installed),
        (installation["status"], installation["version"]),
        _op(removed),
        (after.status, after.body.get("status")),
        used_bytes(stack, caller.tenant),
    ]


def _holders(stack: devstack.Stack, tenant: str, package: str) -> list[str]:
    found = boto3.client("dynamodb").query(
        TableName=stack.table_name,
        KeyConditionExpression="pk = :p AND begins_with(sk, :h)",
        ExpressionAttributeValues={":p": {"S": f"TENANT#{tenant}#PACKAGE#{package}"}, ":h": {"S": "HOLDER#"}},
        ConsistentRead=True,
    )["Items"]
    return sorted(item["sk"]["S"] for item in found)


def _refused_at_commit(stack: devstack.Stack, caller: Caller, mp: pytest.MonkeyPatch) -> list[Any]:
    """Two installs admitted under a limit of one installation, before either runs: the first commits, the second's
    commit is refused (limit_exceeded) after it held its release, and its settlement takes the hold back."""
    mp.setenv("PACKYARD_MAX_INSTALLATIONS_PER_WORKSPACE", "1")
    config.reset()
    caller.publish("hello", "1.0.0", build_from_files({"SKILL.md": b"v1\n"}))
    started: list[tuple[str, str, dict[str, Any]]] = []
    with mp.context() as patched:
        patched.setattr(workflows, "start", lambda arn, name, payload: started.append((arn, name, payload)) or name)
        first = caller.install(WS, "first", "hello", "1.0.0", key="k-first")
        second = caller.install(WS, "second", "hello", "1.0.0", key="k-second")
    assert len(started) == 2, started
    outcomes = []
    for admitted, run in zip((first, second), started, strict=True):
        workflows.start(*run)
        outcomes.append(_op(caller.wait_settled(WS, admitted)))
    refused = caller.get(f"/v1/workspaces/{WS}/operations/{second.body['operationId']}").body
    return [
        first.status,
        second.status,
        outcomes,
        refused["outcome"].get("code"),
        _holders(stack, caller.tenant, "hello"),
    ]


def _consent(stack: devstack.Stack, caller: Caller, mp: pytest.MonkeyPatch) -> list[Any]:
    """An owner install that widens grants waits for consent (a recorded wait: its run ends); the consent task run
    again finds the wait recorded; the owner approves (which starts the next run)."""
    caller.publish("hello", "1.0.0", build_from_files({"SKILL.md": b"v1\n"}, permissions=[{"kind": "api_read"}]))
    admitted = caller.install(WS, "hello", "hello", "1.0.0", key="k-consent")
    op = caller.wait_for_consent(WS, admitted)
    # the consent task run again (Step Functions' Retry, or an Express duplicate): nothing more to record
    refreshed = waiting.await_consent(caller.tenant, WS, op["operationId"])
    decided = caller.decide(WS, op, "approve")
    settled = caller.wait_settled(WS, admitted)
    installation = caller.get(caller.installation_path(WS, "hello")).body
    return [
        op["state"],
        refreshed,
        decided.status,
        decided.body.get("decision"),
        _op(settled),
        (installation["status"], installation["version"], len(installation.get("grants", []))),
    ]


def _consent_rejected(stack: devstack.Stack, caller: Caller, mp: pytest.MonkeyPatch) -> list[Any]:
    """An owner install that widens grants, rejected by its owner: it settles refused (a settlement of its own)."""
    caller.publish("hello", "1.0.0", build_from_files({"SKILL.md": b"v1\n"}, permissions=[{"kind": "api_read"}]))
    admitted = caller.install(WS, "hello", "hello", "1.0.0", key="k-rejected")
    op = caller.wait_for_consent(WS, admitted)
    decided = caller.decide(WS, op, "reject")
    settled = caller.wait_settled(WS, admitted)
    after = caller.get(caller.installation_path(WS, "hello"))
    return [op["state"], decided.status, decided.body.get("decision"), _op(settled), after.status]


def _yanked(stack: devstack.Stack, caller: Caller, mp: pytest.MonkeyPatch) -> list[Any]:
    """A yanked release nobody holds gives its blobs back; the sweeps reclaim them and credit the ledger once."""
    caller.publish("hello", "1.0.0", build_from_files({"SKILL.md": b"gone\n" * 50}))
    yanked = caller.delete("/v1/packages/hello/versions/1.0.0")
    at = clock.now() + HOUR
    sweep_kinds([DueKind.JOB, DueKind.BLOB], at)
    given_back = (_blobs(stack, caller.tenant), _blob_records(stack, caller.tenant), used_bytes(stack, caller.tenant))
    sweep_kinds([DueKind.JOB, DueKind.BLOB], at + DAY)
    gone = (_blobs(stack, caller.tenant), _blob_records(stack, caller.tenant), used_bytes(stack, caller.tenant))
    return [yanked.status, given_back, gone]


def _healed(stack: devstack.Stack, caller: Caller, mp: pytest.MonkeyPatch) -> list[Any]:
    """A release whose archive rotted (the scrub made it unavailable) is healed by publishing its content again."""
    mp.setenv("PACKYARD_SCRUB_INTERVAL_SECONDS", str(HOUR))
    config.reset()
    built = build_from_files({"SKILL.md": b"rots\n" * 50})
    caller.publish("hello", "1.0.0", built)
    archive = caller.get("/v1/packages/hello/versions/1.0.0").body["archive"]["sha256"]
    boto3.client("s3").put_object(Bucket=stack.bucket_name, Key=f"blobs/{caller.tenant}/sha256/{archive}", Body=b"x")
    sweep_kinds([DueKind.BLOB], clock.now() + 2 * HOUR)
    before = caller.get("/v1/packages/hello/versions/1.0.0").body["status"]
    session = caller.post(
        "/v1/packages/hello/versions/1.0.0/uploads", built.upload_request(), headers={"Idempotency-Key": "k-heal"}
    )
    seen: list[Any] = [before, session.status]
    if session.status == 201:
        caller.put_archive(session.body, built.archive)
        seen.append(caller.complete_and_wait(session.body["uploadId"])["state"])
    after = caller.get("/v1/packages/hello/versions/1.0.0").body["status"]
    return [*seen, after, used_bytes(stack, caller.tenant), _staged(stack, caller.tenant)]


def _job(stack: devstack.Stack, caller: Caller, mp: pytest.MonkeyPatch) -> list[Any]:
    """A cleanup job enqueued (what the expiry sweep does for staging it could not delete), then run by a sweep."""
    now = clock.now()
    subject = {"uploadId": "u-gone", "token": "t-gone"}
    jobs.enqueue(caller.tenant, jobs.JobKind.STAGING, subject, now)
    queued = job_store.find(caller.tenant, str(jobs.JobKind.STAGING), subject)
    sweep_kinds([DueKind.JOB], now + HOUR)
    after = job_store.find(caller.tenant, str(jobs.JobKind.STAGING), subject)
    return [queued is not None and (queued.attempts, queued.mark.due_at - now), after]


@dataclass
class Case:
    journey: Journey
    sites: tuple[str, ...]


CASES = {
    "publish": Case(_publish, ("catalog.create_upload", "catalog.start_verifying", "catalog.publish_release")),
    "duplicate": Case(_duplicate, ("catalog.settle_upload_as_duplicate",)),
    "rejected": Case(_rejected, ("catalog.settle_upload_without_release",)),
    "expired": Case(_expired, ("catalog.settle_upload_without_release",)),
    "verify-never-ran": Case(_verify_never_ran, ("reclaims.mark_orphan",)),
    "resumed": Case(_resumed, ("catalog.renew_verification",)),
    "install": Case(_install, ("workspace.admit", "workspace.commit")),
    # the run a decision starts claims the planned operation (workspace.transition: its runner)
    "consent": Case(_consent, ("consent.await_consent", "consent.decide", "workspace.transition")),
    "consent-rejected": Case(_consent_rejected, ("workspace.settle",)),
    # the refused commit's hold, taken back once the refusal is recorded
    "refused-at-commit": Case(_refused_at_commit, ("reclaims.drop_hold",)),
    "yanked": Case(_yanked, ("reclaims.release_blobs", "reclaims.finish_reclaim")),
    "healed": Case(_healed, ("catalog.heal_release",)),
    "job": Case(_job, ("jobs.put",)),
}
RUNS = [(name, site) for name, case in CASES.items() for site in case.sites]


def test_the_cases_cover_every_transactional_write_of_the_store() -> None:
    assert {site for _, site in RUNS} == transactional_writes()


@pytest.mark.parametrize(("name", "site"), RUNS, ids=[f"{name}:{site}" for name, site in RUNS])
def test_a_lost_answer_of_a_transaction_converges_on_the_clean_answer(
    stack: devstack.Stack, monkeypatch: pytest.MonkeyPatch, name: str, site: str
) -> None:
    journey = CASES[name].journey
    slug = site.replace(".", "-").replace("_", "-")
    clean = journey(stack, Caller(LocalApi(stack), f"t-clean-{name}-{slug}"), monkeypatch)
    config.reset()
    with lose_answers("TransactWriteItems", site=site) as plan:
        lossy = journey(stack, Caller(LocalApi(stack), f"t-lost-{name}-{slug}"), monkeypatch)
    assert plan.lost == [("TransactWriteItems", site)]  # the answer was lost (and botocore retried)
    assert lossy == clean


def test_a_lost_answer_of_the_plans_lone_write_converges_on_the_clean_answer(
    stack: devstack.Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Plan writes the operation alone (a conditional PutItem, no transaction and so no request token): a retry of
    a write that landed meets its own fence, and must be told from a lost claim by what is stored."""
    clean = _install(stack, Caller(LocalApi(stack), "t-clean-install-record"), monkeypatch)
    config.reset()
    with lose_answers("PutItem", site="workspace.record") as plan:
        lossy = _install(stack, Caller(LocalApi(stack), "t-lost-install-record"), monkeypatch)
    assert plan.lost == [("PutItem", "workspace.record")]
    assert lossy == clean
