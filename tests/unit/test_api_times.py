"""Every time the HTTP API answers is an RFC 3339 UTC string (the store keeps epoch seconds), and every time a route
accepts must be one: the ``Timestamp`` / ``RequestTimestamp`` types of ``packyard.api.times``."""

from __future__ import annotations

import importlib
import json
import pkgutil
import re
from typing import Annotated, Any, get_args

import pytest
from aws_lambda_powertools.event_handler.openapi.params import Body
from pydantic import BaseModel, ValidationError
from pydantic.fields import FieldInfo

from devstack.apigw import http_event
from devstack.openapi import COMMITTED
from packyard import api
from packyard.api import consent_responses, publishing_responses, times, workspace_responses
from packyard.api.publishing_responses import ApiModel
from packyard.api.resolver import build_resolver, serve
from packyard.api.routes import contract
from packyard.api.times import RequestTimestamp, Timestamp, epoch_of, rfc3339
from packyard.authority import Permission
from packyard.errors import InvalidRequest

RFC3339_UTC = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z")
# what a field holding a time is called: createdAt, leaseUntil, since, deadline, ...
TIME_NAME = re.compile(r"(At|Until)$|^(since|deadline|time|timestamp)$")
DATE_TIME = {"type": "string", "format": "date-time"}


# ---- the helper --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("epoch", "text"),
    [(0, "1970-01-01T00:00:00Z"), (1796049772, "2026-11-30T14:42:52Z"), (1796057407, "2026-11-30T16:50:07Z")],
)
def test_epoch_seconds_render_as_rfc3339_utc_and_read_back(epoch: int, text: str) -> None:
    assert rfc3339(epoch) == text
    assert epoch_of(text) == epoch


@pytest.mark.parametrize(
    ("text", "epoch"),
    [
        ("2026-11-30T15:42:52+01:00", 1796049772),  # another offset is the same instant
        ("2026-11-30T14:42:52.999Z", 1796049772),  # a fraction of a second is dropped, never rounded up
        ("2026-11-30t14:42:52z", 1796049772),  # RFC 3339 allows lower-case T and Z
    ],
)
def test_any_rfc3339_date_time_is_read(text: str, epoch: int) -> None:
    assert epoch_of(text) == epoch


NOT_RFC3339 = [
    "1796049772",
    "2026-11-30",
    "2026-11-30T14:42:52",  # no offset
    "2026-11-30 14:42:52Z",
    "2026-11-30T14:42Z",
    "20261130T144252Z",
    "2026-13-30T14:42:52Z",
    "2026-11-30T14:42:52Z\n",
    "",
]


@pytest.mark.parametrize("text", NOT_RFC3339)
def test_anything_else_is_not_a_time(text: str) -> None:
    with pytest.raises(ValueError):
        epoch_of(text)


class Stamped(BaseModel):
    at: Timestamp
    maybe: Timestamp | None = None


class Accepting(BaseModel):
    at: RequestTimestamp


def test_a_response_timestamp_holds_epoch_seconds_and_answers_rfc3339() -> None:
    stamped = Stamped(at=1796049772)

    assert stamped.at == 1796049772
    assert stamped.model_dump(mode="json") == {"at": "2026-11-30T14:42:52Z", "maybe": None}
    assert json.loads(stamped.model_dump_json()) == {"at": "2026-11-30T14:42:52Z", "maybe": None}
    # the resolver re-validates a returned model's dump: the string reads back as the same epoch
    assert Stamped.model_validate(stamped.model_dump(mode="json")) == stamped
    assert Stamped.model_json_schema(mode="serialization")["properties"]["at"].items() >= DATE_TIME.items()


@pytest.mark.parametrize("text", NOT_RFC3339)
def test_a_response_timestamp_refuses_a_string_that_is_not_rfc3339(text: str) -> None:
    with pytest.raises(ValidationError):
        Stamped.model_validate({"at": text})


@pytest.mark.parametrize("value", [*NOT_RFC3339, 1796049772, 1796049772.0, True, None, [], {}])
def test_a_request_timestamp_takes_only_an_rfc3339_string(value: Any) -> None:
    with pytest.raises(ValidationError):
        Accepting.model_validate({"at": value})
    assert Accepting.model_validate({"at": "2026-11-30T14:42:52Z"}).at == 1796049772
    assert Accepting.model_json_schema()["properties"]["at"].items() >= DATE_TIME.items()


# ---- a route that accepts a time answers 400 invalid_request for any other shape --------------------------------


class ProbeRequest(BaseModel):
    at: RequestTimestamp


class ProbeView(ApiModel):
    at: Timestamp


def _probe_app() -> Any:
    app = build_resolver()

    @app.post(
        "/v1/probe",
        **contract(Permission.READ_PACKAGES, {200: ("the time it was given", ProbeView)}, (InvalidRequest,)),
    )
    def probe(request: Annotated[ProbeRequest, Body()]) -> ProbeView:
        return ProbeView(at=request.at)

    return app


def _call(app: Any, body: Any) -> tuple[int, dict[str, Any]]:
    claims = {"tenant": "acme", "sub": "u-1", "scope": Permission.READ_PACKAGES.value}
    answer = serve(app, http_event("POST", "/v1/probe", claims=claims, body=body), None)
    return answer["statusCode"], json.loads(answer["body"])


@pytest.mark.parametrize("value", ["2026-11-30", "1796049772", "2026-11-30T14:42:52", 1796049772, None])
def test_a_route_refuses_a_time_that_is_not_rfc3339_with_invalid_request(value: Any) -> None:
    status, body = _call(_probe_app(), {"at": value})

    assert status == 400
    assert body["code"] == "invalid_request"
    assert [issue["location"] for issue in body["errors"]] == ["body.at"]


def test_a_route_reads_an_rfc3339_time_and_answers_it_in_utc() -> None:
    status, body = _call(_probe_app(), {"at": "2026-11-30T17:50:07+01:00"})

    assert (status, body) == (200, {"at": "2026-11-30T16:50:07Z"})


# ---- every time in every response -------------------------------------------------------------------------------


def _response_models() -> list[type[ApiModel]]:
    """Every response model of every module of ``packyard.api`` (a response module added later is covered too)."""
    modules = [importlib.import_module(f"packyard.api.{info.name}") for info in pkgutil.iter_modules(api.__path__)]
    found = {
        value
        for module in modules
        for value in vars(module).values()
        if isinstance(value, type) and issubclass(value, ApiModel) and value is not ApiModel
    }
    assert {
        publishing_responses.ReleaseView,
        workspace_responses.OperationView,
        consent_responses.ApprovalView,
    } <= found
    return sorted(found, key=lambda model: model.__name__)


def _is_date_time(prop: dict[str, Any]) -> bool:
    shapes = [option for option in prop.get("anyOf", [prop]) if option != {"type": "null"}]
    return len(shapes) == 1 and shapes[0].items() >= DATE_TIME.items()


def _uses_timestamp(field: FieldInfo) -> bool:
    """``Timestamp`` itself (pydantic keeps its metadata on the field) or ``Timestamp | None``."""
    marks = Timestamp.__metadata__
    if tuple(field.metadata[-len(marks) :]) == marks:
        return True
    return any(getattr(arg, "__metadata__", None) == marks for arg in get_args(field.annotation))


@pytest.mark.parametrize("model", _response_models(), ids=lambda model: model.__name__)
def test_every_time_field_of_a_response_model_is_a_timestamp(model: type[ApiModel]) -> None:
    schema = model.model_json_schema(mode="serialization")
    for name, field in model.model_fields.items():
        alias = field.alias or name
        prop = schema["properties"][alias]
        if TIME_NAME.search(alias):
            assert _uses_timestamp(field) and _is_date_time(prop), (
                f"{model.__name__}.{alias} holds a time: annotate it packyard.api.times.Timestamp"
            )
        if _is_date_time(prop):
            assert TIME_NAME.search(alias), f"{model.__name__}.{alias} is a date-time but not named as a time"


def _properties(node: Any, where: str) -> list[tuple[str, str, dict[str, Any]]]:
    found: list[tuple[str, str, dict[str, Any]]] = []
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "properties" and isinstance(value, dict):
                found += [(where, name, prop) for name, prop in value.items() if isinstance(prop, dict)]
            found += _properties(value, f"{where}/{key}")
    elif isinstance(node, list):
        for item in node:
            found += _properties(item, where)
    return found


def test_every_time_in_the_openapi_document_is_an_rfc3339_date_time() -> None:
    document = json.loads(COMMITTED.read_text("utf-8"))
    properties = _properties(document, "")
    timed = [(where, name, prop) for where, name, prop in properties if TIME_NAME.search(name)]

    assert len(timed) >= 20, "the walk found the response times (createdAt, publishedAt, settledAt, ...)"
    wrong = [f"{where}.{name}: {prop}" for where, name, prop in timed if not _is_date_time(prop)]
    assert not wrong, "times must be RFC 3339 strings (type string, format date-time):\n" + "\n".join(wrong)
    for where, name, prop in properties:
        for shape in prop.get("anyOf", [prop]):
            if shape.get("format") == "date-time":
                assert shape.get("type") == "string", f"{where}.{name}"
                for example in shape.get("examples", []):
                    assert RFC3339_UTC.fullmatch(example), f"{where}.{name}: example {example!r}"


def test_the_helper_module_names_what_it_exports() -> None:
    assert set(times.__all__) == {"RequestTimestamp", "Timestamp", "epoch_of", "rfc3339"}
