"""A big VALUES list read by the lexer (sql/values_rows.py) that the recipe cannot take as it is,
made typed Arrow columns — not a parse of its text and a plan of every row.

The recipe (engine/insert_shape.py) takes constants that mean the same under any coercion to
their column. It refuses a list into a table with a CHECK constraint or row-level security to
evaluate or a column left to its DEFAULT, and rows holding `DEFAULT`, a cast with a modifier or to
another type, or a number its column rounds. Those lists were parsed whole into a tree and
planned as a VALUES of every row: 50,000 rows (1.6 MB) took 9-51 s and held another session's
`select 1` for 0.1-6 s (2026-12-07).

PostgreSQL assigns an INSERT's VALUES items one by one to their columns (transformInsertRow),
so a column is made as the planned VALUES types its items — strings text, integers bigint,
other numbers an exact decimal, booleans boolean — and assigned by the caller (`checks.conform`)
as those are. A column whose items are all cast to one type is that cast, computed by DataFusion
over the column as over each literal. A column whose every row has one expression (`now()`,
`gen_random_uuid()`, `upper('a')`: scripts' and ORMs' lists often do) is that expression
evaluated once per row in one query, as the planned VALUES evaluates it. A column of `DEFAULT`
only is left out, for `defaults.fill`. A column mixing strings, numbers and booleans has each kind assigned apart, as
PostgreSQL assigns each item (the planned VALUES unified them first: `('x'), (5)` into a text
column was 22P02). Rows of one expression differing in their constants (`'name ' || 1`,
`'name ' || 2`: sql/values_template.py) are that expression evaluated once over a column per
differing constant, where each stands under operators and functions that take any operand as
they take a literal (`_OPAQUE`); 50,000 such rows were 32 s parsed, the bystander's worst 1.8 s
(the collector's full collections over the tree), and are 2.3 s, 22 ms. Rows of different
expressions, `DEFAULT` beside values, a parameter the recipe does not take, a cast beside an
uncast value, a cast the rewrite reads only from a literal (bytea, uuid, arrays, the reg types)
go back to the parse: `table` answers None.
"""

from __future__ import annotations

import re
from decimal import Decimal
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
from sqlglot import exp

from icegres.engine.assign import assigned, check_assignable, is_untyped, write_schema
from icegres.engine.checked_arith import arithmetic_nodes, check_overflow
from icegres.engine.dml.target import collect
from icegres.engine.insert_shape import arrow_column, cast_type, plain_column
from icegres.pg.errors import (
    FEATURE_NOT_SUPPORTED,
    NUMERIC_VALUE_OUT_OF_RANGE,
    SYNTAX_ERROR,
    PgError,
)
from icegres.sql import values_template
from icegres.sql.parse import parse
from icegres.sql.values_rows import DEFAULT, Cast, ConstantRows, Expression

if TYPE_CHECKING:
    from icegres.engine.mounts import ReadPlan
    from icegres.engine.query import QueryContext

_T = exp.DataType.Type
# Casts DataFusion computes over a column as the statement's literal would be (the rewrite reads
# the others — bytea, uuid, arrays, reg types — from a literal's text only).
_COLUMN_CASTS = frozenset({_T.SMALLINT, _T.INT, _T.BIGINT, _T.DECIMAL, _T.DOUBLE, _T.FLOAT, _T.TEXT,
                           _T.VARCHAR, _T.CHAR, _T.BPCHAR, _T.DATE, _T.TIMESTAMP, _T.TIMESTAMPTZ,
                           _T.BOOLEAN, _T.TIME})
_INTEGER = re.compile(rb"[+-]?[0-9]+")
_INT64 = range(-(1 << 63), 1 << 63)
_DECIMAL_DIGITS_MAX = 38


def table(qctx: QueryContext, rows: ConstantRows, columns: list[str], plan: ReadPlan,
          params: dict[str, Any] | None) -> pa.Table | None:
    """The rows as a table of the INSERT's columns (a column of DEFAULT only left out, and so no
    column at all where every one is), each typed as the planned VALUES types it, not yet
    assigned; None where that takes the parse (module doc)."""
    if rows.width != len(columns):
        return None  # (the parse reports PostgreSQL's 42601)
    fields = {f.name: f for f in write_schema(plan)}
    types = {name: f.type for name, f in fields.items()}
    names: list[str] = []
    arrays: list[pa.Array | pa.ChunkedArray] = []
    casts: dict[int, exp.DataType] = {}
    for name, values in zip(columns, rows.columns, strict=True):
        defaults = sum(v is DEFAULT for v in values)
        if defaults == len(values):
            continue
        if defaults:
            return None
        array = plain_column(values, types[name], params)
        if array is None and isinstance(values[0], Expression):
            if len(values) < 2:
                return None  # (one row, where a set-returning function may make several: the parse)
            if all(v == values[0] for v in values):
                array, typed = _computed(qctx, values[0], len(values))
            elif all(isinstance(v, Expression) for v in values) \
                    and (shaped := _templated(qctx, values_template.template(values), len(values))) is not None:
                array, typed = shaped, True
            else:
                return None
            if typed:
                check_assignable(name, array.type, types[name])
        elif array is None:
            made = _typed(values)
            if made is None:
                array = _mixed(values, fields[name], qctx.env.time_zone)
                if array is None:
                    return None
            else:
                array, to = made
                if to is not None:
                    casts[len(arrays)] = to
        names.append(name)
        arrays.append(array)
    if casts:
        cast = _cast(qctx, [arrays[i] for i in casts], list(casts.values()))
        for i, computed in zip(casts, cast.columns, strict=True):
            check_assignable(names[i], computed.type, types[names[i]])
            arrays[i] = computed
    return pa.Table.from_arrays(arrays, names=names)  # (no column: `defaults.fill` is told the count)


_ITEM_PREFIX = "SELECT "  # (a node's meta start counts from the start of this made-up statement)


def _item(expression: str) -> exp.Expression:
    """A VALUES item's text as the expression it is (the parse's shared tree: copy to change),
    or PgError: 42601 for one that is not exactly one expression (`1 AS x`, `1 WHERE …`)."""
    try:
        item = parse(f"{_ITEM_PREFIX}{expression}")
    except PgError as err:
        err.position = None  # (it would count within the made-up SELECT)
        raise
    if not isinstance(item, exp.Select) or len(item.expressions) != 1 or isinstance(item.expressions[0], exp.Alias) \
            or any(v for k, v in item.args.items() if k != "expressions"):
        raise PgError(SYNTAX_ERROR, "syntax error in a VALUES item")
    return item.expressions[0]


def _computed(qctx: QueryContext, expression: str, count: int) -> tuple[pa.ChunkedArray, bool]:
    """An expression every row has (`now()`, `gen_random_uuid()`), evaluated once per row in one
    query, as the planned VALUES evaluates it: a volatile one differs per row, `now()` is one
    instant. A column name in it is not found (42703), as in VALUES, which has no FROM. And
    whether it is typed: a literal the lexer left to the parser (`E'5'`, `U&'…'`) is untyped to
    PostgreSQL, assigned through its column type's input function, never 42804."""
    value = _item(expression)
    if value.find(exp.AggFunc) is not None:
        raise PgError("42803", "aggregate functions are not allowed in VALUES")
    if value.find(exp.Window) is not None:
        raise PgError("42P20", "window functions are not allowed in VALUES")
    rows = qctx.register_private("constant_rows_count", qctx.ctx.from_arrow(
        pa.table({"_icegres_values_row": pa.array(np.zeros(count, dtype=np.int8))})))
    computed = collect(qctx.plan_tree(exp.select(exp.alias_(value.copy(), "v", quoted=True)).from_(rows), None))
    if computed.num_rows != count:  # (an aggregate or a set-returning function the tree did not name)
        raise PgError(FEATURE_NOT_SUPPORTED, "set-returning functions are not allowed in VALUES")
    literal = value.this if isinstance(value, exp.Neg) else value
    return computed.column(0), not (is_untyped(literal) or isinstance(literal, exp.Boolean))


# A slot's values as DataFusion types the literals they were: integers int64, other numbers float64.
_SLOT_TYPES = {int: pa.int64(), float: pa.float64(), str: pa.string()}
# Where a slot's literal may stand: under operators and functions the rewrite passes through as
# they are, whatever their operands (it reads some others' literals: a cast's text, a LIKE
# pattern, to_char's template, an array index, a decimal operand of `/` as numeric).
_OPAQUE = (exp.Paren, exp.Neg, exp.Add, exp.Sub, exp.Mul, exp.DPipe, exp.Concat, exp.EQ, exp.NEQ, exp.GT,
           exp.GTE, exp.LT, exp.LTE, exp.And, exp.Or, exp.Not, exp.Coalesce, exp.Greatest, exp.Least, exp.Abs,
           exp.MD5, exp.Upper, exp.Lower, exp.Length)
_OPAQUE_TO_INTEGERS = (*_OPAQUE, exp.Div, exp.Mod)


def _templated(qctx: QueryContext, shape: values_template.Template | None, count: int) -> pa.ChunkedArray | None:
    """Rows of one expression differing in their constants (`'name ' || 1`, `'name ' || 2`),
    evaluated once over a column per differing constant, in one query; None where the shape
    does not make one expression the engine evaluates (the parse then reads every row, and says
    what is wrong with them)."""
    if shape is None:
        return None
    try:
        value = _item(shape.text).copy()  # (the parse's tree is shared)
    except PgError:
        return None
    if value.find(exp.AggFunc, exp.Window) is not None or isinstance(value.unnest(), exp.Literal):
        return None
    literals = {node.meta.get("start"): node for node in value.find_all(exp.Literal)}
    names, arrays = [], []
    for k, slot in enumerate(shape.slots):
        node = literals.get(slot.offset + len(_ITEM_PREFIX))
        if node is None or not _opaque(node, _OPAQUE_TO_INTEGERS if type(slot.values[0]) is int else _OPAQUE):
            return None
        names.append(f"_icegres_slot{k}")
        node.replace(exp.column(names[-1], quoted=True))
        arrays.append(pa.array(slot.values, type=_SLOT_TYPES[type(slot.values[0])]))
    source = _in_order(qctx, "constant_rows_slots", arrays, names)
    try:
        value = _bounded(qctx, value, source)
        computed = collect(qctx.plan_tree(exp.select(exp.alias_(value, "v", quoted=True)).from_(source).order_by(_ROW),
                                          None))
    except PgError as err:
        if err.sqlstate[:2] in ("53", "57"):
            raise  # (out of memory, a cancel: not the shape's fault)
        if err.sqlstate == NUMERIC_VALUE_OUT_OF_RANGE:
            # A bigint the row's literals overflow too, as PostgreSQL's int4/int8 do: the parse
            # would wrap it (docs/limitations.md, "Integer overflow wraps").
            raise
        return None
    return computed.column(0) if computed.num_rows == count else None


def _bounded(qctx: QueryContext, value: exp.Expression, source: exp.Table) -> exp.Expression:
    """`value` with its integer `+ - *` computed so that overflow is 22003 (checked_arith.py),
    not a wrapped bigint: DataFusion's kernels wrap over a column, where the literals' rows were
    the parse's to evaluate."""
    nodes = arithmetic_nodes(value)
    if not nodes:
        return value
    wrapper = exp.select(value)  # (a parent for the replacements of a value that is one node)
    probe = exp.select(*(exp.alias_(node.copy(), f"_{i}", quoted=True) for i, node in enumerate(nodes))).from_(source)
    check_overflow(nodes, [f.type for f in qctx.plan_tree(probe, None).df.schema()])
    return wrapper.expressions[0]


def _opaque(node: exp.Expression, kinds: tuple[type, ...]) -> bool:
    """Whether every node above `node` is one of `kinds`."""
    above = node.parent
    while above is not None:
        if not isinstance(above, kinds):
            return False
        above = above.parent
    return True


def _typed(values: list[Any]) -> tuple[pa.Array, exp.DataType | None] | None:
    """A column's items as the planned VALUES types them, and the type they are all cast to."""
    to = None
    if any(isinstance(v, Cast) for v in values):
        spelled = {" ".join(v.type.lower().split()) for v in values if isinstance(v, Cast)}
        if len(spelled) != 1 or any(v is not None and not isinstance(v, Cast) for v in values):
            return None
        to = cast_type(spelled.pop())
        if to is None or to.this not in _COLUMN_CASTS:
            return None
        values = [v.value if isinstance(v, Cast) else None for v in values]
    kinds = {type(v) for v in values if v is not None}
    if kinds <= {str}:
        array = arrow_column(values, pa.string())
    elif kinds == {bool}:
        array = arrow_column(values, pa.bool_())
    elif kinds == {bytes}:
        array = _numbers(values)
    else:
        return None  # (mixed kinds, or parameters the recipe did not take)
    return None if array is None else (array, to)


def _mixed(values: list[Any], field: pa.Field, zone: str) -> pa.ChunkedArray | None:
    """A column of strings beside numbers or booleans, each kind assigned to `field` apart,
    as PostgreSQL assigns each item (`VALUES ('x'), (5)` into a text column is 'x' and '5');
    None where it holds anything else."""
    groups: dict[type, list[int]] = {}
    for i, value in enumerate(values):
        groups.setdefault(str if value is None else type(value), []).append(i)
    if not set(groups) <= {str, bool, bytes}:
        return None
    parts, order = [], []
    for positions in groups.values():
        made = _typed([values[i] for i in positions])
        if made is None:
            return None
        parts.extend(assigned(pa.chunked_array([made[0]]), field, zone).chunks)
        order.extend(positions)
    return pa.chunked_array([pa.concat_arrays(parts).take(back_in_order(order))])


def back_in_order(order: list[int]) -> pa.Array:
    """Where each row of a list went, for `take` to put back in order parts made in the order
    `order` names them (part rows, concatenated: `order[i]` is the list row of the i-th)."""
    where = np.empty(len(order), dtype=np.int64)
    where[np.asarray(order, dtype=np.int64)] = np.arange(len(order), dtype=np.int64)
    return pa.array(where)


def _numbers(values: list[bytes | None]) -> pa.Array | None:
    """Unquoted numbers (values_rows.Number) as PostgreSQL's lexer types them and the planned
    VALUES unifies them: integers as bigint where every one fits, else one exact decimal wide
    enough for all."""
    if all(v is None or _INTEGER.fullmatch(v) for v in values):
        integers = [None if v is None else int(v) for v in values]
        if all(v is None or v in _INT64 for v in integers):
            return arrow_column(integers, pa.int64())
    decimals = [None if v is None else Decimal(v.decode()) for v in values]
    scale = whole = 0
    for value in decimals:
        if value is not None:
            _, digits, exponent = value.as_tuple()
            assert isinstance(exponent, int)
            scale = max(scale, -exponent)
            whole = max(whole, len(digits) + exponent)
    if whole + scale > _DECIMAL_DIGITS_MAX:
        return None  # (beyond DataFusion's decimals: the parse plans it as float64, as before)
    return arrow_column(decimals, pa.decimal128(max(whole + scale, 1), scale))


def _cast(qctx: QueryContext, arrays: list[pa.Array], types: list[exp.DataType]) -> pa.Table:
    """`CAST(column AS type)` of each array, computed as the statement's casts would be."""
    names = [f"c{i}" for i in range(len(arrays))]
    source = _in_order(qctx, "constant_rows", arrays, names)
    query = exp.select(*(exp.alias_(exp.Cast(this=exp.column(n, quoted=True), to=to.copy()), n, quoted=True)
                         for n, to in zip(names, types, strict=True))).from_(source).order_by(_ROW)
    return collect(qctx.plan_tree(query, None)).select(names)


_ROW = exp.column("_icegres_row", quoted=True)


def _in_order(qctx: QueryContext, name: str, arrays: list[pa.Array], names: list[str]) -> exp.Table:
    """The arrays registered as a relation with their row numbers (`_ROW`): a query over them
    orders by it, because DataFusion may split a big input among its partitions and answer them
    in any order (150,000 rows came back in pieces)."""
    count = len(arrays[0])
    numbered = pa.Table.from_arrays([*arrays, pa.array(np.arange(count, dtype=np.int64))], names=[*names, _ROW.name])
    return qctx.register_private(name, qctx.ctx.from_arrow(numbered))
