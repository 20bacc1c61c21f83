"""A prepared `INSERT … VALUES ($1, $2)` as a recipe for its rows, reusable without parsing.

Drivers send the same parameterised INSERT text again and again (psycopg after its prepare
threshold, pgjdbc past prepareThreshold, executemany). Its rows are a pure function of the
parameters and of the target's column types, so the first execution (in a worker thread, where
the statement is parsed and the target resolved) leaves the recipe on the session, and later
executions in autocommit build their rows from it in a few microseconds.

That is what lets the write buffer take such an INSERT on the event loop: everything here is
dictionary lookups and a few small Arrow arrays, never I/O, DataFusion or pyiceberg. The worker
thread hop it saves (loop → thread → loop, ~0.2 ms here) was a fifth of a tail-dir ack; a hop
buys no parallelism for this work, which holds the GIL either way.

A recipe is used only while it still describes the table: the name resolves to the same table
under the session's search_path, the mounted table is the same one (its UUID) with the same
schema id (an Iceberg schema id never changes meaning within a table), and the table has no
primary key (its uniqueness check reads the lake). Anything else sends the statement the long
way, where it is planned afresh and errors are reported exactly as PostgreSQL would.
"""

from __future__ import annotations

import datetime
import functools
import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from icegres.engine.assign import first_null, not_null_violation
from icegres.pg import chars
from icegres.pg.errors import PgError
from icegres.pg.row_text import failing_row
from icegres.sql.pieces import BigText, has_big
from icegres.sql.values_rows import DEFAULT, Cast, ConstantRows, Expression, is_placeholder

if TYPE_CHECKING:
    import sqlglot.expressions as exp

    from icegres.engine.mounts import ReadPlan
    from icegres.engine.txn import Key

__all__ = ["InsertShape", "InsertShapes", "compile_shape"]

SHAPES_PER_SESSION_MAX = 64

_NOT_PLAIN = object()


@dataclass(frozen=True)
class Param:
    """A value taken from the statement's parameter `name` ("1" for $1)."""

    name: str


@dataclass(frozen=True)
class InsertShape:
    """Where each value of each row comes from, and the table the rows are for."""

    key: Key
    written_as: tuple[str | None, str]  # (schema, name) as the statement spells the target
    table_uuid: str
    schema_id: int
    target: pa.Schema  # the writer's schema: conformed rows have exactly this
    positions: tuple[int | None, ...]  # per target column: its place in the VALUES rows, or None
    # Per INSERT column, per row: a Param or a plain constant. (By column: a big VALUES list's
    # rows were 500,000 tuples made in one C call holding the GIL for ~0.1 s.)
    columns: tuple[list[Any], ...]
    count: int  # rows
    char_types: tuple[chars.CharType | None, ...] = ()  # per target column (ReadPlan.char_types)

    def rows(self, params: dict[str, Any] | None) -> pa.Table | None:
        """The conformed rows (every column of the table, the writer's types; the INSERT's
        missing columns NULL); None if a value does not convert as it is (the statement then
        takes the planned path, which casts or reports it). Raises PgError 23502 for a NULL in
        a NOT NULL column and 22001 for a value too long for its varchar(n) / char(n) column,
        as `assign.conform` does."""
        if params is None:
            if self.takes_parameters:
                return None
            params = {}  # (a simple Query's VALUES of constants)
        elif has_big(params) and any(isinstance(v, Param) and v.name not in params for c in self.columns for v in c):
            return None  # (a simple Query's own `$n` beside a big literal's: the planned path's 42P02)
        count = self.count
        arrays = []
        try:
            for f, i in zip(self.target, self.positions, strict=True):
                if i is None:
                    arrays.append(pa.nulls(count, f.type))
                else:
                    arrays.append(arrow_column([params.get(v.name) if isinstance(v, Param) else v
                                           for v in self.columns[i]], f.type))
        except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, TypeError, ValueError, OverflowError):
            return None
        for i, char in enumerate(self.char_types):
            if char is not None and self.positions[i] is not None:
                arrays[i] = chars.assign(arrays[i], char)
        rows = pa.Table.from_arrays(arrays, schema=self.target)
        nulls = [(first_null(a), f.name) for f, a in zip(self.target, arrays, strict=True)
                 if not f.nullable and a.null_count]
        if nulls:
            row, column = min(nulls, key=lambda n: n[0])
            raise not_null_violation(column, self.key, failing_row(rows, row, char_types=self.char_types))
        return rows

    @functools.cached_property
    def takes_parameters(self) -> bool:
        """Whether any value is a parameter: only such a recipe is worth keeping (a statement of
        constants is rarely sent twice, and its recipe would hold all its values)."""
        return any(isinstance(v, Param) for c in self.columns for v in c)

    def describes(self, plan: ReadPlan | None) -> bool:
        """Whether the recipe still holds for `plan`, the table's mounted snapshot."""
        return (plan is not None and plan.table is not None and not plan.primary_key
                and not plan.checks  # (CHECK constraints are evaluated by the planned path)
                and plan.table_uuid == self.table_uuid and plan.schema_id == self.schema_id
                and plan.char_types == self.char_types  # ALTER TYPE varchar(n): a property only
                and not any(d is not None and i is None for d, i in zip(plan.defaults, self.positions, strict=False)))


def compile_shape(tree: exp.Insert, key: Key, plan: ReadPlan, columns: list[str]) -> InsertShape | None:
    """The recipe of an INSERT whose VALUES hold only parameters, NULLs and constants whose meaning
    cannot depend on a cast (a string into a text column, a digit string into an integer column,
    a boolean into a boolean column); None for anything else."""
    import sqlglot.expressions as exp

    from icegres.sql.parse import ConstantValues

    source = tree.expression
    if not isinstance(source, exp.Values | ConstantValues):
        return None
    if any(d is not None and f.name not in columns for d, f in zip(plan.defaults, plan.schema, strict=False)):
        return None  # a column it leaves out takes a DEFAULT: the planned path computes it
    if plan.checks:
        return None  # the planned path evaluates the table's CHECK constraints
    target = plan.write_schema
    types = {f.name: f.type for f in target}
    if isinstance(source, ConstantValues):
        made = _constant_columns(source.args["rows"], [types.get(c) for c in columns])
        if made is None:
            return None
        values, count = made, source.args["rows"].count
    else:
        rows = _values_rows(source, columns, types)
        if rows is None:
            return None
        values, count = tuple(list(c) for c in zip(*rows, strict=True)) if rows else tuple([] for _ in columns), len(rows)
    table = tree.this.this if isinstance(tree.this, exp.Schema) else tree.this
    place = {c: i for i, c in enumerate(columns)}
    return InsertShape(key, (table.db or None, table.name), plan.table_uuid, plan.schema_id, target,
                       tuple(place.get(f.name) for f in target), values, count, plan.char_types)


def _values_rows(source: exp.Values, columns: list[str], types: dict[str, pa.DataType]) -> list[tuple[Any, ...]] | None:
    """A VALUES tree's rows of Params and plain constants; None where one is not plain."""
    import sqlglot.expressions as exp

    rows = []
    for row in source.expressions:
        items = row.expressions
        if len(items) != len(columns):
            return None
        values: list[Any] = []
        for item, column in zip(items, columns, strict=True):
            item = _uncast(item, types.get(column))
            if isinstance(item, exp.Parameter):
                values.append(Param(str(item.this.this)))
            elif isinstance(item, exp.Null):
                values.append(None)
            elif (constant := _plain_constant(item, types.get(column))) is not _NOT_PLAIN:
                values.append(constant)
            else:
                return None
        rows.append(tuple(values))
    return rows


def _uncast(item: exp.Expression, target: pa.DataType | None) -> exp.Expression:
    """`x::T` (or CAST) into a column of type T is `x` assigned to it: the cast reads a constant
    with T's input function, as the assignment does, and a parameter arrives as T or does not
    convert as it is (`InsertShape.rows` then plans the statement). ORMs write their values so:
    SQLAlchemy's `VALUES (%(id)s::INTEGER, %(name)s::VARCHAR, …)`. Anything else — a type with
    a modifier (varchar(3) cuts, numeric(p,s) rounds), another type, a signed number (`-1::int`
    is the negation of the cast, 22003 for the smallest integer) — stays a cast, for the
    planned path."""
    import sqlglot.expressions as exp

    if not isinstance(item, exp.Cast) or target is None or item.to.expressions:
        return item
    inner = item.this
    if not isinstance(inner, exp.Parameter | exp.Literal | exp.Null | exp.Boolean):
        return item
    accepts = _CAST_TYPES.get(item.to.this)
    return inner if accepts is not None and accepts(target) else item


def _cast_types() -> dict[Any, Callable[[pa.DataType], bool]]:
    from sqlglot.expressions import DataType

    t, kind = pa.types, DataType.Type
    return {
        kind.SMALLINT: t.is_int16, kind.INT: t.is_int32, kind.BIGINT: t.is_int64,
        kind.DOUBLE: t.is_float64, kind.BOOLEAN: t.is_boolean, kind.DATE: t.is_date32,
        kind.TEXT: _is_text, kind.VARCHAR: _is_text,
        kind.DECIMAL: t.is_decimal,  # (numeric unconstrained: a value the column's scale cuts is not taken as it is)
        kind.TIMESTAMP: lambda dt: t.is_timestamp(dt) and dt.tz is None,
        kind.TIMESTAMPTZ: lambda dt: t.is_timestamp(dt) and dt.tz is not None,
    }


def _is_text(dt: pa.DataType) -> bool:
    return pa.types.is_string(dt) or pa.types.is_large_string(dt)


_CAST_TYPES = _cast_types()


@functools.lru_cache(maxsize=64)
def cast_type(name: str) -> Any:
    """The type a lexer-read cast names (`values_rows.Cast`), as the parser reads it; None for
    a name it does not read as a type."""
    from sqlglot import exp
    from sqlglot.errors import ParseError

    try:
        return exp.DataType.build(name, dialect="postgres")
    except (ParseError, ValueError):
        return None


class InsertShapes:
    """One session's recipes, by statement text and search_path; at most SHAPES_PER_SESSION_MAX.

    Kept by worker threads, read on the event loop: single dictionary operations, atomic under
    the GIL, so no lock is needed (a lost race only means one more planned execution)."""

    def __init__(self) -> None:
        self._shapes: dict[tuple[str, tuple[str, ...]], InsertShape] = {}

    def keep(self, sql: str, search_path: list[str] | tuple[str, ...], shape: InsertShape) -> None:
        key = (sql, tuple(search_path))
        if key not in self._shapes and len(self._shapes) >= SHAPES_PER_SESSION_MAX:
            self._shapes.pop(next(iter(self._shapes)), None)
        self._shapes[key] = shape

    def rows_now(self, sql: str, search_path: list[str], params: dict[str, Any] | None,
                 resolve: Callable[[str | None, str], Key | None],
                 read_plan: Callable[[str, str], ReadPlan | None]) -> tuple[Key, pa.Table] | None:
        """(target, conformed rows) of an autocommit execution of `sql` under `search_path`, from
        its recipe (`resolve` names the table a name means now, `read_plan` its mounted plan);
        None when there is none or it no longer applies: take the planned path. Never blocks.

        Raises PgError 23502 for a NULL in a NOT NULL column and 22001 for a value too long for
        its column, as the planned path would."""
        shape = self._shapes.get((sql, tuple(search_path)))
        if shape is None or resolve(*shape.written_as) != shape.key or has_big(params):
            # (a big value's rows are built in a worker thread: copying it would hold the loop)
            return None
        if not shape.describes(read_plan(*shape.key)):
            return None
        rows = shape.rows(params)
        return None if rows is None else (shape.key, rows)


_CHUNK = 1 << 16


def arrow_column(values: list[Any], target: pa.DataType) -> pa.Array:
    """One column of the rows: `values` as `target`. A big literal's value (BigText, a big
    statement's: protocol/pgwire/statements.py) goes into a string column as its UTF-8 pieces,
    never as one str; into any other type it does not convert as it is (TypeError)."""
    if not any(isinstance(v, BigText) for v in values):
        if len(values) <= _CHUNK:
            return pa.array(values, type=target)
        # (a big VALUES list's column a chunk per call: each call holds the GIL)
        return pa.concat_arrays([pa.array(values[i : i + _CHUNK], type=target) for i in range(0, len(values), _CHUNK)])
    if not (pa.types.is_string(target) or pa.types.is_large_string(target)):
        raise TypeError("a big literal converts as text only")
    from icegres.engine.big_values import array_of

    parts = [array_of(v) if isinstance(v, BigText) else pa.array([v], type=pa.string()) for v in values]
    return (parts[0] if len(parts) == 1 else pa.concat_arrays(parts)).cast(target)


def _constant_columns(rows: ConstantRows, types: list[pa.DataType | None]) -> tuple[list[Any], ...] | None:
    """A VALUES list read without a tree (sql/values_rows.py) as columns of Params and plain
    constants, as `_plain_constant` takes them; None where one is not plain for its column."""
    if rows.width != len(types):
        return None
    columns = []
    for values, target in zip(rows.columns, types, strict=True):
        if target is None:
            return None
        column = [_token_constant(v, target) for v in values]
        if any(v is _NOT_PLAIN for v in column):
            return None
        columns.append(column)
    return tuple(columns)


def plain_column(values: list[Any], target: pa.DataType, params: dict[str, Any] | None) -> pa.Array | None:
    """One lexer-read VALUES column as the recipe takes it: its constants and parameters as
    `target`'s values; None where one is not plain for the column or does not convert as it is."""
    taken = [_token_constant(v, target) for v in values]
    if any(v is _NOT_PLAIN for v in taken):
        return None
    if any(isinstance(v, Param) for v in taken):
        if params is None or any(isinstance(v, Param) and v.name not in params for v in taken):
            return None
        taken = [params[v.name] if isinstance(v, Param) else v for v in taken]
    try:
        return arrow_column(taken, target)
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, TypeError, ValueError, OverflowError):
        return None


def _token_constant(value: Any, target: pa.DataType) -> Any:
    if value is DEFAULT or isinstance(value, Expression):
        return _NOT_PLAIN  # (computed: engine/dml/constant_rows.py)
    if isinstance(value, Cast):  # (taken as `_uncast` takes a tree's)
        to = cast_type(value.type)
        accepts = _CAST_TYPES.get(to.this) if to is not None and not to.expressions else None
        if accepts is None or not accepts(target):
            return _NOT_PLAIN
        value = value.value
    if value is None:
        return None
    if isinstance(value, bytes):  # (a Number)
        return _number_constant(value.decode(), target)
    if isinstance(value, bool):
        return value if pa.types.is_boolean(target) else _NOT_PLAIN
    if is_placeholder(value):
        return Param(str(value))
    return _string_constant(value, target)


def _plain_constant(item: exp.Expression, target: pa.DataType | None) -> Any:
    """The value of a constant that means the same under any PostgreSQL coercion to `target`,
    or _NOT_PLAIN. What is taken is what the target type's input function or assignment cast
    reads the one way (`_NUMBER_TEXT`, `_BOOL_TEXT`, ISO dates); anything it might read
    otherwise, round or refuse is left to the planned path, which casts or reports it."""
    import sqlglot.expressions as exp

    if target is None:
        return _NOT_PLAIN
    negative = isinstance(item, exp.Neg)
    if negative:
        item = item.this
        if not (isinstance(item, exp.Literal) and not item.is_string):
            return _NOT_PLAIN
    if isinstance(item, exp.Literal):
        text = item.this
        if item.is_string:
            return _string_constant(text, target)
        return _number_constant(f"-{text}" if negative else text, target)
    if isinstance(item, exp.Boolean) and pa.types.is_boolean(target):
        return bool(item.this)
    return _NOT_PLAIN


# A number as PostgreSQL's lexer reads an unquoted one (and int4in/float8in/numeric_in take one).
_NUMBER_TEXT = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?")
_INTEGER_TEXT = re.compile(r"[+-]?\d+")
_ISO_DATE = re.compile(r"(\d{4})-(\d{2})-(\d{2})")
_ISO_TIMESTAMP = re.compile(r"(\d{4})-(\d{2})-(\d{2})[ T](\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,6}))?")
# boolin's words (it also takes unique prefixes: those go the planned way)
_BOOL_TEXT = {"t": True, "true": True, "yes": True, "on": True, "1": True,
              "f": False, "false": False, "no": False, "off": False, "0": False}
_FLOAT_WORDS = {"nan": math.nan, "infinity": math.inf, "+infinity": math.inf, "-infinity": -math.inf,
                "inf": math.inf, "+inf": math.inf, "-inf": -math.inf}


def _number_constant(text: str, target: pa.DataType) -> Any:
    """An unquoted number assigned to `target`: an integer literal into an integer column, any
    number into a double column (PostgreSQL's numeric-to-float8 cast reads the digits as float8in
    does: the nearest double, which is what float() gives), a number into a numeric column
    whose scale holds its digits (no rounding to decide)."""
    if pa.types.is_integer(target):
        return int(text) if _INTEGER_TEXT.fullmatch(text) else _NOT_PLAIN
    if pa.types.is_float64(target):
        value = _float(text, quoted=False)
        return 0.0 if value == 0 else value  # (numeric has no -0: `-0.0` is 0 before the cast)
    if pa.types.is_decimal(target):
        return _decimal(text, target)
    return _NOT_PLAIN


def _float(text: str, *, quoted: bool) -> float:
    """float8in's reading of a number: the nearest double, or PostgreSQL's 22003 where that
    overflows or underflows to zero. An unquoted number is a numeric first, which float8in reads
    as numeric_out writes it (positional digits)."""
    value = float(text)
    if math.isfinite(value) and (value != 0 or not any(c in "123456789" for c in text.lower().partition("e")[0])):
        return value
    written = text
    if not quoted and abs(Decimal(text).adjusted()) < 1000:
        written = f"{Decimal(text):f}"
    raise PgError("22003", f'"{written}" is out of range for type double precision')


def _decimal(text: str, target: pa.DataType) -> Any:
    try:
        value = Decimal(text)
    except ArithmeticError:
        return _NOT_PLAIN
    _, digits, exponent = value.as_tuple()
    if not isinstance(exponent, int) or -exponent > target.scale:
        return _NOT_PLAIN  # more fraction digits than the column keeps: PostgreSQL rounds
    whole = len(digits) + exponent
    if whole > target.precision - target.scale:
        return _NOT_PLAIN  # too big for the column: 22003, planned
    return value


def _string_constant(text: str, target: pa.DataType) -> Any:
    """A quoted string assigned to `target`, read as the type's input function reads it."""
    if pa.types.is_string(target) or pa.types.is_large_string(target):
        return text
    stripped = text.strip(" \t\n\r\f\v")
    if pa.types.is_integer(target):
        return int(stripped) if _INTEGER_TEXT.fullmatch(stripped) else _NOT_PLAIN
    if pa.types.is_boolean(target):
        value = _BOOL_TEXT.get(stripped.lower())
        return _NOT_PLAIN if value is None else value
    if pa.types.is_float64(target):
        if (word := _FLOAT_WORDS.get(stripped.lower())) is not None:
            return word
        return _float(stripped, quoted=True) if _NUMBER_TEXT.fullmatch(stripped) else _NOT_PLAIN
    if pa.types.is_decimal(target):
        return _decimal(stripped, target) if _NUMBER_TEXT.fullmatch(stripped) else _NOT_PLAIN
    if pa.types.is_date32(target) and (m := _ISO_DATE.fullmatch(stripped)):
        try:
            return datetime.date(*map(int, m.groups()))
        except ValueError:
            return _NOT_PLAIN  # (no such day: 22008, planned)
    if pa.types.is_timestamp(target) and target.tz is None and target.unit == "us" \
            and (m := _ISO_TIMESTAMP.fullmatch(stripped)):
        *fields, fraction = m.groups()
        try:
            return datetime.datetime(*map(int, fields), int((fraction or "0").ljust(6, "0")))
        except ValueError:
            return _NOT_PLAIN
    return _NOT_PLAIN
