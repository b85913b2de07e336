"""Change events (issue 22 item 4) through the real state machines and the local event bus: moto's EventBridge bus
created from template.yaml, the local recorder's rule delivering to a log group (devstack.event_log). Each of the four
kinds is put once its change is committed, with exactly the documented detail (README, "Change events"), and a
retried step puts the same ``detail.eventId`` again (at least once; consumers deduplicate on it)."""

from __future__ import annotations

import hashlib
import json
import re
from datetime import UTC, datetime
from typing import Any

import boto3
import jsonschema
import pytest

from devstack import ROOT, event_log
from devstack.caller import Caller
from packyard import changes, clock
from packyard.api.times import rfc3339
from packyard.errors import TransientStoreError
from packyard.operations import commit, settlement
from packyard.publishing import publication
from packyard.store import bus
from packyard_cli.build import build_from_files
from tests.support.sweeping import run_maintenance

WS = "ws-events"
API_READ = [{"kind": "api_read"}]
DAY = 24 * 3600


SCHEMAS = {
    kind: json.loads((ROOT / "docs" / "events" / f"{kind.lower().replace(' ', '-')}.schema.json").read_text())
    for kind in changes.KINDS
}


def recorded(stack: Any, kind: str | None = None) -> list[dict[str, Any]]:
    """The events moto's bus delivered to the recorder, each checked against its documented schema."""
    logs = boto3.client("logs", region_name=stack.region)
    found = event_log.read(logs, stack.event_logs["PackyardEventBus"])
    for event in found:
        jsonschema.validate(event["detail"], SCHEMAS[event["detail-type"]])  # docs/events/<kind>.schema.json
    return [e for e in found if kind is None or e["detail-type"] == kind]


@pytest.fixture
def published(acme: Caller, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """hello@1.0.0 published; the publish task's arguments (to run the step again, as a Step Functions retry)."""
    calls: list[tuple[Any, ...]] = []
    real = publication.publish

    def publish(*args: Any) -> dict[str, Any]:
        calls.append(args)
        return real(*args)

    monkeypatch.setattr(publication, "publish", publish)
    upload = acme.publish("hello", "1.0.0", build_from_files({"SKILL.md": b"v1\n"}, permissions=API_READ))
    assert upload["state"] == "published", upload
    monkeypatch.undo()
    (args,) = calls
    release = acme.get("/v1/packages/hello/versions/1.0.0").body
    envelope = acme.get(release["attestation"]["href"])
    assert envelope.status == 200, envelope.body
    digest = hashlib.sha256(envelope.raw.encode()).hexdigest()
    return {"upload": upload, "task": args, "release": release, "envelope_sha256": digest}


def test_a_publish_puts_release_published_with_the_releases_digests(acme: Caller, published: dict[str, Any]) -> None:
    (event,) = recorded(acme.api.stack, changes.RELEASE_PUBLISHED)
    release, upload_id = published["release"], published["upload"]["uploadId"]
    assert event["source"] == "packyard"
    assert event["detail"] == {
        "eventId": changes.event_id(changes.RELEASE_PUBLISHED, "t-acme", "hello", "1.0.0", upload_id),
        "tenant": "t-acme",
        "package": "hello",
        "version": "1.0.0",
        "uploadId": upload_id,
        "manifestDigest": release["manifestDigest"],
        "contentDigest": release["contentDigest"],
        "archive": {"sha256": release["archive"]["sha256"], "size": release["archive"]["size"]},
        "publishedAt": release["publishedAt"],
        "attestation": {"sha256": published["envelope_sha256"], "keyId": release["attestation"]["keyId"]},
    }


def test_a_retried_publish_step_puts_the_same_event_id(acme: Caller, published: dict[str, Any]) -> None:
    answer = publication.publish(*published["task"])  # the step again, after its change was committed
    assert answer["replay"] is True
    first, again = recorded(acme.api.stack, changes.RELEASE_PUBLISHED)
    assert again["detail"] == first["detail"]  # the same eventId: one change
    assert again["id"] != first["id"]  # EventBridge's own id is per put


def test_a_yank_puts_release_yanked_and_a_repeated_yank_the_same_event(acme: Caller, published: dict[str, Any]) -> None:
    assert acme.delete("/v1/packages/hello/versions/1.0.0").status == 200
    assert acme.delete("/v1/packages/hello/versions/1.0.0").status == 200  # idempotent: yankedAt is kept
    first, again = recorded(acme.api.stack, changes.RELEASE_YANKED)
    yanked_at = acme.get("/v1/packages/hello/versions/1.0.0").body["yankedAt"]
    epoch = int(datetime.strptime(yanked_at, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC).timestamp())
    expected = {
        "eventId": changes.event_id(changes.RELEASE_YANKED, "t-acme", "hello", "1.0.0", epoch),
        "tenant": "t-acme",
        "package": "hello",
        "version": "1.0.0",
        "manifestDigest": published["release"]["manifestDigest"],
        "yankedAt": yanked_at,
    }
    assert first["detail"] == expected and again["detail"] == expected


def test_a_settled_install_puts_operation_settled_and_a_retried_commit_or_settle_the_same_event(
    acme: Caller, published: dict[str, Any]
) -> None:
    """The commit that settles the install puts the event (its run ends without Settle); a retried Commit, and a
    Settle that finds it settled, put the same event again."""
    admitted = acme.install(WS, "hello", "hello", "1.0.0", key="k-events")
    final = acme.wait_settled(WS, admitted)  # approves the consent it waits for
    assert final["outcome"]["result"] == "succeeded", final
    (event,) = recorded(acme.api.stack, changes.OPERATION_SETTLED)
    release = published["release"]
    assert event["detail"] == {
        "eventId": changes.event_id(changes.OPERATION_SETTLED, "t-acme", WS, final["operationId"]),
        "tenant": "t-acme",
        "workspace": WS,
        "installationId": "hello",
        "operationId": final["operationId"],
        "kind": "install",
        "result": "succeeded",
        "code": None,
        "settledAt": final["settledAt"],
        "release": {
            "package": "hello",
            "version": "1.0.0",
            "manifestDigest": release["manifestDigest"],
            "archiveSha256": release["archive"]["sha256"],
        },
    }
    # Commit again, as Step Functions retries a task whose answer was lost: the operation is settled already
    retried = commit.commit_task("t-acme", WS, final["operationId"], 1, "hello")
    assert retried["settled"] is True
    # and Settle, as a run whose Commit was caught would: it finds the operation settled too
    settlement.settle_task("t-acme", WS, "hello", final["operationId"], None)
    first, again, third = recorded(acme.api.stack, changes.OPERATION_SETTLED)
    assert again["detail"] == first["detail"] == third["detail"]


def test_a_blob_the_scrub_finds_missing_puts_release_unavailable_and_a_recheck_the_same_event(
    acme: Caller, published: dict[str, Any]
) -> None:
    stack, sha = acme.api.stack, published["release"]["archive"]["sha256"]
    s3 = boto3.client("s3", region_name=stack.region)
    s3.delete_object(Bucket=stack.bucket_name, Key=f"blobs/t-acme/sha256/{sha}")
    found_at = clock.now() + 8 * DAY  # past the blob's first integrity check (7 days)
    assert run_maintenance(stack, found_at)["missing"] == 1
    (event,) = recorded(stack, changes.RELEASE_UNAVAILABLE)
    assert event["detail"] == {
        "eventId": changes.event_id(changes.RELEASE_UNAVAILABLE, "t-acme", "hello", "1.0.0", sha, found_at),
        "tenant": "t-acme",
        "package": "hello",
        "version": "1.0.0",
        "blob": {"sha256": sha, "problem": "missing"},
        "foundBy": "scrub",
        "unavailableAt": rfc3339(found_at),
    }
    assert acme.get("/v1/packages/hello/versions/1.0.0").body["status"] == "unavailable"
    assert run_maintenance(stack, found_at + 8 * DAY)["still_missing"] == 1  # its next check finds it again
    first, again = recorded(stack, changes.RELEASE_UNAVAILABLE)
    assert again["detail"] == first["detail"]


def test_no_event_carries_a_token_or_the_callers_identity(acme: Caller, published: dict[str, Any]) -> None:
    acme.wait_settled(WS, acme.install(WS, "hello", "hello", "1.0.0", key="k-secret"))
    acme.delete("/v1/packages/hello/versions/1.0.0")
    every = recorded(acme.api.stack)
    assert {e["detail-type"] for e in every} == {
        changes.RELEASE_PUBLISHED,
        changes.OPERATION_SETTLED,
        changes.RELEASE_YANKED,
    }
    text = repr([e["detail"] for e in every])
    assert acme.subject not in text and "token" not in text.lower() and "secret" not in text.lower()


def test_an_event_the_bus_does_not_take_fails_the_step_so_its_retry_puts_it(
    acme: Caller, monkeypatch: pytest.MonkeyPatch
) -> None:
    refused = {"FailedEntryCount": 1, "Entries": [{"ErrorCode": "InternalFailure", "ErrorMessage": "try again"}]}
    monkeypatch.setattr(bus, "client", lambda service: type("Refusing", (), {"put_events": lambda *a, **k: refused}))
    with pytest.raises(TransientStoreError, match="InternalFailure"):
        changes.emit((changes.RELEASE_YANKED, {"eventId": changes.event_id(changes.RELEASE_YANKED, "t-acme")}))


def test_the_documented_schemas_name_exactly_the_fields_the_events_carry() -> None:
    """README's table and docs/events/ list the same top-level fields for each kind."""
    readme = (ROOT / "README.md").read_text()
    for kind, schema in SCHEMAS.items():
        (row,) = [line for line in readme.splitlines() if line.startswith(f"| `{kind}` |")]
        fields = re.split(r"(?<!\\)\|", row)[3]  # the detail column (a value's own pipes are escaped)
        listed = re.sub(r"\([^)]*\)|\{[^}]*\}", "", fields)  # without values in (...) and nested fields in {...}
        top_level = set(re.findall(r"`(\w+)`", listed))
        assert top_level == set(schema["properties"]), (kind, top_level ^ set(schema["properties"]))
