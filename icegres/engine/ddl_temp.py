"""CREATE / DROP of temporary tables (temp_tables.py): the session's own, never the catalog's.

A CREATE TEMP TABLE inside a block is undone by the block's ROLLBACK (the table is dropped); a
DROP of a temporary table applies at once. Blocking: run in a worker thread.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pyarrow as pa

from icegres.engine import ddl_apply, ddl_ctas
from icegres.engine.ddl_commands import (
    AlterTable,
    CreateIndex,
    CreateTable,
    CreateTableAs,
    DropTable,
)
from icegres.engine.temp_tables import TEMP_SCHEMA, TempTables
from icegres.engine.txn import TxnState
from icegres.pg import errors as e
from icegres.pg.errors import PgError

if TYPE_CHECKING:
    from icegres.engine.query import QueryContext

Key = tuple[str, str]


def is_temp_create(cmd: Any) -> bool:
    return isinstance(cmd, CreateTable | CreateTableAs) and cmd.temporary


def temp_names(qctx: QueryContext, cmd: Any) -> list[str]:
    """The temporary tables a DROP / ALTER / CREATE INDEX names (an unqualified name finds a
    temporary table first, as the search_path has pg_temp first)."""
    temp = qctx.env.temp
    if not temp:
        return []
    if isinstance(cmd, DropTable):
        named = list(cmd.names)
    elif isinstance(cmd, AlterTable):
        named = [(cmd.schema, cmd.name)]
    elif isinstance(cmd, CreateIndex):
        named = [(cmd.schema, cmd.table)]
    else:
        return []
    return [name for schema, name in named if schema in (None, TEMP_SCHEMA) and temp.has(name)]


def create(qctx: QueryContext, txn: TxnState | None, cmd: CreateTable, notices: list[str]) -> None:
    if not _check_new(qctx, cmd, notices):
        return
    schema, spec, properties = ddl_apply.table_definition(cmd)
    _made(qctx, txn, cmd.name, schema, spec, properties)


def create_as(qctx: QueryContext, txn: TxnState | None, cmd: CreateTableAs, data: pa.Table) -> Key | None:
    notices: list[str] = []
    if not _check_new(qctx, cmd, notices):
        return None
    schema, spec, properties = ddl_ctas.arrow_table_definition(cmd, data.schema)
    _made(qctx, txn, cmd.name, schema, spec, properties)
    return (TEMP_SCHEMA, cmd.name)


def drop(qctx: QueryContext, txn: TxnState | None, names: list[str]) -> None:
    temp = qctx.env.temp
    for name in dict.fromkeys(names):
        temp.drop(name)
        if txn is not None:
            key = (TEMP_SCHEMA, name)
            txn.pins.pop(key, None)
            write = txn.writes.pop(key, None)
            if write is not None:
                txn.orphans.extend(write.added)
            txn.version += 1
    qctx.forget_routes()


def refuse(cmd: Any) -> PgError:
    what = "ALTER TABLE" if isinstance(cmd, AlterTable) else "CREATE INDEX"
    return PgError(e.FEATURE_NOT_SUPPORTED, f"{what} of a temporary table is not supported",
                   hint="Create the temporary table with the shape it needs (CREATE TEMP TABLE ... AS).")


def _check_new(qctx: QueryContext, cmd: CreateTable | CreateTableAs, notices: list[str]) -> bool:
    temp = qctx.env.temp
    if temp and temp.has(cmd.name):
        ddl_apply.already_exists(cmd, notices)  # 42P07, or the notice of IF NOT EXISTS
        return False
    return True


def _made(qctx: QueryContext, txn: TxnState | None, name: str, schema: Any, spec: Any,
          properties: dict[str, str]) -> None:
    env = qctx.env
    if env.temp is None:
        env.temp = TempTables(qctx.engine.temp_root)
    plan = env.temp.create(name, schema, spec, properties, qctx.engine.plan_table)
    if txn is not None:
        txn.temp_created.append(name)
        txn.pins[(TEMP_SCHEMA, name)] = plan
        txn.version += 1
    qctx.forget_routes()
