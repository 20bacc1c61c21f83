"""What a pgwire session does with statements that change the lake: DML, DDL, COPY FROM, COMMIT.

The write path itself is protocol-neutral (`icegres.engine.writes`, shared with Flight SQL): this
module adapts the session to it (`PgHost`) and sends what the statements report — RETURNING rows,
notices, command tags — as PostgreSQL messages. Writes stage into the session's transaction
(`TxnState`); outside a transaction block each write is its own transaction and commits at once,
through the commit machine.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from icegres.engine import writes as core
from icegres.engine.txn import TxnState
from icegres.machines import txblock
from icegres.pg import errors as E
from icegres.pg.copy_format import CopyFormat, copy_target
from icegres.pg.errors import PgError
from icegres.protocol.pgwire import messages as m
from icegres.protocol.pgwire.results import row_description
from icegres.sql.statement import Statement, refusal

if TYPE_CHECKING:
    from icegres.protocol.pgwire.port import SessionPort

DML_WORDS = core.DML_WORDS
DDL_WORDS = core.DDL_WORDS
is_dml = core.is_dml
is_ddl = core.is_ddl


def new_transaction(session: SessionPort, isolation: str | None, *, autocommit: bool = False) -> TxnState:
    return core.new_transaction(session.settings.get("default_transaction_isolation"), isolation,
                                autocommit=autocommit)


class PgHost:
    """A pgwire session as the write path's host: one statement at a time, so the query
    context's transaction is simply set and cleared on the session's own context."""

    __slots__ = ("session",)

    def __init__(self, session: SessionPort) -> None:
        self.session = session

    @property
    def qctx(self) -> Any:
        return self.session.qctx

    @property
    def idle(self) -> bool:
        return self.session.block.state.idle

    def block(self) -> TxnState | None:
        block = self.session.block
        return block.txn if block.state.open else None

    def new_txn(self, *, autocommit: bool) -> TxnState:
        return new_transaction(self.session, None, autocommit=autocommit)

    def bind(self, txn: TxnState | None) -> None:
        if txn is None:
            self.session.qctx.end_transaction()
        else:
            self.session.qctx.txn = txn

    async def run(self, fn: Callable[..., Any], *args: Any) -> Any:
        return await self.session.in_thread(fn, *args)


async def run_write(session: SessionPort, stmt: Statement, params: list[Any] | None, describe: bool,
                    formats: list[int] | None = None) -> None:
    """Execute INSERT/UPDATE/DELETE/TRUNCATE or DDL and send its rows (RETURNING) and tag."""
    refuse_if_read_only(session, stmt.tag)
    if is_ddl(stmt):
        await run_ddl(session, stmt)
        return
    if not is_dml(stmt):
        raise refusal(stmt)
    values = {str(i + 1): v for i, v in enumerate(params or [])} or None
    result = await core.execute_dml(PgHost(session), stmt, values)
    if result.returning is not None:
        await _send_table(session, result.returning, describe, formats)
    session.send(m.command_complete(result.tag))


async def run_ddl(session: SessionPort, stmt: Statement) -> None:
    result = await core.run_ddl(PgHost(session), stmt)
    for notice in result.notices:
        session.send(m.notice_response(PgError("00000", notice, severity="NOTICE")))
    session.send(m.command_complete(result.tag))


async def _in_transaction(session: SessionPort, work: Any) -> Any:
    """Run `work(txn)` in a worker thread inside the open transaction, or as its own transaction
    (committed through the machine before returning) when no block is open."""
    return await core.in_transaction(PgHost(session), work)


async def publish(session: SessionPort, txn: TxnState) -> None:
    """Commit a transaction's staged writes through the commit machine; PgError if it aborts."""
    await core.publish(PgHost(session), txn)


async def discard(session: SessionPort, txn: TxnState) -> None:
    """ROLLBACK: staged files are unreferenced; delete them (best effort)."""
    await core.discard(PgHost(session), txn)


async def describe_write(session: SessionPort, stmt: Statement) -> tuple[pa.Schema | None, dict[int, pa.DataType]]:
    """Parse-time description of a DML statement: RETURNING columns and parameter types."""
    from icegres.engine import dml

    qctx = session.qctx
    if qctx.txn is not None:
        return await session.in_thread(dml.describe, qctx, stmt)
    qctx.txn = new_transaction(session, None, autocommit=True)
    try:
        return await session.in_thread(dml.describe, qctx, stmt)
    finally:
        qctx.end_transaction()


async def _send_table(session: SessionPort, table: pa.Table, describe: bool, formats: list[int] | None) -> None:
    from icegres.protocol.pgwire.datarows import encode_data_rows
    from icegres.protocol.pgwire.results import presentable

    formats = formats or [0] * table.num_columns
    if describe:
        session.send(row_description(table.schema, formats))
    text = session.text_settings()
    for batch in table.to_batches():
        session.send(encode_data_rows(presentable(batch, table.schema, formats), formats, text))


# --- COPY FROM STDIN ---------------------------------------------------------------------------


def refuse_if_read_only(session: SessionPort, what: str) -> None:
    """25006 for a write in a READ ONLY transaction (or, outside one, with
    default_transaction_read_only on), as PostgreSQL refuses it."""
    default = session.settings.get("default_transaction_read_only", "off") == "on"
    session.block.feed(txblock.WriteStarted(what, default))


async def copy_from(session: SessionPort, stmt: Statement) -> None:
    """COPY table [(cols)] FROM STDIN (text or CSV): the whole stream is one commit."""
    refuse_if_read_only(session, "COPY FROM")
    target = copy_target(stmt.value or "")
    if target is None:
        raise PgError(E.SYNTAX_ERROR, "COPY FROM needs a table name")
    fmt = CopyFormat(dict(stmt.options))
    table_name, columns = target
    session.send(m.copy_in_response(len(columns) if columns else 0))
    await session.flush()
    chunks: list[bytes] = []
    while True:
        msg = await session.next_message()
        if isinstance(msg, m.CopyData):
            chunks.append(msg.data)
        elif isinstance(msg, m.CopyDone):
            break
        elif isinstance(msg, m.CopyFail):
            raise PgError(E.QUERY_CANCELED, f"COPY from stdin failed: {msg.message}")
        elif isinstance(msg, m.Flush | m.Sync):
            continue
        else:
            raise PgError(E.PROTOCOL_VIOLATION, f"unexpected message type during COPY from stdin: {type(msg).__name__}")
    result = await core.copy_in(PgHost(session), table_name, columns, fmt, b"".join(chunks))
    session.send(m.command_complete(result.tag))
