"""Trees written out as SQL text for DataFusion (`to_sql`), with PostgreSQL's typed literals
spelled so that DataFusion reads the same values."""

from __future__ import annotations

import re
import uuid
from decimal import Decimal

from sqlglot import exp

from icegres.engine.rewrite.tree import _call, _type_name


def to_sql(tree: exp.Expression) -> str:
    """SQL text for DataFusion: function names in lower case, which its table functions need
    (sqlglot upper-cases them by default, and DataFusion finds no table function GENERATE_SERIES),
    and PostgreSQL's typed literals spelled so that DataFusion reads the same values
    (`typed_literals`). `tree` is left untouched."""
    return typed_literals(tree).sql(dialect="postgres", normalize_functions="lower")


# --- typed literals -----------------------------------------------------------------------------
#
# Every statement that reaches DataFusion through sqlglot is written by `to_sql`: the rewrite path
# and every INSERT / UPDATE (dml.py renders its parts with it). So the literal fixes live there.


def typed_literals(tree: exp.Expression) -> exp.Expression:
    """A copy of `tree` with the literals DataFusion would misread spelled exactly (else `tree`).

    - `'\\x00ff'::bytea` and `'a\\000b'::bytea`: byteain's hex and escape formats (DataFusion
      would take the text's own bytes), as a binary literal; bad input fails with byteain's
      SQLSTATE (22023 for bad hex, 22P02 for a bad escape);
    - `'a0eebc99-...'::uuid`: a FixedSizeBinary(16) literal, icegres's uuid (DataFusion has none);
    - unquoted numeric literals in the values an INSERT or UPDATE assigns: numeric, as in
      PostgreSQL, where DataFusion plans float64 (`1234567890123456789.0123456789` would be
      stored as ...768.0, `123456789.1` in numeric(38,10) as 123456789.0999999940).

    Numeric literals elsewhere stay float64 on purpose: DataFusion coerces a comparison, CASE or
    COALESCE of a double column with a decimal to the decimal's type, which overflows or cuts
    digits of the column's values (`fare > 0.5` fails on a fare of 1e20).
    """
    assigned = _assignment(tree)
    if not _typed_literal_sites(tree, assigned):
        return tree
    tree = tree.copy()  # the copy has no parent: `assigned` says where it stood
    for node, replacement in _typed_literal_sites(tree, assigned):
        if node is tree:
            return replacement
        node.replace(replacement)
    return tree


def _typed_literal_sites(
    tree: exp.Expression, assigned: str | None
) -> list[tuple[exp.Expression, exp.Expression]]:
    """(node, what DataFusion must read instead) for every literal `typed_literals` fixes."""
    sites: list[tuple[exp.Expression, exp.Expression]] = []
    for cast in tree.find_all(exp.Cast):
        value = cast.this
        if not (isinstance(value, exp.Literal) and value.is_string):
            continue
        target = _type_name(cast.to)
        if target in ("bytea", "varbinary"):
            sites.append((cast, _bytea_literal(value.this)))
        elif target == "uuid":
            sites.append((cast, _uuid_literal(value.this)))
        elif target in _CLOCK_TYPES and (seconds := _with_seconds(value.this)) is not None:
            sites.append((value, exp.Literal.string(seconds)))
    for node, room in _assigned_values(tree, assigned):
        number = exact_number(node, room=room)
        if number is not None:
            sites.append((node, number))
    return sites


_CLOCK_TYPES = frozenset({"timestamp", "timestamptz", "time"})
# A time of day to the minute, PostgreSQL's input takes it; Arrow's parser wants the seconds.
_TO_THE_MINUTE = re.compile(r"^(\s*(?:\d{4,}-\d{1,2}-\d{1,2}[ T])?\d{1,2}:\d{2})(?=$|[\s+\-zZ])")


def _with_seconds(text: str) -> str | None:
    """`text` with ':00' after its minutes when it gives a time to the minute (else None)."""
    found = _TO_THE_MINUTE.match(text)
    return None if found is None else found.group(1) + ":00" + text[found.end():]


def _bytea_literal(text: str) -> exp.Expression:
    from icegres.pg.params import decode_param
    from icegres.pg.types import BYTEA

    data = decode_param(text.encode("utf-8"), BYTEA.oid, 0)
    assert isinstance(data, bytes)
    return exp.HexString(this=data.hex())


def _uuid_literal(text: str) -> exp.Expression:
    from icegres.pg.params import decode_param
    from icegres.pg.types import UUID

    value = decode_param(text.encode("utf-8"), UUID.oid, 0)
    assert isinstance(value, uuid.UUID)
    return _call("arrow_cast", exp.HexString(this=value.hex), exp.Literal.string("FixedSizeBinary(16)"))


def _assignment(tree: exp.Expression) -> str | None:
    """Whether `tree` is what an INSERT inserts ("insert") or an UPDATE SET assigns ("update").

    dml.py renders an INSERT's source (VALUES or SELECT) and each UPDATE SET value separately,
    each still attached to its statement.
    """
    parent = tree.parent
    if isinstance(parent, exp.Insert) and tree.arg_key == "expression":
        return "insert"
    if isinstance(parent, exp.EQ) and isinstance(parent.parent, exp.Update) and tree.arg_key == "expression":
        return "update"
    return None


def _assigned_values(tree: exp.Expression, assigned: str | None) -> list[tuple[exp.Expression, bool]]:
    """The expressions of `tree` that are values assigned to a column, each with whether its
    type must leave room for the column's values too.

    The UPDATE value becomes `CASE WHEN hit THEN value ELSE column END`, whose planned type is the
    THEN branch's (DataFusion's schema says numeric(2,1) for `THEN 1.5 ELSE numeric_column`), and
    a decimal there makes DataFusion turn a double column into a decimal for every row of the file.
    """
    if assigned == "update":
        return [(tree, True)]
    if assigned != "insert":
        return []
    if isinstance(tree, exp.Values):
        return [(v, False) for row in tree.expressions if isinstance(row, exp.Tuple) for v in row.expressions]
    if isinstance(tree, exp.Select):
        return [(item.this if isinstance(item, exp.Alias) else item, False) for item in tree.expressions]
    return []  # a UNION's branches would coerce a double column to the literal's decimal


# DataFusion's decimals: Decimal128 up to 38 digits, Decimal256 up to 76.
_DECIMAL_DIGITS_MAX = 76
_INT64 = range(-(2**63), 2**63)


def exact_number(node: exp.Expression, *, room: bool) -> exp.Expression | None:
    """A numeric literal (maybe negated) as an exact decimal, if DataFusion's float64 (or
    UInt64) reading would differ from PostgreSQL's numeric; else None.

    `room`: when the literal meets the target column in a CASE (UPDATE), whose type icegres does
    not know here, only literals float64 cannot even spell are changed (a decimal would damage a
    double column), and to a decimal wide enough for the column's values. A literal float64 does
    spell still reaches a numeric column through DataFusion's float-to-decimal cast (`SET n =
    123456789.1` stores 123456789.0999999956): only the UPDATE code, which knows the column, can
    cast it to the column's type.
    """
    negative = isinstance(node, exp.Neg)
    literal = node.this if negative else node
    if not (isinstance(literal, exp.Literal) and not literal.is_string):
        return None
    text = str(literal.this)
    try:
        value = Decimal(text)
    except ArithmeticError:
        return None
    if not value.is_finite():
        return None
    value = value.copy_negate() if negative else value  # exact: `-value` rounds to 28 digits
    if value == value.to_integral_value() and "." not in text and "e" not in text.lower():
        if int(value) in _INT64:
            return None  # an integer DataFusion reads exactly
    elif room and Decimal(repr(float(value))) == value:
        return None  # its shortest float64 spelling is the literal
    _, digits, exponent = value.as_tuple()
    assert isinstance(exponent, int)
    scale = max(-exponent, 0)
    precision = max(len(digits) + max(exponent, 0), scale, 1)
    if precision > _DECIMAL_DIGITS_MAX:
        return None  # beyond DataFusion's decimals: float64 is the best it can do
    if room:
        precision = max(precision, 38)
    decimal = exp.DataType.build(f"DECIMAL({precision}, {scale})")
    return exp.Cast(this=exp.Literal.string(f"{value:f}"), to=decimal)
