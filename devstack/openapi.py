"""The API's OpenAPI document, generated from the code: every function that template.yaml wires to the HttpApi.

Each HTTP function's module holds one Powertools resolver (``app``); its schema comes from the routes, their
decorators' metadata (operationId, summary, description, one tag) and their type annotations. Powertools'
``OpenAPIMerge`` joins them (a route declared twice is an error); the tags are defined here (``TAGS``) and the
OAuth 2.0 scheme whose tokens the HttpApi JWT authorizer verifies is added, its scopes defined once (``SCOPES``). A
function the template adds later shows up by itself.

    python -m devstack.openapi            # print the document
    python -m devstack.openapi --write    # regenerate docs/openapi.json (make openapi)
    python -m devstack.openapi --check    # exit 1 if docs/openapi.json differs from the code
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

from devstack import lambdas
from devstack.template import DEFAULT_TEMPLATE, ROOT, load_template
from packyard.api.principal import SECURITY_SCHEME
from packyard.authority import Permission

COMMITTED = ROOT / "docs" / "openapi.json"
TITLE = "Packyard API"
API_VERSION = "v1"
DESCRIPTION = (
    "Publish immutable packages and install them durably into workspaces. Every route needs an OAuth 2.0 access "
    "token (a JWT from the identity provider the deployment trusts) whose tenant claim names the caller's tenant, "
    "and one scope per route. Errors are RFC 9457 `application/problem+json` with a stable `code`."
)
CONTACT = "Packyard maintainers (issues in the Packyard repository)"
# Every operation names exactly one of these tags (tests/unit/test_openapi_contract.py); a new tag needs a line here.
TAGS = {
    "publish": "Upload sessions: open one, PUT the archive to its presigned URL, complete it; the publish workflow "
    "verifies the archive against its manifest and records the release, or rejects it with a stable code.",
    "releases": "The tenant's catalogue: packages, their immutable releases with manifests and publish receipts, "
    "download links of verified archives, and yanking.",
    "installations": "Installations in a workspace and the operations that change them (install, update, repair, "
    "uninstall, rollback, archive, restore, promote), exactly once per Idempotency-Key; their previews, operation "
    "status and what a runtime loads.",
    "approvals": "Consent: the operations that wait for an owner's decision on the permissions their plan asks, and "
    "that decision.",
    "usage": "A workspace's and the tenant's usage against their limits and quotas.",
    "principal": "The caller as Packyard read it from the token: tenant, subject, actor kind, scopes.",
    "signing": "Offline verification: the service's public signing keys and the signed attestation of a release.",
}
# The scopes of the OAuth 2.0 scheme (their default names: a deployment may rename them, README "Connect your
# identity provider"); every route's security requirement names one of them, GET /v1/me none.
SCOPES = {
    Permission.READ_PACKAGES: "Read the catalogue: packages, releases, manifests, archive download links",
    Permission.PUBLISH: "Publish: open, complete and read upload sessions",
    Permission.YANK: "Yank a release",
    Permission.READ_WORKSPACES: "Read workspaces: installations, operations, what a runtime loads, approvals",
    Permission.CHANGE_INSTALLATIONS: "Install, update, uninstall, roll back, archive, restore, promote and preview",
    Permission.APPROVE: "Approve or reject the plan an operation waits with (a person's decision)",
    Permission.READ_USAGE: "Read usage against limits and quotas",
}
# Where the local stack's OpenID Connect issuer answers (devstack.oidc, under /oidc, relative to the server URL); on a
# deployment the flows are the identity provider's, found from its discovery document (its issuer + DISCOVERY_PATH).
LOCAL_ISSUER_PATH = "/oidc"
DISCOVERY_PATH = "/.well-known/openid-configuration"
AUTHORIZATION_PATH = LOCAL_ISSUER_PATH + "/authorize"
TOKEN_PATH = LOCAL_ISSUER_PATH + "/token"


def http_function_modules(template: str | Path = DEFAULT_TEMPLATE) -> dict[str, Path]:
    """``{logical id: handler module file}`` of every function with an HttpApi event, sorted by logical id."""
    template_path = Path(template).resolve()
    doc = load_template(template_path)
    handler_default = doc.get("Globals", {}).get("Function", {}).get("Handler")
    found: dict[str, Path] = {}
    for logical_id, resource in sorted(doc.get("Resources", {}).items()):
        if resource.get("Type") != "AWS::Serverless::Function":
            continue
        props = resource.get("Properties", {})
        events = (props.get("Events") or {}).values()
        if not any(event.get("Type") == "HttpApi" for event in events):
            continue
        handler = props.get("Handler", handler_default)
        module_path = str(handler).rpartition(".")[0]
        found[logical_id] = template_path.parent / props["CodeUri"] / (module_path.replace(".", "/") + ".py")
    return found


def _load_resolver(logical_id: str, file: Path) -> Any:
    name = "_devstack_openapi_" + re.sub(r"\W", "_", logical_id)
    module = sys.modules.get(name) or lambdas.load_module(file, name)
    resolver = getattr(module, "app", None)
    if resolver is None or not hasattr(resolver, "get_openapi_schema"):
        raise AttributeError(f"{logical_id}: {file} has no Powertools resolver named 'app'")
    return resolver


def security_scheme() -> Any:
    """The OAuth 2.0 scheme: authorization code with PKCE for people (``packyard login``), client credentials for
    machines (``packyard login --client-credentials``), the same scopes for both."""
    from aws_lambda_powertools.event_handler.openapi.models import (
        OAuth2,
        OAuthFlowAuthorizationCode,
        OAuthFlowClientCredentials,
        OAuthFlows,
    )

    scopes = {permission.value: SCOPES[permission] for permission in Permission}
    return OAuth2(
        description=(
            "OAuth 2.0 / OpenID Connect access tokens (JWT), verified by API Gateway's JWT authorizer against the "
            "deployment's issuer and audience. People sign in with the authorization code flow and PKCE, machines "
            "with client credentials. The URLs below are the local stack's issuer (relative to the server; its "
            f"discovery document is `{LOCAL_ISSUER_PATH}{DISCOVERY_PATH}`); a deployment's are its identity "
            f"provider's, from `<issuer>{DISCOVERY_PATH}`."
        ),
        flows=OAuthFlows(
            authorizationCode=OAuthFlowAuthorizationCode(
                authorizationUrl=AUTHORIZATION_PATH, tokenUrl=TOKEN_PATH, refreshUrl=TOKEN_PATH, scopes=scopes
            ),
            clientCredentials=OAuthFlowClientCredentials(tokenUrl=TOKEN_PATH, scopes=scopes),
        ),
    )


def generate(template: str | Path = DEFAULT_TEMPLATE, *, server_url: str | None = None) -> dict[str, Any]:
    """The merged OpenAPI document of every HTTP function in ``template`` (paths sorted, stable output)."""
    from aws_lambda_powertools.event_handler.openapi.merge import OpenAPIMerge
    from aws_lambda_powertools.event_handler.openapi.models import Contact, Server, Tag

    schemes = {SECURITY_SCHEME: security_scheme()}
    merge = OpenAPIMerge(
        title=TITLE,
        version=API_VERSION,
        description=DESCRIPTION,
        contact=Contact(name=CONTACT),
        servers=[Server(url=server_url or "/")],
        tags=[Tag(name=name, description=description) for name, description in TAGS.items()],
        security_schemes=schemes,
        security=[{SECURITY_SCHEME: []}],
        on_conflict="error",
    )
    for logical_id, file in http_function_modules(template).items():
        merge.add_schema(_load_resolver(logical_id, file).get_openapi_schema(security_schemes=schemes))
    document: dict[str, Any] = json.loads(merge.get_openapi_json_schema())
    document["paths"] = dict(sorted(document.get("paths", {}).items()))
    for kind, entries in (document.get("components") or {}).items():
        document["components"][kind] = dict(sorted(entries.items()))
    return _with_problems(document)


def _with_problems(document: dict[str, Any]) -> dict[str, Any]:
    """Errors are problem+json with a stable code (the resolver maps validation errors to 400 invalid_request), not
    Powertools' default 422 body: document what the API really answers."""
    from packyard import errors

    codes = sorted(
        {cls.code for cls in vars(errors).values() if isinstance(cls, type) and issubclass(cls, errors.PackyardError)}
    )
    schemas = document.setdefault("components", {}).setdefault("schemas", {})
    schemas["Problem"] = {
        "type": "object",
        "title": "Problem",
        "description": "RFC 9457 problem details with a stable code; some codes add fields (expected/actual, "
        "operationId/retryAfter, subCode, claim, requiredScope, ...).",
        "required": ["type", "title", "status", "code", "detail"],
        "properties": {
            "type": {"type": "string"},
            "title": {"type": "string"},
            "status": {"type": "integer"},
            "code": {"type": "string", "enum": codes},
            "detail": {"type": "string"},
            "subCode": {"type": "string", "enum": sorted(str(c) for c in errors.ArchiveRejectCode)},
            "claim": {
                "type": "string",
                "description": "401 unauthorized: the token claim that was missing or unreadable",
            },
            "requiredScope": {"type": "string", "description": "403 forbidden: the scope the route needs"},
        },
        "additionalProperties": True,
    }
    problem = {
        "description": "Error: problem+json with a stable code",
        "content": {"application/problem+json": {"schema": {"$ref": "#/components/schemas/Problem"}}},
    }
    for operations in document.get("paths", {}).values():
        for operation in operations.values():
            responses = operation.get("responses", {})
            # Powertools documents its own 422 validation body; a route that declares a 422 of ours keeps it
            if "HTTPValidationError" in json.dumps(responses.get("422", {})):
                responses.pop("422")
            responses["default"] = problem
            operation["responses"] = dict(sorted(responses.items()))
    # Powertools adds its validation bodies; once ours replace them they are unused (and ResponseValidationError
    # would point at the removed ValidationError: a dangling $ref)
    for unused in ("HTTPValidationError", "ResponseValidationError", "ValidationError"):
        if unused in schemas and unused not in json.dumps(document["paths"]):
            schemas.pop(unused)
    document["components"]["schemas"] = dict(sorted(schemas.items()))
    return document


def render(document: dict[str, Any]) -> str:
    return json.dumps(document, indent=2, ensure_ascii=False) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m devstack.openapi", description=__doc__.splitlines()[0])
    action = parser.add_mutually_exclusive_group()
    action.add_argument("--write", action="store_true", help=f"write {COMMITTED.relative_to(ROOT)}")
    action.add_argument("--check", action="store_true", help="exit 1 if the committed document is out of date")
    args = parser.parse_args(argv)
    text = render(generate())
    if args.write:
        COMMITTED.parent.mkdir(parents=True, exist_ok=True)
        COMMITTED.write_text(text, "utf-8")
        print(f"wrote {COMMITTED.relative_to(ROOT)} ({len(text)} bytes)")
        return 0
    if args.check:
        current = COMMITTED.read_text("utf-8") if COMMITTED.exists() else ""
        if current != text:
            print(f"{COMMITTED.relative_to(ROOT)} is out of date: run `make openapi`", file=sys.stderr)
            return 1
        print(f"{COMMITTED.relative_to(ROOT)} is up to date")
        return 0
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
