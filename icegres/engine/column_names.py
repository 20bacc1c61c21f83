"""The names PostgreSQL gives result columns: from the statement's select list where it names
them, else derived from DataFusion's own column names (`count(*)` -> `count`)."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

import pyarrow as pa

if TYPE_CHECKING:
    from icegres.sql.statement import Statement

_FUNC_NAME = re.compile(r"^(?:[A-Za-z_][\w]*\.)*([A-Za-z_][\w]*)\(")
# DataFusion names unaliased literals after their type ("Int64(1)", "Utf8(\"a\")").
_LITERAL_TYPES = {
    "Int8", "Int16", "Int32", "Int64", "UInt8", "UInt16", "UInt32", "UInt64", "Float16", "Float32",
    "Float64", "Utf8", "Utf8View", "LargeUtf8", "Boolean", "Decimal128", "Date32", "Binary",
    "TimestampMicrosecond", "TimestampNanosecond", "IntervalMonthDayNano", "List", "NULL",
}


def column_name(name: str) -> str:
    """The name PostgreSQL would give an unaliased output column that DataFusion named `name`.

    `count(*)` -> `count`, `Int64(1)` -> `?column?`; plain column names pass through.
    """
    if re.fullmatch(r"[A-Za-z_][\w$]*", name) or not name:
        return name
    fm = _FUNC_NAME.match(name)
    if fm and fm.group(1) not in _LITERAL_TYPES and name.endswith(")") and _balanced_call(name):
        fn = fm.group(1)
        return "?column?" if fn.upper() in ("CAST", "TRY_CAST") else fn
    if re.fullmatch(r"[A-Za-z_][\w]*\.[A-Za-z_][\w.]*", name):
        return name.rsplit(".", 1)[1]
    if name == "NULL" or _FUNC_NAME.match(name) or " " in name:
        return "?column?"
    return name


def _balanced_call(name: str) -> bool:
    """True when the whole name is one call `f(...)`, not `f(a) + g(b)`."""
    depth = 0
    opened = False
    for i, ch in enumerate(name):
        if ch == "(":
            depth += 1
            opened = True
        elif ch == ")":
            depth -= 1
            if depth == 0 and opened and i != len(name) - 1:
                return False
    return True



def select_list_names(stmt: Statement) -> list[str] | None:
    """PostgreSQL's names for the statement's first top-level select list (None: none parsed).

    Parsed from the text alone, so it may be cached per literal shape; `postgres_names` lines
    it up with DataFusion's schema, whose own names (`Int64(5)`) do carry literal values.
    """
    from icegres.engine.rewrite import pg_output_names

    try:
        selects = pg_output_names(stmt.tree)
    except Exception:
        return None
    return selects[0] if selects else None


def postgres_names(select_names: list[str] | None, schema: pa.Schema) -> list[str]:
    """PostgreSQL's names for the result columns, from the statement's own select list."""
    fallback = [column_name(f.name) for f in schema]
    if select_names is None or len(select_names) != len(schema):
        return fallback  # `*` expansion or a shape we cannot line up: keep DataFusion's names
    return [pg if pg and pg != "*" else fb for pg, fb in zip(select_names, fallback, strict=True)]


PLAIN_NAME = re.compile(r"[a-z_][a-z0-9_$]*")  # a name DataFusion gives as PostgreSQL would


def tree_names(tree: Any, schema: pa.Schema) -> list[str]:
    """PostgreSQL's names for the columns of a query the engine built (`tree`), planned as
    `schema`."""
    from icegres.engine.rewrite import pg_output_names

    if all(PLAIN_NAME.fullmatch(f.name) for f in schema):
        return schema.names
    selects = pg_output_names(tree)
    return postgres_names(selects[0] if selects else None, schema)

