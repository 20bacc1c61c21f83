"""One PostgreSQL client connection: startup, authentication, simple and extended query.

The session owns the protocol state (prepared statements, portals, cursors, settings) and talks to
the engine only through its QueryContext, always from worker threads. Its transaction block is the
machine both front ends share (`icegres.machines.txblock`, performed by
`icegres.engine.txblock_driver`): the session feeds it what the client asked for and does what it
says; ReadyForQuery's status byte is the machine's.
"""

from __future__ import annotations

import logging
import secrets
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import trio

from icegres.engine.query import open_session
from icegres.engine.row_source import RowSource
from icegres.engine.txblock_driver import TxBlock, finish
from icegres.machines import txblock
from icegres.pg import errors as E
from icegres.pg import settings as guc
from icegres.pg.clock import TextSettings
from icegres.pg.copy_format import copy_target
from icegres.pg.errors import PgError
from icegres.protocol.pgwire import (
    auth,
    errors_ahead,
    startup,
    statement_log,
    statements,
    tls,
    transaction,
    writes,
)
from icegres.protocol.pgwire import messages as m
from icegres.protocol.pgwire.activity import Activity
from icegres.protocol.pgwire.copy import copy_out_rows
from icegres.protocol.pgwire.cursors import Cursor, fetch_count, skip_rows, text_row
from icegres.protocol.pgwire.direct import DirectReply
from icegres.protocol.pgwire.extended import (
    Description,
    Descriptions,
    Portal,
    Prepared,
    Provisional,
    bind,
    describe_query,
    param_oids,
    rows_description,
    show_description,
)
from icegres.protocol.pgwire.framing import FrameDecoder
from icegres.protocol.pgwire.outbox import Outbox
from icegres.protocol.pgwire.results import (
    Chunk,
    Encoder,
    expand_formats,
    pull,
    row_description,
)
from icegres.sql.statement import Kind, Statement, classify, query, refusal

if TYPE_CHECKING:
    from icegres.protocol.pgwire.port import ServerPort

log = logging.getLogger("icegres.pgwire")

RECV_BYTES = 65536
SEND_HIGH_WATER = 256 * 1024


class ConnectionClosed(Exception):
    """The client went away or sent Terminate: end the session quietly."""


class Session:
    def __init__(self, server: ServerPort, stream: trio.abc.Stream, peer: str) -> None:
        self.server = server
        self.stream = stream
        self.peer = peer
        self.tls: tls.TlsInfo | None = None  # set once a TLS handshake is done (startup.py)
        self.client_addr = peer  # the server sets the address and port of a TCP client
        self.client_port: int | None = None
        self.activity = Activity()  # what pg_stat_activity shows of this session
        self.trace = statement_log.Trace(self)  # each statement's correlation id, log line, exemplar
        self.decoder = FrameDecoder()
        self.out = Outbox()
        self.pid = server.next_pid()
        self.secret = secrets.randbits(31)
        self.user = ""
        self.settings: dict[str, str] = {}
        self.initial_settings: dict[str, str] = {}
        self.block = TxBlock(transaction.SessionBlockPort(self))
        self.prepared: dict[str, Prepared] = {}
        self.portals: dict[str, Portal] = {}
        self.cursors: dict[str, Cursor] = {}
        self.skip_to_sync = False
        self.qctx: Any = None
        self._running: trio.CancelScope | None = None
        self._cancel_requested = False
        self._hung_up = False
        self._told: dict[str, str] = {}  # reported settings as the client last heard them
        self._sync_answered = False  # an Execute's thread answered the Sync after it (direct.py)
        self._descriptions = Descriptions()  # what Parse described, to answer a repeat from (extended.py)
        self._provisional: Provisional | None = None  # a Parse answered from it, not yet checked
        self._life: trio.CancelScope | None = None  # the whole connection: terminate() cancels it
        self._terminating = False  # pg_terminate_backend or a drain: end at the next boundary
        self._between = True  # waiting for a message after a ReadyForQuery (or before startup)
        self._slot = False  # holds a --max-connections slot (protocol/limits.py)

    # --- I/O -----------------------------------------------------------------------------------

    async def recv_more(self) -> None:
        try:
            data = await self.stream.receive_some(RECV_BYTES)
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            raise ConnectionClosed from None
        if not data:
            raise ConnectionClosed
        self.decoder.feed(data)

    async def next_message(self) -> m.FrontendMessage:
        while True:
            msg = await statements.next_message(self.server, self.decoder)
            if msg is not None:
                return msg
            await self.flush()
            await self.recv_more()

    def send(self, *parts: bytes) -> None:
        self.out.extend(parts)

    async def flush(self) -> None:
        if self._provisional is not None:
            await self._settle()  # nothing answered on an unchecked description leaves unchecked
        if not self.out:
            return
        # Shielded: a cancel (CancelRequest, statement_timeout) landing mid-write would leave half
        # a message on the wire and desynchronise the client. Only a dead connection stops a send.
        with trio.CancelScope(shield=True):
            try:
                await self.out.send_to(self.stream)
            except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                raise ConnectionClosed from None

    async def maybe_flush(self) -> None:
        if len(self.out) >= SEND_HIGH_WATER:
            await self.flush()

    def channel_binding(self) -> bytes | None:
        return None if self.tls is None else self.tls.channel_binding()

    # --- lifecycle -----------------------------------------------------------------------------

    async def run(self) -> None:
        registered = False  # until its FATAL is sent and the socket closed: a drain waits for it
        try:
            with trio.CancelScope() as self._life:
                if self._terminating:
                    self._life.cancel()
                if not await self._start():
                    return
                self.server.register(self)
                registered = True
                await self._serve()
            if self._terminating:
                raise PgError(E.ADMIN_SHUTDOWN, "terminating connection due to administrator command")
        except ConnectionClosed:
            pass
        except PgError as err:
            # Protocol violations end the connection after telling the client why.
            fatal = PgError(err.sqlstate, err.message, severity="FATAL", detail=err.detail, hint=err.hint)
            self.send(m.error_response(fatal, self.trace.failed(fatal)))
            self.trace.end()
            try:
                await self.flush()
            except ConnectionClosed:
                pass
        finally:
            if self._slot:
                self._slot = False
                self.server.slots.release()
            with trio.CancelScope(shield=True):
                try:
                    await self.stream.aclose()
                except Exception:
                    pass
                temp = getattr(getattr(self, "qctx", None), "env", None)
                if temp is not None and temp.temp is not None:
                    # The session's temporary tables end with it (temp_tables.py).
                    await trio.to_thread.run_sync(temp.temp.close)
            if registered:  # (last: the process may exit once a drain sees no session)
                self.server.unregister(self)

    async def _start(self) -> bool:
        """Startup and authentication, within --authentication-timeout. A client that has not
        finished by then is closed without a message, as PostgreSQL does."""
        with trio.move_on_after(self.server.settings.authentication_timeout):
            return await self._startup()
        if self._slot or self.user:  # PostgreSQL logs only a timeout during authentication
            log.info("canceling authentication due to timeout (%s)", self.peer)
        return False

    async def _startup(self) -> bool:
        msg = await startup.receive_startup(self)
        if msg is None:
            return False
        self.server.slots.take()  # 53300 beyond --max-connections (protocol/limits.py)
        self._slot = True
        params = msg.params
        self.user = params.get("user", "")
        if not self.user:
            raise PgError(E.INVALID_AUTHORIZATION, "no PostgreSQL user name specified in startup packet")
        database = params.get("database") or self.user
        # Authentication first, as PostgreSQL does: a client that has not logged in learns
        # nothing, not even which database names exist.
        await auth.authenticate(self)
        # pgAdmin, DBeaver, Metabase and many scripts connect to `postgres` by default: it names
        # the served database too.
        if database not in (self.server.settings.database, "postgres"):
            raise PgError(E.INVALID_CATALOG_NAME, f'database "{database}" does not exist')
        self.server.slots.check_reserved(self.user)
        self.decoder.in_startup = False
        version = self.server.server_version
        self.initial_settings = await startup.initial_settings(self, params)
        self.settings = dict(self.initial_settings)
        from icegres.engine.lake import SessionEnv

        env = SessionEnv(
            database=self.server.settings.database,
            login_user=self.user,
            backend_pid=self.pid,
            settings=self.settings,
            server_version=version,
            activity=self.server,  # pg_stat_activity, pg_cancel/terminate_backend (engine/activity.py)
        )
        self.qctx = open_session(self.server.engine, env)
        self.send(m.AUTH_OK)
        self._told = self._reported_settings()
        for name, value in self._told.items():
            self.send(m.parameter_status(name, value))
        self.send(m.backend_key_data(self.pid, self.secret))
        self.send(m.ready_for_query("I"))
        await self.flush()
        return True

    async def _serve(self) -> None:
        self.activity.ready("I")
        threshold_ms = self.server.settings.log_min_duration_statement
        while True:
            if self._terminating and self._between:
                return
            msg = await self.next_message()
            self._between = False
            if isinstance(msg, m.Terminate):
                return
            if self.skip_to_sync and not isinstance(msg, m.Sync):
                continue
            if isinstance(msg, m.Query | m.Parse):
                self.activity.running(msg.sql)
            elif isinstance(msg, m.Execute) and msg.portal in self.portals:
                self.activity.running(self.portals[msg.portal].prepared.sql)
            logged = statement_log.text_of(msg, self.portals) if threshold_ms >= 0 else None
            started = time.perf_counter()
            self.trace.message(msg)
            self.trace.last_id = None
            await self._handle(msg)
            self.trace.end()
            statement_log.record(threshold_ms, time.perf_counter() - started, logged, pid=self.pid, user=self.user,
                                 correlation=self.trace.last_id)
            if isinstance(msg, m.Query | m.Sync):
                self.activity.ready(self.block.status)
                self._between = True
            await self.maybe_flush()

    def terminate(self, now: bool = True) -> None:
        """End the session with FATAL 57P01: at once (`now`: pg_terminate_backend, the end of a
        drain), else once its running statement is done (a drain begins)."""
        self._terminating = True
        if self._life is not None and (now or self._between):
            self._life.cancel()

    async def _handle(self, msg: m.FrontendMessage) -> None:
        """Answer one message. Its error goes to the client; after an extended-protocol message's
        error the messages up to the next Sync are skipped."""
        provisional = self._provisional
        if provisional is not None and not provisional.answers(msg, self.portals):
            if not await self._settle() and self.skip_to_sync and not isinstance(msg, m.Sync):
                return
        try:
            await self._dispatch(msg)
            if self._provisional is not None and isinstance(msg, m.Bind | m.Describe):
                self._provisional.messages.append(msg)
        except PgError as err:
            if await self._answered_again(msg):
                return
            self._failed(msg, err)
        except ConnectionClosed:
            raise
        except Exception as exc:  # a bug must cost one statement, not the connection
            if await self._answered_again(msg):
                return
            log.exception("internal error in session %s", self.pid)
            self._failed(msg, PgError(E.INTERNAL_ERROR, f"internal error: {exc}"))

    def _failed(self, msg: m.FrontendMessage, err: PgError) -> None:
        self._report(err)  # (a Query's text may be refused whole: it still ends with ReadyForQuery)
        if isinstance(msg, m.Query) or (isinstance(msg, m.Unreadable) and msg.kind == b"Q"):
            self._ready_for_query()
        elif not isinstance(msg, m.Sync):
            self.skip_to_sync = True

    async def _dispatch(self, msg: m.FrontendMessage) -> None:
        if isinstance(msg, m.Unreadable):
            raise msg.error
        if isinstance(msg, m.Query):
            await self._simple_query(msg.sql, msg.split)
        elif isinstance(msg, m.Parse):
            await self._parse(msg)
        elif isinstance(msg, m.Bind):
            await self._bind(msg)
        elif isinstance(msg, m.Describe):
            await self._describe(msg)
        elif isinstance(msg, m.Execute):
            await self._execute(msg)
        elif isinstance(msg, m.Close):
            self._close(msg)
        elif isinstance(msg, m.Sync):
            self.skip_to_sync = False
            self.block.feed(txblock.SyncReceived())
            if self._sync_answered:
                self._sync_answered = False  # the Execute's thread sent this ReadyForQuery
            else:
                self._ready_for_query()
            await self.flush()
        elif isinstance(msg, m.Flush):
            await self.flush()
        elif isinstance(msg, m.CopyData | m.CopyDone | m.CopyFail):
            pass  # stray copy messages after a failed COPY FROM are ignored until Sync/Query
        elif isinstance(msg, m.FunctionCall):
            raise PgError(E.FEATURE_NOT_SUPPORTED, "the fastpath function call protocol is not supported")
        elif isinstance(msg, m.PasswordMessage):
            raise PgError(E.PROTOCOL_VIOLATION, "unexpected password message")

    def _report(self, err: PgError) -> None:
        self.send(*m.error_response_parts(err, self.trace.failed(err)))
        self.block.feed(txblock.StatementFailed())

    # --- cancellation --------------------------------------------------------------------------

    def cancel(self) -> None:
        if self._running is not None:
            self._cancel_requested = True
            self._running.cancel()

    def socket_fd(self) -> int:
        return tls.raw_socket(self.stream).fileno()  # a hang-up shows on the socket under TLS too

    def _socket_fd_or_none(self) -> int | None:
        if self.tls is not None:
            return None  # direct.py writes plaintext to the socket: never past TLS
        socket = getattr(self.stream, "socket", None)  # a test's in-memory stream has none
        return None if socket is None else socket.fileno()

    def hang_up(self) -> None:
        """The client went away mid-statement (hangup.py): stop the statement, end the session."""
        if self._running is not None:
            self._hung_up = True
            self._running.cancel()

    async def _run_statement(self, fn, *args):
        """Run `fn` (async) under this session's cancel scope and statement_timeout, watched for a
        client that hangs up meanwhile."""
        timeout_ms = guc.duration_ms(self.settings.get("statement_timeout", "0") or "0")
        self._cancel_requested = False
        with trio.CancelScope() as scope:
            if timeout_ms > 0:
                scope.deadline = trio.current_time() + timeout_ms / 1000
            self._running = scope
            self.server.running.add(self)
            try:
                return await fn(*args)
            finally:
                self._running = None
                self.server.running.discard(self)
        if self._hung_up:
            raise ConnectionClosed
        if self._cancel_requested:
            raise PgError(E.QUERY_CANCELED, "canceling statement due to user request")
        raise PgError(E.QUERY_CANCELED, "canceling statement due to statement timeout")

    async def in_thread(self, fn, *args):
        return await self.server.run_sync(errors_ahead.encoding_ahead, m.notice_fields, m.said, fn, *args)

    # --- simple query --------------------------------------------------------------------------

    async def _simple_query(self, sql: str, split: statements.Split | None = None) -> None:
        if split is None:  # (a big Query's was made as it was decoded, in a thread)
            split = await statements.split(self.server, sql)  # a big message: in a thread
        classified, offsets = split.statements, split.offsets
        if not classified:
            self.send(m.EMPTY_QUERY)
        implicit = self.block.state.idle and len(classified) > 1
        # Several statements in one Query message form one implicit transaction in PostgreSQL:
        # their writes commit together at the end, or not at all if one fails.
        batch = implicit and all(s.kind in (Kind.QUERY, Kind.WRITE, Kind.COPY_FROM) for s in classified) and any(
            s.kind is not Kind.QUERY for s in classified)
        if batch:
            self.block.feed(txblock.ImplicitBlockStarted(read_only=transaction.default_read_only(self)))
        # A lone query outside a transaction block ends with ReadyForQuery('I') whatever its rows:
        # its worker thread may send the whole answer itself (direct.py).
        direct = len(classified) == 1 and classified[0].kind is Kind.QUERY and self.block.state.idle
        replied = False
        big = any(split.params)
        for stmt, offset, params in zip(classified, offsets, list(split.params), strict=True):
            self.trace.statement(stmt.sql)
            try:
                transaction.gate(self, stmt)
                replied = await self._run_statement(self._run_simple, stmt, direct, params)
            except PgError as err:
                if err.position is not None:
                    err.position += offset  # PostgreSQL counts from the start of the Query string
                self._report(err)
                break
            except ConnectionClosed:
                raise
            except Exception as exc:  # a bug costs the rest of the message, and the implicit block
                log.exception("internal error in session %s", self.pid)
                self._report(PgError(E.INTERNAL_ERROR, f"internal error: {exc}"))
                break
            finally:
                self.trace.end()
            await self.maybe_flush()
        if batch:
            try:
                await finish(writes.host(self), self.block.feed(txblock.ImplicitBlockEnded()))
            except PgError as err:
                self._report(err)
        if not replied:
            self._ready_for_query()
        await self.flush()
        if big:  # the message (its big values) is held until the next one: let them go now
            split.params.clear()
            await statements.release_memory(self.server)

    async def _run_simple(self, stmt: Statement, direct: bool = False, params: dict[str, Any] | None = None) -> bool:
        """Run one statement of a Query message. True if its worker thread sent the whole answer,
        ReadyForQuery included (`direct`: the caller allows that; direct.py). `params`: the
        values of the big literals its compaction made parameters (statements.py)."""
        if stmt.kind is not Kind.QUERY:
            if params:  # an INSERT whose big literals its compaction made parameters
                self.send(await writes.run_write(self, stmt, params, True, self.text_settings()))
            else:
                await self._command(stmt, describe=True)
            return False
        encode = self._encoder([])
        reply = None
        fd = self._socket_fd_or_none() if direct else None
        if fd is not None:
            await self.flush()  # anything queued goes first: the thread writes past this buffer
            reply = DirectReply(fd)

        def start() -> tuple[bytes, RowSource, Chunk, bool]:
            # Plan, execute and encode the first chunk in one worker-thread hop: a small result
            # then costs a single hand-off between the trio loop and the thread pool.
            schema, stream = self.qctx.start(stmt, params)
            source = RowSource(schema, stream)
            encode.formats[:] = [0] * len(schema)
            encode.schema = schema
            first = pull(source, 0, encode)
            description = row_description(schema, encode.formats)
            return description, source, first, self._answer_from_thread(reply, first, description)

        done = await self._in_thread_answering(reply, start)
        if done is None:
            return True
        description, source, first, _ = done
        self.send(description)
        rows = await self._send_chunks(source, encode, 0, first)
        self.send(self.trace.completed(f"SELECT {rows}"))
        return False

    def _answer_from_thread(self, reply: DirectReply | None, chunk: Chunk, before: bytes) -> bool:
        """In the worker thread: send `before`, `chunk`'s rows, CommandComplete and
        ReadyForQuery('I') if the statement may be answered from here (direct.py) and its rows
        are all in `chunk`. True if sent (claimed)."""
        # set_config() on a reported setting owes the client a ParameterStatus: the loop's job.
        if reply is None or not chunk.exhausted or self._reported_settings() != self._told:
            return False
        return reply.send(b"".join((before, chunk.data, self.trace.completed(f"SELECT {chunk.rows}"),
                                    m.ready_for_query("I"))))

    async def _in_thread_answering(self, reply: DirectReply | None, job: Callable[[], tuple]) -> tuple | None:
        """`job` in a worker thread, its last value saying whether it answered the client itself.
        The job's values, or None once the answer went out (the rest of it sent from here). A
        cancel that lands after the thread claimed the answer finds the statement done."""
        try:
            done = await self.in_thread(job)
        except trio.Cancelled:
            if reply is None or reply.refuse():
                raise
            done = None
        if done is not None and not done[-1]:
            return done
        assert reply is not None
        await self._send_rest_of_reply(reply)
        return None

    async def _send_rest_of_reply(self, reply: DirectReply) -> None:
        if reply.error is not None:
            raise ConnectionClosed
        if reply.unsent:
            with trio.CancelScope(shield=True):  # as in flush(): never half a message on the wire
                try:
                    await self.stream.send_all(reply.unsent)
                except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                    raise ConnectionClosed from None

    def _reported_settings(self) -> dict[str, str]:
        return {name: self.settings.get(name.lower(), "") for name in guc.REPORTED}

    def _ready_for_query(self) -> None:
        """ReadyForQuery, after a ParameterStatus for each reported setting that changed since
        the client last heard (SET, RESET, set_config(), a rollback), as PostgreSQL 14+ does."""
        now = self._reported_settings()
        if now != self._told:
            for name, value in now.items():
                if self._told.get(name) != value:
                    self.send(m.parameter_status(name, value))
            self._told = now
        self.send(m.ready_for_query(self.block.status))

    # --- rows ----------------------------------------------------------------------------------

    def text_settings(self) -> TextSettings:
        return TextSettings(
            timezone=self.settings.get("timezone", "UTC"),
            extra_float_digits=int(self.settings.get("extra_float_digits", "1") or 1),
        )

    def _encoder(self, formats: list[int]) -> Encoder:
        return Encoder(list(formats), self.text_settings())

    async def _send_chunks(self, source: RowSource, encode: Encoder, limit: int, chunk: Chunk | None = None) -> int:
        """Send up to `limit` rows (0 = all) as DataRows, starting with an already pulled chunk.

        A result of more than one chunk is pipelined: a worker thread encodes the next chunk
        while this task writes the previous one to the socket (one chunk in hand, at most).
        """
        sent = 0

        def last(c: Chunk, rows: int) -> bool:
            return c.exhausted or bool(limit and rows >= limit)

        async def write(data: bytes) -> None:
            if len(data) < SEND_HIGH_WATER:
                self.send(data)
                await self.maybe_flush()
                return
            # A big chunk goes to the socket as it is, not copied through the output buffer twice.
            await self.flush()
            with trio.CancelScope(shield=True):  # as in flush(): never half a message on the wire
                try:
                    await self.stream.send_all(data)
                except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                    raise ConnectionClosed from None

        if chunk is not None and last(chunk, chunk.rows):
            sent = chunk.rows
            await write(chunk.data)
        else:
            chunks_in, chunks_out = trio.open_memory_channel(0)
            # Errors leave the nursery one by one, unwrapped: a PgError or ConnectionClosed must
            # reach the session's handlers as itself, not inside an ExceptionGroup.
            errors: list[Exception] = []

            async def produce(pulled: int) -> None:
                async with chunks_in:
                    try:
                        while True:
                            nxt = await self.in_thread(pull, source, (limit - pulled) if limit else 0, encode)
                            pulled += nxt.rows
                            await chunks_in.send(nxt)
                            if last(nxt, pulled):
                                return
                    except Exception as exc:
                        errors.append(exc)

            async with trio.open_nursery() as nursery:
                nursery.start_soon(produce, 0 if chunk is None else chunk.rows)
                try:
                    if chunk is not None:
                        sent = chunk.rows
                        await write(chunk.data)
                    async with chunks_out:
                        async for chunk in chunks_out:
                            sent += chunk.rows
                            await write(chunk.data)
                except Exception as exc:
                    errors.append(exc)
                    nursery.cancel_scope.cancel()
            if errors:
                raise errors[0]
        assert chunk is not None
        if chunk.exhausted:
            source.done = True
        source.rows_sent += sent
        return sent

    async def _stream_rows(self, source: RowSource, formats: list[int], limit: int) -> int:
        encode = self._encoder(formats)
        encode.schema = source.schema
        return await self._send_chunks(source, encode, limit)

    # --- extended protocol ---------------------------------------------------------------------

    async def _parse(self, msg: m.Parse) -> None:
        if msg.name and msg.name in self.prepared:
            raise PgError(E.DUPLICATE_PREPARED_STATEMENT, f'prepared statement "{msg.name}" already exists')
        # (Never a big text from memory: hashing it as the key would hold the loop ~30 ms.)
        big = msg.split is not None or len(msg.sql) > statements.BIG_CHARS
        if not msg.name and self.block.state.idle and not big:
            before = (self.prepared.get(""), self.portals.get(""))
            provisional = self._descriptions.provisional(msg, len(self.out), before)
            if provisional is not None:  # answered from memory, checked before it is sent
                self._provisional = provisional
                self.prepared[""] = provisional.prepared
                self.send(m.PARSE_COMPLETE)
                return
        split = msg.split or await statements.split(self.server, msg.sql, declared=len(msg.param_oids))
        if len(split.statements) > 1:
            raise PgError(E.SYNTAX_ERROR, "cannot insert multiple commands into a prepared statement")
        stmt = split.statements[0] if split.statements else classify("")
        values = split.params[0] if split.params else None
        prepared = Prepared(stmt.sql if values else msg.sql, stmt, list(msg.param_oids), big=values)
        if big:  # (as after a big Query: the pieces it passed through go back to the system)
            await statements.release_memory(self.server)
        if stmt.kind is Kind.QUERY or (stmt.kind is Kind.WRITE and writes.returns_rows(stmt)):
            try:
                described = await self._run_statement(self._describe_query, prepared)
            except PgError as err:
                if err.position is not None:
                    err.position += split.offsets[0] if split.offsets else 0
                raise
            if stmt.kind is Kind.QUERY and not big:
                self._descriptions.remember(msg.sql, msg.param_oids, stmt, described)
        self.prepared[msg.name] = prepared
        self.send(m.PARSE_COMPLETE)

    async def _describe_query(self, prepared: Prepared) -> Description:
        stmt = prepared.statement
        given = tuple(prepared.param_oids)
        if stmt.kind is Kind.WRITE:
            schema, inferred = await writes.describe_write(self, stmt)
            described = Description(param_oids(stmt, given, inferred, prepared.big), schema)
        else:
            described = await self.in_thread(describe_query, self.qctx, stmt, given, prepared.big)
        prepared.param_oids = list(described.param_oids)
        prepared.schema = described.schema
        return described

    async def _settle(self) -> bool:
        """Check the pending provisional Parse against the lake (a worker thread). True if it
        held. Otherwise what was answered on it is dropped and answered again from a fresh
        description, or, when the check was cancelled or timed out, replaced by that error, as
        the Parse's own: False."""
        provisional, self._provisional = self._provisional, None
        assert provisional is not None
        try:
            if await self._run_statement(self.in_thread, provisional.check, self.qctx):
                return True
        except PgError as err:
            self._put_back(provisional)
            self._report(err)
            self.skip_to_sync = True
            return False
        await self._answer_again(provisional)
        return False

    def _put_back(self, provisional: Provisional) -> None:
        """Drop what was answered on a provisional Parse: the output from its ParseComplete on,
        and the unnamed statement and portal it made."""
        self.out.truncate(provisional.out_at)
        for table, before in ((self.prepared, provisional.before[0]), (self.portals, provisional.before[1])):
            if before is None:
                table.pop("", None)
            else:
                table[""] = before  # type: ignore[index]

    async def _answer_again(self, provisional: Provisional) -> None:
        """A provisional Parse's description did not hold: answer its messages as if it had
        never been remembered."""
        self._put_back(provisional)
        self._descriptions.forget(provisional.prepared.sql, provisional.given)
        for msg in provisional.messages:
            if self.skip_to_sync:
                break
            await self._handle(msg)

    async def _answered_again(self, msg: m.FrontendMessage) -> bool:
        """After a message answered on a provisional Parse failed (a Bind decoding by its
        parameter types, say): check the Parse now. True if it did not hold, and everything since
        it, this message too, was answered again (or skipped after an error there)."""
        if self._provisional is None:
            return False
        if await self._settle():
            return False
        if not self.skip_to_sync:
            await self._handle(msg)
        return True

    async def _bind(self, msg: m.Bind) -> None:
        prepared = self.prepared.get(msg.statement)
        if prepared is None:
            raise PgError(E.INVALID_SQL_STATEMENT_NAME, f'prepared statement "{msg.statement}" does not exist')
        if msg.portal and msg.portal in self.portals:
            raise PgError("42P03", f'portal "{msg.portal}" already exists')
        self.portals[msg.portal] = bind(prepared, msg, self.text_settings())
        self.send(m.BIND_COMPLETE)

    async def _describe(self, msg: m.Describe) -> None:
        if msg.kind == "S":
            prepared = self.prepared.get(msg.name)
            if prepared is None:
                raise PgError(E.INVALID_SQL_STATEMENT_NAME, f'prepared statement "{msg.name}" does not exist')
            self.send(m.parameter_description(prepared.param_oids))
            self.send(rows_description(prepared, None))
            return
        portal = self.portals.get(msg.name)
        if portal is None:
            cursor = self.cursors.get(msg.name)
            if cursor is None:
                raise PgError(E.INVALID_CURSOR_NAME, f'portal "{msg.name}" does not exist')
            # A DECLAREd cursor is a portal too: psycopg 3 describes it by name after DECLARE.
            fmt = 1 if cursor.binary else 0
            self.send(row_description(cursor.source.schema, [fmt] * len(cursor.source.schema)))
            return
        self.send(rows_description(portal.prepared, portal.formats))

    async def _execute(self, msg: m.Execute) -> None:
        portal = self.portals.get(msg.portal)
        if portal is None:
            raise PgError(E.INVALID_CURSOR_NAME, f'portal "{msg.portal}" does not exist')
        stmt = portal.prepared.statement
        transaction.gate(self, stmt)
        provisional = self._provisional
        if provisional is not None and portal.prepared is provisional.prepared:
            # This Execute's job checks the Parse first; settled here whatever comes of it.
            assert portal.source is None and not portal.finished  # its first Execute
            self._provisional = None
            try:
                stale = await self._run_statement(self._execute_query, portal, msg.max_rows, provisional)
            except Exception:
                if not provisional.held:  # cancelled before the check: the Parse's error
                    self._put_back(provisional)
                raise
            if stale:
                await self._answer_again(provisional)
                if not self.skip_to_sync:
                    await self._execute(msg)
        elif stmt.kind is Kind.QUERY:
            await self._run_statement(self._execute_query, portal, msg.max_rows)
        elif not stmt.sql.strip():
            self.send(m.EMPTY_QUERY)
        elif stmt.kind is Kind.WRITE:
            if portal.finished:
                self.send(self.trace.completed(stmt.tag))
                return
            portal.finished = True
            self.send(await self._run_statement(writes.run_write, self, stmt, portal.values(), False,
                                                self.text_settings(), portal.formats))
        else:
            if portal.finished:
                self.send(self.trace.completed(stmt.tag))
                return
            await self._run_statement(self._command, stmt, False)
            portal.finished = True

    async def _execute_query(self, portal: Portal, max_rows: int, provisional: Provisional | None = None) -> bool:
        """Execute a query's portal. True, having done nothing, if `provisional` (the Parse that
        made it, answered from memory) no longer holds."""
        if portal.finished:
            self.send(self.trace.completed(f"SELECT {portal.tag_rows}"))
            return False
        limit = max_rows if max_rows > 0 else 0
        first: Chunk | None = None
        if portal.source is None:
            params = portal.values()
            encode = self._encoder([])
            # An Execute of all rows with a Sync right behind it, outside a transaction block, is
            # answered up to and including that Sync's ReadyForQuery('I') once its rows fit in
            # one chunk: the thread may send it all, with whatever this session has queued
            # before it (ParseComplete, BindComplete, RowDescription), as a simple query's does.
            fd = self._socket_fd_or_none()
            reply = prefix = None
            if fd is not None and not limit and self.block.state.idle and self.decoder.sync_is_next():
                reply, prefix = DirectReply(fd), bytes(self.out)

            def start() -> tuple[RowSource | None, Chunk | None, bool]:
                if provisional is not None and not provisional.check(self.qctx):
                    return None, None, False
                schema, stream = self.qctx.start(portal.prepared.statement, params)
                source = RowSource(schema, stream)
                if portal.formats is None or len(portal.formats) != len(schema):
                    portal.formats = expand_formats(portal.result_formats, len(schema))
                encode.formats[:] = portal.formats
                encode.schema = schema
                chunk = pull(source, limit, encode)
                return source, chunk, self._answer_from_thread(reply, chunk, prefix or b"")

            done = await self._in_thread_answering(reply, start)
            if done is None:
                self.out.clear()  # sent ahead of the rows
                self._sync_answered = True  # and the Sync's ReadyForQuery after them
                portal.finished = True  # the Sync right behind ends it unread
                return False
            if done[0] is None:
                return True
            portal.source, first, _ = done
        else:
            encode = self._encoder(portal.formats or [])
            encode.schema = portal.source.schema
        sent = await self._send_chunks(portal.source, encode, limit, first)
        portal.tag_rows += sent
        if limit and sent == limit and not portal.source.done:
            self.send(m.PORTAL_SUSPENDED)
            return False
        portal.finished = True
        self.send(self.trace.completed(f"SELECT {portal.tag_rows}"))
        return False

    def _close(self, msg: m.Close) -> None:
        if msg.kind == "S":
            self.prepared.pop(msg.name, None)
        else:
            self.portals.pop(msg.name, None)
        self.send(m.CLOSE_COMPLETE)

    # --- session commands ----------------------------------------------------------------------

    async def _command(self, stmt: Statement, describe: bool) -> None:
        handler = _COMMANDS.get(stmt.kind)
        if handler is None:
            raise refusal(stmt)
        await handler(self, stmt, describe)

    def set_setting(self, key: str, value: str | None) -> str:
        """Validate and apply; the name of the setting assigned."""
        if key == "session_authorization":  # (checked by its SET: transaction.py; never a client's)
            self.settings[key] = value or self.initial_settings[key]
            return key
        change = guc.validate(key, value, self.settings, self.initial_settings)
        self.settings[change.key] = change.value
        if change.key == "search_path":
            self.qctx.forget_routes()
        return change.key

    async def _cmd_show(self, stmt: Statement, describe: bool) -> None:
        if stmt.name == "all":
            rows = sorted(self.settings.items())
            if describe:
                self.send(m.row_description([
                    m.FieldDescription("name", 25, -1), m.FieldDescription("setting", 25, -1),
                    m.FieldDescription("description", 25, -1)]))
            for k, v in rows:
                self.send(text_row([k, v, ""]))
            self.send(self.trace.completed(f"SHOW {len(rows)}"))
            return
        key = stmt.name or ""
        if key not in self.settings:
            raise PgError(E.UNDEFINED_OBJECT, f'unrecognized configuration parameter "{key}"')
        if describe:
            self.send(show_description(stmt))
        self.send(text_row([self._shown(key)]))
        self.send(self.trace.completed("SHOW"))

    def _shown(self, key: str) -> str:
        """A setting as SHOW prints it; transaction_isolation is the level of the transaction in
        force (the block's, else the one the next transaction gets)."""
        if key == "transaction_isolation":
            txn = self.qctx.txn
            if txn is not None and not txn.autocommit:
                return "serializable" if txn.serializable else "repeatable read"
            return self.settings.get("default_transaction_isolation", self.settings[key])
        return self.settings[key]

    async def _cmd_declare(self, stmt: Statement, describe: bool) -> None:
        hold = " WITH HOLD" in stmt.sql.upper().replace("\n", " ")
        self.block.feed(txblock.CursorDeclareRequested(hold))
        name = stmt.name or ""
        if name in self.cursors:
            raise PgError(E.DUPLICATE_CURSOR, f'cursor "{name}" already exists')
        text = stmt.value or ""

        source = RowSource(*await self.in_thread(self.qctx.start, query(text), None))
        self.cursors[name] = Cursor(source, stmt.flag, hold)
        self.send(self.trace.completed("DECLARE CURSOR"))

    async def _cmd_fetch(self, stmt: Statement, describe: bool) -> None:
        cursor = self.cursors.get(stmt.name or "")
        if cursor is None:
            raise PgError(E.INVALID_CURSOR_NAME, f'cursor "{stmt.name}" does not exist')
        count = fetch_count(stmt.value or "NEXT")
        fmt = 1 if cursor.binary else 0
        formats = [fmt] * len(cursor.source.schema)
        if stmt.kind is Kind.FETCH:
            if describe:
                self.send(row_description(cursor.source.schema, formats))
            sent = await self._stream_rows(cursor.source, formats, count)
        else:
            sent = await self.in_thread(skip_rows, cursor.source, count)
        cursor.position += sent
        self.send(self.trace.completed(f"{stmt.kind.name} {sent}"))

    async def _cmd_close(self, stmt: Statement, describe: bool) -> None:
        if stmt.name is None:
            self.cursors.clear()
        elif self.cursors.pop(stmt.name, None) is None:
            raise PgError(E.INVALID_CURSOR_NAME, f'cursor "{stmt.name}" does not exist')
        self.send(self.trace.completed(stmt.tag))

    async def _cmd_deallocate(self, stmt: Statement, describe: bool) -> None:
        if stmt.name is None:
            self.prepared = {k: v for k, v in self.prepared.items() if k == ""}
        elif self.prepared.pop(stmt.name, None) is None:
            raise PgError(E.INVALID_SQL_STATEMENT_NAME, f'prepared statement "{stmt.name}" does not exist')
        self.send(self.trace.completed(stmt.tag))

    async def _cmd_discard(self, stmt: Statement, describe: bool) -> None:
        if stmt.value == "ALL":
            self.block.feed(txblock.DiscardAllRequested())
            self.prepared = {k: v for k, v in self.prepared.items() if k == ""}
            self.cursors.clear()
            for key, value in self.initial_settings.items():
                if self.settings.get(key) != value and key not in guc.READ_ONLY:
                    self.set_setting(key, value)
        self.send(self.trace.completed(stmt.tag))

    async def _cmd_listen(self, stmt: Statement, describe: bool) -> None:
        self.send(self.trace.completed(stmt.tag))

    async def _cmd_copy_to(self, stmt: Statement, describe: bool) -> None:
        source_sql = stmt.value or ""
        target = copy_target(source_sql)
        if target is None:
            text = source_sql[1:-1]
        else:  # a table, maybe with a column list: COPY t (a, b) TO STDOUT
            table, columns = target
            text = f"SELECT {', '.join(columns) if columns else '*'} FROM {table}"
        options = dict(stmt.options)

        source = RowSource(*await self.in_thread(self.qctx.start, query(text), None))
        await copy_out_rows(self, source, options)

    async def _cmd_copy_from(self, stmt: Statement, describe: bool) -> None:
        await writes.copy_from(self, stmt)

    async def _cmd_write(self, stmt: Statement, describe: bool) -> None:
        self.send(await writes.run_write(self, stmt, None, describe, self.text_settings()))


_COMMANDS = {
    **transaction.COMMANDS,
    Kind.SHOW: Session._cmd_show,
    Kind.DECLARE: Session._cmd_declare,
    Kind.FETCH: Session._cmd_fetch,
    Kind.MOVE: Session._cmd_fetch,
    Kind.CLOSE: Session._cmd_close,
    Kind.DEALLOCATE: Session._cmd_deallocate,
    Kind.DISCARD: Session._cmd_discard,
    Kind.LISTEN: Session._cmd_listen,
    Kind.COPY_TO: Session._cmd_copy_to,
    Kind.COPY_FROM: Session._cmd_copy_from,
    Kind.WRITE: Session._cmd_write,
}
