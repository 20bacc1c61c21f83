"""A Query or Parse message's text as classified statements, without stalling the event loop.

Splitting and classifying is lexing, linear in the text, but a 50 MB statement is still tens of
milliseconds to seconds of Python, and what the engine does next with the text is worse: sqlglot
tokenises it in Python (~0.2 s a MB), DataFusion's own parser reads a 10 MB literal in ~1.2 s, and
the engine's marker scans (regular expressions over the whole text) hold the GIL ~0.05 s a MB in
one call, which is the time every other session's statement then waits. So:

- A message over BIG_CHARS is split and classified in a worker thread (the server's
  `text_limiter`, not the query threads: splitting never waits behind, or holds up, a query).
- A big statement is compacted first: its comments become one space each, and in a query (a
  simple Query message's SELECT, without `$n` of its own) each string literal over
  LITERAL_CHARS becomes a parameter, `$1`, `$2`…, bound to its value. The engine then sees a
  statement of ordinary size; the literal's value travels to DataFusion as a parameter value,
  never through a parser. A parameter is text, as an untyped literal resolves to in every
  context a query gives it in practice (a comparison, a function argument, a select list).

The bystander's latency with a 50 MB literal or comment: tests/e2e/test_limits.py.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import trio

from icegres.sql.lexer import Kind as Tok
from icegres.sql.lexer import scan, split_statements, unquoted
from icegres.sql.statement import Kind, Statement, classify

if TYPE_CHECKING:
    from icegres.protocol.pgwire.framing import FrameDecoder
    from icegres.protocol.pgwire.messages import FrontendMessage
    from icegres.protocol.pgwire.port import ServerPort

BIG_CHARS = 64 * 1024
LITERAL_CHARS = 4 * 1024


@dataclass(frozen=True)
class Split:
    statements: list[Statement]
    offsets: list[int]  # where each statement's text starts in the message (error positions)
    # Per statement: the values of the parameters its compaction made ($1…), or None.
    params: list[dict[str, str] | None] = field(default_factory=list)


async def next_message(server: ServerPort, decoder: FrameDecoder) -> FrontendMessage | None:
    """The decoder's next message (None: more bytes needed), decoded in a worker thread when it
    is over BIG_CHARS bytes and all there."""
    length = decoder.next_length()
    if length <= BIG_CHARS or decoder.buffered() < length + 1:
        return decoder.next_message()
    return await trio.to_thread.run_sync(decoder.next_message, limiter=server.text_limiter)


async def split(server: ServerPort, sql: str, *, literals: bool = True) -> Split:
    """The statements of a message's text (`literals`: big string literals may become
    parameters; only a simple Query's statements can carry them)."""
    if len(sql) <= BIG_CHARS:
        return split_text(sql, literals=literals)
    return await trio.to_thread.run_sync(lambda: split_text(sql, literals=literals), limiter=server.text_limiter,
                                         abandon_on_cancel=True)


def split_text(sql: str, *, literals: bool = True) -> Split:
    try:
        texts = split_statements(sql)
    except Exception:
        texts = [sql]
    statements, params, located = [], [], []
    for text in texts:
        if len(text) > BIG_CHARS:
            compacted, values = compact(text, literals=literals)
            statements.append(classify(compacted))
            located.append(text)  # positions inside a compacted statement are its own
        else:
            values = None
            statements.append(classify(text))
            located.append(statements[-1].sql)  # leading comments stripped: where it starts
        params.append(values)
    return Split(statements, statement_offsets(sql, located), params)


def compact(sql: str, *, literals: bool = True) -> tuple[str, dict[str, str] | None]:
    """`sql` with comments as single spaces and (`literals`, in a query without parameters of its
    own) string literals over LITERAL_CHARS as `$n`; the values of those parameters (None if
    none was made)."""
    tokens = list(scan(sql, comments=True))
    replace_literals = (literals and not any(kind is Tok.PARAM for kind, _, _ in tokens)
                        and classify(sql).kind is Kind.QUERY)
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
            name = str(len(values) + 1)
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
