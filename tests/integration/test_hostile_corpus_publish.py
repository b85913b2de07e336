"""Every hostile case through the real API and state machine: rejected with its sub-code, nothing published,
the reservation released, no blob written."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from packyard import config
from tests.support.callers import all_keys, release_items, used_bytes

CORPUS = Path(__file__).parents[1] / "data" / "hostile"
CASES = json.loads((CORPUS / "cases.json").read_text())


@pytest.fixture
def case_limits(request, monkeypatch):
    for name, value in request.param["limits"].items():
        monkeypatch.setenv(f"PACKYARD_{name.upper()}", str(value))
    config.reset()
    yield request.param
    monkeypatch.undo()
    config.reset()


def _upload_body(case: dict) -> tuple[dict, bytes | None]:
    manifest = json.loads((CORPUS / case["manifest"]).read_text())
    archive = (CORPUS / case["archive"]).read_bytes() if case["archive"] else b"\x1f\x8b"
    declared = {
        "size": case["declaredSize"] if case["declaredSize"] is not None else len(archive),
        "sha256": case["declaredSha256"] or hashlib.sha256(archive).hexdigest(),
    }
    return {"manifest": manifest, "archive": declared}, archive


@pytest.mark.parametrize("case_limits", CASES, ids=[c["name"] for c in CASES], indirect=True)
def test_hostile_case_is_rejected_with_its_sub_code_and_leaves_no_trace(case_limits, acme, stack):
    case = case_limits
    body, archive = _upload_body(case)

    session = acme.post("/v1/packages/corpus/versions/1.0.0/uploads", body)

    if case["stage"] == "manifest":
        assert session.status == 422
        assert (session.code, session.body["subCode"]) == ("archive_rejected", case["expectedSubCode"])
    else:
        assert session.status == 201, session.body
        acme.put_archive(session.body, archive)
        final = acme.complete_and_wait(session.body["uploadId"])
        if case["expectedSubCode"] is None:
            assert final["state"] == "published"
            return
        assert final["state"] == "rejected"
        assert final["rejection"]["code"] == "archive_rejected"
        assert final["rejection"]["subCode"] == case["expectedSubCode"]
        assert final["rejection"]["detail"]
    assert release_items(stack, "t-acme") == []
    assert all_keys(stack, "blobs/") == []
    assert all_keys(stack, "uploads/t-acme/") == []
    assert used_bytes(stack, "t-acme") == 0
