"""``GET /v1/me``: the principal as Packyard read it from the token, so an operator wiring an identity provider sees
at once what the claim mapping made of it (docs/decisions.md, "Identity providers as issued")."""

from __future__ import annotations

from typing import Self

from pydantic import Field

from packyard.api.base import ApiModel
from packyard.authority import ActorKind, Permission, Principal


class PrincipalView(ApiModel):
    """``GET /v1/me``."""

    tenant: str = Field(description="from the tenant claim (TenantClaim)")
    subject: str = Field(description="from the subject claim (SubjectClaim)")
    actor: ActorKind = Field(description="owner (a person) or workflow (an automation), from ActorClaim")
    scopes: list[str] = Field(description="every scope read from the scope claim(s), the prefix stripped, sorted")
    permissions: list[Permission] = Field(
        description="the permissions those scopes grant (by their default names; ScopeNames maps them)"
    )

    @classmethod
    def of(cls, principal: Principal) -> Self:
        return cls(
            tenant=principal.tenant,
            subject=principal.subject,
            actor=principal.actor,
            scopes=sorted(principal.scopes),
            permissions=[permission for permission in Permission if permission.scope in principal.scopes],
        )
