"""The data access layer's DynamoDB attribute values, written without boto3 (issue 11: a cold start that imports
boto3 pays ~40 ms for s3transfer and boto3's resource layer it never uses): the same attribute values boto3's
TypeSerializer writes, read back to the values written, and a first AWS client made without importing boto3."""

from __future__ import annotations

import decimal
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from boto3.dynamodb.types import TypeSerializer
from hypothesis import given, settings
from hypothesis import strategies as st

from packyard.store.dynamo import attribute_value, marshal, unmarshal

ROOT = Path(__file__).resolve().parents[2]

# what the stores write: models dumped in JSON mode (str, int, float, bool, lists, maps) and expression values
# (numbers, strings, sets of strings)
SCALARS = (
    st.text(max_size=20)
    | st.integers(min_value=-(10**38) + 1, max_value=10**38 - 1)
    # configs' floats (DynamoDB holds 38 digits between 1e-130 and 1e126: past that, see the refusal test below)
    | st.floats(min_value=-1e15, max_value=1e15).filter(lambda f: f == 0 or abs(f) > 1e-15)
    | st.booleans()
)
JSON_LIKE = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)
STRING_SETS = st.frozensets(st.text(min_size=1, max_size=8), min_size=1, max_size=5)


def boto3_writes(value: Any) -> Any:
    """What the stores handed boto3's TypeSerializer before: floats as the Decimal of their repr."""
    if isinstance(value, float):
        return decimal.Decimal(repr(value))
    if isinstance(value, list):
        return [boto3_writes(v) for v in value]
    if isinstance(value, dict):
        return {k: boto3_writes(v) for k, v in value.items()}
    return value


def canonical(attribute: Any) -> Any:
    """An attribute value with its sets sorted (a set's order on the wire carries no meaning)."""
    if isinstance(attribute, dict):
        return {k: sorted(v) if k in ("SS", "NS") else canonical(v) for k, v in attribute.items()}
    if isinstance(attribute, list):
        return [canonical(v) for v in attribute]
    return attribute


@settings(max_examples=300, derandomize=True)
@given(value=JSON_LIKE | STRING_SETS)
def test_an_attribute_value_is_what_boto3s_serializer_writes(value: Any) -> None:
    assert canonical(attribute_value(value)) == canonical(TypeSerializer().serialize(boto3_writes(value)))


def as_read(value: Any) -> Any:
    """A written value as it reads back: DynamoDB numbers are decimals, so an integral float is an int."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, list):
        return [as_read(v) for v in value]
    if isinstance(value, dict):
        return {k: as_read(v) for k, v in value.items()}
    return value


@settings(max_examples=300, derandomize=True)
@given(values=st.dictionaries(st.text(min_size=1, max_size=8), JSON_LIKE, max_size=6))
def test_an_item_reads_back_as_the_values_written(values: dict[str, Any]) -> None:
    assert unmarshal(marshal(values)) == as_read(values)


def test_none_values_are_left_out_of_an_item_and_a_string_set_stays_a_set() -> None:
    item = marshal({"a": None, "releases": {"1.0.0"}, "n": 1.5, "flag": False})
    assert item == {"releases": {"SS": ["1.0.0"]}, "n": {"N": "1.5"}, "flag": {"BOOL": False}}
    assert unmarshal(item) == {"releases": {"1.0.0"}, "n": 1.5, "flag": False}


@pytest.mark.parametrize("number", [10**40 + 1, decimal.Decimal("1e400")])
def test_a_number_dynamodb_cannot_hold_exactly_is_refused_as_boto3_refuses_it(number: Any) -> None:
    with pytest.raises(decimal.DecimalException):
        TypeSerializer().serialize(number)
    with pytest.raises(decimal.DecimalException):
        attribute_value(number)


@pytest.mark.parametrize("value", [float("nan"), object(), frozenset()])
def test_a_value_with_no_attribute_value_is_a_type_error(value: Any) -> None:
    with pytest.raises(TypeError):
        attribute_value(value)


FIRST_CLIENT = """
import json, sys
from packyard.store import aws, dynamo
client = aws.client("dynamodb")
item = dynamo.unmarshal(dynamo.marshal({"n": 1, "s": "x", "m": {"f": 0.5}}))
print(json.dumps({"boto3": sorted(m for m in sys.modules if m == "boto3" or m.startswith(("boto3.", "s3transfer"))),
                  "service": client.meta.service_model.service_name, "item": item}))
"""


def test_the_first_client_and_item_are_made_without_importing_boto3() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "POWERTOOLS_"))}
    env.update(PYTHONPATH=str(ROOT / "shared"), AWS_DEFAULT_REGION="us-east-1")
    done = subprocess.run([sys.executable, "-c", FIRST_CLIENT], env=env, capture_output=True, text=True, check=True)
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report == {"boto3": [], "service": "dynamodb", "item": {"n": 1, "s": "x", "m": {"f": 0.5}}}
