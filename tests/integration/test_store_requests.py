"""How the store asks DynamoDB: each transaction's ClientRequestToken, and BatchGetItem's retry of unprocessed keys
(DynamoDB: retry them, with exponential backoff; an immediate retry meets the same throttle)."""

from __future__ import annotations

import itertools

import pytest

import devstack
from devstack.counting import count_aws_requests
from devstack.faults import unprocessed_keys
from packyard.errors import TransientStoreError
from packyard.store import dynamo
from tests.support import stacks

stack = stacks.stack


def _put(table: str, sk: str, releases: set[str]) -> list[dict]:
    return [{"Put": {"TableName": table, "Item": dynamo.marshal({"pk": "t-tokens", "sk": sk, "releases": releases})}}]


def test_a_transaction_token_names_its_step_and_items_and_fits_dynamodb() -> None:
    # Given the same items built twice (a set filled in another order), another step, another attempt
    one = dynamo.request_token("upload.create", _put("T", "A", {"a@1", "b@2", "c@3"}))
    again = dynamo.request_token("upload.create", _put("T", "A", {"c@3", "a@1", "b@2"}))
    other_step = dynamo.request_token("upload.settle", _put("T", "A", {"a@1", "b@2", "c@3"}))
    other_items = dynamo.request_token("upload.create", _put("T", "B", {"a@1", "b@2", "c@3"}))
    other_attempt = dynamo.request_token("upload.create", _put("T", "A", {"a@1", "b@2", "c@3"}), "2")
    # Then the same request has the same token, anything else another; each within DynamoDB's 1..36 characters
    assert one == again
    assert len({one, other_step, other_items, other_attempt}) == 4
    assert all(1 <= len(token) <= 36 for token in (one, other_step, other_items, other_attempt))


def test_the_backoff_grows_exponentially_is_capped_and_jittered_in_full() -> None:
    ceilings = [dynamo.backoff_delay(attempt, 1.0) for attempt in range(1, 9)]
    assert ceilings[:4] == [0.05, 0.1, 0.2, 0.4]
    assert max(ceilings) == dynamo.BACKOFF_CAP_SECONDS
    assert all(b >= a for a, b in itertools.pairwise(ceilings))
    assert dynamo.backoff_delay(3, 0.0) == 0.0 and dynamo.backoff_delay(3, 0.5) == 0.1


def test_batch_get_retries_unprocessed_keys_until_it_has_every_item(stack: devstack.Stack) -> None:
    # Given three stored items and a DynamoDB that answers only one item per request, twice
    dynamo.transact(
        [_put(stack.table_name, sk, {"x"})[0] for sk in ("1", "2", "3")], step="test.seed", attempt="unprocessed"
    )
    keys = [("t-tokens", sk) for sk in ("1", "2", "3")]
    with unprocessed_keys(times=2) as plan, count_aws_requests() as requests:
        found = dynamo.batch_get(keys)
    # Then it asked again for what was left, and has all three
    assert sorted(found) == keys
    assert plan.answered == 2
    assert requests[("dynamodb", "BatchGetItem")] == 3


def test_batch_get_gives_up_as_transient_after_its_attempts(
    stack: devstack.Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given more keys than attempts, and a DynamoDB that answers one item per request (DynamoDB processes at least
    # one, or refuses the request as throttled)
    sks = [f"g{n}" for n in range(dynamo.BATCH_GET_ATTEMPTS + 2)]
    dynamo.transact([_put(stack.table_name, sk, {"x"})[0] for sk in sks], step="test.seed", attempt="gives-up")
    monkeypatch.setattr(dynamo, "BACKOFF_CAP_SECONDS", 0.01)  # the attempts, not their waits, are under test
    with unprocessed_keys(times=dynamo.BATCH_GET_ATTEMPTS), pytest.raises(TransientStoreError):
        dynamo.batch_get([("t-tokens", sk) for sk in sks])
