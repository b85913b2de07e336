"""Runtime configuration: one pydantic settings model, validated at cold start from the environment.

No names are hard-coded: the template (or the local stack) sets the environment.
"""

from __future__ import annotations

import os
from functools import lru_cache
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

MiB = 1024 * 1024
GiB = 1024 * MiB


# Plain pydantic models read from os.environ: pydantic-settings would add ~250 ms to every cold start.


def _from_environment(names: dict[str, str]) -> dict[str, Any]:
    return {field: os.environ[var] for field, var in names.items() if var in os.environ}


class Limits(BaseModel):
    """Package, storage and retention limits (defaults from docs/architecture.md). Override with ``PACKYARD_<NAME>``
    variables."""

    model_config = ConfigDict(frozen=True)

    manifest_max_bytes: int = Field(default=1 * MiB, gt=0)
    max_files: int = Field(default=10_000, gt=0)
    max_unpacked_bytes: int = Field(default=512 * MiB, gt=0)
    max_archive_bytes: int = Field(default=256 * MiB, gt=0)
    max_compression_ratio: float = Field(default=50.0, gt=1)
    compression_ratio_floor_bytes: int = Field(default=64 * MiB, ge=0)
    max_path_length: int = Field(default=512, gt=0)
    verify_time_limit_seconds: float = Field(default=600.0, gt=0)
    upload_ttl_seconds: int = Field(default=600, gt=0)
    # a verifying session still holds its reservation this long; then a sweep looks at its execution
    reservation_ttl_seconds: int = Field(default=1800, gt=0)
    download_url_ttl_seconds: int = Field(default=300, gt=0)
    operation_lease_seconds: int = Field(default=900, gt=0)
    max_installations_per_workspace: int = Field(default=100, gt=0)
    max_installations_per_task: int = Field(default=10, gt=0)
    tenant_quota_bytes: int = Field(default=10 * GiB, gt=0)
    # the bytes of the releases a workspace's installations reference (what its runtimes must load)
    workspace_quota_bytes: int = Field(default=2 * GiB, gt=0)
    # settled items are kept this long for reads, then the table's TTL removes them
    settled_upload_retention_seconds: int = Field(default=7 * 24 * 3600, gt=0)
    settled_operation_retention_seconds: int = Field(default=90 * 24 * 3600, gt=0)
    # how long an operation waits for an owner's approval before it settles refused consent_expired
    consent_window_seconds: int = Field(default=7 * 24 * 3600, gt=0, le=365 * 24 * 3600)
    # the integrity scrub: every blob is re-hashed this long after its last check (or its publish), and one sweep
    # page reads at most this many bytes (the rest stays due; the next page resumes after the last blob checked)
    scrub_interval_seconds: int = Field(default=7 * 24 * 3600, gt=0)
    scrub_bytes_per_page: int = Field(default=1 * GiB, gt=0)
    # a sweep action (or cleanup job) that fails is retried after min(base * 2**(attempts-1), cap) seconds, and parked
    # (out of the due index, findable, alarmed) once it has failed this many times: never retried forever
    sweep_retry_base_seconds: int = Field(default=60, gt=0)
    sweep_retry_cap_seconds: int = Field(default=6 * 3600, gt=0)
    sweep_max_attempts: int = Field(default=8, gt=0, le=64)
    # a claimed cleanup job is hidden from other sweeps this long (longer than the sweeper's timeout, 300 s)
    job_claim_seconds: int = Field(default=900, gt=0)


class Settings(BaseModel):
    """Names of the resources a handler talks to. Each handler declares the ones it needs (``required``), so a
    missing variable fails its first invocation with the variable's name."""

    model_config = ConfigDict(frozen=True, populate_by_name=True)

    table_name: str = Field(default="", alias="TABLE_NAME")
    bucket_name: str = Field(default="", alias="BUCKET_NAME")
    publish_state_machine_arn: str = Field(default="", alias="PUBLISH_STATE_MACHINE_ARN")
    install_state_machine_arn: str = Field(default="", alias="INSTALL_STATE_MACHINE_ARN")
    tenant_claim: str = Field(default="tenant", alias="TENANT_CLAIM")
    scope_claim: str = Field(default="scope", alias="SCOPE_CLAIM")
    # owner (a person) or workflow (an automation client); a token without it acts as a workflow (fails closed)
    actor_claim: str = Field(default="actor", alias="ACTOR_CLAIM")


@lru_cache(maxsize=1)
def settings() -> Settings:
    names = {field.alias: field.alias for field in Settings.model_fields.values() if field.alias}
    return Settings.model_validate(_from_environment(names))


def required(*fields: str) -> Settings:
    """The settings, refusing any of ``fields`` (Settings field names) that is unset or empty."""
    current = settings()
    missing = [Settings.model_fields[name].alias or name for name in fields if not getattr(current, name)]
    if missing:
        from packyard.errors import MissingSetting

        raise MissingSetting(f"required setting(s) not set: {', '.join(missing)}", settings=missing)
    return current


@lru_cache(maxsize=1)
def limits() -> Limits:
    names = {name: f"PACKYARD_{name.upper()}" for name in Limits.model_fields}
    return Limits.model_validate(_from_environment(names))


class ScopeNames(BaseModel):
    """The JWT scope that grants each permission. Override with ``PACKYARD_SCOPE_<PERMISSION>`` variables."""

    model_config = ConfigDict(frozen=True)

    read_packages: str = "packages:read"
    publish: str = "packages:publish"
    yank: str = "packages:yank"
    read_workspaces: str = "workspaces:read"
    change_installations: str = "installations:write"
    approve: str = "approvals:write"
    read_usage: str = "usage:read"


@lru_cache(maxsize=1)
def scope_names() -> ScopeNames:
    names = {name: f"PACKYARD_SCOPE_{name.upper()}" for name in ScopeNames.model_fields}
    return ScopeNames.model_validate(_from_environment(names))


def reset() -> None:
    """Forget cached settings (tests and the local stack change the environment)."""
    settings.cache_clear()
    limits.cache_clear()
    scope_names.cache_clear()
