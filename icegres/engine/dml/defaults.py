"""Column DEFAULTs, applied where PostgreSQL applies them: to the columns an INSERT, COPY, MERGE
INSERT or bulk ingest leaves out, to `DEFAULT` in a VALUES row, and to INSERT … DEFAULT VALUES.

A default is kept as SQL text in the table's properties (ddl_commands.COLUMN_DEFAULT_PREFIX, by
field id) and read into `ReadPlan.defaults`. It is evaluated by DataFusion once per row written,
over a relation of that many rows, so a volatile default (`gen_random_uuid()`, `random()`) differs
per row and `now()` is one instant per statement; the value is assigned to the column's type as an
INSERT's value is.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
from sqlglot import exp

from icegres.engine.dml.target import collect

if TYPE_CHECKING:
    from icegres.engine.mounts import ReadPlan
    from icegres.engine.query import QueryContext


@functools.lru_cache(maxsize=1024)
def _parsed(text: str) -> exp.Expression:
    import sqlglot

    return sqlglot.parse_one(f"SELECT {text}", read="postgres").expressions[0]


def expression(plan: ReadPlan, name: str) -> exp.Expression:
    """Column `name`'s DEFAULT (NULL where it has none), assigned to the column as any value
    written to it is."""
    for field, text in zip(plan.schema, plan.defaults, strict=False):
        if field.name == name and text is not None:
            return _parsed(text).copy()
    return exp.Null()


def in_values(tree: exp.Insert, plan: ReadPlan, columns: list[str]) -> exp.Insert:
    """`tree` with each `DEFAULT` of its VALUES rows replaced by its column's default (a copy, if
    there is any)."""
    source = tree.expression
    if not isinstance(source, exp.Values) or not any(_is_default(v) for row in source.expressions
                                                     for v in row.expressions):
        return tree
    tree = tree.copy()
    for row in tree.expression.expressions:
        for i, value in enumerate(list(row.expressions)):
            if _is_default(value) and i < len(columns):
                value.replace(expression(plan, columns[i]))
    return tree


def _is_default(value: exp.Expression) -> bool:
    return isinstance(value, exp.Var) and str(value.this).upper() == "DEFAULT"


def fill(qctx: QueryContext, plan: ReadPlan, data: pa.Table, rows: int | None = None) -> pa.Table:
    """`data` (some of the table's columns; `rows` rows where it has no column) with every column
    it lacks that has a DEFAULT, that DEFAULT evaluated once per row."""
    if not data.num_columns:  # (a table of no columns that still has its rows: conform NULLs them)
        data = pa.table({"n": pa.nulls(rows or 0)}).drop_columns(["n"])
    missing = [(f, text) for f, text in zip(plan.schema, plan.defaults, strict=False)
               if text is not None and f.name not in data.column_names]
    if not missing or data.num_rows == 0:
        return data
    numbers = qctx.register_private("default_rows", qctx.ctx.from_arrow(pa.table({"n": np.arange(data.num_rows)})))
    # Unassigned: the caller conforms the rows, which casts each value as PostgreSQL assigns it.
    query = exp.select(*(exp.alias_(_parsed(text).copy(), f.name, quoted=True) for f, text in missing)).from_(numbers)
    values = collect(qctx.plan_tree(query))
    for f, _ in missing:
        data = data.append_column(f.name, values.column(f.name))
    return data


def check(qctx: QueryContext, text: str, field: pa.Field, key: tuple[str, str]) -> None:
    """A DEFAULT given to a column: evaluated once and assigned to the column's type, so that what
    PostgreSQL refuses when the default is declared (`int DEFAULT 'abc'`: 22P02, a function that
    does not exist: 42883) is refused then, not at the first INSERT."""
    from icegres.engine.assign import conform_to

    value = collect(qctx.plan_tree(exp.select(exp.alias_(_parsed(text).copy(), field.name, quoted=True))))
    conform_to(value, pa.schema([field.with_nullable(True)]), key, qctx.env.time_zone)
