"""One expression shape over the rows of a big VALUES column: `'name ' || 1`, `'name ' || 2`, ….

Scripts that write a big INSERT often compute an item per row (`'name ' || i`, `md5('row 7')`,
`date '2024-01-01' + 3`, `round(2.55, 1)`): each row's expression differs from the others in its
constants only. PostgreSQL reads each row apart; icegres parsed the whole list into one tree of
every row (50,000 rows: ~2 million objects, 32 s, and full collections of the garbage collector
over them that held another session's `select 1` for up to 1.8 s). `template` reads the rows with
the lexer and answers the shape once: row 0's text, and for each constant that differs between
rows its position in that text and its value in every row — a column for the engine to evaluate
the expression over (`engine/dml/constant_rows.py`).

Rows are one shape when their tokens are the same but for the constants (whitespace and comments
aside, which the lexer skips). A constant that differs becomes a slot if the engine reads it the
same from a column as from the literal: an unquoted number (integers that fit a bigint, or numbers
with a point or an exponent: DataFusion's int64 and float64, never a mix of the two in one slot)
or a plain quoted string not glued to another. Anything else answers None: the parse reads the
rows. Whether the expression takes a column where the literal stood (not a typed literal's text,
a cast's operand, a LIKE pattern) is the engine's to tell, from the parsed template.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from icegres.sql.lexer import Kind, scan

__all__ = ["Slot", "Template", "template"]

_INTEGER = re.compile(r"[0-9]+")
_INT64_MAX = (1 << 63) - 1


@dataclass(frozen=True, eq=False)
class Slot:
    """A constant that differs between rows: where it starts in the template's text, and its
    value in each row (all ints, all floats or all strs)."""

    offset: int
    values: list[int] | list[float] | list[str]


@dataclass(frozen=True, eq=False)
class Template:
    text: str  # row 0's expression, as written
    slots: tuple[Slot, ...]


def template(items: Sequence[str]) -> Template | None:
    """The rows' one shape with a slot per differing constant, or None (module doc)."""
    if len(items) < 2:
        return None
    shape, constants = _read(items[0])
    if shape is None:
        return None
    columns: list[list[str]] = [[text] for _, text in constants]
    for item in items[1:]:
        other, theirs = _read(item)
        if other != shape:
            return None
        for column, (_, text) in zip(columns, theirs, strict=True):
            column.append(text)
    slots = []
    for (offset, first), column in zip(constants, columns, strict=True):
        if column.count(first) == len(column):
            continue  # (the same in every row: it stays in the text)
        values = _values(first, column)
        if values is None:
            return None
        slots.append(Slot(offset, values))
    return Template(items[0], tuple(slots)) if slots else None


def _read(item: str) -> tuple[str | None, list[tuple[int, str]]]:
    """The item's shape (its tokens, each constant as its kind only) and its constants (where
    each starts, its text); a None shape where two strings meet (PostgreSQL glues strings across
    a newline) or a token is unterminated."""
    parts: list[str] = []
    constants: list[tuple[int, str]] = []
    last = None
    for kind, start, end in scan(item):
        if kind is Kind.NUMBER or kind is Kind.STRING:
            if kind is Kind.STRING and last is Kind.STRING:
                return None, []
            parts.append("\x00n" if kind is Kind.NUMBER else "\x00s")
            constants.append((start, item[start:end]))
        elif kind is Kind.UNTERMINATED or kind is Kind.PARAM:
            return None, []
        else:
            parts.append(item[start:end] if kind is not Kind.NAME else item[start:end].lower())
        parts.append("\x01")
        last = kind
    return "".join(parts), constants


def _values(first: str, texts: list[str]) -> list[int] | list[float] | list[str] | None:
    if first[0] == "'":
        if any(t[0] != "'" for t in texts):
            return None  # (E'…', $$…$$, U&'…' in some row: the parse's)
        return [t[1:-1].replace("''", "'") for t in texts]
    if first[0] in "$EeBbXxNnUu":
        return None
    if all(_INTEGER.fullmatch(t) for t in texts):
        integers = [int(t) for t in texts]
        return integers if max(integers) <= _INT64_MAX else None
    if any(_INTEGER.fullmatch(t) for t in texts):
        return None  # (integers beside other numbers: PostgreSQL types each row's apart)
    return [float(t) for t in texts]

