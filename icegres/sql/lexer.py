"""PostgreSQL's lexical structure: a statement's text as tokens.

The one tokenizer icegres has, and the definitions of PostgreSQL's lexical classes (LETTER,
NUMBER) that the one statement splitter, `pieces.py`, scans with. Stripping leading comments, a
statement's literal shape (`shape.py`) and finding the token an error names (engine/errors.py)
read the text through it; a property test (tests/unit/test_pieces.py) checks that the splitter
cuts exactly at this tokenizer's top-level semicolons, so both agree on where a string, a quoted
name, a dollar quote or a (nesting) block comment starts and ends. It follows PostgreSQL's scanner
(scan.l) as far as those need: every non-ASCII character is a letter, `E'..'` takes backslash
escapes, `U&'..'` and `U&".."` are strings and names, `$n` is a parameter and `$tag$` opens a
dollar quote unless it is glued to a name.

Pure, and it never raises: a string, quoted name, dollar quote or block comment that does not end
becomes one UNTERMINATED token running to the end of the text.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from enum import Enum

from icegres.sql.escapes import Refusal, unescaped


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


LETTER = "A-Za-z_\x80-\U0010ffff"  # a regex character class: what may start a name
NUMBER = r"(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?"
# Leading whitespace is part of every match (one match a token); the most frequent kinds first,
# each before the ones it must win against: a string prefix and U& before names, a number before
# the `.` operator, comments, parameters and `::` before single-character operators.
_SCAN = re.compile(
    r"\s*(?:"
    rf"(?P<prefix>[eEbBxXnN])(?=')"
    r"|(?P<unicode>[uU]&)(?=['\"])"
    rf"|(?P<name>[{LETTER}][{LETTER}0-9$]*)"
    rf"|(?P<number>{NUMBER})"
    r"|(?P<quote>['\"])"
    r"|(?P<line>--[^\n]*\n?)"
    r"|(?P<block>/\*)"
    r"|(?P<param>\$[0-9]+)"
    rf"|(?P<dollar>\$(?:[{LETTER}][{LETTER}0-9]*)?\$)"
    r"|(?P<cast>::)"
    r"|(?P<op>\S))",
    re.S,
)


def scan(sql: str, *, comments: bool = False) -> Iterator[tuple[Kind, int, int]]:
    """The text's tokens as (kind, start, end), skipping whitespace (and comments, unless
    `comments`): what `tokenize` and the literal shape read, without building a Token each."""
    i, n = 0, len(sql)
    match = _SCAN.match
    name, op, number, param = Kind.NAME, Kind.OP, Kind.NUMBER, Kind.PARAM
    while i < n:
        m = match(sql, i)
        if m is None:
            return  # only whitespace is left
        kind, end = m.lastgroup, m.end()
        i = m.start(kind)
        if kind == "name":
            yield name, i, end
        elif kind == "op" or kind == "cast":
            yield op, i, end
        elif kind == "number":
            yield number, i, end
        elif kind == "quote" or kind == "prefix" or kind == "unicode":
            quote_at = i if kind == "quote" else i + 1 if kind == "prefix" else i + 2
            q = sql[quote_at]
            end = _quoted_end(sql, quote_at, q, backslash=kind == "prefix" and sql[i] in "eE")
            if end < 0:  # (from its prefix, as PostgreSQL reports it; N'…' is NATIONAL and a string)
                yield Kind.UNTERMINATED, quote_at if sql[i] in "nN" else i, n
                return
            yield (Kind.STRING if q == "'" else Kind.QUOTED_NAME), i, end
        elif kind == "param":
            yield param, i, end
        elif kind == "dollar":
            j = sql.find(m.group(kind), end)
            if j < 0:
                yield Kind.UNTERMINATED, i, n
                return
            end = j + end - i
            yield Kind.STRING, i, end
        elif kind == "line":
            if comments:
                yield Kind.COMMENT, i, end
        else:  # block
            end = block_comment_end(sql, i)
            if end < 0:
                yield Kind.UNTERMINATED, i, n
                return
            if comments:
                yield Kind.COMMENT, i, end
        i = end


def tokenize(sql: str, *, comments: bool = False) -> list[Token]:
    """The text's tokens, skipping whitespace (and comments, unless `comments`)."""
    out = []
    for kind, start, end in scan(sql, comments=comments):
        text = sql[start:end]
        if kind is Kind.NAME:
            value = text.lower()
        elif (kind is Kind.STRING or kind is Kind.QUOTED_NAME) and text[0] != "$":
            value = unquoted(text)
        else:
            value = text
        out.append(Token(kind, text, value, start))
    return out


def _quoted_end(sql: str, quote_at: int, q: str, *, backslash: bool) -> int:
    """The offset just past the quoted token whose opening quote is at `quote_at` (a doubled
    quote, and with `backslash` a backslash, escape); -1 if it never closes."""
    j, n = quote_at + 1, len(sql)
    while True:
        k = sql.find(q, j)
        if backslash:
            b = sql.find("\\", j)
            if 0 <= b < n - 1 and (k < 0 or b < k):
                j = b + 2
                continue
        if k < 0:
            return -1
        if sql.startswith(q + q, k):
            j = k + 2
            continue
        return k + 1


def unquoted(text: str) -> str:
    """What a quoted token (not a dollar quote) denotes: its contents with doubled quotes (and,
    in E'', backslash escapes: sql/escapes.py) undone. An E'' string PostgreSQL refuses (which
    `statement.classify` reports) is its contents as written."""
    at = 2 if text[:2] in ("U&", "u&") else 1 if text[0] not in "'\"" else 0
    q = text[at]
    inner = text[at + 1 : -1]
    if not (at == 1 and text[0] in "eE"):
        return inner.replace(q + q, q)
    value = unescaped([inner])
    return inner if isinstance(value, Refusal) else b"".join(value.pieces).decode()


def unterminated_message(token: str) -> str:
    """PostgreSQL's message for an UNTERMINATED token (its text as written, to the end)."""
    first = token[:1].lower()
    if first == "u":  # U&'…' or U&"…"
        first = token[2:3]
    what = {"'": "quoted string", "e": "quoted string", "b": "bit string literal",
            "x": "hexadecimal string literal", '"': "quoted identifier", "$": "dollar-quoted string",
            "/": "/* comment"}[first]
    return f'unterminated {what} at or near "{token}"'


def unterminated_at(sql: str) -> tuple[str, int] | None:
    """PostgreSQL's message for the token of `sql` that never ends, and where it starts; None
    if every one ends."""
    for kind, start, _ in scan(sql):
        if kind is Kind.UNTERMINATED:
            return unterminated_message(sql[start:]), start
    return None


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
