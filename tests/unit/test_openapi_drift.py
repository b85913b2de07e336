"""docs/openapi.json is generated from the handlers (make openapi); these tests fail when it drifts from the code."""

from __future__ import annotations

import json
import re

import pytest

from devstack.api import template_routes
from devstack.openapi import COMMITTED, generate, http_function_modules, render

METHODS = {"get", "put", "post", "delete", "patch", "head", "options"}


@pytest.fixture(scope="module")
def document() -> dict:
    return generate()


def _shape(path: str) -> str:
    # The template names path parameters {id}, the handlers <upload_id>: compare the route's shape only.
    return re.sub(r"\{[^}]+\}", "{}", path)


def test_committed_openapi_document_matches_the_code(document: dict) -> None:
    # Given the document generated from every HTTP function in template.yaml
    generated = render(document)

    # When it is compared with the committed one
    committed = COMMITTED.read_text("utf-8") if COMMITTED.exists() else ""

    # Then they are identical (the message names what changed)
    if committed != generated:
        old = json.loads(committed or "{}").get("paths", {})
        new = json.loads(generated).get("paths", {})
        changed = sorted(p for p in old.keys() | new.keys() if old.get(p) != new.get(p))
        raise AssertionError(f"docs/openapi.json is out of date (run `make openapi`); paths that differ: {changed}")


def test_every_template_route_is_documented_and_nothing_else(document: dict) -> None:
    # Given the routes API Gateway serves (template.yaml) and the operations the document describes
    served = {(route.method.lower(), _shape(route.path)) for route in template_routes()}

    # When both are reduced to (method, path shape)
    documented = {
        (method, _shape(path)) for path, item in document["paths"].items() for method in item if method in METHODS
    }

    # Then they are the same set: no undocumented route, no documented route API Gateway would not serve
    assert served == documented


def test_document_declares_the_oauth2_scheme_for_every_route(document: dict) -> None:
    # the scheme itself (flows, scopes) is checked in test_openapi_contract.py
    assert document["components"]["securitySchemes"]["oauth2"]["type"] == "oauth2"
    assert document["security"] == [{"oauth2": []}]
    assert set(http_function_modules()) >= {"UploadsFunction", "QueriesFunction"}
