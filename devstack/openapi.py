"""The API's OpenAPI document, generated from the code: every function that template.yaml wires to the HttpApi.

Each HTTP function's module holds one Powertools resolver (``app``); its schema comes from the routes and their
type annotations. Powertools' ``OpenAPIMerge`` joins them (a route declared twice is an error), and the JWT
bearer scheme the HttpApi authorizer enforces is added. A function the template adds later shows up by itself.

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
from packyard.api.principal import BEARER_SCHEME

COMMITTED = ROOT / "docs" / "openapi.json"
TITLE = "Packyard API"
API_VERSION = "v1"
DESCRIPTION = (
    "Publish immutable packages and install them durably into workspaces. Every route needs a JWT bearer token "
    "whose `tenant` claim names the caller's tenant. Errors are RFC 9457 `application/problem+json` with a stable "
    "`code`."
)


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


def generate(template: str | Path = DEFAULT_TEMPLATE, *, server_url: str | None = None) -> dict[str, Any]:
    """The merged OpenAPI document of every HTTP function in ``template`` (paths sorted, stable output)."""
    from aws_lambda_powertools.event_handler.openapi.merge import OpenAPIMerge
    from aws_lambda_powertools.event_handler.openapi.models import HTTPBearer, Server

    merge = OpenAPIMerge(
        title=TITLE,
        version=API_VERSION,
        description=DESCRIPTION,
        servers=[Server(url=server_url or "/")],
        security_schemes={BEARER_SCHEME: HTTPBearer(bearerFormat="JWT")},
        security=[{BEARER_SCHEME: []}],
        on_conflict="error",
    )
    # each route names the scope it needs under the bearer scheme (OpenAPI 3.1 allows role names for non-OAuth schemes)
    schemes = {BEARER_SCHEME: HTTPBearer(bearerFormat="JWT")}
    for logical_id, file in http_function_modules(template).items():
        merge.add_schema(_load_resolver(logical_id, file).get_openapi_schema(security_schemes=schemes))
    document: dict[str, Any] = json.loads(merge.get_openapi_json_schema())
    document["paths"] = dict(sorted(document.get("paths", {}).items()))
    for kind, entries in (document.get("components") or {}).items():
        document["components"][kind] = dict(sorted(entries.items()))
    document["tags"] = sorted(document.get("tags", []), key=lambda tag: tag["name"])
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
        "operationId/retryAfter, subCode, ...).",
        "required": ["type", "title", "status", "code", "detail"],
        "properties": {
            "type": {"type": "string"},
            "title": {"type": "string"},
            "status": {"type": "integer"},
            "code": {"type": "string", "enum": codes},
            "detail": {"type": "string"},
            "subCode": {"type": "string", "enum": sorted(str(c) for c in errors.ArchiveRejectCode)},
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
    for unused in ("HTTPValidationError", "ValidationError"):
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
