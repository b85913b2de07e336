"""Costs of moto's that made the local stack CPU-bound, removed without changing what moto answers.

Profiled under the load benchmark (``benchmarks/bench_local_stack.py``; docs/decisions.md, "Local stack throughput"):
an installation lifecycle cost about 255 ms of the stack's CPU, all under one GIL, so 16 clients got no more done
than one. These costs are moto's own and none is part of what AWS does:

**DynamoDB answers went through moto's generic serializer attribute by attribute.** moto 5.2 serializes every
response by walking the botocore output shape and, for each member of each structure, asking six alias providers
where the value might be (``moto.core.serialize.AttributePicker``). A DynamoDB ``AttributeValue`` is a structure of
ten members of which one is set, so each attribute of each item costs ten such searches, nested maps and lists
again: 12 ms for a 3 KB ``GetItem`` answer, about 30% of the stack's CPU. :class:`DynamoJSONSerializer` writes an
``AttributeValue`` (a plain dict by then: moto's ``DynamoResult`` has turned its ``DynamoType`` objects into one)
straight from its one key, with moto's own rules for each type (strings ``str``, blobs base64, sets and lists item
by item, maps recursively); any other value goes the generic way. ``tests/unit/test_moto_speed.py`` checks it gives
the same bytes as moto's serializer.

**Every execution re-parsed its state machine.** moto's execution worker runs ANTLR over the ASL definition each
time an execution starts (about 11% of the CPU), then the preprocessor over the tree into evaluation components
(another 9% once the rest was cheaper): both are now done once per definition (its text is the key; a bounded
cache), and every execution evaluates the same components, which keep no execution's state (see
:func:`_parse_keeping_trees`).

**Every Lambda task made a new boto3 client.** moto's ``boto_client_for`` builds a client (endpoint resolution,
service model, event handlers) for each Task state it runs (about 4%); it is now made once per region, service and
moto port and shared, as botocore clients may be across threads.

**Every request looked up what never changes.** moto's server listed its own package directory on disk to find
the service a request is for (``moto.backends.list_of_moto_modules``: a ``listdir`` and some 150 ``isdir`` calls per
request), inspected the response class for its method names (``method_names_from_class``, ``inspect.getmembers``)
and, for each EventBridge event matched to a rule, compiled the rule's JSONPath input paths again (``jsonpath_ng``'s
parser). The first is computed once, the other two are kept per class and per expression.

**Requests and expressions were read again and again** (second pass, docs/decisions.md "Local stack throughput,
second pass"): DynamoDB requests are parsed with ``AttributeValue`` read from its one key (:class:`DynamoJSONParser`,
the counterpart of the serializer); an update expression is parsed once per text, its tree copied node by node
for each validation, and moto's traversers build their processor maps once (:func:`_install_update_expressions`);
the interpreter's JSONPaths are parsed once per path.

**Conditions were lexed and parsed for every request, twice** (fifth pass, docs/decisions.md "Local stack throughput,
fifth pass"): moto's ``ConditionExpressionParser`` runs once in the DynamoDB handler (to check the names) and again in
the backend (to evaluate), a tenth of the stack's CPU under load. The syntax tree is kept per expression text and
attribute names, and each request's ``:values`` are bound into a copy of it (:func:`_parse_condition`).

**An update expression's structure was checked for every Update** (docs/decisions.md, "The commit tells its own
settlement"): three of moto's ten validation walks read only the tree, names and table keys; they run once per kept
tree, names and keys (:func:`_validate_update`).

**Every query sorted the whole table** (sixth pass, docs/decisions.md "Local stack throughput, sixth pass"):
moto's ``Table.query`` sorts every item of the table, then looks for the ones under the key, so a query's cost grew
with the table, under the lock that makes DynamoDB's operations atomic. It now looks at the items that can match
(the table's own key: the items stored under it; an index: those whose hash attributes equal the query's), then runs
its own checks, sort, paging and filters on them (:func:`_query`). Items are answered a whole map at a time too
(:meth:`DynamoJSONSerializer._serialize_type_map`).

**Every update left its validation to the collector, and asked ABCs what each node was** (docs/decisions.md, "The
stack's collector walks what it stores"): a validated tree copy linked its nodes to their parents and each processor
kept bound methods of itself, so both were reference cycles freed only by a collection; the copies now link no node
to its parent (the traversal carries it, :func:`_walk`) and the processors' maps hold functions per class. Whether a
value is a node, and which kind processes it, is asked once per class (:func:`_is_a`, :func:`_kind_of`).

Installed by :func:`devstack.lambdas.install` (every local runtime), removed by :func:`devstack.lambdas.uninstall`.
"""

from __future__ import annotations

import base64
import copy
import functools
import inspect
import sys
import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable
from enum import Enum
from typing import Any

from moto.core import parse as moto_parse
from moto.core import serialize as moto_serialize
from moto.core.models import botocore_stubber
from moto.settings import moto_server_port
from moto.stepfunctions.parser.asl.component.common.path import result_path as asl_result_path
from moto.stepfunctions.parser.asl.parse import asl_parser
from moto.stepfunctions.parser.asl.utils import boto_client
from moto.stepfunctions.parser.asl.utils import json_path as asl_json_path

_installed: dict[str, Any] = {}

# ------------------------------------------------------------------ DynamoDB AttributeValue serialization

_STRINGS = frozenset({"S", "N"})
_STRING_SETS = frozenset({"SS", "NS"})
_FLAGS = frozenset({"NULL", "BOOL"})


def _string(value: Any) -> Any:
    """moto's JSON ``_serialize_type_string``."""
    if isinstance(value, Enum):
        value = value.value
    return str(value) if value not in [None, {}, []] else value


def _blob(value: Any) -> str:
    """moto's ``_serialize_type_blob`` (``ResponseSerializer._base64``)."""
    if isinstance(value, str):
        value = value.encode("utf-8")
    return base64.b64encode(value).strip().decode("utf-8")


class DynamoJSONSerializer(moto_serialize.JSONSerializer):
    """moto's JSON serializer, with ``AttributeValue`` dicts written directly (same output, a fraction of the work)."""

    def _serialize_type_structure(self, serialized: Any, value: Any, shape: Any, key: str) -> None:
        if key and shape.name == "AttributeValue" and isinstance(value, dict):
            serialized[key] = self._attribute_value(value, shape)
            return
        super()._serialize_type_structure(serialized, value, shape, key)

    def _serialize_type_map(self, serialized: Any, value: Any, shape: Any, key: str) -> None:
        """An item (a map of AttributeValues) written in one pass: moto's map serializer would go through
        ``_serialize`` (a method looked up by name, a path pushed and popped) for each attribute."""
        value_shape = shape.value
        if value_shape.name != "AttributeValue":
            super()._serialize_type_map(serialized, value, shape, key)
            return
        map_obj: dict[str, Any] = self.MAP_TYPE()
        self._default_serialize(serialized, map_obj, shape, key)
        for name, attribute in value.items():
            if name and isinstance(attribute, dict):
                map_obj[name] = self._attribute_value(attribute, value_shape)
            else:
                self._serialize(map_obj, attribute, value_shape, name)

    def _attribute_value(self, value: dict[str, Any], shape: Any) -> Any:
        out: dict[str, Any] = {}
        for name in value if len(value) == 1 else shape.members:
            member = value.get(name)
            if member is None or name not in shape.members:
                continue
            if name in _STRINGS:
                out[name] = _string(member)
            elif name in _FLAGS:
                out[name] = member
            elif name == "B":
                out[name] = _blob(member)
            elif name in _STRING_SETS:
                out[name] = [_string(item) for item in member]
            elif name == "BS":
                out[name] = [_blob(item) for item in member]
            elif name == "M":
                out[name] = {k: self._nested(v, shape) for k, v in member.items() if v is not None}
            else:  # "L"
                out[name] = [self._nested(item, shape) if item is not None else None for item in member]
        return out

    def _nested(self, value: Any, shape: Any) -> Any:
        if isinstance(value, dict):
            return self._attribute_value(value, shape)
        wrapper: dict[str, Any] = {}  # not a plain dict: moto's generic way
        moto_serialize.JSONSerializer._serialize_type_structure(self, wrapper, value, shape, "value")
        return wrapper.get("value")


_ATTRIBUTE_VALUE_MEMBERS = frozenset({"S", "N", "B", "SS", "NS", "BS", "M", "L", "NULL", "BOOL"})


class DynamoJSONParser(moto_parse.JSONParser):
    """moto's JSON request parser, with DynamoDB's ``AttributeValue`` read from its one key (moto walks the ten
    members of the shape for each attribute of each item, nested maps and lists again: 5% of the stack's CPU under
    load). Same result as moto's: the member's value parsed by its type (blobs base64-decoded, lists and maps item
    by item), nothing for a key the shape does not have or a null; anything else goes the generic way."""

    def _parse_structure(self, shape: Any, value: Any) -> Any:
        if not (isinstance(value, dict) and len(value) == 1 and _is_attribute_value(shape)):
            return super()._parse_structure(shape, value)  # type: ignore[no-untyped-call]
        parsed = self.MAP_TYPE()
        ((name, raw),) = value.items()
        if raw is not None and name in shape.members:
            parsed[name] = self._attribute_member(name, raw, shape)
        return parsed

    def _attribute_member(self, name: str, raw: Any, shape: Any) -> Any:
        if name in _STRINGS or name in _FLAGS:
            return raw  # strings and booleans: moto's JSON parser keeps them as they came
        if name == "B":
            return self._blob_parser(raw)
        if name in _STRING_SETS:
            return list(raw)  # iterated as moto's _parse_list iterates it
        if name == "BS":
            return [self._blob_parser(item) for item in raw]
        if name == "M":
            parsed = self.MAP_TYPE()
            value_shape = shape.members["M"].value
            for key, item in raw.items():
                parsed[key] = self._parse_structure(value_shape, item)
            return parsed
        member_shape = shape.members["L"].member
        return [self._parse_structure(member_shape, item) for item in raw]


def _is_attribute_value(shape: Any) -> bool:
    """Whether ``shape`` is DynamoDB's ``AttributeValue`` as this parser knows it (kept per shape object: moto keeps
    its service models, so the same shapes come back request after request)."""
    known = _attribute_value_shapes.get(shape)
    if known is None:
        known = _attribute_value_shapes[shape] = _looks_like_attribute_value(shape)
    return known


_attribute_value_shapes: weakref.WeakKeyDictionary[Any, bool] = weakref.WeakKeyDictionary()


def _looks_like_attribute_value(shape: Any) -> bool:
    return bool(
        shape.name == "AttributeValue"
        and not shape.is_document_type
        and frozenset(shape.members) == _ATTRIBUTE_VALUE_MEMBERS
        and all("name" not in member.serialization for member in shape.members.values())
    )


def _install_parser() -> None:
    _installed["parser"] = moto_parse.PROTOCOL_PARSERS["json"]
    moto_parse.PROTOCOL_PARSERS["json"] = DynamoJSONParser  # moto's responses read this dict at every request


def _uninstall_parser() -> None:
    moto_parse.PROTOCOL_PARSERS["json"] = _installed.pop("parser")


def _install_serializer() -> None:
    specific = moto_serialize.SERVICE_SPECIFIC_SERIALIZERS
    _installed["serializer"] = specific.get("dynamodb")
    specific["dynamodb"] = {**(specific.get("dynamodb") or {}), "json": DynamoJSONSerializer}


def _uninstall_serializer() -> None:
    previous = _installed.pop("serializer", None)
    if previous is None:
        moto_serialize.SERVICE_SPECIFIC_SERIALIZERS.pop("dynamodb", None)
    else:
        moto_serialize.SERVICE_SPECIFIC_SERIALIZERS["dynamodb"] = previous


# ------------------------------------------------------------------ ASL programs

PARSE_TREES_KEPT = 64
_trees: OrderedDict[str, tuple[Any, Any]] = OrderedDict()  # definition -> (program, parse tree)
_trees_lock = threading.Lock()


def _parse_keeping_trees(original: Callable[[str], tuple[Any, Any]]) -> Callable[[str], tuple[Any, Any]]:
    """moto's ``AmazonStateLanguageParser.parse``, once per definition: the program (the evaluation components the
    preprocessor builds from the parse tree) and the tree are kept and shared by every execution of the definition.

    That is safe because the components hold no execution's state: everything an execution changes lives in its
    own ``Environment`` (its stack, its heap, keyed by a component's ``heap_key``: a Retry's attempt count, a
    Map's progress; its context object, its event history); the components' attributes are set while they are
    built (``__init__``, ``from_state_props``) and only read afterwards (LocalStack's interpreter, moto's source,
    is built that way). ``tests/integration/test_moto_speed.py`` runs executions of one program side by side."""

    def parse(definition: str) -> tuple[Any, Any]:
        with _trees_lock:
            kept = _trees.get(definition)
            if kept is not None:
                _trees.move_to_end(definition)
                return kept
        kept = original(definition)  # a syntax error raises here, as before, and is not kept
        with _trees_lock:
            _trees[definition] = kept
            while len(_trees) > PARSE_TREES_KEPT:
                _trees.popitem(last=False)
        return kept

    return parse


def _install_parse_cache() -> None:
    parser_class = asl_parser.AmazonStateLanguageParser
    _installed["parse"] = parser_class.__dict__["parse"]
    setattr(parser_class, "parse", staticmethod(_parse_keeping_trees(_installed["parse"].__func__)))  # noqa: B010


def _uninstall_parse_cache() -> None:
    setattr(asl_parser.AmazonStateLanguageParser, "parse", _installed.pop("parse"))  # noqa: B010
    with _trees_lock:
        _trees.clear()


# ------------------------------------------------------------------ Step Functions' AWS clients

_clients: dict[tuple[Any, ...], Any] = {}
_clients_lock = threading.Lock()


def _shared_clients(original: Callable[..., Any]) -> Callable[..., Any]:
    def client_for(region: str, service: str, state_credentials: Any = None) -> Any:
        # what moto's own function reads to pick the endpoint (state_credentials it ignores)
        key = (region, service, botocore_stubber.enabled, moto_server_port())
        with _clients_lock:
            found = _clients.get(key)
            if found is None:
                found = _clients[key] = original(region, service, state_credentials)
            return found

    client_for.__doc__ = "moto's boto_client_for, one client per region, service and endpoint (devstack)"
    return client_for


def _install_shared_clients() -> None:
    original = boto_client.boto_client_for
    _installed["boto_client_for"] = original
    shared = _installed["shared_client_for"] = _shared_clients(original)
    for module in list(sys.modules.values()):
        if getattr(module, "__name__", "").startswith("moto.stepfunctions.") and (
            getattr(module, "boto_client_for", None) is original
        ):
            module.boto_client_for = shared  # type: ignore[attr-defined]


def _uninstall_shared_clients() -> None:
    original, shared = _installed.pop("boto_client_for"), _installed.pop("shared_client_for")
    for module in list(sys.modules.values()):
        if getattr(module, "boto_client_for", None) is shared:
            module.boto_client_for = original  # type: ignore[attr-defined]
    with _clients_lock:
        _clients.clear()


# ------------------------------------------------------------------ per-request lookups that never change


_ASL_JSONPATH_MODULES: tuple[Any, ...] = (asl_json_path, asl_result_path)
"""moto's ASL modules that call ``jsonpath_ng``'s ``parse`` (a PLY parser run) for each path of each state they
evaluate: ``ResultPath`` and ``extract_json`` (InputPath, OutputPath, Parameters' ``.$`` fields). A parsed path is
only read (``find``, ``update_or_create`` change the data, not the path), so one is shared by every execution."""


def _install_static_lookups() -> None:
    import jsonpath_ng.ext
    from moto import backends
    from moto.core import responses

    modules = tuple(backends.list_of_moto_modules())
    _installed["list_of_moto_modules"] = backends.list_of_moto_modules
    setattr(backends, "list_of_moto_modules", lambda: modules)  # noqa: B010 - werkzeug_app reads it from the module
    method_names = getattr(responses, "method_names_from_class")  # noqa: B009 - imported there by name
    _installed["method_names_from_class"] = method_names
    setattr(responses, "method_names_from_class", functools.lru_cache(maxsize=256)(method_names))  # noqa: B010
    parse = getattr(jsonpath_ng.ext, "parse")  # noqa: B009 - moto.events imports it from there at each call
    _installed["jsonpath_parse"] = parse
    setattr(jsonpath_ng.ext, "parse", functools.lru_cache(maxsize=256)(parse))  # noqa: B010
    for module in _ASL_JSONPATH_MODULES:  # the ASL interpreter's paths: imported by name, parsed at every state
        _installed[f"{module.__name__}.parse"] = module.parse
        module.parse = functools.lru_cache(maxsize=256)(module.parse)


def _uninstall_static_lookups() -> None:
    import jsonpath_ng.ext
    from moto import backends
    from moto.core import responses

    setattr(backends, "list_of_moto_modules", _installed.pop("list_of_moto_modules"))  # noqa: B010
    setattr(responses, "method_names_from_class", _installed.pop("method_names_from_class"))  # noqa: B010
    setattr(jsonpath_ng.ext, "parse", _installed.pop("jsonpath_parse"))  # noqa: B010
    for module in _ASL_JSONPATH_MODULES:
        module.parse = _installed.pop(f"{module.__name__}.parse")


# ------------------------------------------------------------------ DynamoDB update expressions

UPDATE_EXPRESSIONS_KEPT = 512


_processors: dict[type, dict[type, Callable[[Any, Any], Any]]] = {}
"""A traverser class's node-kind -> processor function map: the same for every instance of its class (each moto
traverser's ``_processing_map`` is a dict literal of its own methods)."""


def _processing_map(self: Any) -> dict[type, Callable[[Any, Any], Any]]:
    """The traverser's node-kind → processor map, built once per traverser class (moto builds the dict again twice
    for every node it visits: once to ask whether the node's kind is processed, once to find its processor). The map
    holds the processors' functions, not methods bound to one traverser: a traverser that kept its own bound methods
    would be a reference cycle, left for the collector after each validation."""
    cls = type(self)
    found = _processors.get(cls)
    if found is None:
        found = {kind: method.__func__ for kind, method in self._processing_map().items()}
        _processors[cls] = found
    return found


def _nodes_to_be_processed(self: Any) -> tuple[type, ...]:
    """moto's ``DepthFirstTraverser.nodes_to_be_processed``, from the map built once."""
    return tuple(_processing_map(self))


_kinds: dict[tuple[type, type], type | None] = {}
"""(traverser class, node class) -> the first kind of the traverser's map the node is, or None."""


def _kind_of(self: Any, node: Any) -> type | None:
    """The kind of ``_processing_map(self)`` that processes ``node`` (moto asks ``isinstance`` of each kind in turn,
    for each node of each traversal, and the kinds are ABCs). For a node's class the answer never changes, so it is
    found once per class pair."""
    key = (type(self), type(node))
    try:
        return _kinds[key]
    except KeyError:
        found = next((kind for kind in _processing_map(self) if isinstance(node, kind)), None)
        _kinds[key] = found
        return found


def _process(self: Any, node: Any) -> Any:
    """moto's ``DepthFirstTraverser.process``, from the map built once (the first kind the node is wins, as there)."""
    kind = _kind_of(self, node)
    return None if kind is None else _processing_map(self)[kind](self, node)


def _traverse(self: Any, node: Any, child_id: int = -1) -> Any:
    """moto's ``DepthFirstTraverser.traverse_node_recursively``: depth first, each processed node put in its parent's
    place. The parent is carried down the walk rather than read from each node (a tree copied for a validation links
    no node to its parent, :func:`_copy_node`), and whether a value is a node, and which kind processes it, is asked
    once per class (:func:`_a_node`, :func:`_kind_of`)."""
    return _walk(self, node, getattr(node, "parent", None), child_id)


def _walk(self: Any, node: Any, parent: Any, child_id: int) -> Any:
    if not _a_node(node):
        return node
    if node.children is not None:
        for i, child in enumerate(node.children):
            self.pre_processing_of_child(node, i)
            _walk(self, child, node, i)
    if _kind_of(self, node) is not None:
        node = self.process(node)
        if parent is not None:
            parent.children[child_id] = node
    return node


def _update_expression_classes() -> tuple[Any, Any]:
    """moto's ``DepthFirstTraverser`` and ``UpdateExpressionParser`` (untyped modules: read by name)."""
    from moto.dynamodb.parsing import ast_nodes, expressions

    return getattr(ast_nodes, "DepthFirstTraverser"), getattr(expressions, "UpdateExpressionParser")  # noqa: B009


def _copy_tree(value: Any, memo: dict[int, Any] | None = None) -> Any:
    """``copy.deepcopy`` as moto's update-expression ``Validator`` uses it on the syntax tree, done for what a tree
    is: each node's ``type`` and ``children`` (nodes copied the same way, anything else by ``copy.deepcopy``), and
    no ``parent``: moto reads a node's parent only in its traversals, which carry it instead (:func:`_walk`), so a
    copy holds no reference cycle and is freed as soon as its update is done (with the links, each validation left
    its copy to the collector). A node shared in two places stays one copy; a node with a parent outside the copy,
    or anything that is not a node, is copied by ``copy.deepcopy`` itself (moto's generic copy walked every node's
    ``__dict__`` through the memo and reduce protocol: 5% of the stack's CPU under load)."""
    if not _a_node(value) or getattr(value, "parent", None) is not None:
        return copy.deepcopy(value, memo)
    return _copy_node(value, {})


def _copy_node(node: Any, copies: dict[int, Any]) -> Any:
    found = copies.get(id(node))
    if found is not None:
        return found
    copied: Any = object.__new__(type(node))
    copies[id(node)] = copied
    copied.__dict__.update(node.__dict__)
    copied.parent = None  # the walk carries each node's parent (_walk): no node of a copy points back up
    if node.children is not None:
        copied.children = [
            _copy_node(child, copies) if _a_node(child) else copy.deepcopy(child) for child in node.children
        ]
    return copied


_answers: dict[tuple[type, Any], bool] = {}


def _is_a(value: Any, kinds: Any) -> bool:
    """``isinstance(value, kinds)``, answered once per class of ``value``: moto's update-expression classes are ABCs,
    and ``ABCMeta.__instancecheck__`` for every child of every copy and traversal was 5% of the stack's process
    under load. The answer for a class never changes (nothing registers with these ABCs)."""
    key = (type(value), kinds)
    found = _answers.get(key)
    if found is None:
        found = _answers[key] = isinstance(value, kinds)
    return found


def _a_node(value: Any) -> bool:
    """``isinstance(value, Node)`` for moto's update-expression ``Node``."""
    return _is_a(value, _update_expression_node())


def _resolving_pre_processing_of_child(self: Any, parent_node: Any, child_id: int) -> None:
    """moto's ``ExpressionAttributeResolvingProcessor.pre_processing_of_child`` (a path's value is resolved, the path
    it is set on is not), asking which action the parent is once per class (:func:`_is_a`)."""
    if _is_a(parent_node, _actions()):
        self.resolving = child_id != 0


@functools.cache
def _actions() -> tuple[type, ...]:
    """The actions ``ExpressionAttributeResolvingProcessor`` resolves the values of (its own tuple)."""
    from moto.dynamodb.parsing import ast_nodes

    actions = (
        "UpdateExpressionSetAction",
        "UpdateExpressionRemoveAction",
        "UpdateExpressionDeleteAction",
        "UpdateExpressionAddAction",
    )
    return tuple(getattr(ast_nodes, name) for name in actions)


@functools.cache
def _update_expression_node() -> type:
    from moto.dynamodb.parsing import ast_nodes

    node: type = getattr(ast_nodes, "Node")  # noqa: B009 - untyped module
    return node


STRUCTURE_CHECKS = ("ActionCountValidator", "OverlappingPathsValidator", "UpdateHashRangeKeyValidator")
"""moto's update-expression processors that read only the expression's tree, its attribute names and the table's key
attributes, change nothing and raise when the expression is not allowed: one clause of each kind, no two actions on
overlapping paths, no key attribute updated. They come first in ``UpdateExpressionValidator.get_ast_processors``."""

_structure_passed: weakref.WeakKeyDictionary[Any, set[tuple[Any, ...]]] = weakref.WeakKeyDictionary()
_structure_lock = threading.Lock()


def _validator_init(self: Any, expression: Any, *args: Any, **kwargs: Any) -> None:
    _installed["Validator.__init__"](self, expression, *args, **kwargs)
    self._kept_tree = expression  # the tree kept for its text (it is deep-copied into ``node_to_validate``)


def _structure_key(self: Any) -> tuple[Any, ...]:
    names = self.expression_attribute_names or {}
    return tuple(sorted(names.items())), tuple(self.table.table_key_attrs)


def _validate_update(self: Any) -> Any:
    """moto's ``Validator.validate`` for an update expression, with the checks of its structure (``STRUCTURE_CHECKS``)
    run once per kept tree, attribute names and table keys: they passed for this tree with these names before, so
    they pass again (a tree that failed them is checked, and refused, every time). Under load they were half of the
    validation's cost: ten walks of the tree for each Update."""
    tree, key = self._kept_tree, _structure_key(self)
    with _structure_lock:
        passed = key in _structure_passed.get(tree, ())
    node = self.node_to_validate
    for processor in self.processors:
        if passed and type(processor).__name__ in STRUCTURE_CHECKS:
            continue
        node = processor.traverse(node)
    if not passed:
        with _structure_lock:
            _structure_passed.setdefault(tree, set()).add(key)
    return node


def _install_update_expressions() -> None:
    """An update expression's syntax tree is parsed once per expression text (moto tokenizes and parses it again for
    each UpdateItem and each Update of a transaction, in its handler and again in its backend): every use reads the
    tree (``find_clauses``) or validates a deep copy of it (``Validator.__init__``), so one tree serves all. A text
    that does not parse raises each time, as before (``lru_cache`` keeps no exceptions). The checks of a tree's
    structure run once per tree, names and table keys (:func:`_validate_update`)."""
    traverser, parser = _update_expression_classes()

    _installed["UpdateExpressionParser.make"] = parser.__dict__["make"]
    make: Any = functools.lru_cache(maxsize=UPDATE_EXPRESSIONS_KEPT)(_installed["UpdateExpressionParser.make"].__func__)
    setattr(parser, "make", classmethod(make))  # noqa: B010
    for name, replacement in (
        ("nodes_to_be_processed", _nodes_to_be_processed),
        ("process", _process),
        ("traverse_node_recursively", _traverse),
    ):
        _installed[f"DepthFirstTraverser.{name}"] = traverser.__dict__[name]
        setattr(traverser, name, replacement)
    from moto.dynamodb.parsing import validators

    _installed["validators.deepcopy"] = getattr(validators, "deepcopy")  # noqa: B009 - imported there by name
    setattr(validators, "deepcopy", _copy_tree)  # noqa: B010
    update_validator = getattr(validators, "UpdateExpressionValidator")  # noqa: B009 - untyped module
    _installed["Validator.__init__"] = update_validator.__init__
    setattr(update_validator, "__init__", _validator_init)  # noqa: B010
    setattr(update_validator, "validate", _validate_update)  # noqa: B010
    resolving = getattr(validators, "ExpressionAttributeResolvingProcessor")  # noqa: B009 - untyped module
    _installed["Resolving.pre_processing_of_child"] = resolving.__dict__["pre_processing_of_child"]
    setattr(resolving, "pre_processing_of_child", _resolving_pre_processing_of_child)  # noqa: B010


def _uninstall_update_expressions() -> None:
    traverser, parser = _update_expression_classes()

    setattr(parser, "make", _installed.pop("UpdateExpressionParser.make"))  # noqa: B010
    for name in ("nodes_to_be_processed", "process", "traverse_node_recursively"):
        setattr(traverser, name, _installed.pop(f"DepthFirstTraverser.{name}"))
    from moto.dynamodb.parsing import validators

    setattr(validators, "deepcopy", _installed.pop("validators.deepcopy"))  # noqa: B010
    resolving = getattr(validators, "ExpressionAttributeResolvingProcessor")  # noqa: B009 - untyped module
    setattr(resolving, "pre_processing_of_child", _installed.pop("Resolving.pre_processing_of_child"))  # noqa: B010
    update_validator = getattr(validators, "UpdateExpressionValidator")  # noqa: B009 - untyped module
    _installed.pop("Validator.__init__")
    for name in ("__init__", "validate"):  # back to what it inherits from moto's Validator
        if name in update_validator.__dict__:
            delattr(update_validator, name)


# ------------------------------------------------------------------ DynamoDB condition expressions

CONDITIONS_KEPT = 512

_conditions: OrderedDict[tuple[str, tuple[tuple[str, str], ...]], tuple[Any, list[str], list[str]]] = OrderedDict()
_conditions_lock = threading.Lock()


def _condition_structure(parser: Any) -> Any:
    """moto's ``ConditionExpressionParser.parse`` up to its syntax tree (moto 5.2: lex, paths, functions,
    comparators, IN, BETWEEN, parentheses and booleans, then the redundant-parentheses check)."""
    nodes = parser._lex_condition_expression()
    for step in (
        parser._parse_paths,
        parser._apply_functions,
        parser._apply_comparator,
        parser._apply_in,
        parser._apply_between,
        parser._apply_parens_and_booleans,
    ):
        nodes = step(nodes)
    node = nodes[0]
    parser._assert_no_redundant_parentheses(node)
    return node


def _bind_values(node: Any, values: Any, value_kind: str) -> Any:
    """The tree with each ``:value`` operand holding this request's value (``values[name]``: a missing one raises
    ``KeyError`` and no values at all ``TypeError``, as moto's lookup does while it parses)."""
    if node.kind == value_kind:
        return node._replace(value=values[node.text])
    if not node.children:
        return node
    return node._replace(children=[_bind_values(child, values, value_kind) for child in node.children])


def _parse_condition(self: Any) -> Any:
    """``ConditionExpressionParser.parse`` with the syntax tree kept per (expression text, attribute names): moto lexes
    and parses every condition again for each request, twice (its handler validates the names, its backend
    evaluates), a tenth of the stack's CPU under load. The tree depends only on the text and the names; the
    ``:values`` are bound into a copy of it per request and the ``Op`` built from that as moto builds it. A text
    that does not parse raises each time, as before (nothing is kept for it)."""
    expression = self.condition_expression
    if not expression:
        return _installed["ConditionExpressionParser.parse"](self)
    names = self.expression_attribute_names
    key = (expression, tuple(sorted(names.items())) if names else ())
    with _conditions_lock:
        kept = _conditions.get(key)
        if kept is not None:
            _conditions.move_to_end(key)
    if kept is None:
        node = _condition_structure(self)
        kept = (node, self._find_literals(node), self._find_expr_attr_values(node))
        with _conditions_lock:
            _conditions[key] = kept
            while len(_conditions) > CONDITIONS_KEPT:
                _conditions.popitem(last=False)
    else:
        node = _bind_values(kept[0], self.expression_attribute_values, self.Kind.EXPRESSION_ATTRIBUTE_VALUE)
    self.expr_attr_names_found.extend(kept[1])
    self.expr_attr_values_found.extend(kept[2])
    return self._make_op_condition(node)


def _install_conditions() -> None:
    from moto.dynamodb.comparisons import ConditionExpressionParser

    _installed["ConditionExpressionParser.parse"] = ConditionExpressionParser.__dict__["parse"]
    setattr(ConditionExpressionParser, "parse", _parse_condition)  # noqa: B010


def _uninstall_conditions() -> None:
    from moto.dynamodb.comparisons import ConditionExpressionParser

    setattr(ConditionExpressionParser, "parse", _installed.pop("ConditionExpressionParser.parse"))  # noqa: B010
    with _conditions_lock:
        _conditions.clear()


# ------------------------------------------------------------------ Query: the items that can match, not the table

_query_candidates = threading.local()


def _item_order(item: Any) -> Any:
    """The order moto's ``Table.all_items`` gives (its sort key)."""
    return (item.hash_key, item.range_key) if item.range_key else item.hash_key


def _candidates(table: Any, hash_key: Any, index_name: str | None, conditions: Any) -> list[Any] | None:
    """The items of ``table`` a query can match, in ``all_items``' order: those under the hash key (the table's
    own key), or those whose index hash attributes equal the query's (an index; a string compared as moto compares
    it, any other type kept if the attribute is there). None: let moto look at every item."""
    if not index_name:
        if hash_key is None:
            return None
        found = table.items.get(hash_key)
        if found is None:
            return []
        return sorted(found.values(), key=_item_order) if table.range_key_attr else [found]
    if not conditions:
        return None
    tests = [(name, expected.type, expected.value) for name, expected in conditions]
    kept = []
    for stored in table.items.values():
        for item in stored.values() if table.range_key_attr else (stored,):
            attrs = item.attrs
            for name, kind, value in tests:
                found_value = attrs.get(name)
                if found_value is None or (kind == "S" and (found_value.type != "S" or found_value.value != value)):
                    break
            else:
                kept.append(item)
    return sorted(kept, key=_item_order)


def _query(self: Any, hash_key: Any, *args: Any, **kwargs: Any) -> Any:
    """moto's ``Table.query``, looking only at the items that can match (:func:`_candidates`): moto sorts every item
    of the table for each query before it looks for matches, so a query cost grew with the table (a sweep's 32
    queries of the due index took 12 s once the benchmark's soak had stored 9,000 items, under the lock that makes
    DynamoDB's operations atomic, and stalled every operation meanwhile). moto's own checks, sort, paging and
    filters then run on those items, so the answer is moto's."""
    original = _installed["Table.query"]
    given = _installed["Table.query signature"].bind(self, hash_key, *args, **kwargs).arguments
    candidates = _candidates(self, hash_key, given.get("index_name"), given.get("hash_key_conditions"))
    if candidates is None:
        return original(self, hash_key, *args, **kwargs)
    _query_candidates.table, _query_candidates.items = self, candidates
    try:
        return original(self, hash_key, *args, **kwargs)
    finally:
        _query_candidates.table = _query_candidates.items = None


def _all_items(self: Any) -> Any:
    if getattr(_query_candidates, "table", None) is self:
        return _query_candidates.items
    return _installed["Table.all_items"](self)


def _install_query() -> None:
    from moto.dynamodb.models.table import Table

    _installed["Table.query"] = Table.__dict__["query"]
    _installed["Table.query signature"] = inspect.signature(Table.__dict__["query"])
    _installed["Table.all_items"] = Table.__dict__["all_items"]
    setattr(Table, "query", _query)  # noqa: B010
    setattr(Table, "all_items", _all_items)  # noqa: B010


def _uninstall_query() -> None:
    from moto.dynamodb.models.table import Table

    setattr(Table, "query", _installed.pop("Table.query"))  # noqa: B010
    _installed.pop("Table.query signature")
    setattr(Table, "all_items", _installed.pop("Table.all_items"))  # noqa: B010


# ------------------------------------------------------------------ install


def install() -> None:
    """Apply them all (idempotent)."""
    if _installed:
        return
    _install_serializer()
    _install_parser()
    _install_parse_cache()
    _install_shared_clients()
    _install_static_lookups()
    _install_update_expressions()
    _install_conditions()
    _install_query()


def uninstall() -> None:
    if not _installed:
        return
    _uninstall_query()
    _uninstall_conditions()
    _uninstall_update_expressions()
    _uninstall_static_lookups()
    _uninstall_shared_clients()
    _uninstall_parse_cache()
    _uninstall_parser()
    _uninstall_serializer()
