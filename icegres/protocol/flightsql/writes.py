"""Flight SQL's write side: DML and DDL statements, executemany, bulk ingest and transactions.

Every write goes through `icegres.engine.writes`, the path pgwire's statements take: staged into a
`TxnState`, committed through the commit machine (first committer wins, 40001 for the loser) or
discarded. What differs is only how statements arrive:

- `CommandStatementUpdate` (DoPut, descriptor only): one statement, or a script of several that
  runs as one implicit transaction (as PostgreSQL runs a multi-statement Query message).
- `cursor.execute("INSERT …")`: the driver prepares and runs it as a query (GetFlightInfo): the
  write runs there, once, and its result is the RETURNING rows (or none) with total_records = the
  rows written, which the driver reports as rowcount.
- `CommandPreparedStatementUpdate` (executemany): every parameter row executes, and outside a
  transaction the whole batch is one implicit transaction: one Iceberg commit. A prepared write
  executed by GetFlightInfo with several rows bound (`cursor.execute(sql, record_batch)`) runs
  the same way, its RETURNING rows concatenated.
- `CommandStatementIngest` (adbc_ingest): one Arrow stream is one commit (CREATE TABLE AS's
  create-then-append machinery), in the four ADBC modes.
- BeginTransaction / EndTransaction: a transaction is a transaction block (the machine pgwire's
  BEGIN runs, `icegres.machines.txblock`) and its `TxnState`, kept on the session under its id;
  statements carrying the id read its pinned snapshots and stage into it. A failed statement
  fails the block, as in PostgreSQL (25P02 until it ends; COMMIT then rolls back and says so);
  BeginSavepoint / EndSavepoint are the block's SAVEPOINT, RELEASE and ROLLBACK TO.

Every statement text is read once, where it arrives (`statement`): Flight SQL's clients declare
the qmark parameter style, so its `?` placeholders are numbered `$1..$n` on the Statement.

Handlers run on grpclib's asyncio loop; the engine's write path is trio (worker threads, the
commit machine, the write buffer), entered through trio-asyncio. Blocking work runs in worker
threads behind the shared limiter, with the session's query context bound to the statement's
transaction under the session lock, so concurrent calls of one session never see each other's.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import trio
from grpclib.const import Status
from grpclib.exceptions import GRPCError

from icegres.engine import time_travel
from icegres.engine import writes as core
from icegres.engine.txblock_driver import TxBlock, finish
from icegres.engine.txn import TxnState, new_transaction
from icegres.engine.write_hosts import LockedHost
from icegres.machines import txblock
from icegres.pg.errors import PgError
from icegres.protocol.flightsql import icegres_flight_pb2 as fl
from icegres.protocol.flightsql import icegres_flight_sql_pb2 as sql
from icegres.protocol.flightsql import icegres_flight_sql_writes_pb2 as wr
from icegres.protocol.flightsql import messages as M
from icegres.protocol.flightsql.bindings import Params, param_rows
from icegres.protocol.flightsql.sessions import (
    SAVEPOINTS_MAX,
    FlightTxn,
    Result,
    Session,
    new_handle,
    savepoint_name,
)
from icegres.sql.pieces import split_statements
from icegres.sql.statement import Kind, Statement, classify

if TYPE_CHECKING:
    from grpclib.server import Stream

    from icegres.protocol.flightsql.port import QueryPort

log = logging.getLogger("icegres.flightsql")

INGEST_BYTES_MAX = 1 << 30  # one ingest stream is held in memory until its one commit
EXECUTEMANY_BYTES_MAX = 256 << 20  # parameter batches of one executemany

_Options = wr.CommandStatementIngest.TableDefinitionOptions
# The DoPut commands this module serves (CommandPreparedStatementQuery binds parameters: service.py).
DOPUT_COMMANDS = (sql.CommandStatementUpdate, sql.CommandPreparedStatementUpdate, wr.CommandStatementIngest)
BLOCK_CONFIG = txblock.Config(savepoints_max=SAVEPOINTS_MAX)


class FlightBlockPort:
    """What the transaction block asks of a Flight SQL session (`txblock_driver.BlockPort`).

    Flight SQL has no SET, cursors or portals, and a statement binds its transaction itself
    (`LockedHost.run`), so only starting a transaction is work here; the rest cannot arise."""

    __slots__ = ("session",)

    def __init__(self, session: Session) -> None:
        self.session = session

    def new_txn(self, isolation: str | None) -> TxnState:
        settings = self.session.qctx.env.settings
        return new_transaction(settings.get("default_transaction_isolation"), isolation)

    def bind(self, txn: TxnState | None) -> None:
        pass

    def warn(self, sqlstate: str, message: str) -> None:
        log.warning("transaction block of session %s: %s (SQLSTATE %s)", self.session.key, message, sqlstate)

    def restore_settings(self, values: tuple[tuple[str, str], ...]) -> None:
        pass

    def close_portals(self, block_only: bool) -> None:
        pass


class FlightWrites:
    """The write handlers `FlightSqlService` dispatches to."""

    def __init__(self, service: QueryPort) -> None:
        self.service = service

    # --- plumbing -------------------------------------------------------------------------------

    async def _trio(self, fn: Callable[..., Any], *args: Any) -> Any:
        """Run trio coroutine `fn(*args)` from a grpclib (asyncio) handler."""
        import trio_asyncio

        return await trio_asyncio.trio_as_aio(fn)(*args)

    def _host(self, session: Session, block: TxnState | None) -> LockedHost:
        """The session as the write path's host: `block` is the transaction the statement runs in
        (BeginTransaction's, or the implicit one of an executemany or script), None for
        autocommit."""
        run_sync = functools.partial(trio.to_thread.run_sync, limiter=self.service.server.limiter,
                                     abandon_on_cancel=True)
        return LockedHost(session.qctx, block, session.qctx.env.settings.get("default_transaction_isolation"),
                          run_sync, session.lock)

    def transaction(self, session: Session, ident: bytes | None) -> FlightTxn | None:
        """The open transaction `ident` names (None: autocommit); refused once it has failed."""
        if ident is None:
            return None
        txn = session.transactions.get(ident)
        if txn is None and session.ended_txns.get(ident):
            current = session.current_txn
            txn = session.transactions.get(current) if current is not None else None
            if txn is None:
                return None
        if txn is None:
            raise GRPCError(Status.NOT_FOUND, "transaction does not exist or has ended (SQLSTATE 25P01)")
        txn.block.feed(txblock.StatementStarted())  # 25P02 in a failed block
        return txn

    async def _guarded(self, txn: FlightTxn | None, fn: Callable[..., Any], *args: Any) -> Any:
        """`fn(*args)` (a trio coroutine); an error fails the block it ran in."""
        try:
            return await self._trio(fn, *args)
        except BaseException:
            # As in PostgreSQL, any failure inside a transaction (a cancel too) aborts it.
            if txn is not None:
                txn.block.feed(txblock.StatementFailed())
            raise

    async def _poisoning(self, txn: FlightTxn | None, awaitable: Any) -> Any:
        """Await an asyncio-side call; an error fails the block it ran in."""
        try:
            return await awaitable
        except BaseException:
            if txn is not None:
                txn.block.feed(txblock.StatementFailed())
            raise

    # --- transactions ---------------------------------------------------------------------------

    async def action(self, session: Session, kind: str, body: bytes) -> bytes | None:
        """DoAction BeginTransaction / EndTransaction / BeginSavepoint / EndSavepoint: the Result
        body to send, if any."""
        request = M.decode_command(body)
        if kind == "BeginSavepoint":
            if not isinstance(request, wr.ActionBeginSavepointRequest):
                raise M.BadCommand("BeginSavepoint needs an ActionBeginSavepointRequest")
            ident = await self.begin_savepoint(session, request.transaction_id, request.name)
            return M.pack_any(wr.ActionBeginSavepointResult(savepoint_id=ident))
        if kind == "EndSavepoint":
            if not isinstance(request, wr.ActionEndSavepointRequest):
                raise M.BadCommand("EndSavepoint needs an ActionEndSavepointRequest")
            await self.end_savepoint(session, request.savepoint_id, request.action)
            return None
        if kind == "BeginTransaction":
            if not isinstance(request, sql.ActionBeginTransactionRequest):
                raise M.BadCommand("BeginTransaction needs an ActionBeginTransactionRequest")
            ident = await self.begin(session)
            return M.pack_any(wr.ActionBeginTransactionResult(transaction_id=ident))
        if not isinstance(request, sql.ActionEndTransactionRequest):
            raise M.BadCommand("EndTransaction needs an ActionEndTransactionRequest")
        await self.end(session, request.transaction_id, request.action)
        return None

    async def begin(self, session: Session) -> bytes:
        if len(session.transactions) >= session.transactions.limit:
            raise PgError("53400", f"too many open transactions in this session (at most "
                                   f"{session.transactions.limit}): end one first")
        block = TxBlock(FlightBlockPort(session), BLOCK_CONFIG)
        block.feed(txblock.BeginRequested())
        assert block.txn is not None
        txn = FlightTxn(new_handle(), block, block.txn)
        session.transactions.put(txn.ident, txn)
        session.current_txn = txn.ident
        return txn.ident

    async def end(self, session: Session, ident: bytes, action: int) -> None:
        txn = session.transactions.pop(ident)
        if txn is None:
            raise GRPCError(Status.NOT_FOUND, "transaction does not exist or has ended (SQLSTATE 25P01)")
        session.ended_txns.put(ident, True)
        if session.current_txn == ident:
            session.current_txn = None
        commit = action == sql.ActionEndTransactionRequest.END_TRANSACTION_COMMIT
        ending = txn.block.feed(txblock.CommitRequested() if commit else txblock.RollbackRequested())
        await self._trio(finish, self._host(session, None), ending)
        if not commit and action != sql.ActionEndTransactionRequest.END_TRANSACTION_ROLLBACK:
            raise M.BadCommand("EndTransaction needs COMMIT or ROLLBACK: the transaction was rolled back")
        if ending is not None and ending.rolled_back:
            raise PgError("25P02", "the transaction was aborted by an earlier error and has been rolled back")

    # --- savepoints: the block's SAVEPOINT / RELEASE / ROLLBACK TO, as pgwire's ----------------

    async def begin_savepoint(self, session: Session, txn_id: bytes, name: str) -> bytes:
        """SAVEPOINT in transaction `txn_id` (refused once a statement failed in it: 25P02).
        The client's `name` is only a label: it ends the savepoint by the id returned."""
        txn = self.transaction(session, txn_id)
        if txn is None:
            raise GRPCError(Status.NOT_FOUND, "transaction does not exist or has ended (SQLSTATE 25P01)")
        ident = new_handle()

        def mark() -> None:
            with session.lock:  # statements of this session stage into the state under it
                txn.block.feed(txblock.SavepointDeclared(savepoint_name(ident)))

        await self.service.run_sync(mark)
        return ident

    async def end_savepoint(self, session: Session, ident: bytes, action: int) -> None:
        """RELEASE SAVEPOINT (it and later ones end; the writes since stay) or ROLLBACK TO
        SAVEPOINT (the writes since are undone; it stays, later ones end; a transaction aborted by
        an error since then is usable again), as in PostgreSQL."""
        txn = next((t for t in session.transactions.values() if t.holds_savepoint(ident)), None)
        if txn is None:
            raise PgError("3B001", "savepoint does not exist (released, rolled back past, or its "
                                   "transaction ended)")
        release = action == wr.ActionEndSavepointRequest.END_SAVEPOINT_RELEASE
        if not release and action != wr.ActionEndSavepointRequest.END_SAVEPOINT_ROLLBACK:
            raise M.BadCommand("EndSavepoint needs RELEASE or ROLLBACK")
        name = savepoint_name(ident)
        event = txblock.SavepointReleased(name) if release else txblock.RolledBackTo(name)

        def end() -> None:
            with session.lock:
                try:
                    txn.block.feed(event)  # 25P02 for a RELEASE in a failed block
                except PgError as err:
                    if err.sqlstate != "3B001":
                        raise
                    # Ended by a concurrent EndSavepoint meanwhile; its id means nothing to a user.
                    raise PgError("3B001", "savepoint does not exist (released or rolled back past)") from None

        await self.service.run_sync(end)

    async def close_session(self, session: Session) -> None:
        """CloseSession (or a session forgotten): its open transactions roll back."""
        host = self._host(session, None)
        for txn in session.transactions.values():
            session.transactions.pop(txn.ident)
            await self._trio(finish, host, txn.block.feed(txblock.RollbackRequested()))
        temp = session.qctx.env.temp
        if temp is not None:  # its temporary tables end with it (temp_tables.py)
            await self.service.run_sync(temp.close)

    # --- statements -----------------------------------------------------------------------------

    def statement(self, session: Session, text: str, txn_id: bytes | None) -> Statement:
        """The statement `text` is over Flight SQL: classified once, its `?` placeholders
        numbered. A text that cannot be read so (`?` mixed with `$n`: 42601) fails the
        transaction it was sent in, as a syntax error does in PostgreSQL."""
        try:
            return classify(text, qmark=True)
        except PgError:
            txn = self.transaction(session, txn_id)
            if txn is not None:
                txn.block.feed(txblock.StatementFailed())
            raise

    async def start(self, session: Session, stmt: Statement, params: list[Params] | None,
                    txn_id: bytes | None) -> Result:
        """GetFlightInfo of a statement: a query starts (in its transaction, if any); a write runs
        (once per bound parameter row)."""
        if stmt.kind is Kind.WRITE:
            result = await self.result(session, stmt, params, txn_id)
        else:
            txn = self.transaction(session, txn_id)
            result = await self._poisoning(txn, self.service.start_query(
                session, stmt, params, txn.state if txn is not None else None))
        self.service.results.put(result.handle, result)
        return result

    async def describe(self, session: Session, stmt: Statement, txn_id: bytes | None,
                       fresh: bool = True) -> tuple[pa.Schema, pa.Schema]:
        """(dataset schema, parameter schema) at prepare time. A write's: its RETURNING columns
        (or none) and the parameters' types as the target columns'. A query's with `fresh=False`
        may come from the mounted snapshots (`QueryContext.describe`)."""
        txn = self.transaction(session, txn_id)
        if stmt.kind is not Kind.WRITE:
            return await self._poisoning(txn, self.service.describe_query(
                session, stmt, txn.state if txn is not None else None, fresh))
        if core.is_ddl(stmt) or not core.is_dml(stmt):
            return pa.schema([]), pa.schema([])
        host = self._host(session, txn.state if txn is not None else None)
        returning, inferred = await self._guarded(txn, core.describe_dml, host, stmt)
        count = max([*inferred.keys(), stmt.max_param], default=0)
        params = pa.schema([
            pa.field(f"${i}", M.wire_type(inferred[i]) if i in inferred else pa.null())
            for i in range(1, count + 1)
        ])
        dataset = M.wire_schema(returning) if returning is not None else pa.schema([])
        return dataset, params

    async def execute(self, session: Session, stmt: Statement, params: dict[str, Any] | None,
                      txn_id: bytes | None) -> core.WriteResult:
        """One write statement, in the transaction `txn_id` names or as its own."""
        txn = self.transaction(session, txn_id)
        host = self._host(session, txn.state if txn is not None else None)
        return await self._guarded(txn, _execute_one, host, stmt, params)

    async def result(self, session: Session, stmt: Statement, params: list[Params] | None,
                     txn_id: bytes | None) -> Result:
        """A write run by GetFlightInfo (`cursor.execute`): its Result for the DoGet that follows.

        The result is complete here (never re-run by a second DoGet): the RETURNING rows, or no
        columns and no rows, with total_records = the rows the statement wrote. Several bound
        parameter rows run as executemany's do (one transaction), their RETURNING rows in order."""
        if params is not None and len(params) > 1:
            outcomes = await self.execute_rows(session, stmt, params, txn_id)
        else:
            outcomes = [await self.execute(session, stmt, params[0] if params else None, txn_id)]
        tables = [o.returning for o in outcomes if o.returning is not None]
        if tables:
            schema = M.wire_schema(tables[0].schema)
            messages = [M.batch_flight_data(M.to_wire(b, schema))
                        for table in tables for b in table.to_batches() if b.num_rows]
        else:
            schema, messages = pa.schema([]), []
        return Result(handle=new_handle(), session_key=session.key, stmt=stmt, params=params, schema=schema,
                      source=None, first=messages, exhausted=True, rows=sum(o.count for o in outcomes))

    async def execute_update(self, session: Session, text: str, txn_id: bytes | None) -> int:
        """CommandStatementUpdate: a statement or a script; a script outside a transaction is one
        implicit transaction (all its writes commit together, or none)."""
        try:
            pieces = split_statements(text)
        except Exception:
            pieces = [text]
        statements = [self.statement(session, piece, txn_id) for piece in pieces if piece.strip()]
        if not statements:
            return 0
        for stmt in statements:
            if stmt.kind not in (Kind.WRITE, Kind.QUERY):
                raise not_a_write(stmt)
        txn = self.transaction(session, txn_id)
        if len(statements) == 1 or txn is not None:
            total = 0
            for stmt in statements:
                total += await self._run_any(session, stmt, None, txn)
            return total
        return sum(o.count for o in await self._implicit(session, [(s, None) for s in statements]))

    async def _implicit(self, session: Session,
                        work: list[tuple[Statement, dict[str, Any] | None]]) -> list[core.WriteResult]:
        """Statements outside a transaction that commit together: an implicit block."""
        block = TxBlock(FlightBlockPort(session), BLOCK_CONFIG)
        block.feed(txblock.ImplicitBlockStarted())
        return await self._trio(_in_implicit, self._host(session, block.txn), block, work)

    async def _run_any(self, session: Session, stmt: Statement, params: dict[str, Any] | None,
                       txn: FlightTxn | None) -> int:
        if stmt.kind is Kind.WRITE:
            host = self._host(session, txn.state if txn is not None else None)
            return (await self._guarded(txn, _execute_one, host, stmt, params)).count
        # A query sent as an update: run it, count its rows (PostgreSQL's "SELECT n").
        host = self._host(session, txn.state if txn is not None else None)
        return await self._guarded(txn, _count_rows, host, stmt, params)

    async def execute_many(self, session: Session, stmt: Statement, rows: list[dict[str, Any] | None],
                           txn_id: bytes | None, batches: list[pa.RecordBatch] | None = None) -> int:
        """executemany: each parameter row executes; outside a transaction the batch is one
        implicit transaction, so it is one Iceberg commit."""
        txn = self.transaction(session, txn_id)
        if stmt.kind not in (Kind.WRITE, Kind.QUERY):
            raise not_a_write(stmt)
        if batches and len(rows) > 1 and stmt.tag == "INSERT":
            host = self._host(session, txn.state if txn is not None else None)
            count = await self._guarded(txn, _insert_parameter_batches, host, stmt, batches)
            if count is not None:
                return count
        if txn is not None:
            total = 0
            for values in rows:
                total += await self._run_any(session, stmt, values, txn)
            return total
        if len(rows) == 1:
            return await self._run_any(session, stmt, rows[0], None)
        return sum(o.count for o in await self._implicit(session, [(stmt, values) for values in rows]))

    async def execute_rows(self, session: Session, stmt: Statement, rows: list[Params],
                           txn_id: bytes | None) -> list[core.WriteResult]:
        """A write once per parameter row, in order: in the transaction `txn_id` names, else all
        in one implicit transaction (one commit, or none)."""
        txn = self.transaction(session, txn_id)
        if txn is None:
            return await self._implicit(session, [(stmt, values) for values in rows])
        host = self._host(session, txn.state)
        return [await self._guarded(txn, _execute_one, host, stmt, values) for values in rows]

    # --- bulk ingest ----------------------------------------------------------------------------

    async def ingest(self, session: Session, command: wr.CommandStatementIngest,
                     schema: pa.Schema | None, batches: list[pa.RecordBatch]) -> int:
        """adbc_ingest: the stream's rows into the named table, in one commit."""
        if command.temporary:
            raise PgError("0A000", "temporary tables are not supported: every icegres table is an Iceberg "
                                   "table in the lake (ingest with temporary=false)")
        if not command.table:
            raise PgError("42602", "bulk ingest needs a table name")
        catalog = self.service.database
        if command.HasField("catalog") and command.catalog not in ("", catalog):
            raise PgError("3D000", f'catalog "{command.catalog}" does not exist (this server\'s catalog is '
                                   f'"{catalog}")')
        options = command.table_definition_options
        if_not_exist = options.if_not_exist or _Options.TABLE_NOT_EXIST_OPTION_CREATE
        if_exists = options.if_exists or _Options.TABLE_EXISTS_OPTION_FAIL
        txn = self.transaction(session, command.transaction_id if command.HasField("transaction_id") else None)
        # No schema message (a descriptor alone): nothing to append, and nothing to create from.
        data = pa.Table.from_batches(batches, schema=schema) if schema is not None else None
        host = self._host(session, txn.state if txn is not None else None)
        return await self._guarded(txn, _ingest, host, command.schema if command.HasField("schema") else None,
                                   command.table, if_not_exist, if_exists, data)

    # --- DoPut ----------------------------------------------------------------------------------

    async def do_put(self, stream: Stream, session: Session, command: Any, first: fl.FlightData) -> None:
        """DoPut of CommandStatementUpdate, CommandPreparedStatementUpdate or
        CommandStatementIngest: read the stream, run it, reply DoPutUpdateResult."""
        if isinstance(command, sql.CommandStatementUpdate):
            await _drain(stream, first, 1 << 20)
            txn_id = command.transaction_id if command.HasField("transaction_id") else None
            count = await self.execute_update(session, command.query, txn_id)
        elif isinstance(command, sql.CommandPreparedStatementUpdate):
            prepared = self.service.prepared(session, command.prepared_statement_handle)
            schema, batches = await _read_ipc(stream, first, EXECUTEMANY_BYTES_MAX)
            rows: list[Params | None] = [values or None for values in param_rows(batches)]
            if not rows:
                # No parameter batch: the statement runs once per row bound before (or once).
                rows = list(prepared.params or [None])
            count = await self.execute_many(session, prepared.stmt, rows, prepared.transaction_id, batches)
        elif isinstance(command, wr.CommandStatementIngest):
            schema, batches = await _read_ipc(stream, first, INGEST_BYTES_MAX)
            count = await self.ingest(session, command, schema, batches)
        else:
            raise M.BadCommand(f"{command.DESCRIPTOR.name} is not a DoPut command")
        reply = sql.DoPutUpdateResult(record_count=count)
        await stream.send_message(fl.PutResult(app_metadata=reply.SerializeToString()))


# --- trio side (worker threads behind the host) -----------------------------------------------------


async def _execute_one(host: LockedHost, stmt: Statement, params: dict[str, Any] | None) -> core.WriteResult:
    if core.is_ddl(stmt):
        return await core.run_ddl(host, stmt)
    if not core.is_dml(stmt):
        raise not_a_write(stmt)
    return await core.execute_dml(host, stmt, params)


async def _insert_parameter_batches(host: LockedHost, stmt: Statement, batches: list[pa.RecordBatch]) -> int | None:
    """executemany of `INSERT … VALUES ($1, $2, …)`: the parameter batches ARE the rows, so they
    are assigned to the columns as one Arrow table — one file, one key check — instead of one
    statement per row. None: another shape (the statement then runs once per row)."""

    def insert(txn: TxnState) -> int | None:
        return _insert_columns_from(host.qctx, txn, stmt, batches)

    return await core.in_transaction(host, insert)


def _insert_columns_from(qctx: Any, txn: TxnState, stmt: Statement, batches: list[pa.RecordBatch]) -> int | None:
    import sqlglot.expressions as exp

    from icegres.engine import dml
    from icegres.engine.dml import checks, defaults

    stmt = qctx.with_views(stmt)  # (`INSERT INTO "t@b"`: the transaction's pin of the branch)
    tree = stmt.tree
    if not isinstance(tree, exp.Insert) or tree.args.get("returning") is not None or tree.args.get("conflict"):
        return None
    source = tree.expression
    if not isinstance(source, exp.Values) or len(source.expressions) != 1:
        return None
    width = batches[0].num_columns
    refs: list[int | None] = []
    for item in source.expressions[0].expressions:
        if isinstance(item, exp.Parameter) and str(item.this.this).isdigit() and 1 <= int(item.this.this) <= width:
            refs.append(int(item.this.this) - 1)
        elif isinstance(item, exp.Null):
            refs.append(None)
        else:
            return None
    dml.pin(qctx, txn, stmt)
    table = tree.this.this if isinstance(tree.this, exp.Schema) else tree.this
    key = dml.target_key(qctx, txn, table)
    plan = dml.target_plan(txn, key)
    columns = dml.insert_columns(tree, plan)
    defaults.check_always_identity(tree, plan, columns)
    if len(columns) != len(refs):
        raise PgError("42601", "INSERT has more expressions than target columns" if len(refs) > len(columns)
                      else "INSERT has more target columns than expressions")
    params = pa.Table.from_batches(batches)
    data = pa.table({c: params.column(r) if r is not None else pa.nulls(params.num_rows)
                     for c, r in zip(columns, refs, strict=True)})
    # The columns the INSERT leaves out take their defaults (a serial column its nextval).
    rows = checks.conform(qctx, defaults.fill(qctx, plan, data), plan, key, "UTC")
    dml.check_unique(qctx, plan, key, rows, exclude_files=())
    dml.append(txn, key, rows)
    return rows.num_rows


async def _count_rows(host: LockedHost, stmt: Statement, params: dict[str, Any] | None) -> int:
    def count() -> int:
        _, batches = host.qctx.start(stmt, params)
        return sum((b if isinstance(b, pa.RecordBatch) else b.to_pyarrow()).num_rows for b in batches)

    return await host.run(count)


async def _in_implicit(host: LockedHost, block: TxBlock,
                       work: list[tuple[Statement, dict[str, Any] | None]]) -> list[core.WriteResult]:
    """Several statements (a script, an executemany) as one transaction: one commit, or none.
    What each reported, in order (a query's is PostgreSQL's "SELECT n")."""
    outcomes = []
    try:
        for stmt, params in work:
            if stmt.kind is Kind.WRITE:
                outcomes.append(await _execute_one(host, stmt, params))
            else:
                outcomes.append(core.WriteResult(f"SELECT {await _count_rows(host, stmt, params)}"))
    except BaseException:
        block.feed(txblock.StatementFailed())
        await finish(host, block.feed(txblock.ImplicitBlockEnded()))
        raise
    ending = block.feed(txblock.ImplicitBlockEnded())
    try:
        await finish(host, ending)
    except BaseException:
        if ending is not None:
            await core.discard(host, ending.txn)  # what a refused commit left staged goes too
        raise
    return outcomes


async def _ingest(host: LockedHost, schema_name: str | None, table: str, if_not_exist: int, if_exists: int,
                  data: pa.Table | None) -> int:
    from icegres.engine import ddl, ddl_apply, ddl_ctas

    qctx = host.qctx
    lakehouse = qctx.engine.lakehouse
    path = list(qctx.env.search_path)

    def locate() -> tuple[str, str, bool, str | None]:
        """The namespace, the table, whether it exists, and the branch appended to: `t@b`
        names branch b of t, and under icegres.branch a table that has that branch is read as it."""
        namespace = ddl_apply.creation_schema(lakehouse, schema_name, path)
        if lakehouse.table_exists(namespace, table):
            branch = time_travel.session_branch(qctx)
            if branch is not None and branch in lakehouse.load_table(namespace, table).metadata.refs:
                return namespace, table, True, branch
            return namespace, table, True, None
        base, _, ref = table.rpartition("@")
        if base and ref and lakehouse.table_exists(namespace, base):
            return namespace, base, True, ref
        return namespace, table, False, None

    namespace, table, exists, ref = await host.run(locate)
    if ref is not None and if_exists == _Options.TABLE_EXISTS_OPTION_REPLACE:
        raise PgError("0A000", f'bulk ingest cannot replace branch "{ref}" of table "{namespace}.{table}"',
                      hint='Ingest in "append" mode to add to the branch.')
    key = (namespace, table)
    shown = f"{namespace}.{table}"
    if exists and if_exists == _Options.TABLE_EXISTS_OPTION_FAIL:
        raise PgError("42P07", f'relation "{shown}" already exists (ingest mode "create"; use "append", '
                               '"create_append" or "replace")')
    if not exists and if_not_exist == _Options.TABLE_NOT_EXIST_OPTION_FAIL:
        raise PgError("42P01", f'relation "{shown}" does not exist (ingest mode "append"; use "create" or '
                               '"create_append")')
    replace = exists and if_exists == _Options.TABLE_EXISTS_OPTION_REPLACE
    ladder = qctx.engine.ladder
    if replace and ladder is not None:
        await ladder.settle({key})
    if replace or not exists:
        if data is None:
            raise PgError("22023", f'bulk ingest received no Arrow schema, so there is no definition to '
                                   f'{"replace" if replace else "create"} table "{shown}" from')

        def create() -> None:
            if replace:
                ddl_apply.apply_ddl(lakehouse, ddl.DropTable(((namespace, table),)), path)
            cmd = ddl.CreateTableAs(schema=namespace, name=table, query_sql="")
            ddl_ctas.create_table_from_arrow(lakehouse, cmd, data.schema, path)
            qctx.engine.refresh({key})
            qctx.forget_routes()

        await host.run(create)
    if data is None or data.num_rows == 0:
        return 0
    if exists and not replace:
        data = await host.run(_match_columns, qctx, key, data)
    return await core.append_rows(host, key, data, ref)


def _match_columns(qctx: Any, key: tuple[str, str], data: pa.Table) -> pa.Table:
    """Appending: the stream's columns by name, in the table's order; the table's other columns
    take their DEFAULTs, else NULL. A column the table does not have is a schema mismatch (42804)."""
    from icegres.engine.dml import defaults

    qctx.engine.refresh({key})
    plan = qctx.engine.read_plan(*key)
    if plan is None:
        raise PgError("42P01", f'relation "{key[0]}.{key[1]}" does not exist')
    names = plan.schema.names
    extra = [n for n in data.column_names if n not in names]
    if extra or len(set(data.column_names)) != len(data.column_names):
        raise PgError("42804", f'ingest schema does not match table "{key[0]}.{key[1]}": stream columns '
                               f'({", ".join(data.column_names)}), table columns ({", ".join(names)})')
    data = defaults.fill(qctx, plan, data)
    columns = [data.column(n) if n in data.column_names else pa.nulls(data.num_rows) for n in names]
    return pa.Table.from_arrays(columns, names=names)


# --- stream reading ---------------------------------------------------------------------------------


async def _drain(stream: Stream, first: fl.FlightData, limit: int) -> None:
    """A descriptor-only DoPut: anything after the first message is read and ignored (bounded)."""
    size = len(first.data_header) + len(first.data_body)
    while (message := await stream.recv_message()) is not None:
        size += len(message.data_header) + len(message.data_body)
        if size > limit:
            raise M.BadCommand(f"unexpected data after the command ({size} bytes)")


async def _read_ipc(stream: Stream, first: fl.FlightData,
                    limit: int) -> tuple[pa.Schema | None, list[pa.RecordBatch]]:
    """The Arrow IPC stream of a DoPut (schema first, then batches), at most `limit` bytes."""
    reader = M.IpcStreamReader()
    batches: list[pa.RecordBatch] = []
    size = 0
    message: fl.FlightData | None = first
    schema: pa.Schema | None = None
    while message is not None:
        size += len(message.data_body) + len(message.data_header)
        if size > limit:
            raise GRPCError(Status.RESOURCE_EXHAUSTED, f"DoPut stream exceeds {limit} bytes (SQLSTATE 54000)")
        batch = reader.feed(message)
        if schema is None:
            schema = reader.schema
        elif reader.schema is not schema:
            raise M.BadCommand("the IPC stream sent a second schema: one DoPut carries one schema")
        if batch is not None:
            batches.append(batch)
        message = await stream.recv_message()
    return schema, batches


def empty_put_message() -> str:
    """Why a DoPut with no message at all is refused (it names no command, table or schema)."""
    return ("DoPut without any FlightData message: no command, table or schema arrived, so nothing was "
            "done. The ADBC Flight SQL driver sends nothing at all when adbc_ingest gets an empty table; "
            "to create an empty table, ingest a RecordBatchReader holding one empty batch (it carries "
            "the schema) or use CREATE TABLE")


def not_a_write(stmt: Statement) -> PgError:
    if stmt.kind in (Kind.SAVEPOINT, Kind.RELEASE, Kind.ROLLBACK_TO):
        return PgError("0A000", f"{stmt.tag} as SQL text over Flight SQL is not supported: use the "
                                "BeginSavepoint and EndSavepoint actions")
    if stmt.kind in (Kind.BEGIN, Kind.COMMIT, Kind.ROLLBACK):
        return PgError("0A000", f"{stmt.tag} over Flight SQL is not supported: use the BeginTransaction and "
                                "EndTransaction actions (ADBC: autocommit off, then commit() or rollback())")
    return PgError("0A000", f"{stmt.tag or 'this statement'} over Flight SQL is not supported: Flight SQL "
                            "runs queries, INSERT/UPDATE/DELETE/TRUNCATE and CREATE/DROP/ALTER")
