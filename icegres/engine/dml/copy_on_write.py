"""Copy-on-write: the data files an UPDATE or DELETE touches, rewritten; rows appended as new files;
a primary key checked; a transaction's small files merged before it commits.

UPDATE and DELETE first ask which data files hold matching rows (one grouped query over the
table with each file's path as a column, so Parquet statistics still prune), then rewrite only
those files. Nothing here publishes: the staged write goes to the commit machine at COMMIT (or at
once, in autocommit).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute  # noqa: F401  (pa.compute)
from sqlglot import exp

from icegres.engine import row_security
from icegres.engine.assign import assignment, check_assignable, conform, is_untyped, write_schema
from icegres.engine.dml import checks, merge_on_read
from icegres.engine.dml.target import (
    FILE_COLUMN,
    HIT_COLUMN,
    collect,
    column,
    in_files,
    is_true,
    lake_table,
    scan_typed,
    source,
    target_plan,
    with_file_column,
    write_files,
)
from icegres.engine.rewrite.literals import exact_number, typed_literals
from icegres.pg.errors import PgError

if TYPE_CHECKING:
    from icegres.engine.mounts import ReadPlan
    from icegres.engine.query import QueryContext
    from icegres.engine.txn import Key, StagedWrite, TxnState


def rewrite_matching(qctx: QueryContext, txn: TxnState, key: Key, cond: exp.Expression | None,
                     assigned: dict[str, exp.Expression] | None, params: dict[str, Any] | None, *,
                     delete: bool, alias: exp.Identifier, returned: bool = False,
                     by_position: bool = False) -> tuple[int, pa.Table | None]:
    """Rewrite exactly the data files that hold rows matching `cond` (setting the columns of
    `assigned` to their values there); returns the row count and, if `returned`, the rows
    RETURNING reads: those deleted, or those updated as they are written. `by_position`: a
    table that asks for merge-on-read DELETE or UPDATE has the rows' positions deleted instead,
    where it can (dml/merge_on_read.py)."""
    sets: dict[str, exp.Expression] | None = None
    plan = target_plan(txn, key)
    returning_rows = write_schema(plan).empty_table() if returned else None
    if not plan.files or assigned:
        # PostgreSQL resolves every name before it looks at a row: an unknown column in WHERE or
        # SET is 42703 even when no file (or no row) matches. Planning alone checks that.
        from dataclasses import replace

        from icegres.engine.mounts import to_dataframe

        checked = source(qctx.register_private("target", qctx.zoned(to_dataframe(qctx.ctx, replace(plan, files=())))),
                         alias)
        if assigned:
            sets = assigned_values(qctx, plan, lambda q: q.from_(checked.copy()), assigned, params)
        items = [e.copy() for e in sets.values()] if sets else [exp.Literal.number(1)]
        probe = exp.select(*items).from_(checked)
        if cond is not None:
            probe = probe.where(cond.copy())
        # Executing over no rows still runs the optimizer, whose constant folding reads literals.
        collect(qctx.plan_tree(probe, params))
    if not plan.files:
        return 0, returning_rows
    if by_position and merge_on_read.chosen(txn, key, plan, "delete" if delete else "update") \
            and not (sets and any(c in sets for c in plan.primary_key)):
        # (a primary key updated: its check excludes whole files, so the statement rewrites them)
        return _by_position(qctx, txn, key, plan, cond, sets, params, alias=alias, returned=returned)
    view = source(qctx.register_private("target", with_file_column(qctx, key, plan)), alias)
    hits_query = (exp.select(column(FILE_COLUMN), exp.alias_(exp.Count(this=exp.Star()), "n"))
                  .from_(view).group_by(column(FILE_COLUMN)))
    if cond is not None:
        hits_query = hits_query.where(cond.copy())
    hits = collect(qctx.plan_tree(hits_query, params))
    matched = {p: n for p, n in zip(hits.column(0).to_pylist(), hits.column(1).to_pylist(), strict=True) if n}
    count = sum(matched.values())
    if not matched:
        return 0, returning_rows
    columns = [f.name for f in plan.schema]
    hit = is_true(cond)
    if delete:
        kept = [column(c, alias) for c in columns]
        query = exp.select(*kept).from_(view.copy()).where(exp.and_(in_files(matched), exp.Not(this=exp.Paren(this=hit.copy()))))
        if returned:
            gone = collect(qctx.plan_tree(
                exp.select(*(c.copy() for c in kept)).from_(view.copy()).where(exp.and_(in_files(matched), hit.copy())),
                params))
            returning_rows = conform(gone, plan, key, qctx.env.time_zone)
    else:
        exprs: list[exp.Expression] = []
        for c in columns:
            if sets and c in sets:
                exprs.append(exp.alias_(exp.Case(ifs=[exp.If(this=hit.copy(), true=sets[c].copy())],
                                                 default=column(c, alias)), c, quoted=True))
            else:
                exprs.append(column(c, alias))
        if returned or plan.checks or row_security.checks_writes(qctx, key):
            exprs.append(exp.alias_(hit.copy(), HIT_COLUMN, quoted=True))
        query = exp.select(*exprs).from_(view.copy()).where(in_files(matched))
    data = collect(qctx.plan_tree(query, params))
    marks = None
    if not delete and HIT_COLUMN in data.column_names:
        marks = data.column(HIT_COLUMN)
        data = data.drop_columns([HIT_COLUMN])
    # (the rows a DELETE keeps, and an UPDATE's unchanged ones, are not checked again)
    unchanged = pa.array(np.zeros(data.num_rows, dtype=bool)) if delete else None
    rows = checks.conform(qctx, data, plan, key, changed=marks if marks is not None else unchanged)
    if marks is not None and returned:
        returning_rows = rows.filter(marks)
    if sets and any(c in sets for c in plan.primary_key):
        check_unique(qctx, plan, key, rows, exclude_files=tuple(matched))
    write = txn.write_for(key)
    new_files = write_files(write.target, rows)
    write, orphans = write.rewrite(set(matched), new_files, rows.num_rows, read=True)
    txn.stage(write, orphans)
    return count, returning_rows


def _by_position(qctx: QueryContext, txn: TxnState, key: Key, plan: ReadPlan, cond: exp.Expression | None,
                 sets: dict[str, exp.Expression] | None, params: dict[str, Any] | None, *, alias: exp.Identifier,
                 returned: bool) -> tuple[int, pa.Table | None]:
    """`rewrite_matching` merge-on-read: one query gives the matching rows' files and positions
    (and an UPDATE's new row versions, or a DELETE … RETURNING's rows); those positions are
    deleted and the new versions appended."""
    view = source(qctx.register_private("target", with_file_column(qctx, key, plan, positions=True)), alias)
    columns = [f.name for f in plan.schema]
    items: list[exp.Expression] = [column(FILE_COLUMN, alias), column(merge_on_read.POS_COLUMN, alias)]
    if sets is not None:
        items += [exp.alias_(sets[c].copy(), c, quoted=True) if c in sets else column(c, alias) for c in columns]
    elif returned:
        items += [column(c, alias) for c in columns]
    query = exp.select(*items).from_(view)
    if cond is not None:
        query = query.where(cond.copy())
    found = collect(qctx.plan_tree(query, params))
    returning_rows = write_schema(plan).empty_table() if returned else None
    if not found.num_rows:
        return 0, returning_rows
    positions = merge_on_read.positions_of(found, FILE_COLUMN)
    data = found.drop_columns([FILE_COLUMN, merge_on_read.POS_COLUMN])
    rows = None
    if sets is not None:
        rows = checks.conform(qctx, data, plan, key, command="update")  # (every row here is a new version: all checked)
        returning_rows = rows if returned else None
    elif returned:
        returning_rows = conform(data, plan, key, qctx.env.time_zone)
    merge_on_read.stage(txn, key, positions, rows)
    return found.num_rows, returning_rows


def assigned_values(qctx: QueryContext, plan: ReadPlan, frame: Frame, assigned: dict[str, exp.Expression],
                    params: dict[str, Any] | None) -> dict[str, exp.Expression]:
    """An UPDATE's SET values as they are written: overflow-checked, rounded into integer
    columns as PostgreSQL rounds, and cast to their columns' types. `frame(select)` gives a
    probe the FROM clause the values are computed over (the target, and an UPDATE … FROM's
    sources), for their types."""
    sets = _bounded(qctx, frame, assigned, params)
    # Assignments take the column's type, as PostgreSQL's assignment casts do: a literal is read
    # as that type (exact decimals; 'abc' into an int column is an error even if no row matches),
    # and a CASE over a double column is not widened to the literal's.
    types = {f.name: f.type for f in plan.schema}
    # One probe plans the values whose type matters: every expression (an untyped literal or a
    # parameter takes its column's type) and every value into an integer column (rounding).
    def plain(e: exp.Expression) -> bool:
        return is_untyped(e) or isinstance(e, exp.Parameter | exp.Placeholder)

    probed = [c for c, e in sets.items() if pa.types.is_integer(types[c]) or not plain(e)]
    planned: dict[str, pa.DataType] = {}
    if probed:
        # The names must differ: two values that spell alike are two items.
        probe = exp.select(*(exp.alias_(sets[c].copy(), f"_{i}", quoted=True) for i, c in enumerate(probed)))
        planned = {c: f.type for c, f in zip(probed, qctx.plan_tree(frame(probe), params).df.schema(), strict=True)}
    for c, value in sets.items():
        if not plain(value):  # an expression of a type with no assignment cast to its column's: 42804
            check_assignable(c, planned[c], types[c])
    sets = _rounded_into_integers(sets, types, planned)
    # A numeric literal into a numeric column: exact (DataFusion's float64 reading of `1.005` cast
    # to numeric(6,2) gave 1.00; PostgreSQL's numeric gives 1.01). typed_literals leaves UPDATE
    # literals float64, not knowing the column (a decimal would damage a double column).
    sets = {c: (exact_number(e, room=False) or e) if pa.types.is_decimal(types[c]) else e for c, e in sets.items()}
    return {c: assignment(e, types[c]) for c, e in sets.items()}


Frame = Callable[[exp.Select], exp.Select]


def _bounded(qctx: QueryContext, frame: Frame, assigned: dict[str, exp.Expression],
             params: dict[str, Any] | None) -> dict[str, exp.Expression]:
    """The SET values, their integer `+ - *` computed so that overflow is 22003 rather than a
    wrapped value (checked_arith.py); `frame` gives the FROM clause, for their types. The values
    are changed in place (they are the caller's own copy of the statement) and come back detached."""
    from icegres.engine.checked_arith import arithmetic_nodes, check_overflow

    nodes = [node for value in assigned.values() for node in arithmetic_nodes(value)]
    if nodes:
        # A value that is itself a `+ - *` is replaced in its SET item: read each back from there.
        holders = {c: (value.parent, value.arg_key) for c, value in assigned.items()}
        probe = exp.select(*(exp.alias_(node.copy(), f"_{i}", quoted=True) for i, node in enumerate(nodes)))
        types = [f.type for f in qctx.plan_tree(frame(probe), params).df.schema()]
        check_overflow(nodes, types)
        assigned = {c: parent.args[key] for c, (parent, key) in holders.items()}
    # Each value read as its place in the UPDATE means it (numeric literals exact) while it is
    # still there: from here on it is built into other queries.
    return {c: typed_literals(value) for c, value in assigned.items()}


def _rounded_into_integers(sets: dict[str, exp.Expression], types: dict[str, pa.DataType],
                           planned: dict[str, pa.DataType]) -> dict[str, exp.Expression]:
    """SET values of integer columns whose type (`planned`, from the probe) is fractional,
    rounded as PostgreSQL rounds them into an integer (DataFusion's cast truncates: `SET n = n *
    1.5` stored 22 for 15, not 23).

    PostgreSQL rounds numeric half away from zero and float8 half to even. DataFusion reads a
    decimal literal as a double, so a double value is taken for numeric, as PostgreSQL types
    it, unless it reads a real or double column (which makes PostgreSQL's expression float8).
    """
    integer = [c for c in sets if pa.types.is_integer(types[c])]
    if not integer:
        return sets
    floats = {name for name, t in types.items() if pa.types.is_floating(t)}
    out = dict(sets)
    for c in integer:
        value, planned_type = sets[c], planned[c]
        if pa.types.is_floating(planned_type) and floats and any(col.name in floats for col in value.find_all(exp.Column)):
            # Half to even: round(v / 2) * 2 where v is exactly half way.
            half = exp.EQ(this=exp.Abs(this=exp.Sub(this=exp.Paren(this=value.copy()), expression=_call("trunc", value))),
                          expression=exp.Literal.number("0.5"))
            even = exp.Mul(this=exp.Literal.number(2),
                           expression=_call("round", exp.Div(this=exp.Paren(this=value.copy()), expression=exp.Literal.number(2))))
            out[c] = exp.Case(ifs=[exp.If(this=half, true=even)], default=_call("round", value))
        elif pa.types.is_floating(planned_type) or pa.types.is_decimal(planned_type):
            out[c] = _call("round", value)
    return out


def _call(name: str, *args: exp.Expression) -> exp.Expression:
    return exp.Anonymous(this=name, expressions=[a.copy() for a in args])


def check_unique(qctx: QueryContext, plan: ReadPlan, key: Key, rows: pa.Table, exclude_files: tuple[str, ...]) -> None:
    """Opt-in primary key (`icegres.primary-key`): 23505 if `rows` repeat a key among themselves
    or with the table as this transaction sees it (minus `exclude_files`, which are being
    rewritten). The commit re-checks against whatever other sessions committed meanwhile."""
    pk = list(plan.primary_key)
    if not pk or rows.num_rows == 0:
        return
    keys = rows.select(pk)
    dupes = keys.group_by(pk).aggregate([([], "count_all")])
    dupes = dupes.filter(pa.compute.greater(dupes.column("count_all"), 1))
    if dupes.num_rows:
        raise unique_violation(key, pk, dupes.slice(0, 1).select(pk).to_pylist()[0])
    if not plan.files:
        return
    t, n = exp.to_identifier("t"), exp.to_identifier("n")
    new_keys = source(qctx.register_private("new_keys", qctx.ctx.from_arrow(scan_typed(keys))), n)
    table = lake_table(key)
    if exclude_files:
        table = qctx.register_private("pk_target", with_file_column(qctx, key, plan))
    on = exp.and_(*(exp.EQ(this=column(c, t), expression=column(c, n)) for c in pk))
    query = exp.select(*(column(c, t) for c in pk)).from_(source(table, t)).join(new_keys, on=on).limit(1)
    if exclude_files:
        query = query.where(exp.Not(this=exp.Paren(this=in_files(exclude_files, t))))
    hit = collect(qctx.plan_tree(query))
    if hit.num_rows:
        raise unique_violation(key, pk, hit.to_pylist()[0])


def unique_violation(key: Key, pk: list[str], values: dict[str, Any]) -> PgError:
    shown = ", ".join("NULL" if values[c] is None else str(values[c]) for c in pk)
    return PgError("23505", f'duplicate key value violates unique constraint "{key[1]}_pkey"',
                   detail=f"Key ({', '.join(pk)})=({shown}) already exists.")


def compact(txn: TxnState) -> None:
    """Before COMMIT: merge the small files a transaction staged per table into one.

    Every INSERT of a transaction writes its own file (a thousand-row executemany would publish a
    thousand files); reading them back and writing one is cheap next to what a thousand files
    would cost every later scan. Files too large to merge are left as they are."""
    import pyarrow.parquet as pq

    for write in list(txn.writes.values()):
        if write.pending:
            write = txn.settle(write.key)
        if len(write.added) < 2 or any(not f.matches_schema for f in write.remapped.values()):
            continue  # (files staged before and after an ALTER of the columns have other schemas)
        table: Any = write.base.table
        target = int(table.metadata.properties.get("write.target-file-size-bytes", 512 * 1024 * 1024))
        if sum(f.file_size_in_bytes for f in write.added.values()) > target:
            continue
        parts = []
        for path in write.added:
            with table.io.new_input(path).open() as f:
                parts.append(pq.read_table(f))
        schema = write_schema(write.target)
        # (a column dropped by an ALTER in the block is still in the files staged before it)
        rows = pa.concat_tables(parts, promote_options="permissive").select(schema.names).cast(schema)
        merged = write_files(write.target, rows)
        write, orphans = write.rewrite(set(write.added), merged, 0)
        txn.stage(write, orphans)


def append(txn: TxnState, key: Key, rows: pa.Table, *, read: bool = False) -> None:
    """Stage `rows` as new data files of the table; `read`: computing them read the table.

    In a transaction block, rows that read nothing of the table wait in memory
    (`StagedWrite.pending`) until something reads its files or the block commits, up to
    PENDING_BYTES_MAX: a block's executemany then writes one file, not one per row."""
    if rows.num_rows == 0:
        return
    write = txn.write_for(key)
    if not txn.autocommit and not read and key[0] != "pg_temp" and write.base.ref is None:
        from icegres.engine import staging

        txn.defer(key, rows, staging.keeping_binding(write_pending))
        if txn.writes[key].pending_bytes > PENDING_BYTES_MAX:
            txn.settle(key)
        return
    write, _ = write.rewrite(set(), write_files(write.target, rows), rows.num_rows, read=read)
    txn.stage(write)


# Pending rows of one table held before they are written as a file.
PENDING_BYTES_MAX = 64 << 20


def write_pending(write: StagedWrite) -> StagedWrite:
    """`write` with its pending rows written as the table's data files."""
    parts = write.pending_rows()
    rows = pa.concat_tables(parts) if len(parts) > 1 else parts[0]
    return write.written(write_files(write.target, rows))
