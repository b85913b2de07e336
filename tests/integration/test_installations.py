"""Installation operations through the API and real install state machine executions on moto."""

from __future__ import annotations

import pytest

from devstack import express, lambdas
from packyard.api.times import epoch_of
from packyard_cli.build import build_from_files

WS = "ws-1"


@pytest.fixture
def releases(acme):
    """hello@1.0.0 and hello@1.1.0 published; 1.1.0 declares one more permission."""
    acme.publish("hello", "1.0.0", build_from_files({"SKILL.md": b"v1\n"}, permissions=[{"kind": "api_read"}]))
    acme.publish(
        "hello",
        "1.1.0",
        build_from_files({"SKILL.md": b"v1.1\n"}, permissions=[{"kind": "api_read"}, {"kind": "network"}]),
    )
    return acme


def _installed(acme, key="k-install", **body):
    admitted = acme.install(WS, "hello", "hello", "1.0.0", key=key, **body)
    assert admitted.status == 202, admitted.body
    return admitted, acme.wait_settled(WS, admitted)


def test_install_settles_succeeded_and_the_installation_is_active_at_version_1(releases):
    admitted, op = _installed(releases)

    assert admitted.headers["location"] == f"/v1/workspaces/{WS}/operations/{admitted.body['operationId']}"
    assert (op["kind"], op["state"], op["outcome"]) == ("install", "settled", {"result": "succeeded"})
    inst = releases.get(f"/v1/workspaces/{WS}/installations/hello")
    assert inst.status == 200
    assert inst.headers["etag"] == '"1"'
    assert (inst.body["status"], inst.body["version"], inst.body["creation"]) == ("active", 1, "fresh")
    assert inst.body["release"]["version"] == "1.0.0"
    assert inst.body["grants"] == [{"kind": "api_read", "resource": "*", "origin": "owner", "ceiling": "workspace"}]


def test_a_commit_that_settled_ends_the_run_without_settle_and_tells_the_change(acme):
    """The install state machine's CommitSettled choice: the commit settled its operation in its transaction and put
    the change event itself, so the run goes Commit → CommitSettled → Settled and Settle never runs."""
    acme.publish("plain", "1.0.0", build_from_files({"SKILL.md": b"plain\n"}))  # no permissions: no consent
    lambdas.clear_invocations()
    admitted = acme.install(WS, "plain", "plain", "1.0.0", key="k-plain")
    op = acme.wait_settled(WS, admitted)

    tasks = ("PlanningFunction", "CommitFunction", "SettlementFunction")
    ran = [call.function for call in lambdas.invocations() if call.function in tasks]
    assert ran == ["PlanningFunction", "CommitFunction"], ran
    (run,) = express.runs(acme.api.stack.state_machine_arns["InstallStateMachine"])
    entered = [
        event["stateEnteredEventDetails"]["name"]
        for event in express.history(run.arn)
        if event["type"].endswith("StateEntered")
    ]
    assert entered == ["Claim", "Plan", "NeedsConsent", "Commit", "CommitSettled", "Settled"], entered
    assert op["outcome"] == {"result": "succeeded"}


def test_same_key_same_request_is_the_same_operation_with_the_same_result(releases):
    admitted, op = _installed(releases)

    again = releases.install(WS, "hello", "hello", "1.0.0", key="k-install")

    assert again.status == 200
    assert again.body["operationId"] == admitted.body["operationId"]
    assert again.body["outcome"] == op["outcome"]
    assert releases.get(f"/v1/workspaces/{WS}/installations/hello").body["version"] == 1


def test_same_key_different_request_is_idempotency_key_reused(releases):
    _installed(releases)

    reused = releases.install(WS, "hello", "hello", "1.1.0", key="k-install", if_match='"1"')

    assert (reused.status, reused.code) == (422, "idempotency_key_reused")


def test_missing_idempotency_key_is_refused(releases):
    response = releases.put(f"/v1/workspaces/{WS}/installations/hello", {"package": "hello", "version": "1.0.0"})

    assert (response.status, response.code) == (400, "idempotency_key_required")


def test_update_needs_if_match_and_a_stale_one_is_a_version_conflict(releases):
    _installed(releases)

    missing = releases.install(WS, "hello", "hello", "1.1.0", key="k-update-1")
    stale = releases.install(WS, "hello", "hello", "1.1.0", key="k-update-2", if_match='"7"')

    assert (missing.status, missing.code) == (428, "version_required")
    assert (stale.status, stale.code) == (412, "version_conflict")
    assert (stale.body["expected"], stale.body["actual"]) == (7, 1)


def test_update_bumps_the_version_once_and_keeps_the_previous_release_for_rollback(releases):
    _installed(releases)

    op = releases.wait_settled(WS, releases.install(WS, "hello", "hello", "1.1.0", key="k-up", if_match='"1"'))

    assert (op["kind"], op["outcome"]["result"]) == ("update", "succeeded")
    inst = releases.get(f"/v1/workspaces/{WS}/installations/hello").body
    assert (inst["version"], inst["release"]["version"], inst["previous"]["version"]) == (2, "1.1.0", "1.0.0")
    assert inst["grantGeneration"] == 2


def test_rollback_returns_to_the_previous_release(releases):
    _installed(releases)
    releases.wait_settled(WS, releases.install(WS, "hello", "hello", "1.1.0", key="k-up", if_match='"1"'))

    op = releases.wait_settled(WS, releases.rollback(WS, "hello", key="k-rb", if_match='"2"'))

    assert (op["kind"], op["outcome"]["result"]) == ("rollback", "succeeded")
    inst = releases.get(f"/v1/workspaces/{WS}/installations/hello").body
    assert (inst["version"], inst["release"]["version"], inst["previous"]["version"]) == (3, "1.0.0", "1.1.0")


def test_same_release_again_is_a_repair(releases):
    _installed(releases)

    op = releases.wait_settled(WS, releases.install(WS, "hello", "hello", "1.0.0", key="k-rep", if_match='"1"'))

    assert (op["kind"], op["outcome"]["result"]) == ("repair", "succeeded")


def test_uninstall_removes_and_uninstalling_again_settles_not_installed(releases):
    _installed(releases)

    op = releases.wait_settled(WS, releases.uninstall(WS, "hello", key="k-un", if_match='"1"'))
    again = releases.uninstall(WS, "hello", key="k-un-2")

    assert (op["kind"], op["outcome"]["result"]) == ("uninstall", "succeeded")
    assert releases.get(f"/v1/workspaces/{WS}/installations/hello").body["status"] == "removed"
    assert again.status == 200
    assert again.body["outcome"] == {"result": "succeeded", "code": "not_installed"}


def test_reinstall_after_removal_is_a_replacement_or_reminted(releases):
    _installed(releases)
    releases.wait_settled(WS, releases.uninstall(WS, "hello", key="k-un", if_match='"1"'))
    before = releases.get(f"/v1/workspaces/{WS}/installations/hello").body["instanceId"]

    releases.wait_settled(WS, releases.install(WS, "hello", "hello", "1.0.0", key="k-re", intent="install-or-remint"))

    inst = releases.get(f"/v1/workspaces/{WS}/installations/hello").body
    assert (inst["creation"], inst["status"], inst["version"]) == ("reminted", "active", 3)
    assert inst["instanceId"] != before


def test_create_only_on_an_existing_installation_is_stale_authority(releases):
    _installed(releases)

    refused = releases.install(WS, "hello", "hello", "1.0.0", key="k-co", intent="create-only", if_match='"1"')

    assert (refused.status, refused.code) == (409, "stale_authority")


def test_unpublished_or_yanked_release_is_release_unavailable(releases):
    assert releases.install(WS, "hello", "hello", "9.9.9", key="k-none").code == "release_unavailable"
    releases.delete("/v1/packages/hello/versions/1.1.0")
    assert releases.install(WS, "other", "hello", "1.1.0", key="k-yanked").code == "release_unavailable"


def test_workflow_origin_may_not_widen_grants(releases):
    _installed(releases)

    op = releases.wait_settled(
        WS, releases.install(WS, "hello", "hello", "1.1.0", key="k-wf", if_match='"1"', origin="workflow")
    )

    assert op["outcome"]["result"] == "refused"
    assert (op["outcome"]["code"], op["outcome"]["status"]) == ("needs_consent", 403)
    assert releases.get(f"/v1/workspaces/{WS}/installations/hello").body["version"] == 1


def test_preview_returns_the_plan_without_side_effects_and_a_stale_digest_is_plan_changed(releases):
    preview = releases.post(
        f"/v1/workspaces/{WS}/installations/hello/preview", {"package": "hello", "version": "1.0.0"}
    )

    assert preview.status == 200
    assert preview.body["plan"]["version"] == 1
    assert releases.get(f"/v1/workspaces/{WS}/installations/hello").status == 404
    admitted = releases.install(WS, "hello", "hello", "1.0.0", key="k-pv", planDigest=preview.body["planDigest"])
    assert admitted.status == 202
    releases.wait_settled(WS, admitted)

    changed = releases.install(WS, "hello", "hello", "1.1.0", key="k-pv2", if_match='"1"', planDigest="0" * 64)
    assert (changed.status, changed.code) == (409, "plan_changed")


def test_another_operation_in_flight_is_operation_in_progress_with_retry_after(releases, monkeypatch):
    from packyard.store import workflows

    monkeypatch.setattr(workflows, "start", lambda *args, **kwargs: "not-started")  # the first stays in flight
    first = releases.install(WS, "hello", "hello", "1.0.0", key="k-a")
    second = releases.install(WS, "hello", "hello", "1.0.0", key="k-b")

    assert first.status == 202
    assert (second.status, second.code) == (409, "operation_in_progress")
    assert second.body["operationId"] == first.body["operationId"]
    assert int(second.headers["retry-after"]) >= 1


def test_task_scope_limit_is_limit_exceeded(releases, monkeypatch):
    monkeypatch.setenv("PACKYARD_MAX_INSTALLATIONS_PER_TASK", "1")
    from packyard import config

    config.reset()
    try:
        scope = {"kind": "task", "id": "t-1"}
        releases.wait_settled(WS, releases.install(WS, "a", "hello", "1.0.0", key="k-1", scope=scope))
        refused = releases.install(WS, "b", "hello", "1.0.0", key="k-2", scope=scope)
    finally:
        monkeypatch.undo()
        config.reset()

    assert (refused.status, refused.code) == (409, "limit_exceeded")


def test_scope_ids_must_match_the_scope_kind(releases):
    assert releases.install(WS, "a", "hello", "1.0.0", key="k", scope={"kind": "task"}).code == "invalid_request"
    bad = releases.install(WS, "a", "hello", "1.0.0", key="k2", scope={"kind": "workspace", "id": "x"})
    assert bad.code == "invalid_request"


def test_resolved_lists_active_releases_with_digests_grants_and_download_urls(releases):
    import hashlib

    import requests

    _installed(releases)

    resolved = releases.get(f"/v1/workspaces/{WS}/resolved").body["items"]

    assert [(r["installationId"], r["release"]) for r in resolved] == [("hello", "1.0.0")]
    archive = requests.get(resolved[0]["archive"]["url"], timeout=30).content
    assert hashlib.sha256(archive).hexdigest() == resolved[0]["archive"]["sha256"]
    assert resolved[0]["grants"] == [{"kind": "api_read", "resource": "*", "origin": "owner", "ceiling": "workspace"}]


def test_an_operation_settled_at_admission_starts_its_retention_clock(releases, stack):
    import boto3

    settled = releases.uninstall(WS, "never-installed", key="k-noop").body

    item = boto3.client("dynamodb", region_name=stack.region).get_item(
        TableName=stack.table_name,
        Key={"pk": {"S": f"TENANT#t-acme#WS#{WS}"}, "sk": {"S": f"OP#{settled['operationId']}"}},
    )["Item"]
    assert int(item["expiresAt"]["N"]) == epoch_of(settled["settledAt"]) + 90 * 24 * 3600
