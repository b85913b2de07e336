"""Nothing admitted that cannot finish: the largest manifest and install request the bounds admit publish, install
and update to the end under DynamoDB's 400 KB item limit as DynamoDB counts it (devstack.item_size), and one past
a bound is refused up front, 422 ``limit_exceeded`` naming it, before anything is written."""

from __future__ import annotations

import json
from typing import Any

import boto3

from devstack import item_size
from packyard import config
from packyard_cli.build import build_from_files
from tests.support.callers import all_keys, used_bytes

WS = "ws-bounds"
KINDS = ("api_read", "api_write", "events", "state", "network")
ITEM_LIMIT = 409_600


def widest_permissions(tag: str, count: int = 128) -> list[dict[str, Any]]:
    """``count`` distinct permissions, each with a 256-byte resource and a 512-byte reason (the bounds)."""
    return [
        {
            "kind": KINDS[index % len(KINDS)],
            "resource": f"{tag}-{index:04d}-".ljust(256, "r"),
            "reason": "w" * 512,
        }
        for index in range(count)
    ]


def widest_config() -> dict[str, Any]:
    """16 KiB of compact JSON in one string (what DynamoDB stores about 1:1)."""
    config_ = {"ab": "c" * (16 * 1024 - 9)}
    assert len(json.dumps(config_, separators=(",", ":")).encode()) == 16 * 1024
    return config_


def costliest_config_bytes() -> int:
    """What DynamoDB counts for the 16 KiB config that costs it the most per JSON byte: a list of zeros (``0,`` is 2
    JSON bytes, 1 + 2 stored). Its 8,188 elements make moto take minutes per operation, so the test below writes
    the string config and adds the difference, three copies of it, to what it measures."""
    costly = {"ab": [0] * 8188}
    assert len(json.dumps(costly, separators=(",", ":")).encode()) == 16 * 1024
    return item_size.value_size({"M": {"ab": {"L": [{"N": "0"}] * 8188}}})


def widest_metadata() -> dict[str, Any]:
    metadata = {"k": "m" * (64 * 1024 - 8)}
    assert len(json.dumps(metadata, separators=(",", ":")).encode()) == 64 * 1024
    return metadata


def table_items(stack: Any, prefix: str) -> list[dict[str, Any]]:
    ddb = boto3.client("dynamodb", region_name=stack.region)
    found = ddb.scan(TableName=stack.table_name)["Items"]  # test-only: the whole (small) table
    return [item for item in found if item["pk"]["S"].startswith(prefix)]


def test_the_largest_admitted_manifest_and_request_publish_install_and_update_to_the_end(acme, stack):
    for version, tag in (("1.0.0", "a"), ("2.0.0", "b")):
        built = build_from_files(
            {"SKILL.md": version.encode()}, permissions=widest_permissions(tag), metadata=widest_metadata()
        )
        assert acme.publish("big", version, built)["state"] == "published"

    installed = acme.wait_settled(WS, acme.install(WS, "big", "big", "1.0.0", key="k-1", config=widest_config()))
    assert installed["outcome"] == {"result": "succeeded"}
    # the update holds the most: baseline grants, plan grants, the target's permissions and the consent asked, each
    # 128 long, and the config three times (request, baseline, plan)
    updated = acme.wait_settled(
        WS, acme.install(WS, "big", "big", "2.0.0", key="k-2", if_match='"1"', config=widest_config())
    )
    assert updated["outcome"] == {"result": "succeeded"}, updated["outcome"]
    assert len(acme.get(f"/v1/workspaces/{WS}/installations/big").body["grants"]) == 128

    sizes = {item["sk"]["S"]: item_size.item_size(item) for item in table_items(stack, "TENANT#t-acme")}
    largest = max(sizes.values())
    stored_config = item_size.value_size({"M": {"ab": {"S": "c" * (16 * 1024 - 9)}}})
    worst = largest + 3 * (costliest_config_bytes() - stored_config)
    print(f"largest item {largest} bytes; with the costliest config {worst}")
    assert worst <= ITEM_LIMIT, sizes  # docs/architecture.md, "What one request may copy"


def test_the_700_and_2000_permission_manifests_are_refused_before_anything_is_written(acme, stack):
    for count in (700, 2000):
        perms = [{"kind": "network", "resource": f"https://example{i:05d}.com/" + "a" * 200} for i in range(count)]
        built = build_from_files({"SKILL.md": b"x\n"}, permissions=perms)
        answer = acme.request_upload("many", f"1.0.{count}", built)
        assert (answer.status, answer.code) == (422, "limit_exceeded"), answer.body
        assert (answer.body["limit"], answer.body["max"], answer.body["actual"]) == ("max_permissions", 128, count)
    assert all_keys(stack, "uploads/") == []
    assert used_bytes(stack, "t-acme") == 0
    assert table_items(stack, "TENANT#t-acme#UPLOAD#") == []


def test_one_permission_past_the_bound_is_refused_at_upload_creation(acme):
    at_bound = build_from_files({"SKILL.md": b"x\n"}, permissions=widest_permissions("a"))
    past = build_from_files({"SKILL.md": b"y\n"}, permissions=widest_permissions("a", 129))

    assert acme.request_upload("edge", "1.0.0", at_bound).status == 201
    refused = acme.request_upload("edge", "1.0.1", past)
    assert (refused.status, refused.code, refused.body["limit"]) == (422, "limit_exceeded", "max_permissions")


def test_a_config_one_byte_past_the_bound_is_refused_at_admission(acme):
    acme.publish("small", "1.0.0", build_from_files({"SKILL.md": b"x\n"}))
    past = {"ab": "c" * (16 * 1024 - 9), "d": 1}  # 16,384 + 6 bytes
    refused = acme.install(WS, "small", "small", "1.0.0", key="k-past", config=past)

    assert (refused.status, refused.code) == (422, "limit_exceeded"), refused.body
    assert (refused.body["limit"], refused.body["max"]) == ("max_config_bytes", 16 * 1024)
    assert acme.get(f"/v1/workspaces/{WS}/installations/small").status == 404
    admitted = acme.install(WS, "small", "small", "1.0.0", key="k-at", config=widest_config())
    assert acme.wait_settled(WS, admitted)["outcome"] == {"result": "succeeded"}


def test_a_release_published_under_a_higher_bound_is_refused_at_admission(acme, monkeypatch):
    """Lowering a bound leaves releases that exceed it: installing one is refused up front, not failed later."""
    monkeypatch.setenv("PACKYARD_MAX_PERMISSIONS", "200")
    config.reset()
    try:
        acme.publish("old", "1.0.0", build_from_files({"SKILL.md": b"x\n"}, permissions=widest_permissions("o", 150)))
    finally:
        monkeypatch.delenv("PACKYARD_MAX_PERMISSIONS")
        config.reset()

    refused = acme.install(WS, "old", "old", "1.0.0", key="k-old")

    assert (refused.status, refused.code) == (422, "limit_exceeded"), refused.body
    assert (refused.body["limit"], refused.body["actual"]) == ("max_permissions", 150)


def test_resolved_is_paged_with_the_list_cursor_and_the_pages_together_are_the_whole_view(acme):
    acme.publish("small", "1.0.0", build_from_files({"SKILL.md": b"x\n"}))
    for name in ("a", "b", "c"):
        acme.wait_settled(WS, acme.install(WS, name, "small", "1.0.0", key=f"k-{name}"))

    seen: list[str] = []
    cursor = None
    for _ in range(5):
        page = acme.get(f"/v1/workspaces/{WS}/resolved", query={"limit": "1", **({"cursor": cursor} if cursor else {})})
        assert page.status == 200, page.body
        assert len(page.body["items"]) <= 1
        seen += [item["installationId"] for item in page.body["items"]]
        cursor = page.body["nextCursor"]
        if cursor is None:
            break
    assert seen == ["a", "b", "c"]
    other = acme.get("/v1/workspaces/ws-other/resolved", query={"cursor": cursor or "x"})
    assert (other.status, other.code) == (400, "invalid_request")


def test_a_list_page_stops_before_its_items_pass_the_page_budget(stack):
    """DynamoDB's own page stops at 1 MB read; an answered page stops at 640 KiB stored (store.pages), so a page of
    the largest items rendered (up to 7 bytes a stored byte) stays under Lambda's 6 MB response."""
    from packyard.store import dynamo, pages

    config.reset()
    ddb = boto3.client("dynamodb", region_name=stack.region)
    partition = "TENANT#t-pages#WS#w"
    for index in range(12):
        item = {"pk": {"S": partition}, "sk": {"S": f"INST#{index:02d}"}, "blob": {"S": "x" * 100_000}}
        ddb.put_item(TableName=stack.table_name, Item=item)

    first, cursor = dynamo.query(partition, prefix="INST#", limit=100, answered=True)
    assert len(first) == 6 and cursor is not None  # 6 x ~100 KB; the 7th would pass 640 KiB
    assert sum(pages.item_bytes(item) for item in first) <= pages.PAGE_BYTES
    rest, end = dynamo.query(partition, prefix="INST#", limit=100, cursor=cursor, answered=True)
    assert [i["sk"]["S"] for i in first + rest] == [f"INST#{index:02d}" for index in range(12)]
    assert end is None
    whole, _ = dynamo.query(partition, prefix="INST#", limit=100)  # not answered: DynamoDB's page (up to 1 MB)
    assert len(whole) > 6
