"""The optional Cognito user pool of template.yaml (``CreateUserPool=true``, issue 21 item 3): created by the local
runtime from the template on moto's cognito-idp, wired into the HTTP API's authorizer and the claim mapping, and its
pre token generation trigger's answer on the documented V3_0 events (events/cognito_pre_token*.json).

moto's cognito-idp does not run triggers, so the trigger's handler is invoked on the events Cognito documents
(https://docs.aws.amazon.com/cognito/latest/developerguide/user-pool-lambda-pre-token-generation.html), and the
claims the pool would then issue are read by the same ``principal_from_claims`` the API functions use.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from typing import Any

import boto3
import pytest

import devstack
from devstack import iam, lambdas
from devstack.counting import record_aws_calls
from devstack.template import _parameters, _Resolver
from packyard import config
from packyard.api.principal import principal_from_claims
from packyard.authority import ActorKind, Permission
from packyard.errors import Unauthorized

MACHINE_TENANT = "t-machines"
POOL_ON = {"CreateUserPool": "true", "UserPoolMachineTenant": MACHINE_TENANT}
SCOPES = [p.value for p in Permission]  # the template's default ScopeNames, in its order
EVENTS = devstack.ROOT / "events"


@pytest.fixture(scope="module")
def stack() -> Iterator[devstack.Stack]:
    with devstack.local_aws(parameters=POOL_ON) as created:
        yield created


@pytest.fixture
def idp(stack: devstack.Stack) -> Any:
    return boto3.client("cognito-idp", region_name=stack.region)


def _client(idp: Any, stack: devstack.Stack, logical_id: str) -> dict[str, Any]:
    found: dict[str, Any] = idp.describe_user_pool_client(
        UserPoolId=stack.user_pools["UserPool"], ClientId=stack.user_pools[logical_id]
    )["UserPoolClient"]
    return found


def _event(name: str) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads((EVENTS / name).read_text("utf-8"))
    return loaded


def _added_claims(stack: devstack.Stack, event: dict[str, Any]) -> dict[str, Any]:
    answer = lambdas.invoke_handler(stack.functions["TokenClaimsFunction"], copy.deepcopy(event))
    claims: dict[str, Any] = answer["response"]["claimsAndScopeOverrideDetails"]["accessTokenGeneration"][
        "claimsToAddOrOverride"
    ]
    return claims


# ------------------------------------------------------------------ off by default


def test_the_default_stack_has_no_user_pool_and_no_trigger() -> None:
    with devstack.local_aws(stack_name="no-pool") as created:
        assert created.user_pools == {}
        assert "TokenClaimsFunction" not in created.functions
        assert boto3.client("cognito-idp", region_name=created.region).list_user_pools(MaxResults=10)["UserPools"] == []
        assert created.environment()["SCOPE_PREFIX"] == ""  # the ScopePrefix parameter's default


# ------------------------------------------------------------------ the resources, from the template


def test_the_pool_is_on_the_essentials_plan_admin_created_with_an_immutable_tenant_and_the_v3_trigger(
    stack: devstack.Stack, idp: Any
) -> None:
    pool = idp.describe_user_pool(UserPoolId=stack.user_pools["UserPool"])["UserPool"]
    assert pool["UserPoolTier"] == "ESSENTIALS"  # access-token customization needs Essentials or Plus
    assert pool["AdminCreateUserConfig"]["AllowAdminCreateUserOnly"] is True  # no self sign-up naming any tenant
    (tenant,) = [a for a in pool["SchemaAttributes"] if a["Name"] == "custom:tenant"]
    assert tenant["Mutable"] is False and tenant["StringAttributeConstraints"] == {"MinLength": "1", "MaxLength": "128"}
    assert pool["LambdaConfig"]["PreTokenGenerationConfig"] == {
        "LambdaArn": stack.functions["TokenClaimsFunction"].arn,
        "LambdaVersion": "V3_0",  # V2_0 would not run for client-credentials tokens
    }


def test_the_resource_server_holds_packyards_scopes_under_the_prefix_the_functions_strip(
    stack: devstack.Stack, idp: Any
) -> None:
    server = idp.describe_resource_server(UserPoolId=stack.user_pools["UserPool"], Identifier="packyard")
    assert [s["ScopeName"] for s in server["ResourceServer"]["Scopes"]] == SCOPES
    assert stack.user_pools["UserPoolResourceServer"] == "packyard"
    assert stack.environment()["SCOPE_PREFIX"] == "packyard/"  # Globals: the pool's identifier and a slash


def test_the_cli_client_is_public_authorization_code_only_with_a_loopback_redirect(
    stack: devstack.Stack, idp: Any
) -> None:
    cli = _client(idp, stack, "UserPoolCliClient")
    assert "ClientSecret" not in cli  # public: PKCE is its only proof
    assert cli["AllowedOAuthFlows"] == ["code"] and cli["AllowedOAuthFlowsUserPoolClient"] is True
    assert cli["CallbackURLs"] == ["http://localhost:8976/callback"]  # Cognito: http for localhost only, exact match
    assert cli["AllowedOAuthScopes"] == ["openid", "email", *(f"packyard/{s}" for s in SCOPES)]
    assert "custom:tenant" in cli["ReadAttributes"] and "custom:tenant" not in cli["WriteAttributes"]
    assert cli["SupportedIdentityProviders"] == ["COGNITO"]


def test_the_machine_client_has_a_secret_client_credentials_only_and_no_approval_scope(
    stack: devstack.Stack, idp: Any
) -> None:
    machine = _client(idp, stack, "UserPoolMachineClient")
    assert machine["ClientSecret"]
    assert machine["AllowedOAuthFlows"] == ["client_credentials"]
    assert machine["AllowedOAuthScopes"] == [f"packyard/{s}" for s in SCOPES if s != Permission.APPROVE.value]


def test_the_hosted_domain_serves_the_pool(stack: devstack.Stack, idp: Any) -> None:
    domain = idp.describe_user_pool_domain(Domain=stack.user_pools["UserPoolDomain"])["DomainDescription"]
    assert domain["UserPoolId"] == stack.user_pools["UserPool"]
    assert stack.user_pools["UserPoolDomain"] == f"packyard-dev-{stack.account}"


def test_the_http_apis_authorizer_accepts_the_pools_issuer_and_both_app_clients(stack: devstack.Stack) -> None:
    template = devstack.load_template()
    jwt = template["Resources"]["HttpApi"]["Properties"]["Auth"]["Authorizers"]["PackyardJwt"]["JwtConfiguration"]

    def resolved(parameters: dict[str, str]) -> Any:
        resolver = _Resolver(
            template,
            stack_name=stack.name,
            region=stack.region,
            account=stack.account,
            parameters=_parameters(template, parameters),
        )
        resolver.refs.update(stack.user_pools)
        return resolver.resolve(jwt, "HttpApi.JwtConfiguration")

    on = resolved(POOL_ON)
    assert on["issuer"] == f"https://cognito-idp.{stack.region}.amazonaws.com/{stack.user_pools['UserPool']}"
    assert on["audience"] == [stack.user_pools["UserPoolCliClient"], stack.user_pools["UserPoolMachineClient"]]
    off = resolved({"JwtIssuer": "https://idp.example/", "JwtAudience": "a,b"})
    assert off == {"issuer": "https://idp.example/", "audience": ["a", "b"]}


# ------------------------------------------------------------------ the trigger, on Cognito's documented events


def test_a_persons_token_gets_their_tenant_attribute_and_the_owner_actor(stack: devstack.Stack) -> None:
    event = _event("cognito_pre_token.json")
    assert event["triggerSource"] == "TokenGeneration_HostedAuth" and event["version"] == "3"
    with record_aws_calls() as calls:
        claims = _added_claims(stack, event)
    assert claims == {"tenant": "t-sample", "actor": "owner"}
    assert calls.calls == []  # thin: the trigger shapes the event and calls nothing


def test_a_machines_client_credentials_token_gets_the_machine_tenant_and_the_workflow_actor(
    stack: devstack.Stack,
) -> None:
    event = _event("cognito_pre_token_machine.json")
    assert event["triggerSource"] == "TokenGeneration_ClientCredentials"  # sent to a V3_0 trigger only
    assert _added_claims(stack, event) == {"tenant": MACHINE_TENANT, "actor": "workflow"}


def test_a_person_without_a_tenant_attribute_gets_no_tenant_claim_and_is_refused_naming_it(
    stack: devstack.Stack,
) -> None:
    event = _event("cognito_pre_token.json")
    del event["request"]["userAttributes"]["custom:tenant"]
    claims = _added_claims(stack, event)
    assert claims == {"actor": "owner"}  # never a default tenant
    with pytest.raises(Unauthorized) as refused:
        principal_from_claims({"sub": "u-1", "scope": "packyard/packages:read", **claims}, config.settings())
    assert refused.value.extra["claim"] == "tenant"


@pytest.mark.parametrize(
    ("sample", "client", "actor"),
    [
        ("cognito_pre_token.json", "UserPoolCliClient", ActorKind.OWNER),
        ("cognito_pre_token_machine.json", "UserPoolMachineClient", ActorKind.WORKFLOW),
    ],
)
def test_the_pools_access_token_reads_as_the_principal_with_the_templates_claim_mapping(
    stack: devstack.Stack, sample: str, client: str, actor: ActorKind
) -> None:
    """An access token as the pool issues it (Cognito's claims, the event's scopes, the trigger's claims), passed as
    API Gateway's JWT authorizer passes claims, read with the stack's environment (Globals)."""
    event = _event(sample)
    issued = {
        "sub": event["request"]["userAttributes"].get("sub", stack.user_pools[client]),
        "client_id": stack.user_pools[client],
        "token_use": "access",
        "scope": " ".join(event["request"]["scopes"]),
        **_added_claims(stack, event),
    }
    principal = principal_from_claims(issued, config.settings())
    assert principal.actor is actor
    assert principal.tenant == ("t-sample" if actor is ActorKind.OWNER else MACHINE_TENANT)
    assert principal.scopes == {s.removeprefix("packyard/") for s in event["request"]["scopes"] if "/" in s}


def test_the_triggers_role_grants_nothing_but_its_logs_and_traces() -> None:
    expanded = iam.expand_template()
    function = expanded["Resources"]["TokenClaimsFunction"]
    assert function["Condition"] == "CreateUserPool"
    role = expanded["Resources"][function["Properties"]["Role"]["Fn::GetAtt"][0]]
    assert role["Condition"] == "CreateUserPool"
    assert role["Properties"].get("Policies", []) == []
    assert sorted(role["Properties"]["ManagedPolicyArns"]) == [
        "arn:aws:iam::aws:policy/AWSXrayWriteOnlyAccess",  # Globals: Tracing Active
        "arn:aws:iam::aws:policy/service-role/AWSLambdaBasicExecutionRole",  # its own logs
    ]
