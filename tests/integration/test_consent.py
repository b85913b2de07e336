"""Consent through the real install state machine on moto: an owner-origin plan that widens grants waits
(``.waitForTaskToken``), an owner with the approve scope approves or rejects that exact plan over HTTP, and the
workflow commits or settles refused. Decisions are recorded once, whatever is sent twice or at once."""

from __future__ import annotations

import json
import threading

import boto3
import pytest

import devstack
from devstack.caller import Caller
from packyard.authority import Permission
from packyard_cli.build import build_from_files

WS = "ws-consent"


@pytest.fixture
def releases(acme: Caller) -> Caller:
    """hello@1.0.0 declares api_read; hello@1.1.0 adds network:api.example."""
    acme.publish("hello", "1.0.0", build_from_files({"SKILL.md": b"v1\n"}, permissions=[{"kind": "api_read"}]))
    acme.publish(
        "hello",
        "1.1.0",
        build_from_files(
            {"SKILL.md": b"v1.1\n"},
            permissions=[{"kind": "api_read"}, {"kind": "network", "resource": "api.example"}],
        ),
    )
    return acme


def _waiting(caller: Caller, key: str = "k-install", version: str = "1.0.0", **headers: str) -> dict:
    admitted = caller.install(WS, "hello", "hello", version, key=key, **headers)
    assert admitted.status == 202, admitted.body
    op = caller.wait_for_consent(WS, admitted)
    assert op["state"] == "awaiting_consent", op
    return op


def test_given_an_owner_install_that_widens_grants_then_it_waits_and_lists_what_it_asks(releases: Caller) -> None:
    op = _waiting(releases)

    assert op["consent"]["permissions"] == [{"kind": "api_read", "resource": "*"}]
    assert op["requestedBy"] == "user-1"
    listed = releases.get(f"/v1/workspaces/{WS}/approvals").body["items"]
    assert [(w["operationId"], w["package"], w["version"], w["status"]) for w in listed] == [
        (op["operationId"], "hello", "1.0.0", "pending_permission")
    ]
    assert listed[0]["planDigest"] == op["consent"]["planDigest"]
    assert listed[0]["requestedBy"] == "user-1"
    assert "taskToken" not in str(listed) and "taskToken" not in str(op)
    # nothing is installed while it waits
    assert releases.get(f"/v1/workspaces/{WS}/installations/hello").status == 404


def test_given_a_waiting_install_when_approved_then_it_commits_with_the_grants_and_records_the_approver(
    releases: Caller,
) -> None:
    op = _waiting(releases)
    decided = releases.decide(WS, op, "approve", key="k-approve")
    assert decided.status == 200, decided.body
    assert (decided.body["decision"], decided.body["decidedBy"]) == ("approve", "user-1")

    final = releases.wait_settled(WS, releases.get(f"/v1/workspaces/{WS}/operations/{op['operationId']}"))
    assert final["outcome"] == {"result": "succeeded"}
    assert final["consent"]["decision"] == "approve"
    inst = releases.get(f"/v1/workspaces/{WS}/installations/hello").body
    assert inst["grants"] == [{"kind": "api_read", "resource": "*", "origin": "owner", "ceiling": "workspace"}]
    assert inst["grantGeneration"] == 1
    assert releases.get(f"/v1/workspaces/{WS}/approvals").body["items"] == []


def test_given_a_waiting_install_when_rejected_then_it_settles_refused_and_nothing_is_installed(
    releases: Caller,
) -> None:
    op = _waiting(releases)
    assert releases.decide(WS, op, "reject", key="k-reject").status == 200

    final = releases.wait_settled(WS, releases.get(f"/v1/workspaces/{WS}/operations/{op['operationId']}"))
    assert final["outcome"]["result"] == "refused"
    assert (final["outcome"]["code"], final["outcome"]["status"]) == ("consent_rejected", 403)
    assert releases.get(f"/v1/workspaces/{WS}/installations/hello").status == 404


def test_given_an_update_that_adds_a_permission_then_only_the_new_one_is_asked(releases: Caller) -> None:
    releases.wait_settled(WS, releases.install(WS, "hello", "hello", "1.0.0", key="k-1"))
    admitted = releases.install(WS, "hello", "hello", "1.1.0", key="k-2", if_match='"1"')
    op = releases.wait_for_consent(WS, admitted)

    assert op["consent"]["permissions"] == [{"kind": "network", "resource": "api.example"}]
    pending = releases.get(f"/v1/workspaces/{WS}/installations/hello").body["pendingConsent"]
    assert (pending["status"], pending["version"], pending["operationId"]) == (
        "pending_permission",
        "1.1.0",
        op["operationId"],
    )
    final = releases.wait_settled(WS, admitted)
    assert final["outcome"] == {"result": "succeeded"}
    inst = releases.get(f"/v1/workspaces/{WS}/installations/hello").body
    assert [g["kind"] for g in inst["grants"]] == ["api_read", "network"]
    assert inst["grantGeneration"] == 2


def test_given_a_stale_plan_digest_then_stale_authority_and_the_operation_keeps_waiting(releases: Caller) -> None:
    op = _waiting(releases)
    stale = releases.post(
        f"/v1/workspaces/{WS}/installations/hello/approvals",
        {"decision": "approve", "planDigest": "0" * 64},
        headers={"Idempotency-Key": "k-stale"},
    )
    assert (stale.status, stale.body["code"]) == (409, "stale_authority")
    assert stale.body["planDigest"] == op["consent"]["planDigest"]
    assert releases.get(f"/v1/workspaces/{WS}/operations/{op['operationId']}").body["state"] == "awaiting_consent"


def test_given_a_decision_when_sent_again_then_a_replay_answers_the_same_and_another_is_stale(
    releases: Caller,
) -> None:
    op = _waiting(releases)
    first = releases.decide(WS, op, "approve", key="k-once")
    again = releases.decide(WS, op, "approve", key="k-once")
    other = releases.decide(WS, op, "approve", key="k-other")
    after_reject = releases.decide(WS, op, "reject", key="k-late-reject")
    reused = releases.decide(WS, op, "reject", key="k-once")

    assert first.status == again.status == 200
    assert again.body == first.body
    assert (other.status, other.body["code"]) == (409, "stale_authority")
    assert (after_reject.status, after_reject.body["code"]) == (409, "stale_authority")
    assert (reused.status, reused.body["code"]) == (422, "idempotency_key_reused")
    final = releases.wait_settled(WS, releases.get(f"/v1/workspaces/{WS}/operations/{op['operationId']}"))
    assert final["outcome"] == {"result": "succeeded"}
    assert releases.get(f"/v1/workspaces/{WS}/installations/hello").body["version"] == 1


def test_given_a_rejection_then_a_later_approval_is_stale(releases: Caller) -> None:
    op = _waiting(releases)
    assert releases.decide(WS, op, "reject", key="k-no").status == 200
    late = releases.decide(WS, op, "approve", key="k-yes")
    assert (late.status, late.body["code"]) == (409, "stale_authority")
    final = releases.wait_settled(WS, releases.get(f"/v1/workspaces/{WS}/operations/{op['operationId']}"))
    assert final["outcome"]["code"] == "consent_rejected"


def test_given_another_tenant_when_it_decides_then_nothing_awaits_it(releases: Caller, globex: Caller) -> None:
    op = _waiting(releases)
    foreign = globex.decide(WS, op, "approve", key="k-foreign")
    assert (foreign.status, foreign.body["code"]) == (409, "stale_authority")
    assert globex.get(f"/v1/workspaces/{WS}/approvals").body["items"] == []
    assert releases.get(f"/v1/workspaces/{WS}/operations/{op['operationId']}").body["state"] == "awaiting_consent"


def test_given_sixteen_concurrent_decisions_then_exactly_one_wins_and_it_settles_once(releases: Caller) -> None:
    op = _waiting(releases)
    answers: list[tuple[int, str]] = []
    barrier = threading.Barrier(16)

    def decide(i: int) -> None:
        barrier.wait()
        answer = releases.decide(WS, op, "approve" if i % 2 else "reject", key=f"k-race-{i}")
        answers.append((answer.status, answer.body.get("decision") or answer.body.get("code")))

    threads = [threading.Thread(target=decide, args=(i,)) for i in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    winners = [a for a in answers if a[0] == 200]
    assert len(winners) == 1, answers
    assert sorted(set(answers) - set(winners)) == [(409, "stale_authority")]
    final = releases.wait_settled(WS, releases.get(f"/v1/workspaces/{WS}/operations/{op['operationId']}"))
    expected = "succeeded" if winners[0][1] == "approve" else "refused"
    assert final["outcome"]["result"] == expected
    assert final["consent"]["decision"] == winners[0][1]


def test_given_the_decisions_execution_when_started_again_after_settling_then_nothing_commits_twice(
    releases: Caller, stack
) -> None:
    # (It sent the paused execution's task token again; there is none since the install workflow is Express: a
    # decision starts a new run, and a replayed decision or an Express duplicate starts another one.)
    op = _waiting(releases)
    assert releases.decide(WS, op, "approve", key="k-approve").status == 200
    final = releases.wait_settled(WS, releases.get(f"/v1/workspaces/{WS}/operations/{op['operationId']}"))
    assert final["outcome"] == {"result": "succeeded"}

    same_input = {"tenant": "t-acme", "workspace": WS, "installationId": "hello", "operationId": op["operationId"]}
    again = boto3.client("stepfunctions").start_execution(
        stateMachineArn=stack.state_machine_arns["InstallStateMachine"],
        name=op["operationId"],
        input=json.dumps({**same_input, "attempt": op["attempt"]}),
    )
    ended = devstack.wait_for_execution(again["executionArn"], timeout=60)

    assert ended["status"] == "SUCCEEDED"
    assert json.loads(ended["output"])["error"]["Error"] == "ClaimLost"  # it ended at Duplicate, touching nothing
    assert releases.get(f"/v1/workspaces/{WS}/installations/hello").body["version"] == 1
    after = releases.get(f"/v1/workspaces/{WS}/operations/{op['operationId']}").body
    assert after == final


def test_given_a_workflow_token_that_claims_owner_origin_then_it_is_a_workflow_and_widening_is_refused(
    releases: Caller, api
) -> None:
    bot = Caller(api, "t-acme", subject="ci-bot", actor="workflow")
    admitted = bot.install(WS, "hello", "hello", "1.0.0", key="k-bot", origin="owner")
    final = bot.wait_settled(WS, admitted, approve=False)

    assert final["origin"] == "workflow"
    assert (final["outcome"]["code"], final["outcome"]["status"]) == ("needs_consent", 403)
    assert releases.get(f"/v1/workspaces/{WS}/approvals").body["items"] == []


def test_given_a_token_without_the_approve_scope_then_a_decision_is_forbidden(releases: Caller, api) -> None:
    op = _waiting(releases)
    reader = Caller(api, "t-acme", scopes=tuple(p.value for p in Permission if p is not Permission.APPROVE))
    refused = reader.decide(WS, op, "approve", key="k-no-scope")
    assert (refused.status, refused.body["code"]) == (403, "forbidden")
    assert releases.get(f"/v1/workspaces/{WS}/operations/{op['operationId']}").body["state"] == "awaiting_consent"


def test_given_a_waiting_operation_when_its_intent_is_resent_after_the_window_then_it_is_superseded(
    releases: Caller, monkeypatch
) -> None:
    from packyard import clock

    op = _waiting(releases)
    later = clock.now() + 8 * 24 * 3600
    monkeypatch.setattr(clock, "now", lambda: later)
    again = releases.install(WS, "hello", "hello", "1.0.0", key="k-again")
    assert again.status == 202, again.body
    assert again.body["supersedes"] == op["operationId"]
    superseded = releases.get(f"/v1/workspaces/{WS}/operations/{op['operationId']}").body
    assert superseded["state"] == "settled" and superseded["outcome"]["code"] == "cancelled"
    late = releases.decide(WS, op, "approve", key="k-late")
    assert (late.status, late.body["code"]) in {(409, "stale_authority")}
