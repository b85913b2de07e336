"""``Prefer: wait=N`` on ``POST /v1/uploads/{id}/complete`` and ``GET /v1/uploads/{id}?wait=N``, over the publish
state machine on moto. The publish step is held at a gate, opened from the test once the waiting handler has read
the session while it verifies: the answer comes from the real publish, not from a sleep in the test."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest

from devstack.caller import Caller
from packyard.operations import waiting
from packyard.publishing import publication, uploads
from packyard_cli.build import BuiltPackage, build_from_files


class Gate:
    def __init__(self) -> None:
        self.opened = threading.Event()
        self.open_after_reads: int | None = None
        self.reads_verifying = 0
        self.waits: list[waiting.Waited[Any]] = []


@pytest.fixture
def gate(monkeypatch) -> Iterator[Gate]:
    held = Gate()
    publish = publication.publish
    get_upload = uploads.get_upload
    until = waiting.until

    def gated_publish(*args: Any, **kwargs: Any) -> Any:
        assert held.opened.wait(timeout=60), "the test never opened the gate"
        return publish(*args, **kwargs)

    def counted_read(tenant: str, upload_id: str) -> Any:
        found = get_upload(tenant, upload_id)
        if found.is_verifying and not held.opened.is_set():
            held.reads_verifying += 1
            if held.open_after_reads is not None and held.reads_verifying >= held.open_after_reads:
                held.opened.set()
        return found

    def recorded(*args: Any, **kwargs: Any) -> Any:
        waited = until(*args, **kwargs)
        held.waits.append(waited)
        return waited

    monkeypatch.setattr(publication, "publish", gated_publish)
    monkeypatch.setattr(uploads, "get_upload", counted_read)
    monkeypatch.setattr(waiting, "until", recorded)
    yield held
    held.opened.set()


def _uploaded(acme: Caller, version: str = "1.0.0") -> tuple[str, BuiltPackage]:
    built = build_from_files({"SKILL.md": f"v{version}\n".encode()})
    session = acme.request_upload("hello", version, built)
    assert session.status == 201, session.body
    acme.put_archive(session.body, built.archive)
    return session.body["uploadId"], built


def test_prefer_wait_answers_complete_with_the_published_session(acme: Caller, gate: Gate):
    upload_id, _ = _uploaded(acme)
    gate.open_after_reads = 2

    answer = acme.post(f"/v1/uploads/{upload_id}/complete", headers={"Prefer": "wait=20"})

    assert answer.status == 200, answer.body
    assert answer.body["state"] == "published"
    assert answer.headers["preference-applied"] == "wait=20"
    assert gate.reads_verifying == 2
    assert gate.waits[-1].paused < 20
    assert acme.get("/v1/packages/hello/versions/1.0.0").status == 200


def test_prefer_wait_that_runs_out_answers_202_verifying(acme: Caller, gate: Gate):
    upload_id, _ = _uploaded(acme)

    answer = acme.post(f"/v1/uploads/{upload_id}/complete", headers={"Prefer": "wait=1"})

    assert (answer.status, answer.body["state"]) == (202, "verifying")
    assert answer.headers["preference-applied"] == "wait=1"
    assert gate.waits[-1].elapsed >= 1.0
    gate.opened.set()
    read = acme.get(f"/v1/uploads/{upload_id}", query={"wait": "20"})
    assert (read.status, read.body["state"]) == (200, "published")


def test_without_prefer_complete_answers_202_at_once(acme: Caller, gate: Gate):
    upload_id, _ = _uploaded(acme)
    answer = acme.post(f"/v1/uploads/{upload_id}/complete")
    assert answer.status == 202
    assert "preference-applied" not in answer.headers
    assert gate.waits == []


def test_get_upload_with_wait_answers_when_it_is_published(acme: Caller, gate: Gate):
    upload_id, _ = _uploaded(acme)
    assert acme.post(f"/v1/uploads/{upload_id}/complete").status == 202
    gate.open_after_reads = 3

    read = acme.get(f"/v1/uploads/{upload_id}", query={"wait": "20"})

    assert (read.status, read.body["state"]) == (200, "published")
    assert gate.reads_verifying == 3
    assert gate.waits[-1].paused < 20


@pytest.mark.parametrize("value", ["0", "21", "x"])
def test_get_upload_refuses_a_wait_outside_one_to_twenty(acme: Caller, gate: Gate, value: str):
    upload_id, _ = _uploaded(acme)
    read = acme.get(f"/v1/uploads/{upload_id}", query={"wait": value})
    assert (read.status, read.code) == (400, "invalid_request")
    assert gate.waits == []


def test_another_tenants_wait_finds_nothing(acme: Caller, globex: Caller, gate: Gate):
    upload_id, _ = _uploaded(acme)
    assert acme.post(f"/v1/uploads/{upload_id}/complete").status == 202
    assert globex.get(f"/v1/uploads/{upload_id}", query={"wait": "20"}).status == 404
    assert globex.post(f"/v1/uploads/{upload_id}/complete", headers={"Prefer": "wait=20"}).status == 404
    assert gate.waits == []
