"""The layering rule (docs/architecture.md): only the data access layer, ``shared/packyard/store/``, touches boto3 or
botocore and knows how items are keyed. The domain, the handlers and the maintenance passes ask the store for typed
values; none imports an AWS SDK, reads ``pk``/``sk`` or spells a key prefix such as ``TENANT#``."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LAYER = ROOT / "shared" / "packyard"
STORE = LAYER / "store"
SDKS = ("boto3", "botocore", "mypy_boto3", "aiobotocore")
# an item key's prefix: upper-case letters and a '#' (TENANT#, #WS#, UPLOAD#, VERSION#, COUNT#TASK#, ...)
KEY_PREFIX = re.compile(r"(?<![A-Za-z0-9_])[A-Z][A-Z_]+#")
KEY_ATTRIBUTES = {"pk", "sk"}


def _outside_the_store() -> list[Path]:
    files = [p for p in LAYER.rglob("*.py") if STORE not in p.parents]
    files += sorted((ROOT / "functions").rglob("*.py"))
    return sorted(p for p in files if "__pycache__" not in p.parts)


def _docstrings(tree: ast.AST) -> set[int]:
    """ids of the string constants that are docstrings (documentation may describe keys; code may not)."""
    found: set[int] = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr):
            value = body[0].value
            if isinstance(value, ast.Constant) and isinstance(value.value, str):
                found.add(id(value))
    return found


def violations(source: str, name: str) -> Iterator[str]:
    tree = ast.parse(source, name)
    docstrings = _docstrings(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            modules = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            modules = [node.module]
        else:
            modules = []
        for module in modules:
            if module.split(".")[0] in SDKS:
                yield f"{name}:{node.lineno} imports {module}"
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
            if KEY_PREFIX.search(node.value):
                yield f"{name}:{node.lineno} spells a key prefix: {node.value!r}"
            if node.value in KEY_ATTRIBUTES:
                yield f"{name}:{node.lineno} reads the key attribute {node.value!r}"


def test_only_the_store_imports_the_aws_sdk_or_parses_item_keys() -> None:
    found = [
        v for path in _outside_the_store() for v in violations(path.read_text("utf-8"), str(path.relative_to(ROOT)))
    ]
    assert found == [], "\n".join(found)


@pytest.mark.parametrize(
    "source",
    [
        "import boto3",
        "import botocore.exceptions as e",
        "from botocore.exceptions import ClientError",
        "from boto3.dynamodb.types import TypeDeserializer",
        "tenant = item['pk'].removeprefix('TENANT#')",
        "sk = f'VERSION#{version}'",
        "if item['sk'] == 'BLOB': pass",
        "pk = f'{prefix}#WS#{ws}'",
    ],
)
def test_the_rule_catches_each_kind_of_crossing(source: str) -> None:
    assert list(violations(source, "example.py")), source


@pytest.mark.parametrize(
    "source",
    [
        '"""pk TENANT#<t>#UPLOAD#<id>: documentation may describe the keys."""',
        "def f():\n    '''reads VERSION# items through the store'''",
        "from packyard.store import catalog",
        "header = 'Idempotency-Key'",
        "line = 'see #42'",
    ],
)
def test_the_rule_leaves_documentation_and_ordinary_strings_alone(source: str) -> None:
    assert list(violations(source, "example.py")) == [], source
