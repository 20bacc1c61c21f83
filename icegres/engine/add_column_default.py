"""ALTER TABLE … ADD COLUMN … DEFAULT on a table that has rows: the rows get the default, as in
PostgreSQL.

Iceberg v2 has no initial-default for the rows already written (pyiceberg cannot write v3
metadata), so the existing rows are rewritten with the column filled: the statement runs as one
transaction of three steps — ADD COLUMN without the default, `UPDATE t SET c = <default>` (per
row, so a volatile default differs per row as PostgreSQL's does), SET DEFAULT — through the block
DDL path (ddl_block.py), whose schema change and rows land in one atomic catalog commit.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

from sqlglot import exp


def candidate(cmd: Any) -> bool:
    """Pure: `cmd` is ADD COLUMNs only, one at least with a DEFAULT (none NOT NULL with one, which
    Iceberg cannot add to rows), so `fills_rows` should look at the table."""
    from icegres.engine.ddl_commands import AddColumn, AlterTable

    if not (isinstance(cmd, AlterTable) and cmd.actions and all(isinstance(a, AddColumn) for a in cmd.actions)):
        return False
    defaulted = [a.column for a in cmd.actions if a.column.default is not None]
    return bool(defaulted) and not any(c.identity for c in defaulted) and not any(
        a.column.not_null and a.column.default is None for a in cmd.actions)


def fills_rows(qctx: Any, cmd: Any, path: list[str]) -> bool:
    """Whether the `candidate` `cmd` adds its columns to a lake table that has rows (blocking)."""
    key = qctx.resolve_table(cmd.schema, cmd.name) or qctx.resolve_mounted(cmd.schema, cmd.name)
    txn = qctx.txn
    plan = (txn.plan(key) if txn is not None and key in txn.pins else qctx.engine.read_plan(*key)) \
        if key is not None else None
    if plan is None or any(a.column.name in plan.schema.names for a in cmd.actions):
        return False  # (the ALTER itself says 42701, or skips with IF NOT EXISTS)
    return bool(plan.files)


def filling(qctx: Any, cmd: Any) -> Callable[[Any], list[str]]:
    """The work of `cmd` (see `fills_rows`) in a transaction: ADD COLUMN (nullable), UPDATE, SET
    DEFAULT and, for a NOT NULL column, SET NOT NULL once no row holds a NULL (23502, as a default
    that is NULL is in PostgreSQL); the caller runs it in one (writes.in_transaction) and commits it."""
    from icegres.engine import ddl_block, dml
    from icegres.engine.ddl_commands import SetDefault, SetNotNull
    from icegres.engine.dml.target import collect
    from icegres.pg.errors import PgError
    from icegres.sql.parse import expression
    from icegres.sql.statement import classify

    path = list(qctx.env.search_path)
    defaulted = [a.column for a in cmd.actions if a.column.default is not None]
    bare = replace(cmd, actions=tuple(replace(a, column=replace(a.column, default=None, not_null=False))
                                      for a in cmd.actions))
    required = [a.column.name for a in cmd.actions if a.column.not_null]
    table = exp.table_(cmd.name, db=cmd.schema, quoted=True)
    update = exp.Update(this=table, expressions=[
        exp.EQ(this=exp.column(c.name, quoted=True), expression=expression(c.default).copy()) for c in defaulted])
    statement = classify(update.sql(dialect="postgres"))
    finish = replace(cmd, actions=(*(SetDefault(c.name, c.default) for c in defaulted),
                                   *(SetNotNull(name) for name in required)))

    def work(txn: Any) -> list[str]:
        notices = ddl_block.apply(qctx, txn, bare, path)
        for c in defaulted:  # (a default that is NULL fills every row with NULL)
            if c.not_null and collect(qctx.plan_tree(exp.select(expression(c.default).copy()))).column(0).null_count:
                raise PgError("23502", f'column "{c.name}" of relation "{cmd.name}" contains null values')
        dml.execute(qctx, txn, statement, None)
        return notices + ddl_block.apply(qctx, txn, finish, path)

    return work
