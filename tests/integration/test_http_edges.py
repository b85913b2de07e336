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
