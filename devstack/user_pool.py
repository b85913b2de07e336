"""The template's Cognito resources (``CreateUserPool=true``) created on moto's cognito-idp, from their
``Properties``: the user pool, its resource server, app clients and domain, in that order (each needs the one before).

CloudFormation's property names are the API's, with two exceptions handled here: ``UserPoolName`` is
``CreateUserPool``'s ``PoolName``, and ``EnabledMfas`` is not a ``CreateUserPool`` parameter (it is set with
``SetUserPoolMfaConfig`` after the pool exists). ``AWS::Lambda::Permission`` (Cognito's right to invoke the trigger)
is resolved, not applied: the local stack has no Lambda service, and moto's cognito-idp does not invoke triggers (the
trigger's handler is tested on its documented event, ``tests/integration/test_user_pool.py``).

Physical ids are moto's (a pool id ``us-east-1_…``, client ids): unlike the other resources they are not known up
front, so nothing else the local stack creates may refer to them (only the HTTP API's authorizer does, which the
local server emulates itself).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

USER_POOL = "AWS::Cognito::UserPool"
RESOURCE_SERVER = "AWS::Cognito::UserPoolResourceServer"
CLIENT = "AWS::Cognito::UserPoolClient"
DOMAIN = "AWS::Cognito::UserPoolDomain"
PERMISSION = "AWS::Lambda::Permission"
COGNITO_PRINCIPAL = "cognito-idp.amazonaws.com"
CREATION_ORDER = (USER_POOL, RESOURCE_SERVER, CLIENT, DOMAIN)

_POOL_PROPERTIES = {
    "UserPoolName",
    "UserPoolTier",
    "DeletionProtection",
    "UsernameAttributes",
    "AutoVerifiedAttributes",
    "AdminCreateUserConfig",
    "AccountRecoverySetting",
    "MfaConfiguration",
    "EnabledMfas",
    "Policies",
    "Schema",
    "LambdaConfig",
    "UserPoolTags",
}
_CLIENT_PROPERTIES = {
    "UserPoolId",
    "ClientName",
    "GenerateSecret",
    "AllowedOAuthFlowsUserPoolClient",
    "AllowedOAuthFlows",
    "AllowedOAuthScopes",
    "CallbackURLs",
    "LogoutURLs",
    "SupportedIdentityProviders",
    "ExplicitAuthFlows",
    "PreventUserExistenceErrors",
    "EnableTokenRevocation",
    "AccessTokenValidity",
    "IdTokenValidity",
    "RefreshTokenValidity",
    "TokenValidityUnits",
    "ReadAttributes",
    "WriteAttributes",
}

Created = tuple[str, dict[str, str]]  # the physical id (what Ref answers), the attributes (what GetAtt answers)


class UnsupportedUserPoolProperty(ValueError):
    """A property the local stack would silently drop."""


def _known(logical_id: str, props: Mapping[str, Any], known: set[str]) -> None:
    unknown = set(props) - known
    if unknown:
        raise UnsupportedUserPoolProperty(f"{logical_id}: properties {sorted(unknown)} are not reproduced locally")


def _user_pool(idp: Any, logical_id: str, props: Mapping[str, Any], region: str) -> Created:
    _known(logical_id, props, _POOL_PROPERTIES)
    request = {k: v for k, v in props.items() if k not in ("UserPoolName", "EnabledMfas")}
    pool = idp.create_user_pool(PoolName=props["UserPoolName"], **request)["UserPool"]
    if "SOFTWARE_TOKEN_MFA" in props.get("EnabledMfas", []):
        idp.set_user_pool_mfa_config(
            UserPoolId=pool["Id"],
            SoftwareTokenMfaConfiguration={"Enabled": True},
            MfaConfiguration=props.get("MfaConfiguration", "OFF"),
        )
    provider = f"cognito-idp.{region}.amazonaws.com/{pool['Id']}"
    attributes = {"Arn": pool["Arn"], "UserPoolId": pool["Id"], "ProviderName": provider}
    return pool["Id"], attributes | {"ProviderURL": f"https://{provider}"}


def _resource_server(idp: Any, logical_id: str, props: Mapping[str, Any], region: str) -> Created:
    _known(logical_id, props, {"UserPoolId", "Identifier", "Name", "Scopes"})
    server = idp.create_resource_server(**props)["ResourceServer"]
    return server["Identifier"], {}


def _client(idp: Any, logical_id: str, props: Mapping[str, Any], region: str) -> Created:
    _known(logical_id, props, _CLIENT_PROPERTIES)
    client = idp.create_user_pool_client(**props)["UserPoolClient"]
    return client["ClientId"], {"ClientId": client["ClientId"], "Name": client["ClientName"]}


def _domain(idp: Any, logical_id: str, props: Mapping[str, Any], region: str) -> Created:
    _known(logical_id, props, {"UserPoolId", "Domain"})
    idp.create_user_pool_domain(**props)
    return str(props["Domain"]), {}


CREATORS: dict[str, Callable[[Any, str, Mapping[str, Any], str], Created]] = {
    USER_POOL: _user_pool,
    RESOURCE_SERVER: _resource_server,
    CLIENT: _client,
    DOMAIN: _domain,
}


def create_user_pools(
    idp: Any,
    resources: Mapping[str, Mapping[str, Any]],
    resolve: Callable[[Any, str], Any],
    remember: Callable[[str, str, Mapping[str, str]], None],
    region: str,
) -> dict[str, str]:
    """Create ``resources``' Cognito resources (the active ones only: the caller filters conditions) in
    :data:`CREATION_ORDER`; ``resolve`` resolves a resource's properties, ``remember`` records what Ref and GetAtt
    answer for it. Returns logical id → physical id."""
    created: dict[str, str] = {}
    for kind in CREATION_ORDER:
        for logical_id, resource in resources.items():
            if resource["Type"] != kind:
                continue
            props = resolve(resource.get("Properties", {}), logical_id)
            physical, attributes = CREATORS[kind](idp, logical_id, props, region)
            remember(logical_id, physical, attributes)
            created[logical_id] = physical
    for logical_id, resource in resources.items():
        if resource["Type"] == PERMISSION and resource.get("Properties", {}).get("Principal") == COGNITO_PRINCIPAL:
            resolve(resource.get("Properties", {}), logical_id)  # checked, not applied (see the module docstring)
    return created
