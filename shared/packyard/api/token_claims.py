"""The claims the stack's own Cognito user pool writes into its access tokens: its pre token generation trigger
(``TokenClaimsFunction``, a V3_0 event), the dual of :func:`packyard.api.principal.principal_from_claims`.

Cognito's access tokens carry no tenant, and tell a person from a machine only by ``client_id``; the trigger adds
both under the claim names the functions read (``TENANT_CLAIM``, ``ACTOR_CLAIM``), so the pool's tokens read with the
template's default claim mapping:

* a person (``TokenGeneration_HostedAuth``, ``_Authentication``, ``_RefreshTokens``, ...): the tenant is their
  ``custom:tenant`` attribute (an administrator sets it at creation; it is immutable and no app client may write it),
  the actor the first of ``ACTOR_OWNER_VALUES``;
* a machine (``TokenGeneration_ClientCredentials``, sent only to a V3_0 trigger): the tenant is ``MACHINE_TENANT``
  (the template's ``UserPoolMachineTenant``), the actor the first of ``ACTOR_WORKFLOW_VALUES``.

Without a tenant the claim is left out, and the API answers 401 naming it: never a default tenant. The trigger makes
no AWS call; Cognito applies ``claimsAndScopeOverrideDetails.accessTokenGeneration.claimsToAddOrOverride`` (docs:
https://docs.aws.amazon.com/cognito/latest/developerguide/user-pool-lambda-pre-token-generation.html).
"""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.utilities.data_classes.cognito_user_pool_event import PreTokenGenerationV2TriggerEvent

from packyard.config import Settings, settings

CLIENT_CREDENTIALS = "TokenGeneration_ClientCredentials"
TENANT_ATTRIBUTE = "custom:tenant"


def _first(values: str) -> str:
    return values.split(",")[0].strip()


def access_token_claims(event: PreTokenGenerationV2TriggerEvent, config: Settings) -> dict[str, str]:
    """The claims to add to the access token Cognito is about to issue for ``event``."""
    machine = event.trigger_source == CLIENT_CREDENTIALS
    if machine:
        tenant, actor = config.machine_tenant, _first(config.actor_workflow_values)
    else:
        tenant, actor = event.request.user_attributes.get(TENANT_ATTRIBUTE, ""), _first(config.actor_owner_values)
    claims = {config.actor_claim: actor}
    if tenant:
        claims[config.tenant_claim] = tenant
    return claims


def customize(event: dict[str, Any]) -> dict[str, Any]:
    """The trigger's answer: the event with the access token's claims to add or override set in its response."""
    trigger = PreTokenGenerationV2TriggerEvent(event)
    access = trigger.response.claims_scope_override_details.access_token_generation
    access.claims_to_add_or_override = access_token_claims(trigger, settings())
    return trigger.raw_event
