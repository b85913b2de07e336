"""Output formats, as the ``aws`` CLI has them: ``--output table|json|tsv`` and ``--query`` (JMESPath) on every
command that prints a result.

* ``json``: the API's JSON, after ``--query`` (times are RFC 3339 UTC strings, as the API sends them).
* ``table`` (the default): for people. Key columns (names, versions, ids) are never cut or wrapped; other columns
  fold to the terminal's width; when stdout is not a terminal nothing is cut at all. Times are RFC 3339 (UTC).
* ``tsv``: one line per item, tab-separated, no header, nothing shortened, times RFC 3339: for ``cut``, ``awk``,
  ``while read``. The columns are the table's (``packyard COMMAND --help`` lists them).

With ``--query`` the table and tsv show the query's result: a list of objects as rows (columns: their keys), a list
of scalars one per line, an object as rows of key and value.
"""

from __future__ import annotations

import datetime
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

FORMATS = ("table", "json", "tsv")


class QueryError(ValueError):
    """A JMESPath expression that does not parse."""


def compile_query(expression: str) -> Any:
    import jmespath
    from jmespath.exceptions import JMESPathError

    try:
        return jmespath.compile(expression)
    except JMESPathError as exc:
        raise QueryError(f"--query {expression!r} is not a JMESPath expression: {exc}") from None


def apply_query(data: Any, expression: str | None) -> Any:
    if not expression:
        return data
    return compile_query(expression).search(data)


# ------------------------------------------------------------------ values


def rfc3339(value: Any) -> str:
    """A time as ``2026-11-30T14:25:03Z``: the API sends RFC 3339 strings (shown in UTC; one that does not parse is
    shown as sent); epoch seconds (what the API sent before 2026-11-30) are converted. '' for anything else."""
    if isinstance(value, str):
        try:
            parsed = datetime.datetime.fromisoformat(value.replace("z", "Z").replace("t", "T"))
        except ValueError:
            return value
        if parsed.tzinfo is None:
            return value
        moment = parsed.astimezone(datetime.UTC)
    elif isinstance(value, bool) or not isinstance(value, int | float):
        return ""
    else:
        moment = datetime.datetime.fromtimestamp(value, tz=datetime.UTC)
    return (
        moment.strftime("%Y-%m-%dT%H:%M:%SZ")
        if moment.microsecond == 0
        else moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")
    )


def cell(value: Any) -> str:
    """A scalar as text (JSON for lists and objects, '' for null); tabs and newlines become spaces for tsv."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict | list):
        return json.dumps(value, separators=(",", ":"), sort_keys=False)
    return str(value)


def _tsv_cell(value: Any) -> str:
    return cell(value).replace("\t", " ").replace("\r", " ").replace("\n", " ")


# ------------------------------------------------------------------ columns


@dataclass(frozen=True)
class Column:
    """One column of a command's table and tsv output: a header, how to read it from an item, and whether it is a
    key column (never cut)."""

    header: str
    get: Callable[[dict[str, Any]], Any]
    key: bool = False
    time: bool = False
    brief: Callable[[Any], str] | None = None  # how the table shows it (tsv always has the full value)

    def text(self, item: dict[str, Any], *, brief: bool = False) -> str:
        value = self.get(item)
        if self.time:
            return rfc3339(value)
        if brief and self.brief is not None:
            return self.brief(value)
        return cell(value)


def dig(*path: str) -> Callable[[dict[str, Any]], Any]:
    """An item's value at ``path`` (None if any step is missing)."""

    def get(item: dict[str, Any]) -> Any:
        value: Any = item
        for step in path:
            if not isinstance(value, dict):
                return None
            value = value.get(step)
        return value

    return get


def tsv_lines(rows: Sequence[Sequence[str]]) -> list[str]:
    return ["\t".join(_tsv_cell(c) for c in row) for row in rows]


def rows_of(items: Sequence[dict[str, Any]], columns: Sequence[Column], *, brief: bool = False) -> list[list[str]]:
    return [[column.text(item, brief=brief) for column in columns] for item in items]


def short(width: int = 12) -> Callable[[Any], str]:
    """A digest cut to ``width`` characters for tables."""

    def cut(value: Any) -> str:
        text = cell(value)
        return text[:width] + "…" if len(text) > width else text

    return cut


def make_table(columns: Sequence[Column] | Sequence[str], rows: Sequence[Sequence[str]], *, key: int = 1) -> Any:
    """A rich table; key columns (or, for plain headers, the first ``key`` ones) keep their full width."""
    from rich.table import Table

    table = Table(box=None, pad_edge=False, header_style="bold")
    needed = 0
    for index, column in enumerate(columns):
        header: str = column.header if isinstance(column, Column) else str(column)
        is_key = column.key if isinstance(column, Column) else index < key
        is_time = isinstance(column, Column) and column.time
        widths = [len(row[index]) for row in rows if index < len(row)]
        if is_key or is_time:
            width = max([len(header), *widths])
            table.add_column(header, no_wrap=True, min_width=width, overflow="ignore")
        else:
            width = min(max([len(w) for w in header.split()] + widths), 14)
            table.add_column(header, overflow="fold", min_width=width)
        needed += width + 2
    table.needed_width = needed  # type: ignore[attr-defined]  # the narrowest width that cuts no key column
    for row in rows:
        table.add_row(*row)
    return table


# ------------------------------------------------------------------ a query's result, in any format


def generic_rows(data: Any) -> tuple[list[str], list[list[str]]]:
    """Headers and rows for an arbitrary JSON value (the result of --query)."""
    if isinstance(data, list):
        if data and all(isinstance(d, dict) for d in data):
            headers: list[str] = []
            for item in data:
                headers.extend(k for k in item if k not in headers)
            return headers, [[cell(item.get(h)) for h in headers] for item in data]
        if data and all(isinstance(d, list) for d in data):
            width = max(len(d) for d in data)
            return [f"{i + 1}" for i in range(width)], [[cell(v) for v in d] for d in data]
        return ["value"], [[cell(d)] for d in data]
    if isinstance(data, dict):
        return ["key", "value"], [[str(k), cell(v)] for k, v in data.items()]
    return ["value"], [[cell(data)]] if data is not None else []


def generic_tsv(data: Any) -> list[str]:
    if isinstance(data, dict):
        return tsv_lines([[cell(v) for v in data.values()]])
    _, rows = generic_rows(data)
    return tsv_lines(rows)
