"""What a route documents besides its body: each success status with its response model, and the problem+json
errors it can answer (by domain error class, so the codes listed are the ones the code raises)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from typing import Annotated, Any

from aws_lambda_powertools.event_handler.openapi.params import Query
from pydantic import BaseModel

from packyard.api.principal import SECURITY_SCHEME
from packyard.authority import Permission
from packyard.errors import Forbidden, InvalidRequest, PackyardError, Unauthorized

PROBLEM_SCHEMA = {"$ref": "#/components/schemas/Problem"}
# a list route's query parameters: at most 100 items a page (the catalogue's and the workspaces' MAX_PAGE), and the
# opaque cursor of the page before
PageSize = Annotated[int, Query(ge=1, le=100)]
Cursor = Annotated[str | None, Query(max_length=2048)]


def contract(
    permission: Permission,
    ok: Mapping[int, tuple[str, type[BaseModel]]],
    errors: Iterable[type[PackyardError]],
    *,
    examples: Mapping[int, dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """Route decorator keywords: the permission the route needs (its OpenAPI ``security``, which ``authorize``
    enforces) and its documented responses, 403 ``forbidden`` included; ``examples`` maps a status to its named
    examples (``packyard.api.examples``)."""
    return {
        "security": [{SECURITY_SCHEME: [permission.value]}],
        "responses": responses(ok, (*errors, Forbidden), examples=examples),
    }


def authenticated_contract(ok: Mapping[int, tuple[str, type[BaseModel]]]) -> dict[str, Any]:
    """Route decorator keywords for a route any valid token may call (``security`` with no scope, which
    ``authorize`` reads as "authenticated only"; a route that declares no ``security`` at all is still refused)."""
    return {"security": [{SECURITY_SCHEME: []}], "responses": responses(ok, ())}


def responses(
    ok: Mapping[int, tuple[str, type[BaseModel]]],
    errors: Iterable[type[PackyardError]],
    *,
    examples: Mapping[int, dict[str, Any]] | None = None,
) -> dict[int, Any]:
    """Powertools ``responses=`` for a route: ``ok`` maps a status to (description, model), ``examples`` a status to
    its named examples (a success's or a problem's); every route may also answer 400 (a malformed path or query)
    and 401 (no valid tenant claim)."""
    documented: dict[int, Any] = {
        status: {"description": description, "content": {"application/json": {"model": model}}}
        for status, (description, model) in ok.items()
    }
    by_status: dict[int, list[type[PackyardError]]] = defaultdict(list)
    # every route may answer 400: a control character in the path, a path parameter no id pattern takes, a query
    # parameter out of its bounds (api.resolver)
    declared: list[type[PackyardError]] = [InvalidRequest, *errors, Unauthorized]
    for error in declared:
        if error not in by_status[error.status]:
            by_status[error.status].append(error)
    for status, classes in sorted(by_status.items()):
        codes = ", ".join(f"`{cls.code}`" for cls in classes)
        documented[status] = {
            "description": f"{classes[0].title if len(classes) == 1 else 'Refused'} (problem+json: {codes})",
            "content": {"application/problem+json": {"schema": PROBLEM_SCHEMA}},
        }
    for status, named in (examples or {}).items():
        (content,) = documented[status]["content"].values()  # application/json, or problem+json for an error
        content["examples"] = named
    return documented
