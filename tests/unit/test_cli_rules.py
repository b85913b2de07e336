"""The CLI's copy of the service's naming rules agrees with the service, and argument types use them."""

from __future__ import annotations

import argparse

import pytest

from packyard.installations import models as installation_models
from packyard.publishing import models as publishing_models
from packyard_cli import rules
from packyard_cli.arguments import exact_release, installation_id, permission, release_ref


def test_the_copied_patterns_are_the_services() -> None:
    assert rules.SEMVER.pattern == publishing_models.SEMVER.pattern
    assert rules.PACKAGE_NAME.pattern == publishing_models.PACKAGE_NAME.pattern
    assert rules.INSTALLATION_ID.pattern == installation_models.INSTALLATION_ID.pattern
    assert rules.WORKSPACE_ID.pattern == installation_models.WORKSPACE_ID.pattern


@pytest.mark.parametrize(
    "version",
    ["1.0.0", "0.0.1", "1.2.3-rc.1", "1.2.3+build.5", "10.20.30-alpha.beta", "1.2.3", "01.0.0", "1.2", "v1.0.0", "1"],
)
def test_versions_are_judged_as_the_service_judges_them(version: str) -> None:
    service_accepts = True
    try:
        publishing_models.check_version(version)
    except Exception:
        service_accepts = False
    assert (rules.version_problem(version) is None) == service_accepts


@pytest.mark.parametrize(
    ("versions", "newest"),
    [
        (["1.0.0", "1.10.0", "1.9.0"], "1.10.0"),
        (["2.0.0-rc.1", "1.9.9"], "2.0.0-rc.1"),
        (["1.0.0-rc.2", "1.0.0-rc.10"], "1.0.0-rc.10"),
    ],
)
def test_semver_order_is_the_services(versions: list[str], newest: str) -> None:
    assert max(versions, key=rules.semver_key) == newest == max(versions, key=publishing_models.semver_key)


@pytest.mark.parametrize(
    ("text", "hint"),
    [("weather-skill@1.1", "1.1.0"), ("weather-skill@v1.0.0", "without the 'v': 1.0.0"), ("weather-skill@1", "1.0.0")],
)
def test_a_slip_in_the_version_is_a_usage_error_that_says_what_was_meant(text: str, hint: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match="not a semantic version") as caught:
        release_ref(text)
    assert hint in str(caught.value)


def test_bare_names_and_latest_mean_the_newest() -> None:
    assert release_ref("weather-skill").version is None
    assert release_ref("weather-skill@latest").version is None
    assert release_ref("weather-skill@1.0.0").version == "1.0.0"
    assert str(release_ref("weather-skill")) == "weather-skill@latest"
    with pytest.raises(argparse.ArgumentTypeError, match="exact version"):
        exact_release("weather-skill@latest")
    with pytest.raises(argparse.ArgumentTypeError, match="package name"):
        release_ref("Weather_Skill@1.0.0")


def test_an_installation_id_is_not_package_at_version() -> None:
    with pytest.raises(argparse.ArgumentTypeError, match="PACKAGE@VERSION, not an installation id"):
        installation_id("weather-skill@1.1.0")
    assert installation_id("weather-skill") == "weather-skill"


def test_permissions_name_a_known_kind() -> None:
    assert permission("network:api.example") == {"kind": "network", "resource": "api.example"}
    assert permission("state") == {"kind": "state", "resource": "*"}
    with pytest.raises(argparse.ArgumentTypeError, match="not one of"):
        permission("netwrok:x")
