"""A big Query message's text scanned piece by piece, never with one call over the whole text.

A 50 MB statement read through `lexer.py` costs single C calls over the whole text (a `find` for
the end of a literal or comment, a copy, a decode) of 10-60 ms each, and every one of them holds
the GIL that much: another session's statement waits for each. This scanner is fed the message
in the pieces it arrived in (tens of kB each) and follows PostgreSQL's lexical rules as far as
splitting at top-level semicolons and finding comments and string literals need (lexer.py's
rules; a quote is a prefixed string's, `E'…'`, `B'…'`, `U&'…'`, only where the letter starts a
token). What it gives back per statement: verbatim text, big comments as a `GAP` and big plain,
escape (`E'…'`) or dollar-quoted string literals as a `Literal` whose value is UTF-8 pieces
(`BigText`), so no str of the literal's size is ever made. An escape string's backslash escapes
are undone as PostgreSQL's scanner does (sql/escapes.py); the first one whose escapes PostgreSQL
refuses is the scan's `refused` error, which fails the whole message as in PostgreSQL.

Pure and it never raises: a string, quoted name or comment that does not end runs to the end of
the text as written (the statement's syntax error is the engine's to report).
"""

from __future__ import annotations

import codecs
import re
from dataclasses import dataclass, field
from enum import Enum

from icegres.pg import big_str
from icegres.pg.errors import PgError
from icegres.sql.escapes import Refusal, unescaped
from icegres.sql.lexer import LETTER as _LETTER
from icegres.sql.lexer import NUMBER, strip_leading_comments


@dataclass(frozen=True, eq=False)
class BigText:
    """A text value held as UTF-8 pieces (each at most a received piece's size): what a big
    statement's string literal binds to. Compared by identity, and never hashed by value."""

    pieces: tuple[bytes, ...]
    size: int  # bytes
    chars: int
    binary: bool = False  # a bytea's bytes (a hex literal decoded: engine/big_values.py), not UTF-8

    def text(self) -> str:
        """The whole value as one str, decoded a piece at a time (a 50 MB decode in one call held
        the GIL 50-100 ms) and joined as pg/big_str.py joins."""
        return big_str.decoded(self.pieces)


def has_big(params: dict[str, object] | None) -> bool:
    """Whether any parameter value is a BigText."""
    return bool(params) and any(isinstance(v, BigText) for v in params.values())  # type: ignore[union-attr]


def big_bytes(params: dict[str, object] | None) -> int:
    """The bytes of the BigText parameter values."""
    return sum(v.size for v in (params or {}).values() if isinstance(v, BigText))


class _Gap:
    def __repr__(self) -> str:
        return "GAP"


GAP = _Gap()  # a big comment: one space


@dataclass(frozen=True)
class Literal:
    """A big plain ('…') or dollar-quoted string literal."""

    opener: str  # "'", "E'" or the $tag$
    value: BigText

    def raw(self) -> str:
        """The literal as written (one str of its size), quoted a piece at a time as `text` is
        decoded."""
        return big_str.join(self.raw_parts())

    def raw_parts(self) -> list[str]:
        """`raw` in the pieces it is made of, for a caller that joins them into a bigger text
        (with pg/big_str.py: one join, not two)."""
        decoder = codecs.getincrementaldecoder("utf-8")()  # (a character may span two pieces)
        closer = "'" if self.opener.endswith("'") else self.opener
        inner = [_written(self.opener, decoder.decode(p)) for p in self.value.pieces]
        return [self.opener, *inner, _written(self.opener, decoder.decode(b"", final=True)), closer]


def quoted(value: BigText) -> str:
    """`value` as a standard string literal ('…')."""
    return Literal("'", value).raw()


def quoted_parts(value: BigText) -> list[str]:
    """`quoted` in pieces (`Literal.raw_parts`)."""
    return Literal("'", value).raw_parts()


def _written(opener: str, inner: str) -> str:
    """A piece of a literal's value as it is written inside `opener`'s quotes."""
    if opener == "'":
        return inner.replace("'", "''")
    if opener == "E'":  # (a value's own escapes are gone: only `\` and `'` need one)
        return inner.replace("\\", "\\\\").replace("'", "''")
    return inner


Item = str | _Gap | Literal


@dataclass
class RawStatement:
    items: list[Item] = field(default_factory=list)
    start: int = 0  # character offset in the message where its text (before `strip`) begins
    chars: int = 0  # as written


class _In(Enum):
    NORMAL = 0
    PLAIN = 1  # '…' whose value may become a parameter
    VERBATIM = 2  # a prefixed string (not E'…') or a quoted name: kept as written
    ESCAPED = 3  # E'…', its text as written collected as a PLAIN literal's value is
    DOLLAR = 4
    LINE = 5
    BLOCK = 6


_SPECIAL = re.compile(r"[-/'\"$;]")
_DOLLAR = re.compile(rf"\$(?:[0-9]+|(?:[{_LETTER}][{_LETTER}0-9]*)?\$)")
_DOLLAR_OPEN = re.compile(rf"\$[{_LETTER}0-9]*")
_BLOCK = re.compile(r"/\*|\*/")
_ESCAPED = re.compile(r"['\\]")


_RUN = re.compile(rf"[{_LETTER}0-9$]*\Z")
_NUMBER = re.compile(NUMBER)


def _ends_in_name(text: str) -> bool:
    """Whether normal text ending so ends inside a name (where `$` and a quote's letter are the
    name's): a run of name characters is one unless a number starts it and is all of it."""
    run = _RUN.search(text).group()  # type: ignore[union-attr]
    if not run or run[0] == "$":
        return False
    if run[0] not in "0123456789":  # not isdigit(): '٣' is a letter to PostgreSQL
        return True
    rest = run[_NUMBER.match(run).end():]  # type: ignore[union-attr]
    return bool(rest) and rest[0] != "$"


class Scanner:
    """Feed the text in pieces (`feed`), then `finish`: the statements, cut at top-level `;`.

    A comment over `literal_chars` becomes GAP, a plain or dollar-quoted literal over it a
    Literal; smaller ones stay text as written."""

    def __init__(self, literal_chars: int) -> None:
        self.literal_chars = literal_chars
        self.statements: list[RawStatement] = [RawStatement()]
        self._at = 0  # characters consumed so far
        self._state = _In.NORMAL
        self._carry = ""
        self._tail = ""  # the last characters of normal text (is a quote's letter a prefix?)
        self._quote = ""  # the closing quote of a VERBATIM or ESCAPED token, or the $tag$
        self._pieces: list[str] = []  # a PLAIN/DOLLAR literal's value, or a comment, so far
        self._size = 0
        self._depth = 0
        # The first E'…' string whose escapes PostgreSQL refuses: its error (the cursor counted
        # from the start of the text fed). PostgreSQL reads the whole message before it runs
        # any of it, so the message fails.
        self.refused: PgError | None = None

    def feed(self, chunk: str) -> None:
        text = self._carry + chunk if self._carry else chunk
        self._carry = ""
        self._scan(text, final=False)

    def finish(self) -> list[RawStatement]:
        self._scan(self._carry, final=True)
        self._carry = ""
        if self._state is _In.PLAIN or self._state is _In.DOLLAR:
            opener = "'" if self._state is _In.PLAIN else self._quote
            self._emit(opener + _written(opener, "".join(self._pieces)), self._size)  # (it has no end)
        elif self._state is _In.ESCAPED:
            self._emit("'" + "".join(self._pieces), self._size)
        elif self._state is _In.LINE or self._state is _In.BLOCK:
            self._close_comment()
        return [s for s in self.statements if s.items]

    # --- the text ------------------------------------------------------------------------------

    def _emit(self, item: Item, chars: int) -> None:
        stmt = self.statements[-1]
        if not stmt.items:
            stmt.start = self._at - chars
        stmt.items.append(item)
        stmt.chars += chars

    def _normal(self, text: str) -> None:
        if text:
            self._emit(text, len(text))
            self._tail = (self._tail + text[-64:])[-64:]

    def _scan(self, text: str, *, final: bool) -> None:
        i, n = 0, len(text)
        while i < n:
            state = self._state
            if state is _In.NORMAL:
                m = _SPECIAL.search(text, i)
                if m is None:
                    self._advance(text, i, n)
                    self._normal(text[i:])
                    return
                j = m.start()
                self._advance(text, i, j)
                self._normal(text[i:j])
                i = self._special(text, j, final)
                if i < 0:
                    self._carry = text[j:]
                    return
            elif state is _In.PLAIN or state is _In.VERBATIM or state is _In.ESCAPED:
                i = self._quoted(text, i, final)
                if i < 0:
                    return
            elif state is _In.DOLLAR:
                tag = self._quote
                k = text.find(tag, i)
                if k < 0:
                    keep = 0 if final else min(len(tag) - 1, n - i)
                    self._value(text, i, n - keep)
                    self._carry = text[n - keep :]
                    return
                self._value(text, i, k)
                self._at += len(tag)
                self._close_literal(tag)
                i = k + len(tag)
            elif state is _In.LINE:
                k = text.find("\n", i)
                end = n if k < 0 else k + 1
                self._value(text, i, end)
                if k < 0:
                    return
                self._close_comment()
                i = end
            else:  # BLOCK
                m = _BLOCK.search(text, i)
                if m is None:
                    keep = 1 if not final and text[-1:] in ("/", "*") else 0
                    self._value(text, i, n - keep)
                    self._carry = text[n - keep :]
                    return
                self._value(text, i, m.end())
                i = m.end()
                self._depth += 1 if m.group() == "/*" else -1
                if self._depth == 0:
                    self._close_comment()

    def _advance(self, text: str, i: int, j: int) -> None:
        self._at += j - i

    def _special(self, text: str, j: int, final: bool) -> int:
        """After the special character at `j` in normal text: where scanning goes on (-1: it
        needs the next piece to decide)."""
        c, n = text[j], len(text)
        nxt = text[j + 1] if j + 1 < n else None
        if c == ";":
            self._at += 1
            self._tail = ";"
            self.statements.append(RawStatement())
            return j + 1
        if c in "-/":
            if nxt is None and not final:
                return -1
            if nxt == ("-" if c == "-" else "*"):
                self._state, self._depth = (_In.LINE, 0) if c == "-" else (_In.BLOCK, 1)
                self._pieces, self._size = [c + nxt], 2
                self._at += 2
                return j + 2
            self._at += 1
            self._normal(c)
            return j + 1
        if c == "$":
            if _ends_in_name(self._tail):
                self._at += 1
                self._normal(c)
                return j + 1
            m = _DOLLAR.match(text, j)
            if m is None or (m.end() == n and not final):
                opening = _DOLLAR_OPEN.match(text, j)
                if opening is not None and opening.end() == n and not final and n - j < 1024:
                    return -1  # `$` and name characters up to the end: a tag may go on
                if m is None:
                    self._at += 1
                    self._normal(c)
                    return j + 1
            if m.group()[-1] != "$":  # $n
                self._at += m.end() - j
                self._normal(m.group())
                return m.end()
            self._state, self._quote = _In.DOLLAR, m.group()
            self._pieces, self._size = [], 0
            self._at += m.end() - j
            return m.end()
        # a quote
        self._at += 1
        tail = self._tail
        if c == '"':
            self._state, self._quote = _In.VERBATIM, '"'
        elif tail[-1:] in ("e", "E") and not _ends_in_name(tail[:-1]):
            self._state, self._quote = _In.ESCAPED, "'"
            self._pieces, self._size = [], 0
            return j + 1
        elif (tail[-1:] in ("b", "B", "x", "X", "n", "N") and not _ends_in_name(tail[:-1])) or (
                tail[-2:] in ("U&", "u&") and not _ends_in_name(tail[:-2])):
            self._state, self._quote = _In.VERBATIM, "'"
        else:
            self._state = _In.PLAIN
            self._pieces, self._size = [], 0
            return j + 1
        self._normal(c)
        return j + 1

    def _quoted(self, text: str, i: int, final: bool) -> int:
        """Inside a quoted token from `i`: where scanning goes on, -1 if the piece ended in it."""
        n, q, state = len(text), self._quote if self._state is not _In.PLAIN else "'", self._state
        while True:
            if state is _In.ESCAPED:
                m = _ESCAPED.search(text, i)
                k = -1 if m is None else m.start()
            else:
                k = text.find(q, i)
            if k < 0:
                self._inside(text, i, n)
                return -1
            if k + 1 >= n and not final:
                self._inside(text, i, k)
                self._carry = text[k:]
                return -1
            if state is _In.ESCAPED and text[k] == "\\":
                self._inside(text, i, k + 2)
                i = k + 2
                continue
            if k + 1 < n and text[k + 1] == q:
                self._inside(text, i, k + 1)  # the value keeps one quote of the two
                self._at += 1
                if state is _In.ESCAPED:  # (its text as written: both)
                    self._pieces.append(q)
                    self._size += 1
                elif state is not _In.PLAIN:
                    self._normal(q)
                i = k + 2
                continue
            self._inside(text, i, k)
            self._at += 1
            if state is _In.PLAIN:
                self._close_literal("'")
            elif state is _In.ESCAPED:
                self._close_escaped()
            else:
                self._state = _In.NORMAL
                self._normal(q)
            return k + 1

    def _inside(self, text: str, i: int, j: int) -> None:
        if self._state is _In.PLAIN or self._state is _In.ESCAPED:
            self._value(text, i, j)
        elif j > i:
            self._at += j - i
            self._normal(text[i:j])

    def _value(self, text: str, i: int, j: int) -> None:
        if j <= i:
            return
        self._at += j - i
        big = self._size > self.literal_chars
        self._size += j - i
        if big and self._state in (_In.LINE, _In.BLOCK):
            return  # a big comment's text is not kept
        self._pieces.append(text[i:j])

    def _close_literal(self, opener: str) -> None:
        pieces, chars = self._pieces, self._size
        self._pieces, self._size, self._state = [], 0, _In.NORMAL
        self._tail = "'"  # no name goes on across a literal
        written = chars + 2 * len(opener)
        if chars > self.literal_chars:
            encoded = tuple(p.encode() for p in pieces)
            self._emit(Literal(opener, BigText(encoded, sum(map(len, encoded)), chars)), written)
        else:
            self._emit(opener + _written(opener, "".join(pieces)) + ("'" if opener.endswith("'") else opener), written)

    def _close_escaped(self) -> None:
        """After an E'…' string's closing quote: a big one becomes a Literal of its value (its
        `E` taken back from the text before it), a small one stays as written. One whose escapes
        PostgreSQL refuses stays as written too, and the first such is the scan's `refused`."""
        pieces, chars = self._pieces, self._size
        self._pieces, self._size, self._state = [], 0, _In.NORMAL
        self._tail = "'"
        big = chars > self.literal_chars
        value = None
        if big or (self.refused is None and any("\\" in p for p in pieces)):
            read = unescaped(pieces)
            if isinstance(read, Refusal):
                if self.refused is None:
                    self.refused = read.error(self._at - 1 - chars)
            elif big:
                value = BigText(read.pieces, sum(map(len, read.pieces)), read.chars)
        if value is None:
            for piece in ("'", *pieces, "'"):
                self._emit(piece, len(piece))
            return
        stmt = self.statements[-1]
        prefix = stmt.items[-1]  # the E, in normal text right before the quote
        assert isinstance(prefix, str) and prefix[-1:] in ("e", "E"), prefix
        if len(prefix) > 1:
            stmt.items[-1] = prefix[:-1]
        else:
            stmt.items.pop()
        stmt.chars -= 1
        self._emit(Literal("E'", value), chars + 3)

    def _close_comment(self) -> None:
        size, pieces = self._size, self._pieces
        self._pieces, self._size, self._state = [], 0, _In.NORMAL
        self._tail = " "
        if size > self.literal_chars:
            self._emit(GAP, size)
        else:
            self._emit("".join(pieces), size)


def split_statements(sql: str) -> list[str]:
    """The statements of a Query message: the text cut at top-level semicolons (not within
    quotes, dollar quotes or comments), each stripped; empty ones and ones of comments only are
    dropped (PostgreSQL answers `;;` with nothing, and an all-empty message with
    EmptyQueryResponse, which the caller decides)."""
    if ";" not in sql:
        piece = sql.strip()
        return [piece] if piece and strip_leading_comments(piece) else []
    out = []
    for statement in scan_pieces([sql], len(sql)):
        piece = "".join(statement.items).strip()  # type: ignore[arg-type]  # no GAP or Literal below the limit
        if strip_leading_comments(piece):
            out.append(piece)
    return out


def scan_pieces(pieces, literal_chars: int) -> list[RawStatement]:
    """The statements of a text given as str pieces (see Scanner)."""
    scanner = Scanner(literal_chars)
    for piece in pieces:
        scanner.feed(piece)
    return scanner.finish()
