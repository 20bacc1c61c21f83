"""What every DML statement needs: the table it writes (resolved, in the transaction's view), the
trees of the queries it plans over that table, and its RETURNING rows.

Queries are built as sqlglot trees and planned as trees (`QueryContext.plan_tree`); no SQL text
is assembled here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pyarrow as pa
from sqlglot import exp

from icegres.engine.column_names import tree_names
from icegres.engine.lake import PRIVATE_CATALOG
from icegres.pg.errors import PgError
from icegres.sql.databases import check_database
from icegres.sql.parse import ConstantValues

if TYPE_CHECKING:
    from collections.abc import Iterable

    from icegres.engine.mounts import ReadPlan
    from icegres.engine.planned import PlannedQuery
    from icegres.engine.query import QueryContext
    from icegres.engine.txn import Key, TxnState

FILE_COLUMN = "__icegres_file"
HIT_COLUMN = "__icegres_hit"  # an UPDATE ... RETURNING's mark of the rows it changed
POS_COLUMN = "__icegres_pos"  # a row's position in its data file (merge-on-read writes)


def target_table(tree: exp.Expression) -> exp.Expression:
    """The table an INSERT (with or without a column list), UPDATE or DELETE names."""
    return tree.this.this if isinstance(tree.this, exp.Schema) else tree.this


def target_key(qctx: QueryContext, txn: TxnState | None, table: exp.Table) -> Key:
    """The (schema, table) a written table means: 42P01 if it is none the transaction sees."""
    name = table.name
    schema = table.db or None
    catalog = table.text("catalog")
    if catalog and catalog != PRIVATE_CATALOG:  # (the name's SQL only for the error: it costs a generator run)
        check_database(catalog, qctx.env.database, table.sql(dialect="postgres"))
    key = qctx.resolve_table(schema, name)
    if key is None or (txn is not None and key not in txn.pins):
        # A table left unmounted (damaged files, deletes icegres cannot apply) says why.
        unmounted = key or qctx.resolve_mounted(schema, name)
        shown = f"{key[0]}.{key[1]}" if key else f"{schema}.{name}" if schema else name
        raise ((qctx.engine.refusal(unmounted) if unmounted else None)
               or PgError("42P01", f'relation "{shown}" does not exist'))
    return key


def target_plan(txn: TxnState | None, key: Key, *, files: bool = True) -> ReadPlan:
    """The written table as the transaction sees it (its pin plus its own staged writes);
    without its `files` for a statement that reads none of them (`TxnState.shape`)."""
    assert txn is not None
    plan = txn.plan(key) if files else txn.shape(key)
    if plan is None:
        raise PgError("42P01", f'relation "{key[0]}.{key[1]}" does not exist')
    if plan.table is None:
        raise PgError("0A000", f"table {key[0]}.{key[1]} cannot be written")
    if plan.sequence is not None:
        raise PgError("42809", f'cannot change sequence "{key[1]}"')
    return plan


def set_items(items: list[exp.Expression], plan: ReadPlan, key: Key) -> dict[str, exp.Expression]:
    """An UPDATE SET list (UPDATE, MERGE's WHEN MATCHED) as column -> value, the values the
    tree's own (42703 for an unknown column, 42601 for one assigned twice); `SET c = DEFAULT` is
    the column's default, the only value a GENERATED ALWAYS identity column takes (428C9)."""
    from icegres.sql.parse import expression

    names = {f.name for f in plan.schema}
    defaults = dict(zip(names and [f.name for f in plan.schema], plan.defaults, strict=False))
    always = {f.name for f, kind in zip(plan.schema, plan.identities, strict=False) if kind == "a"}
    sets: dict[str, exp.Expression] = {}
    for item in items:
        name = item.this.name
        if name not in names:
            raise PgError("42703", f'column "{name}" of relation "{key[1]}" does not exist')
        if name in sets:
            raise PgError("42601", f'multiple assignments to same column "{name}"')
        value = item.expression
        # (sqlglot reads the keyword as a column named default; a column so named must be quoted)
        is_default = (isinstance(value, exp.Var) and str(value.this).upper() == "DEFAULT") or (
            isinstance(value, exp.Column) and not value.table and value.name.lower() == "default"
            and not value.this.args.get("quoted"))
        if name in always and not is_default:
            raise PgError("428C9", f'column "{name}" can only be updated to DEFAULT',
                          detail=f'Column "{name}" is an identity column defined as GENERATED ALWAYS.')
        if is_default:
            text = defaults.get(name)
            value = expression(text).copy() if text is not None else exp.Null()
        sets[name] = value
    return sets


def value_columns(plan: ReadPlan) -> dict[str, str]:
    """The target's columns a big literal goes into as it is (engine/big_values.py): text and
    varchar(n) (whose length the written rows are checked against) as "text"; bytea as
    "bytea"; integers as their type's name ("smallint", "integer", "bigint": a string assigned
    to one or compared with one is read by the type's input function, as a cast); char(n) and
    numeric as "assigned": a string assigned to one is cast to the column's type as the literal's
    string was, but compared with one it is not text (char(n)'s comparisons ignore trailing
    spaces, and a numeric literal compared is unconstrained numeric, not the column's type)."""
    from icegres.pg.chars import BPCHAR_OID

    chars = plan.char_types or (None,) * len(plan.schema)
    out = {}
    for f, char in zip(plan.schema, chars, strict=False):
        t = pa.types
        if t.is_string(f.type) or t.is_large_string(f.type) or t.is_string_view(f.type):
            out[f.name] = "text" if char is None or char.oid != BPCHAR_OID else "assigned"
        elif t.is_binary(f.type) or t.is_large_binary(f.type) or t.is_binary_view(f.type):
            out[f.name] = "bytea"
        elif t.is_integer(f.type) and f.type.bit_width in _INTEGER_NAMES:
            out[f.name] = _INTEGER_NAMES[f.type.bit_width]
        elif t.is_integer(f.type) or t.is_decimal(f.type):
            # (not yet floats, booleans, dates and times: no test holds their big strings to PostgreSQL's)
            out[f.name] = "assigned"
    return out


_INTEGER_NAMES = {16: "smallint", 32: "integer", 64: "bigint"}


def insert_columns(tree: exp.Insert, plan: ReadPlan) -> list[str]:
    """The columns an INSERT fills, in order (42703 / 42701 for a bad column list)."""
    names = [f.name for f in plan.schema]
    if not isinstance(tree.this, exp.Schema):
        # PostgreSQL: without a column list, the first N columns, N the width of VALUES (or of
        # the query, which the planned rows tell); the rest take their defaults.
        source = tree.expression
        if isinstance(source, ConstantValues):
            width = source.args["rows"].width
            return names[:width] if width < len(names) else names
        if isinstance(source, exp.Values) and source.expressions:
            width = len(source.expressions[0].expressions)
            return names[:width] if width < len(names) else names
        return names
    columns = [c.name for c in tree.this.expressions]
    for c in columns:
        if c not in names:
            raise PgError("42703", f'column "{c}" of relation "{tree.this.this.name}" does not exist')
    if len(set(columns)) != len(columns):
        raise PgError("42701", "column specified more than once")
    return columns


# --- trees ----------------------------------------------------------------------------------------


def ident(name: str) -> exp.Identifier:
    return exp.to_identifier(name, quoted=True)


def column(name: str, table: exp.Identifier | None = None) -> exp.Column:
    return exp.Column(this=ident(name), table=table.copy() if table is not None else None)


def alias_of(table: exp.Expression, key: Key) -> exp.Identifier:
    """The name the statement's rows go by: the table's alias, else the table's own name."""
    given = table.args.get("alias") if hasattr(table, "args") else None
    return ident(given.name if given is not None else key[1])


def source(relation: exp.Table, alias: exp.Identifier) -> exp.Table:
    """`relation AS alias`, for a FROM or JOIN."""
    out = relation.copy()
    out.set("alias", exp.TableAlias(this=alias.copy()))
    return out


def lake_table(key: Key) -> exp.Table:
    """The lake table `key`, as a query names it."""
    return exp.Table(this=ident(key[1]), db=ident(key[0]))


def in_files(paths: Iterable[str], alias: exp.Identifier | None = None) -> exp.Expression:
    """`"__icegres_file" IN ('path', ...)`: the rows of those data files."""
    return column(FILE_COLUMN, alias).isin(*(exp.Literal.string(p) for p in paths))


def is_true(cond: exp.Expression | None) -> exp.Expression:
    """`(cond) IS TRUE` (a NULL condition selects nothing); TRUE for no condition."""
    if cond is None:
        return exp.true()
    return exp.Is(this=exp.Paren(this=cond.copy()), expression=exp.true())


def collect(planned: PlannedQuery) -> pa.Table:
    """Run a plan to the end (its hold kept until then)."""
    from icegres.engine import errors as engine_errors

    try:
        return planned.df.to_arrow_table()
    except Exception as exc:
        raise engine_errors.from_datafusion(exc) from None


def with_file_column(qctx: QueryContext, key: Key, plan: ReadPlan, *, positions: bool = False) -> Any:
    """The table `key` as a union of per-file scans, each tagged with its path (58P01 if one of
    the files is gone: a scan would read it as no rows). With `positions`, each row's position
    in its file too (POS_COLUMN, the reader's `file_row_index()`): only for files that need no
    column mapping (`FileRead.matches_schema`), whose scan is the Parquet scan itself."""
    qctx.engine.check_files([(key, plan)])
    from dataclasses import replace

    from datafusion import functions, lit

    from icegres.engine.mounts import to_dataframe

    ctx = qctx.ctx
    frames = []
    for f in plan.files:
        frame = to_dataframe(ctx, replace(plan, files=(f,)), qctx.engine.stores).with_column(FILE_COLUMN, lit(f.path))
        if positions:
            assert f.matches_schema, f.path
            frame = frame.with_column(POS_COLUMN, functions.file_row_index())
        frames.append(frame)
    df = frames[0]
    for other in frames[1:]:
        df = df.union(other)
    return qctx.zoned(df)


def returning_rows(qctx: QueryContext, returning: exp.Expression, rows: pa.Table, table: exp.Expression,
                   key: Key) -> pa.Table:
    """RETURNING's list over `rows` (the rows written, or deleted), named as PostgreSQL names it."""
    from icegres.engine.rewrite import pg_output_names

    view = qctx.register_private("returning", qctx.ctx.from_arrow(scan_typed(rows)))
    query = exp.select(*(e.copy() for e in returning.expressions)).from_(source(view, alias_of(table, key)))
    names = (pg_output_names(query) or [[]])[0]
    if len(set(names)) < len(names) and not any(isinstance(e, exp.Star) or (isinstance(e, exp.Column)
                                                and isinstance(e.this, exp.Star)) for e in returning.expressions):
        # One name twice (`RETURNING id, id`): DataFusion wants distinct names, PostgreSQL not.
        planned = exp.select(*(exp.alias_(e.unalias().copy(), f"_returned_{i}", quoted=True)
                               for i, e in enumerate(returning.expressions))).from_(source(view, alias_of(table, key)))
        return collect(qctx.plan_tree(planned)).rename_columns(names)
    result = collect(qctx.plan_tree(query))
    return result.rename_columns(tree_names(query, result.schema))


def scan_typed(rows: pa.Table) -> pa.Table:
    """`rows` with the types a scan of the table gives (small strings and binaries)."""
    return rows.cast(pa.schema([f.with_type(_scan_type(f.type)) for f in rows.schema]))


def _scan_type(t: pa.DataType) -> pa.DataType:
    if pa.types.is_large_string(t):
        return pa.string()
    if pa.types.is_large_binary(t):
        return pa.binary()
    return t


def write_files(base: ReadPlan, rows: pa.Table) -> dict[str, Any]:
    """Write rows as new Parquet data files of the table (partitioned as its spec says)."""
    if rows.num_rows == 0:
        return {}
    from pyiceberg.io.pyarrow import _dataframe_to_data_files

    from icegres.engine import staging

    table: Any = base.table
    # Named with a write uuid the transaction's staging record learns each file's path under,
    # before the file exists (engine/staging.py).
    with staging.writing(table) as write_uuid:
        files = list(_dataframe_to_data_files(table_metadata=table.metadata, df=rows, io=table.io,
                                              write_uuid=write_uuid))
    for f in files:
        # Manifests give read DataFiles their spec id; written ones need it to be deleted later.
        f.spec_id = table.metadata.default_spec_id
    return {f.file_path: f for f in files}
