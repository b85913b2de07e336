"""Schema fuzzing (schemathesis) of the whole OpenAPI document against the real local stack over HTTP (issue 10).

Every operation of ``docs/openapi.json`` gets generated requests (valid and invalid data) sent to ``packyard local``
on free ports, with a token holding every scope (actor owner) for one tenant. Path parameters, body fields (package,
version, operationId, planDigest) and the Idempotency-Key / If-Match headers are either what the fuzzer generated or,
mostly, real values seeded beforehand (three published versions of a package, a workspace with an installation that
has a previous release and one waiting for consent, their operations, a published and an awaiting upload), so
requests reach existing resources and get past the preconditions, not only 404s and 400s. Every answer must pass:

- ``not_a_server_error``: no 5xx;
- ``status_code_conformance``: the status is documented for the operation (checked against the document without
  its ``default`` responses, which would accept any status: ``without_default_responses``);
- ``content_type_conformance``: the content type is the documented one;
- ``response_schema_conformance``: the body matches the documented schema;
- ``problem_json_with_a_stable_code`` (ours): every 4xx is ``application/problem+json`` with a ``code`` the service
  defines (``packyard.errors``), the HTTP status repeated in ``status``, and no AWS error text.

``make test`` runs a bounded number of examples per operation with a fixed seed (``derandomize``); ``make fuzz``
runs a longer campaign with the same checks (``FUZZ_EXAMPLES`` examples per operation, ``FUZZ_SEED`` to vary it).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from typing import Any

import pytest
import requests
import schemathesis
from hypothesis import HealthCheck, seed, settings
from hypothesis import strategies as st
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from devstack.openapi import COMMITTED
from packyard import errors
from packyard_cli.build import BuiltPackage, build_from_files
from packyard_cli.tokens import ALL_SCOPES, load_or_create_key
from tests.e2e.helpers import Stack, running_stack

pytestmark = pytest.mark.xdist_group("fuzz")

# bounded in `make test` (the whole module ~60-90 s on two cores); `make fuzz` raises it
EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "15"))
SEED = os.environ.get("FUZZ_SEED")
TENANT = "t-fuzz"
PACKAGE = "fuzz-pkg"
WAITING = "fuzz-net"  # declares a network permission: its install waits for an owner's consent
WORKSPACE = "ws-fuzz"
YANKABLE = "1.2.0"  # the one seeded version the yank route gets
INSTALLATION = "fuzz-pkg"
CODES = frozenset(
    cls.code for cls in vars(errors).values() if isinstance(cls, type) and issubclass(cls, errors.PackyardError)
)
AWS_TEXT = ("ClientError", "botocore", "An error occurred (")

# the coverage phase (schemathesis' deterministic boundary and negative cases, ~800 requests) runs in `make fuzz`
COVERAGE = os.environ.get("FUZZ_COVERAGE", "0") == "1"
# Loaded by a fixture: the whole document is one pytest item, each operation a subtest. (Collected per operation,
# schemathesis' items share one node id, and xdist, which schedules by node id, would run only the first.)
schema = schemathesis.pytest.from_fixture("api_schema")


def problem_json_with_a_stable_code(ctx: Any, response: schemathesis.Response, case: schemathesis.Case) -> None:
    """Every 4xx is RFC 9457 problem+json carrying a code the service defines, and never AWS's own text."""
    if not 400 <= response.status_code < 500:
        return
    content_type = (response.headers.get("content-type") or [""])[0].split(";")[0].strip()
    assert content_type == "application/problem+json", f"{response.status_code} answered as {content_type!r}"
    body = json.loads(response.content)
    assert isinstance(body, dict), body
    assert body.get("code") in CODES, f"{response.status_code} with code {body.get('code')!r}: {body}"
    assert body.get("status") == response.status_code, body
    assert not any(text in response.text for text in AWS_TEXT), body


CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
    problem_json_with_a_stable_code,
]


# ------------------------------------------------------------------ the stack and its seeded resources


def _publish(api: str, http: requests.Session, version: str, built: BuiltPackage, package: str = PACKAGE) -> str:
    created = http.post(f"{api}/v1/packages/{package}/versions/{version}/uploads", json=built.upload_request())
    assert created.status_code == 201, created.text
    session = created.json()
    if session["uploadRequired"]:
        put = requests.put(session["upload"]["url"], data=built.archive, timeout=30)
        assert put.status_code == 200, put.text
    completed = http.post(f"{api}/v1/uploads/{session['uploadId']}/complete")
    assert completed.status_code in (200, 202), completed.text
    deadline = time.monotonic() + 60
    state = completed.json()["state"]
    while state == "verifying" and time.monotonic() < deadline:
        time.sleep(0.1)
        state = http.get(f"{api}/v1/uploads/{session['uploadId']}").json()["state"]
    assert state == "published", state
    upload_id: str = session["uploadId"]
    return upload_id


def _install(
    api: str, http: requests.Session, version: str, *, package: str = PACKAGE, if_match: str | None = None
) -> dict[str, Any]:
    headers = {"Idempotency-Key": f"seed-{package}-{version}", **({"If-Match": if_match} if if_match else {})}
    admitted = http.put(
        f"{api}/v1/workspaces/{WORKSPACE}/installations/{package}",
        json={"package": package, "version": version},
        headers=headers,
    )
    assert admitted.status_code in (200, 202), admitted.text
    op: dict[str, Any] = admitted.json()
    deadline = time.monotonic() + 60
    while op["state"] not in ("settled", "awaiting_consent") and time.monotonic() < deadline:
        time.sleep(0.1)
        op = http.get(f"{api}/v1/workspaces/{WORKSPACE}/operations/{op['operationId']}").json()
    return op


@pytest.fixture(scope="module")
def fuzz_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    with running_stack(tmp_path_factory.mktemp("packyard-fuzz")) as running:
        yield running


@pytest.fixture(scope="module")
def token(fuzz_stack: Stack) -> str:
    key = load_or_create_key(fuzz_stack.state_dir)
    return key.mint(tenant=TENANT, subject="fuzzer", scopes=ALL_SCOPES, actor="owner", ttl_seconds=4 * 3600)


@pytest.fixture(scope="module")
def seeded(fuzz_stack: Stack, token: str) -> dict[str, list[str]]:
    """Real ids for every path parameter: published versions, an installation with a previous release, its
    operation, a published upload and one still awaiting its bytes."""
    api = fuzz_stack.api
    http = requests.Session()
    http.headers["Authorization"] = f"Bearer {token}"
    published = _publish(api, http, "1.0.0", build_from_files({"SKILL.md": b"fuzz v1\n"}))
    _publish(api, http, "1.1.0", build_from_files({"SKILL.md": b"fuzz v1.1\n"}))
    _publish(api, http, YANKABLE, build_from_files({"SKILL.md": b"fuzz v1.2\n"}))
    first = _install(api, http, "1.0.0")
    second = _install(api, http, "1.1.0", if_match='"1"')
    assert [op["outcome"]["result"] for op in (first, second)] == ["succeeded", "succeeded"], (first, second)
    network = [{"kind": "network", "resource": "api.fuzz.example"}]
    _publish(api, http, "1.0.0", build_from_files({"SKILL.md": b"net\n"}, permissions=network), package=WAITING)
    waiting = _install(api, http, "1.0.0", package=WAITING)
    assert waiting["state"] == "awaiting_consent", waiting
    SEED_BODIES.update(
        {
            "package": [PACKAGE, WAITING],
            "version": ["1.0.0", "1.1.0", "1.2.0"],
            "operationId": [waiting["operationId"]],
            "planDigest": [waiting["consent"]["planDigest"]],
        }
    )
    awaiting = http.post(
        f"{api}/v1/packages/{PACKAGE}/versions/2.0.0/uploads",
        json=build_from_files({"SKILL.md": b"fuzz v2\n"}).upload_request(),
    )
    assert awaiting.status_code == 201, awaiting.text
    return {
        "package": [PACKAGE, WAITING],
        "version": ["1.0.0", "1.1.0", "1.2.0", "2.0.0"],
        "upload_id": [published, awaiting.json()["uploadId"]],
        "workspace": [WORKSPACE],
        "installation_id": [INSTALLATION, WAITING],
        "operation_id": [first["operationId"], second["operationId"], waiting["operationId"]],
    }


SEEDS: dict[str, list[str]] = {}  # path parameter -> seeded ids (filled by the fuzz_session fixture)
SEED_BODIES: dict[str, list[str]] = {}  # body field -> seeded values (package, version, operationId, planDigest)


def _mostly(seeded: list[str] | None, generated: Any) -> st.SearchStrategy[Any]:
    """The generated value one time in four, else one of the seeded ones (three branches of four)."""
    if not seeded:
        return st.just(generated)
    return st.one_of(st.just(generated), *[st.sampled_from(seeded)] * 3)


def flatmap_path_parameters(context: schemathesis.HookContext, path_parameters: dict[str, Any]) -> Any:
    """Each path parameter is what the fuzzer generated or one of the seeded ids (drawn like any other value)."""
    if not path_parameters:
        return st.just(path_parameters)
    seeds = dict(SEEDS)
    if context.operation is not None and context.operation.method.upper() == "DELETE" and "version" in seeds:
        seeds["version"] = [YANKABLE]  # a yank of the installed versions would leave the install routes nothing
    return st.fixed_dictionaries({name: _mostly(seeds.get(name), value) for name, value in path_parameters.items()})


def flatmap_body(context: schemathesis.HookContext, body: Any) -> Any:
    """Body fields naming a package, version, operation or plan digest are sometimes seeded ones, so installs,
    decisions and previews get past "no such release" into admission, planning and consent."""
    if not isinstance(body, dict) or not SEED_BODIES.keys() & body.keys():
        return st.just(body)
    fields = {name: _mostly(values, body[name]) for name, values in SEED_BODIES.items() if name in body}
    return st.fixed_dictionaries(fields).map(lambda drawn: {**body, **drawn})


def flatmap_headers(context: schemathesis.HookContext, headers: dict[str, Any] | None) -> Any:
    """``Idempotency-Key`` is often a well-formed key (also where the optional header was left out) and ``If-Match``
    the seeded installation's real version, so mutations also get past their preconditions (the documented header
    schemas are free-form strings)."""
    declared = {parameter.name.lower() for parameter in context.operation.headers} if context.operation else set()
    headers = dict(headers or {})
    replaced = {}
    if "idempotency-key" in declared:
        valid = st.text(st.characters(min_codepoint=0x21, max_codepoint=0x7E), min_size=1, max_size=40)
        replaced["idempotency-key"] = st.one_of(st.just(headers.get("idempotency-key")), valid, valid)
    if "if-match" in declared:
        replaced["if-match"] = _mostly(['"1"', '"2"', '"3"', '"4"'], headers.get("if-match"))
    if not replaced:
        return st.just(headers)
    return st.fixed_dictionaries(replaced).map(
        lambda drawn: {**headers, **{name: value for name, value in drawn.items() if value is not None}}
    )


def without_default_responses(document: dict[str, Any]) -> dict[str, Any]:
    """The document as the fuzzer checks it: every operation also documents ``default`` (any other status is
    problem+json), which makes ``status_code_conformance`` accept every status. Without it, a status an operation
    does not list fails the check."""
    stripped = json.loads(json.dumps(document))
    for operations in stripped.get("paths", {}).values():
        for operation in operations.values():
            if isinstance(operation, dict) and "responses" in operation:
                operation["responses"].pop("default", None)
    return stripped


@pytest.fixture(scope="module")
def api_schema() -> schemathesis.BaseSchema:
    document = without_default_responses(json.loads(COMMITTED.read_text("utf-8")))
    loaded = schemathesis.openapi.from_dict(
        document, config=schemathesis.Config.from_dict({"phases": {"coverage": {"enabled": COVERAGE}}})
    )
    for hook in (flatmap_path_parameters, flatmap_body, flatmap_headers):
        loaded.hook(hook)
    return loaded


@pytest.fixture(autouse=True)
def _node_id_for_the_lazy_schema(request: pytest.FixtureRequest) -> None:
    """schemathesis 4.32's lazy schema reads ``request.node._nodeid``, which pytest 9 no longer sets on its own
    (pytest-xdist does, for a grouped test): without it, ``make fuzz`` (no xdist) fails before the first request."""
    if not hasattr(request.node, "_nodeid"):
        request.node._nodeid = request.node.nodeid


@pytest.fixture(scope="module")
def fuzz_session(seeded: dict[str, list[str]], token: str) -> Iterator[requests.Session]:
    SEEDS.update(seeded)
    session = requests.Session()
    try:
        yield session
    finally:
        session.close()


@schema.parametrize()
@(seed(int(SEED)) if SEED else lambda test: test)
@settings(
    max_examples=EXAMPLES,
    derandomize=SEED is None,
    deadline=None,
    database=None,
    suppress_health_check=list(HealthCheck),
    print_blob=True,
)
def test_the_api_under_schema_fuzzing(
    case: schemathesis.Case, fuzz_stack: Stack, fuzz_session: requests.Session, token: str
) -> None:
    case.call_and_validate(
        base_url=fuzz_stack.api,
        session=fuzz_session,
        headers={"Authorization": f"Bearer {token}"},
        checks=CHECKS,
        timeout=30,
    )


def test_the_fuzzer_checks_statuses_against_the_documented_ones_only() -> None:
    """Without this, ``status_code_conformance`` passed whatever the status (every operation documents ``default``)."""
    document = json.loads(COMMITTED.read_text("utf-8"))
    assert all("default" in op["responses"] for ops in document["paths"].values() for op in ops.values())
    checked = without_default_responses(document)
    operations = [op for ops in checked["paths"].values() for op in ops.values()]
    assert operations and all("default" not in op["responses"] for op in operations)
    assert all(any(status.startswith("2") for status in op["responses"]) for op in operations)
    # an undocumented status on an operation now fails the check (schemathesis reads the same responses)
    loaded = schemathesis.openapi.from_dict(checked)
    operation = next(iter(loaded.get_all_operations())).ok()
    documented = {str(status) for status in operation.definition.raw["responses"]}
    assert "418" not in documented and "default" not in documented
