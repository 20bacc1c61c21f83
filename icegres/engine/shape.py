"""A statement's literal shape: its text with the value literals masked.

Clients on the simple protocol inline every value (`... where id = 123456`, then `= 123457`), so
caches keyed on the exact text would miss on every point lookup.
"""

from __future__ import annotations

import functools
import re

# Clients on the simple protocol inline every value (`... where id = 123456`, then `= 123457`), so
# caches keyed on the exact text miss on every point lookup. A statement's table references and
# result column names depend on its tokens, not on the values of its literals, so those caches key
# on the text with each value literal replaced by a token no statement can contain (NUL).
# Everything else stays verbatim: keywords, identifiers (quoted or not), comments, casts
# (`'1'::int` keeps `::int`, which names the column `int4`), `$n` parameters.
#
# sqlglot reads a string as a name where PostgreSQL would refuse it (`from 'x'`, `join 'x'`,
# `from t, 'x'`, `with 'x' as`, `select 1 as 'x'`, `select 1 as 5`), so a literal is masked only
# where it is surely a value: right after an operator or a value keyword (`= 5`, `where 'a'`,
# `limit 5`, `date '...'`), or after `(` / `,` inside a select list, a WHERE-like clause or the
# arguments of a call or IN / VALUES list, never inside a FROM-like clause. Kept verbatim too:
# - `true` / `false`: `select 1 as true` names its column "true", `select true` is named `bool`;
# - strings with a backslash or a dollar: E'' escapes decide where the string ends (`E'a\\'b'`),
#   and sqlglot's tokenizer looks for dollar quotes across `$1,$2`; U&'' strings;
# - dollar-quoted strings, and numbers glued to a word, dot or quote (`1abc`, `x.5`, `1.5.3`).
# Anything the scan cannot close (an unterminated quote or comment) keys on the exact text, and
# so does a text longer than _SHAPE_TEXT_MAX (a bulk INSERT gains little and costs a long scan).
# The route cache stays on exact text: its rewrite output embeds the literals.

_SHAPE_TEXT_MAX = 16384
_NUMBER_TOKEN = "\x00n"
_STRING_TOKEN = "\x00s"
_VERBATIM_TAG = "\x00!"  # prefixes a text that itself contains NUL: never equal to a mask
_IDENT_START = "A-Za-z_\x80-\U0010ffff"
_IDENT_CHAR = _IDENT_START + "0-9$"
_SHAPE_TOKEN = re.compile(
    rf"(?P<word>[{_IDENT_START}][{_IDENT_CHAR}]*)"
    r"|(?P<number>(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?)"
    r"|(?P<string>')"
    r'|(?P<ident>"[^"]*(?:""[^"]*)*")'
    r'|(?P<unclosed>")'
    r"|(?P<line_comment>--[^\n]*)"
    r"|(?P<block_comment>/\*)"
    r"|(?P<dollar>\$(?:\d+|(?:[A-Za-z_\x80-\U0010ffff][A-Za-z0-9_\x80-\U0010ffff]*)?\$))"
)
_PLAIN_STRING = re.compile(r"'[^']*(?:''[^']*)*'")
_ESCAPE_STRING = re.compile(r"'(?:[^'\\]|''|\\.)*'", re.S)
_GLUED = re.compile(rf"[{_IDENT_CHAR}.'\"]")
_OPERATOR_CHARS = frozenset("=<>!+-*/%^|&~@#?")
# Reserved words that start a value context: a literal right after one, or after `(` / `,` in
# the clause it starts, is a value.
_CLAUSE_WORDS = frozenset({
    "select", "where", "and", "or", "not", "then", "else", "when", "case", "limit", "offset",
    "having", "on", "returning", "group", "order",
})
# A literal right after one of these is a value too (typed literals among them); they may also
# name a table or column, so they do not start a value context.
_VALUE_WORDS = _CLAUSE_WORDS | {
    "like", "ilike", "between", "first", "next", "escape", "by", "set", "date", "time",
    "timestamp", "timestamptz", "interval", "uuid", "numeric", "decimal", "json", "jsonb", "text",
    "varchar", "inet", "bytea", "zone",
}
# After these, until the next clause word, a literal may be read as a table or CTE name.
_NAME_WORDS = frozenset({"from", "join", "into", "update", "with", "table", "only", "lateral", "using"})


@functools.lru_cache(maxsize=256)  # one statement asks 3-4 times (refs, names, pruning, kinds)
def literal_shape(sql: str) -> str:
    """`sql` with its value literals masked: two statements with the same shape differ only in
    literal values, so they have the same table references and result column names."""
    if "\x00" in sql:
        return _VERBATIM_TAG + sql
    if len(sql) > _SHAPE_TEXT_MAX:
        return sql
    out: list[str] = []
    pos = 0
    prev = ""  # the last significant token: a lower-cased word, a punctuation char, or "" (a literal)
    values = [False]  # per open parenthesis: whether `(` / `,` there are followed by values
    while (m := _SHAPE_TOKEN.search(sql, pos)) is not None:
        start, end, kind = m.start(), m.end(), m.lastgroup
        gap = sql[pos:start]
        for c in gap:
            if c.isspace():
                continue
            if c == "(":
                # a call, IN or VALUES list: not `from (`, `, (` or `as (`
                values.append(
                    prev in _OPERATOR_CHARS or (prev[:1].isalpha() and prev not in _NAME_WORDS and prev != "as")
                )
            elif c == ")" and len(values) > 1:
                values.pop()
            prev = c
        out.append(gap)
        text = m.group()
        if kind in ("number", "string"):
            masked = prev in _OPERATOR_CHARS or prev in _VALUE_WORDS or (prev in ("(", ",") and values[-1])
            if kind == "number":
                glued = (start > 0 and _GLUED.match(sql, start - 1)) or _GLUED.match(sql, end)
                if masked and not glued:
                    text = _NUMBER_TOKEN
            else:
                escapes = start > 0 and sql[start - 1] in "eE" and (start < 2 or not _GLUED.match(sql, start - 2))
                s = (_ESCAPE_STRING if escapes else _PLAIN_STRING).match(sql, start)
                if s is None:
                    return sql  # unterminated
                end, text = s.end(), s.group()
                unicode = sql[start - 2 : start] in ("u&", "U&")
                if masked and not unicode and "\\" not in text and "$" not in text:
                    text = _STRING_TOKEN
            prev = ""
        elif kind == "word":
            word = text.lower()
            if not (word in ("e", "b", "x", "n") and sql.startswith("'", end)):  # a string's prefix
                prev = word
                if word in _CLAUSE_WORDS:
                    values[-1] = True
                elif word in _NAME_WORDS:
                    values[-1] = False
        elif kind == "ident":
            prev = '"'
        elif kind == "unclosed":
            return sql
        elif kind == "block_comment":
            end = _block_comment_end(sql, start)
            if end < 0:
                return sql
            text = sql[start:end]
        elif kind == "dollar":
            prev = "$"
            if not text[1:2].isdigit():
                if start > 0 and _GLUED.match(sql, start - 1):
                    return sql  # `a$$`: not a dollar quote, and not worth telling apart
                close = sql.find(text, end)
                if close < 0:
                    return sql
                end = close + len(text)
                text, prev = sql[start:end], ""
        out.append(text)
        pos = end
    out.append(sql[pos:])
    return "".join(out)


def _block_comment_end(sql: str, start: int) -> int:
    """End of the (nesting, as in PostgreSQL) block comment opening at `start`; -1 if unclosed."""
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
