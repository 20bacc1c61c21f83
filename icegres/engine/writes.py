"""The write path both front ends share: a write statement staged into a transaction, then
published through the commit machine or discarded.

pgwire (`protocol/pgwire/writes.py`) and Flight SQL (`protocol/flightsql/writes.py`) differ only in
how they receive statements and report results; what a write does to the lake is decided here.
Writes stage into a `TxnState`; outside a transaction each write is its own transaction and
commits at once. Every commit goes through the commit machine
(`icegres.machines.drivers.commit.run_commit`) with a `LakeWorld`; nothing here publishes itself.

A front end plugs in through `WriteHost`: its query context, how it runs blocking work in a
worker thread with that context bound to a transaction, and which transaction block (if any) is
open. These are trio coroutines: pgwire calls them from its trio session, Flight SQL's asyncio
handlers through trio-asyncio.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

import pyarrow as pa

from icegres.engine import time_travel
from icegres.engine.ddl_commands import CreateView
from icegres.engine.procedures import Call
from icegres.engine.txn import Key, TxnState
from icegres.pg import errors as E
from icegres.pg.errors import PgError
from icegres.sql.statement import Statement, query

if TYPE_CHECKING:
    from icegres.engine.ladder_port import WriteLadderPort
    from icegres.engine.query import QueryContext
    from icegres.pg.copy_format import CopyFormat

log = logging.getLogger("icegres.commit")

DML_WORDS = ("INSERT", "UPDATE", "DELETE", "MERGE", "TRUNCATE")
# CALL: the snapshot procedures (procedures.py); GRANT/REVOKE: roles and privileges (acl_commands.py)
DDL_WORDS = ("CREATE", "DROP", "ALTER", "COMMENT", "CALL", "GRANT", "REVOKE", "REASSIGN")


def is_dml(stmt: Statement) -> bool:
    return stmt.tag in DML_WORDS


def is_ddl(stmt: Statement) -> bool:
    return stmt.tag in DDL_WORDS


_MAINTENANCE_TEXT_MAX = 4096


def maintenance_call(stmt: Statement, time_zone: str = "UTC") -> Call | None:
    """The table-maintenance procedure a `CALL system.…` or `ALTER TABLE t EXECUTE …` runs (it
    answers with rows: engine/maintenance/calls.py); None for any other statement."""
    from icegres.engine import procedures

    # (asked on the event loop for every ALTER: no tokenizing for the others, and only its head
    # lowered, where an EXECUTE follows the table's name: a 50 MB SET DEFAULT's lower() held the loop)
    if stmt.tag == "ALTER" and "execute" not in stmt.sql[:_MAINTENANCE_TEXT_MAX].lower():
        return None
    if stmt.tag == "CALL":
        call = procedures.parse_call(stmt.sql, time_zone)
        return call if call.procedure in procedures.MAINTENANCE else None
    if stmt.tag == "ALTER" and procedures.is_execute(stmt.sql):
        return procedures.parse_execute(stmt.sql, time_zone)
    return None


def returns_rows(stmt: Statement) -> bool:
    """Whether a write statement may answer with rows, to describe at Parse: DML (RETURNING)
    and the maintenance procedures. (A CALL that does not parse is reported when it runs.)"""
    if is_dml(stmt):
        return True
    if len(stmt.sql) > _MAINTENANCE_TEXT_MAX:
        return False  # a maintenance call is a line of text; a 50 MB statement is not tokenized at Parse
    try:
        return maintenance_call(stmt) is not None
    except PgError:
        return False


class WriteHost(Protocol):
    """What a front end gives the write path."""

    @property
    def qctx(self) -> QueryContext: ...

    @property
    def idle(self) -> bool:
        """No transaction block is open: an autocommit INSERT may go through the write buffer."""
        ...

    def block(self) -> TxnState | None:
        """The open transaction block's state (made on first use), or None: autocommit."""
        ...

    def new_txn(self, *, autocommit: bool) -> TxnState: ...

    def bind(self, txn: TxnState | None) -> None:
        """From now on, worker-thread work sees `txn` as the query context's transaction."""
        ...

    async def run(self, fn: Callable[..., Any], *args: Any) -> Any:
        """`fn(*args)` in a worker thread, with the query context bound as `bind` said."""
        ...


@dataclass
class WriteResult:
    """What a write statement reports: its command tag, RETURNING rows and notices."""

    tag: str
    returning: pa.Table | None = None
    notices: list[str] = field(default_factory=list)

    @property
    def count(self) -> int:
        """Rows the statement wrote (the tag's last number; 0 for DDL)."""
        last = self.tag.rsplit(" ", 1)[-1]
        return int(last) if last.isdigit() else 0


# --- DML -----------------------------------------------------------------------------------------


async def execute_dml(host: WriteHost, stmt: Statement, values: dict[str, Any] | None) -> WriteResult:
    """INSERT/UPDATE/DELETE/TRUNCATE: staged into the open block, or committed as its own
    transaction (an autocommit INSERT through the write buffer when one runs)."""
    from icegres.engine import dml, row_security

    qctx = host.qctx
    ladder = qctx.engine.ladder
    if ladder is None or not host.idle or qctx.env.temp:  # (a temporary table is no lake's)
        def authorized(txn: TxnState) -> Any:
            # One trip to a worker thread, not three: a block's executemany pays it per row.
            qctx.authorize(stmt)  # (before anything is planned or read)
            return dml.execute(qctx, txn, row_security.applied(qctx, stmt), values)

        result = await outliving_compaction(host, authorized)
        return WriteResult(result.tag, result.returning)
    await host.run(qctx.authorize, stmt)
    stmt = await host.run(row_security.applied, qctx, stmt)
    if stmt.tag == "INSERT":
        buffered = await buffered_insert(host, ladder, stmt, values)
        if buffered is not None:
            return WriteResult(buffered.tag, buffered.returning)
    else:
        # A rewrite must see the buffered rows of the tables it reads as lake files (through
        # the views it reads, too).
        await ladder.settle(await host.run(qctx.expanded_refs, stmt))
    result = await outliving_compaction(host, lambda txn: dml.execute(qctx, txn, stmt, values))
    return WriteResult(result.tag, result.returning)


# Times an autocommit statement runs again after losing its commit to compactions (each retry
# follows a compaction that landed, so this bounds only a table compacted in a tight loop).
COMPACTION_RETRIES = 3
SERIALIZATION_FAILURE = "40001"


async def outliving_compaction(host: WriteHost, work: Callable[[TxnState], Any]) -> Any:
    """`in_transaction`, except that outside a block a statement whose commit lost to a
    compaction runs again on the new head: a compaction (rewrite_data_files) must never make a
    user's write fail. When it commits first, the files an UPDATE or DELETE rewrote are gone
    from the head and the commit machine answers 40001; if every commit since the statement's
    base was an append or a `replace` (rows kept, only files changed), nothing the statement
    read has changed but its files, and running it again is exactly what it meant. (Inside a
    block the statements have answered already: its COMMIT fails with 40001 as before.)"""
    if host.block() is not None:
        return await in_transaction(host, work)
    for _ in range(COMPACTION_RETRIES):
        bases: dict[Key, tuple[int | None, str | None]] = {}

        def tracked(txn: TxnState, bases: dict[Key, tuple[int | None, str | None]] = bases) -> Any:
            result = work(txn)
            bases.update({key: (w.base.snapshot_id, w.base.ref) for key, w in txn.writes.items() if w.removed})
            return result

        try:
            return await in_transaction(host, tracked)
        except PgError as err:
            if err.sqlstate != SERIALIZATION_FAILURE or not bases:
                raise
            if not await host.run(_lost_to_compaction, host.qctx, bases):
                raise
            log.info("statement lost its commit to a compaction of %s; running it again",
                     ", ".join(f"{k[0]}.{k[1]}" for k in bases))
    return await in_transaction(host, work)


def _lost_to_compaction(qctx: QueryContext, bases: dict[Key, tuple[int | None, str | None]]) -> bool:
    """Whether the commits since each table's base are appends and at least one compaction; if
    so, the tables are mounted at their new heads for the statement to run again."""
    from icegres.engine.maintenance.compact import operations_since

    replaced = False
    for key, (base, ref) in bases.items():
        if ref is not None:
            return False  # (a branch's writes: compaction rewrites main only)
        operations = operations_since(qctx.engine.lakehouse.load_table(*key).metadata, base)
        if operations is None or any(op not in ("append", "replace") for op in operations):
            return False
        replaced = replaced or "replace" in operations
    if replaced:
        qctx.engine.refresh(set(bases))
    return replaced


async def buffered_insert(host: WriteHost, ladder: WriteLadderPort, stmt: Statement, values: dict[str, Any] | None) -> Any:
    """An autocommit INSERT through the write buffer: rows computed as the synchronous path does,
    acked once the buffer (and its tail) took them. None: the statement stays synchronous."""
    from icegres.engine import dml, row_security

    qctx = host.qctx
    # A prepared INSERT executed before builds its rows here, on the loop, from its recipe
    # (insert_shape.py: no I/O, and no thread hop, which was a fifth of a tail-dir ack).
    # (Not under icegres.branch: a recipe names main's table, the statement the branch's.)
    # (Nor under row-level security: a recipe's rows are not checked against the policies.)
    skip = time_travel.session_branch(qctx) is not None or not row_security.without_rules(qctx)
    made = None if skip else qctx.insert_shapes.rows_now(
        stmt.sql, qctx.env.search_path, values, qctx.resolve_mounted, qctx.engine.read_plan)
    if made is not None:
        result = dml.InsertRows(made[0], made[1], None)
    else:
        txn = host.new_txn(autocommit=True)
        host.bind(txn)
        try:
            result = await host.run(dml.insert_rows, qctx, txn, stmt, values)
        finally:
            host.bind(None)
    if result is not None:
        await ladder.append(result.key, result.rows)
    return result


async def in_transaction(host: WriteHost, work: Callable[[TxnState], Any]) -> Any:
    """Run `work(txn)` in a worker thread inside the open transaction, or as its own transaction
    (committed through the machine before returning) when no block is open."""
    block = host.block()
    if block is not None:
        return await host.run(work, block)
    txn = host.new_txn(autocommit=True)
    host.bind(txn)
    try:
        result = await host.run(work, txn)
        await publish(host, txn)
    except BaseException:
        await discard(host, txn)
        raise
    finally:
        host.bind(None)
    return result


async def describe_dml(host: WriteHost, stmt: Statement) -> tuple[pa.Schema | None, dict[int, pa.DataType]]:
    """Parse-time description of a DML statement: RETURNING columns and parameter types (and a
    maintenance procedure's result columns)."""
    from icegres.engine import dml

    qctx = host.qctx
    call = maintenance_call(stmt, qctx.env.time_zone) if not is_dml(stmt) else None
    if call is not None:
        from icegres.engine.maintenance.calls import result_schema

        return result_schema(call), {}
    if host.block() is not None:
        return await host.run(dml.describe, qctx, stmt)
    host.bind(host.new_txn(autocommit=True))
    try:
        return await host.run(dml.describe, qctx, stmt)
    finally:
        host.bind(None)


# --- DDL -----------------------------------------------------------------------------------------


async def run_ddl(host: WriteHost, stmt: Statement, values: dict[str, Any] | None = None) -> WriteResult:
    """CREATE/DROP/ALTER. Outside a block, applied to the catalog at once. Inside one, table DDL
    changes the block's view and is applied at COMMIT (ddl_block.py); views and schemas still
    apply at once, and the block re-pins the tables they changed. Temporary tables: ddl_temp.py.
    `values`: the big literals the front end made parameters (ddl_literals.py)."""
    from icegres.engine import acl_commands, ddl, ddl_literals, procedures

    if values:
        command = await host.run(ddl.parse_ddl_literals, stmt.sql, host.qctx.env.database, values)
        if command is not None:
            return await run_ddl_command(host, command)
        stmt = await host.run(ddl_literals.written_statement, stmt.sql, values)

    if stmt.tag in ("GRANT", "REVOKE", "CREATE", "DROP", "ALTER", "REASSIGN"):
        command = acl_commands.acl_command(stmt.sql)
        if command is not None:
            from icegres.engine.drop_owned import owned_objects_dropped

            tag, warnings = await acl_commands.run_acl(
                host.qctx, command, host.run, lambda roles, cascade: owned_objects_dropped(host, roles, cascade, run_ddl_command))
            return WriteResult(tag, None, warnings)
    maintenance = maintenance_call(stmt, host.qctx.env.time_zone)
    if maintenance is not None:
        from icegres.engine import authz_ddl

        await host.run(authz_ddl.check_ddl, host.qctx, maintenance)
        return await run_maintenance(host, maintenance, "CALL" if stmt.tag == "CALL" else "ALTER TABLE")
    if stmt.tag == "CALL":
        return await run_ddl_command(host, procedures.parse_call(stmt.sql, host.qctx.env.time_zone))
    if len(stmt.sql) > _BIG_DDL_CHARS:  # (a 50 MB DEFAULT: sqlglot reads its literal for a while)
        return await run_ddl_command(host, await host.run(ddl.parse_ddl, stmt.sql, host.qctx.env.database))
    return await run_ddl_command(host, ddl.parse_ddl(stmt.sql, host.qctx.env.database))


_BIG_DDL_CHARS = 64 * 1024  # (the front end's BIG_CHARS: a longer statement is split in a thread too)


async def run_maintenance(host: WriteHost, call: Call, tag: str) -> WriteResult:
    """A maintenance procedure of one table, in a worker thread; never in a transaction block
    (25001). Expiry keeps what this server's running transactions pinned; compaction and
    manifest rewrite settle the table's buffered rows into the lake first."""
    from icegres.engine import procedures
    from icegres.engine.maintenance import calls
    from icegres.engine.txn import pinned_snapshots

    qctx = host.qctx
    txn = qctx.txn
    if txn is not None and not txn.autocommit:
        what = "CALL" if tag == "CALL" else "ALTER TABLE ... EXECUTE"
        raise PgError(E.ACTIVE_SQL_TRANSACTION, f"{what} cannot run inside a transaction block")
    if call.procedure in procedures.COMPACTION:
        return await _run_compaction(host, call)

    def run() -> tuple[pa.Table, list[str]]:
        rows, notices, key = calls.run(qctx.engine.lakehouse, call, list(qctx.env.search_path),
                                       lambda table: pinned_snapshots(str(table.metadata.table_uuid)))
        qctx.engine.refresh({key})  # time travel and "t$snapshots" see the history as it is now
        return rows, notices

    rows, notices = await host.run(run)
    return WriteResult(tag, rows, notices)


async def _run_compaction(host: WriteHost, call: Call) -> WriteResult:
    """CALL system.rewrite_data_files / rewrite_manifests, ALTER TABLE ... EXECUTE optimize: the
    table's buffered rows settled into the lake, then the operation in a worker thread (it reads
    and writes files), then the table mounted afresh."""
    from icegres.engine import procedures
    from icegres.engine.maintenance import compaction_calls

    qctx = host.qctx
    lakehouse = qctx.engine.lakehouse
    key = await host.run(procedures.maintained_table, lakehouse, call, list(qctx.env.search_path))
    if qctx.engine.ladder is not None:
        await qctx.engine.ladder.settle({key})
    row, notices = await host.run(compaction_calls.maintain, lakehouse, key, call)

    def remount() -> None:
        qctx.engine.refresh({key})
        qctx.forget_routes()

    await host.run(remount)
    if call.execute is not None:  # Trino's spelling answers with its command tag
        return WriteResult("ALTER TABLE", None, notices)
    return WriteResult("CALL", row, notices)


async def run_ddl_command(host: WriteHost, cmd: Any) -> WriteResult:
    """`run_ddl` of a parsed command, by a role allowed to (authz_ddl.py)."""
    from icegres.engine import authz_ddl

    await host.run(authz_ddl.check_ddl, host.qctx, cmd)
    result = await _run_ddl_command(host, cmd)
    await authz_ddl.record_ddl(host.qctx, cmd, host.run)
    return result


async def _run_ddl_command(host: WriteHost, cmd: Any) -> WriteResult:
    from icegres.engine import add_column_default, ddl, ddl_apply, ddl_block, ddl_refs
    from icegres.engine.ddl_commands import AlterSequence, DropSequence, command_tag
    from icegres.engine.dml import checks, defaults

    qctx = host.qctx
    txn = qctx.txn
    in_block = txn is not None and not txn.autocommit
    if in_block and ddl_refs.changes_refs(cmd):
        what = "CALL" if isinstance(cmd, Call) else "ALTER TABLE ... BRANCH or TAG"
        raise PgError(E.ACTIVE_SQL_TRANSACTION, f"{what} cannot run inside a transaction block")
    if defaults.declared(cmd):
        await host.run(defaults.check_declared, qctx, cmd)
    if checks.declared(cmd):
        await host.run(checks.check_declared, qctx, cmd)
    temp = await _temp_ddl(host, cmd, txn if in_block else None)
    if temp is not None:
        return temp
    if isinstance(cmd, ddl.CreateTableAs):
        return await (create_table_as_in_block(host, cmd) if in_block else create_table_as(host, cmd))
    if isinstance(cmd, CreateView):
        return await create_view(host, cmd)
    path = list(qctx.env.search_path)
    ladder = qctx.engine.ladder
    if ladder is not None:
        # ALTER/DROP: the table's buffered rows go to the lake under the schema they were acked in.
        keys = await host.run(ddl_keys, cmd, path, qctx)
        if keys:
            await ladder.settle(keys)
    if add_column_default.candidate(cmd) and await host.run(add_column_default.fills_rows, qctx, cmd, path):
        notices = await in_transaction(host, add_column_default.filling(qctx, cmd))
        qctx.forget_routes()
        return WriteResult(command_tag(cmd), None, notices)
    if in_block and ddl_block.handles(cmd):
        assert txn is not None
        notices = await host.run(ddl_block.apply, qctx, txn, cmd, path)
        qctx.forget_routes()
        return WriteResult(command_tag(cmd), None, list(notices))

    def apply() -> list[str]:
        notices = ddl_apply.apply_ddl(qctx.engine.lakehouse, cmd, path)
        keys = ddl_keys(cmd, path, qctx)
        if isinstance(cmd, AlterSequence | DropSequence):
            from icegres.engine.sequences import allocator_of

            for key in keys:  # this server's block is void (RESTART), or of nothing (DROP)
                allocator_of(qctx.engine).forget(key)
        if qctx.engine.lakehouse.kind == "rest":
            qctx.engine.refresh(keys)
            qctx.engine.refresh_views(keys | view_keys(cmd, path))
        else:
            qctx.engine.refresh(keys)  # lists the whole catalog; mounts the tables the DDL names
        qctx.forget_routes()
        txn = qctx.txn
        if txn is not None:
            for key in ddl_keys(cmd, path, qctx):
                txn.repin(key, qctx.engine.read_plan(*key))
        return notices

    notices = await host.run(apply)
    return WriteResult(command_tag(cmd), None, list(notices))


async def _temp_ddl(host: WriteHost, cmd: Any, block: TxnState | None) -> WriteResult | None:
    """DDL of temporary tables (ddl_temp.py); None if `cmd` is about lake tables only."""
    from dataclasses import replace

    from icegres.engine import ddl_temp, dml
    from icegres.engine.ddl_commands import CreateTable, DropTable, command_tag

    qctx = host.qctx
    if ddl_temp.is_temp_create(cmd):
        if isinstance(cmd, CreateTable):
            notices: list[str] = []
            await host.run(ddl_temp.create, qctx, block, cmd, notices)
            return WriteResult("CREATE TABLE", None, notices)

        made: list[str] = []

        def create_as(txn: TxnState) -> tuple[Key | None, int]:
            qctx.pin_for(None)  # (in a block: its snapshots, and the session's temporary tables)
            # the views it reads, as a lake table's CTAS reads them (dbt's snapshots of a view)
            data = dml.collect(qctx.plan(qctx.with_views(qctx.authorized(query(cmd.query_sql))), None))
            key = ddl_temp.create_as(qctx, txn if block is not None else None, cmd, data)
            if key is not None:
                made.append(key[1])
            if key is None or not cmd.with_data:
                return key, 0
            qctx.pin_for(None)
            plan = txn.plan(key)
            assert plan is not None
            from icegres.engine import assign

            rows = assign.conform(data.rename_columns(plan.schema.names), plan, key)
            dml.append(txn, key, rows)
            return key, rows.num_rows

        try:
            key, count = await in_transaction(host, create_as)
        except BaseException:
            if made and block is None:  # a statement that fails leaves nothing behind
                await host.run(ddl_temp.drop, qctx, None, made)
            raise
        if key is None:
            return WriteResult("CREATE TABLE AS", None, [f'relation "{cmd.name}" already exists, skipping'])
        return WriteResult(f"SELECT {count}" if cmd.with_data else "CREATE TABLE AS")
    names = ddl_temp.temp_names(qctx, cmd)
    if not names:
        return None
    if not isinstance(cmd, DropTable):
        raise ddl_temp.refuse(cmd)
    rest = tuple((s, n) for s, n in cmd.names if not (s in (None, "pg_temp") and n in names))
    notices = []
    if rest:  # the lake's tables first: if that DROP fails, nothing is dropped
        notices = (await run_ddl_command(host, replace(cmd, names=rest))).notices
    await host.run(ddl_temp.drop, qctx, block, names)
    return WriteResult(command_tag(cmd), None, notices)


def ddl_keys(cmd: Any, path: list[str], qctx: Any) -> set[Key]:
    """The tables a DDL command may have created, changed or dropped (schema commands: none)."""
    from icegres.engine import ddl, ddl_commands

    if isinstance(cmd, ddl.DropTable | ddl_commands.DropSequence):
        named = list(cmd.names)
    elif isinstance(cmd, ddl.CreateTable | ddl.AlterTable | Call | ddl_commands.CreateSequence | ddl_commands.AlterSequence):
        named = [(cmd.schema, cmd.name)]
    else:
        named = []
    keys = {_qualify(schema, name, path, qctx) for schema, name in named}
    return {k for k in keys if k is not None}


def view_keys(cmd: Any, path: list[str]) -> set[Key]:
    """The views a DDL command may have created, changed or dropped, as named (REST catalogs
    check these; a SQL catalog's listing has them all)."""
    from icegres.engine.ddl_commands import AlterTable, DropView, RenameView

    if isinstance(cmd, DropView):
        named = list(cmd.names)
    elif isinstance(cmd, RenameView):
        named = [(cmd.schema, cmd.name), (cmd.schema, cmd.new_name)]
    elif isinstance(cmd, AlterTable) and cmd.actions and hasattr(cmd.actions[0], "new_name"):
        named = [(cmd.schema, cmd.name), (cmd.schema, cmd.actions[0].new_name)]
    else:
        return set()
    lake = [s for s in path if s not in ("pg_catalog", "information_schema")]
    return {(schema, name) for s, name in named for schema in ([s] if s else lake)}


async def create_view(host: WriteHost, cmd: CreateView) -> WriteResult:
    """CREATE [OR REPLACE] VIEW: the query is planned (not run) for its columns, its relations
    are qualified as the session's search_path resolves them now, and the view is written to
    the catalog (view_ddl.py); inside a block, at its COMMIT (ddl_block.py)."""
    from icegres.engine import ddl_apply, ddl_block, view_defs
    from icegres.engine.column_names import select_list_names

    qctx = host.qctx
    path = list(qctx.env.search_path)
    txn = qctx.txn
    block = txn if txn is not None and not txn.autocommit else None

    def create() -> None:
        if block is not None:
            qctx.pin_for(None)
        source = query(cmd.query_sql)
        if source.max_param:
            raise PgError("42P02", f"there is no parameter ${source.max_param}")
        qctx.with_views(source)  # reads the catalog where the query names what is not known here
        sql = view_defs.qualify(cmd.query_sql, source.tree, qctx.resolver())
        names = select_list_names(source)
        if names and "*" not in names:
            given = list(cmd.column_names) + names[len(cmd.column_names):]
            for i, name in enumerate(given):
                if name in given[:i]:
                    raise PgError("42701", f'column "{name}" specified more than once')
        schema, _ = qctx.describe(query(sql), privileges=False)
        engine = qctx.engine
        if block is not None:
            ddl_block.create_view(qctx, block, cmd, schema, sql, path)
            qctx.forget_routes()
            return
        key = ddl_apply.create_view(engine.lakehouse, cmd, schema, sql, path, engine.views())
        if engine.lakehouse.kind == "rest":
            engine.refresh_views({key})
        else:
            engine.refresh(set())
        qctx.forget_routes()

    await host.run(create)
    return WriteResult("CREATE VIEW")


def _qualify(schema: str | None, name: str, path: list[str], qctx: Any) -> Key | None:
    if schema:
        return (schema, name)
    for candidate in path:
        if qctx.engine.has_table(candidate, name) or qctx.engine.has_schema(candidate):
            return (candidate, name)
    return None


async def create_table_as(host: WriteHost, cmd: Any) -> WriteResult:
    """CREATE TABLE ... AS SELECT: create the table from the query's columns, then append its rows.

    The table is created first and the rows are one commit through the machine: if that commit
    fails the table stays, empty. (Iceberg catalogs offer no create-and-append transaction that
    every catalog kind supports.)
    """
    from icegres.engine import ddl_ctas, dml, pg_catalog

    qctx = host.qctx
    path = list(qctx.env.search_path)

    def create() -> tuple[Key | None, pa.Table]:
        source = qctx.with_views(qctx.authorized(query(cmd.query_sql)))  # views, snapshots and metadata tables it reads
        qctx.refresh_for(source)  # the tables it reads, at the catalog's head and mounted (lazy mounting)
        with qctx.buffered_reads(qctx.buffered_entries(source)):
            data = dml.collect(qctx.plan(source, None))
        # columns read straight from a varchar(n) / char(n) column keep that type (pg_catalog)
        described = pg_catalog.sourced_schema(qctx.env, data.schema)
        key = ddl_ctas.create_table_from_arrow(qctx.engine.lakehouse, cmd, described, path)
        if key is not None:
            qctx.engine.refresh({key})
        return key, data

    key, data = await host.run(create)
    if key is None:
        return WriteResult("CREATE TABLE AS", None, [f'relation "{cmd.name}" already exists, skipping'])
    if not cmd.with_data:
        return WriteResult("CREATE TABLE AS")
    count = await append_rows(host, key, data)
    return WriteResult(f"SELECT {count}")


async def create_table_as_in_block(host: WriteHost, cmd: Any) -> WriteResult:
    """CREATE TABLE ... AS in a transaction block: the table and its rows are the block's until
    COMMIT publishes both (ddl_block.py)."""
    from icegres.engine import assign, ddl_block, dml

    qctx = host.qctx
    txn = qctx.txn
    assert txn is not None
    path = list(qctx.env.search_path)

    def create() -> tuple[Key | None, int]:
        qctx.pin_for(None)
        data = dml.collect(qctx.plan(qctx.with_views(qctx.authorized(query(cmd.query_sql))), None))
        key = ddl_block.create_table_as(qctx, txn, cmd, path, data)
        if key is None or not cmd.with_data:
            return key, 0
        plan = txn.plan(key)
        assert plan is not None
        rows = assign.conform(data.rename_columns(plan.schema.names), plan, key)
        dml.append(txn, key, rows)
        return key, rows.num_rows

    key, count = await host.run(create)
    qctx.forget_routes()
    if key is None:
        return WriteResult("CREATE TABLE AS", None, [f'relation "{cmd.name}" already exists, skipping'])
    return WriteResult(f"SELECT {count}" if cmd.with_data else "CREATE TABLE AS")


async def copy_in(host: WriteHost, table_name: str, columns: list[str] | None, fmt: CopyFormat,
                  data: bytes) -> WriteResult:
    """COPY table [(cols)] FROM STDIN: `data` (text or CSV) as rows of the table, one commit, or
    acked from the write buffer outside a block (a primary-key table stays synchronous: its key
    check needs the lake)."""
    from sqlglot import exp

    from icegres.engine import assign, dml
    from icegres.engine.dml import checks, defaults
    from icegres.sql import parse

    try:
        table = parse.table_name(table_name)
        listed = [exp.to_identifier(parse.column_name(c)) for c in columns or ()]
    except Exception:
        raise PgError(E.SYNTAX_ERROR, f'syntax error at or near "{table_name}"') from None
    target = exp.Insert(this=exp.Schema(this=table, expressions=listed) if listed else table)
    qctx = host.qctx

    def rows_of(txn: TxnState) -> tuple[Key, pa.Table, bool]:
        time_travel.write_target(qctx, table)  # COPY "t@b" FROM, or under icegres.branch
        qctx.pin_tree(table)
        key = dml.target_key(qctx, txn, table)
        qctx.authorize_key(key, "a")
        plan = dml.target_plan(txn, key)
        names = dml.insert_columns(target, plan)
        zone = qctx.env.time_zone
        rows = defaults.fill(qctx, plan, parse_copy(data, fmt, names, assign.write_schema(plan), zone))
        return key, checks.conform(qctx, rows, plan, key, zone), bool(plan.primary_key)

    def load(txn: TxnState) -> int:
        key, rows, _ = rows_of(txn)
        dml.append(txn, key, rows)
        return rows.num_rows

    ladder = qctx.engine.ladder
    if ladder is not None and host.idle and not qctx.env.temp:
        txn = host.new_txn(autocommit=True)
        host.bind(txn)
        try:
            key, rows, has_pk = await host.run(rows_of, txn)
        finally:
            host.bind(None)
        if not has_pk:
            await ladder.append(key, rows)
            return WriteResult(f"COPY {rows.num_rows}")
    count = await in_transaction(host, load)
    return WriteResult(f"COPY {count}")


def parse_copy(data: bytes, fmt: Any, names: list[str], schema: pa.Schema, zone: str = "UTC") -> pa.Table:
    """COPY text or CSV bytes -> an Arrow table of the named columns, typed as the table's (a
    timestamptz without an offset read in the session's TimeZone `zone`)."""
    from icegres.engine.assign import cast as _cast
    from icegres.pg.copy_format import copy_fields

    fields = copy_fields(data, fmt, names)
    by_name = {f.name: f.type for f in schema}
    columns = {}
    for name, strings in zip(names, fields, strict=True):
        try:
            columns[name] = _cast(strings, by_name[name], zone)
        except PgError:
            raise
        except Exception as exc:
            raise PgError("22P02", f'invalid input for column "{name}": {str(exc).splitlines()[0]}') from None
    return pa.table(columns) if columns else pa.table({})




async def append_rows(host: WriteHost, key: Key, data: pa.Table, ref: str | None = None) -> int:
    """Append `data` (columns in the table's order, any names) to table `key` (to its branch
    `ref`, if given): one commit through the machine, or staged into the open block. Values are
    assigned to the column types as INSERT assigns them."""
    from icegres.engine import branch_writes, dml
    from icegres.engine.dml import checks

    qctx = host.qctx

    def append(txn: TxnState) -> int:
        qctx.authorize_key(key, "a")
        qctx.pin_for(None)
        if ref is None or ref == branch_writes.MAIN:
            target = key
            txn.pin(key, qctx.engine.read_plan(*key))
        else:
            target = branch_writes.pin(qctx.engine, txn, key, ref)
        plan = txn.plan(target)
        rows = checks.conform(qctx, data.rename_columns(plan.schema.names), plan, target, "UTC")
        dml.append(txn, target, rows)
        return rows.num_rows

    return await in_transaction(host, append)


# --- commit and rollback -------------------------------------------------------------------------


async def publish(host: WriteHost, txn: TxnState) -> None:
    """Commit a transaction: its lake writes (`_publish_lake`), then, once those committed, its
    writes of temporary tables, which are the session's alone (temp_tables.py)."""
    from icegres.engine import staging

    temp = {k: w for k, w in txn.writes.items() if k[0] == "pg_temp"}
    for key in temp:
        del txn.writes[key]
    try:
        await _publish_lake(host, txn)
    except BaseException:
        import trio

        with trio.CancelScope(shield=True):
            if temp:
                from icegres.engine.lake_world import delete_files

                await host.run(delete_files, list(temp.values()), [p for w in temp.values() for p in w.added])
            await staging.end_statement(txn)  # by the commit's verdict (engine/staging.py)
        raise
    await staging.end_statement(txn)
    if temp:
        qctx = host.qctx

        def apply() -> None:
            for write in temp.values():
                qctx.env.temp.apply(write, qctx.engine.plan_table)

        await host.run(apply)


async def _publish_lake(host: WriteHost, txn: TxnState) -> None:
    """Commit a transaction's staged writes through the commit machine; PgError if it aborts.

    A blind append to one table (`group_commit.lane_of`) shares its commit with the appends to
    that table waiting at the same time (`engine/group_commit.py`); it is answered only once the
    commit holding its files is committed, and fails with that commit's error."""
    import trio

    from icegres.engine.dml import compact
    from icegres.engine.group_commit import lane_of
    from icegres.engine.lake_world import commit_request, delete_files

    if txn.catalog is not None and (txn.catalog.moves or txn.catalog.created):
        await _publish_with_catalog(host, txn)
        return
    from icegres.engine import staging

    engine = host.qctx.engine
    await host.run(staging.run_bound, txn, engine.staging, compact, txn)
    stager = txn.stager
    request = commit_request(txn, token=stager.token if stager is not None else None)
    writes = list(txn.writes.values())
    try:
        if request is not None:
            # From here on a cancel (CancelRequest, statement_timeout, a dropped gRPC call) must
            # not interrupt: once the machine has published, the files are the lake's, and
            # reporting the commit as cancelled would make the caller discard — delete — files a
            # snapshot references.
            with trio.CancelScope(shield=True):
                if stager is not None:
                    stager.publishing = True  # from here, no verdict means UNKNOWN, never "delete"
                lane = lane_of(txn)
                if lane is None:
                    outcome = await _commit(host, txn, request)
                else:
                    outcome = await _commit_in_lane(host, engine.append_groups, lane, txn)
                if stager is not None:
                    stager.settle(outcome.phase.value, request.added_files)
                # Committed files belong to the lake now, never to a discard; otherwise the
                # machine deleted them (or, if the outcome is unknown, deliberately kept them).
                txn.writes.clear()
            if not outcome.committed:
                raise PgError(outcome.sqlstate or E.INTERNAL_ERROR, outcome.message or "commit failed",
                              detail=outcome.detail or None)
    finally:
        # Orphans (staged, then rewritten or rolled back to a savepoint) are in no request, so
        # they go whatever the verdict.
        if txn.orphans:
            orphans = list(txn.orphans)
            txn.orphans.clear()
            with trio.CancelScope(shield=True):
                await host.run(delete_files, writes, orphans)


async def _commit(host: WriteHost, txn: TxnState, request: Any) -> Any:
    """One commit machine run for `txn`'s request; a committed snapshot is mounted at once."""
    from icegres import faults
    from icegres.engine.lake_world import LakeWorld
    from icegres.machines.commit import Config
    from icegres.machines.drivers.commit import run_commit

    engine = host.qctx.engine
    world = LakeWorld(engine.lakehouse, txn)
    outcome = await run_commit(request, world, Config())
    if outcome.committed:
        await host.run(faults.point, "after-publish")
        try:
            await host.run(world.adopt, engine)
        except Exception:
            # Committed all the same: the next statement's refresh mounts the snapshot instead.
            log.warning("commit %s landed but its snapshot was not mounted", request.token, exc_info=True)
    return outcome


async def _commit_in_lane(host: WriteHost, groups: Any, lane: Any, txn: TxnState) -> Any:
    """A blind append's verdict from its lane: the verdict of the commit that held it, made by
    whichever member led that commit (this one, if it leads: then every member's files go in one
    request on the freshest base, and every member gets its verdict)."""
    from icegres.engine.group_commit import merged_appends
    from icegres.engine.lake_world import commit_request

    turn = await groups.join(lane, txn)
    if not turn.leads:
        return turn.verdict()
    try:
        txns = turn.items
        write = next(iter(txns[0].writes.values()))
        merged = merged_appends(txns, host.qctx.engine.read_plan(*write.key))
        request = commit_request(merged)
        assert request is not None and request.blind
        outcome = await _commit(host, merged, request)
    except BaseException as exc:
        groups.finish(turn, error=exc)
        raise
    groups.finish(turn, outcome)
    return outcome


async def _publish_with_catalog(host: WriteHost, txn: TxnState) -> None:
    """COMMIT of a block with DDL: the catalog commit machine applies its catalog changes and,
    as its decision, the data commit (machines/catalog_commit.py); PgError if it did not commit."""
    import trio

    from icegres.engine import staging
    from icegres.engine.catalog_world import LakeCatalogWorld
    from icegres.engine.dml import compact
    from icegres.engine.lake_world import commit_request, delete_files
    from icegres.machines.catalog_commit import CatalogPlan, DataAborted, DataCommitted, DataUnknown
    from icegres.machines.commit import Phase
    from icegres.machines.drivers.catalog_commit import run_catalog_commit

    engine = host.qctx.engine
    catalog = txn.catalog
    assert catalog is not None
    await host.run(staging.run_bound, txn, engine.staging, compact, txn)
    request = commit_request(txn, token=catalog.token)
    written = tuple(tuple(w.table.rsplit(".", 1)) for w in request.writes) if request is not None else ()
    plan = CatalogPlan(catalog.token, tuple(catalog.moves), tuple(catalog.created), tuple(catalog.graveyard),
                       has_data=request is not None, written=written)  # type: ignore[arg-type]
    data_ran = False
    stager = txn.stager

    async def data_commit() -> DataCommitted | DataAborted | DataUnknown:
        nonlocal data_ran
        data_ran = True
        if stager is not None:
            stager.publishing = True
        outcome = await _commit(host, txn, request)
        if stager is not None:
            stager.settle(outcome.phase.value, request.added_files)
        if outcome.committed:
            return DataCommitted()
        if outcome.phase is Phase.UNKNOWN:
            return DataUnknown(outcome.message or "commit outcome unknown")
        return DataAborted(outcome.sqlstate or E.INTERNAL_ERROR, outcome.message or "commit failed",
                           outcome.detail)

    writes = list(txn.writes.values())
    with trio.CancelScope(shield=True):
        outcome = await run_catalog_commit(plan, LakeCatalogWorld(engine.lakehouse, engine.intents, data_commit))
        if stager is not None and outcome.sqlstate == "08006":
            stager.settle("unknown", frozenset())  # (the catalog changes' outcome, too, is unknown)
        staged = txn.all_added()
        txn.writes.clear()  # committed: the lake's; aborted by the data commit: deleted by it
        stale = list(txn.orphans)
        txn.orphans.clear()
        if not outcome.committed and not data_ran and outcome.sqlstate != "08006":
            stale += staged  # refused before the data commit: nothing references them
        if stale:
            await host.run(delete_files, writes, stale)
        keys = {(m.namespace, n) for m in plan.moves for n in (m.src, m.dst)}
        await host.run(_remount, host.qctx, keys)
    if not outcome.committed:
        raise PgError(outcome.sqlstate or E.INTERNAL_ERROR, outcome.message or "commit failed",
                      detail=outcome.detail or None)


def _remount(qctx: Any, keys: set[Key]) -> None:
    """After a block's catalog changes: mount the tables under their new names."""
    engine = qctx.engine
    if engine.lakehouse.kind == "rest":
        engine.refresh(keys)
        engine.refresh_views(keys)
    else:
        engine.refresh(keys)  # lists the whole catalog; mounts the tables moved
    qctx.forget_routes()


async def discard(host: WriteHost, txn: TxnState) -> None:
    """ROLLBACK: staged files are unreferenced; delete them (best effort). Tables the block
    created (hidden until COMMIT) are dropped, and its intent record forgotten."""
    import trio

    from icegres.engine import staging
    from icegres.engine.lake_world import delete_files

    if txn.temp_created and host.qctx.env.temp:
        created = list(txn.temp_created)
        txn.temp_created.clear()
        await host.run(lambda: [host.qctx.env.temp.drop(name) for name in created])
        host.qctx.forget_routes()
    catalog = txn.catalog
    if catalog is not None and catalog.created:
        from icegres.engine.catalog_world import LakeCatalogWorld

        engine = host.qctx.engine
        world = LakeCatalogWorld(engine.lakehouse, engine.intents)
        txn.catalog = None

        def drop_created() -> None:
            if world.purge(tuple(catalog.created)):
                world.forget_intent(catalog.token)

        with trio.CancelScope(shield=True):
            await host.run(drop_created)

    paths = txn.all_added() + txn.orphans
    writes = list(txn.writes.values())
    txn.writes.clear()
    txn.orphans.clear()
    with trio.CancelScope(shield=True):
        if paths and writes:
            await host.run(delete_files, writes, paths)
        # and every file its record names: those a failed write or a cancelled statement's
        # abandoned thread created without staging them (engine/staging.py)
        await staging.end_statement(txn)
