"""What a mutation must carry: an If-Match naming an installation version, a valid Idempotency-Key, and the
deterministic operation id derived from (tenant, workspace, key)."""

from __future__ import annotations

import re

import pytest

from packyard.errors import IdempotencyKeyRequired, InvalidRequest, VersionConflict
from packyard.operations.preconditions import check_idempotency_key, operation_id_for, parse_if_match

PRINTABLE_ASCII = "".join(chr(c) for c in range(0x20, 0x7F))
OPERATION_ID = re.compile(r"^op-[0-9a-f]{32}$")


@pytest.mark.parametrize(
    ("header", "expected"),
    [
        pytest.param(None, None, id="absent"),
        pytest.param('"3"', 3, id="quoted"),
        pytest.param(' "3" ', 3, id="surrounding whitespace"),
        pytest.param('"42"', 42, id="several digits"),
    ],
)
def test_given_an_if_match_header_when_parsed_then_it_names_the_version(header, expected):
    assert parse_if_match(header) == expected


@pytest.mark.parametrize("header", ['W/"3"', ' W/"3" ', "W/3"], ids=["weak", "weak with spaces", "weak unquoted"])
def test_given_a_weak_if_match_then_it_never_matches_version_conflict(header):
    # RFC 9110 13.1.1: If-Match uses the strong comparison function
    with pytest.raises(VersionConflict) as refused:
        parse_if_match(header)
    assert (refused.value.status, refused.value.code) == (412, "version_conflict")


@pytest.mark.parametrize(
    "header",
    [
        pytest.param('"abc"', id="letters"),
        pytest.param('""', id="empty quotes"),
        pytest.param("", id="empty header"),
        pytest.param('"-1"', id="negative"),
        pytest.param('"+3"', id="signed"),
        pytest.param('"1.0"', id="decimal"),
        pytest.param('"\u0663"', id="arabic-indic digit three"),
        pytest.param('"\u00b3"', id="superscript three"),
        pytest.param('"3", "4"', id="a list of tags"),
        pytest.param('" 3"', id="space inside the quotes"),
        # RFC 9110 8.8.3: an entity-tag is DQUOTE *etagc DQUOTE; these are not one (they used to parse as 3)
        pytest.param("3", id="unquoted"),
        pytest.param('"3', id="no closing quote"),
        pytest.param('3"', id="no opening quote"),
        pytest.param('""3""', id="doubled quotes"),
        pytest.param('"3"x', id="text after the tag"),
    ],
)
def test_given_a_malformed_if_match_when_parsed_then_invalid_request(header):
    with pytest.raises(InvalidRequest) as refused:
        parse_if_match(header)

    assert (refused.value.status, refused.value.code) == (400, "invalid_request")


@pytest.mark.parametrize(
    "key",
    [
        pytest.param("k", id="one character"),
        pytest.param("a" * 255, id="255 characters"),
        pytest.param(PRINTABLE_ASCII, id="every printable ASCII character"),
        pytest.param("2f1c9a5e-6a7b-4c1d-9e8f-0a1b2c3d4e5f", id="a uuid"),
    ],
)
def test_given_a_valid_idempotency_key_when_checked_then_it_is_returned_unchanged(key):
    assert check_idempotency_key(key) == key


@pytest.mark.parametrize(
    ("key", "error", "code"),
    [
        pytest.param(None, IdempotencyKeyRequired, "idempotency_key_required", id="absent"),
        pytest.param("", IdempotencyKeyRequired, "idempotency_key_required", id="empty"),
        pytest.param("a" * 256, InvalidRequest, "invalid_request", id="256 characters"),
        pytest.param("key\n", InvalidRequest, "invalid_request", id="newline"),
        pytest.param("key\ttab", InvalidRequest, "invalid_request", id="tab"),
        pytest.param("key\x00", InvalidRequest, "invalid_request", id="NUL"),
        pytest.param("key\x7f", InvalidRequest, "invalid_request", id="DEL"),
        pytest.param("cl\u00e9", InvalidRequest, "invalid_request", id="latin-1 letter"),
        pytest.param("\u952e", InvalidRequest, "invalid_request", id="CJK character"),
    ],
)
def test_given_a_missing_or_invalid_idempotency_key_when_checked_then_refused(key, error, code):
    with pytest.raises(error) as refused:
        check_idempotency_key(key)

    assert type(refused.value) is error
    assert (refused.value.status, refused.value.code) == (400, code)


BASE = ("t-acme", "ws-1", "key-1")


@pytest.mark.parametrize(
    "other",
    [
        pytest.param(("t-globex", "ws-1", "key-1"), id="another tenant"),
        pytest.param(("t-acme", "ws-2", "key-1"), id="another workspace"),
        pytest.param(("t-acme", "ws-1", "key-2"), id="another key"),
        pytest.param(("t-acme", "ws-1", "KEY-1"), id="key differs only in case"),
        pytest.param(("t-acmews-1", "", "key-1"), id="tenant and workspace run together"),
        pytest.param(("t-acme", "ws-1key-1", ""), id="workspace and key run together"),
    ],
)
def test_given_a_different_tenant_workspace_or_key_when_deriving_then_another_operation_id(other):
    assert operation_id_for(*other) != operation_id_for(*BASE)


@pytest.mark.parametrize(
    "names",
    [
        pytest.param(BASE, id="ordinary"),
        pytest.param(("t", "w", "a" * 255), id="longest key"),
        pytest.param(("t", "w", PRINTABLE_ASCII), id="every printable character"),
    ],
)
def test_given_the_same_tenant_workspace_and_key_when_deriving_then_the_same_op_prefixed_id(names):
    first, again = operation_id_for(*names), operation_id_for(*names)

    assert first == again
    assert OPERATION_ID.match(first)


def test_given_a_known_key_when_deriving_then_the_id_is_stable_across_processes_and_deploys():
    # a changed derivation would make every retry of an in-flight key a new operation: pin one value
    assert operation_id_for(*BASE) == "op-00c2398a30679820e7bd65817a07b0bf"
