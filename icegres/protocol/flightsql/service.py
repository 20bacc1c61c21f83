"""The Flight SQL service: grpclib handlers for arrow.flight.protocol.FlightService.

Handlers are asyncio coroutines (grpclib), driven by trio through trio-asyncio. Every engine call
— planning, DataFusion batches, IPC encoding, catalog round trips — runs in a worker thread behind
the server's trio.CapacityLimiter (the one pgwire uses), so the event loop only moves bytes.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import itertools
import logging
import re
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NamedTuple

import pyarrow as pa
from google.protobuf.message import Message
from grpclib.const import Cardinality, Handler, Status
from grpclib.encoding.proto import ProtoCodec
from grpclib.exceptions import GRPCError

from icegres import __version__
from icegres.engine.catalog import BUSY
from icegres.engine.query import open_session
from icegres.pg.errors import PgError
from icegres.protocol.flightsql import errors, h2send, metadata
from icegres.protocol.flightsql import icegres_flight_pb2 as fl
from icegres.protocol.flightsql import icegres_flight_sql_pb2 as sql
from icegres.protocol.flightsql import messages as M
from icegres.protocol.flightsql.auth import FlightAuth
from icegres.protocol.flightsql.bindings import Params, param_rows, run_each
from icegres.protocol.flightsql.drain import RELEASING_ACTIONS, Drain
from icegres.protocol.flightsql.pipeline import Pipeline
from icegres.protocol.flightsql.result_stream import (
    CHUNK_BYTES,
    MESSAGE_BYTES,
    encode_groups,
    pull_messages,
    take_groups,
)
from icegres.protocol.flightsql.sessions import (
    RESULTS_MAX,
    SESSIONS_MAX,
    Bounded,
    FlightTxn,
    Prepared,
    Result,
    Session,
    Speculation,
    new_handle,
)
from icegres.protocol.flightsql.writes import (
    DOPUT_COMMANDS,
    FlightWrites,
    empty_put_message,
    not_a_write,
)
from icegres.protocol.statement_metrics import STATEMENTS
from icegres.protocol.statement_record import Policy, Record, finish, statement_class
from icegres.protocol.tokens import validator_for
from icegres.sql.statement import Kind, Statement, query

if TYPE_CHECKING:
    from grpclib.server import Stream

    from icegres.engine.row_source import RowSource
    from icegres.engine.txn import TxnState
    from icegres.protocol.flightsql.port import ServerPort

log = logging.getLogger("icegres.flightsql")

SERVICE = "/arrow.flight.protocol.FlightService/"
ANONYMOUS_USER = "icegres"

PARAMETER_BYTES_MAX = 64 << 20  # parameter batches bound by one DoPut

SYSTEM_SCHEMAS = frozenset({"pg_catalog", "pg_toast", "information_schema"})
TABLE_TYPES = {"BASE TABLE": "TABLE", "VIEW": "VIEW"}

# SqlInfo ids (FlightSql.proto enum SqlInfo) and what this server honestly reports.
SQL_INFO: dict[int, M.SqlInfoValue] = {
    0: "icegres",  # FLIGHT_SQL_SERVER_NAME
    1: __version__,  # FLIGHT_SQL_SERVER_VERSION
    2: pa.__version__,  # FLIGHT_SQL_SERVER_ARROW_VERSION
    3: False,  # FLIGHT_SQL_SERVER_READ_ONLY: DML, DDL and bulk ingest (flightsql/writes.py)
    4: True,  # FLIGHT_SQL_SERVER_SQL
    5: False,  # FLIGHT_SQL_SERVER_SUBSTRAIT
    # FLIGHT_SQL_SERVER_TRANSACTION: 2 = transactions (BeginTransaction/EndTransaction) and
    # savepoints (BeginSavepoint/EndSavepoint). ADBC opens a transaction at connect (any value
    # >= 1) unless autocommit=True.
    8: M.Int32(2),
    9: False,  # FLIGHT_SQL_SERVER_CANCEL: no CancelFlightInfo; cancelling the DoGet stream works
    100: M.Int32(0),  # FLIGHT_SQL_SERVER_STATEMENT_TIMEOUT: prepared handles never time out
    101: M.Int32(0),  # FLIGHT_SQL_SERVER_TRANSACTION_TIMEOUT
    500: False,  # SQL_DDL_CATALOG
    501: True,  # SQL_DDL_SCHEMA: CREATE/DROP SCHEMA
    502: True,  # SQL_DDL_TABLE: CREATE/ALTER/DROP TABLE
    503: M.Int32(3),  # SQL_IDENTIFIER_CASE: lower case (unquoted names fold as in PostgreSQL)
    504: '"',  # SQL_IDENTIFIER_QUOTE_CHAR
    506: True,  # SQL_ALL_TABLES_ARE_SELECTABLE
    507: M.Int32(0),  # SQL_NULL_ORDERING: NULLs sort high, as in PostgreSQL
    # SQL_DEFAULT_TRANSACTION_ISOLATION: snapshot isolation, reported as REPEATABLE READ (3) as
    # PostgreSQL's own snapshot isolation is; SQL_SUPPORTED_TRANSACTIONS_ISOLATION_LEVELS: it and
    # SERIALIZABLE (bits 3 and 4, via default_transaction_isolation).
    562: M.Int32(3),
    563: True,  # SQL_TRANSACTIONS_SUPPORTED
    564: M.Int32((1 << 3) | (1 << 4)),
    572: True,  # SQL_BATCH_UPDATES_SUPPORTED: executemany is one DoPut, one commit
    573: True,  # SQL_SAVEPOINTS_SUPPORTED: BeginSavepoint / EndSavepoint (release, rollback)
}

ACTIONS = {
    "CreatePreparedStatement": "prepare a SQL query; returns its handle and schemas",
    "ClosePreparedStatement": "release a prepared statement",
    "GetSessionOptions": "current session options (catalog, schema)",
    "SetSessionOptions": "set session options (catalog, schema)",
    "CloseSession": "end this session: release its prepared statements, roll back its transactions",
    "BeginTransaction": "open a transaction (snapshot isolation); returns its id",
    "EndTransaction": "commit or roll back a transaction",
    "BeginSavepoint": "set a savepoint in a transaction; returns its id",
    "EndSavepoint": "release a savepoint, or roll back to it",
}


class _Codec(ProtoCodec):
    """Protobuf, except that bytes go out as they are: DoGet's FlightData is encoded by hand."""

    def encode(self, message: Any, message_type: Any) -> bytes:
        if isinstance(message, bytes):
            return message
        return super().encode(message, message_type)


CODEC = _Codec()


class Identity:
    __slots__ = ("key", "user")

    def __init__(self, key: str, user: str) -> None:
        self.key = key
        self.user = user


def _grpc_error(exc: BaseException) -> GRPCError:
    if isinstance(exc, GRPCError):
        return exc
    if isinstance(exc, PgError):
        return GRPCError(errors.status_for(exc.sqlstate), errors.message_for(exc))
    if isinstance(exc, M.UnsupportedCommand):
        return GRPCError(Status.UNIMPLEMENTED, f"{exc} (SQLSTATE 0A000)")
    if isinstance(exc, M.BadCommand):
        return GRPCError(Status.INVALID_ARGUMENT, f"{exc} (SQLSTATE 08P01)")
    return GRPCError(Status.INTERNAL, f"internal error: {exc} (SQLSTATE XX000)")


def _rpc(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Every failure of a handler leaves as a gRPC status; a bug costs one call, never the server.
    Each call is a statement record (statement_record.py): its correlation id goes with its
    error as trailing metadata `icegres-correlation-id`, to its log line and to /metrics."""

    async def wrapper(self: FlightSqlService, stream: Stream) -> None:
        peer = stream.peer.addr() if stream.peer is not None else None
        record = Record("flightsql", rpc=fn.__name__, database=self.database, client=str(peer[0]) if peer else "")
        token = _RECORD.set(record)
        try:
            self.server.connections.admit(stream)  # 53300 beyond --max-connections (connections.py)
            with self.drain.call(fn.__name__):
                await fn(self, stream)
        except (GRPCError, PgError, M.BadCommand) as exc:
            await _fail(stream, record, _grpc_error(exc))
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.exception("internal error in %s", fn.__name__)
            await _fail(stream, record, _grpc_error(exc))
        finally:
            _RECORD.reset(token)
            elapsed_s = finish(record, Policy(self.server.settings.log_statement,
                                              self.server.settings.log_min_error_statement))
            STATEMENTS.observe("flightsql", "ok" if record.severity is None else "error", elapsed_s, record.id)

    wrapper.__name__ = fn.__name__
    return wrapper


_RECORD: contextvars.ContextVar[Record | None] = contextvars.ContextVar("flight_statement", default=None)
_SQLSTATE = re.compile(r"\(SQLSTATE ([0-9A-Z]{5})\)")


def _note(*, user: str | None = None, text: str | None = None) -> None:
    """What the running call's record learns on the way: who called, the statement it runs."""
    record = _RECORD.get()
    if record is not None:
        if user is not None:
            record.user = user
        if text is not None:
            record.text, record.cls = text, statement_class(text.lstrip())


async def _fail(stream: Stream, record: Record, err: GRPCError) -> None:
    """Send `err` with the record's correlation id in the trailers (raise it if that fails)."""
    found = _SQLSTATE.search(err.message or "")
    record.failed(found.group(1) if found else "XX000", err.message or "")
    try:
        await stream.send_trailing_metadata(status=err.status, status_message=err.message,
                                            status_details=err.details,
                                            metadata={"icegres-correlation-id": record.id})
    except Exception:  # the stream is past trailers (or gone): grpclib reports the status itself
        raise err from None


def unimplemented(what: str) -> GRPCError:
    return GRPCError(Status.UNIMPLEMENTED, f"{what} is not supported by this server yet (SQLSTATE 0A000)")


def like_regex(pattern: str) -> re.Pattern[str]:
    """A SQL LIKE pattern (`%`, `_`, backslash escapes) as a regular expression."""
    out = []
    chars = iter(pattern)
    for ch in chars:
        if ch == "\\":
            out.append(re.escape(next(chars, "\\")))
        elif ch == "%":
            out.append(".*")
        elif ch == "_":
            out.append(".")
        else:
            out.append(re.escape(ch))
    return re.compile("".join(out), re.DOTALL)


class _Began(NamedTuple):
    """A query CreatePreparedStatement started (`FlightSqlService._speculate`)."""

    token: int  # the catalog's change token, read before the start
    settings: dict[str, Any]  # the session's settings it planned under
    version: int | None  # its transaction's version after the start pinned (None: autocommit)
    schema: pa.Schema  # the wire schema
    source: RowSource


class FlightSqlService:
    """grpclib servable: the FlightService methods that Flight SQL uses."""

    def __init__(self, server: ServerPort) -> None:
        self.server = server
        self.auth = FlightAuth(server.settings, validator_for(server.settings), server.backoff,
                               server.engine.authorization)
        self.database = server.settings.database
        # IPC body compression of query results (None = off); metadata results stay uncompressed.
        codec = getattr(server.settings, "result_compression", "none")
        self.compression: str | None = None if codec in (None, "none") else codec
        self._sessions: Bounded[str, Session] = Bounded(SESSIONS_MAX)
        self.results: Bounded[bytes, Result] = Bounded(RESULTS_MAX, on_evict=Result.close)
        # First-message pulls of started prepared statements (`_speculate`), each with its stop
        # event: they outlive the RPC that started them, so the service owns them until shutdown.
        self._pulls: dict[asyncio.Future[Any], threading.Event] = {}
        self._pids = itertools.count(1)
        self.writes = FlightWrites(self)
        self.drain = Drain()

    def busy(self) -> bool:
        """Whether a drain must wait on: a call runs, or a query ticket is still to be read."""
        return self.drain.busy(result.awaiting_doget for result in self.results.values())

    def __mapping__(self) -> dict[str, Handler]:
        return {
            SERVICE + "Handshake": Handler(self.Handshake, Cardinality.STREAM_STREAM,
                                           fl.HandshakeRequest, fl.HandshakeResponse),
            SERVICE + "ListFlights": Handler(self.ListFlights, Cardinality.UNARY_STREAM,
                                             fl.Criteria, fl.FlightInfo),
            SERVICE + "GetFlightInfo": Handler(self.GetFlightInfo, Cardinality.UNARY_UNARY,
                                               fl.FlightDescriptor, fl.FlightInfo),
            SERVICE + "GetSchema": Handler(self.GetSchema, Cardinality.UNARY_UNARY,
                                           fl.FlightDescriptor, fl.SchemaResult),
            SERVICE + "DoGet": Handler(self.DoGet, Cardinality.UNARY_STREAM, fl.Ticket, fl.FlightData),
            SERVICE + "DoPut": Handler(self.DoPut, Cardinality.STREAM_STREAM, fl.FlightData, fl.PutResult),
            SERVICE + "DoAction": Handler(self.DoAction, Cardinality.UNARY_STREAM, fl.Action, fl.Result),
            SERVICE + "ListActions": Handler(self.ListActions, Cardinality.UNARY_STREAM,
                                             fl.Empty, fl.ActionType),
        }

    # --- authentication and sessions ------------------------------------------------------------

    async def authenticate(self, stream: Stream) -> Identity:
        """Who is calling: a bearer token (ours or a JWT), Basic credentials, or (trust only)
        anyone. UNAUTHENTICATED otherwise (flightsql/auth.py). The connection's first success
        ends its authentication timeout and checks the reserved slots (connections.py)."""
        who = await self._identify(stream)
        _note(user=who.user)  # the call's record names the user, a refused one's too
        self.server.connections.authenticated(stream, who.user)
        return who

    async def _identify(self, stream: Stream) -> Identity:
        header = (stream.metadata or {}).get("authorization") if stream.metadata is not None else None
        peer = stream.peer.addr() if stream.peer is not None else None
        peer_key = f"peer:{peer[0]}:{peer[1]}" if peer else "peer:?"
        addr = str(peer[0]) if peer else "?"  # what the failed-login back-off counts by
        if isinstance(header, str):
            scheme, _, value = header.partition(" ")
            if scheme.lower() == "bearer" and value:
                found = await self.auth.bearer(value.strip(), addr, peer_key)
                if found is not None:
                    return Identity(*found)
                return Identity("token:" + value.strip(), ANONYMOUS_USER)
            if scheme.lower() == "basic":
                return Identity(peer_key, await self.auth.basic(value, addr, peer_key))
            if self.auth.required:
                raise GRPCError(Status.UNAUTHENTICATED, "unsupported authorization scheme (SQLSTATE 28000)")
        elif self.auth.required:
            raise GRPCError(Status.UNAUTHENTICATED, "authentication required (SQLSTATE 28000)")
        return Identity(peer_key, ANONYMOUS_USER)

    async def session(self, stream: Stream) -> Session:
        who = await self.authenticate(stream)
        session = self._sessions.get(who.key)
        if session is None or session.user != who.user:
            from icegres.engine.lake import SERVER_VERSION, SessionEnv
            from icegres.pg import settings as guc

            env = SessionEnv(database=self.database, login_user=who.user, backend_pid=next(self._pids),
                             settings=guc.defaults(SERVER_VERSION, who.user) | self.server.engine.session_defaults)
            session = Session(who.key, who.user, open_session(self.server.engine, env), self.database)
            self._sessions.put(who.key, session)
        return session

    async def run_sync(self, fn: Callable[..., Any], *args: Any) -> Any:
        return await self.server.run_sync(fn, *args)

    # --- Handshake ------------------------------------------------------------------------------

    @_rpc
    async def Handshake(self, stream: Stream) -> None:
        """Basic credentials (or a bearer JWT) in the header, no HandshakeRequest needed -> a
        bearer token of ours."""
        header = stream.metadata.get("authorization") if stream.metadata is not None else None
        if isinstance(header, str) and header.partition(" ")[0].lower() in ("basic", "bearer"):
            user = (await self.authenticate(stream)).user
        elif self.auth.required:
            raise GRPCError(Status.UNAUTHENTICATED, "Handshake needs Basic credentials (SQLSTATE 28000)")
        else:
            user = ANONYMOUS_USER
        token = self.auth.issue(user)
        await stream.send_initial_metadata(metadata={"authorization": f"Bearer {token}"})
        log.info("flight handshake: user %s", user)

    # --- GetFlightInfo / GetSchema -------------------------------------------------------------

    def _command(self, descriptor: fl.FlightDescriptor) -> Message:
        if descriptor.type != fl.FlightDescriptor.CMD:
            raise M.BadCommand("only CMD descriptors are served (Flight SQL commands)")
        return M.decode_command(descriptor.cmd)

    @_rpc
    async def GetFlightInfo(self, stream: Stream) -> None:
        descriptor = await stream.recv_message()
        assert descriptor is not None
        session = await self.session(stream)
        command = self._command(descriptor)
        self.drain.check(isinstance(command, sql.CommandPreparedStatementQuery))
        if isinstance(command, sql.CommandStatementQuery):
            txn_id = command.transaction_id if command.HasField("transaction_id") else None
            _note(text=command.query)
            stmt = self.writes.statement(session, command.query, txn_id)
            result = await self.writes.start(session, stmt, None, txn_id)
            info = self._result_info(descriptor, result)
        elif isinstance(command, sql.CommandPreparedStatementQuery):
            prepared = self.prepared(session, command.prepared_statement_handle)
            _note(text=prepared.stmt.sql)
            result = await self._take_speculation(session, prepared)
            if result is None:
                result = await self.writes.start(session, prepared.stmt, prepared.params, prepared.transaction_id)
            info = self._result_info(descriptor, result)
        else:
            schema = self._metadata_schema(command)
            info = fl.FlightInfo(
                schema=M.schema_bytes(schema), flight_descriptor=descriptor,
                endpoint=[fl.FlightEndpoint(ticket=fl.Ticket(ticket=descriptor.cmd))],
                total_records=-1, total_bytes=-1, ordered=True,
            )
        await stream.send_message(info)

    @_rpc
    async def GetSchema(self, stream: Stream) -> None:
        descriptor = await stream.recv_message()
        assert descriptor is not None
        session = await self.session(stream)
        command = self._command(descriptor)
        if isinstance(command, sql.CommandStatementQuery):
            txn_id = command.transaction_id if command.HasField("transaction_id") else None
            _note(text=command.query)
            stmt = self.writes.statement(session, command.query, txn_id)
            schema = (await self.writes.describe(session, stmt, txn_id))[0]
        elif isinstance(command, sql.CommandPreparedStatementQuery):
            schema = self.prepared(session, command.prepared_statement_handle).dataset_schema
        else:
            schema = self._metadata_schema(command)
        await stream.send_message(fl.SchemaResult(schema=M.schema_bytes(schema)))

    def _result_info(self, descriptor: fl.FlightDescriptor, result: Result) -> fl.FlightInfo:
        result.awaiting_doget = True
        ticket = M.pack_any(sql.TicketStatementQuery(statement_handle=result.handle))
        return fl.FlightInfo(
            schema=M.schema_bytes(result.schema), flight_descriptor=descriptor,
            endpoint=[fl.FlightEndpoint(ticket=fl.Ticket(ticket=ticket))],
            total_records=result.rows if result.exhausted else -1, total_bytes=-1, ordered=True,
        )

    def _metadata_schema(self, command: Message) -> pa.Schema:
        if isinstance(command, sql.CommandGetSqlInfo):
            return M.SQL_INFO_SCHEMA
        if isinstance(command, sql.CommandGetCatalogs):
            return M.CATALOGS_SCHEMA
        if isinstance(command, sql.CommandGetDbSchemas):
            return M.DB_SCHEMAS_SCHEMA
        if isinstance(command, sql.CommandGetTables):
            return M.TABLES_WITH_SCHEMA_SCHEMA if command.include_schema else M.TABLES_SCHEMA
        if isinstance(command, sql.CommandGetTableTypes):
            return M.TABLE_TYPES_SCHEMA
        if (schema := metadata.schema_of(command)) is not None:
            return schema
        if isinstance(command, sql.CommandStatementUpdate | sql.CommandPreparedStatementUpdate):
            raise M.BadCommand(f"{command.DESCRIPTOR.name} belongs in DoPut, not GetFlightInfo")
        raise M.BadCommand(f"{command.DESCRIPTOR.name} is not a GetFlightInfo command")

    def prepared(self, session: Session, handle: bytes) -> Prepared:
        prepared = session.prepared.get(handle)
        if prepared is None:
            raise GRPCError(Status.NOT_FOUND, "prepared statement does not exist (SQLSTATE 26000)")
        return prepared

    # --- running queries ------------------------------------------------------------------------

    @staticmethod
    def _check_query(stmt: Statement) -> None:
        # UNSUPPORTED (not a statement we recognise) goes to the planner, whose error says why.
        if stmt.kind not in (Kind.QUERY, Kind.UNSUPPORTED):
            raise not_a_write(stmt)

    async def start_query(self, session: Session, stmt: Statement, params: list[Params] | None,
                          txn: TxnState | None = None) -> Result:
        """Plan and start a query and pull its first messages (in a worker thread); inside
        transaction `txn` it reads the transaction's snapshots and staged writes. Bound to
        several parameter rows it runs once per row, all rows reading one snapshot (`txn`'s, else
        a read-only transaction's of its own), and its result is theirs concatenated
        (`bindings.run_each`)."""
        self._check_query(stmt)
        from icegres.engine.row_source import RowSource
        from icegres.engine.txn import new_transaction

        handle = new_handle()
        bound = params or [None]

        def start() -> Result:
            with session.lock:
                qctx = session.qctx
                own = txn is None and len(bound) > 1
                qctx.txn = new_transaction(qctx.env.settings.get("default_transaction_isolation"), None) if own else txn
                try:
                    if len(bound) == 1:
                        schema, batches = qctx.start(stmt, bound[0])
                    else:
                        schema, done = run_each(functools.partial(qctx.start, stmt), bound)
                        batches = iter(done)
                finally:
                    if own:
                        qctx.end_transaction()  # its private context goes with it
                    qctx.txn = None
            source = RowSource(schema, batches)
            wire = M.wire_schema(schema)
            # Pulling the first message now tells a small result's row count (total_records)
            # and surfaces execution errors at GetFlightInfo, where the client expects them.
            first, rows, exhausted = pull_messages(source, wire, threading.Event(), MESSAGE_BYTES,
                                                   self.compression)
            return Result(handle, session.key, stmt, params, wire, None if exhausted else source,
                          first, exhausted, rows, txn)

        result = await self.run_sync(start)
        self.results.put(handle, result)
        return result

    def _may_speculate(self, stmt: Statement) -> bool:
        """Whether CreatePreparedStatement may start `stmt` (see `Speculation`): a query with no
        placeholders, over a catalog whose change token sees every commit and whose transactions
        pin every table at their first statement (not REST), with the write buffer off (its
        acked rows are no commit, and transactions settle it when they pin)."""
        engine = self.server.engine
        return ("$" not in stmt.sql and engine.ladder is None and engine.lakehouse.kind != "rest"
                and stmt.kind is Kind.QUERY)

    async def _speculate(self, session: Session, stmt: Statement, txn: FlightTxn | None) -> Speculation | None:
        """Start `stmt` (in transaction `txn`, if any) for the GetFlightInfo that should follow;
        None: describe it instead.

        One worker-thread call plans and starts the query, hands the result schema to the loop
        (the prepare's reply goes out then) and goes on to pull the first message, which thus
        overlaps the client's turnaround to GetFlightInfo. Any planning or execution error leaves
        the statement to the usual path, which reports it where it always did (and, inside a
        transaction, aborts it there).
        """
        if not self._may_speculate(stmt) or (txn is not None and txn.failed):
            return None
        from icegres.engine.row_source import RowSource

        lakehouse = self.server.engine.lakehouse
        state = txn.state if txn is not None else None
        loop = asyncio.get_running_loop()
        started: asyncio.Future[Speculation | None] = loop.create_future()
        handle, stop = new_handle(), threading.Event()

        def tell(began: _Began | None) -> None:  # on the loop thread, after `pulled` is set below
            if started.done():
                return
            if began is None:
                started.set_result(None)
                return
            started.set_result(Speculation(began.token, began.settings, txn.ident if txn is not None else None,
                                           began.version, handle, began.schema, pulled, stop))

        def begin() -> _Began | None:
            try:
                # The token is read before the start refreshes: equal at GetFlightInfo, no commit
                # finished in between, so what the start mounted is still the catalog's head.
                token = lakehouse.change_token()
                if token is None:
                    return None
                with session.lock:
                    session.qctx.txn = state
                    try:
                        settings = dict(session.qctx.env.settings)
                        schema, batches = session.qctx.start(stmt, None)
                    finally:
                        session.qctx.txn = None
                    version = state.version if state is not None else None
            except Exception:  # describe (or GetFlightInfo) reports it
                return None
            return _Began(token, settings, version, M.wire_schema(schema), RowSource(schema, batches))

        def run() -> Result | None:  # in the worker thread
            began = None
            try:
                began = begin()
            finally:  # the prepare waits for this, whatever happens
                loop.call_soon_threadsafe(tell, began)
            if began is None:
                return None
            first, rows, exhausted = pull_messages(began.source, began.schema, stop, MESSAGE_BYTES,
                                                   self.compression)
            return Result(handle, session.key, stmt, None, began.schema, None if exhausted else began.source,
                          first, exhausted, rows, state)

        async def pull() -> Result | None:
            result = await self.run_sync(run)
            if result is not None and not stop.is_set():
                self.results.put(handle, result)
            return result

        pulled = asyncio.ensure_future(pull())
        self._pulls[pulled] = stop
        pulled.add_done_callback(self._pull_done)
        try:
            return await started
        except BaseException:  # cancelled: the pull stops at its next batch, its result unheld
            stop.set()
            raise

    async def _speculation_holds(self, session: Session, prepared: Prepared, speculation: Speculation) -> bool:
        """Whether a fresh start of `prepared` now would read what `speculation` read."""
        if prepared.params is not None or self.server.engine.ladder is not None:
            return False
        if dict(session.qctx.env.settings) != speculation.settings:
            return False
        if speculation.txn_ident is not None:
            # A transaction reads the snapshot its first statement pinned (the speculation's
            # start pinned it at the latest) plus its own writes: the same while it is the same
            # open transaction at the same version.
            txn = session.transactions.get(speculation.txn_ident)
            if txn is None or txn.failed or txn.state.version != speculation.txn_version:
                return False
            try:
                return self.writes.transaction(session, prepared.transaction_id) is txn
            except (GRPCError, PgError):  # the usual path reports it
                return False
        if prepared.transaction_id is not None:
            return False
        # PRAGMA data_version (~10 us) is read here when it can be without waiting; a committing
        # writer can hold SQLite's lock for a while, and that wait goes to a worker thread. The
        # thread hop cost 0.5-1 ms here, as the speculation's own pull was still busy on the CPU.
        lakehouse = self.server.engine.lakehouse
        token = lakehouse.change_token_now()
        if token is BUSY:
            token = await self.run_sync(lakehouse.change_token)
        return token == speculation.token

    async def _take_speculation(self, session: Session, prepared: Prepared) -> Result | None:
        """The Result CreatePreparedStatement started, if the statement would read the same now."""
        speculation, prepared.speculation = prepared.speculation, None
        if speculation is None:
            return None
        try:
            holds = await self._speculation_holds(session, prepared, speculation)
        except BaseException:  # cancelled (deadline, client gone) while checking: nothing keeps it
            self._discard(speculation)
            raise
        if not holds:
            self._discard(speculation)
            return None
        try:
            pulled = await speculation.pulled
        except Exception:
            # An execution error: the statement runs again and reports it as it always did.
            self._discard(speculation)
            return None
        except BaseException:  # cancelled (deadline, client gone): the pull stops, nothing keeps it
            self._discard(speculation)
            raise
        result = self.results.get(speculation.handle) if pulled is not None else None
        if result is None:  # evicted meanwhile (the results table is bounded)
            return None
        return result

    def _pull_done(self, pulled: asyncio.Future[Any]) -> None:
        self._pulls.pop(pulled, None)
        # A discarded speculation's failure is nobody's error: retrieve it so asyncio keeps quiet.
        if not pulled.cancelled():
            pulled.exception()

    def stop_speculations(self) -> None:
        """At shutdown: stop every first-message pull still running (its result is nobody's)."""
        for pulled, stop in list(self._pulls.items()):
            stop.set()
            pulled.cancel()

    def _discard(self, speculation: Speculation) -> None:
        speculation.stop.set()
        # A pull still waiting for the first batch (a long aggregate, a runaway join) ends now and
        # frees its thread (engine/batches.py); one between batches stops at `stop`.
        speculation.pulled.cancel()

        def drop(_: Any) -> None:
            dropped = self.results.pop(speculation.handle)
            if dropped is not None:
                dropped.close()

        speculation.pulled.add_done_callback(drop)

    async def describe_query(self, session: Session, stmt: Statement, txn: TxnState | None = None,
                             fresh: bool = True) -> tuple[pa.Schema, pa.Schema]:
        """(result schema on the wire, parameter schema) of a query, without running it
        (`fresh`: as `QueryContext.describe`)."""
        self._check_query(stmt)

        def describe() -> tuple[pa.Schema, pa.Schema]:
            with session.lock:
                session.qctx.txn = txn
                try:
                    schema, inferred = session.qctx.describe(stmt, fresh)
                finally:
                    session.qctx.txn = None
            count = max([*inferred.keys(), stmt.max_param], default=0)
            params = pa.schema([
                pa.field(f"${i}", M.wire_type(inferred[i]) if i in inferred else pa.null())
                for i in range(1, count + 1)
            ])
            return M.wire_schema(schema), params

        return await self.run_sync(describe)

    # --- DoGet ----------------------------------------------------------------------------------

    @_rpc
    async def DoGet(self, stream: Stream) -> None:
        ticket = await stream.recv_message()
        assert ticket is not None
        session = await self.session(stream)
        command = M.decode_command(ticket.ticket)
        if isinstance(command, sql.TicketStatementQuery):
            result = self.results.get(command.statement_handle)
            if result is None or result.session_key != session.key:
                raise GRPCError(Status.NOT_FOUND, "unknown or expired ticket (SQLSTATE 26000)")
            result.awaiting_doget = False
            await self._stream_result(stream, session, result)
            return
        schema = self._metadata_schema(command)
        batch = await self.run_sync(self._metadata, session, command)
        await stream.send_message(M.schema_flight_data(schema))
        if batch.num_rows:
            await stream.send_message(await self.run_sync(M.batch_flight_data, batch))

    async def _stream_result(self, stream: Stream, session: Session, result: Result) -> None:
        """Send a result: the messages GetFlightInfo pulled, then the rest, taken from DataFusion,
        encoded and sent in a pipeline of chunks (CHUNK_BYTES).

        Backpressure: taking and encoding run ahead of the sends by at most one chunk queued
        after each (`Pipeline`), and a send waits for the client's HTTP/2 flow-control window,
        so a slow reader holds the query at most five chunks (~40 MiB) ahead.
        A cancelled stream (client cancel, dropped connection, deadline) stops taking at the next
        batch and lets the DataFusion stream go.
        """
        source, first, exhausted, first_rows = result.source, result.first, result.exhausted, result.rows
        if source is None and not exhausted:
            # A second DoGet of a ticket whose stream the first one consumed: run it again.
            rerun = await self.start_query(session, result.stmt, result.params, result.txn)
            self.results.pop(rerun.handle)
            if not rerun.schema.equals(result.schema):
                raise GRPCError(Status.ABORTED, "the result's schema changed since GetFlightInfo (SQLSTATE 40001)")
            source, first, exhausted, first_rows = rerun.source, rerun.first, rerun.exhausted, rerun.rows
        elif source is not None:
            result.source, result.first = None, []  # this DoGet owns the stream now
        # else: a complete small result, kept so that it can be fetched again
        stop = threading.Event()
        sent = 0
        # The rest of the stream is made into this stream's HTTP/2 frames by the worker thread
        # and written as is (h2send.send_framed); without the patched grpclib, as messages.
        framed = h2send.framed_ok()
        h2_stream = stream._stream  # grpclib's protocol-level stream: its id, its h2 connection
        stream_id = h2_stream.id if framed else None

        async def take() -> tuple[list[list[pa.RecordBatch]], bool]:
            return await self.run_sync(take_groups, source, stop, CHUNK_BYTES)

        async def encode(groups: list[list[pa.RecordBatch]]) -> tuple[list[Any], int]:
            return await self.run_sync(encode_groups, groups, result.schema, self.compression, stream_id)

        try:
            if framed:
                # The schema and what GetFlightInfo pulled (at most one message, MESSAGE_BYTES)
                # framed here, as pieces, instead of by h2 with three copies per frame; a small
                # result leaves in one write with its headers and trailers (the cork).
                await stream.send_initial_metadata()
                head = [[M.schema_flight_data(result.schema)], *([m] for m in first)]
                await h2send.send_framed(h2_stream, M.http2_data_frames(head, stream_id), M.FRAME_PAYLOAD_BYTES)
            else:
                await stream.send_message(M.schema_flight_data(result.schema))
                for message in first:
                    await stream.send_message(message)
            sent += first_rows
            if exhausted or source is None:
                return
            # Three stages, each at its own pace: DataFusion's rows are taken (a worker thread)
            # while the chunk before is encoded (another; the two mostly run outside the GIL)
            # and the one before that is sent (pipeline.py: bounded, so a slow reader holds the
            # query a few chunks ahead at most).
            async with Pipeline(take, encode) as chunks:
                while (chunk := await chunks.next()) is not None:
                    messages, rows = chunk
                    for message in messages:
                        if framed:
                            await h2send.send_framed(h2_stream, message, M.FRAME_PAYLOAD_BYTES)
                        else:
                            await stream.send_message(message)
                    sent += rows
        except asyncio.CancelledError:
            log.info("DoGet cancelled by the client after %d rows: query stopped", sent)
            raise
        finally:
            stop.set()

    # --- metadata -------------------------------------------------------------------------------

    def _metadata(self, session: Session, command: Message) -> pa.RecordBatch:
        """The result batch of a metadata command. Blocking (catalog and engine calls)."""
        if isinstance(command, sql.CommandGetSqlInfo):
            return M.sql_info_batch(metadata.sql_info_values(SQL_INFO), list(command.info))
        if isinstance(command, metadata.COMMANDS):
            return self._keys_and_types(session, command)
        if isinstance(command, sql.CommandGetCatalogs):
            return pa.RecordBatch.from_pylist([{"catalog_name": self.database}], schema=M.CATALOGS_SCHEMA)
        if isinstance(command, sql.CommandGetTableTypes):
            return pa.RecordBatch.from_pylist([{"table_type": "TABLE"}, {"table_type": "VIEW"}],
                                              schema=M.TABLE_TYPES_SCHEMA)
        if isinstance(command, sql.CommandGetDbSchemas):
            rows = [{"catalog_name": self.database, "db_schema_name": name}
                    for name in self._schemas(session, command)]
            return pa.RecordBatch.from_pylist(rows, schema=M.DB_SCHEMAS_SCHEMA)
        if isinstance(command, sql.CommandGetTables):
            return self._tables(session, command)
        raise M.BadCommand(f"{command.DESCRIPTOR.name} is not a metadata command")

    def _keys_and_types(self, session: Session, command: Message) -> pa.RecordBatch:
        if isinstance(command, metadata.meta.CommandGetPrimaryKeys):
            rows = self._query_rows(session, "select table_schema, table_name, column_name, ordinal_position, "
                                    "constraint_name from information_schema.key_column_usage")
            return metadata.primary_keys_batch(self.database, rows, command)
        if isinstance(command, metadata.meta.CommandGetXdbcTypeInfo):
            return metadata.xdbc_type_info_batch(command)
        return metadata.empty_keys_batch()

    def _catalog_matches(self, command: Message) -> bool:
        return not command.HasField("catalog") or command.catalog == self.database

    def _query_rows(self, session: Session, text: str) -> list[dict[str, Any]]:
        with session.lock:
            _, batches = session.qctx.start(query(text), None)
        rows: list[dict[str, Any]] = []
        for batch in batches:
            rows += (batch if isinstance(batch, pa.RecordBatch) else batch.to_pyarrow()).to_pylist()
        return rows

    def _schemas(self, session: Session, command: sql.CommandGetDbSchemas) -> list[str]:
        if not self._catalog_matches(command):
            return []
        names = {r["schema_name"] for r in self._query_rows(
            session, "select schema_name from information_schema.schemata")} - SYSTEM_SCHEMAS
        if command.HasField("db_schema_filter_pattern"):
            pattern = like_regex(command.db_schema_filter_pattern)
            names = {n for n in names if pattern.fullmatch(n)}
        return sorted(names)

    def _tables(self, session: Session, command: sql.CommandGetTables) -> pa.RecordBatch:
        schema = M.TABLES_WITH_SCHEMA_SCHEMA if command.include_schema else M.TABLES_SCHEMA
        if not self._catalog_matches(command):
            return pa.RecordBatch.from_pylist([], schema=schema)
        rows = self._query_rows(session, "select table_schema, table_name, table_type from information_schema.tables")
        schema_pattern = (like_regex(command.db_schema_filter_pattern)
                          if command.HasField("db_schema_filter_pattern") else None)
        table_pattern = (like_regex(command.table_name_filter_pattern)
                         if command.HasField("table_name_filter_pattern") else None)
        types = set(command.table_types)
        out = []
        for row in rows:
            ns, name = row["table_schema"], row["table_name"]
            kind = TABLE_TYPES.get(row["table_type"], row["table_type"])
            if ns in SYSTEM_SCHEMAS or (types and kind not in types):
                continue
            if schema_pattern is not None and not schema_pattern.fullmatch(ns):
                continue
            if table_pattern is not None and not table_pattern.fullmatch(name):
                continue
            out.append({"catalog_name": self.database, "db_schema_name": ns, "table_name": name,
                        "table_type": kind})
        out.sort(key=lambda r: (r["db_schema_name"], r["table_name"], r["table_type"]))
        if command.include_schema:
            engine = self.server.engine
            for row in out:
                key = (row["db_schema_name"], row["table_name"])
                view = engine.view(key)
                # a table not mounted yet (lazy mounting) is described by its metadata's shape
                table_schema = view.arrow_schema if view is not None else engine.table_schema(key)
                row["table_schema"] = M.schema_bytes(M.wire_schema(table_schema))
        return pa.RecordBatch.from_pylist(out, schema=schema)

    # --- DoPut ----------------------------------------------------------------------------------

    @_rpc
    async def DoPut(self, stream: Stream) -> None:
        first = await stream.recv_message()
        if first is None:
            raise M.BadCommand(empty_put_message())
        session = await self.session(stream)
        command = self._command(first.flight_descriptor)
        if isinstance(command, DOPUT_COMMANDS):
            await self.writes.do_put(stream, session, command, first)
            return
        if not isinstance(command, sql.CommandPreparedStatementQuery):
            raise M.BadCommand(f"{command.DESCRIPTOR.name} is not a DoPut command")
        prepared = self.prepared(session, command.prepared_statement_handle)
        reader = M.IpcStreamReader()
        batches = []
        size = 0
        message: fl.FlightData | None = first
        while message is not None:
            size += len(message.data_body) + len(message.data_header)
            if size > PARAMETER_BYTES_MAX:
                raise M.BadCommand(f"parameters exceed {PARAMETER_BYTES_MAX} bytes")
            batch = reader.feed(message)
            if batch is not None:
                batches.append(batch)
            message = await stream.recv_message()
        # Several rows: the statement runs once per row when it is executed (`bindings.py`).
        prepared.params = param_rows(batches) or None
        # The handle comes back so that a stateless server could encode the bindings in it; ours
        # keeps them on the statement, so it is the same handle.
        reply = sql.DoPutPreparedStatementResult(prepared_statement_handle=prepared.handle)
        await stream.send_message(fl.PutResult(app_metadata=reply.SerializeToString()))

    # --- DoAction -------------------------------------------------------------------------------

    @_rpc
    async def DoAction(self, stream: Stream) -> None:
        action = await stream.recv_message()
        assert action is not None
        session = await self.session(stream)
        kind = action.type
        self.drain.check(kind in RELEASING_ACTIONS)
        if kind == "CreatePreparedStatement":
            request = M.decode_command(action.body)
            if not isinstance(request, sql.ActionCreatePreparedStatementRequest):
                raise M.BadCommand("CreatePreparedStatement needs an ActionCreatePreparedStatementRequest")
            txn_id = request.transaction_id if request.HasField("transaction_id") else None
            # The text is read here, once: its `?` placeholders numbered, kept on the statement.
            _note(text=request.query)
            stmt = self.writes.statement(session, request.query, txn_id)
            speculation = await self._speculate(session, stmt, self.writes.transaction(session, txn_id))
            if speculation is not None:
                dataset, params = speculation.schema, pa.schema([])
            else:
                # GetFlightInfo starts the statement afresh: the prepare's schema may come from
                # the mounted snapshots.
                dataset, params = await self.writes.describe(session, stmt, txn_id, fresh=False)
            prepared = Prepared(new_handle(), stmt, dataset, params, transaction_id=txn_id,
                                speculation=speculation)
            session.prepared.put(prepared.handle, prepared)
            reply = sql.ActionCreatePreparedStatementResult(
                prepared_statement_handle=prepared.handle, dataset_schema=M.schema_bytes(dataset),
                parameter_schema=M.schema_bytes(params))
            await stream.send_message(fl.Result(body=M.pack_any(reply)))
        elif kind == "ClosePreparedStatement":
            request = M.decode_command(action.body)
            if not isinstance(request, sql.ActionClosePreparedStatementRequest):
                raise M.BadCommand("ClosePreparedStatement needs an ActionClosePreparedStatementRequest")
            closed = session.prepared.pop(request.prepared_statement_handle)
            if closed is not None and closed.speculation is not None:
                self._discard(closed.speculation)
                closed.speculation = None
        elif kind == "GetSessionOptions":
            M.parse(fl.GetSessionOptionsRequest, action.body)
            reply = fl.GetSessionOptionsResult()
            reply.session_options["catalog"].CopyFrom(M.string_option(session.catalog))
            reply.session_options["schema"].CopyFrom(M.string_option(session.schema))
            await stream.send_message(fl.Result(body=reply.SerializeToString()))
        elif kind == "SetSessionOptions":
            request = M.parse(fl.SetSessionOptionsRequest, action.body)
            reply = fl.SetSessionOptionsResult()
            for name, value in request.session_options.items():
                error = self._set_option(session, name, M.option_value(value))
                if error is not None:
                    reply.errors[name].value = error
            await stream.send_message(fl.Result(body=reply.SerializeToString()))
        elif kind == "CloseSession":
            M.parse(fl.CloseSessionRequest, action.body)
            self._sessions.pop(session.key)
            await self.writes.close_session(session)
            for result in self.results.values():
                if result.session_key == session.key:
                    self.results.pop(result.handle)
                    result.close()
            reply = fl.CloseSessionResult(status=fl.CloseSessionResult.CLOSED)
            await stream.send_message(fl.Result(body=reply.SerializeToString()))
        elif kind in ("BeginTransaction", "EndTransaction", "BeginSavepoint", "EndSavepoint"):
            reply_body = await self.writes.action(session, kind, action.body)
            if reply_body is not None:
                await stream.send_message(fl.Result(body=reply_body))
        else:
            raise unimplemented(f"action {kind[:100]!r}")

    def _set_option(self, session: Session, name: str, value: object) -> int | None:
        """None when set, else a SetSessionOptionsResult.ErrorValue."""
        errors_ = fl.SetSessionOptionsResult
        if name == "catalog":
            return None if value in (None, self.database) else errors_.INVALID_VALUE
        if name == "schema":
            if not isinstance(value, str) or not value:
                return errors_.INVALID_VALUE
            if not self.server.engine.has_schema(value):
                return errors_.INVALID_VALUE
            session.set_schema(value)
            return None
        return errors_.INVALID_NAME

    # --- listings -------------------------------------------------------------------------------

    @_rpc
    async def ListFlights(self, stream: Stream) -> None:
        await stream.recv_message()
        await self.session(stream)  # authenticated, and nothing to list: flights are made by commands

    @_rpc
    async def ListActions(self, stream: Stream) -> None:
        await stream.recv_message()
        await self.session(stream)
        for name, description in ACTIONS.items():
            await stream.send_message(fl.ActionType(type=name, description=description))


