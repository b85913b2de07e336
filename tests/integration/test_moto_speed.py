"""devstack.moto_speed: the faster DynamoDB serializer answers the same bytes as moto's own, executions sharing one
kept ASL program keep their own state, and update expressions parsed once answer as moto's own."""

from __future__ import annotations

import contextlib
import json
from typing import Any

from botocore.exceptions import ClientError
from hypothesis import given, settings
from hypothesis import strategies as st
from moto.core import serialize as moto_serialize
from moto.core.responses import ActionResult
from moto.core.utils import get_service_model
from moto.dynamodb.models.dynamo_type import DynamoType
from moto.dynamodb.models.utilities import dynamo_to_dict

from devstack import moto_speed
from tests.support.collector import cyclic_garbage

names = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=1, max_size=8)
numbers = st.integers(-(10**12), 10**12).map(str) | st.decimals(allow_nan=False, allow_infinity=False).map(str)
scalars = st.one_of(
    st.text(max_size=20).map(lambda s: {"S": s}),
    numbers.map(lambda n: {"N": n}),
    st.binary(max_size=20).map(lambda b: {"B": b}),
    st.booleans().map(lambda b: {"BOOL": b}),
    st.just({"NULL": True}),
    st.lists(st.text(max_size=8), min_size=1, max_size=4, unique=True).map(lambda v: {"SS": v}),
    st.lists(numbers, min_size=1, max_size=4, unique=True).map(lambda v: {"NS": v}),
    st.lists(st.binary(max_size=8), min_size=1, max_size=3, unique=True).map(lambda v: {"BS": v}),
)
values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.dictionaries(names, inner, max_size=4).map(lambda m: {"M": m}),
        st.lists(inner, max_size=4).map(lambda items: {"L": items}),
    ),
    max_leaves=12,
)
items = st.dictionaries(names, values, min_size=1, max_size=6)


def serialized(serializer_class: type[Any], operation: str, result: dict[str, Any]) -> str:
    model = get_service_model("dynamodb")  # moto's own copy of the botocore model, as its responses use
    serializer = serializer_class(
        operation_model=model.operation_model(operation),
        pretty_print=False,
        value_picker=moto_serialize.XFormedAttributePicker(response_transformers=None),
    )
    # as moto's DynamoResult hands it over: DynamoType objects turned into plain dicts, blobs as bytes
    body: str = serializer.serialize(ActionResult(dynamo_to_dict(result)).result)["body"]
    return body


def stored(item: dict[str, Any]) -> dict[str, DynamoType]:
    """An item as moto's table keeps it (DynamoType objects; blobs as the base64 text they arrived as)."""
    return {name: DynamoType(json.loads(json.dumps(value, default=_base64))) for name, value in item.items()}


def _base64(value: bytes) -> str:
    import base64

    return base64.b64encode(value).decode()


@settings(max_examples=150, deadline=None)
@given(item=items)
def test_a_get_item_answer_is_the_same_bytes_as_motos(item: dict[str, Any]) -> None:
    result = {"Item": stored(item)}
    assert serialized(moto_speed.DynamoJSONSerializer, "GetItem", result) == serialized(
        moto_serialize.JSONSerializer, "GetItem", result
    )


@settings(max_examples=50, deadline=None)
@given(found=st.lists(items, max_size=4), unprocessed=st.lists(items, max_size=2))
def test_batch_get_and_query_answers_are_the_same_bytes_as_motos(
    found: list[dict[str, Any]], unprocessed: list[dict[str, Any]]
) -> None:
    batch = {
        "Responses": {"table": [stored(i) for i in found]},
        "UnprocessedKeys": {"table": {"Keys": [stored(i) for i in unprocessed]}} if unprocessed else {},
        "ConsumedCapacity": [{"TableName": "table", "CapacityUnits": 1.5}],
    }
    query = {"Items": [stored(i) for i in found], "Count": len(found), "ScannedCount": len(found)}
    if found:
        query["LastEvaluatedKey"] = stored(found[-1])
    for operation, result in (("BatchGetItem", batch), ("Query", query)):
        assert serialized(moto_speed.DynamoJSONSerializer, operation, result) == serialized(
            moto_serialize.JSONSerializer, operation, result
        )


def parsed(parser_class: type[Any], operation: str, body: dict[str, Any]) -> Any:
    from moto.core.parse import RequestDict

    model = get_service_model("dynamodb")
    wire = json.dumps(body, default=_base64).encode()  # what botocore sends: blobs as base64 text
    request: RequestDict = {
        "method": "POST",
        "values": {},
        "headers": {},
        "body": wire,
        "url_path": "/",
        "url_params": {},
    }
    return parser_class(model.operation_model(operation), map_type=dict).parse(request)


def _ordered(value: Any) -> str:
    """The parse as text, in its own key order (moto's code reads an AttributeValue's first key)."""
    return json.dumps(value, default=lambda b: b.hex())


@settings(max_examples=150, deadline=None)
@given(item=items, condition_values=st.dictionaries(names.map(lambda n: ":" + n), values, max_size=3))
def test_a_request_parses_to_the_same_parameters_as_with_motos_parser(
    item: dict[str, Any], condition_values: dict[str, Any]
) -> None:
    from moto.core.parse import JSONParser

    put = {"TableName": "t", "Item": item, "ExpressionAttributeValues": condition_values}
    transaction = {"TransactItems": [{"Put": put}, {"ConditionCheck": {"TableName": "t", "Key": item}}]}
    for operation, body in (("PutItem", put), ("TransactWriteItems", transaction)):
        mine, motos = parsed(moto_speed.DynamoJSONParser, operation, body), parsed(JSONParser, operation, body)
        assert mine == motos and _ordered(mine) == _ordered(motos)


def test_odd_attribute_values_parse_as_with_motos_parser() -> None:
    """What a hand-made request may send: no key, two keys, an unknown key, a null, nulls inside M and L."""
    from moto.core.parse import JSONParser

    odd = {"a": {}, "b": {"S": "x", "N": "1"}, "c": {"X": "1"}, "d": {"S": None}, "e": {"M": {"k": None}}}
    odd["f"] = {"L": [None, {"N": "2"}]}
    body = {"TableName": "t", "Item": odd}
    assert parsed(moto_speed.DynamoJSONParser, "PutItem", body) == parsed(JSONParser, "PutItem", body)


def test_the_local_runtime_parses_dynamodb_requests_with_the_faster_parser(stack: Any) -> None:
    from moto.core.parse import PROTOCOL_PARSERS

    assert PROTOCOL_PARSERS["json"] is moto_speed.DynamoJSONParser


def test_the_local_runtime_answers_dynamodb_with_the_faster_serializer(stack: Any) -> None:
    assert moto_serialize.get_serializer_class("dynamodb", "json") is moto_speed.DynamoJSONSerializer


def test_a_definition_is_parsed_and_preprocessed_once(stack: Any) -> None:
    from moto.stepfunctions.parser.asl.parse.asl_parser import AmazonStateLanguageParser

    definition = json.dumps({"StartAt": "A", "States": {"A": {"Type": "Pass", "Result": 1, "End": True}}})
    first_program, first_tree = AmazonStateLanguageParser.parse(definition)
    second_program, second_tree = AmazonStateLanguageParser.parse(definition)
    assert second_tree is first_tree and second_program is first_program


SHARED_PROGRAM = {
    "StartAt": "Each",
    "States": {
        "Each": {
            "Type": "Map",
            "ItemsPath": "$.items",
            "MaxConcurrency": 3,
            "ItemProcessor": {
                "StartAt": "Sign",
                "States": {
                    "Sign": {
                        "Type": "Choice",
                        "Choices": [{"Variable": "$.n", "NumericLessThan": 0, "Next": "Negative"}],
                        "Default": "Size",
                    },
                    "Negative": {"Type": "Fail", "Error": "Negative", "Cause": "a negative item"},
                    "Size": {
                        "Type": "Choice",
                        "Choices": [{"Variable": "$.n", "NumericGreaterThan": 9, "Next": "Big"}],
                        "Default": "Small",
                    },
                    "Big": {"Type": "Pass", "Parameters": {"n.$": "$.n", "size": "big"}, "End": True},
                    "Small": {"Type": "Pass", "Parameters": {"n.$": "$.n", "size": "small"}, "End": True},
                },
            },
            "ResultPath": "$.sized",
            "Next": "Done",
        },
        "Done": {"Type": "Pass", "OutputPath": "$.sized", "End": True},
    },
}


def test_executions_of_one_program_side_by_side_keep_their_own_state(stack: Any) -> None:
    """Sixteen executions of one kept program at once, each with its own items: each ends as it alone would (its
    own Map iterations, Choice branches, paths), and the one with a negative item fails alone."""
    import boto3

    import devstack
    from devstack.template import create_state_machine

    sfn = boto3.client("stepfunctions")
    arn = create_state_machine(
        sfn, name="shared-program", definition=SHARED_PROGRAM, role_arn="arn:aws:iam::123456789012:role/test"
    )
    inputs = {f"run-{i}": [i, i * 7, i + 10] if i != 5 else [1, -1, 2] for i in range(16)}
    started = {
        name: sfn.start_execution(
            stateMachineArn=arn, name=name, input=json.dumps({"items": [{"n": n} for n in items]})
        )["executionArn"]
        for name, items in inputs.items()
    }
    for name, execution in started.items():
        ended = devstack.wait_for_execution(execution, timeout=60)
        if name == "run-5":
            assert ended["status"] == "FAILED"
            continue
        assert ended["status"] == "SUCCEEDED"
        expected = [{"n": n, "size": "big" if n > 9 else "small"} for n in inputs[name]]
        assert json.loads(ended["output"]) == expected


UPDATES: list[tuple[str, dict[str, Any], str | None]] = [
    # (UpdateExpression, ExpressionAttributeValues, ConditionExpression)
    ("SET a = :one, b = :list", {":one": {"N": "1"}, ":list": {"L": [{"S": "x"}]}}, None),
    ("SET a = a + :one ADD c :one", {":one": {"N": "1"}}, "attribute_exists(a)"),
    (
        "SET b = list_append(b, :list), d = if_not_exists(d, :one)",
        {":one": {"N": "1"}, ":list": {"L": [{"S": "y"}]}},
        None,
    ),
    ("SET m = :map", {":map": {"M": {"k": {"N": "2"}}}}, None),
    ("SET m.k = m.k - :one REMOVE d", {":one": {"N": "1"}}, "m.k > :one"),
    ("ADD s :set", {":set": {"SS": ["p", "q"]}}, None),
    ("DELETE s :set", {":set": {"SS": ["p"]}}, None),
    ("SET a = :one", {":one": {"N": "9"}}, "a = :one"),  # condition fails
    ("SET a = :one, a = :one", {":one": {"N": "1"}}, None),  # two actions on one path: refused
    ("SET a = = :one", {":one": {"N": "1"}}, None),  # does not parse
    ("SET pk = :one", {":one": {"S": "other"}}, None),  # the key: refused
    ("SET a = :one SET b = :one", {":one": {"N": "1"}}, None),  # two SET clauses: refused
]
NAMED_UPDATES: list[tuple[str, dict[str, Any], dict[str, str]]] = [
    # one text, different names: the checks of its structure hold for the names they were made with, not the text
    ("SET #n = :one", {":one": {"S": "x"}}, {"#n": "a"}),
    ("SET #n = :one", {":one": {"S": "x"}}, {"#n": "pk"}),  # the key under a name: refused
    ("SET #n = :one, #m = :one", {":one": {"S": "x"}}, {"#n": "a", "#m": "b"}),
    ("SET #n = :one, #m = :one", {":one": {"S": "x"}}, {"#n": "a", "#m": "a"}),  # one path twice: refused
]


def _run_updates(client: Any, table: str, pk: str) -> list[Any]:
    from botocore.exceptions import ClientError

    outcomes: list[Any] = []
    requests = [(expression, values, condition, None) for expression, values, condition in UPDATES]
    requests += [(expression, values, None, names) for expression, values, names in NAMED_UPDATES]
    for _ in range(2):  # the second round meets every expression again (a kept tree, when kept)
        for expression, values, condition, names in requests:
            params: dict[str, Any] = {
                "TableName": table,
                "Key": {"pk": {"S": pk}, "sk": {"S": "u"}},
                "UpdateExpression": expression,
                "ExpressionAttributeValues": values,
                "ReturnValues": "ALL_NEW",
            }
            if condition:
                params["ConditionExpression"] = condition
            if names:
                params["ExpressionAttributeNames"] = names
            try:
                answer = client.update_item(**params)["Attributes"]
                outcomes.append({k: v for k, v in answer.items() if k != "pk"})
            except ClientError as exc:
                outcomes.append((exc.response["Error"]["Code"], exc.response["Error"]["Message"]))
    return outcomes


def _kept_and_own(table: str, prefix: str, uninstall: Any, install: Any) -> tuple[list[Any], list[Any]]:
    """The updates' outcomes with a speed-up installed, then without it (moto's own)."""
    import boto3

    client = boto3.client("dynamodb")
    kept = _run_updates(client, table, f"{prefix}-kept")
    uninstall()
    try:
        own = _run_updates(client, table, f"{prefix}-own")
    finally:
        install()
    return kept, own


def test_update_expressions_answer_as_motos_own_with_trees_kept_and_maps_built_once(stack: Any) -> None:
    kept, own = _kept_and_own(
        stack.table_name, "t-speed", moto_speed._uninstall_update_expressions, moto_speed._install_update_expressions
    )
    assert kept == own
    assert any(isinstance(outcome, tuple) for outcome in own) and any(isinstance(o, dict) for o in own)
    refusals = {outcome[0] for outcome in own if isinstance(outcome, tuple)}
    assert {"ValidationException", "ConditionalCheckFailedException"} <= refusals, refusals


def test_the_checks_of_an_update_expressions_structure_run_once_per_tree_names_and_keys(stack: Any) -> None:
    """The second Update with one text and the same names skips moto's structure checks; other names run them."""
    import boto3
    from moto.dynamodb.parsing import validators

    client = boto3.client("dynamodb")
    walked: list[str] = []
    real = validators.ActionCountValidator.traverse

    def traverse(self: Any, node: Any) -> Any:
        walked.append("checked")
        return real(self, node)

    validators.ActionCountValidator.traverse = traverse
    try:
        for names in ({"#q": "a"}, {"#q": "a"}, {"#q": "b"}, {"#q": "pk"}, {"#q": "pk"}):
            with contextlib.suppress(Exception):
                client.update_item(
                    TableName=stack.table_name,
                    Key={"pk": {"S": "t-structure"}, "sk": {"S": "u"}},
                    UpdateExpression="SET #q = :v",
                    ExpressionAttributeNames=names,
                    ExpressionAttributeValues={":v": {"S": "x"}},
                )
    finally:
        validators.ActionCountValidator.traverse = real
    # a, (a again: skipped), b, pk (refused, so not kept), pk again (checked and refused again)
    assert len(walked) == 4, walked


def test_an_updates_validation_asks_no_abc_which_kind_a_node_is_once_it_has_met_its_class(
    stack: Any, monkeypatch: Any
) -> None:
    """moto's traversals (``DepthFirstTraverser``, the resolving processor's look at each parent) and the tree's copy
    ask ``isinstance`` of ABCs (``Node``, the processors' kinds, the actions) for every node of every validation.
    The answers are kept per class, so a second round of the same updates asks no ABC from there (moto's parser and
    executors still ask, once per node they build or run)."""
    import abc
    import sys

    import boto3
    from moto.dynamodb.parsing import ast_nodes, validators

    client = boto3.client("dynamodb")
    _run_updates(client, stack.table_name, "t-kinds-first")  # every class pair met once
    asked_from: list[str] = []  # "function: Kind? NodeClass" for each question asked from those modules
    real = abc.ABCMeta.__instancecheck__
    traversals = {ast_nodes.__file__, validators.__file__, moto_speed.__file__}

    def instancecheck(cls: Any, instance: Any) -> bool:
        caller = sys._getframe(1).f_code
        if caller.co_filename in traversals:
            asked_from.append(f"{caller.co_name}: {cls.__name__}? {type(instance).__name__}")
        return bool(real(cls, instance))

    monkeypatch.setattr(abc.ABCMeta, "__instancecheck__", instancecheck)
    outcomes = _run_updates(client, stack.table_name, "t-kinds-again")
    monkeypatch.undo()
    assert any(isinstance(outcome, dict) for outcome in outcomes)  # the updates ran, were validated and applied
    walks = ("traverse_node_recursively", "process", "pre_processing_of_child", "_traverse", "_process", "_kind_of")
    walks += ("_copy_node", "_is_a")
    from_traversals = [question for question in asked_from if question.split(":")[0] in walks]
    assert from_traversals == [], sorted(set(from_traversals))[:10]


def _shape_of(node: Any) -> Any:
    """A tree as text-like data: each node's class, attributes and children (not the links back to parents)."""
    from moto.dynamodb.parsing.ast_nodes import Node

    if not isinstance(node, Node):
        return repr(node)
    attributes = {k: repr(v) for k, v in vars(node).items() if k not in ("parent", "children")}
    return (type(node).__name__, attributes, [_shape_of(child) for child in node.children or []])


def _nodes(node: Any) -> list[Any]:
    from moto.dynamodb.parsing.ast_nodes import Node

    if not isinstance(node, Node):
        return []
    return [node, *(found for child in node.children or [] for found in _nodes(child))]


def test_a_syntax_tree_copies_as_deepcopy_copies_it_without_links_back_to_parents() -> None:
    """The copy a validation walks has the tree's nodes, attributes and children as ``copy.deepcopy`` copies them,
    and no node pointing back to its parent (the walk carries the parent): each validation's copy is then freed
    when the update is done, not left to the collector as a reference cycle."""
    import copy

    from moto.dynamodb.parsing.expressions import UpdateExpressionParser

    texts = [text for text, _, _ in UPDATES if "= =" not in text]
    texts += ["SET #a[2].b = :v, c = list_append(:l, c) REMOVE d[0], e.f", "ADD #n :one DELETE s :set"]
    trees = [UpdateExpressionParser.make(text) for text in texts]  # parsed trees do link nodes to parents
    for tree in trees:
        mine, generic = moto_speed._copy_tree(tree), copy.deepcopy(tree)
        assert _shape_of(mine) == _shape_of(generic) == _shape_of(tree)
        assert mine is not tree and all(a is not b for a, b in zip(mine.children, tree.children, strict=True))
        assert all(node.parent is None for node in _nodes(mine))
    garbage = cyclic_garbage(lambda: [moto_speed._copy_tree(tree) for tree in trees])
    assert [found for found in garbage if _nodes(found)] == []


# (ConditionExpression, ExpressionAttributeNames, two sets of ExpressionAttributeValues): the shapes the store writes
# (tests/../shared/packyard/store) and every construct moto's condition grammar has
CONDITIONS: list[tuple[str, dict[str, str] | None, dict[str, Any], dict[str, Any]]] = [
    ("attribute_exists(pk)", None, {}, {}),
    ("attribute_exists(pk) AND attribute_not_exists(#shard)", {"#shard": "dueShard"}, {}, {}),
    (
        "#state = :expected AND #token = :token",
        {"#state": "state", "#token": "token"},
        {":expected": {"S": "a"}, ":token": {"S": "t1"}},
        {":expected": {"S": "b"}, ":token": {"S": "t2"}},
    ),
    ("attribute_not_exists(usedBytes) OR usedBytes <= :room", None, {":room": {"N": "10"}}, {":room": {"N": "99"}}),
    (
        "version = :v AND #state = :waiting",
        {"#state": "state"},
        {":v": {"N": "1"}, ":waiting": {"S": "w"}},
        {":v": {"N": "7"}, ":waiting": {"S": "x"}},
    ),
    (
        "attribute_exists(pk) AND #status <> :unavailable",
        {"#status": "status"},
        {":unavailable": {"S": "u"}},
        {":unavailable": {"S": "v"}},
    ),
    (
        "a = :x AND (resumes = :read0)",
        None,
        {":x": {"N": "1"}, ":read0": {"N": "0"}},
        {":x": {"N": "2"}, ":read0": {"N": "3"}},
    ),
    (
        "NOT (a BETWEEN :lo AND :hi) OR b IN (:p, :q, :r)",
        None,
        {":lo": {"N": "1"}, ":hi": {"N": "5"}, ":p": {"S": "p"}, ":q": {"S": "q"}, ":r": {"S": "r"}},
        {":lo": {"N": "2"}, ":hi": {"N": "6"}, ":p": {"S": "P"}, ":q": {"S": "Q"}, ":r": {"S": "R"}},
    ),
    (
        "size(#l) > :n AND begins_with(m.k, :pre) AND contains(s, :e) AND attribute_type(#l, :t)",
        {"#l": "list"},
        {":n": {"N": "2"}, ":pre": {"S": "ab"}, ":e": {"S": "e"}, ":t": {"S": "L"}},
        {":n": {"N": "3"}, ":pre": {"S": "cd"}, ":e": {"S": "f"}, ":t": {"S": "M"}},
    ),
    ("l[1].x >= :v", None, {":v": {"N": "1"}}, {":v": {"B": "AAE="}}),
]
BAD_CONDITIONS: list[tuple[str, dict[str, str] | None, dict[str, Any]]] = [
    ("a = :missing", None, {":other": {"S": "x"}}),  # a value the request does not name
    ("#missing = :v", None, {":v": {"S": "x"}}),  # a name the request does not name
    ("a = = :v", None, {":v": {"S": "x"}}),  # does not parse
    ("((a = :v))", None, {":v": {"S": "x"}}),  # redundant parentheses
    ("size = :v", None, {":v": {"S": "x"}}),  # a reserved word
    ("a = :v", None, None),  # no values at all
]


def _rendered(value: Any) -> Any:
    """An ``Op`` tree as plain data: each object's class and attributes, recursively."""
    if isinstance(value, list | tuple):
        return [_rendered(v) for v in value]
    if isinstance(value, dict):
        return {k: _rendered(v) for k, v in value.items()}
    if hasattr(value, "__dict__"):
        return (type(value).__name__, {k: _rendered(v) for k, v in vars(value).items()})
    return repr(value)


def _parsed(expression: str, names: dict[str, str] | None, values: dict[str, Any] | None) -> Any:
    from moto.dynamodb.comparisons import create_condition_expression_parser

    parser = create_condition_expression_parser(expression, names, values)
    try:
        op = parser.parse()
    except Exception as exc:
        return (type(exc).__name__, str(exc))
    return _rendered(op), parser.expr_attr_names_found, parser.expr_attr_values_found


def test_conditions_parse_as_motos_own_with_their_trees_kept(stack: Any) -> None:
    """Each condition met three times (a new text, then kept with other values, then kept again): the same ``Op``
    tree, names and values found, and the same exception for one that is wrong, as moto's own parser gives."""
    calls = [(text, names, values) for text, names, first, second in CONDITIONS for values in (first, second, first)]
    calls += [(text, names, values) for text, names, values in BAD_CONDITIONS for _ in range(2)]
    calls += [(text, names, {":v": {"S": "x"}, ":missing": {"S": "y"}}) for text, names, _ in BAD_CONDITIONS[:1]]
    kept = [_parsed(*call) for call in calls]
    assert moto_speed._conditions  # the texts that parse are kept
    moto_speed._uninstall_conditions()
    try:
        own = [_parsed(*call) for call in calls]
    finally:
        moto_speed._install_conditions()
    assert kept == own
    assert sum(isinstance(outcome[0], str) for outcome in own) >= len(BAD_CONDITIONS)  # the refusals were met


def test_conditional_writes_answer_as_motos_own_with_kept_conditions(stack: Any) -> None:
    kept, own = _kept_and_own(
        stack.table_name, "t-cond", moto_speed._uninstall_conditions, moto_speed._install_conditions
    )
    assert kept == own


def _run_queries(client: Any, table: str, tag: str) -> list[Any]:
    """Every page of a set of queries over the table and its DueIndex (keys, ranges, order, limits, filters)."""
    key_conditions: list[dict[str, Any]] = [
        {"KeyConditionExpression": "pk = :p", "ExpressionAttributeValues": {":p": {"S": f"{tag}#a"}}},
        {
            "KeyConditionExpression": "pk = :p AND begins_with(sk, :s)",
            "ExpressionAttributeValues": {":p": {"S": f"{tag}#a"}, ":s": {"S": "op#1"}},
        },
        {
            "KeyConditionExpression": "pk = :p AND sk BETWEEN :lo AND :hi",
            "ExpressionAttributeValues": {":p": {"S": f"{tag}#b"}, ":lo": {"S": "op#03"}, ":hi": {"S": "op#12"}},
            "ScanIndexForward": False,
        },
        {"KeyConditionExpression": "pk = :p", "ExpressionAttributeValues": {":p": {"S": f"{tag}#none"}}},
        {
            "KeyConditionExpression": "pk = :p",
            "FilterExpression": "n > :n",
            "ExpressionAttributeValues": {":p": {"S": f"{tag}#a"}, ":n": {"N": "7"}},
        },
        {
            "IndexName": "DueIndex",
            "KeyConditionExpression": "dueShard = :d AND dueAt <= :t",
            "ExpressionAttributeValues": {":d": {"S": f"{tag}#due#1"}, ":t": {"S": "2026-01-01T00:00:12Z"}},
        },
        {
            "IndexName": "DueIndex",
            "KeyConditionExpression": "dueShard = :d",
            "ExpressionAttributeValues": {":d": {"S": f"{tag}#due#0"}},
            "ScanIndexForward": False,
        },
        {
            "IndexName": "DueIndex",
            "KeyConditionExpression": "dueShard = :d",
            "ExpressionAttributeValues": {":d": {"S": f"{tag}#due#9"}},
        },
    ]
    outcomes: list[Any] = []
    for condition in key_conditions:
        for limit in (None, 3):
            params: dict[str, Any] = {"TableName": table, **condition}
            if limit:
                params["Limit"] = limit
            while True:
                page = client.query(**params)
                outcomes.append({k: page.get(k) for k in ("Items", "Count", "ScannedCount", "LastEvaluatedKey")})
                if "LastEvaluatedKey" not in page:
                    break
                params["ExclusiveStartKey"] = page["LastEvaluatedKey"]
    for refused in (
        {"IndexName": "NoSuchIndex", "KeyConditionExpression": "pk = :p"},
        {"KeyConditionExpression": "sk = :p"},
    ):
        try:
            client.query(TableName=table, ExpressionAttributeValues={":p": {"S": "x"}}, **refused)
        except ClientError as exc:
            outcomes.append((exc.response["Error"]["Code"], exc.response["Error"]["Message"]))
    return outcomes


def _without_tag(outcomes: list[Any], tag: str) -> str:
    return json.dumps(outcomes, sort_keys=True, default=str).replace(tag, "TAG")


def test_queries_answer_as_motos_own_looking_only_at_the_items_that_can_match(stack: Any) -> None:
    """The base table's and the DueIndex's queries look at the items under their key, not the whole table (moto
    sorts every item for each query): pages, order, counts and refusals are moto's own."""
    import boto3
    from moto.dynamodb.models.table import Table

    client = boto3.client("dynamodb")
    for tag in ("kept", "own"):
        for pk in ("a", "b", "c"):
            for index in range(15):
                item = {"pk": {"S": f"{tag}#{pk}"}, "sk": {"S": f"op#{index:02d}"}, "n": {"N": str(index)}}
                if index % 2 == 0:  # a sparse index: half the items are in it
                    item["dueShard"] = {"S": f"{tag}#due#{index % 3}"}
                    item["dueAt"] = {"S": f"2026-01-01T00:00:{index:02d}Z"}
                client.put_item(TableName=stack.table_name, Item=item)
        client.put_item(  # an index key attribute of another type: in no query's answer
            TableName=stack.table_name,
            Item={"pk": {"S": f"{tag}#odd"}, "sk": {"S": "x"}, "dueShard": {"N": "1"}, "dueAt": {"S": "z"}},
        )

    def queried(tag: str) -> tuple[list[Any], list[int]]:
        """The queries' outcomes, and how many items each query looked at (what ``all_items`` gave it)."""
        looked_at: list[int] = []
        all_items = Table.all_items

        def counted(self: Any) -> Any:
            found = all_items(self)
            looked_at.append(len(found))
            return found

        Table.all_items = counted  # type: ignore[method-assign]
        try:
            return _run_queries(client, stack.table_name, tag), looked_at
        finally:
            Table.all_items = all_items  # type: ignore[method-assign]

    kept, kept_looked_at = queried("kept")
    moto_speed._uninstall_query()
    try:
        own, own_looked_at = queried("own")
    finally:
        moto_speed._install_query()
    assert _without_tag(kept, "kept") == _without_tag(own, "own")
    assert max(kept_looked_at) <= 15 < min(own_looked_at)  # a key's items, against every item of the table
