"""Runtime configuration: one pydantic settings model, validated at cold start from the environment.

No names are hard-coded: the template (or the local stack) sets the environment.
"""

from __future__ import annotations

import os
from functools import lru_cache
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

MiB = 1024 * 1024
GiB = 1024 * MiB


# Plain pydantic models read from os.environ: pydantic-settings would add ~250 ms to every cold start.


def _from_environment(names: dict[str, str]) -> dict[str, Any]:
    return {field: os.environ[var] for field, var in names.items() if var in os.environ}


class Limits(BaseModel):
    """Package, storage and retention limits (defaults from docs/architecture.md). Override with ``PACKYARD_<NAME>``
    variables."""

    model_config = ConfigDict(frozen=True)

    # follows from max_files, max_path_length and max_unpacked_bytes unless set (``manifest_bytes_needed``)
    manifest_max_bytes: int = Field(default=0, gt=0)
    max_files: int = Field(default=10_000, gt=0)
    max_unpacked_bytes: int = Field(default=512 * MiB, gt=0)
    max_archive_bytes: int = Field(default=256 * MiB, gt=0)
    max_compression_ratio: float = Field(default=50.0, gt=1)
    compression_ratio_floor_bytes: int = Field(default=64 * MiB, ge=0)
    # UTF-8 bytes; ustar's own ceiling (155-byte prefix, '/', 100-byte name), and what lets 10,000 such paths
    # travel in one create-session request under Lambda's 6 MB payload (docs/architecture.md, section 5.2)
    max_path_length: int = Field(default=256, gt=0)
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
    # an Idempotency-Key sent with a request idempotent by nature (complete, yank) stays bound to it this long
    request_key_retention_seconds: int = Field(default=24 * 3600, gt=0)
    # a reclaimed orphan's record stays this long as a tombstone (its generation fences a publish that read it before)
    orphan_tombstone_seconds: int = Field(default=7 * 24 * 3600, gt=0)
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
    # Bounds on what is copied into items and answers (docs/architecture.md, "What one request may copy"): the
    # largest admitted manifest and install request fit DynamoDB's 400 KB item with room to spare; past a bound the
    # request is refused up front, 422 limit_exceeded naming it (``limit``). Raising one needs that arithmetic redone.
    max_permissions: int = Field(default=128, gt=0)
    max_permission_resource_bytes: int = Field(default=256, gt=0)  # UTF-8 bytes
    max_permission_reason_bytes: int = Field(default=512, gt=0)  # UTF-8 bytes
    max_metadata_bytes: int = Field(default=64 * 1024, gt=0)  # canonical (compact UTF-8) JSON
    max_config_bytes: int = Field(default=16 * 1024, gt=0)  # an install's config, compact UTF-8 JSON

    @model_validator(mode="before")
    @classmethod
    def _manifest_limit_follows_the_file_limit(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("manifest_max_bytes") is None:
            fields = cls.model_fields

            def value(name: str) -> int:
                return int(data.get(name, fields[name].default))

            needed = manifest_bytes_needed(value("max_files"), value("max_path_length"), value("max_unpacked_bytes"))
            data = {**data, "manifest_max_bytes": needed}
        return data


# Everything in a manifest but its file list: the envelope, permissions and metadata (their own bounds are
# smaller). The 1 MiB that was the whole manifest limit before, so no manifest accepted then is refused now.
MANIFEST_OTHER_BYTES = 1 * MiB


def manifest_entry_bytes(max_path_length: int, max_unpacked_bytes: int) -> int:
    """The longest canonical file entry (with its separating comma): the largest mode (0o777 = 511), a path of
    ``max_path_length`` UTF-8 bytes that JSON need not escape, a size of as many digits as ``max_unpacked_bytes``."""
    entry = '{"mode":511,"path":"","sha256":"' + "0" * 64 + '","size":' + str(max_unpacked_bytes) + "},"
    return len(entry) + max_path_length


def manifest_bytes_needed(max_files: int, max_path_length: int, max_unpacked_bytes: int) -> int:
    """The manifest byte limit that lets ``max_files`` files at the longest paths (with mode) fit."""
    return max_files * manifest_entry_bytes(max_path_length, max_unpacked_bytes) + MANIFEST_OTHER_BYTES


class Settings(BaseModel):
    """Names of the resources a handler talks to. Each handler declares the ones it needs (``required``), so a
    missing variable fails its first invocation with the variable's name."""

    model_config = ConfigDict(frozen=True, populate_by_name=True)

    table_name: str = Field(default="", alias="TABLE_NAME")
    bucket_name: str = Field(default="", alias="BUCKET_NAME")
    publish_state_machine_arn: str = Field(default="", alias="PUBLISH_STATE_MACHINE_ARN")
    install_state_machine_arn: str = Field(default="", alias="INSTALL_STATE_MACHINE_ARN")
    # the KMS key (an alias ARN: rotation points it at a new key) that signs releases (publishing.signing)
    signing_key_id: str = Field(default="", alias="SIGNING_KEY_ID")
    # Which claims of the verified token carry the principal (docs/decisions.md, "Identity providers as issued";
    # README, "Connect your identity provider"). A claim name may be a namespaced URL (Auth0's
    # https://example.com/tenant) or carry a colon (custom:tenant).
    tenant_claim: str = Field(default="tenant", alias="TENANT_CLAIM")
    subject_claim: str = Field(default="sub", alias="SUBJECT_CLAIM")
    # one claim, or several separated by commas whose scopes are united (Entra ID: scp for people, roles for apps)
    scope_claim: str = Field(default="scope", alias="SCOPE_CLAIM")
    # "string" (space separated, RFC 8693 / RFC 9068) or "array" (a JSON array, which API Gateway's HTTP API JWT
    # authorizer passes as one bracketed string "[a b]"); one form, or one per scope claim, comma separated
    scope_claim_form: str = Field(default="string", alias="SCOPE_CLAIM_FORM")
    # stripped from each scope (Cognito writes <resource-server-identifier>/<scope>); when set, a scope without it
    # belongs to another resource server and is ignored
    scope_prefix: str = Field(default="", alias="SCOPE_PREFIX")
    # owner (a person) or workflow (an automation client): the claim, the values (comma separated) that mean each,
    # and what a token without the claim is (a value in neither list is refused 401 naming the claim)
    actor_claim: str = Field(default="actor", alias="ACTOR_CLAIM")
    actor_owner_values: str = Field(default="owner", alias="ACTOR_OWNER_VALUES")
    actor_workflow_values: str = Field(default="workflow", alias="ACTOR_WORKFLOW_VALUES")
    actor_when_absent: Literal["owner", "workflow"] = Field(default="workflow", alias="ACTOR_WHEN_ABSENT")
    # the stack's own user pool (template CreateUserPool): the tenant its client-credentials tokens act for
    # (packyard.api.token_claims); empty: they carry no tenant and are refused
    machine_tenant: str = Field(default="", alias="MACHINE_TENANT")
    # the stack's event bus: change events (packyard.changes) are put on it
    event_bus_name: str = Field(default="", alias="EVENT_BUS_NAME")


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
