"""INSERT, UPDATE, DELETE and TRUNCATE as copy-on-write changes staged into a transaction.

Rows are computed by DataFusion over the transaction's view of the tables (its pins plus its own
staged writes) and written as new Parquet data files by pyiceberg's writer (`copy_on_write.py`).
A statement arrives parsed (`Statement.tree`, shared: each change works on its own copy); every
query run over the target is built and planned as a tree (`target.py`). Nothing here publishes:
the staged write goes to the commit machine at COMMIT (or at once, in autocommit).

All functions block; the session calls them from worker threads.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow as pa
from sqlglot import exp

from icegres.engine import big_values
from icegres.engine.dml.copy_on_write import (
    append,
    check_unique,
    compact,
    rewrite_matching,
    unique_violation,
)
from icegres.engine.dml.inserts import rows_of_insert
from icegres.engine.dml.joined import frame_of, rewrite_joined
from icegres.engine.dml.merge import merge, merge_parameter_types
from icegres.engine.dml.target import (
    FILE_COLUMN,
    alias_of,
    collect,
    insert_columns,
    lake_table,
    returning_rows,
    set_items,
    source,
    target_key,
    target_plan,
    target_table,
    value_columns,
)
from icegres.engine.dml.upsert import upsert
from icegres.pg.errors import PgError
from icegres.sql.parse import ConstantValues
from icegres.sql.pieces import has_big
from icegres.sql.statement import inserts_constants
from icegres.sql.values_rows import is_placeholder

if TYPE_CHECKING:
    from icegres.engine.query import QueryContext
    from icegres.engine.txn import Key, TxnState
    from icegres.sql.statement import Statement

__all__ = [
    "FILE_COLUMN", "DmlResult", "InsertRows", "append", "check_unique", "collect", "compact", "describe",
    "execute", "insert_columns", "insert_rows", "pin", "target_key", "target_plan", "unique_violation",
]


@dataclass(frozen=True)
class DmlResult:
    tag: str
    returning: pa.Table | None = None


def execute(qctx: QueryContext, txn: TxnState, stmt: Statement, params: dict[str, Any] | None) -> DmlResult:
    """Stage one DML statement's effect into `txn` and return its command tag (and RETURNING rows)."""
    stmt = qctx.with_views(stmt)
    tree = stmt.tree
    pin(qctx, txn, stmt)
    if tree.args.get("with_") is not None:
        tree = _ctes_moved_into_source(tree)
    if isinstance(tree, exp.Insert):
        return _insert(qctx, txn, tree, params)
    if isinstance(tree, exp.Update | exp.Delete | exp.Merge) and has_big(params):
        # A big literal made a parameter (protocol/pgwire/statements.py) stays one where it is
        # text; elsewhere its context decides its type, so it is written back.
        key = target_key(qctx, txn, tree.this)
        plan = target_plan(txn, key)
        inserted = [f.name for f in plan.schema] if isinstance(tree, exp.Merge) else None
        places = big_values.value_places(value_columns(plan), alias_of(tree.this, key).name, inserted)
        tree, params = big_values.settled(tree, params, places)
    if isinstance(tree, exp.Update):
        return _update(qctx, txn, tree, params)
    if isinstance(tree, exp.Delete):
        return _delete(qctx, txn, tree, params)
    if isinstance(tree, exp.Merge):
        return DmlResult(merge(qctx, txn, tree, params))
    if isinstance(tree, exp.TruncateTable):
        for table in tree.expressions:
            key = target_key(qctx, txn, table)
            rewrite_matching(qctx, txn, key, None, None, params, delete=True, alias=alias_of(table, key))
        return DmlResult("TRUNCATE TABLE")
    raise PgError("0A000", f"statement is not supported: {stmt.sql.split(None, 1)[0].upper()}")


def _ctes_moved_into_source(tree: exp.Expression) -> exp.Expression:
    """A write under WITH as one the paths below take (a copy): an INSERT's query takes the CTEs
    (`WITH c AS (…) INSERT INTO t SELECT … FROM c` as `INSERT INTO t WITH c AS (…) SELECT …`);
    elsewhere (VALUES, UPDATE, DELETE, MERGE) each CTE is written in where it is named, as a
    derived table (a CTE that reads itself there: 0A000)."""
    tree = tree.copy()
    ctes = tree.args["with_"]
    tree.set("with_", None)
    source = tree.expression if isinstance(tree, exp.Insert) else None
    if isinstance(source, exp.Query):
        inner = source.args.get("with_")
        if inner is not None:  # (its own WITH too: the outer CTEs first, as they were written)
            ctes.set("expressions", [*ctes.expressions, *inner.expressions])
            ctes.set("recursive", bool(ctes.args.get("recursive") or inner.args.get("recursive")))
        source.set("with_", ctes)
        return tree
    bodies: dict[str, exp.CTE] = {}
    for cte in ctes.expressions:
        if any(t.name == cte.alias_or_name and not t.db for t in cte.this.find_all(exp.Table)):
            raise PgError("0A000", f"a recursive WITH before {tree.key.upper()} is not supported")
        _inline(cte.this, bodies)
        bodies[cte.alias_or_name] = cte
    target = tree.this.this if isinstance(tree.this, exp.Schema) else tree.this
    _inline(tree, bodies, keep=target)
    return tree


def _inline(node: exp.Expression, ctes: dict[str, exp.CTE], keep: exp.Expression | None = None) -> None:
    """Each unqualified table reference under `node` that names one of `ctes` (not `keep`, the
    written table) replaced by that CTE's query as a derived table of the same name."""
    for table in list(node.find_all(exp.Table)):
        cte = ctes.get(table.name)
        if table is keep or table.db or cte is None:
            continue
        alias = exp.TableAlias(this=exp.to_identifier(table.alias_or_name))
        columns = cte.args["alias"].columns if cte.args.get("alias") is not None else []
        if columns and not table.alias:
            alias.set("columns", [c.copy() for c in columns])
        table.replace(exp.Subquery(this=cte.this.copy(), alias=alias))


def pin(qctx: QueryContext, txn: TxnState | None, stmt: Statement) -> None:
    """Pin the snapshots the statement works on.

    An autocommit INSERT … VALUES reads no table, so it builds on the mounted snapshot without a
    catalog round trip: if another writer committed meanwhile, the commit is rejected and the
    commit machine rebases the append onto the new head. A primary-key target is the exception —
    its uniqueness check reads the table — and is pinned fresh.
    """
    tree = stmt.tree
    blind = txn is not None and txn.autocommit and isinstance(tree, exp.Insert) and inserts_constants(tree)
    if not blind:
        qctx.pin_for(stmt)
        return
    qctx.pin_for(stmt, fresh=False)
    target = target_table(tree)
    key = qctx.resolve_table(target.db or None, target.name)
    plan = txn.pins.get(key) if key is not None else None
    if plan is not None and plan.ref is not None:
        return  # a branch, pinned by name (branch_writes.py)
    if plan is None or plan.primary_key:
        if key is not None:
            txn.pins.pop(key, None)
        qctx.pin_for(stmt)


def describe(qctx: QueryContext, stmt: Statement) -> tuple[pa.Schema | None, dict[int, pa.DataType]]:
    """RETURNING columns and parameter types of a DML statement, without running it."""
    from icegres.engine.column_names import tree_names
    from icegres.engine.params import placeholder_types

    stmt = qctx.with_views(stmt)
    tree = stmt.tree
    qctx.pin_for(stmt, fresh=False)
    if tree.args.get("with_") is not None:
        tree = _ctes_moved_into_source(tree)
    txn = qctx.txn
    table = target_table(tree) if not isinstance(tree, exp.TruncateTable) else None
    if table is None:
        return None, {}
    key = target_key(qctx, txn, table)
    plan = target_plan(txn, key)
    types: dict[int, pa.DataType] = {}
    by_name = {f.name: f.type for f in plan.schema}
    if isinstance(tree, exp.Insert):
        columns = insert_columns(tree, plan)
        values = tree.expression
        if isinstance(values, ConstantValues):
            for i, column in enumerate(values.args["rows"].columns[:len(columns)]):
                types.update((v, by_name[columns[i]]) for v in column if is_placeholder(v))
        elif isinstance(values, exp.Values):
            for row in values.expressions:
                for i, value in enumerate(row.expressions):
                    if isinstance(value, exp.Parameter) and i < len(columns):
                        types[int(value.this.this)] = by_name[columns[i]]
        elif values is not None:
            types.update(placeholder_types(qctx.plan_tree(values).df))
    elif isinstance(tree, exp.Update):
        for set_item in tree.expressions:
            name = set_item.this.name
            if isinstance(set_item.expression, exp.Parameter) and name in by_name:
                types[int(set_item.expression.this.this)] = by_name[name]
    elif isinstance(tree, exp.Merge):
        types.update(merge_parameter_types(tree, plan))
    where = tree.args.get("where")
    cond = tree.args["on"] if isinstance(tree, exp.Merge) else where.this if where is not None else None
    alias = alias_of(tree.this, key)
    sources = _sources(tree) if not isinstance(tree, exp.Insert) else []
    if (cond is not None or sources) and not isinstance(tree, exp.Insert):
        # (UPDATE … FROM, DELETE … USING, MERGE: over the join, whose columns the WHERE names)
        frame = frame_of(lake_table(key), alias, sources, cond)
        for index, dtype in placeholder_types(qctx.plan_tree(frame(exp.select(exp.Literal.number(1)))).df).items():
            types.setdefault(index, dtype)
    returning = tree.args.get("returning")
    schema = None
    if returning is not None:
        query = (exp.select(*(e.copy() for e in returning.expressions))
                 .from_(source(lake_table(key), alias_of(table, key))))
        plain = qctx.plan_tree(query).df.schema()
        schema = pa.schema([f.with_name(n) for f, n in zip(plain, tree_names(query, plain), strict=True)],
                           plain.metadata)
    return schema, types


@dataclass(frozen=True)
class InsertRows:
    """An INSERT computed but not written: the write buffer's path (`insert_rows`)."""

    key: Key
    rows: pa.Table
    returning: pa.Table | None

    @property
    def tag(self) -> str:
        return f"INSERT 0 {self.rows.num_rows}"


def insert_rows(qctx: QueryContext, txn: TxnState, stmt: Statement, params: dict[str, Any] | None) -> InsertRows | None:
    """An autocommit INSERT's conformed rows and RETURNING rows, exactly as `execute` computes
    them, with nothing written or staged. None when the write buffer must not take the statement
    (not an INSERT, or a primary-key target: the key check needs every row in the lake)."""
    stmt = qctx.with_views(stmt)
    tree = stmt.tree
    if not isinstance(tree, exp.Insert) or tree.args.get("conflict") is not None:
        return None  # ON CONFLICT: `execute` says what it means on this table
    pin(qctx, qctx.txn, stmt)
    table = target_table(tree)
    key = target_key(qctx, txn, table)
    plan = target_plan(txn, key)
    if plan.primary_key:
        return None
    key, rows, shape = rows_of_insert(qctx, txn, tree, params)
    returning = None
    if tree.args.get("returning") is not None:
        returning = returning_rows(qctx, tree.args["returning"], rows, table, key)
    elif shape is not None and shape.takes_parameters and plan.ref is None:  # (a branch's rows are keyed "t@b")
        qctx.insert_shapes.keep(stmt.sql, qctx.env.search_path, shape)
    return InsertRows(key, rows, returning)


def _insert(qctx: QueryContext, txn: TxnState, tree: exp.Insert, params: dict[str, Any] | None) -> DmlResult:
    if tree.args.get("conflict") is not None:
        return DmlResult(*upsert(qctx, txn, tree, params, _plain_insert))
    return DmlResult(*_plain_insert(qctx, txn, tree, params))


def _plain_insert(qctx: QueryContext, txn: TxnState, tree: exp.Insert,
                  params: dict[str, Any] | None) -> tuple[str, pa.Table | None]:
    key, rows, _ = rows_of_insert(qctx, txn, tree, params)
    if target_plan(txn, key, files=False).primary_key:
        check_unique(qctx, target_plan(txn, key), key, rows, exclude_files=())
    append(txn, key, rows, read=_reads_target(qctx, tree, key))
    returning = None
    if tree.args.get("returning") is not None:
        returning = returning_rows(qctx, tree.args["returning"], rows, target_table(tree), key)
    return f"INSERT 0 {rows.num_rows}", returning


def _reads_target(qctx: QueryContext, tree: exp.Insert, key: Key) -> bool:
    """Does the INSERT read its own target (`INSERT INTO t SELECT ... FROM t`, a subquery of t in
    VALUES, a CTE over t)? Such an append is not blind: rebasing it changes what it read."""
    from icegres.sql.statement import tree_table_refs

    if inserts_constants(tree):
        return False  # VALUES of literals and parameters: reads no table
    probe = tree.copy()
    probe.set("this", None)  # the target itself is written, not read
    refs = tree_table_refs(probe, qctx.env.search_path)
    return refs is None or key in refs


def _update(qctx: QueryContext, txn: TxnState, tree: exp.Update, params: dict[str, Any] | None) -> DmlResult:
    key = target_key(qctx, txn, tree.this)
    tree = tree.copy()  # the parse is shared (`Statement.tree`); its SET values are bounded in place
    sets = set_items(tree.expressions, target_plan(txn, key), key)
    return _rewrite_rows(qctx, txn, tree, key, sets, params)


def _delete(qctx: QueryContext, txn: TxnState, tree: exp.Delete, params: dict[str, Any] | None) -> DmlResult:
    return _rewrite_rows(qctx, txn, tree, target_key(qctx, txn, tree.this), None, params)


def _sources(tree: exp.Expression) -> list[exp.Expression]:
    """An UPDATE's FROM or a DELETE's USING list (each item with the joins it carries)."""
    from_ = tree.args.get("from_") or tree.args.get("from")
    if isinstance(tree, exp.Update):
        return [from_.this] if from_ is not None else []
    if isinstance(tree, exp.Merge):
        return [tree.args["using"]]
    return list(tree.args.get("using") or [])


def _rewrite_rows(qctx: QueryContext, txn: TxnState, tree: exp.Expression, key: Key,
                  sets: dict[str, exp.Expression] | None, params: dict[str, Any] | None) -> DmlResult:
    """An UPDATE (`sets`) or DELETE (None) of the rows its WHERE selects; its tag and RETURNING."""
    where = tree.args.get("where")
    returning = tree.args.get("returning")
    cond = where.this if where is not None else None
    sources = _sources(tree)
    if sources:
        count, rows, said = rewrite_joined(qctx, txn, key, sources, cond, sets, params, alias=alias_of(tree.this, key),
                                           returning=returning)
        returning = said
    else:
        count, rows = rewrite_matching(qctx, txn, key, cond, sets, params, delete=sets is None,
                                       alias=alias_of(tree.this, key), returned=returning is not None,
                                       by_position=True)
    tag = f"{'DELETE' if sets is None else 'UPDATE'} {count}"
    if returning is None:
        return DmlResult(tag)
    return DmlResult(tag, returning_rows(qctx, returning, rows, tree.this, key))
