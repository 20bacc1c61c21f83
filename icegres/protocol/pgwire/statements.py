"""A Query or Parse message's text as classified statements, without stalling the event loop.

Splitting and classifying is lexing, linear in the text, but a 50 MB statement is still tens of
milliseconds to seconds of Python, and what the engine does next with the text is worse: sqlglot
tokenises it in Python (~0.2 s a MB), DataFusion's own parser reads a 10 MB literal in ~1.2 s, and
the engine's marker scans (regular expressions over the whole text) hold the GIL ~0.05 s a MB in
one call, which is the time every other session's statement then waits. So:

- A message over BIG_CHARS is split and classified in a worker thread (the server's
  `text_limiter`, not the query threads: splitting never waits behind, or holds up, a query).
- A big statement is compacted first: its comments become one space each, and in a query or a
  DML statement (INSERT, UPDATE, DELETE, MERGE) each string literal over LITERAL_CHARS becomes a
  parameter bound to its value, numbered after the statement's own parameters (in a Parse's,
  Prepared.big: bound at every execution, never described to the client). The engine then sees
  a statement of ordinary size; the literal's value travels as a parameter value, never through
  a parser. A parameter is text, as an untyped literal resolves to in every context a query
  gives it in practice (a comparison, a function argument, a select list); in a DML statement
  it stays a parameter only where its context makes it text (a text column's value or
  comparison) and is written back as the literal elsewhere (engine/big_values.py `settled`).

A Query or Parse message over framing.PIECES_BYTES never becomes one bytes or str object: it is
kept as the pieces it arrived in, decoded piece by piece and scanned by `sql/pieces.py` (no C
call over more than a piece, and the thread hands the GIL over after each piece), and a big
literal's value stays UTF-8 pieces (`BigText`) that the engine reads as a one-row table, never
as a literal in a plan (engine/big_values.py). The bystander's latency with a 50 MB literal,
`E'…'` string, comment, INSERT or Parse: tests/e2e/test_limits.py.
"""

from __future__ import annotations

import codecs
import ctypes
import re
import struct
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import trio

from icegres.pg.encoding import utf8, utf8_error
from icegres.pg.errors import PROTOCOL_VIOLATION, PgError
from icegres.protocol.pgwire import messages as m
from icegres.sql.lexer import Kind as Tok
from icegres.sql.lexer import scan, strip_leading_comments, unquoted
from icegres.sql.pieces import GAP, Literal, RawStatement, Scanner, split_statements
from icegres.sql.statement import Kind, Statement, classify

if TYPE_CHECKING:
    from icegres.protocol.pgwire.framing import FrameDecoder
    from icegres.protocol.pgwire.port import ServerPort

BIG_CHARS = 64 * 1024
LITERAL_CHARS = 4 * 1024
_SLICE_CHARS = 64 * 1024  # what a big Parse's text is scanned by (no C call over more)


@dataclass(frozen=True)
class Split:
    statements: list[Statement]
    offsets: list[int]  # where each statement's text starts in the message (error positions)
    # Per statement: the values of the parameters its compaction made ($1…), or None
    # (a str, or a big Query's BigText).
    params: list[dict[str, Any] | None] = field(default_factory=list)


async def next_message(server: ServerPort, decoder: FrameDecoder) -> m.FrontendMessage | None:
    """The decoder's next message (None: more bytes needed), decoded in a worker thread when it
    is over BIG_CHARS bytes and all there (a big Query: split and compacted there too)."""
    if not decoder.worth_a_thread(BIG_CHARS):
        msg = decoder.next_message()
    else:
        msg = await trio.to_thread.run_sync(decoder.next_message, limiter=server.text_limiter)
    if isinstance(msg, m.MessagePieces):
        of_pieces = query_of_pieces if msg.kind == b"Q" else parse_of_pieces
        try:
            return await trio.to_thread.run_sync(of_pieces, msg.pieces, limiter=server.text_limiter)
        except PgError as err:
            if err.sqlstate == PROTOCOL_VIOLATION:
                raise
            return m.Unreadable(msg.kind, err)
    return msg




_YIELD_BYTES = 1 << 16


async def release_memory(server: ServerPort) -> None:
    """After a big Query: give the freed heap back to the system. Its value passed through
    tens of thousands of pieces of 64 kB in the worker threads' malloc arenas, which glibc keeps
    (~100-150 MB of RSS for a 50 MB literal) until `malloc_trim` returns their free pages. Not
    glibc: nothing to do."""
    if _malloc_trim is not None:
        await trio.to_thread.run_sync(_malloc_trim, 0, limiter=server.text_limiter)


def _find_malloc_trim():  # noqa: ANN202
    try:
        return ctypes.CDLL(None).malloc_trim  # ctypes lets the GIL go during the call
    except (OSError, AttributeError):
        return None


_malloc_trim = _find_malloc_trim()


def query_of_pieces(pieces: list[bytes]) -> m.Query:
    """A big Query message's body (its pieces, emptied as they are read) as a Query carrying its
    Split: decoded, split and compacted a piece at a time."""
    last = max((k for k, p in enumerate(pieces) if p), default=-1)
    if last < 0 or pieces[last][-1] != 0:
        raise PgError(PROTOCOL_VIOLATION, "invalid message format: unterminated string")

    def text() -> Iterator[bytes]:
        for k in range(last + 1):
            piece, pieces[k] = pieces[k], b""
            if k == last:
                piece = piece[:-1]
            if b"\0" in piece:
                raise PgError(PROTOCOL_VIOLATION, "invalid message format: a NUL inside the query string")
            yield piece

    split = split_raw(_scanned(text()))
    return m.Query("; ".join(s.sql for s in split.statements), split)


def parse_of_pieces(pieces: list[bytes]) -> m.Parse:
    """A big Parse message's body (its pieces, emptied as they are read) as a Parse carrying its
    Split, its statement decoded, split and compacted a piece at a time as a big Query's is: the
    statement name, the text, then the parameter types (messages.py decodes a small one so)."""
    body = _Cursor(pieces)
    name = b"".join(body.cstring())
    name_text = utf8(name)
    raw = _scanned(body.cstring())
    rest = body.rest()
    count = struct.unpack_from("!H", rest)[0] if len(rest) >= 2 else -1
    if len(rest) < 2 + 4 * count:
        raise PgError(PROTOCOL_VIOLATION, "invalid message format: message too short")
    if len(rest) > 2 + 4 * count:
        raise PgError(PROTOCOL_VIOLATION, "invalid message format: trailing bytes")
    oids = struct.unpack_from(f"!{count}I", rest, 2)
    split = split_raw(raw, declared=count)
    return m.Parse(name_text, "; ".join(s.sql for s in split.statements), oids, split)


class _Cursor:
    """A message body's pieces, read from the start (each emptied once read)."""

    def __init__(self, pieces: list[bytes]) -> None:
        self.pieces, self.k, self.at = pieces, 0, 0

    def cstring(self) -> Iterator[bytes]:
        """The bytes up to the next NUL, piece by piece (the NUL consumed); PgError if none."""
        while self.k < len(self.pieces):
            piece = self.pieces[self.k]
            end = piece.find(b"\0", self.at)
            if end >= 0:
                yield piece[self.at : end]
                self.at = end + 1
                return
            yield piece[self.at :] if self.at else piece
            self.pieces[self.k], self.k, self.at = b"", self.k + 1, 0
        raise PgError(PROTOCOL_VIOLATION, "invalid message format: unterminated string")

    def rest(self) -> bytes:
        rest = b"".join([self.pieces[self.k][self.at :], *self.pieces[self.k + 1 :]]) if self.k < len(self.pieces) else b""
        self.pieces.clear()
        return rest


def _scanned(text: Iterable[bytes]) -> list[RawStatement]:
    """The statements of a text given as UTF-8 pieces, decoded and scanned a piece at a time
    (sql/pieces.py). After every 64 kB the thread sleeps for nothing, which hands the GIL to
    whoever waits for it (the loop, a bystander's statement) at once rather than after the 5 ms
    switch interval: once a MB, a 50 MB E'…' string still delayed a bystander 40-68 ms; now
    19-47 ms."""
    decoder = codecs.getincrementaldecoder("utf-8")()
    scanner = Scanner(LITERAL_CHARS)
    since_yield = 0
    for piece in text:
        try:
            scanner.feed(decoder.decode(piece))
        except UnicodeDecodeError as exc:
            raise utf8_error(exc.object, exc.start) from None
        since_yield += len(piece)
        if since_yield >= _YIELD_BYTES:
            since_yield = 0
            time.sleep(0)
    try:
        decoder.decode(b"", final=True)
    except UnicodeDecodeError as exc:
        raise utf8_error(exc.object, exc.start) from None
    return _finished(scanner)


def _finished(scanner: Scanner) -> list[RawStatement]:
    raw = scanner.finish()
    if scanner.refused is not None:
        raise scanner.refused
    return raw


def split_raw(raw: list[RawStatement], *, declared: int | None = None) -> Split:
    """`split_text` for statements the piece scanner found: a small one as written, a big one
    compacted (its comments a space each; its big literals parameters where they can be, as
    `compact` does). `declared`: the statements are a Parse's, which declared that many
    parameter types (see `_compacted`)."""
    statements, offsets, params = [], [], []
    for st in raw:
        if st.chars <= BIG_CHARS:
            text = "".join(_written(item) for item in st.items)
            piece = text.strip()
            if not strip_leading_comments(piece):
                continue
            try:
                stmt = classify(piece)
            except PgError as err:
                if err.position is not None:
                    err.position += st.start + len(text) - len(text.lstrip())
                raise
            statements.append(stmt)
            offsets.append(st.start + max(text.find(stmt.sql), 0))
            params.append(None)
            continue
        joined = "".join(" $0 " if isinstance(item, Literal) else " " if item is GAP else item  # type: ignore[misc]
                         for item in st.items)
        if not strip_leading_comments(joined):
            continue
        made = _compacted(joined.strip(), [item.value for item in st.items if isinstance(item, Literal)], declared)
        if made is None:
            # Not a query or a DML statement (DDL): as written.
            written = "".join(_written(item) for item in st.items).strip()
            stmt, values = classify(compact(written, literals=False)[0]), None
        else:
            stmt, values = made
        statements.append(stmt)
        offsets.append(st.start + len(joined) - len(joined.lstrip()))
        params.append(values)
    return Split(statements, offsets, params)


def _compacted(text: str, literals: list[Any], declared: int | None) -> tuple[Statement, dict[str, Any] | None] | None:
    """A big statement whose big literals stand as `$0` in `text`, with each of them a parameter
    bound to its value, numbered after the statement's own parameters (`declared`: how many
    parameter types a Parse declared; None for a simple Query's statement, whose own `$n` are
    bound to nothing and which the engine reports, 42P02, as PostgreSQL does). Only a query's or
    a DML statement's literal can be a parameter: the engine keeps it one where its context makes
    it text and writes it back as the literal elsewhere (engine/big_values.py). None for anything
    else (DDL)."""
    stmt = classify(text)
    if not literals:
        return stmt, None
    if not takes_parameters(stmt):
        return None
    tokens = [(start, end) for kind, start, end in scan(text) if kind is Tok.PARAM]
    own = max((int(text[start + 1 : end]) for start, end in tokens if text[start + 1 : end] != "0"), default=0)
    base = max(own, declared or 0)
    out, pos, values = [], 0, {}
    for start, end in tokens:
        if text[start + 1 : end] == "0":
            name = str(base + len(values) + 1)
            values[name] = literals[len(values)]
            out.append(f"{text[pos:start]}${name}")
            pos = end
    out.append(text[pos:])
    return classify("".join(out)), values


_DML = frozenset({"INSERT", "UPDATE", "DELETE", "MERGE"})


def takes_parameters(stmt: Statement) -> bool:
    """Whether a statement's big literals can be parameters: a query's or a DML statement's
    (the engine reads a parameter as text where its context makes it text, and writes it back
    as the literal it was elsewhere: engine/big_values.py), and a CREATE TABLE's, ALTER TABLE's
    or COMMENT ON's (the DDL parser reads one as a DEFAULT's or COMMENT's text and
    parses the statement as written otherwise: engine/ddl_literals.py)."""
    return stmt.kind is Kind.QUERY or (stmt.kind is Kind.WRITE and (
        stmt.tag in _DML or (stmt.tag in ("CREATE", "ALTER", "COMMENT") and _TABLE_DDL.match(stmt.sql) is not None)))


_TABLE_DDL = re.compile(r"\s*(?:create\s+(?:(?:global|local)\s+)?(?:(?:temp|temporary|unlogged)\s+)?table"
                        r"|alter\s+table|comment\s+on)\s", re.IGNORECASE)


def split_prepared(sql: str, declared: int) -> Split:
    """The statements of a big Parse's text (over BIG_CHARS: a worker thread's job), scanned a
    slice at a time as a big Query's pieces are, and compacted: its big literals parameters
    numbered after its own (`declared`: parameter types the Parse declared)."""
    scanner = Scanner(LITERAL_CHARS)
    for at in range(0, len(sql), _SLICE_CHARS):
        scanner.feed(sql[at : at + _SLICE_CHARS])
    return split_raw(_finished(scanner), declared=declared)


def _written(item: str | object) -> str:
    if isinstance(item, Literal):
        return item.raw()
    return " " if item is GAP else item  # type: ignore[return-value]


async def split(server: ServerPort, sql: str, *, declared: int | None = None) -> Split:
    """The statements of a Query message's text, or (`declared`: the count of parameter types it
    declared) a Parse message's. A big text is split in a worker thread, and its big literals
    become parameters where they can (`_compacted`)."""
    if len(sql) <= BIG_CHARS:
        return split_text(sql, literals=declared is None)
    if declared is not None:
        return await trio.to_thread.run_sync(split_prepared, sql, declared, limiter=server.text_limiter,
                                             abandon_on_cancel=True)
    return await trio.to_thread.run_sync(split_text, sql, limiter=server.text_limiter, abandon_on_cancel=True)


def split_text(sql: str, *, literals: bool = True) -> Split:
    try:
        texts = split_statements(sql)
    except Exception:
        texts = [sql]
    statements, params, located = [], [], []
    for text in texts:
        try:
            if len(text) > BIG_CHARS:
                compacted, values = compact(text, literals=literals)
                statements.append(classify(compacted))
                located.append(text)  # positions inside a compacted statement are its own
            else:
                values = None
                statements.append(classify(text))
                located.append(statements[-1].sql)  # leading comments stripped: where it starts
        except PgError as err:  # (an E'…' string PostgreSQL refuses: its cursor is the message's)
            if err.position is not None:
                err.position += statement_offsets(sql, [*located, text])[-1]
            raise
        params.append(values)
    return Split(statements, statement_offsets(sql, located), params)


def compact(sql: str, *, literals: bool = True) -> tuple[str, dict[str, str] | None]:
    """`sql` with comments as single spaces and (`literals`, in a query or a DML statement) string
    literals over LITERAL_CHARS as `$n`, numbered after the statement's own; the values of those
    parameters (None if none was made)."""
    tokens = list(scan(sql, comments=True))
    replace_literals = literals and takes_parameters(classify(sql))
    # (a simple Query's own `$n` is bound to nothing: the engine reports it, as PostgreSQL does)
    own = max((int(sql[start + 1 : end]) for kind, start, end in tokens if kind is Tok.PARAM), default=0)
    out: list[str] = []
    values: dict[str, str] = {}
    pos = 0
    for kind, start, end in tokens:
        if kind is Tok.COMMENT:
            out.append(sql[pos:start])
            out.append(" ")
            pos = end
        elif replace_literals and kind is Tok.STRING and end - start > LITERAL_CHARS and sql[start] in "'eE$":
            out.append(sql[pos:start])
            name = str(own + len(values) + 1)
            text = sql[start:end]
            values[name] = _dollar_body(text) if text[0] == "$" else unquoted(text)
            out.append(f"${name}")
            pos = end
    if pos == 0:
        return sql, None
    out.append(sql[pos:])
    return "".join(out), values or None


def _dollar_body(text: str) -> str:
    tag_end = text.index("$", 1) + 1
    return text[tag_end:len(text) - tag_end]


def statement_offsets(sql: str, pieces: list[str]) -> list[int]:
    """Where each statement text (a verbatim substring after splitting and comment stripping)
    starts in the message's SQL, so error positions count from the start of the string."""
    offsets = []
    start = 0
    for piece in pieces:
        at = sql.find(piece, start) if piece else -1
        offsets.append(max(at, 0))
        if at >= 0:
            start = at + len(piece)
    return offsets
