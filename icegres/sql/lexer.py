"""PostgreSQL's lexical structure: a statement's text as tokens.

The one scanner icegres has. Splitting a Query message into statements, stripping leading
comments, a statement's literal shape (`shape.py`) and finding the token an error names
(engine/errors.py) all read the text through it, so they agree on where a string, a quoted name,
a dollar quote or a (nesting) block comment starts and ends. It follows PostgreSQL's scanner
(scan.l) as far as those need: every non-ASCII character is a letter, `E'..'` takes backslash
escapes, `U&'..'` and `U&".."` are strings and names, `$n` is a parameter and `$tag$` opens a
dollar quote unless it is glued to a name.

Pure, and it never raises: a string, quoted name, dollar quote or block comment that does not end
becomes one UNTERMINATED token running to the end of the text.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum


class Kind(Enum):
    NAME = "name"  # unquoted identifier or keyword; value is case-folded
    QUOTED_NAME = "quoted_name"  # "..."; value is the name with "" undoubled
    STRING = "string"  # '...', E'...', $tag$...$tag$, B'...', X'...', N'...', U&'...'
    NUMBER = "number"
    PARAM = "param"  # $1
    OP = "op"  # operators and punctuation, one token per character except `::`
    COMMENT = "comment"  # -- to the end of the line, or /* ... */ (only with comments=True)
    UNTERMINATED = "unterminated"  # a string, quoted name or comment running to end of input


@dataclass(frozen=True, slots=True)
class Token:
    kind: Kind
    text: str  # as written
    value: str  # the name it denotes (NAME, QUOTED_NAME), a quoted string's contents; else the text
    start: int  # 0-based character offset in the text

    @property
    def end(self) -> int:
        return self.start + len(self.text)


_LETTER = "A-Za-z_\x80-\U0010ffff"
_SCAN = re.compile(
    r"(?P<space>\s+)"
    r"|(?P<line>--[^\n]*\n?)"
    r"|(?P<block>/\*)"
    rf"|(?P<prefix>[eEbBxXnN])(?=')"
    r"|(?P<unicode>[uU]&)(?=['\"])"
    r"|(?P<quote>['\"])"
    r"|(?P<param>\$\d+)"
    rf"|(?P<dollar>\$(?:[{_LETTER}][{_LETTER}0-9]*)?\$)"
    r"|(?P<number>(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?)"
    rf"|(?P<name>[{_LETTER}][{_LETTER}0-9$]*)"
    r"|(?P<cast>::)"
    r"|(?P<op>.)",
    re.S,
)


def tokenize(sql: str, *, comments: bool = False) -> list[Token]:
    """The text's tokens, skipping whitespace (and comments, unless `comments`)."""
    out: list[Token] = []
    append = out.append
    i, n = 0, len(sql)
    scan = _SCAN.match
    while i < n:
        m = scan(sql, i)
        assert m is not None  # `op` matches any character
        kind = m.lastgroup
        if kind == "space":
            i = m.end()
        elif kind == "name":
            word = m.group()
            append(Token(Kind.NAME, word, word.lower(), i))
            i = m.end()
        elif kind == "op":
            c = m.group()
            append(Token(Kind.OP, c, c, i))
            i += 1
        elif kind == "number":
            append(Token(Kind.NUMBER, m.group(), m.group(), i))
            i = m.end()
        elif kind == "quote":
            q = m.group()
            i = _quoted(sql, i, i, q, Kind.STRING if q == "'" else Kind.QUOTED_NAME, out, backslash=False)
        elif kind == "prefix":
            i = _quoted(sql, i, i + 1, "'", Kind.STRING, out, backslash=m.group() in "eE")
        elif kind == "unicode":
            q = sql[i + 2]
            i = _quoted(sql, i, i + 2, q, Kind.STRING if q == "'" else Kind.QUOTED_NAME, out, backslash=False)
        elif kind == "cast":
            append(Token(Kind.OP, "::", "::", i))
            i += 2
        elif kind == "param":
            append(Token(Kind.PARAM, m.group(), m.group(), i))
            i = m.end()
        elif kind == "dollar":
            tag = m.group()
            j = sql.find(tag, m.end())
            if j < 0:
                append(Token(Kind.UNTERMINATED, sql[i:], sql[i:], i))
                break
            end = j + len(tag)
            append(Token(Kind.STRING, sql[i:end], sql[i:end], i))
            i = end
        elif kind == "line":
            if comments:
                append(Token(Kind.COMMENT, m.group(), m.group(), i))
            i = m.end()
        else:  # block
            j = block_comment_end(sql, i)
            if j < 0:
                append(Token(Kind.UNTERMINATED, sql[i:], sql[i:], i))
                break
            if comments:
                append(Token(Kind.COMMENT, sql[i:j], sql[i:j], i))
            i = j
    return out


def _quoted(sql: str, start: int, quote_at: int, q: str, kind: Kind, out: list[Token], *, backslash: bool) -> int:
    """Scan a quoted token whose opening quote is at `quote_at` (`start` is where its prefix
    begins); append it; return the offset after it."""
    j, n = quote_at + 1, len(sql)
    buf: list[str] = []
    while True:
        k = sql.find(q, j)
        if backslash:
            b = sql.find("\\", j)
            if 0 <= b < n - 1 and (k < 0 or b < k):
                buf.append(sql[j:b])
                buf.append(sql[b + 1])
                j = b + 2
                continue
        if k < 0:
            out.append(Token(Kind.UNTERMINATED, sql[quote_at:], sql[quote_at:], quote_at))
            return n
        buf.append(sql[j:k])
        if sql.startswith(q + q, k):
            buf.append(q)
            j = k + 2
            continue
        out.append(Token(kind, sql[start : k + 1], "".join(buf), start))
        return k + 1


def block_comment_end(sql: str, start: int) -> int:
    """Offset just past the block comment opening at `start` (they nest, as in PostgreSQL), or -1
    if it never closes."""
    depth, i = 0, start
    while True:
        opening, closing = sql.find("/*", i), sql.find("*/", i)
        if closing < 0:
            return -1
        if 0 <= opening < closing:
            depth, i = depth + 1, opening + 2
        else:
            depth, i = depth - 1, closing + 2
            if depth == 0:
                return i


def split_statements(sql: str) -> list[str]:
    """The statements of a Query message: the text cut at top-level semicolons (not within
    quotes, dollar quotes or comments), each stripped; empty ones and ones of comments only are
    dropped (PostgreSQL answers `;;` with nothing, and an all-empty message with
    EmptyQueryResponse, which the caller decides)."""
    if ";" not in sql:
        piece = sql.strip()
        return [piece] if piece and strip_leading_comments(piece) else []
    out: list[str] = []
    start = 0
    for token in tokenize(sql):
        if token.kind is Kind.OP and token.text == ";":
            out.append(sql[start : token.start])
            start = token.end
    out.append(sql[start:])
    return [piece.strip() for piece in out if strip_leading_comments(piece)]


def strip_leading_comments(sql: str) -> str:
    """`sql` from its first token on (leading whitespace and comments dropped); "" if none."""
    i, n = 0, len(sql)
    while i < n:
        m = _LEADING.match(sql, i)
        if m is None:
            return sql[i:]
        if m.lastgroup == "block":
            j = block_comment_end(sql, i)
            if j < 0:
                return sql[i:]  # an unterminated comment is the statement's (syntax) error
            i = j
        else:
            i = m.end()
    return ""


_LEADING = re.compile(r"(?P<space>\s+)|(?P<line>--[^\n]*\n?)|(?P<block>/\*)")


def split_quoted(sql: str) -> list[tuple[str, bool]]:
    """`sql` cut into (text, inside_quotes) pieces: string literals and quoted names are the
    quoted pieces, everything between them (comments too) the others."""
    out: list[tuple[str, bool]] = []
    pos = 0
    for token in tokenize(sql, comments=True):
        if token.kind in (Kind.STRING, Kind.QUOTED_NAME, Kind.UNTERMINATED):
            if token.start > pos:
                out.append((sql[pos : token.start], False))
            out.append((token.text, True))
            pos = token.end
    if pos < len(sql):
        out.append((sql[pos:], False))
    return out
