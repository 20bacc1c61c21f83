"""INSERT ... ON CONFLICT (key) DO NOTHING | DO UPDATE SET ... [WHERE ...], on the primary key.

An icegres table's only unique constraint is its opt-in primary key: rows whose key the table
already holds (in this transaction's view) are skipped or update that row, copy-on-write, in the
files that hold it; the others are appended. The tag counts both, as PostgreSQL's does.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pyarrow as pa
from sqlglot import exp

from icegres.engine.assign import assignment
from icegres.engine.dml import checks
from icegres.engine.dml.copy_on_write import append, check_unique, write_files
from icegres.engine.dml.inserts import rows_of_insert
from icegres.engine.dml.target import (
    FILE_COLUMN,
    HIT_COLUMN,
    alias_of,
    collect,
    column,
    in_files,
    is_true,
    returning_rows,
    scan_typed,
    source,
    target_key,
    target_plan,
    target_table,
    with_file_column,
)
from icegres.engine.rewrite.literals import typed_literals
from icegres.pg.errors import PgError

if TYPE_CHECKING:
    from collections.abc import Iterable

    from icegres.engine.mounts import ReadPlan
    from icegres.engine.query import QueryContext
    from icegres.engine.txn import Key, TxnState


def upsert(qctx: QueryContext, txn: TxnState, tree: exp.Insert, params: dict[str, Any] | None,
           insert: Any) -> tuple[str, pa.Table | None]:
    """The tag and RETURNING rows of an INSERT ... ON CONFLICT (`insert` runs a plain INSERT:
    DO NOTHING where no row can conflict)."""
    conflict = tree.args["conflict"]
    table = target_table(tree)
    key = target_key(qctx, txn, table)
    plan = target_plan(txn, key)
    pk = list(plan.primary_key)
    update = "UPDATE" in str(conflict.args.get("action") or "").upper()
    plain = tree.copy()
    plain.set("conflict", None)
    if not pk and not update and not conflict.args.get("conflict_keys") and conflict.args.get("constraint") is None:
        return insert(qctx, txn, plain, params)
    _check_conflict_target(conflict, key, pk, update)
    names = {f.name for f in plan.schema}
    for item in conflict.expressions:  # before any row is looked at, as PostgreSQL checks them
        if item.this.name not in names:
            raise PgError("42703", f'column "{item.this.name}" of relation "{key[1]}" does not exist')
        _unambiguous(item.expression)
    if conflict.args.get("where") is not None:
        _unambiguous(conflict.args["where"].this)
    plain.set("returning", None)
    key, rows, _ = rows_of_insert(qctx, txn, plain, params)
    rows = _first_of_each_key(rows, pk, update)
    fresh, changed = rows, rows.schema.empty_table()
    if plan.files:
        t, excluded = exp.to_identifier("t"), exp.to_identifier("excluded")
        incoming = qctx.register_private("incoming", qctx.ctx.from_arrow(scan_typed(rows)))
        view = qctx.register_private("target", with_file_column(qctx, key, plan))
        on = exp.and_(*(exp.EQ(this=column(k, t), expression=column(k, excluded)) for k in pk))
        found = collect(qctx.plan_tree(
            exp.select(exp.alias_(column(FILE_COLUMN, t), "f"), *(column(k, t) for k in pk)).distinct()
            .from_(source(view, t)).join(source(incoming, excluded), on=on), params))
        existing = set(_keys(found, pk))
        fresh = rows.filter(pa.array([k not in existing for k in _keys(rows, pk)], pa.bool_()))
        if update and existing:
            changed = _update_conflicting(qctx, txn, tree, key, plan, view, incoming,
                                          set(found.column("f").to_pylist()), pk, params)
    check_unique(qctx, plan, key, fresh, exclude_files=())
    append(txn, key, fresh, read=True)
    returning = tree.args.get("returning")
    out = None
    if returning is not None:
        out = returning_rows(qctx, returning, pa.concat_tables([fresh, changed]), table, key)
    return f"INSERT 0 {fresh.num_rows + changed.num_rows}", out


def _check_conflict_target(conflict: exp.Expression, key: Key, pk: list[str], update: bool) -> None:
    """The conflict target must be the primary key (42P10 otherwise, as PostgreSQL says when no
    unique index matches); DO UPDATE must name it."""
    named = [c.this.name if hasattr(c.this, "name") else str(c.this) for c in conflict.args.get("conflict_keys") or []]
    constraint = conflict.args.get("constraint")
    if constraint is not None and (not pk or constraint.name != f"{key[1]}_pkey"):
        raise PgError("42704", f'constraint "{constraint.name}" for table "{key[1]}" does not exist')
    if not pk or (named and set(named) != set(pk)):
        raise PgError("42P10", "there is no unique or exclusion constraint matching the ON CONFLICT specification")
    if update and not named and constraint is None:
        raise PgError("42601", "ON CONFLICT DO UPDATE requires inference specification or constraint name",
                      hint="For example, ON CONFLICT (column_name).")


def _first_of_each_key(rows: pa.Table, pk: list[str], update: bool) -> pa.Table:
    """The rows to insert, one per key: a later row with a key an earlier one took conflicts with
    it (DO NOTHING skips it); DO UPDATE may not touch one row twice (21000)."""
    seen: set[tuple[Any, ...]] = set()
    keep = []
    for k in _keys(rows, pk):
        if k in seen and update:
            raise PgError("21000", "ON CONFLICT DO UPDATE command cannot affect row a second time",
                          hint="Ensure that no rows proposed for insertion within the same command have "
                               "duplicate constrained values.")
        keep.append(k not in seen)
        seen.add(k)
    return rows if all(keep) else rows.filter(pa.array(keep, pa.bool_()))


def _update_conflicting(qctx: QueryContext, txn: TxnState, tree: exp.Insert, key: Key, plan: ReadPlan,
                        view: exp.Table, incoming: exp.Table, files: set[str], pk: list[str],
                        params: dict[str, Any] | None) -> pa.Table:
    """DO UPDATE: rewrite `files` (of `view`, the table with each row's file), setting the SET
    columns of each row an incoming row conflicts with (and that the WHERE admits); returns those
    rows as written."""
    conflict = tree.args["conflict"]
    alias = alias_of(target_table(tree), key)
    excluded = exp.to_identifier("excluded")
    types = {f.name: f.type for f in plan.schema}
    sets: dict[str, exp.Expression] = {}
    for item in conflict.expressions:
        sets[item.this.name] = assignment(typed_literals(item.expression), types[item.this.name])
    where = conflict.args.get("where")
    # The row met an incoming one (key columns are NOT NULL), and the WHERE admits it.
    hit: exp.Expression = exp.Not(this=exp.Is(this=column(pk[0], excluded), expression=exp.Null()))
    if where is not None:
        hit = exp.and_(hit, is_true(typed_literals(where.this)))
    on = exp.and_(*(exp.EQ(this=column(k, alias), expression=column(k, excluded)) for k in pk))
    exprs = [exp.alias_(exp.Case(ifs=[exp.If(this=hit.copy(), true=sets[c].copy())], default=column(c, alias)),
                        c, quoted=True) if c in sets else column(c, alias) for c in types]
    query = (exp.select(*exprs, exp.alias_(hit.copy(), HIT_COLUMN, quoted=True)).from_(source(view, alias))
             .join(source(incoming, excluded), on=on, join_type="left").where(in_files(files, alias)))
    data = collect(qctx.plan_tree(query, params))
    marks = data.column(HIT_COLUMN)
    rows = checks.conform(qctx, data.drop_columns([HIT_COLUMN]), plan, key, changed=marks)
    if any(c in sets for c in pk):
        check_unique(qctx, plan, key, rows, exclude_files=tuple(files))
    write = txn.write_for(key)
    write, orphans = write.rewrite(files, write_files(write.target, rows), rows.num_rows, read=True)
    txn.stage(write, orphans)
    return rows.filter(marks)


def _unambiguous(expr: exp.Expression) -> None:
    """A DO UPDATE's expressions see the target and `excluded`, which have the same columns: an
    unqualified one (outside a subquery) is ambiguous (42702), as PostgreSQL says."""
    for col in expr.find_all(exp.Column):
        if not col.table and col.find_ancestor(exp.Subquery) is None:
            raise PgError("42702", f'column reference "{col.name}" is ambiguous')


def _keys(rows: pa.Table, pk: list[str]) -> Iterable[tuple[Any, ...]]:
    """Each row's primary key, as a tuple."""
    return zip(*(rows.column(c).to_pylist() for c in pk), strict=True)
