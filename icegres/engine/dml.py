"""INSERT, UPDATE, DELETE and TRUNCATE as copy-on-write changes staged into a transaction.

Rows are computed by DataFusion over the transaction's view of the tables (its pins plus its own
staged writes) and written as new Parquet data files by pyiceberg's writer. UPDATE and DELETE
first ask which data files hold matching rows (one grouped query over the table with each file's
path as a column, so Parquet statistics still prune), then rewrite only those files. Nothing here
publishes: the staged write goes to the commit machine at COMMIT (or at once, in autocommit).

All functions block; the session calls them from worker threads.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute  # noqa: F401  (pa.compute)

from icegres.engine.assign import assignment, conform, write_schema
from icegres.engine.insert_shape import InsertShape, compile_shape
from icegres.engine.txn import Key, TxnState
from icegres.pg.errors import PgError

if TYPE_CHECKING:
    from collections.abc import Iterable

    import sqlglot.expressions as exp

    from icegres.engine.mounts import ReadPlan
    from icegres.engine.planned import PlannedQuery
    from icegres.engine.query import QueryContext

FILE_COLUMN = "__icegres_file"
_HIT_COLUMN = "__icegres_hit"  # an UPDATE ... RETURNING's mark of the rows it changed



@dataclass(frozen=True)
class DmlResult:
    tag: str
    returning: pa.Table | None = None


def parse(sql: str) -> exp.Expression:
    """The statement's sqlglot tree, parsed once per text (Parse/Describe and each Execute of a
    prepared INSERT share it; callers never mutate it)."""
    return _parse_cached(sql)


@functools.lru_cache(maxsize=256)
def _parse_cached(sql: str) -> exp.Expression:
    from icegres.engine.sql import parse as parse_sql

    return parse_sql(sql)


def _sql(expr: exp.Expression) -> str:
    from icegres.engine.pg_rewrite import to_sql

    return to_sql(expr)


def execute(qctx: QueryContext, txn: TxnState, sql: str, params: dict[str, Any] | None) -> DmlResult:
    """Stage one DML statement's effect into `txn` and return its command tag (and RETURNING rows)."""
    import sqlglot.expressions as exp

    tree = parse(sql)
    _pin(qctx, txn, sql, tree)
    if isinstance(tree, exp.Insert):
        return _insert(qctx, txn, tree, params)
    if isinstance(tree, exp.Update):
        return _update(qctx, txn, tree, params)
    if isinstance(tree, exp.Delete):
        return _delete(qctx, txn, tree, params)
    if isinstance(tree, exp.TruncateTable):
        for table in tree.expressions:
            key = _target(qctx, txn, table)
            _rewrite(qctx, txn, key, None, None, params, delete=True)
        return DmlResult("TRUNCATE TABLE")
    raise PgError("0A000", f"statement is not supported: {sql.split(None, 1)[0].upper()}")


def _pin(qctx: QueryContext, txn: TxnState | None, sql: str, tree: exp.Expression) -> None:
    """Pin the snapshots the statement works on.

    An autocommit INSERT … VALUES reads no table, so it builds on the mounted snapshot without a
    catalog round trip: if another writer committed meanwhile, the commit is rejected and the
    commit machine rebases the append onto the new head. A primary-key target is the exception —
    its uniqueness check reads the table — and is pinned fresh.
    """
    import sqlglot.expressions as exp

    blind = (txn is not None and txn.autocommit and isinstance(tree, exp.Insert)
             and isinstance(tree.expression, exp.Values) and tree.expression.find(exp.Select) is None)
    if not blind:
        qctx.pin_for(sql)
        return
    qctx.pin_for(sql, fresh=False)
    target = tree.this.this if isinstance(tree.this, exp.Schema) else tree.this
    key = qctx.resolve_table(target.db or None, target.name)
    plan = txn.pins.get(key) if key is not None else None
    if plan is None or plan.primary_key:
        if key is not None:
            txn.pins.pop(key, None)
        qctx.pin_for(sql)


def describe(qctx: QueryContext, sql: str) -> tuple[pa.Schema | None, dict[int, pa.DataType]]:
    """RETURNING columns and parameter types of a DML statement, without running it."""
    import sqlglot.expressions as exp

    from icegres.engine.params import placeholder_types

    tree = parse(sql)
    qctx.pin_for(sql, fresh=False)
    txn = qctx.txn
    table = tree.this.this if isinstance(tree, exp.Insert) and isinstance(tree.this, exp.Schema) else (
        tree.this if not isinstance(tree, exp.TruncateTable) else None)
    if table is None:
        return None, {}
    key = _target(qctx, txn, table)
    plan = _plan_of(txn, key)
    types: dict[int, pa.DataType] = {}
    by_name = {f.name: f.type for f in plan.schema}
    if isinstance(tree, exp.Insert):
        columns = _insert_columns(tree, plan)
        source = tree.expression
        if isinstance(source, exp.Values):
            for row in source.expressions:
                for i, value in enumerate(row.expressions):
                    if isinstance(value, exp.Parameter) and i < len(columns):
                        types[int(value.this.this)] = by_name[columns[i]]
        elif source is not None:
            types.update(placeholder_types(qctx.plan(_sql(source), None).df))
    elif isinstance(tree, exp.Update):
        for set_item in tree.expressions:
            name = set_item.this.name
            if isinstance(set_item.expression, exp.Parameter) and name in by_name:
                types[int(set_item.expression.this.this)] = by_name[name]
    where = tree.args.get("where")
    if where is not None and not isinstance(tree, exp.Insert):
        probe = f"SELECT 1 FROM {_quoted(key)} AS {_alias(tree.this, key)} WHERE {_sql(where.this)}"
        for index, dtype in placeholder_types(qctx.plan(probe, None).df).items():
            types.setdefault(index, dtype)
    returning = tree.args.get("returning")
    schema = None
    if returning is not None:
        select = ", ".join(_sql(e) for e in returning.expressions)
        planned = qctx.plan(f"SELECT {select} FROM {_quoted(key)} AS {_alias(table, key)}", None)
        schema = qctx.pg_schema(f"SELECT {select}", planned.df.schema())
    return schema, types


# --- statements ------------------------------------------------------------------------------


@dataclass(frozen=True)
class InsertRows:
    """An INSERT computed but not written: the write buffer's path (`insert_rows`)."""

    key: Key
    rows: pa.Table
    returning: pa.Table | None

    @property
    def tag(self) -> str:
        return f"INSERT 0 {self.rows.num_rows}"


def insert_rows(qctx: QueryContext, txn: TxnState, sql: str, params: dict[str, Any] | None) -> InsertRows | None:
    """An autocommit INSERT's conformed rows and RETURNING rows, exactly as `execute` computes
    them, with nothing written or staged. None when the write buffer must not take the statement
    (not an INSERT, or a primary-key target: the key check needs every row in the lake)."""
    import sqlglot.expressions as exp

    tree = parse(sql)
    if not isinstance(tree, exp.Insert) or tree.args.get("conflict") is not None:
        return None  # ON CONFLICT: `execute` says what it means on this table
    _pin(qctx, qctx.txn, sql, tree)
    table = tree.this.this if isinstance(tree.this, exp.Schema) else tree.this
    key = _target(qctx, txn, table)
    if _plan_of(txn, key).primary_key:
        return None
    key, rows, shape = _insert_rows(qctx, txn, tree, params)
    returning = None
    if tree.args.get("returning") is not None:
        returning = _returning(qctx, tree.args["returning"], rows, table, key)
    elif shape is not None:
        qctx.insert_shapes.keep(sql, qctx.env.search_path, shape)
    return InsertRows(key, rows, returning)


def _insert(qctx: QueryContext, txn: TxnState, tree: exp.Insert, params: dict[str, Any] | None) -> DmlResult:
    import sqlglot.expressions as exp

    if tree.args.get("conflict") is not None:
        return _upsert(qctx, txn, tree, params)
    key, rows, _ = _insert_rows(qctx, txn, tree, params)
    plan = _plan_of(txn, key)
    _check_unique(qctx, plan, key, rows, exclude_files=())
    _append(txn, key, rows)
    returning = None
    if tree.args.get("returning") is not None:
        table = tree.this.this if isinstance(tree.this, exp.Schema) else tree.this
        returning = _returning(qctx, tree.args["returning"], rows, table, key)
    return DmlResult(f"INSERT 0 {rows.num_rows}", returning)


def _rows_one_by_one(qctx: QueryContext, source: exp.Values, columns: list[str], explicit: bool, plan: ReadPlan,
                     key: Key, params: dict[str, Any] | None) -> pa.Table:
    """The rows of a VALUES list DataFusion cannot give one type per column, each planned alone
    and assigned to the columns' types: PostgreSQL reads `(date '2024-01-01'), ('2024-01-02')` as
    two dates (an untyped literal takes the other rows' type), where DataFusion finds Date32 and
    Utf8 "inconsistent". Each row's text then goes through the column type's input function."""
    tables = []
    for row in source.expressions:
        data = _collect(qctx.plan(_sql(_row_select(row)), params))
        names = _targets(columns, explicit, data.num_columns)
        tables.append(conform(data.rename_columns(names), plan, key, qctx.env.time_zone))
    return pa.concat_tables(tables)


def _targets(columns: list[str], explicit: bool, width: int) -> list[str]:
    """The columns `width` values go to: without a column list, the table's first `width`; a
    mismatch is PostgreSQL's 42601."""
    names = columns if explicit else columns[:width]
    if width != len(names):
        more, fewer = ("expressions", "target columns") if width > len(names) else ("target columns", "expressions")
        raise PgError("42601", f"INSERT has more {more} than {fewer}")
    return names


def _row_select(row: exp.Expression) -> exp.Expression:
    """One VALUES row as `SELECT value, ...`, its numeric literals exact: the rewrite reads the
    literals of VALUES as numeric, as PostgreSQL does, but not those of a SELECT or a UNION."""
    import sqlglot.expressions as exp

    from icegres.engine.pg_rewrite import exact_number

    return exp.select(*(exact_number(e, room=False) or e.copy() for e in row.expressions))


def _values_as_selects(source: exp.Expression) -> exp.Expression:
    """VALUES rows holding a subquery, as one SELECT per row (UNION ALL): DataFusion 55 plans
    `VALUES (1, (SELECT max(n) FROM t))` and then fails to run it ("ScalarSubqueryExpr evaluated
    before the subquery was executed"); in a select list the same subquery runs."""
    import sqlglot.expressions as exp

    if not isinstance(source, exp.Values) or source.find(exp.Subquery) is None:
        return source
    rows = [_row_select(row) for row in source.expressions]
    out: exp.Expression = rows[0]
    for row in rows[1:]:
        out = exp.union(out, row, distinct=False)
    return out


def _bounded_source(qctx: QueryContext, tree: exp.Insert, params: dict[str, Any] | None) -> exp.Expression:
    """An INSERT ... SELECT's source with the integer `+ - *` of its select list computed so that
    overflow is 22003 (checked_arith.py): a wrapped value among the rows it inserts is stored.
    The select list's types come from planning it with those operations appended as items (so
    GROUP BY and ORDER BY positions still point where they did)."""
    import sqlglot.expressions as exp

    from icegres.engine.checked_arith import arithmetic_nodes, check_overflow

    source = tree.expression
    if not isinstance(source, exp.Select) or not any(arithmetic_nodes(e) for e in source.expressions):
        return source
    source = tree.copy().expression  # the parse is shared; still an INSERT's source (exact literals)
    nodes = [node for item in source.expressions for node in arithmetic_nodes(item)]
    probe = source.copy()
    probe.set("expressions", [*probe.expressions,
                              *(exp.alias_(node.copy(), f"_icegres_{i}", quoted=True) for i, node in enumerate(nodes))])
    types = [f.type for f in qctx.plan(_sql(probe), params).df.schema()][-len(nodes):]
    check_overflow(nodes, types)
    return source


def _insert_rows(qctx: QueryContext, txn: TxnState, tree: exp.Insert,
                 params: dict[str, Any] | None) -> tuple[Key, pa.Table, InsertShape | None]:
    """The target and the conformed rows an INSERT adds (nothing written), and the recipe that
    built them when they came straight from parameters and constants."""
    import sqlglot.expressions as exp

    table = tree.this.this if isinstance(tree.this, exp.Schema) else tree.this
    key = _target(qctx, txn, table)
    plan = _plan_of(txn, key)
    columns = _insert_columns(tree, plan)
    source = tree.expression
    if source is None:  # INSERT ... DEFAULT VALUES
        data = pa.table({c: pa.nulls(1) for c in columns})
    elif (shape := compile_shape(tree, key, plan, columns)) is not None and (rows := shape.rows(params)) is not None:
        # `VALUES ($1, $2), ($3, $4) …` built straight into Arrow, without planning SQL: drivers
        # send multi-row inserts exactly so (executemany, ORMs' bulk inserts), and planning
        # hundreds of placeholders costs far more than the rows. Parameters arrive decoded as the
        # target columns' types (Parse inferred them from the columns), so they convert as they are.
        return key, rows, shape
    else:
        source = _bounded_source(qctx, tree, params)
        source_sql = _sql(_values_as_selects(source))
        # Outside a transaction block the source also sees the write buffer's acked rows.
        with qctx.buffered_reads(qctx.buffered_entries(source_sql)):
            try:
                planned = qctx.plan(source_sql, params)
            except PgError as err:
                if not (isinstance(source, exp.Values) and "Inconsistent data type across values list" in str(err)):
                    raise
                explicit = isinstance(tree.this, exp.Schema)
                return key, _rows_one_by_one(qctx, source, columns, explicit, plan, key, params), None
            columns = _targets(columns, isinstance(tree.this, exp.Schema), len(planned.df.schema()))
            data = _collect(planned)
        data = data.rename_columns(columns)
    return key, conform(data, plan, key, qctx.env.time_zone), None


def _update(qctx: QueryContext, txn: TxnState, tree: exp.Update, params: dict[str, Any] | None) -> DmlResult:
    if tree.args.get("from") or tree.args.get("from_"):
        raise PgError("0A000", "UPDATE ... FROM is not supported; use a subquery in WHERE")
    key = _target(qctx, txn, tree.this)
    plan = _plan_of(txn, key)
    names = {f.name for f in plan.schema}
    tree = tree.copy()  # the parse is shared (`parse`); its SET values are bounded in place
    sets: dict[str, exp.Expression] = {}
    for set_item in tree.expressions:
        name = set_item.this.name
        if name not in names:
            raise PgError("42703", f'column "{name}" of relation "{key[1]}" does not exist')
        if name in sets:
            raise PgError("42601", f'multiple assignments to same column "{name}"')
        sets[name] = set_item.expression
    return _rewrite_rows(qctx, txn, tree, key, sets, params)


def _delete(qctx: QueryContext, txn: TxnState, tree: exp.Delete, params: dict[str, Any] | None) -> DmlResult:
    if tree.args.get("using"):
        raise PgError("0A000", "DELETE ... USING is not supported; use a subquery in WHERE")
    return _rewrite_rows(qctx, txn, tree, _target(qctx, txn, tree.this), None, params)


def _rewrite_rows(qctx: QueryContext, txn: TxnState, tree: exp.Expression, key: Key,
                  sets: dict[str, exp.Expression] | None, params: dict[str, Any] | None) -> DmlResult:
    """An UPDATE (`sets`) or DELETE (None) of the rows its WHERE selects; its tag and RETURNING."""
    where = tree.args.get("where")
    cond = _sql(where.this) if where is not None else None
    returning = tree.args.get("returning")
    count, rows = _rewrite(qctx, txn, key, cond, sets, params, delete=sets is None,
                           alias=_alias(tree.this, key), returned=returning is not None)
    tag = f"{'DELETE' if sets is None else 'UPDATE'} {count}"
    if returning is None:
        return DmlResult(tag)
    return DmlResult(tag, _returning(qctx, returning, rows, tree.this, key))


# --- INSERT ... ON CONFLICT --------------------------------------------------------------------


def _upsert(qctx: QueryContext, txn: TxnState, tree: exp.Insert, params: dict[str, Any] | None) -> DmlResult:
    """INSERT ... ON CONFLICT (key) DO NOTHING | DO UPDATE SET ... [WHERE ...], on a table with a
    primary key (the only unique constraint an icegres table has): rows whose key the table
    already holds (in this transaction's view) are skipped or update that row, copy-on-write, in
    the files that hold it; the others are appended. The tag counts both, as PostgreSQL's does."""
    import sqlglot.expressions as exp

    conflict = tree.args["conflict"]
    table = tree.this.this if isinstance(tree.this, exp.Schema) else tree.this
    key = _target(qctx, txn, table)
    plan = _plan_of(txn, key)
    pk = list(plan.primary_key)
    update = "UPDATE" in str(conflict.args.get("action") or "").upper()
    plain = tree.copy()
    plain.set("conflict", None)
    if not pk and not update and not conflict.args.get("conflict_keys") and conflict.args.get("constraint") is None:
        return _insert(qctx, txn, plain, params)  # DO NOTHING where no row can conflict
    _check_conflict_target(conflict, key, pk, update)
    names = {f.name for f in plan.schema}
    for item in conflict.expressions:  # before any row is looked at, as PostgreSQL checks them
        if item.this.name not in names:
            raise PgError("42703", f'column "{item.this.name}" of relation "{key[1]}" does not exist')
        _unambiguous(item.expression)
    if conflict.args.get("where") is not None:
        _unambiguous(conflict.args["where"].this)
    plain.set("returning", None)
    key, rows, _ = _insert_rows(qctx, txn, plain, params)
    rows = _first_of_each_key(rows, pk, update)
    fresh, changed = rows, rows.schema.empty_table()
    if plan.files:
        incoming = qctx.register_private("incoming", qctx.ctx.from_arrow(_scan_typed(rows)))
        view = qctx.register_private("target", _with_file_column(qctx, plan))
        on = " AND ".join(f"t.{_q(k)} = excluded.{_q(k)}" for k in pk)
        found = _collect(qctx.plan(
            f'SELECT DISTINCT t."{FILE_COLUMN}" AS f, {", ".join(f"t.{_q(k)}" for k in pk)} '
            f"FROM {view} AS t JOIN {incoming} AS excluded ON {on}", params))
        existing = set(_keys(found, pk))
        fresh = rows.filter(pa.array([k not in existing for k in _keys(rows, pk)], pa.bool_()))
        if update and existing:
            changed = _update_conflicting(qctx, txn, tree, key, plan, view, incoming,
                                          set(found.column("f").to_pylist()), pk, params)
    _check_unique(qctx, plan, key, fresh, exclude_files=())
    _append(txn, key, fresh)
    returning = tree.args.get("returning")
    out = None
    if returning is not None:
        out = _returning(qctx, returning, pa.concat_tables([fresh, changed]), table, key)
    return DmlResult(f"INSERT 0 {fresh.num_rows + changed.num_rows}", out)


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
                        view: str, incoming: str, files: set[str], pk: list[str],
                        params: dict[str, Any] | None) -> pa.Table:
    """DO UPDATE: rewrite `files` (of `view`, the table with each row's file), setting the SET
    columns of each row an incoming row conflicts with (and that the WHERE admits); returns those
    rows as written."""
    import sqlglot.expressions as exp

    conflict = tree.args["conflict"]
    alias = _alias(tree.this.this if isinstance(tree.this, exp.Schema) else tree.this, key)
    types = {f.name: f.type for f in plan.schema}
    sets: dict[str, str] = {}
    for item in conflict.expressions:
        sets[item.this.name] = assignment(_sql(item.expression), types[item.this.name])
    where = conflict.args.get("where")
    hit = f"excluded.{_q(pk[0])} IS NOT NULL"  # the row met an incoming one (key columns are NOT NULL)
    if where is not None:
        hit += f" AND ({_sql(where.this)}) IS TRUE"
    on = " AND ".join(f"{alias}.{_q(k)} = excluded.{_q(k)}" for k in pk)
    exprs = [f'CASE WHEN {hit} THEN {sets[c]} ELSE {alias}."{c}" END AS "{c}"' if c in sets
             else f'{alias}."{c}"' for c in types]
    data = _collect(qctx.plan(
        f'SELECT {", ".join(exprs)}, {hit} AS "{_HIT_COLUMN}" FROM {view} AS {alias} '
        f'LEFT JOIN {incoming} AS excluded ON {on} WHERE {alias}."{FILE_COLUMN}" IN ({_paths(files)})', params))
    marks = data.column(_HIT_COLUMN)
    rows = conform(data.drop_columns([_HIT_COLUMN]), plan, key, qctx.env.time_zone)
    if any(c in sets for c in pk):
        _check_unique(qctx, plan, key, rows, exclude_files=tuple(files))
    write = txn.write_for(key)
    write, orphans = write.rewrite(files, _write_files(write.base, rows), rows.num_rows)
    txn.stage(write, orphans)
    return rows.filter(marks)


def _unambiguous(expr: exp.Expression) -> None:
    """A DO UPDATE's expressions see the target and `excluded`, which have the same columns: an
    unqualified one (outside a subquery) is ambiguous (42702), as PostgreSQL says."""
    import sqlglot.expressions as exp

    for column in expr.find_all(exp.Column):
        if not column.table and column.find_ancestor(exp.Subquery) is None:
            raise PgError("42702", f'column reference "{column.name}" is ambiguous')


def _keys(rows: pa.Table, pk: list[str]) -> Iterable[tuple[Any, ...]]:
    """Each row's primary key, as a tuple."""
    return zip(*(rows.column(c).to_pylist() for c in pk), strict=True)


def _scan_typed(rows: pa.Table) -> pa.Table:
    return rows.cast(pa.schema([f.with_type(_scan_type(f.type)) for f in rows.schema]))


def _q(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _paths(paths: Iterable[str]) -> str:
    """Data file paths as an SQL list of string literals (for `"__icegres_file" IN (...)`)."""
    return ", ".join("'" + p.replace("'", "''") + "'" for p in paths)


# --- copy-on-write ----------------------------------------------------------------------------


def _rewrite(qctx: QueryContext, txn: TxnState, key: Key, cond: str | None,
             assigned: dict[str, exp.Expression] | None, params: dict[str, Any] | None, *, delete: bool,
             alias: str | None = None, returned: bool = False) -> tuple[int, pa.Table | None]:
    """Rewrite exactly the data files that hold rows matching `cond` (setting the columns of
    `assigned` to their values there); returns the row count and, if `returned`, the rows
    RETURNING reads: those deleted, or those updated as they are written."""
    sets: dict[str, str] | None = None
    plan = _plan_of(txn, key)
    returning_rows = write_schema(plan).empty_table() if returned else None
    alias = alias or f'"{key[1]}"'
    where = f" WHERE {cond}" if cond else ""
    if not plan.files or assigned:
        # PostgreSQL resolves every name before it looks at a row: an unknown column in WHERE or
        # SET is 42703 even when no file (or no row) matches. Planning alone checks that.
        from dataclasses import replace

        from icegres.engine.mounts import to_dataframe

        checked = qctx.register_private("target", qctx.zoned(to_dataframe(qctx.ctx, replace(plan, files=()))))
        if assigned:
            sets = _bounded(qctx, f"{checked} AS {alias}", assigned, params)
            # Assignments take the column's type, as PostgreSQL's assignment casts do: a literal
            # is read as that type (exact decimals; 'abc' into an int column is an error even if
            # no row matches), and a CASE over a double column is not widened to the literal's.
            types = {f.name: f.type for f in plan.schema}
            sets = _rounded_into_integers(qctx, f"{checked} AS {alias}", sets, types, params)
            sets = {c: assignment(e, types[c]) for c, e in sets.items()}
        exprs = ", ".join(sets.values()) if sets else "1"
        # Executing over no rows still runs the optimizer, whose constant folding reads literals.
        _collect(qctx.plan(f"SELECT {exprs} FROM {checked} AS {alias}{where}", params))
    if not plan.files:
        return 0, returning_rows
    view = qctx.register_private("target", _with_file_column(qctx, plan))
    hits = _collect(qctx.plan(
        f'SELECT "{FILE_COLUMN}", count(*) AS n FROM {view} AS {alias}{where} GROUP BY "{FILE_COLUMN}"', params))
    matched = {p: n for p, n in zip(hits.column(0).to_pylist(), hits.column(1).to_pylist(), strict=True) if n}
    count = sum(matched.values())
    if not matched:
        return 0, returning_rows
    columns = [f.name for f in plan.schema]
    hit = f"({cond}) IS TRUE" if cond else "true"
    in_files = f'"{FILE_COLUMN}" IN ({_paths(matched)})'
    if delete:
        select = ", ".join(f'{alias}."{c}"' for c in columns)
        query = f'SELECT {select} FROM {view} AS {alias} WHERE {in_files} AND NOT ({hit})'
        if returned:
            gone = _collect(qctx.plan(f'SELECT {select} FROM {view} AS {alias} WHERE {in_files} AND {hit}', params))
            returning_rows = conform(gone, plan, key, qctx.env.time_zone)
    else:
        exprs = []
        for c in columns:
            if sets and c in sets:
                exprs.append(f'CASE WHEN {hit} THEN {sets[c]} ELSE {alias}."{c}" END AS "{c}"')
            else:
                exprs.append(f'{alias}."{c}"')
        if returned:
            exprs.append(f'{hit} AS "{_HIT_COLUMN}"')
        query = f'SELECT {", ".join(exprs)} FROM {view} AS {alias} WHERE {in_files}'
    data = _collect(qctx.plan(query, params))
    marks = None
    if not delete and returned:
        marks = data.column(_HIT_COLUMN)
        data = data.drop_columns([_HIT_COLUMN])
    rows = conform(data, plan, key, qctx.env.time_zone)
    if marks is not None:
        returning_rows = rows.filter(marks)
    if sets and any(c in sets for c in plan.primary_key):
        _check_unique(qctx, plan, key, rows, exclude_files=tuple(matched))
    write = txn.write_for(key)
    new_files = _write_files(write.base, rows)
    write, orphans = write.rewrite(set(matched), new_files, rows.num_rows)
    txn.stage(write, orphans)
    return count, returning_rows


def _bounded(qctx: QueryContext, source: str, assigned: dict[str, exp.Expression],
             params: dict[str, Any] | None) -> dict[str, str]:
    """The SET values as SQL, their integer `+ - *` computed so that overflow is 22003 rather
    than a wrapped value (checked_arith.py); `source` is the target table, for their types."""
    from icegres.engine.checked_arith import arithmetic_nodes, check_overflow

    nodes = [node for value in assigned.values() for node in arithmetic_nodes(value)]
    if nodes:
        # A value that is itself a `+ - *` is replaced in its SET item: read each back from there.
        holders = {c: (value.parent, value.arg_key) for c, value in assigned.items()}
        probe = ", ".join(f'{_sql(node)} AS "_{i}"' for i, node in enumerate(nodes))
        types = [f.type for f in qctx.plan(f"SELECT {probe} FROM {source}", params).df.schema()]
        check_overflow(nodes, types)
        assigned = {c: parent.args[key] for c, (parent, key) in holders.items()}
    return {c: _sql(value) for c, value in assigned.items()}


def _rounded_into_integers(qctx: QueryContext, source: str, sets: dict[str, str], types: dict[str, pa.DataType],
                           params: dict[str, Any] | None) -> dict[str, str]:
    """SET values of integer columns whose type is fractional, rounded as PostgreSQL rounds them
    into an integer (DataFusion's cast truncates: `SET n = n * 1.5` stored 22 for 15, not 23).

    PostgreSQL rounds numeric half away from zero and float8 half to even. DataFusion reads a
    decimal literal as a double, so a double value is taken for numeric, as PostgreSQL types
    it, unless it reads a real or double column (which makes PostgreSQL's expression float8).
    """
    integer = [c for c in sets if pa.types.is_integer(types[c])]
    if not integer:
        return sets
    probe = ", ".join(f'{sets[c]} AS "_{i}"' for i, c in enumerate(integer))  # names must differ
    planned = qctx.plan(f"SELECT {probe} FROM {source}", params).df.schema()
    floats = {name for name, t in types.items() if pa.types.is_floating(t)}
    out = dict(sets)
    for c, field in zip(integer, planned, strict=True):
        value = sets[c]
        if pa.types.is_floating(field.type) and floats and _reads_any(value, floats):
            out[c] = (f"CASE WHEN abs(({value}) - trunc({value})) = 0.5 THEN 2 * round(({value}) / 2) "
                      f"ELSE round({value}) END")
        elif pa.types.is_floating(field.type) or pa.types.is_decimal(field.type):
            out[c] = f"round({value})"
    return out


def _reads_any(sql: str, columns: set[str]) -> bool:
    """Whether the expression `sql` names one of `columns` (any qualifier); True if unparsable."""
    import sqlglot
    import sqlglot.expressions as exp

    try:
        tree = sqlglot.parse_one(sql, read="postgres")
    except sqlglot.errors.SqlglotError:
        return True
    return any(col.name in columns for col in tree.find_all(exp.Column))


def _check_unique(qctx: QueryContext, plan: ReadPlan, key: Key, rows: pa.Table, exclude_files: tuple[str, ...]) -> None:
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
    scan = keys.cast(pa.schema([f.with_type(_scan_type(f.type)) for f in keys.schema]))
    new_keys = qctx.register_private("new_keys", qctx.ctx.from_arrow(scan))
    on = " AND ".join(f't."{c}" = n."{c}"' for c in pk)
    source = _quoted(key)
    where = ""
    if exclude_files:
        source = qctx.register_private("pk_target", _with_file_column(qctx, plan))
        where = " WHERE t.\"" + FILE_COLUMN + "\" NOT IN (" + ", ".join("'" + p.replace("'", "''") + "'" for p in exclude_files) + ")"
    cols = ", ".join(f't."{c}"' for c in pk)
    hit = _collect(qctx.plan(f"SELECT {cols} FROM {source} AS t JOIN {new_keys} AS n ON {on}{where} LIMIT 1", None))
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
        if len(write.added) < 2:
            continue
        table: Any = write.base.table
        target = int(table.metadata.properties.get("write.target-file-size-bytes", 512 * 1024 * 1024))
        if sum(f.file_size_in_bytes for f in write.added.values()) > target:
            continue
        parts = []
        for path in write.added:
            with table.io.new_input(path).open() as f:
                parts.append(pq.read_table(f))
        rows = pa.concat_tables(parts, promote_options="permissive").cast(write_schema(write.base))
        merged = _write_files(write.base, rows)
        write, orphans = write.rewrite(set(write.added), merged, 0)
        txn.stage(write, orphans)


def _append(txn: TxnState, key: Key, rows: pa.Table) -> None:
    if rows.num_rows == 0:
        return
    write = txn.write_for(key)
    write, _ = write.rewrite(set(), _write_files(write.base, rows), rows.num_rows)
    txn.stage(write)


def _write_files(base: ReadPlan, rows: pa.Table) -> dict[str, Any]:
    """Write rows as new Parquet data files of the table (partitioned as its spec says)."""
    if rows.num_rows == 0:
        return {}
    from pyiceberg.io.pyarrow import _dataframe_to_data_files

    table: Any = base.table
    files = list(_dataframe_to_data_files(table_metadata=table.metadata, df=rows, io=table.io))
    for f in files:
        # Manifests give read DataFiles their spec id; written ones need it to be deleted later.
        f.spec_id = table.metadata.default_spec_id
    return {f.file_path: f for f in files}


# --- helpers ---------------------------------------------------------------------------------


def _target(qctx: QueryContext, txn: TxnState | None, table: exp.Table) -> Key:
    name = table.name
    schema = table.db or None
    key = qctx.resolve_table(schema, name)
    if key is None:
        shown = f"{schema}.{name}" if schema else name
        raise PgError("42P01", f'relation "{shown}" does not exist')
    if txn is not None and key not in txn.pins:
        raise PgError("42P01", f'relation "{key[0]}.{key[1]}" does not exist')
    return key


def _plan_of(txn: TxnState | None, key: Key) -> ReadPlan:
    assert txn is not None
    plan = txn.plan(key)
    if plan is None:
        raise PgError("42P01", f'relation "{key[0]}.{key[1]}" does not exist')
    if plan.table is None:
        raise PgError("0A000", f"table {key[0]}.{key[1]} cannot be written")
    return plan


def _insert_columns(tree: exp.Insert, plan: ReadPlan) -> list[str]:
    import sqlglot.expressions as exp

    names = [f.name for f in plan.schema]
    if not isinstance(tree.this, exp.Schema):
        # PostgreSQL: without a column list, the first N columns, N the width of VALUES (or of
        # the query, which `_insert_rows` knows once planned); the rest take their defaults.
        source = tree.expression
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


def _quoted(key: Key) -> str:
    return f'"{key[0]}"."{key[1]}"'


def _alias(table: exp.Expression, key: Key) -> str:
    alias = table.args.get("alias") if hasattr(table, "args") else None
    return _q(alias.name if alias is not None else key[1])


def _collect(planned: PlannedQuery) -> pa.Table:
    """Run a plan to the end (its hold kept until then)."""
    from icegres.engine import errors as engine_errors

    try:
        return planned.df.to_arrow_table()
    except Exception as exc:
        raise engine_errors.from_datafusion(exc) from None


def _with_file_column(qctx: QueryContext, plan: ReadPlan) -> Any:
    """The table as a union of per-file scans, each tagged with its path."""
    from dataclasses import replace

    from datafusion import lit

    from icegres.engine.mounts import to_dataframe

    ctx = qctx.ctx
    frames = [
        to_dataframe(ctx, replace(plan, files=(f,)), qctx.engine.stores).with_column(FILE_COLUMN, lit(f.path))
        for f in plan.files
    ]
    df = frames[0]
    for other in frames[1:]:
        df = df.union(other)
    return qctx.zoned(df)


def _returning(qctx: QueryContext, returning: exp.Expression, rows: pa.Table, table: exp.Expression, key: Key) -> pa.Table:
    select = ", ".join(_sql(e) for e in returning.expressions)
    view = qctx.register_private("returning", qctx.ctx.from_arrow(_scan_typed(rows)))
    result = _collect(qctx.plan(f"SELECT {select} FROM {view} AS {_alias(table, key)}", None))
    return result.rename_columns(qctx.pg_schema(f"SELECT {select}", result.schema).names)


def _scan_type(t: pa.DataType) -> pa.DataType:
    if pa.types.is_large_string(t):
        return pa.string()
    if pa.types.is_large_binary(t):
        return pa.binary()
    return t
