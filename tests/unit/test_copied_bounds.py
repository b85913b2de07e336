"""The bounds on what a manifest copies into items and answers (``Limits``: permissions, their resources and
reasons, metadata): each admitted at its bound and refused one past it, 422 ``limit_exceeded`` naming it."""

from __future__ import annotations

import json
from typing import Any

import pytest

from packyard.config import Limits
from packyard.errors import InputLimitExceeded
from packyard.publishing.manifest import canonical_json, parse_manifest

LIMITS = Limits()
SHA = "0" * 64


def doc(**extra: Any) -> bytes:
    return json.dumps({"files": [{"path": "a.txt", "size": 1, "sha256": SHA}], **extra}).encode()


def permissions(count: int, resource_bytes: int = 8, reason_bytes: int | None = None) -> list[dict[str, Any]]:
    made = []
    for index in range(count):
        entry: dict[str, Any] = {"kind": "network", "resource": f"{index:06d}".ljust(resource_bytes, "r")}
        if reason_bytes is not None:
            entry["reason"] = "w" * reason_bytes
        made.append(entry)
    return made


def metadata_of(size: int) -> dict[str, Any]:
    """Metadata whose canonical JSON is exactly ``size`` bytes: {"k":"..."} is 8 bytes around the text."""
    found = {"k": "m" * (size - 8)}
    assert len(canonical_json(found)) == size
    return found


def refused(raw: bytes) -> InputLimitExceeded:
    with pytest.raises(InputLimitExceeded) as caught:
        parse_manifest(raw, LIMITS)
    error = caught.value
    assert (error.status, error.code) == (422, "limit_exceeded")
    return error


def test_the_defaults_are_the_documented_bounds():
    assert (LIMITS.max_permissions, LIMITS.max_permission_resource_bytes, LIMITS.max_permission_reason_bytes) == (
        128,
        256,
        512,
    )
    assert (LIMITS.max_metadata_bytes, LIMITS.max_config_bytes) == (64 * 1024, 16 * 1024)


def test_permission_count_at_the_bound_and_one_past_it():
    assert len(parse_manifest(doc(permissions=permissions(128)), LIMITS).permissions) == 128
    error = refused(doc(permissions=permissions(129)))
    assert error.extra == {"limit": "max_permissions", "max": 128, "actual": 129}
    assert "max_permissions" in error.detail


@pytest.mark.parametrize("count", [700, 2000], ids=["700", "2000"])
def test_the_manifests_of_the_issue_are_refused(count):
    """700 permissions (163 KB) settled unconfirmed on the 400 KB item, 2,000 failed the publish: both within the
    manifest byte limit, both refused at parse now."""
    raw = doc(
        permissions=[{"kind": "network", "resource": f"https://example{i:05d}.com/" + "a" * 200} for i in range(count)]
    )
    assert len(raw) <= LIMITS.manifest_max_bytes
    assert refused(raw).extra["limit"] == "max_permissions"


def test_resource_bytes_at_the_bound_and_one_past_it_counting_utf8():
    assert parse_manifest(doc(permissions=permissions(1, resource_bytes=256)), LIMITS).permissions[0].resource
    assert parse_manifest(doc(permissions=[{"kind": "state", "resource": "é" * 128}]), LIMITS)  # 256 bytes
    assert refused(doc(permissions=permissions(1, resource_bytes=257))).extra == {
        "limit": "max_permission_resource_bytes",
        "max": 256,
        "actual": 257,
    }
    assert refused(doc(permissions=[{"kind": "state", "resource": "é" * 128 + "x"}])).extra["actual"] == 257


def test_reason_bytes_at_the_bound_and_one_past_it():
    assert parse_manifest(doc(permissions=permissions(1, reason_bytes=512)), LIMITS)
    error = refused(doc(permissions=permissions(1, reason_bytes=513)))
    assert error.extra == {"limit": "max_permission_reason_bytes", "max": 512, "actual": 513}


def test_metadata_bytes_at_the_bound_and_one_past_it():
    assert parse_manifest(doc(metadata=metadata_of(64 * 1024)), LIMITS).metadata
    error = refused(doc(metadata=metadata_of(64 * 1024 + 1)))
    assert error.extra == {"limit": "max_metadata_bytes", "max": 65536, "actual": 65537}


def test_each_bound_is_configurable():
    raised = Limits(max_permissions=200)
    assert len(parse_manifest(doc(permissions=permissions(200)), raised).permissions) == 200
