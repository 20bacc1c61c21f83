"""Parameter types for the extended protocol, read off DataFusion's logical plan.

DataFusion infers a placeholder's type from its context while planning (`id = $1` makes $1 an
Int64). Clients such as asyncpg and pg8000 encode parameters by the types the server describes,
so ParameterDescription must carry these rather than "unknown".
"""

from __future__ import annotations

import re
from collections import Counter
from typing import Any

import pyarrow as pa

_EXPR_TYPES = ("RawExpr", "Expr")
_CAST = re.compile(r"^(?:TRY_)?CAST\(\$(\d+) AS (.+)\)$")

# DataFusion's display names of Arrow types, for `$1::type` casts whose target it reports as text.
_DISPLAY_TYPES = {
    "Int16": pa.int16(), "Int32": pa.int32(), "Int64": pa.int64(), "Float32": pa.float32(),
    "Float64": pa.float64(), "Utf8": pa.string(), "Utf8View": pa.string(), "LargeUtf8": pa.string(),
    "Boolean": pa.bool_(), "Date32": pa.date32(), "Binary": pa.binary(), "Int8": pa.int8(),
    "UInt32": pa.uint32(), "UInt64": pa.uint64(),
}


_DECIMAL = re.compile(r"^Decimal(?:128|256)\((\d+),\s*(-?\d+)\)$")
_TIMESTAMP = re.compile(r'^Timestamp\((\w+)(?:,\s*"?([^")]+)"?)?\)$')


def display_type(name: str) -> pa.DataType | None:
    """Arrow type for DataFusion's display of a type (`List(Int64)`, `Decimal128(10, 2)`)."""
    name = name.strip()
    if name in _DISPLAY_TYPES:
        return _DISPLAY_TYPES[name]
    if name.startswith(("List(", "LargeList(")) and name.endswith(")"):
        inner = display_type(name[name.index("(") + 1 : -1])
        return pa.list_(inner) if inner is not None else None
    if name.startswith("Interval("):
        return pa.month_day_nano_interval()
    m = _DECIMAL.match(name)
    if m:
        return pa.decimal128(min(int(m.group(1)), 38), int(m.group(2)))
    m = _TIMESTAMP.match(name)
    if m:
        # Casting a parameter to timestamptz makes DataFusion display Timestamp(ns) with no zone
        # in some versions; the microsecond unit is what PostgreSQL clients send either way.
        return pa.timestamp("us", tz=m.group(2)) if m.group(2) else pa.timestamp("us")
    return None


def placeholder_types(df: Any) -> dict[int, pa.DataType]:
    """{1: int64, ...} for every placeholder whose type DataFusion could infer."""
    out: dict[int, pa.DataType] = {}
    _walk_plan(df.logical_plan(), out, depth=0)
    return out


def _walk_plan(plan: Any, out: dict[int, pa.DataType], depth: int) -> None:
    if depth > 200:
        return
    variant = plan.to_variant()
    for attr in dir(variant):
        if attr.startswith("_") or attr in ("input", "schema", "inputs"):
            continue
        try:
            value = getattr(variant, attr)()
        except Exception:
            continue
        for item in value if isinstance(value, list | tuple) else [value]:
            for expr in item if isinstance(item, tuple) else (item,):
                if type(expr).__name__ in _EXPR_TYPES:
                    _walk_expr(expr, out, depth + 1)
                elif type(expr).__name__ == "LogicalPlan":
                    _walk_plan(expr, out, depth + 1)
    for child in plan.inputs():
        _walk_plan(child, out, depth + 1)


# Expressions that hold no other: DataFusion gives a column or a literal as its own only operand,
# so walking into one would meet itself again until the depth limit (~2,000 visits, ~4 ms, for
# the eight columns of `select * from demo.trips where id = $1`).
_LEAVES = ("Column", "Literal")


def _walk_expr(expr: Any, out: dict[int, pa.DataType], depth: int) -> None:
    if depth > 200:
        return
    try:
        variant = expr.to_variant()
    except Exception:
        variant = None
    kind = type(variant).__name__
    if kind in _LEAVES:
        return
    if kind == "Placeholder":
        field = variant.field()
        if field is not None and field.type != pa.null():
            out.setdefault(int(variant.id().lstrip("$")), field.type)
        return
    if kind in ("Cast", "TryCast"):
        m = _CAST.match(expr.canonical_name())
        target = display_type(m.group(2)) if m else None
        if target is not None:
            out.setdefault(int(m.group(1)), target)
    children: list[Any] = []
    try:
        children = list(expr.rex_call_operands())
    except Exception:
        pass
    # The variant's accessors below give most of those operands again (a comparison's left and
    # right, an alias's expression): each is walked once, in the order first met.
    operands = Counter(child.canonical_name() for child in children)
    if variant is not None:
        for attr in ("expr", "left", "right", "low", "high", "list", "else_expr", "expression",
                     "args", "pattern", "subquery"):
            fn = getattr(variant, attr, None)
            if fn is None:
                continue
            try:
                value = fn()
            except Exception:
                continue
            for v in value if isinstance(value, list | tuple) else [value]:
                if type(v).__name__ in _EXPR_TYPES:
                    name = v.canonical_name()
                    if operands[name]:
                        operands[name] -= 1  # the same expression as one of its operands
                    else:
                        children.append(v)
                elif type(v).__name__ == "LogicalPlan":
                    _walk_plan(v, out, depth + 1)
                elif hasattr(v, "subquery"):
                    try:
                        _walk_plan(v.subquery(), out, depth + 1)
                    except Exception:
                        pass
    for child in children:
        _walk_expr(child, out, depth + 1)


# PostgreSQL spellings of the types a parameter is commonly cast to, by OID.
_SQL_TYPE_OIDS = {
    # Unquoted CHAR is character(1) (bpchar); only the quoted "char" is the one-byte type 18.
    "bool": 16, "boolean": 16, "bytea": 17, "char": 1042, '"char"': 18, "name": 19, "int8": 20,
    "bigint": 20, "int2": 21, "smallint": 21, "int4": 23, "int": 23, "integer": 23, "text": 25,
    "oid": 26, "json": 114, "float4": 700, "real": 700, "float8": 701, "double precision": 701,
    "bpchar": 1042, "character": 1042, "varchar": 1043, "character varying": 1043, "date": 1082,
    "time": 1083, "time without time zone": 1083, "timestamp": 1114,
    "timestamp without time zone": 1114, "timestamptz": 1184, "timestamp with time zone": 1184,
    "interval": 1186, "numeric": 1700, "decimal": 1700, "regclass": 2205, "regtype": 2206,
    "regproc": 24, "regnamespace": 4089, "uuid": 2950, "jsonb": 3802,
}
_PLACEHOLDER_CAST = re.compile(
    r"\$(\d+)\s*::\s*(\"char\"|(?:pg_catalog\.)?[a-z_][a-z0-9_]*(?:\s+(?:precision|varying|with(?:out)?\s+time\s+zone))?)"
    r"\s*(\([\d\s,]*\))?\s*(\[\])?",
    re.IGNORECASE,
)


def cast_type_oids(sql: str) -> dict[int, int]:
    """{n: oid} for every `$n::type` in the statement text, as PostgreSQL would describe $n.

    The cast names the type the client asked for (`$1::oid[]` is oid[] to asyncpg, which has no
    codec for int8[] and would otherwise introspect forever), even where icegres plans it as a
    wider Arrow type.
    """
    from icegres.pg.types import pg_type_by_oid

    out: dict[int, int] = {}
    for m in _PLACEHOLDER_CAST.finditer(sql):
        raw = m.group(2).removeprefix("pg_catalog.")
        name = raw if raw == '"char"' else " ".join(raw.lower().split())
        oid = _SQL_TYPE_OIDS.get(name)
        if oid is None:
            continue
        if m.group(4):
            base = pg_type_by_oid(oid)
            if base is None or not base.array_oid:
                continue
            oid = base.array_oid
        out.setdefault(int(m.group(1)), oid)
    return out
