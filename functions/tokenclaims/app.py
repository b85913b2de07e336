"""Cognito pre token generation trigger (V3_0): the tenant and actor claims of the stack's own user pool's tokens."""

from __future__ import annotations

from typing import Any

from packyard.api.token_claims import customize
from packyard.observability import lambda_entry


@lambda_entry("callerContext.clientId")
def lambda_handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    return customize(event)
