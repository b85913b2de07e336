"""The OpenAPI document is one tools read well (issue 24, item 3): every operation has an operationId in the domain's
words, a summary, a description and one tag defined with its own description; every ``$ref`` resolves; the security
scheme is OAuth 2.0 with its scopes defined once, and each route names one of them; the examples are bodies the
schemas accept. A route added without its metadata fails here (the board's naming convention)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import pytest
from jsonschema import Draft202012Validator
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012

from devstack.openapi import SCOPES, TAGS, generate
from packyard.api.principal import SECURITY_SCHEME
from packyard.authority import Permission

METHODS = {"get", "put", "post", "delete", "patch", "head", "options"}
# lowerCamelCase, a verb then the domain's nouns (createUpload, putInstallation, decideApproval, getReleaseArchive),
# never Powertools' generated default (decide_v1_workspaces_..._post)
OPERATION_ID = re.compile(r"[a-z]+(?:[A-Z][a-z0-9]*)+")


@pytest.fixture(scope="module")
def document() -> dict[str, Any]:
    return generate()


def _operations(document: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    for path, item in document["paths"].items():
        for method, operation in item.items():
            if method in METHODS:
                yield f"{method.upper()} {path}", operation


def _refs(node: Any) -> Iterator[str]:
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "$ref" and isinstance(value, str):
                yield value
            else:
                yield from _refs(value)
    elif isinstance(node, list):
        for value in node:
            yield from _refs(value)


def test_every_operation_has_an_operation_id_in_the_domains_words(document: dict[str, Any]) -> None:
    ids = {route: operation.get("operationId", "") for route, operation in _operations(document)}

    assert len(ids) >= 25
    assert [route for route, found in ids.items() if not OPERATION_ID.fullmatch(found)] == []
    assert len(set(ids.values())) == len(ids)  # unique: a generated client's function names
    assert ids["POST /v1/packages/{package}/versions/{version}/uploads"] == "createUpload"
    assert ids["POST /v1/uploads/{upload_id}/complete"] == "completeUpload"
    assert ids["PUT /v1/workspaces/{workspace}/installations/{installation_id}"] == "putInstallation"
    assert ids["POST /v1/workspaces/{workspace}/installations/{installation_id}/approvals"] == "decideApproval"


def test_every_operation_has_a_summary_and_a_description(document: dict[str, Any]) -> None:
    lacking = [
        route
        for route, operation in _operations(document)
        if not str(operation.get("summary", "")).strip() or not str(operation.get("description", "")).strip()
    ]
    summaries = [operation["summary"] for _, operation in _operations(document) if "summary" in operation]

    assert lacking == []
    # a summary is a short phrase (no final period), the description says more
    assert [summary for summary in summaries if summary.endswith(".") or len(summary) > 60] == []
    assert all(op["description"] != op["summary"] for _, op in _operations(document))


def test_every_operation_has_one_tag_defined_with_its_description(document: dict[str, Any]) -> None:
    defined = {tag["name"]: tag.get("description", "") for tag in document["tags"]}

    assert defined == TAGS
    assert all(description.strip() for description in defined.values())
    assert [route for route, op in _operations(document) if len(op.get("tags", [])) != 1] == []
    assert {route: op["tags"][0] for route, op in _operations(document) if op["tags"][0] not in defined} == {}


def test_every_ref_resolves(document: dict[str, Any]) -> None:
    dangling = []
    for ref in set(_refs(document)):
        assert ref.startswith("#/"), ref
        node: Any = document
        for part in ref[2:].split("/"):
            if not isinstance(node, dict) or part not in node:
                dangling.append(ref)
                break
            node = node[part]

    assert dangling == []


def test_the_security_scheme_is_oauth2_with_the_scopes_defined_once(document: dict[str, Any]) -> None:
    scheme = document["components"]["securitySchemes"]
    flows = scheme[SECURITY_SCHEME]["flows"]
    scopes = {permission.value for permission in Permission}

    # Then one OAuth 2.0 scheme (no bearer scheme naming scopes it cannot carry): people by authorization code (with
    # PKCE, packyard login), machines by client credentials, the same scopes with their descriptions
    assert list(scheme) == [SECURITY_SCHEME] and scheme[SECURITY_SCHEME]["type"] == "oauth2"
    assert set(flows) == {"authorizationCode", "clientCredentials"}
    assert flows["authorizationCode"]["authorizationUrl"] and flows["authorizationCode"]["tokenUrl"]
    assert flows["clientCredentials"]["tokenUrl"] == flows["authorizationCode"]["tokenUrl"]
    for flow in flows.values():
        assert flow["scopes"] == {permission.value: SCOPES[permission] for permission in Permission}
    assert document["security"] == [{SECURITY_SCHEME: []}]
    # and every operation names that scheme with one defined scope (GET /v1/me: a valid token, no scope)
    requirements = {route: op["security"] for route, op in _operations(document)}
    assert {
        route: found for route, found in requirements.items() if len(found) != 1 or list(found[0]) != [SECURITY_SCHEME]
    } == {}
    named = {route: found[0][SECURITY_SCHEME] for route, found in requirements.items()}
    assert {route: found for route, found in named.items() if len(found) != 1 or found[0] not in scopes} == {
        "GET /v1/me": []
    }
    assert {found[0] for found in named.values() if found} == scopes


def _examples(document: dict[str, Any]) -> Iterator[tuple[str, str, dict[str, Any], Any]]:
    """(route, "request" or the response status, schema, example value) of every body example."""
    for route, operation in _operations(document):
        bodies = [("request", operation.get("requestBody", {}))]
        bodies += list(operation["responses"].items())
        for where, body in bodies:
            for content in body.get("content", {}).values():
                for example in content.get("examples", {}).values():
                    yield route, where, content["schema"], example["value"]


def test_the_main_bodies_have_examples_the_schemas_accept(document: dict[str, Any]) -> None:
    registry: Registry = Registry().with_resource(
        "urn:packyard", Resource.from_contents(document, default_specification=DRAFT202012)
    )
    examples = list(_examples(document))

    for route, where, schema, value in examples:
        schema = json.loads(json.dumps(schema).replace('"#/', '"urn:packyard#/'))
        errors = [error.message for error in Draft202012Validator(schema, registry=registry).iter_errors(value)]
        assert errors == [], (route, where)
    where = {f"{route} {where}" for route, where, _, _ in examples}
    # the publish-and-install journey's bodies, asked and answered
    assert {
        "POST /v1/packages/{package}/versions/{version}/uploads request",
        "POST /v1/packages/{package}/versions/{version}/uploads 201",
        "POST /v1/packages/{package}/versions/{version}/uploads 409",
        "POST /v1/uploads/{upload_id}/complete 202",
        "GET /v1/uploads/{upload_id} 200",
        "PUT /v1/workspaces/{workspace}/installations/{installation_id} request",
        "PUT /v1/workspaces/{workspace}/installations/{installation_id} 202",
        "GET /v1/workspaces/{workspace}/operations/{operation_id} 200",
        "GET /v1/workspaces/{workspace}/approvals 200",
        "POST /v1/workspaces/{workspace}/installations/{installation_id}/approvals request",
        "POST /v1/workspaces/{workspace}/installations/{installation_id}/approvals 200",
        "GET /v1/workspaces/{workspace}/installations/{installation_id} 200",
    } <= where
