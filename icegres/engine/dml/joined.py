"""UPDATE … FROM and DELETE … USING: target rows joined to other relations, rewritten copy-on-write.

PostgreSQL's meaning: the FROM (USING) list is joined to the target under WHERE; each target row
that joins is updated (deleted) once, however many source rows it joins, and an UPDATE takes its
values from one of them — PostgreSQL leaves which unspecified; here it is the first the join
produces. The data files holding joined rows are found first (a join over the table with each
row's file as a column, so Parquet statistics still prune the target), then only those files'
rows are read, numbered, joined again for the new values, and written back whole.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute  # noqa: F401  (pa.compute)
from sqlglot import exp

from icegres.engine.assign import conform, write_schema
from icegres.engine.dml import checks, merge_on_read
from icegres.engine.dml.copy_on_write import assigned_values, check_unique, write_files
from icegres.engine.dml.returning_joined import source_columns
from icegres.engine.dml.target import (
    FILE_COLUMN,
    POS_COLUMN,
    collect,
    column,
    in_files,
    scan_typed,
    source,
    target_plan,
    with_file_column,
)

if TYPE_CHECKING:
    from collections.abc import Callable

    from icegres.engine.dml.copy_on_write import Frame
    from icegres.engine.mounts import ReadPlan
    from icegres.engine.query import QueryContext
    from icegres.engine.txn import Key, TxnState

ROW_COLUMN = "__icegres_row"


def rewrite_joined(qctx: QueryContext, txn: TxnState, key: Key, sources: list[exp.Expression],
                   cond: exp.Expression | None, assigned: dict[str, exp.Expression] | None,
                   params: dict[str, Any] | None, *, alias: exp.Identifier,
                   returning: exp.Returning | None = None) -> tuple[int, pa.Table | None, exp.Returning | None]:
    """UPDATE (`assigned`) or DELETE (None) of the target rows that join `sources` under `cond`;
    the count and, with a `returning` list, the rows updated (as written) or deleted with the
    source columns it reads beside them, and the list as it reads them (returning_joined.py)."""
    from icegres.engine.mounts import to_dataframe

    _refuse_repeated_names(alias, sources)
    plan = target_plan(txn, key)
    returned = returning is not None

    def framed(target: exp.Table) -> Frame:
        return frame_of(target, alias, sources, cond)

    # Names and types first, over no target rows: an unknown column is an error even when
    # nothing joins, as in PostgreSQL.
    checked = qctx.register_private("target", qctx.zoned(to_dataframe(qctx.ctx, replace(plan, files=()))))
    sets = assigned_values(qctx, plan, framed(checked), assigned, params) if assigned else None
    items = [e.copy() for e in sets.values()] if sets else [exp.Literal.number(1)]
    carried = source_columns(qctx, returning, alias.name, plan.schema.names, sources, framed(checked), params) \
        if returning is not None else None
    probe = collect(qctx.plan_tree(framed(checked)(exp.select(*items, *(carried.select if carried else ()))), params))
    extra = probe.select(probe.column_names[len(items):]) if carried else None
    empty = _beside(write_schema(plan).empty_table(), extra) if returned else None
    said = carried.returning if carried else None
    if not plan.files:
        return 0, empty, said

    if merge_on_read.chosen(txn, key, plan, "delete" if sets is None else "update") \
            and not (sets and any(c in sets for c in plan.primary_key)):
        # (a primary key updated: its check excludes whole files, so the statement rewrites them)
        count, returned_rows = _by_position(qctx, txn, key, plan, framed, alias, sets,
                                            carried.select if carried else None, params, returned)
        return count, (returned_rows if count else empty), said
    view = qctx.register_private("target", with_file_column(qctx, key, plan))
    matched = joined_files(qctx, framed(view), alias, params)
    if not matched:
        return 0, empty, said
    base, rows_view = numbered_rows(qctx, plan, key, view, alias, matched)
    n = base.num_rows
    values = [exp.alias_(e.copy(), f"_{i}", quoted=True) for i, e in enumerate((sets or {}).values())]
    extras = [e.copy() for e in carried.select] if carried else []
    joined = without_views(collect(qctx.plan_tree(
        framed(rows_view)(exp.select(column(ROW_COLUMN, alias), *values, *extras)), params)))
    ids, first = np.unique(joined.column(0).to_numpy(), return_index=True)
    sources_of = joined.take(pa.array(first)).select(joined.column_names[1 + len(values):]) if carried else None
    count = len(ids)
    if sets is None:
        keep = np.ones(n, dtype=bool)
        keep[ids] = False
        gone = base.take(pa.array(ids))
        rows = base.filter(pa.array(keep))
        returned_rows = _beside(gone, sources_of) if returned else None
    else:
        # Each updated row's new value sits after the n old ones: one `take` per column.
        positions = np.arange(n, dtype=np.int64)
        positions[ids] = n + np.arange(count, dtype=np.int64)
        picked = joined.take(pa.array(first))
        new = base
        for i, name in enumerate(sets):
            old = base.column(name)
            value = assigned_to(picked.column(i + 1), base.schema.field(name), key, qctx.env.time_zone)
            merged = pa.concat_arrays([old.combine_chunks(), value])
            new = new.set_column(new.schema.get_field_index(name), name, merged.take(pa.array(positions)))
        changed = np.zeros(n, dtype=bool)
        changed[ids] = True
        # (the new values' NOT NULL and lengths; CHECKs of the changed rows only)
        rows = checks.conform(qctx, new, plan, key, changed=pa.array(changed))
        returned_rows = _beside(rows.take(pa.array(ids)), sources_of) if returned else None
        if any(c in sets for c in plan.primary_key):
            check_unique(qctx, plan, key, rows, exclude_files=tuple(matched))
    write = txn.write_for(key)
    write, orphans = write.rewrite(matched, write_files(write.target, rows), rows.num_rows, read=True)
    txn.stage(write, orphans)
    return count, returned_rows, said


def _by_position(qctx: QueryContext, txn: TxnState, key: Key, plan: ReadPlan, framed: Callable[[exp.Table], Frame],
                 alias: exp.Identifier, sets: dict[str, exp.Expression] | None, carried: list[exp.Expression] | None,
                 params: dict[str, Any] | None, returned: bool) -> tuple[int, pa.Table | None]:
    """`rewrite_joined` merge-on-read (dml/merge_on_read.py): one join gives each joined target
    row's file and position, its columns and new values (and the source columns RETURNING reads);
    a row joined several times takes the first pair the join produces, as the rewrite does."""
    view = qctx.register_private("target", with_file_column(qctx, key, plan, positions=True))
    columns = plan.schema.names
    olds = [exp.alias_(column(c, alias), f"_t_{j}", quoted=True) for j, c in enumerate(columns)] \
        if sets is not None or returned else []
    values = [exp.alias_(e.copy(), f"_{i}", quoted=True) for i, e in enumerate((sets or {}).values())]
    extras = [e.copy() for e in carried] if carried else []
    joined = without_views(collect(qctx.plan_tree(
        framed(view)(exp.select(column(FILE_COLUMN, alias), column(POS_COLUMN, alias), *olds, *values, *extras)),
        params)))
    if not joined.num_rows:
        return 0, None
    files = pa.compute.dictionary_encode(joined.column(FILE_COLUMN)).combine_chunks().indices.to_numpy()
    rows_at = files.astype(np.int64) << 40 | joined.column(POS_COLUMN).to_numpy()
    _, first = np.unique(rows_at, return_index=True)
    picked = joined.take(pa.array(np.sort(first)))
    positions = merge_on_read.positions_of(picked.select([FILE_COLUMN, POS_COLUMN]), FILE_COLUMN)
    sources_of = picked.select(joined.column_names[2 + len(olds) + len(values):]) if carried else None
    old = pa.table({c: picked.column(f"_t_{j}") for j, c in enumerate(columns)}) if olds else None
    rows, returned_rows = None, None
    if sets is None:
        if returned:
            assert old is not None
            returned_rows = _beside(conform(old, plan, key, qctx.env.time_zone), sources_of)
    else:
        schema = write_schema(plan)
        names = list(sets)
        new = {c: assigned_to(picked.column(f"_{names.index(c)}"), schema.field(c), key, qctx.env.time_zone)
               if c in sets else picked.column(f"_t_{j}") for j, c in enumerate(columns)}
        rows = checks.conform(qctx, pa.table(new), plan, key, command="update")  # (every row a new version: all checked)
        returned_rows = _beside(rows, sources_of) if returned else None
    merge_on_read.stage(txn, key, positions, rows)
    return picked.num_rows, returned_rows


def _beside(rows: pa.Table, extra: pa.Table | None) -> pa.Table:
    """The target's rows with the source columns RETURNING reads beside them."""
    if extra is None:
        return rows
    for name in extra.column_names:
        rows = rows.append_column(name, extra.column(name))
    return rows


def assigned_to(values: pa.ChunkedArray, field: pa.Field, key: Key, zone: str) -> pa.Array:
    """New values of a column as the column holds them, assigned as PostgreSQL assigns (a
    nanosecond now() rounds to microseconds); NOT NULL and lengths are the caller's conform's."""
    from icegres.engine.assign import conform_to

    one = pa.table({field.name: values})
    return conform_to(one, pa.schema([field.with_nullable(True)]), key, zone).column(0).combine_chunks()


def without_views(table: pa.Table) -> pa.Table:
    """`table` with DataFusion's string and binary views as plain strings and binaries, which
    `take` and `concat_arrays` handle."""
    fields = [f.with_type(pa.string()) if pa.types.is_string_view(f.type)
              else f.with_type(pa.binary()) if pa.types.is_binary_view(f.type) else f for f in table.schema]
    return table.cast(pa.schema(fields))


def joined_files(qctx: QueryContext, frame: Frame, alias: exp.Identifier, params: dict[str, Any] | None) -> set[str]:
    """The target's data files holding a row the join of `frame` keeps (over the file-column view)."""
    found = collect(qctx.plan_tree(frame(exp.select(column(FILE_COLUMN, alias)).distinct()), params))
    return {p for p in found.column(0).to_pylist() if p is not None}


def numbered_rows(qctx: QueryContext, plan: ReadPlan, key: Key, view: exp.Table, alias: exp.Identifier,
                  files: set[str]) -> tuple[pa.Table, exp.Table]:
    """Every row of `files`, conformed to the table, and a relation of them with each row's
    number (ROW_COLUMN) to join again: the rows a rewrite writes back, and where each is."""
    columns = [f.name for f in plan.schema]
    base = conform(collect(qctx.plan_tree(
        exp.select(*(column(c, alias) for c in columns)).from_(source(view, alias)).where(in_files(files, alias)))),
        plan, key, qctx.env.time_zone)
    numbered = scan_typed(base).append_column(ROW_COLUMN, pa.array(np.arange(base.num_rows, dtype=np.int64)))
    return base, qctx.register_private("target_rows", qctx.ctx.from_arrow(numbered))


def frame_of(target: exp.Table, alias: exp.Identifier, sources: list[exp.Expression],
             cond: exp.Expression | None) -> Frame:
    """`frame(select)`: `select … FROM target AS alias, <sources> WHERE cond`."""
    def frame(select: exp.Select) -> exp.Select:
        select = select.from_(source(target, alias))
        for item in sources:  # `FROM s JOIN u ON …, q`: each item with the joins it carries
            item = item.copy()
            joins = item.args.pop("joins", None) or []
            select = select.join(item)
            for join in joins:
                select.append("joins", join)
        return select.where(cond.copy()) if cond is not None else select
    return frame


def _refuse_repeated_names(alias: exp.Identifier, sources: list[exp.Expression]) -> None:
    """42712, as PostgreSQL: the target's name (or alias) given again in the FROM/USING list
    (`UPDATE t … FROM t`), which would make every reference to it ambiguous."""
    from icegres.pg.errors import PgError

    items = [node for item in sources for node in (item, *(j.this for j in item.args.get("joins") or []))]
    for node in items:
        given = node.alias_or_name if isinstance(node, exp.Table | exp.Subquery) else ""
        if given and given == alias.name:
            raise PgError("42712", f'table name "{given}" specified more than once')
