"""Column DEFAULTs, applied where PostgreSQL applies them: to the columns an INSERT, COPY, MERGE
INSERT or bulk ingest leaves out, to `DEFAULT` in a VALUES row, and to INSERT … DEFAULT VALUES.

A default is kept as SQL text in the table's properties (ddl_commands.COLUMN_DEFAULT_PREFIX, by
field id) and read into `ReadPlan.defaults`. It is evaluated by DataFusion once per row written,
over a relation of that many rows, so a volatile default (`gen_random_uuid()`, `random()`) differs
per row and `now()` is one instant per statement; the value is assigned to the column's type as an
INSERT's value is.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
from sqlglot import exp

from icegres.engine.dml.target import collect
from icegres.pg.errors import PgError
from icegres.sql.parse import ConstantValues
from icegres.sql.parse import expression as _parsed
from icegres.sql.pieces import BigText, Literal, Scanner
from icegres.sql.values_rows import DEFAULT

if TYPE_CHECKING:
    from icegres.engine.mounts import ReadPlan
    from icegres.engine.query import QueryContext


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


def check_always_identity(tree: exp.Insert, plan: ReadPlan, columns: list[str]) -> None:
    """428C9 where an INSERT gives a GENERATED ALWAYS identity column a value of its own (only
    `DEFAULT` in VALUES may name it; OVERRIDING SYSTEM VALUE is not read)."""
    always = {f.name for f, kind in zip(plan.schema, plan.identities, strict=False) if kind == "a"}
    if not always:
        return
    source = tree.expression
    for i, name in enumerate(columns):
        if name not in always:
            continue
        if isinstance(source, exp.Values) and all(
                i >= len(row.expressions) or _is_default(row.expressions[i]) for row in source.expressions):
            continue
        if isinstance(source, ConstantValues) and i < source.args["rows"].width \
                and all(v is DEFAULT for v in source.args["rows"].columns[i]):
            continue
        if source is None or (not isinstance(tree.this, exp.Schema) and i >= _width(source)):
            continue  # (without a column list, a source narrower than the table leaves it out)
        raise PgError("428C9", f'cannot insert a non-DEFAULT value into column "{name}"',
                      detail=f'Column "{name}" is an identity column defined as GENERATED ALWAYS.',
                      hint="Use OVERRIDING SYSTEM VALUE to override.")


def _width(source: exp.Expression) -> int:
    """How many columns a VALUES list or a SELECT without `*` gives (a large number otherwise)."""
    if isinstance(source, ConstantValues):
        return source.args["rows"].width
    if isinstance(source, exp.Values):
        return max((len(row.expressions) for row in source.expressions), default=0)
    if isinstance(source, exp.Select) and not any(isinstance(e, exp.Star) or e.find(exp.Star) for e in source.expressions):
        return len(source.expressions)
    return 1 << 30


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
    params: dict[str, Any] = {}
    query = exp.select(*(exp.alias_(_bound(text, params), f.name, quoted=True) for f, text in missing)).from_(numbers)
    values = collect(qctx.plan_tree(query, params or None))
    for f, _ in missing:
        data = data.append_column(f.name, values.column(f.name))
    return data


def declared(cmd: Any) -> bool:
    """Whether a DDL command declares a DEFAULT (CREATE TABLE, ADD COLUMN, SET DEFAULT): pure,
    so every other DDL goes on without a hop to a worker thread."""
    from icegres.engine.ddl_commands import AddColumn, AlterTable, CreateTable, SetDefault

    if isinstance(cmd, CreateTable):
        return any(c.default is not None for c in cmd.columns)
    return isinstance(cmd, AlterTable) and any(
        (isinstance(a, AddColumn) and a.column.default is not None) or (isinstance(a, SetDefault) and a.default is not None)
        for a in cmd.actions)


def check_declared(qctx: QueryContext, cmd: Any) -> None:
    """The DEFAULTs a CREATE TABLE or ALTER TABLE declares (`declared`), each evaluated and
    assigned to its column's type once (`check`): PostgreSQL refuses a bad one at once."""
    from pyiceberg.io.pyarrow import schema_to_pyarrow

    from icegres.engine.ddl_apply import iceberg_schema_for
    from icegres.engine.ddl_commands import AddColumn, CreateTable, SetDefault

    key = (cmd.schema or "", cmd.name)
    if isinstance(cmd, CreateTable):
        arrow = schema_to_pyarrow(iceberg_schema_for(cmd.columns, cmd.primary_key))
        for c in cmd.columns:
            if c.default is not None:
                check(qctx, c.default, arrow.field(c.name), key)
        return
    for action in cmd.actions:
        if isinstance(action, AddColumn) and action.column.default is not None:
            arrow = schema_to_pyarrow(iceberg_schema_for([action.column]))
            check(qctx, action.column.default, arrow.field(action.column.name), key)
        elif isinstance(action, SetDefault) and action.default is not None:
            found = qctx.resolve_table(cmd.schema, cmd.name) or qctx.resolve_mounted(cmd.schema, cmd.name)
            plan = qctx.engine.read_plan(*found) if found is not None else None
            if plan is not None and action.name in plan.schema.names:  # (else the ALTER says what is missing)
                check(qctx, action.default, plan.schema.field(action.name), found)


def check(qctx: QueryContext, text: str, field: pa.Field, key: tuple[str, str]) -> None:
    """A DEFAULT given to a column: evaluated once and assigned to the column's type, so that what
    PostgreSQL refuses when the default is declared (`int DEFAULT 'abc'`: 22P02, a function that
    does not exist: 42883) is refused then, not at the first INSERT."""
    from icegres.engine.assign import conform_to

    params: dict[str, Any] = {}
    value = collect(qctx.plan_tree(exp.select(exp.alias_(_bound(text, params), field.name, quoted=True)),
                                   params or None))
    conform_to(value, pa.schema([field.with_nullable(True)]), key, qctx.env.time_zone)


_BIG_DEFAULT_CHARS = 4 * 1024  # (as the front end's LITERAL_CHARS: a literal over it is a parameter)
_PIECE_CHARS = 1 << 20


def _bound(text: str, params: dict[str, Any]) -> exp.Expression:
    """A DEFAULT's expression to evaluate. A default that is one big string literal (`DEFAULT
    '<50 MB>'`) is a parameter added to `params`, bound to its text's UTF-8 a slice at a time:
    the engine reads it from a one-row table (engine/big_values.py), where written into the
    query DataFusion would parse it in one call holding the GIL (1.2 s for 50 MB, during which
    every session waited). Either way the value is a string that the caller assigns to the
    column's type, so the default means what it meant."""
    value = _one_literal(text) if len(text) > _BIG_DEFAULT_CHARS else None
    if value is None:
        return _parsed(text).copy()
    name = str(len(params) + 1)
    params[name] = value
    return exp.Parameter(this=exp.Literal.number(name))


def _one_literal(text: str) -> BigText | None:
    """The value of a default that is one big string literal, read by the piece scanner a slice
    at a time (sqlglot's tokenizer passed over 50 MB in whole-text calls, 67 ms of GIL each);
    None for anything else."""
    scanner = Scanner(_BIG_DEFAULT_CHARS)
    for at in range(0, len(text), _PIECE_CHARS):
        scanner.feed(text[at:at + _PIECE_CHARS])
    statements = scanner.finish()
    items = [item for st in statements for item in st.items if not (isinstance(item, str) and not item.strip())]
    if len(items) == 1 and isinstance(items[0], Literal) and items[0].opener in ("'", "E'"):
        return items[0].value
    return None
