"""What a pgwire session does with statements that change the lake: DML, DDL, COPY FROM, COMMIT.

The write path itself is protocol-neutral (`icegres.engine.writes`, shared with Flight SQL): this
module adapts the session to it (`PgHost`) and sends what the statements report — RETURNING rows,
notices, command tags — as PostgreSQL messages. Writes stage into the session's transaction
(`TxnState`); outside a transaction block each write is its own transaction and commits at once,
through the commit machine.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from icegres.engine import writes as core
from icegres.engine.statements import Statement
from icegres.engine.txn import TxnState
from icegres.machines import txblock
from icegres.protocol.pgwire import errors as E
from icegres.protocol.pgwire import messages as m
from icegres.protocol.pgwire.errors import PgError
from icegres.protocol.pgwire.results import row_description

if TYPE_CHECKING:
    from icegres.protocol.pgwire.session import Session

DML_WORDS = core.DML_WORDS
DDL_WORDS = core.DDL_WORDS
is_dml = core.is_dml
is_ddl = core.is_ddl


def new_transaction(session: Session, isolation: str | None, *, autocommit: bool = False) -> TxnState:
    return core.new_transaction(session.settings.get("default_transaction_isolation"), isolation,
                                autocommit=autocommit)


class PgHost:
    """A pgwire session as the write path's host: one statement at a time, so the query
    context's transaction is simply set and cleared on the session's own context."""

    __slots__ = ("session",)

    def __init__(self, session: Session) -> None:
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
        return await self.session._in_thread(fn, *args)


async def run_write(session: Session, stmt: Statement, params: list[Any] | None, describe: bool,
                    formats: list[int] | None = None) -> None:
    """Execute INSERT/UPDATE/DELETE/TRUNCATE or DDL and send its rows (RETURNING) and tag."""
    refuse_if_read_only(session, stmt.tag)
    if is_ddl(stmt):
        await run_ddl(session, stmt)
        return
    if not is_dml(stmt):
        from icegres.protocol.pgwire.session import _unsupported

        raise _unsupported(stmt)
    values = {str(i + 1): v for i, v in enumerate(params or [])} or None
    result = await core.execute_dml(PgHost(session), stmt, values)
    if result.returning is not None:
        await _send_table(session, result.returning, describe, formats)
    session.send(m.command_complete(result.tag))


async def run_ddl(session: Session, stmt: Statement) -> None:
    result = await core.run_ddl(PgHost(session), stmt)
    for notice in result.notices:
        session.send(m.notice_response(PgError("00000", notice, severity="NOTICE")))
    session.send(m.command_complete(result.tag))


async def _in_transaction(session: Session, work: Any) -> Any:
    """Run `work(txn)` in a worker thread inside the open transaction, or as its own transaction
    (committed through the machine before returning) when no block is open."""
    return await core.in_transaction(PgHost(session), work)


async def publish(session: Session, txn: TxnState) -> None:
    """Commit a transaction's staged writes through the commit machine; PgError if it aborts."""
    await core.publish(PgHost(session), txn)


async def discard(session: Session, txn: TxnState) -> None:
    """ROLLBACK: staged files are unreferenced; delete them (best effort)."""
    await core.discard(PgHost(session), txn)


async def describe_write(session: Session, sql: str) -> tuple[pa.Schema | None, dict[int, pa.DataType]]:
    """Parse-time description of a DML statement: RETURNING columns and parameter types."""
    from icegres.engine import dml

    qctx = session.qctx
    if qctx.txn is not None:
        return await session._in_thread(dml.describe, qctx, sql)
    qctx.txn = new_transaction(session, None, autocommit=True)
    try:
        return await session._in_thread(dml.describe, qctx, sql)
    finally:
        qctx.end_transaction()


async def _send_table(session: Session, table: pa.Table, describe: bool, formats: list[int] | None) -> None:
    from icegres.protocol.pgwire.results import presentable
    from icegres.protocol.pgwire.types import encode_data_rows

    formats = formats or [0] * table.num_columns
    if describe:
        session.send(row_description(table.schema, formats))
    text = session._text_settings()
    for batch in table.to_batches():
        session.send(encode_data_rows(presentable(batch, table.schema, formats), formats, text))


# --- COPY FROM STDIN ---------------------------------------------------------------------------


def refuse_if_read_only(session: Session, what: str) -> None:
    """25006 for a write in a READ ONLY transaction (or, outside one, with
    default_transaction_read_only on), as PostgreSQL refuses it."""
    default = session.settings.get("default_transaction_read_only", "off") == "on"
    session.block.feed(txblock.WriteStarted(what, default))


async def copy_from(session: Session, stmt: Statement) -> None:
    """COPY table [(cols)] FROM STDIN (text or CSV): the whole stream is one commit."""
    from icegres.protocol.pgwire.copy import CopyFormat, copy_target

    refuse_if_read_only(session, "COPY FROM")

    target = copy_target(stmt.value or "")
    if target is None:
        raise PgError(E.SYNTAX_ERROR, "COPY FROM needs a table name")
    options = dict(stmt.options)
    fmt = CopyFormat(options)
    table_name, columns = target
    insert_cols = f" ({', '.join(columns)})" if columns else ""
    probe = f"INSERT INTO {table_name}{insert_cols} SELECT 1"  # only names the target
    from icegres.engine import assign, dml

    qctx = session.qctx

    def target_info(txn: TxnState) -> tuple[tuple[str, str], list[str], pa.Schema]:
        tree = dml.parse(probe)
        qctx.pin_for(probe)
        table = tree.this.this if hasattr(tree.this, "expressions") and tree.this.expressions else tree.this
        key = dml._target(qctx, txn, table)
        plan = dml._plan_of(txn, key)
        names = dml._insert_columns(tree, plan)
        return key, names, assign.write_schema(plan)

    chunks: list[bytes] = []

    async def receive() -> None:
        session.send(m.copy_in_response(len(columns) if columns else 0))
        await session.flush()
        while True:
            msg = await session._next_message()
            if isinstance(msg, m.CopyData):
                chunks.append(msg.data)
            elif isinstance(msg, m.CopyDone):
                return
            elif isinstance(msg, m.CopyFail):
                raise PgError(E.QUERY_CANCELED, f"COPY from stdin failed: {msg.message}")
            elif isinstance(msg, m.Flush | m.Sync):
                continue
            else:
                raise PgError(E.PROTOCOL_VIOLATION, f"unexpected message type during COPY from stdin: {type(msg).__name__}")

    def rows_of(txn: TxnState) -> tuple[tuple[str, str], pa.Table, bool]:
        key, names, schema = target_info(txn)
        zone = qctx.env.time_zone
        table = parse_copy(b"".join(chunks), fmt, names, schema, zone)
        plan = dml._plan_of(txn, key)
        return key, assign.conform(table, plan, key, zone), bool(plan.primary_key)

    def load(txn: TxnState) -> int:
        key, rows, _ = rows_of(txn)
        dml._append(txn, key, rows)
        return rows.num_rows

    await receive()
    ladder = qctx.engine.ladder
    if ladder is not None and session.block.state.idle:
        qctx.txn = new_transaction(session, None, autocommit=True)
        try:
            key, rows, has_pk = await session._in_thread(rows_of, qctx.txn)
        finally:
            qctx.end_transaction()
        if not has_pk:  # a primary-key table stays synchronous (its key check needs the lake)
            await ladder.append(key, rows)
            session.send(m.command_complete(f"COPY {rows.num_rows}"))
            return
    count = await _in_transaction(session, load)
    session.send(m.command_complete(f"COPY {count}"))


def parse_copy(data: bytes, fmt: Any, names: list[str], schema: pa.Schema, zone: str = "UTC") -> pa.Table:
    """COPY text or CSV bytes -> an Arrow table of the named columns, typed as the table's (a
    timestamptz without an offset read in the session's TimeZone `zone`)."""
    from icegres.engine.assign import cast as _cast

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


def copy_fields(data: bytes, fmt: Any, names: list[str]) -> list[pa.ChunkedArray]:
    """Every row's fields as one string column per name (None: NULL), exactly as PostgreSQL splits
    COPY text or CSV: by Arrow's vectorised CSV reader where the input needs nothing it cannot
    do, else (escapes, odd widths, bad bytes) by the exact row-by-row parser below."""
    if data == b"\\.\n" or data.endswith(b"\n\\.\n"):  # the end marker: `\.` alone on the last line
        data = data[:-3]
    if fmt.header_match:
        _match_header(data, fmt, names)
    fast = _arrow_fields(data, fmt, len(names))
    fields = fast if fast is not None else exact_fields(data, fmt, names)
    return _forced_nulls(fields, fmt, names)


def _match_header(data: bytes, fmt: Any, names: list[str]) -> None:
    """HEADER MATCH: the first line names the columns COPY reads, in order (else 22P04)."""
    if not data:
        return  # no header line, and no rows to read under it
    first = data.split(b"\n", 1)[0].rstrip(b"\r").decode("utf-8", errors="replace")
    rows = _csv_rows(first + "\n", fmt) if fmt.csv else [_text_fields(first, fmt)]
    header = rows[0] if rows else []
    if len(header) != len(names):
        raise PgError("22P04", f"wrong number of fields in header line: got {len(header)}, expected {len(names)}")
    for i, (got, expected) in enumerate(zip(header, names, strict=True)):
        if got != expected:
            raise PgError("22P04", f'column name mismatch in header line field {i + 1}: got "{got}", '
                          f'expected "{expected}"')


def _forced_nulls(fields: list[pa.ChunkedArray], fmt: Any, names: list[str]) -> list[pa.ChunkedArray]:
    """FORCE_NULL / FORCE_NOT_NULL applied to the fields of the columns they name (42703 for a
    name COPY does not read). Both parsers give NULL for the unquoted NULL string and the text
    itself for a quoted one, so: FORCE_NULL nulls the text equal to it, FORCE_NOT_NULL puts the
    text back for NULL."""
    import pyarrow.compute as pc

    unknown = (fmt.force_null | fmt.force_not_null) - set(names)
    if unknown:
        raise PgError("42703", f'column "{sorted(unknown)[0]}" does not exist')
    out = list(fields)
    for i, name in enumerate(names):
        if name in fmt.force_not_null:
            out[i] = pc.fill_null(out[i], pa.scalar(fmt.null, pa.string()))
        if name in fmt.force_null:
            out[i] = pc.if_else(pc.equal(out[i], fmt.null), pa.scalar(None, pa.string()), out[i])
    return out


def exact_fields(data: bytes, fmt: Any, names: list[str]) -> list[pa.ChunkedArray]:
    """`copy_fields` row by row, every rule of PostgreSQL's COPY (the reference for the fast path)."""
    ncols = len(names)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise PgError("22021", 'invalid byte sequence for encoding "UTF8"', detail=f"COPY line {line}") from None
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    if fmt.csv:
        rows = _csv_rows("\n".join(lines) + "\n" if lines else "", fmt)
    else:
        rows = [_text_fields(line.rstrip("\r"), fmt) for line in lines]
    if fmt.header and rows:
        rows = rows[1:]
    for i, row in enumerate(rows):
        if len(row) != ncols:
            which = "extra data after last expected column" if len(row) > ncols else f'missing data for column "{names[len(row)]}"'
            raise PgError("22P04", which, detail=f"COPY line {i + 1 + (1 if fmt.header else 0)}")
    return [pa.chunked_array([pa.array([r[j] for r in rows], type=pa.string())]) for j in range(ncols)]


def _arrow_fields(data: bytes, fmt: Any, ncols: int) -> list[pa.ChunkedArray] | None:
    """The fields by Arrow's CSV reader (~100x the row-by-row parser), or None where its rules
    differ from PostgreSQL's: text-format backslash escapes (and a delimiter or NULL marker
    spelled with one inside a value), a CSV ESCAPE other than the quote, a carriage return
    (Arrow ends a row at a lone one), empty lines, rows of the wrong width or invalid UTF-8 (the
    exact parser names the line)."""
    import pyarrow.compute as pc
    import pyarrow.csv as pacsv

    if not data or ncols == 0 or b"\r" in data or (fmt.csv and fmt.escape != fmt.quote):
        return None
    if ncols > 1 and (data.startswith(b"\n") or b"\n\n" in data):
        return None  # Arrow reads an empty line as a row of empty fields; PostgreSQL refuses it
    if fmt.csv and fmt.quote.encode() in data and fmt.quote.encode() in _quoted_fields(fmt.delimiter, fmt.quote).sub(b"", data):
        return None  # a quote that does not open and close a whole field: PostgreSQL's rules differ
    names = [f"f{i}" for i in range(ncols)]
    try:
        table = pacsv.read_csv(
            pa.py_buffer(data),
            read_options=pacsv.ReadOptions(column_names=names),
            parse_options=pacsv.ParseOptions(
                delimiter=fmt.delimiter,
                quote_char=fmt.quote if fmt.csv else False,
                double_quote=True,
                escape_char=False,
                newlines_in_values=fmt.csv,
                ignore_empty_lines=False,
            ),
            convert_options=pacsv.ConvertOptions(
                column_types={n: pa.string() for n in names},
                null_values=[fmt.null],
                strings_can_be_null=True,
                quoted_strings_can_be_null=False,
            ),
        )
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return None
    if fmt.header:
        table = table.slice(1)
    if not fmt.csv and any(pc.any(pc.match_substring(c, "\\")).as_py() for c in table.columns):
        return None
    return list(table.columns)


@functools.cache
def _quoted_fields(delimiter: str, quote: str) -> re.Pattern[bytes]:
    """A whole quoted CSV field: opened at a field's start, closed at its end, quotes doubled inside."""
    d, q = re.escape(delimiter.encode()), re.escape(quote.encode())
    return re.compile(rb"(?:^|(?<=[" + d + rb"\n]))" + q + rb"(?:[^" + q + rb"]|" + q + q + rb")*" + q
                      + rb"(?=[" + d + rb"\n]|\Z)", re.M)


_UNESCAPE = {"t": "\t", "n": "\n", "r": "\r", "b": "\b", "f": "\f", "v": "\v", "\\": "\\"}


def _text_fields(line: str, fmt: Any) -> list[str | None]:
    """One line of COPY text format: delimiter-separated, backslash escapes, \\N for NULL."""
    out: list[str | None] = []
    field: list[str] = []
    raw_field: list[str] = []
    i = 0
    n = len(line)
    while i <= n:
        if i == n or line[i] == fmt.delimiter:
            raw = "".join(raw_field)
            out.append(None if raw == fmt.null else _utf8("".join(field)))
            field, raw_field = [], []
            i += 1
            if i > n:
                break
            continue
        c = line[i]
        if c == "\\" and i + 1 < n:
            nxt = line[i + 1]
            # \ followed by 1-3 octal digits or x and 1-2 hex digits is a byte value (COPY text format).
            code = re.match(r"[0-7]{1,3}|x[0-9a-fA-F]{1,2}", line[i + 1 : i + 4])
            if code:
                raw_field.append(c + code.group())
                value = code.group()
                byte = (int(value[1:], 16) if value[0] == "x" else int(value, 8)) & 0xFF
                # Bytes >= 0x80 are parts of UTF-8 sequences: kept as surrogates until the field ends.
                field.append(chr(byte) if byte < 0x80 else chr(0xDC00 + byte))
                i += 1 + len(value)
                continue
            raw_field.append(c + nxt)
            field.append(_UNESCAPE.get(nxt, nxt))
            i += 2
            continue
        raw_field.append(c)
        field.append(c)
        i += 1
    return out


def _utf8(value: str) -> str:
    """A text-format field whose escaped bytes must still spell valid UTF-8, as in PostgreSQL."""
    if not any("\udc80" <= c <= "\udcff" for c in value):
        return value
    try:
        return value.encode("utf-8", "surrogateescape").decode("utf-8")
    except UnicodeDecodeError:
        raise PgError("22021", "invalid byte sequence for encoding \"UTF8\"") from None


def _csv_rows(text: str, fmt: Any) -> list[list[str | None]]:
    """CSV per PostgreSQL: an unquoted empty field (or the NULL string) is NULL, a quoted one is not."""
    rows: list[list[str | None]] = []
    i, n = 0, len(text)
    q, esc, d = fmt.quote, fmt.escape, fmt.delimiter
    row: list[str | None] = []
    while i < n:
        quoted = False
        buf: list[str] = []
        if text[i] == q:
            quoted = True
            i += 1
            while i < n:
                c = text[i]
                if c == esc and i + 1 < n and text[i + 1] == q:
                    buf.append(q)
                    i += 2
                elif c == q:
                    i += 1
                    break
                else:
                    buf.append(c)
                    i += 1
            else:
                raise PgError("22P04", "unterminated CSV quoted field", detail=f"COPY line {len(rows) + 1}")
        while i < n and text[i] not in (d, "\n"):
            buf.append(text[i])
            i += 1
        value = "".join(buf)
        row.append(None if (not quoted and value.rstrip("\r") == fmt.null) else (value if quoted else value.rstrip("\r")))
        if i < n and text[i] == d:
            i += 1
            if i == n or text[i] == "\n":
                row.append(None if fmt.null == "" else "")
        if i >= n or text[i] == "\n":
            rows.append(row)
            row = []
            i += 1
    return rows
