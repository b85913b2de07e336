"""Config at cold start: each handler declares the settings it needs, and a missing one fails its invocation with
the variable's name before any domain code runs."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from devstack.lambdas import LambdaContext, load_module
from packyard import config
from packyard.errors import MissingSetting

ROOT = Path(__file__).resolve().parents[2]
RESOURCE_VARIABLES = ("TABLE_NAME", "BUCKET_NAME", "PUBLISH_STATE_MACHINE_ARN", "INSTALL_STATE_MACHINE_ARN")


@pytest.fixture
def environment(monkeypatch: pytest.MonkeyPatch) -> Iterator[pytest.MonkeyPatch]:
    for name in RESOURCE_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    config.reset()
    yield monkeypatch
    config.reset()


def _context() -> LambdaContext:
    return LambdaContext(
        function_name="test",
        invoked_function_arn="arn:aws:lambda:us-east-1:123456789012:function:test",
        memory_limit_in_mb=512,
        timeout_seconds=30,
    )


def test_given_no_table_name_when_required_then_the_error_names_the_variable(environment: pytest.MonkeyPatch) -> None:
    with pytest.raises(MissingSetting) as raised:
        config.required("table_name", "bucket_name")
    assert "TABLE_NAME" in raised.value.detail and "BUCKET_NAME" in raised.value.detail
    assert raised.value.extra == {"settings": ["TABLE_NAME", "BUCKET_NAME"]}


def test_given_every_variable_when_required_then_the_settings_are_returned(environment: pytest.MonkeyPatch) -> None:
    environment.setenv("TABLE_NAME", "packyard-table")
    environment.setenv("INSTALL_STATE_MACHINE_ARN", "arn:aws:states:us-east-1:123456789012:stateMachine:install")
    config.reset()
    settings = config.required("table_name", "install_state_machine_arn")
    assert settings.table_name == "packyard-table"
    assert settings.install_state_machine_arn.endswith(":install")


@pytest.mark.parametrize(
    ("function", "present", "missing"),
    [
        ("admission", {"TABLE_NAME": "t"}, "INSTALL_STATE_MACHINE_ARN"),
        ("uploads", {"TABLE_NAME": "t", "BUCKET_NAME": "b"}, "PUBLISH_STATE_MACHINE_ARN"),
        ("queries", {"TABLE_NAME": "t"}, "BUCKET_NAME"),
        ("verify", {"BUCKET_NAME": "b"}, "TABLE_NAME"),
        ("planning", {}, "TABLE_NAME"),
        ("settlement", {}, "TABLE_NAME"),
    ],
)
def test_given_a_missing_setting_when_the_handler_is_invoked_then_it_fails_naming_the_variable(
    environment: pytest.MonkeyPatch, function: str, present: dict[str, str], missing: str
) -> None:
    for name, value in present.items():
        environment.setenv(name, value)
    config.reset()
    handler = load_module(ROOT / "functions" / function / "app.py", f"_config_test_{function}").lambda_handler
    with pytest.raises(MissingSetting) as raised:
        handler({"tenant": "t1", "operationId": "op", "uploadId": "u"}, _context())
    assert missing in raised.value.detail
