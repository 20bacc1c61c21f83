"""CHECK constraints enforced where rows are assigned to a table, and checked where they are declared.

Every write path (INSERT, COPY, UPDATE, MERGE, upserts, Flight SQL ingest, the write buffer's
accepted rows) conforms its rows through `conform` here: the assignment casts and NOT NULL of
assign.py, then each CHECK evaluated by DataFusion over the conformed rows. As in PostgreSQL a
row fails a check whose expression is false (NULL passes); the first row that fails anything
is reported, NOT NULL before CHECK, CHECKs in name order, with PostgreSQL's DETAIL.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc
from sqlglot import exp

from icegres.engine import assign, check_text, row_security
from icegres.engine.dml.target import collect
from icegres.pg.errors import PgError
from icegres.pg.row_text import failing_row

if TYPE_CHECKING:
    from icegres.engine.mounts import ReadPlan
    from icegres.engine.query import QueryContext
    from icegres.engine.txn import Key

CHECK_VIOLATION = "23514"


def conform(qctx: QueryContext, data: pa.Table, plan: ReadPlan, key: Key, zone: str | None = None,
            changed: pa.Array | None = None, command: str | None = None) -> pa.Table:
    """`assign.conform` with the table's CHECK constraints enforced (23514). A rewrite gives the
    rows it `changed` (a mask): only those are checked, as PostgreSQL checks only new row
    versions (a NOT VALID check's old rows stay as they were). Row-level security's WITH CHECK
    too (row_security.check_rows): of `command`, by default an INSERT's without `changed`, an
    UPDATE's with it."""
    zone = qctx.env.time_zone if zone is None else zone

    def evaluate(checks: tuple[tuple[str, str], ...], rows: pa.Table) -> pa.Table:
        return _evaluate(qctx, checks, rows)

    if changed is None:
        rows = assign.conform(data, plan, key, zone, checker(qctx, plan, key, zone))
        row_security.check_rows(qctx, rows, key, command or "insert", evaluate)
        return rows
    rows = assign.conform(data, plan, key, zone)
    check = checker(qctx, plan, key, zone)
    new = rows.filter(changed)
    if check is not None:
        violation = check(new, new.num_rows)
        if violation is not None:
            raise violation
    row_security.check_rows(qctx, new, key, command or "update", evaluate)
    return rows


def checker(qctx: QueryContext, plan: ReadPlan, key: Key, zone: str) -> assign.CheckRows | None:
    """The table's checks as `assign.CheckRows` (None for a table with none)."""
    if not plan.checks:
        return None

    def check(rows: pa.Table, upto: int) -> PgError | None:
        found = first_failure(qctx, plan.checks, rows.slice(0, upto))
        if found is None:
            return None
        row, name = found
        return PgError(CHECK_VIOLATION, f'new row for relation "{key[1]}" violates check constraint "{name}"',
                       detail=failing_row(rows, row, zone, plan.char_types))

    return check


def first_failure(qctx: QueryContext, checks: tuple[tuple[str, str], ...], rows: pa.Table) -> tuple[int, str] | None:
    """(row, check name) of the first row for which a check is false, the first such check by
    name; None if every row passes."""
    if not rows.num_rows:
        return None
    results = _evaluate(qctx, checks, rows)
    best: tuple[int, str] | None = None
    for i, (name, _) in enumerate(checks):
        failed = pc.fill_null(pc.equal(results.column(i), False), False)
        if not pc.any(failed).as_py():
            continue
        row = pc.index(failed, True).as_py()
        if best is None or row < best[0]:
            best = (row, name)
    return best


def _evaluate(qctx: QueryContext, checks: tuple[tuple[str, str], ...], rows: pa.Table) -> pa.Table:
    """Each check's value for each row (a boolean column per check, in order)."""
    relation = qctx.register_private("check_rows", qctx.ctx.from_arrow(_plain(rows)))
    query = exp.select(*(exp.alias_(exp.Paren(this=check_text.expression(text)), f"c{i}", quoted=True)
                         for i, (_, text) in enumerate(checks))).from_(relation)
    return collect(qctx.plan_tree(query))


def _plain(rows: pa.Table) -> pa.Table:
    """The rows as DataFusion registers them: every field nullable (a NOT NULL column's NULL is
    reported after the rows before it are checked)."""
    return rows.cast(pa.schema([f.with_nullable(True) for f in rows.schema]))


# --- at DDL ------------------------------------------------------------------------------------


def declared(cmd: Any) -> bool:
    """Whether a DDL command declares a CHECK (CREATE TABLE, ADD COLUMN, ADD CONSTRAINT): pure."""
    from icegres.engine.ddl_commands import AddCheck, AddColumn, AlterTable, CreateTable, SetNotNull

    if isinstance(cmd, CreateTable):
        return bool(cmd.checks)
    return isinstance(cmd, AlterTable) and any(
        isinstance(a, AddCheck | SetNotNull) or (isinstance(a, AddColumn) and a.column.checks) for a in cmd.actions)


def check_declared(qctx: QueryContext, cmd: Any) -> None:
    """The CHECKs a CREATE TABLE or ALTER TABLE declares, planned over the table's columns: a
    column that does not exist is 42703, an expression that is not boolean 42804, as PostgreSQL
    refuses them when declared; ADD CONSTRAINT also reads the table's rows (23514 where one
    fails, unless NOT VALID)."""
    from pyiceberg.io.pyarrow import schema_to_pyarrow

    from icegres.engine.ddl_apply import iceberg_schema_for
    from icegres.engine.ddl_commands import AddCheck, AddColumn, CreateTable, SetNotNull

    if isinstance(cmd, CreateTable):
        arrow = schema_to_pyarrow(iceberg_schema_for(cmd.columns, cmd.primary_key))
        for check in cmd.checks:  # (the columns' too)
            _typed(qctx, check.text, arrow)
        return
    found = qctx.resolve_table(cmd.schema, cmd.name) or qctx.resolve_mounted(cmd.schema, cmd.name)
    plan = qctx.engine.read_plan(*found) if found is not None else None
    if plan is None:
        return  # (the ALTER says what is missing)
    schema = plan.schema
    for action in cmd.actions:
        if isinstance(action, AddColumn):
            added = schema_to_pyarrow(iceberg_schema_for([action.column]))
            if action.column.name not in schema.names:
                schema = pa.schema([*schema, *added])
            for check in action.column.checks:
                _typed(qctx, check.text, schema)
        elif isinstance(action, AddCheck):
            _typed(qctx, action.check.text, schema)
            if not action.check.not_valid:
                _no_row_fails(qctx, found, plan, action.check)
        elif isinstance(action, SetNotNull) and action.name in plan.schema.names:
            no_nulls(qctx, found, action.name)


def _typed(qctx: QueryContext, text: str, schema: pa.Schema) -> None:
    empty = pa.Table.from_batches([], schema=pa.schema([f.with_nullable(True) for f in schema]))
    relation = qctx.register_private("check_columns", qctx.ctx.from_arrow(empty))
    query = exp.select(exp.alias_(exp.Paren(this=check_text.expression(text)), "c", quoted=True)).from_(relation)
    result = collect(qctx.plan_tree(query)).schema.field(0).type
    if not (pa.types.is_boolean(result) or pa.types.is_null(result)):
        from icegres.engine.view_ddl import type_name

        raise PgError("42804", f"argument of CHECK must be type boolean, not type {type_name(result)}")


def no_nulls(qctx: QueryContext, key: Key, column: str) -> None:
    """SET NOT NULL reads the rows there: 23502 if one holds a NULL in `column`."""
    table = exp.table_(key[1], db=key[0], quoted=True)
    null = exp.Is(this=exp.column(column, quoted=True), expression=exp.Null())
    if collect(qctx.plan_tree(exp.select(exp.Literal.number(1)).from_(table).where(null).limit(1))).num_rows:
        raise PgError("23502", f'column "{column}" of relation "{key[1]}" contains null values')


def _no_row_fails(qctx: QueryContext, key: Key, plan: ReadPlan, check: Any) -> None:
    """ALTER TABLE … ADD CHECK reads the rows already there: 23514 if one fails."""
    table = exp.table_(key[1], db=key[0], quoted=True)
    failing = exp.Is(this=exp.Paren(this=check_text.expression(check.text)), expression=exp.false())
    found = collect(qctx.plan_tree(exp.select(exp.Literal.number(1)).from_(table).where(failing).limit(1)))
    if found.num_rows:
        taken = [n for n, _ in plan.checks] + ([f"{key[1]}_pkey"] if plan.primary_key else [])
        name = check.name or check_text.named(key[1], [check], taken)[0][0]
        raise PgError(CHECK_VIOLATION, f'check constraint "{name}" of relation "{key[1]}" is violated by some row')
