"""The claim mapping is a deploy parameter (issue 21, item 1): the stack is created from template.yaml with a
provider's mapping given as the template's parameters (TenantClaim, ScopeClaimForm, ScopeNames, ...), never set as
environment variables by the test, and that provider's tokens, as API Gateway passes their claims, are read through
the functions' environment the template sets. The provider matrix (test_provider_matrix.py) drives every route under
each mapping; this proves the mapping reaches the functions from the parameters, including renamed scopes."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

import devstack
from devstack.api import LocalApi
from devstack.server import claims_as_api_gateway_passes_them
from packyard.authority import Permission
from tests.integration.test_provider_matrix import PROVIDERS

# the environment variable each claim-mapping template parameter sets (template.yaml, Globals)
PARAMETER_OF = {
    "TENANT_CLAIM": "TenantClaim",
    "SUBJECT_CLAIM": "SubjectClaim",
    "SCOPE_CLAIM": "ScopeClaim",
    "SCOPE_CLAIM_FORM": "ScopeClaimForm",
    "SCOPE_PREFIX": "ScopePrefix",
    "ACTOR_CLAIM": "ActorClaim",
    "ACTOR_OWNER_VALUES": "ActorOwnerValues",
    "ACTOR_WORKFLOW_VALUES": "ActorWorkflowValues",
    "ACTOR_WHEN_ABSENT": "ActorWhenAbsent",
}
# Entra ID app roles as an operator might name them (ScopeNames, in Permission's order)
ENTRA_ROLES = [
    "Packages.Read",
    "Packages.Publish",
    "Packages.Yank",
    "Workspaces.Read",
    "Installations.Write",
    "Approvals.Write",
    "Usage.Read",
]


@pytest.fixture
def stack_with(request: pytest.FixtureRequest) -> Iterator[Any]:
    def start(parameters: dict[str, str]) -> tuple[devstack.Stack, LocalApi]:
        context = devstack.local_aws(parameters=parameters)
        stack = context.__enter__()
        request.addfinalizer(lambda: context.__exit__(None, None, None))
        return stack, LocalApi(stack)

    yield start


def _me(api: LocalApi, claims: dict[str, Any]) -> Any:
    return api.request("GET", "/v1/me", claims=claims_as_api_gateway_passes_them(claims))


@pytest.mark.parametrize("provider", sorted(PROVIDERS))
def test_a_providers_mapping_given_as_template_parameters_reads_its_tokens(provider: str, stack_with: Any) -> None:
    mapping, shape, tenant = PROVIDERS[provider]
    stack, api = stack_with({PARAMETER_OF[name]: value for name, value in mapping.items()})
    environment = stack.environment()
    assert {name: environment[name] for name in mapping} == mapping  # the template set them from the parameters

    person, machine = _me(api, shape(["packages:read"], True)), _me(api, shape(["packages:read"], False))

    assert (person.status, machine.status) == (200, 200), (person.body, machine.body)
    assert (person.body["actor"], machine.body["actor"]) == ("owner", "workflow")
    assert person.body["tenant"] == machine.body["tenant"] == tenant
    assert person.body["permissions"] == machine.body["permissions"] == ["packages:read"]


def test_renamed_scopes_given_as_scope_names_are_the_ones_checked(stack_with: Any) -> None:
    mapping, shape, _ = PROVIDERS["entra"]
    parameters = {PARAMETER_OF[name]: value for name, value in mapping.items()}
    stack, api = stack_with({**parameters, "ScopeNames": ",".join(ENTRA_ROLES)})
    assert stack.environment()["PACKYARD_SCOPE_READ_PACKAGES"] == "Packages.Read"
    assert [Permission(p).scope for p in Permission] == ENTRA_ROLES

    app = claims_as_api_gateway_passes_them(shape(["Packages.Read"], False))
    default_named = claims_as_api_gateway_passes_them(shape(["packages:read"], False))
    allowed = api.request("GET", "/v1/packages", claims=app)
    refused = api.request("GET", "/v1/packages", claims=default_named)
    me = api.request("GET", "/v1/me", claims=app)

    assert allowed.status == 200, allowed.body
    assert (refused.status, refused.body["code"], refused.body["requiredScope"]) == (403, "forbidden", "Packages.Read")
    assert me.body["scopes"] == ["Packages.Read"] and me.body["actor"] == "workflow"
