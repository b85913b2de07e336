"""``sam deploy`` with the defaults fits the account a newcomer has: checked on template.yaml as the SAM translator
expands it (what CloudFormation receives), not on the SAM source.

AWS keeps 100 of an account's Lambda concurrency unreserved (devstack.deployment cites the documentation), so a
stack that reserves any concurrency cannot deploy on an account whose limit is 100 or less; new accounts may start at
10. The reserved figures are parameters (0 = none reserved, the default); the documented production figures
(50 for each API function and Verify, 8 for the sweeper) need a limit of 458.
"""

from __future__ import annotations

from typing import Any

import pytest

import devstack
from devstack import deployment, iam

pytestmark = pytest.mark.xdist_group("iam")  # shares the translator's expansion with test_iam

NEW_ACCOUNT_LIMIT = 10
DOCUMENTED = {"ApiReservedConcurrency": "50", "VerifyReservedConcurrency": "50", "SweeperReservedConcurrency": "8"}
API_FUNCTIONS = (
    "UploadsFunction",
    "CatalogFunction",
    "FilesFunction",
    "QueriesFunction",
    "AdmissionFunction",
    "ApprovalsFunction",
)


@pytest.fixture(scope="module")
def expanded() -> dict[str, Any]:
    return iam.expand_template()


def test_the_defaults_deploy_on_an_account_with_a_concurrency_limit_of_10(expanded: dict[str, Any]) -> None:
    # the functions CloudFormation creates with the defaults (TokenClaimsFunction only with CreateUserPool=true)
    functions = [
        k for k, v in expanded["Resources"].items() if v["Type"] == "AWS::Lambda::Function" and "Condition" not in v
    ]
    assert len(functions) == 14  # the check read the functions CloudFormation creates
    reserved = deployment.reserved_concurrency(expanded)
    assert reserved == {}, "the defaults reserve concurrency: a new account (limit 10) cannot deploy the stack"
    assert deployment.fits(NEW_ACCOUNT_LIMIT, sum(reserved.values()))


def test_the_documented_reservations_need_an_account_limit_of_458(expanded: dict[str, Any]) -> None:
    reserved = deployment.reserved_concurrency(expanded, DOCUMENTED)
    assert reserved == {**dict.fromkeys(API_FUNCTIONS, 50), "VerifyFunction": 50, "SweeperFunction": 8}
    total = sum(reserved.values())
    assert total == 6 * 50 + 50 + 8 == 358
    assert deployment.minimum_account_limit(total) == 458
    assert not deployment.fits(457, total) and deployment.fits(458, total)
    assert not deployment.fits(NEW_ACCOUNT_LIMIT, total)  # what the template's old fixed figures did to a new account


def test_each_reservation_is_a_parameter_that_can_reserve_nothing() -> None:
    """No function reserves a literal figure: each is ``!If [<condition>, !Ref <parameter>, !Ref AWS::NoValue]``
    on a parameter whose default is 0 and whose description says so."""
    template = devstack.load_template(devstack.DEFAULT_TEMPLATE)
    seen = set()
    for logical_id, resource in template["Resources"].items():
        value = resource.get("Properties", {}).get("ReservedConcurrentExecutions")
        if value is None:
            continue
        condition, if_true, if_false = value["Fn::If"]
        assert if_false == {"Ref": "AWS::NoValue"}, logical_id
        parameter = template["Parameters"][if_true["Ref"]]
        assert parameter["Default"] == 0 and parameter["MinValue"] == 0, logical_id
        assert "0 (the default) reserves none" in " ".join(parameter["Description"].split()), logical_id
        assert template["Conditions"][condition] == {"Fn::Not": [{"Fn::Equals": [if_true, "0"]}]}, logical_id
        seen.add(logical_id)
    assert seen == {*API_FUNCTIONS, "VerifyFunction", "SweeperFunction"}
