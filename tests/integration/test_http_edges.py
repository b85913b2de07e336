"""Bugs at the edge of the HTTP API found by the deploy-fidelity audit (issue 20, item 9): each test failed on the code
before its fix."""

from __future__ import annotations

import pytest

from devstack.caller import Caller
from packyard_cli.build import build_from_files

WS = "ws-edges"


@pytest.fixture
def installed(acme: Caller) -> Caller:
    acme.publish("hello", "1.0.0", build_from_files({"SKILL.md": b"v1\n"}))
    settled = acme.wait_settled(WS, acme.install(WS, "hello", "hello", "1.0.0", key="k-install"))
    assert settled["outcome"]["result"] == "succeeded", settled
    return acme


def _installed_ids(caller: Caller) -> list[str]:
    return [item["installationId"] for item in caller.get(f"/v1/workspaces/{WS}/installations").body["items"]]


@pytest.mark.parametrize("if_match", ["1", '"1', '1"', '""1""'], ids=["unquoted", "open", "close", "doubled"])
def test_given_an_if_match_that_is_not_a_strong_entity_tag_then_nothing_is_deleted(
    installed: Caller, if_match: str
) -> None:
    # Given an installation at version 1; when an uninstall names it with something that only looks like "1"
    refused = installed.uninstall(WS, "hello", key=f"k-uninstall-{if_match}", if_match=if_match)
    # Then it is refused as malformed (RFC 9110 8.8.3: an entity-tag is quoted), and the installation stays
    assert (refused.status, refused.code) == (400, "invalid_request"), refused.body
    assert refused.headers["content-type"] == "application/problem+json"
    assert _installed_ids(installed) == ["hello"]


@pytest.mark.parametrize("suffix", ["%0A", "%0D", "%00", "%09", "%1B", "%7F", "%C2%85"])
def test_given_a_control_character_in_the_path_then_400_before_routing(installed: Caller, suffix: str) -> None:
    # When a mutation's path segment carries a control character (a trailing newline used to reach "hello")
    refused = installed.uninstall(WS, f"hello{suffix}", key="k-control", if_match='"1"')
    # Then it is refused as a whole, problem+json, and nothing was admitted
    assert (refused.status, refused.code) == (400, "invalid_request"), refused.body
    assert refused.headers["content-type"] == "application/problem+json"
    assert _installed_ids(installed) == ["hello"]
    assert installed.get(f"/v1/workspaces/{WS}/installations/hello").body["version"] == 1


def test_given_a_control_character_in_a_read_path_then_400(acme: Caller) -> None:
    answer = acme.get("/v1/packages/hello%0A")
    assert (answer.status, answer.code) == (400, "invalid_request"), answer.body


@pytest.mark.parametrize("content_type", ["Application/JSON", "APPLICATION/JSON; charset=UTF-8", "application/Json"])
def test_given_a_json_media_type_in_another_case_then_it_is_accepted(acme: Caller, content_type: str) -> None:
    # RFC 9110 8.3.1: the type and subtype are case-insensitive
    acme.publish("hello", "1.0.0", build_from_files({"SKILL.md": b"v1\n"}))
    admitted = acme.put(
        f"/v1/workspaces/{WS}/installations/hello",
        {"package": "hello", "version": "1.0.0"},
        headers={"Idempotency-Key": "k-case", "Content-Type": content_type},
    )
    assert admitted.status == 202, admitted.body
    assert acme.wait_settled(WS, admitted)["outcome"]["result"] == "succeeded"


def _uploaded(acme: Caller, version: str) -> str:
    built = build_from_files({"SKILL.md": f"v{version}\n".encode()})
    session = acme.request_upload("hello", version, built)
    assert session.status == 201, session.body
    acme.put_archive(session.body, built.archive)
    upload_id: str = session.body["uploadId"]
    return upload_id


def test_given_a_complete_under_a_key_then_another_complete_under_it_is_422(acme: Caller) -> None:
    import devstack

    first, second = _uploaded(acme, "1.0.0"), _uploaded(acme, "1.1.0")
    started = acme.post(f"/v1/uploads/{first}/complete", headers={"Idempotency-Key": "k-complete"})
    assert started.status == 202, started.body
    devstack.wait_for_execution(started.body["executionArn"], timeout=60)
    # the same request under the same key: answered as before (the session, now finished)
    replayed = acme.post(f"/v1/uploads/{first}/complete", headers={"Idempotency-Key": "k-complete"})
    assert (replayed.status, replayed.body["uploadId"]) == (200, first), replayed.body

    # When another upload is completed under the same key
    reused = acme.post(f"/v1/uploads/{second}/complete", headers={"Idempotency-Key": "k-complete"})
    # Then it is refused, and that upload was not started
    assert (reused.status, reused.code) == (422, "idempotency_key_reused"), reused.body
    assert acme.get(f"/v1/uploads/{second}").body["state"] == "awaiting_upload"
    # a yank is another request too
    yank = acme.delete("/v1/packages/hello/versions/1.0.0", headers={"Idempotency-Key": "k-complete"})
    assert (yank.status, yank.code) == (422, "idempotency_key_reused"), yank.body
    assert acme.get("/v1/packages/hello/versions/1.0.0").body.get("yankedAt") is None
    # and without a key, completing stays idempotent by nature
    assert acme.post(f"/v1/uploads/{second}/complete").status == 202


def test_given_a_yank_under_a_key_then_another_yank_under_it_is_422(acme: Caller) -> None:
    for version in ("1.0.0", "1.1.0"):
        acme.publish("hello", version, build_from_files({"SKILL.md": f"v{version}\n".encode()}))
    yanked = acme.delete("/v1/packages/hello/versions/1.0.0", headers={"Idempotency-Key": "k-yank"})
    assert yanked.status == 200, yanked.body
    again = acme.delete("/v1/packages/hello/versions/1.0.0", headers={"Idempotency-Key": "k-yank"})
    assert (again.status, again.body["yankedAt"]) == (200, yanked.body["yankedAt"])

    reused = acme.delete("/v1/packages/hello/versions/1.1.0", headers={"Idempotency-Key": "k-yank"})

    assert (reused.status, reused.code) == (422, "idempotency_key_reused"), reused.body
    assert acme.get("/v1/packages/hello/versions/1.1.0").body.get("yankedAt") is None


def test_a_key_is_bound_per_tenant(acme: Caller, globex: Caller) -> None:
    for caller in (acme, globex):
        caller.publish("hello", "1.0.0", build_from_files({"SKILL.md": b"v1\n"}))
    for caller in (acme, globex):
        yanked = caller.delete("/v1/packages/hello/versions/1.0.0", headers={"Idempotency-Key": "k-same"})
        assert yanked.status == 200, yanked.body


def test_a_malformed_key_on_complete_is_400(acme: Caller) -> None:
    upload_id = _uploaded(acme, "1.0.0")
    refused = acme.post(f"/v1/uploads/{upload_id}/complete", headers={"Idempotency-Key": "k\u00e9"})
    assert (refused.status, refused.code) == (400, "invalid_request"), refused.body
    assert acme.get(f"/v1/uploads/{upload_id}").body["state"] == "awaiting_upload"


def _documented_codes(path: str, method: str, status: int) -> str:
    from devstack.openapi import generate

    return str(generate()["paths"][path][method]["responses"][str(status)]["description"])


def test_the_quota_exceeded_an_admission_answers_is_documented_for_every_admission_route(
    acme: Caller, monkeypatch: pytest.MonkeyPatch
) -> None:
    from packyard import config

    # Given a workspace quota with room for one installation, and one installed
    built = build_from_files({"SKILL.md": b"v1\n"})
    acme.publish("hello", "1.0.0", built)
    monkeypatch.setenv("PACKYARD_WORKSPACE_QUOTA_BYTES", str(len(built.archive) * 3 // 2))
    config.reset()
    try:
        acme.wait_settled(WS, acme.install(WS, "a", "hello", "1.0.0", key="k-a"))
        # When a second one is admitted, it is refused 409 quota_exceeded
        refused = acme.install(WS, "b", "hello", "1.0.0", key="k-b")
    finally:
        monkeypatch.undo()
        config.reset()
    assert (refused.status, refused.code) == (409, "quota_exceeded")
    # Then that answer is in the route's documented 409, and in every route that admits an operation
    item = "/v1/workspaces/{workspace}/installations/{installation_id}"
    admitting = [(item, "put"), (item, "delete")] + [
        (f"{item}/{action}", "post") for action in ("rollback", "archive", "restore", "promote")
    ]
    for path, method in admitting:
        assert "`quota_exceeded`" in _documented_codes(path, method, 409), (method, path)


@pytest.mark.parametrize(
    "path", ["/v1/workspaces/%221%C2%A5/usage", "/v1/uploads/%E2%80%AE", "/v1/workspaces/ws%20x/installations"]
)
def test_a_path_parameter_no_id_pattern_takes_is_400_on_a_route_api_gateway_serves(acme: Caller, path: str) -> None:
    # API Gateway routes any segment to the function; the function's id patterns do not take it: a malformed
    # request (documented 400 on every route), not "no such route"
    answer = acme.get(path)
    assert (answer.status, answer.code) == (400, "invalid_request"), answer.body


def test_an_unknown_route_is_still_404(acme: Caller) -> None:
    assert (acme.get("/v1/nothing-here").status, acme.get("/v1/nothing-here").code) == (404, "not_found")


def test_a_yank_that_crashed_after_binding_its_key_is_finished_by_its_retry(acme: Caller) -> None:
    from devstack.faults import InjectedCrash, crash_after

    acme.publish("hello", "1.0.0", build_from_files({"SKILL.md": b"v1\n"}))
    # Given a yank whose process dies right after its key was bound (the first AWS call), before it yanked
    with crash_after(1) as plan, pytest.raises(InjectedCrash):
        acme.delete("/v1/packages/hello/versions/1.0.0", headers={"Idempotency-Key": "k-crash"})
    assert plan.crashed
    assert acme.get("/v1/packages/hello/versions/1.0.0").body.get("yankedAt") is None
    # When the client retries under the same key, the yank is done (the binding is the same request's)
    retried = acme.delete("/v1/packages/hello/versions/1.0.0", headers={"Idempotency-Key": "k-crash"})
    assert retried.status == 200 and retried.body["yankedAt"], retried.body
