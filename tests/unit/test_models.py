"""Names, versions and their ordering; problem bodies; how rejections are explained."""

import pytest

from packyard.errors import ArchiveRejectCode, ArchiveRejected, InvalidRequest, VersionConflict
from packyard.publishing.models import check_package_name, check_version, semver_key
from packyard.publishing.rejection import PUBLISH_FAILED_DETAIL, rejection_from


@pytest.mark.parametrize("name", ["a", "hello-skill", "pkg.v2", "a_b", "x" * 64])
def test_valid_package_names_are_accepted(name):
    assert check_package_name(name) == name


@pytest.mark.parametrize("name", ["", "-lead", "trail-", "UPPER", "has space", "a/b", "x" * 65, "é"])
def test_invalid_package_names_are_refused_with_invalid_request(name):
    with pytest.raises(InvalidRequest):
        check_package_name(name)


@pytest.mark.parametrize("version", ["0.0.1", "1.2.3", "1.2.3-rc.1", "1.0.0+build.5", "10.20.30-alpha-1.x"])
def test_semantic_versions_are_accepted(version):
    assert check_version(version) == version


@pytest.mark.parametrize("version", ["1", "1.2", "01.2.3", "1.2.3-", "v1.2.3", "1.2.3.4", "1.2.3-01"])
def test_non_semantic_versions_are_refused(version):
    with pytest.raises(InvalidRequest):
        check_version(version)


def test_semver_ordering_puts_prereleases_before_their_release_and_compares_numerically():
    ordered = ["1.0.0-alpha", "1.0.0-alpha.1", "1.0.0-alpha.beta", "1.0.0-beta.2", "1.0.0-beta.11", "1.0.0", "1.10.0"]
    assert sorted(reversed(ordered), key=semver_key) == ordered


def test_problem_body_carries_stable_code_status_and_extra_fields():
    problem = VersionConflict("stale", expected=3, actual=4).problem()
    assert problem["code"] == "version_conflict"
    assert problem["status"] == 412
    assert (problem["expected"], problem["actual"]) == (3, 4)


def test_archive_rejection_problem_names_its_sub_code():
    problem = ArchiveRejected(ArchiveRejectCode.UNSAFE_PATH, "'../x'").problem()
    assert (problem["code"], problem["subCode"]) == ("archive_rejected", "unsafe_path")


def test_rejection_from_a_rejected_verdict_keeps_code_and_sub_code():
    verdict = {"verdict": "rejected", "code": "archive_rejected", "subCode": "digest_mismatch", "detail": "a.txt"}
    rejection = rejection_from(verdict, None)
    assert (rejection.code, rejection.sub_code, rejection.detail) == ("archive_rejected", "digest_mismatch", "a.txt")


def test_rejection_from_a_caught_error_maps_the_error_type_not_the_message():
    error = {"Error": "VersionExists", "Cause": '{"errorType":"VersionExists","errorMessage":"p@1 taken"}'}
    rejection = rejection_from(None, error)
    assert (rejection.code, rejection.detail) == ("version_exists", "p@1 taken")


def test_rejection_from_an_unknown_failure_is_publish_failed_in_packyards_words():
    # issue 20: no Step Functions Cause (AWS error text, a stack trace) reaches the answer
    rejection = rejection_from(None, {"Error": "States.Timeout", "Cause": "timed out"})
    assert (rejection.code, rejection.detail) == ("publish_failed", PUBLISH_FAILED_DETAIL)
    assert "timed out" not in rejection.detail and "States." not in rejection.detail


@pytest.mark.parametrize(
    "name",
    ["hello\n", "hello\r", "\nhello", "hel lo", "hell\u0000", "h\u0435llo"],
    ids=["nl", "cr", "lead-nl", "space", "nul", "cyrillic-e"],
)
def test_given_a_package_name_with_a_trailing_newline_or_non_ascii_then_it_is_invalid(name: str) -> None:
    with pytest.raises(InvalidRequest):
        check_package_name(name)


@pytest.mark.parametrize(
    "version",
    ["1.0.0\n", "\u0661.0.0", "1.\u0664.0", "1.0.0-\u0663", "1.0.0+b\u0665"],
    ids=["nl", "arabic-1", "arabic-4", "pre-arabic", "build-arabic"],
)
def test_given_a_version_with_a_trailing_newline_or_non_ascii_digits_then_it_is_invalid(version: str) -> None:
    with pytest.raises(InvalidRequest):
        check_version(version)


def test_a_version_with_build_metadata_is_valid() -> None:
    assert check_version("1.0.1+build.5") == "1.0.1+build.5"
