"""The operators' dashboard (template.yaml ``OperationsDashboard``, issue 24 item 4) shows only metrics that exist:
each Packyard widget line names a metric the code emits (``metrics.add_metric`` under shared/ and functions/, read
from the source), in the namespace and with the ``service`` dimension the functions' environment gives Powertools;
each AWS line names a metric the service publishes, for one of the stack's own resources.

A metric name built from an f-string (``f"Operations{final.result.title()}"``) is expanded over its placeholder's
domain where the code types it (the outcome's ``result`` literal, the consent ``Decision``, ``DueKind``); another
placeholder (a sweep action's outcome string) matches any CamelCase word.
"""

from __future__ import annotations

import ast
import itertools
import json
import re
import types
import typing
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from devstack.template import DEFAULT_TEMPLATE, ROOT, load_template
from packyard.operations.models import Decision, Outcome
from packyard.store.due import DueKind

TEMPLATE = load_template(DEFAULT_TEMPLATE)
RESOURCES: dict[str, Any] = TEMPLATE["Resources"]
BODY_TEXT: str = RESOURCES["OperationsDashboard"]["Properties"]["DashboardBody"]["Fn::Sub"]
SUB = re.compile(r"\$\{([^}]+)\}")

# What each AWS namespace publishes, and which dimension names which kind of the stack's resource:
# API Gateway HTTP APIs https://docs.aws.amazon.com/apigateway/latest/developerguide/http-api-metrics.html,
# Step Functions https://docs.aws.amazon.com/step-functions/latest/dg/procedure-cw-metrics.html,
# Lambda https://docs.aws.amazon.com/lambda/latest/dg/monitoring-metrics-types.html,
# DynamoDB https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/metrics-dimensions.html
AWS_METRICS = {
    "AWS/ApiGateway": ({"Count", "4xx", "5xx", "Latency", "IntegrationLatency", "DataProcessed"}, "ApiId"),
    "AWS/States": (
        {
            "ExecutionTime",
            "ExecutionThrottled",
            "ExecutionsStarted",
            "ExecutionsSucceeded",
            "ExecutionsFailed",
            "ExecutionsAborted",
            "ExecutionsTimedOut",
        },
        "StateMachineArn",
    ),
    "AWS/Lambda": ({"Invocations", "Errors", "Throttles", "Duration", "ConcurrentExecutions"}, "FunctionName"),
    "AWS/DynamoDB": ({"ReadThrottleEvents", "WriteThrottleEvents", "ThrottledRequests"}, "TableName"),
}
DIMENSION_TYPES = {
    "ApiId": {"AWS::Serverless::HttpApi"},
    "StateMachineArn": {"AWS::Serverless::StateMachine"},
    "FunctionName": {"AWS::Serverless::Function"},
    "TableName": {"AWS::DynamoDB::Table"},
}

# the values a placeholder of an f-string metric name takes, by the name its expression starts from
_RESULTS = typing.get_args(Outcome.model_fields["result"].annotation)
DOMAINS: dict[str, list[Any]] = {
    "final": [types.SimpleNamespace(result=r) for r in _RESULTS],
    "kind": list(DueKind),
}
ANY_WORD = "[A-Z][A-Za-z0-9]*"


# ------------------------------------------------------------------ what the code emits


def _sources() -> Iterator[Path]:
    yield from (ROOT / "shared" / "packyard").rglob("*.py")
    yield from (ROOT / "functions").rglob("*.py")


def _placeholder(value: ast.FormattedValue) -> str:
    expression = ast.unparse(value.value)
    root = expression.split(".", 1)[0]
    if root not in DOMAINS:
        return ANY_WORD
    return "(?:" + "|".join(re.escape(str(eval(expression, {root: d}))) for d in DOMAINS[root]) + ")"


def emitted() -> tuple[set[str], list[re.Pattern[str]]]:
    """The metric names ``add_metric`` is called with: exact names, and patterns for names built by f-strings."""
    names: set[str] = set()
    patterns: list[re.Pattern[str]] = []
    for path in _sources():
        for node in ast.walk(ast.parse(path.read_text("utf-8"))):
            if not (isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "add_metric"):
                continue
            name = next((k.value for k in node.keywords if k.arg == "name"), node.args[0] if node.args else None)
            if isinstance(name, ast.Constant) and isinstance(name.value, str):
                names.add(name.value)
            elif isinstance(name, ast.IfExp) and all(
                isinstance(b, ast.Constant) and isinstance(b.value, str) for b in (name.body, name.orelse)
            ):
                names.update((name.body.value, name.orelse.value))  # type: ignore[attr-defined]
            elif isinstance(name, ast.JoinedStr):
                parts = [
                    re.escape(str(p.value)) if isinstance(p, ast.Constant) else _placeholder(p)  # type: ignore[arg-type]
                    for p in name.values
                ]
                patterns.append(re.compile("".join(parts)))
            else:
                raise AssertionError(f"{path}: a metric name the check cannot read: {ast.unparse(node)}")
    return names, patterns


NAMES, PATTERNS = emitted()


def is_emitted(metric: str) -> bool:
    return metric in NAMES or any(p.fullmatch(metric) for p in PATTERNS)


# ------------------------------------------------------------------ what the dashboard reads


def _placeholders(text: str) -> str:
    def replace(match: re.Match[str]) -> str:
        token = match.group(1)
        assert token.startswith("AWS::") or token in RESOURCES, f"the body names ${{{token}}}, which is no resource"
        return f"@{token}"

    return SUB.sub(replace, text)


def widget_lines(text: str = BODY_TEXT) -> list[tuple[str, list[Any]]]:
    """(widget title, metric line) for every metric line of the body; a line is [namespace, name, dim, value, ...,
    {options}], written out in full (no "." shorthand)."""
    body = json.loads(_placeholders(text))
    found = []
    for widget in body["widgets"]:
        for line in widget["properties"].get("metrics", []):
            assert "." not in line and "..." not in line, line
            found.append((widget["properties"]["title"], [v for v in line if not isinstance(v, dict)]))
    return found


def unknown_metrics(text: str = BODY_TEXT) -> list[str]:
    """The body's lines that name a metric nobody emits (or one of another namespace or resource)."""
    environment = TEMPLATE["Globals"]["Function"]["Environment"]["Variables"]
    namespace, service = environment["POWERTOOLS_METRICS_NAMESPACE"], environment["POWERTOOLS_SERVICE_NAME"]
    wrong = []
    for title, (space, metric, *dimensions) in widget_lines(text):
        where = f"{title}: {space} {metric} {dimensions}"
        if space == namespace:
            if dimensions != ["service", service] or not is_emitted(metric):
                wrong.append(where)
        elif space in AWS_METRICS:
            published, dimension = AWS_METRICS[space]
            value = dimensions[1][1:] if len(dimensions) == 2 and dimensions[1].startswith("@") else None
            kind = RESOURCES.get(value or "", {}).get("Type")
            if metric not in published or dimensions[0] != dimension or kind not in DIMENSION_TYPES[dimension]:
                wrong.append(where)
        else:
            wrong.append(where)
    return wrong


# ------------------------------------------------------------------ the checks


def test_every_widget_line_names_a_metric_that_is_emitted() -> None:
    assert widget_lines(), "the dashboard shows nothing"
    assert unknown_metrics() == []


def test_the_check_refuses_a_metric_nobody_emits_and_one_in_another_namespace_or_resource() -> None:
    assert (
        not is_emitted("ReleasesPublishd") and not is_emitted("OperationsPending") and not is_emitted("ConsentMaybed")
    )
    typo = BODY_TEXT.replace('"ReleasesPublished"', '"ReleasesPublishd"', 1)
    assert [w for w in unknown_metrics(typo) if "ReleasesPublishd" in w]
    wrong_dimension = BODY_TEXT.replace('"service", "packyard"', '"service", "other"', 1)
    assert unknown_metrics(wrong_dimension)
    wrong_resource = BODY_TEXT.replace('"FunctionName", "${UploadsFunction}"', '"FunctionName", "${PackyardTable}"', 1)
    assert unknown_metrics(wrong_resource)


def test_names_built_from_f_strings_expand_over_their_typed_domains() -> None:
    assert {f"Operations{r.title()}" for r in _RESULTS} == {
        "OperationsSucceeded",
        "OperationsRefused",
        "OperationsUnconfirmed",
    }
    assert all(is_emitted(f"Operations{r.title()}") for r in _RESULTS)
    assert set(typing.get_args(Decision)) == {"approve", "reject"}  # each has its metric, named in full
    assert is_emitted("ConsentApproved") and is_emitted("ConsentRejected") and not is_emitted("ConsentRejectd")
    assert is_emitted("SweepJobParkedTotal") and not is_emitted("SweepTableParkedTotal")  # DueKind has no table


REQUIRED = {
    "publishes and rejections": {"ReleasesPublished", "UploadsRejected"},
    "operations admitted": {"OperationsAdmitted"},
    "settled by outcome": {f"Operations{r.title()}" for r in _RESULTS},
    "consent waits": {"ConsentRequested", "ConsentApproved", "ConsentRejected", "ConsentExpired"},
    "throttles": {"Throttles", "ExecutionThrottled", "ReadThrottleEvents", "WriteThrottleEvents"},
    "sweep backlog": {"SweepItemsDue", "SweepActionsFailed"},
    "parked jobs": {"SweepJobsParked", "SweepItemsParked"},
    "scrub findings": {"BlobsCorrupt"},
}


@pytest.mark.parametrize("need", sorted(REQUIRED))
def test_the_dashboard_shows_what_the_operators_asked_for(need: str) -> None:
    shown = {metric for _, (_, metric, *_) in widget_lines()}
    assert REQUIRED[need] <= shown, REQUIRED[need] - shown


def test_p50_and_p99_latency_of_the_api_and_of_each_workflow() -> None:
    body = json.loads(_placeholders(BODY_TEXT))
    percentiles: dict[tuple[str, str], set[str]] = {}
    for widget in body["widgets"]:
        for line in widget["properties"]["metrics"]:
            options = line[-1] if isinstance(line[-1], dict) else {}
            if line[1] in ("Latency", "ExecutionTime"):
                percentiles.setdefault((line[1], line[3]), set()).add(options.get("stat", ""))
    machines = [k for k, v in RESOURCES.items() if v["Type"] == "AWS::Serverless::StateMachine"]
    expected = {("Latency", "@HttpApi"), *(("ExecutionTime", f"@{m}") for m in machines)}
    assert set(percentiles) == expected
    assert all(stats == {"p50", "p99"} for stats in percentiles.values()), percentiles


def test_every_function_the_stack_creates_shows_its_throttles() -> None:
    throttled = {line[3][1:] for _, line in widget_lines() if line[:2] == ["AWS/Lambda", "Throttles"]}
    functions = {k for k, v in RESOURCES.items() if v["Type"] == "AWS::Serverless::Function" and "Condition" not in v}
    assert functions - throttled == set(), "add their AWS/Lambda Throttles line to the Throttles widget"


def test_widgets_do_not_overlap() -> None:
    cells: set[tuple[int, int]] = set()
    for widget in json.loads(_placeholders(BODY_TEXT))["widgets"]:
        x, y, w, h = (widget[k] for k in ("x", "y", "width", "height"))
        assert x + w <= 24, widget["properties"]["title"]
        area = set(itertools.product(range(x, x + w), range(y, y + h)))
        assert not cells & area, widget["properties"]["title"]
        cells |= area
