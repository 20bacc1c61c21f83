"""Assignment casts: values into a table's column types, as PostgreSQL assigns them.

INSERT and COPY values, UPDATE assignments and CREATE TABLE AS rows arrive as whatever DataFusion or
the wire produced; they are stored as the Iceberg column's type with PostgreSQL's rules: text read
by the type's input function, numeric rounded half away from zero, float rounded half to even,
NOT NULL enforced (23502), and a value that does not fit an error (22003/22P02/42804), never a
silently different value. A varchar(n) / char(n) column's length is checked too (22001,
pg/chars.py).
"""

from __future__ import annotations

from collections.abc import Callable
from decimal import Decimal
from typing import TYPE_CHECKING

import pyarrow as pa

from icegres.pg import chars
from icegres.pg.errors import PgError
from icegres.pg.row_text import failing_row

if TYPE_CHECKING:
    from sqlglot import exp

    from icegres.engine.mounts import ReadPlan
    from icegres.engine.txn import Key


def write_schema(plan: ReadPlan) -> pa.Schema:
    """The exact Arrow schema pyiceberg's writer expects for the table's current schema."""
    return plan.write_schema


# The table's CHECK constraints over the first `upto` of conformed rows: the violation of the
# first row that breaks one (engine/checks.py), or None.
CheckRows = Callable[[pa.Table, int], PgError | None]


def conform(data: pa.Table, plan: ReadPlan, key: Key, zone: str = "UTC", checks: CheckRows | None = None) -> pa.Table:
    """Rows in the table's column order and types; NOT NULL (23502) and `checks` (23514) enforced
    row by row as PostgreSQL's ExecConstraints does, casts checked (22xxx). `zone` is the
    session's TimeZone, in which text without an offset names a timestamptz."""
    return conform_to(data, write_schema(plan), key, zone, plan.char_types, checks)


def conform_to(data: pa.Table, target: pa.Schema, key: Key, zone: str = "UTC",
               char_types: tuple[chars.CharType | None, ...] = (), checks: CheckRows | None = None) -> pa.Table:
    """`conform` to the writer's schema `target` of table `key`, whose columns have the
    character types `char_types` (ReadPlan.char_types; () for none)."""
    arrays = []
    null_row: int | None = None  # the first row with a NULL in a NOT NULL column, and that column
    null_column = ""
    for i, f in enumerate(target):
        if f.name in data.column_names:
            column = assigned(data.column(f.name), f, zone)
            char = char_types[i] if i < len(char_types) else None
            if char is not None:
                column = chars.assign(column, char)
        else:
            column = pa.nulls(data.num_rows, f.type)
        if not f.nullable and column.null_count:
            first = first_null(column)
            if null_row is None or first < null_row:
                null_row, null_column = first, f.name
        arrays.append(column)
    rows = pa.Table.from_arrays(arrays, schema=target)
    if checks is not None:
        # A row before the first NULL that breaks a CHECK fails first; at that row NOT NULL does.
        violation = checks(rows, rows.num_rows if null_row is None else null_row)
        if violation is not None:
            raise violation
    if null_row is not None:
        raise not_null_violation(null_column, key, failing_row(rows, null_row, zone, char_types))
    return rows


def assigned(column: pa.ChunkedArray, field: pa.Field, zone: str = "UTC") -> pa.ChunkedArray:
    """`column` cast to `field`'s type as a value is assigned to it (22xxx, 42804 where it is not)."""
    try:
        return cast(column, field.type, zone)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
        raise _cast_error(exc, field, column.type) from None


def first_null(column: pa.ChunkedArray | pa.Array) -> int:
    """The index of the first NULL of a column that has one."""
    import pyarrow.compute as pc

    return pc.index(column.is_null(), True).as_py()


def not_null_violation(column: str, key: Key, detail: str | None = None) -> PgError:
    return PgError("23502", f'null value in column "{column}" of relation "{key[1]}" violates not-null constraint',
                   detail=detail)


def cast(column: pa.ChunkedArray, to: pa.DataType, zone: str = "UTC") -> pa.ChunkedArray:
    import pyarrow.compute as pc

    if column.type == to:
        return column
    src = column.type
    if pa.types.is_null(src):
        return pa.nulls(len(column), to) if len(column) else pa.chunked_array([], to)
    if pa.types.is_string_view(src) or pa.types.is_string(src) or pa.types.is_large_string(src):
        if not (pa.types.is_string(to) or pa.types.is_large_string(to) or pa.types.is_string_view(to)):
            if pa.types.is_integer(to) or pa.types.is_floating(to) or pa.types.is_date(to):
                try:  # vectorised where Arrow's parser reads exactly what PostgreSQL's would
                    return pc.cast(column, to)
                except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
                    pass
            vectorised = _vector_text(column, to)
            return vectorised if vectorised is not None else _cast_text(column, to, zone)
    if None not in (_assign_kind(src), _assign_kind(to)) and _assign_kind(src) != _assign_kind(to):
        # Arrow would turn a date into its day number or true into 1; PostgreSQL has no such
        # assignment cast and says 42804 (the caller turns this error into that).
        raise pa.ArrowNotImplementedError(f"no assignment cast from {src} to {to}")
    if pa.types.is_integer(to) and (pa.types.is_decimal(src) or pa.types.is_floating(src)):
        # PostgreSQL rounds where Arrow refuses ("truncated"): numeric half away from zero
        # (numeric_int8), float8 half to even (rint in dtoi8). 3.7 into an int column is 4.
        if pa.types.is_decimal(src) and src.precision < 38:
            column = pc.cast(column, pa.decimal128(38, src.scale))  # room for the carry: 0.5 -> 1
        mode = "half_towards_infinity" if pa.types.is_decimal(src) else "half_to_even"
        column = pc.round(column, 0, round_mode=mode)
    elif pa.types.is_floating(to) and pa.types.is_decimal(src):
        # Through the digits: Arrow scales by a power of ten in floating point (1.15 became
        # 1.1500000000000001); parsing the decimal's text rounds once, as float8(numeric) does.
        return pc.cast(pc.cast(column, pa.string()), to)
    elif pa.types.is_decimal(to) and pa.types.is_floating(src):
        return _float_to_decimal(column, to)
    elif pa.types.is_decimal(to) and pa.types.is_integer(src):
        # Arrow casts an integer only to a decimal with room for any value of its type (19 digits
        # for a bigint, plus the scale); the safe cast down to the column's then checks each value.
        wide = pa.decimal128(38, to.scale) if to.scale <= 38 - 20 else pa.decimal256(76, to.scale)
        column = pc.cast(column, wide)
    elif pa.types.is_decimal(to) and pa.types.is_decimal(src) and src.scale > to.scale:
        # numeric(p,s) input rounds half away from zero to the column's scale.
        column = pc.round(column, to.scale, round_mode="half_towards_infinity")
    elif (pa.types.is_timestamp(to) and pa.types.is_timestamp(src) and src.unit == "ns"
          and to.unit in _TEMPORAL_UNITS):
        # DataFusion's now() and timestamp arithmetic are nanoseconds; PostgreSQL keeps
        # microseconds, rounding to them as timestamp input does.
        column = pc.round_temporal(column, multiple=1, unit=_TEMPORAL_UNITS[to.unit])
    return pc.cast(column, to, safe=True)


_TEMPORAL_UNITS = {"us": "microsecond", "ms": "millisecond", "s": "second"}


def _float_to_decimal(column: pa.ChunkedArray, to: pa.DataType) -> pa.ChunkedArray:
    """Each double by its shortest exact spelling (123456789.1, not Arrow's 123456789.0999999940),
    rounded half away from zero to the column's scale. PostgreSQL's float8_numeric keeps 15
    digits; the shortest spelling keeps every digit a double literal can carry."""
    from decimal import ROUND_HALF_UP, Decimal, InvalidOperation

    quantum = Decimal(1).scaleb(-to.scale)
    values = []
    for v in column.to_pylist():
        if v is None:
            values.append(None)
            continue
        if v != v or v in (float("inf"), float("-inf")):
            raise pa.ArrowInvalid(f"{v} is out of range for {to}")
        try:
            values.append(Decimal(repr(v)).quantize(quantum, rounding=ROUND_HALF_UP))
        except InvalidOperation:
            raise pa.ArrowInvalid(f"{v} is out of range for {to}") from None
    try:
        return pa.chunked_array([pa.array(values, type=to)], to)
    except pa.ArrowInvalid as exc:
        raise pa.ArrowInvalid(f"value out of range: {exc}") from None


def check_assignable(column: str, src: pa.DataType, to: pa.DataType) -> None:
    """42804 where PostgreSQL has no assignment cast from an expression's type to its column's:
    text into a non-text column (an untyped literal is not an expression of type text: the caller
    leaves those out), or across kinds (a date into a number, a boolean into a date)."""
    from icegres.pg.types import pg_type_for_arrow

    def is_text(t: pa.DataType) -> bool:
        return pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t)

    kinds = _assign_kind(src), _assign_kind(to)
    # (not into a uuid: the engine's uuid functions give text where PostgreSQL's give uuid)
    text_into_typed = is_text(src) and kinds[1] is not None and not pa.types.is_fixed_size_binary(to)
    if text_into_typed or (None not in kinds and kinds[0] != kinds[1]):
        raise PgError("42804", f'column "{column}" is of type {pg_type_for_arrow(to).name} but expression is of '
                               f"type {pg_type_for_arrow(src).name}",
                      hint="You will need to rewrite or cast the expression.")


def _assign_kind(t: pa.DataType) -> str | None:
    """PostgreSQL's assignment casts stay within these kinds (nested and other types: Arrow decides)."""
    if pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_decimal(t):
        return "number"
    if pa.types.is_temporal(t):
        return "datetime"
    if pa.types.is_boolean(t):
        return "boolean"
    if pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_fixed_size_binary(t):
        return "binary"
    return None


# Text forms whose PostgreSQL reading Arrow's parser shares exactly: ISO dates of years 1-9999,
# at most microseconds, and (timestamptz) an explicit offset PostgreSQL accepts (under 16 hours).
# Anything else -- no offset (read in the session's TimeZone), BC, 24:00, leap seconds, prefixes
# of true/false -- is read value by value by the input functions.
_YEAR = r"(?:[1-9][0-9]{3}|0[1-9][0-9]{2}|00[1-9][0-9]|000[1-9])"
_CLOCK = _YEAR + r"-[0-9]{2}-[0-9]{2}[ T][0-9]{2}:[0-9]{2}:[0-9]{2}(?:\.[0-9]{1,6})?"
_TIMESTAMP_TEXT = "^" + _CLOCK + "$"
_TIMESTAMPTZ_TEXT = "^" + _CLOCK + r"(?:Z|[+-](?:0[0-9]|1[0-5])(?::?[0-5][0-9])?)$"


def _vector_text(column: pa.ChunkedArray, to: pa.DataType) -> pa.ChunkedArray | None:
    """`column` read by Arrow when every value has a form Arrow reads exactly as PostgreSQL does
    (COPY sends whole columns of them); None when any value needs the input functions."""
    import pyarrow.compute as pc

    present = len(column) - column.null_count
    if pa.types.is_boolean(to):
        low = pc.utf8_lower(column)
        true, false = pc.is_in(low, pa.array(["t", "true"])), pc.is_in(low, pa.array(["f", "false"]))
        if pc.sum(pc.or_(true, false)).as_py() != present:
            return None
        return pc.if_else(pc.is_valid(column), true, pa.scalar(None, pa.bool_()))
    if pa.types.is_decimal(to):
        # Plain digits that fit: no rounding, exponent, NaN or spaces for Arrow to read otherwise.
        frac = rf"(?:\.[0-9]{{1,{to.scale}}})?" if to.scale > 0 else ""
        pattern = rf"^[+-]?[0-9]{{1,{max(to.precision - to.scale, 1)}}}{frac}$"
        if to.scale < 0 or pc.sum(pc.match_substring_regex(column, pattern)).as_py() != present:
            return None
        try:
            return pc.cast(column, to)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            return None
    if pa.types.is_timestamp(to) and to.unit == "us":
        pattern = _TIMESTAMPTZ_TEXT if to.tz is not None else _TIMESTAMP_TEXT
        if pc.sum(pc.match_substring_regex(column, pattern)).as_py() != present:
            return None
        try:
            cast = pc.cast(column, to)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            return None  # an impossible date (Feb 30): the input function says which
        earliest = pc.min(cast.cast(pa.int64())).as_py()
        if earliest is not None and earliest < _YEAR_ONE_US:
            return None  # before 0001-01-01 in UTC (0001-01-01 00:00+05:30): the input function says
        return cast
    return None


_YEAR_ONE_US = -62_135_596_800_000_000  # 0001-01-01 00:00:00 UTC in microseconds since the epoch


def _cast_text(column: pa.ChunkedArray, to: pa.DataType, zone: str) -> pa.ChunkedArray:
    """Text literals into typed columns, as PostgreSQL's input functions would read them (a
    timestamptz without an offset in the session's TimeZone `zone`)."""
    from icegres.pg.clock import TextSettings
    from icegres.pg.params import decode_param
    from icegres.pg.types import pg_type_for_arrow

    oid = pg_type_for_arrow(to).oid
    settings = TextSettings(timezone=zone)
    values = [None if v is None else decode_param(v.encode(), oid, 0, settings) for v in column.to_pylist()]
    if pa.types.is_decimal(to):
        values = [None if v is None else _to_scale(v, to) for v in values]
    return pa.chunked_array([pa.array(values, type=to)], to)


def _to_scale(value: Decimal, to: pa.DataType) -> Decimal:
    """numeric input rounded half away from zero to the column's scale, as numeric(p,s) rounds it;
    NaN and infinities PostgreSQL's numeric holds have no Iceberg decimal to go to."""
    from decimal import ROUND_HALF_UP, localcontext

    if not value.is_finite():
        raise pa.ArrowInvalid(f"{value} is out of range for {to}: Iceberg decimals hold finite values only")
    with localcontext() as exact:
        exact.prec = 1000  # PostgreSQL's numeric precision bound: quantize never rounds elsewhere
        return value.quantize(Decimal(1).scaleb(-to.scale), rounding=ROUND_HALF_UP)


def _cast_error(exc: Exception, field: pa.Field, src: pa.DataType) -> PgError:
    text = str(exc)
    # Values were rounded as PostgreSQL rounds before Arrow's safe cast; what it still refuses
    # does not fit the column ("does not fit in precision", "out of bounds", "truncated").
    if any(w in text.lower() for w in ("overflow", "out of range", "not in range", "would", "does not fit",
                                        "out of bounds", "truncated")):
        return PgError("22003", f'value out of range for column "{field.name}" ({text.splitlines()[0]})')
    return PgError("42804", f'column "{field.name}" is of type {field.type} but expression is of type {src}',
                   hint="You will need to rewrite or cast the expression.")


def is_untyped(node: exp.Expression) -> bool:
    """Whether `node` is a literal PostgreSQL types by where it goes — a quoted string (`E'…'`
    too, which sqlglot reads as a ByteString), a number, NULL — so that its column's input
    function reads it and it is never 42804."""
    from sqlglot import exp

    return isinstance(node, exp.Literal | exp.Null | exp.ByteString)


def assignment(expr: exp.Expression, column_type: pa.DataType) -> exp.Expression:
    """A copy of `expr` cast to the SQL type of a column of `column_type` (as is where no name
    fits)."""
    from sqlglot import exp

    name = _SQL_TYPES.get(column_type)
    if name is None and pa.types.is_decimal(column_type):
        name = f"DECIMAL({column_type.precision}, {column_type.scale})"
    if name is None and pa.types.is_timestamp(column_type):
        name = "TIMESTAMPTZ" if column_type.tz else "TIMESTAMP"
    if name is None:
        return expr.copy()
    return exp.Cast(this=expr.copy(), to=exp.DataType.build(name, dialect="postgres"))


_SQL_TYPES = {
    pa.bool_(): "BOOLEAN", pa.int16(): "SMALLINT", pa.int32(): "INT", pa.int64(): "BIGINT",
    pa.float32(): "REAL", pa.float64(): "DOUBLE PRECISION", pa.string(): "TEXT",
    pa.string_view(): "TEXT", pa.large_string(): "TEXT", pa.date32(): "DATE",
    pa.binary(): "BYTEA", pa.large_binary(): "BYTEA",
}
