"""A statement's literal shape: its text with the value literals masked.

Clients on the simple protocol inline every value (`... where id = 123456`, then `= 123457`), so
caches keyed on the exact text would miss on every point lookup. A statement's table references
and result column names depend on its tokens, not on the values of its literals, so those caches
key on the text with each value literal replaced by a token no statement can contain (NUL).
Everything else stays verbatim: keywords, identifiers (quoted or not), comments, casts
(`'1'::int` keeps `::int`, which names the column `int4`), `$n` parameters.

sqlglot reads a string as a name where PostgreSQL would refuse it (`from 'x'`, `join 'x'`,
`from t, 'x'`, `with 'x' as`, `select 1 as 'x'`, `select 1 as 5`), so a literal is masked only
where it is surely a value: right after an operator or a value keyword (`= 5`, `where 'a'`,
`limit 5`, `date '...'`), or after `(` / `,` inside a select list, a WHERE-like clause or the
arguments of a call or IN / VALUES list, never inside a FROM-like clause. Kept verbatim too:
- `true` / `false`: `select 1 as true` names its column "true", `select true` is named `bool`;
- strings with a backslash or a dollar: sqlglot's tokenizer looks for dollar quotes across
  `$1,$2`; U&'' strings; dollar-quoted strings;
- numbers glued to a word, dot or quote (`1abc`, `x.5`, `1.5.3`).
Anything the scanner cannot close (an unterminated quote, dollar quote or comment) keys on the
exact text, and so does a text longer than SHAPE_TEXT_MAX (a bulk INSERT gains little and costs a
long scan).
"""

from __future__ import annotations

import functools
import re

from icegres.sql.lexer import Kind, scan

SHAPE_TEXT_MAX = 16384
_NUMBER_TOKEN = "\x00n"
_STRING_TOKEN = "\x00s"
_VERBATIM_TAG = "\x00!"  # prefixes a text that itself contains NUL: never equal to a mask
_GLUED = re.compile(r"[A-Za-z_\x80-\U0010ffff0-9$.'\"]")
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


@functools.lru_cache(maxsize=256)
def literal_shape(sql: str) -> str:
    """`sql` with its value literals masked: two statements with the same shape differ only in
    literal values, so they have the same table references and result column names."""
    if "\x00" in sql:
        return _VERBATIM_TAG + sql
    if len(sql) > SHAPE_TEXT_MAX:
        return sql
    spans = _mask_spans(sql)
    if spans is None:
        return sql
    out: list[str] = []
    pos = 0
    for start, end, token in spans:
        out.append(sql[pos:start])
        out.append(token)
        pos = end
    out.append(sql[pos:])
    return "".join(out)


def masked_literals(sql: str) -> list[str] | None:
    """The literals `literal_shape` masks, as written, in order (None where it masks none because
    it keys on the exact text): with the shape they give `sql` back (`fill_shape`)."""
    if "\x00" in sql or len(sql) > SHAPE_TEXT_MAX:
        return None
    spans = _mask_spans(sql)
    return None if spans is None else [sql[start:end] for start, end, _ in spans]


def fill_shape(shape: str, literals: list[str]) -> str | None:
    """The text of `shape` with its masks replaced by `literals` in order (None if they do not
    match one to one)."""
    if shape.startswith(_VERBATIM_TAG):
        return None
    parts = _MASKS.split(shape)
    if len(parts) != len(literals) + 1:
        return None
    out = [parts[0]]
    for literal, part in zip(literals, parts[1:], strict=True):
        out.append(literal)
        out.append(part)
    return "".join(out)


_MASKS = re.compile("\x00[ns]")


def _mask_spans(sql: str) -> list[tuple[int, int, str]] | None:
    """Where `literal_shape` masks a literal: (start, end, mask); None for a text it cannot scan."""
    spans: list[tuple[int, int, str]] = []
    prev = ""  # the last significant token: a lower-cased word, a punctuation char, or "" (a literal)
    values = [False]  # per open parenthesis: whether `(` / `,` there are followed by values
    for kind, start, end in scan(sql):
        if kind is Kind.OP:
            text = sql[start:end]
            if text == "(":
                # a call, IN or VALUES list: not `from (`, `, (` or `as (`
                values.append(
                    prev in _OPERATOR_CHARS or (prev[:1].isalpha() and prev not in _NAME_WORDS and prev != "as")
                )
            elif text == ")" and len(values) > 1:
                values.pop()
            prev = text[-1]
        elif kind is Kind.NAME:
            prev = sql[start:end].lower()
            if prev in _CLAUSE_WORDS:
                values[-1] = True
            elif prev in _NAME_WORDS:
                values[-1] = False
        elif kind is Kind.NUMBER:
            if _masked(prev, values) and not _glued(sql, start, end):
                spans.append((start, end, _NUMBER_TOKEN))
            prev = ""
        elif kind is Kind.STRING:
            text = sql[start:end]
            quote = text.find("'")
            plain = quote >= 0 and text[:quote].lower() in ("", "e", "b", "x", "n")
            if plain and _masked(prev, values) and "\\" not in text and "$" not in text:
                spans.append((start + quote, end, _STRING_TOKEN))
            prev = ""
        elif kind is Kind.QUOTED_NAME:
            prev = '"'
        elif kind is Kind.PARAM:
            prev = "$"
        else:  # UNTERMINATED
            return None
    return spans


def _masked(prev: str, values: list[bool]) -> bool:
    return prev in _OPERATOR_CHARS or prev in _VALUE_WORDS or (prev in ("(", ",") and values[-1])


def _glued(sql: str, start: int, end: int) -> bool:
    return bool((start > 0 and _GLUED.match(sql, start - 1)) or _GLUED.match(sql, end))
