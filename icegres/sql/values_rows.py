"""An `INSERT … VALUES` of constants, read without a tree (over parse.VALUES_TEXT characters).

An INSERT of 100,000 rows of four constants is 4 MB of text. sqlglot made ~1.5 million objects
of it in ~5 s, and the engine's walks of that tree (table references, views, time travel, pins)
took ~2 s more, all of it holding the GIL in short turns and feeding the garbage collector full
collections of 0.5 s: another session's `select 1` waited up to 0.6 s. What the statement needs
of its VALUES is, per column, its constants: the lexer reads them in one pass, and the statement's
tree is its head (`INSERT INTO t (a, b) VALUES`) with the rows as one node (`ConstantValues`)
that no walk descends into.

`read` takes `INSERT INTO name [(column, …)] VALUES (…), (…) [ON CONFLICT …] [RETURNING …] [;]`
whose every value is a number (with a sign), a quoted or dollar-quoted string without prefix,
NULL, TRUE, FALSE, `$n` or DEFAULT, each constant perhaps cast to a type (`::date`, `::INTEGER`,
`::double precision`, `::varchar(3)`, `::pg_catalog.int4`), all rows of one width; any other
item is an `Expression`, its text as written, unless it holds a subquery or a `$n`. What follows
the rows (`tail`: ON CONFLICT, RETURNING) is short and the parser's, with the head. A subquery,
a parameter in an expression, a cast of a cast, strings PostgreSQL would glue across a newline
or an alias make the statement the parser's (None). The engine takes the constants as
its columns' values (`engine/insert_shape.py`) or, where a column's type must read them
(a cast, a rounding, a CHECK to evaluate), as one typed Arrow column per VALUES column
(`engine/dml/constant_rows.py`); only where neither can is the whole text parsed. ORMs' bulk
inserts end so: Django's `bulk_create` with RETURNING, and `ON CONFLICT DO NOTHING` for its
`ignore_conflicts`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from icegres.sql.lexer import Kind, scan

# The constants are of types the cyclic garbage collector does not track (str, bytes, int, bool,
# None): a big list holds one per item for as long as its statement runs, and tracked ones (a
# str subclass is) reached the oldest generation while the list was read, so full collections,
# each one C call holding the GIL over all of them, recurred during the read (0.5-1 s at 300,000
# rows). So a number is its text as bytes and a parameter its number as an int. (An Expression
# or a Cast is still one tracked object per item.)
Number = bytes  # an unquoted number as written (its sign included), ASCII: its column's type reads it
Placeholder = int  # a `$n` parameter: n (never a bool: test with `is_placeholder`)


def is_placeholder(value: object) -> bool:
    return type(value) is int


class _Default:
    """`DEFAULT` in a VALUES row: the column's default."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "DEFAULT"


DEFAULT = _Default()

_WORDS = {"null": None, "true": True, "false": False, "default": DEFAULT}


@dataclass(frozen=True)
class Cast:
    """A constant cast to a type (`'2024-01-01'::date`, `$1::INTEGER`, `'1'::double precision`):
    its column takes it as the constant where the type is the column's own (engine/insert_shape.py)."""

    value: Any  # None, a bool, a Number (bytes), a Placeholder (int) or a str
    type: str  # as written: one or more words, perhaps a modifier (`varchar(3)`) or a schema


class Expression(str):
    """Any other item, as written (`now()`, `'a' || 'b'`, `1 + 1`): the parser reads it where
    every row has the same one (engine/dml/constant_rows.py). Never a subquery or a `$n`: those
    make the list the parser's (a subquery names relations the statement's walks must see)."""

    __slots__ = ()


# Words that open a query: an item holding one is a subquery (`(SELECT …)`, `(VALUES …)`,
# `(TABLE t)`, `(WITH …)`). (FROM alone names no relation there: `extract(year FROM x)`.)
_QUERY_WORDS = frozenset({"select", "values", "table", "with"})


@dataclass(frozen=True, eq=False)
class ConstantRows:
    """A VALUES list as columns: per position, per row, None (NULL), a bool, a Number (bytes), a
    Placeholder (int), a str (a string's contents), DEFAULT, an Expression or a Cast of one of the
    constants. `sql` is the whole statement's text, for the
    parser when the engine cannot take the constants as they are."""

    sql: str
    head: str  # `INSERT INTO name [(columns)]`, as written
    columns: tuple[list[Any], ...]
    tail: str = ""  # what follows the rows (ON CONFLICT …, RETURNING …), as written

    @property
    def width(self) -> int:
        return len(self.columns)

    @property
    def count(self) -> int:
        return len(self.columns[0]) if self.columns else 0

    def __deepcopy__(self, memo: dict[int, Any]) -> ConstantRows:
        return self  # (immutable: a copied tree shares it)


def _expression(sql: str, tokens: Any, first: tuple[Kind, int, int]) -> tuple[int, tuple[Kind, int, int]] | None:
    """From `first` on, the rest of an item that is not a constant: (where it ends, the `,` or
    `)` that ends it), or None where it holds a subquery, a `$n` or an unterminated token."""
    if first[0] is Kind.OP and sql[first[1]] in ",)":
        return None  # (an empty item: the parser's 42601)
    depth = 0
    token: tuple[Kind, int, int] | None = first
    last = first[1]
    while token is not None:
        kind, start, end = token
        if kind is Kind.OP:
            c = sql[start]
            if c in "([":
                depth += 1
            elif c in ")]":
                if not depth:
                    return (last, token) if c == ")" else None
                depth -= 1
            elif c == "," and not depth:
                return last, token
            elif c == ";":
                return None
        elif kind is Kind.NAME:
            if sql[start:end].lower() in _QUERY_WORDS:
                return None
        elif kind is Kind.PARAM or kind is Kind.UNTERMINATED:
            return None
        last = end
        token = next(tokens, None)
    return None


def _type_name(sql: str, tokens: Any) -> tuple[int, tuple[Kind, int, int]] | None:
    """After `::`, the type name's tokens: words (a schema's dot between them), a modifier in
    parentheses, `[]`. (Where it ends, the `,` or `)` that follows it), or None for anything
    else there (`'a'::text || 'b'`)."""
    depth, words = 0, 0
    for kind, start, end in tokens:
        c = sql[start]
        if kind is Kind.NAME or kind is Kind.QUOTED_NAME:
            words += 1
        elif not words:
            return None  # (a type's name comes first)
        elif kind is Kind.OP and c == "(":
            depth += 1
        elif kind is Kind.OP and c == ")" and depth:
            depth -= 1
        elif kind is Kind.OP and (c in ".[]" or (c == "," and depth)) or kind is Kind.NUMBER and depth:
            pass
        elif kind is Kind.OP and c in ",)":
            return start, (kind, start, end)
        else:
            return None
    return None


def read(sql: str) -> ConstantRows | None:
    """The statement's VALUES as columns, if it is an INSERT of constants only (module doc)."""
    tokens = scan(sql)
    name, op, number, string, param = Kind.NAME, Kind.OP, Kind.NUMBER, Kind.STRING, Kind.PARAM

    def word(expected: str) -> bool:
        kind, start, end = next(tokens, (None, 0, 0))
        return kind is name and sql[start:end].lower() == expected

    if not (word("insert") and word("into")):
        return None
    # The head: a name of up to three parts, an optional column list, VALUES.
    head_end = 0
    expect_name, depth = True, 0
    for kind, start, end in tokens:
        text = sql[start:end]
        if kind is name and text.lower() == "values" and not expect_name and depth != 1:
            head_end = start
            break
        if expect_name:
            if kind is not name and kind is not Kind.QUOTED_NAME:
                return None
            expect_name = False
        elif kind is op and text == "." and depth == 0:
            expect_name = True
        elif kind is op and text == "(" and depth == 0:
            depth, expect_name = 1, True
        elif kind is op and text == "," and depth == 1:
            expect_name = True
        elif kind is op and text == ")" and depth == 1:
            depth = 2  # (then only VALUES)
        else:
            return None
    if not head_end:
        return None
    columns: list[list[Any]] = []
    width = -1
    row: list[Any] = []
    sign = ""
    # States: 0 before a row's "(", 1 before a value, 2 after a value, 3 after a row (`,` or end).
    state = 0
    item = 0  # where the current item starts
    for kind, start, end in tokens:
        if state == 1:
            if not sign:
                item = start
            state = 2
            if kind is number:
                row.append((sign + sql[start:end]).encode())
                sign = ""
                continue
            if sign:
                return None  # (a sign before anything but a number)
            if kind is string and sql[start] == "'":
                row.append(sql[start + 1 : end - 1].replace("''", "'"))
                continue
            if kind is string and sql[start] == "$":
                tag = sql.index("$", start + 1) + 1 - start
                row.append(sql[start + tag : end - tag])
                continue
            if kind is name and (key := sql[start:end].lower()) in _WORDS:
                row.append(_WORDS[key])
                continue
            if kind is param:
                row.append(int(sql[start + 1 : end]))
                continue
            if kind is op and end - start == 1 and sql[start] in "+-":
                sign, state = sql[start], 1
                continue
            captured = _expression(sql, tokens, (kind, start, end))
            if captured is None:
                return None
            row.append(Expression(sql[item:captured[0]]))
            kind, start, end = captured[1]  # (the `,` or `)` after it, read as after any value)
        if state == 2:
            if kind is not op and kind is not name:
                return None  # (a string after a value: glued across a newline, or an error)
            c = sql[start]
            if kind is name or (c not in ",)" and sql[start:end] != "::"):
                # An operator or a word after a value (`1 + 1`, `'a' || 'b'`, `x IS NULL`): an expression.
                captured = None if is_placeholder(row[-1]) else _expression(sql, tokens, (kind, start, end))
                if captured is None:
                    return None
                row[-1] = Expression(sql[item:captured[0]])
                kind, start, end = captured[1]
                c = sql[start]
            if sql[start:end] == "::":
                value = row[-1]
                if value is DEFAULT or isinstance(value, Cast | Expression) or (isinstance(value, bytes) and value[:1] in b"+-"):
                    return None  # (`-1::int` is the negation of a cast: 22003 for the smallest integer)
                typed = _type_name(sql, tokens)
                if typed is None:
                    return None
                row[-1] = Cast(value, sql[start + 2 : typed[0]].strip())
                kind, start, end = typed[1]
                c = sql[start]
            if c == ",":
                state = 1
            elif c == ")":
                if width < 0:
                    width = len(row)
                    columns = [[] for _ in range(width)]
                elif len(row) != width:
                    return None  # (PostgreSQL's "VALUES lists must all be the same length")
                for column, value in zip(columns, row, strict=True):
                    column.append(value)
                row = []
                state = 3
            else:
                return None
        elif state == 0:
            if not (kind is op and sql[start] == "("):
                return None
            state = 1
        else:
            if kind is op and sql[start] == ",":
                state = 0
            elif kind is op and sql[start] == ";":
                return ConstantRows(sql, sql[:head_end].rstrip(), tuple(columns)) if next(tokens, None) is None else None
            elif kind is name and sql[start:end].lower() in ("on", "returning"):
                tail = sql[start:].rstrip().rstrip(";")  # (the parser's, with the head)
                return ConstantRows(sql, sql[:head_end].rstrip(), tuple(columns), tail)
            else:
                return None
    if state != 3:
        return None
    return ConstantRows(sql, sql[:head_end].rstrip(), tuple(columns))
