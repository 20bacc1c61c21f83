"""What a pgwire session does with statements that change the lake: DML, DDL, COPY FROM, COMMIT.

The write path itself is protocol-neutral (`icegres.engine.writes`, shared with Flight SQL): this
module hands it the session (`host`: an engine `SessionHost`) and sends what the statements report — RETURNING rows,
notices, command tags — as PostgreSQL messages. Writes stage into the session's transaction
(`TxnState`); outside a transaction block each write is its own transaction and commits at once,
through the commit machine.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from icegres.engine import txn
from icegres.engine import writes as core
from icegres.engine.txn import TxnState
from icegres.engine.write_hosts import SessionHost
from icegres.machines import txblock
from icegres.pg import errors as E
from icegres.pg.clock import TextSettings
from icegres.pg.copy_format import CopyFormat, copy_target
from icegres.pg.errors import PgError
from icegres.protocol.pgwire import errors_ahead
from icegres.protocol.pgwire import messages as m
from icegres.protocol.pgwire.results import row_description
from icegres.sql.statement import Statement, refusal

if TYPE_CHECKING:
    from icegres.protocol.pgwire.port import SessionPort

DML_WORDS = core.DML_WORDS
DDL_WORDS = core.DDL_WORDS
is_dml = core.is_dml
is_ddl = core.is_ddl
returns_rows = core.returns_rows


def new_transaction(session: SessionPort, isolation: str | None, *, autocommit: bool = False) -> TxnState:
    """A transaction of the session at `isolation`, else its default_transaction_isolation."""
    return txn.new_transaction(session.settings.get("default_transaction_isolation"), isolation,
                               autocommit=autocommit)


def host(session: SessionPort) -> SessionHost:
    """The session as the write path's host, for one statement."""
    block = session.block
    return SessionHost(session.qctx, block.txn if block.state.open else None,
                       session.settings.get("default_transaction_isolation"),
                       functools.partial(session.server.run_sync, errors_ahead.encoding_ahead, m.notice_fields, m.said), idle=block.state.idle)


async def run_write(session: SessionPort, stmt: Statement, values: dict[str, Any] | None, describe: bool,
                    text: TextSettings, formats: list[int] | None = None) -> bytes:
    """Execute INSERT/UPDATE/DELETE/TRUNCATE or DDL (`values`: its parameters' by name, "1" for
    $1); the messages that answer it (its RETURNING rows, notices and tag), for the session to
    send."""
    refuse_if_read_only(session, stmt.tag)
    if is_ddl(stmt):
        result = await core.run_ddl(host(session), stmt, values)
        notices = b"".join(m.notice_response(PgError("00000", notice, severity="NOTICE")) for notice in result.notices)
        rows = b"" if result.returning is None else _table_rows(result.returning, describe, formats, text)
        return notices + rows + session.trace.completed(result.tag)
    if not is_dml(stmt):
        raise refusal(stmt)
    result = await core.execute_dml(host(session), stmt, values)
    rows = b"" if result.returning is None else _table_rows(result.returning, describe, formats, text)
    return rows + session.trace.completed(result.tag)


async def publish(session: SessionPort, txn: TxnState) -> None:
    """Commit a transaction's staged writes through the commit machine; PgError if it aborts."""
    await core.publish(host(session), txn)


async def discard(session: SessionPort, txn: TxnState) -> None:
    """ROLLBACK: staged files are unreferenced; delete them (best effort)."""
    await core.discard(host(session), txn)


async def describe_write(session: SessionPort, stmt: Statement) -> tuple[pa.Schema | None, dict[int, pa.DataType]]:
    """Parse-time description of a DML statement (RETURNING columns and parameter types), or of
    a maintenance procedure's result rows (writes.describe_dml)."""
    return await core.describe_dml(host(session), stmt)


def _table_rows(table: pa.Table, describe: bool, formats: list[int] | None, text: TextSettings) -> bytes:
    """RETURNING rows as DataRows (after their RowDescription, if asked)."""
    from icegres.protocol.pgwire.datarows import encode_data_rows
    from icegres.protocol.pgwire.results import presentable

    formats = formats or [0] * table.num_columns
    out = [row_description(table.schema, formats)] if describe else []
    out += [encode_data_rows(presentable(batch, table.schema, formats), formats, text) for batch in table.to_batches()]
    return b"".join(out)


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
    fmt = CopyFormat(dict(stmt.options), is_from=True)
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
    result = await core.copy_in(host(session), table_name, columns, fmt, b"".join(chunks))
    session.send(session.trace.completed(result.tag))
