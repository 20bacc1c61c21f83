"""PostgreSQL column types -> the Iceberg types icegres stores them as (docs/types.md is this table).

Pure: it reads sqlglot's parse of a type and returns a `ColumnType`, plain data naming the Iceberg
type. Building pyiceberg type objects is left to `ddl_apply`, which owns field ids.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlglot import exp

from icegres.pg import errors as e
from icegres.pg.chars import BPCHAR_OID, LENGTH_MAX, VARCHAR_OID, CharType
from icegres.pg.errors import PgError

# Iceberg's decimal is stored in at most 16 bytes: precision 38 is the bound.
ICEBERG_DECIMAL_PRECISION_MAX = 38
# PostgreSQL's own bound on numeric precision, checked before Iceberg's so the error matches PG's.
PG_NUMERIC_PRECISION_MAX = 1000
# Iceberg timestamps and times are microseconds; PostgreSQL's precision bound is the same.
PG_TIME_PRECISION_MAX = 6

DOCS_HINT = "docs/types.md lists the types icegres tables can store."


@dataclass(frozen=True)
class ColumnType:
    """A PostgreSQL type the lake can store: `pg_name` as PostgreSQL's format_type spells it, and
    the Iceberg type (`kind` is an Iceberg primitive name or "list")."""

    pg_name: str
    kind: str
    precision: int | None = None
    scale: int | None = None
    element: ColumnType | None = None
    # varchar(n), char(n), bpchar: the PostgreSQL type the table keeps beside Iceberg's string
    char: CharType | None = None

    @property
    def iceberg_name(self) -> str:
        if self.kind == "decimal":
            return f"decimal({self.precision}, {self.scale})"
        if self.kind == "list":
            assert self.element is not None
            return f"list<{self.element.iceberg_name}>"
        return self.kind


# sqlglot type -> (PostgreSQL name, Iceberg primitive) for the types with no parameters that matter.
_SIMPLE: dict[exp.DataType.Type, tuple[str, str]] = {
    exp.DataType.Type.BOOLEAN: ("boolean", "boolean"),
    exp.DataType.Type.SMALLINT: ("smallint", "int"),
    exp.DataType.Type.INT: ("integer", "int"),
    exp.DataType.Type.BIGINT: ("bigint", "long"),
    exp.DataType.Type.FLOAT: ("real", "float"),
    exp.DataType.Type.TEXT: ("text", "string"),
    exp.DataType.Type.NAME: ("name", "string"),
    exp.DataType.Type.VARBINARY: ("bytea", "binary"),
    exp.DataType.Type.DATE: ("date", "date"),
    exp.DataType.Type.UUID: ("uuid", "uuid"),
    exp.DataType.Type.JSON: ("json", "string"),
    exp.DataType.Type.JSONB: ("jsonb", "string"),
}

_TIMES: dict[exp.DataType.Type, tuple[str, str]] = {
    exp.DataType.Type.TIME: ("time without time zone", "time"),
    exp.DataType.Type.TIMESTAMP: ("timestamp without time zone", "timestamp"),
    exp.DataType.Type.TIMESTAMPTZ: ("timestamp with time zone", "timestamptz"),
}

_SERIAL_HINT = ("Iceberg has no sequences: declare the column integer or bigint and supply its "
                "values in INSERT.")
# Types PostgreSQL has and the lake cannot store, with what to do instead.
_UNSUPPORTED: dict[str, str] = {
    "interval": "Iceberg has no interval type: store a bigint of microseconds, or two timestamps.",
    "serial": _SERIAL_HINT,
    "bigserial": _SERIAL_HINT,
    "smallserial": _SERIAL_HINT,
    "serial2": _SERIAL_HINT,
    "serial4": _SERIAL_HINT,
    "serial8": _SERIAL_HINT,
    "money": "Use numeric(p,s) for amounts.",
    "time with time zone": "Iceberg has no time with time zone: use time, or timestamp with time zone.",
}
_AS_TEXT_HINT = f"Store the value as text. {DOCS_HINT}"

_PG_SPELLING = {"timetz": "time with time zone", "varbinary": "bytea"}


def column_type(dt: exp.Expression) -> ColumnType:
    """The lake type for a parsed PostgreSQL type; PgError 0A000 if the lake cannot store it."""
    if not isinstance(dt, exp.DataType):
        raise _unsupported(dt.sql(dialect="postgres").lower())
    t = dt.this
    if t == exp.DataType.Type.ARRAY:
        (inner,) = dt.expressions
        # PostgreSQL treats int[][] as int[] (arrays are rectangular, any rank); the lake stores a
        # list of lists, which is what a two-dimensional value needs.
        element = column_type(inner)
        return ColumnType(element.pg_name + "[]", "list", element=element)
    params = _int_params(dt)
    if t in _SIMPLE:
        if params:
            raise _unsupported(_type_name(dt))
        pg, kind = _SIMPLE[t]
        return ColumnType(pg, kind)
    if t in (exp.DataType.Type.VARCHAR, exp.DataType.Type.CHAR, exp.DataType.Type.BPCHAR):
        base = "character varying" if t == exp.DataType.Type.VARCHAR else "character"
        if len(params) > 1:
            raise PgError(e.SYNTAX_ERROR, f"syntax error in type {base}")
        if params and params[0] < 1:
            raise PgError(e.INVALID_PARAMETER_VALUE, f"length for type {_short(base)} must be at least 1")
        if params and params[0] > LENGTH_MAX:
            raise PgError(e.INVALID_PARAMETER_VALUE, f"length for type {_short(base)} cannot exceed {LENGTH_MAX}")
        if t == exp.DataType.Type.VARCHAR:
            char = CharType(VARCHAR_OID, params[0] if params else None)
        elif t == exp.DataType.Type.BPCHAR and not params:
            char = CharType(BPCHAR_OID, None)
        else:
            char = CharType(BPCHAR_OID, params[0] if params else 1)  # char is char(1)
        return ColumnType(char.name, "string", char=char)
    if t == exp.DataType.Type.DOUBLE:
        # float(p): PostgreSQL picks real for p <= 24 and double precision for 25..53.
        if not params:
            return ColumnType("double precision", "double")
        (p,) = params
        if p < 1:
            raise PgError(e.INVALID_PARAMETER_VALUE, "precision for type float must be at least 1 bit")
        if p > 53:
            raise PgError(e.INVALID_PARAMETER_VALUE, "precision for type float must be less than 54 bits")
        return ColumnType("real", "float") if p <= 24 else ColumnType("double precision", "double")
    if t == exp.DataType.Type.DECIMAL:
        return _decimal(params)
    if t in _TIMES:
        if len(params) > 1 or (params and not 0 <= params[0] <= PG_TIME_PRECISION_MAX):
            raise PgError(e.INVALID_PARAMETER_VALUE,
                          f"{_TIMES[t][0]} precision must be between 0 and {PG_TIME_PRECISION_MAX}")
        pg, kind = _TIMES[t]
        return ColumnType(pg, kind)
    raise _unsupported(_type_name(dt))


def _decimal(params: list[int]) -> ColumnType:
    hint = ("Iceberg decimals are bounded: declare numeric(p,s) with 1 <= p <= 38 and 0 <= s <= p, "
            "or use double precision.")
    if not params:
        raise PgError(e.FEATURE_NOT_SUPPORTED, "numeric without precision and scale is not supported",
                      hint=hint)
    if len(params) > 2:
        raise PgError(e.SYNTAX_ERROR, "invalid NUMERIC type modifier")
    precision, scale = params[0], params[1] if len(params) == 2 else 0
    if not 1 <= precision <= PG_NUMERIC_PRECISION_MAX:
        raise PgError(e.INVALID_PARAMETER_VALUE,
                      f"NUMERIC precision {precision} must be between 1 and {PG_NUMERIC_PRECISION_MAX}")
    if precision > ICEBERG_DECIMAL_PRECISION_MAX:
        raise PgError(e.FEATURE_NOT_SUPPORTED,
                      f"numeric precision {precision} exceeds the Iceberg maximum of "
                      f"{ICEBERG_DECIMAL_PRECISION_MAX}", hint=hint)
    if not 0 <= scale <= precision:
        raise PgError(e.FEATURE_NOT_SUPPORTED,
                      f"numeric scale {scale} is not supported for precision {precision}", hint=hint)
    return ColumnType(f"numeric({precision},{scale})", "decimal", precision, scale)


def _int_params(dt: exp.DataType) -> list[int]:
    out = []
    for param in dt.expressions:
        if isinstance(param, exp.DataTypeParam) and isinstance(param.this, exp.Literal) \
                and not param.this.is_string:
            try:
                out.append(int(param.this.this))
                continue
            except ValueError:
                pass
        if isinstance(param, exp.DataTypeParam) and isinstance(param.this, exp.Neg):
            inner = param.this.this
            if isinstance(inner, exp.Literal) and inner.this.isdigit():
                out.append(-int(inner.this))
                continue
        raise PgError(e.SYNTAX_ERROR, f'invalid type modifier "{param.sql(dialect="postgres")}"')
    return out


def _type_name(dt: exp.DataType) -> str:
    if dt.this == exp.DataType.Type.USERDEFINED:
        return str(dt.args["kind"].sql(dialect="postgres"))
    if dt.this == exp.DataType.Type.INTERVAL or isinstance(dt.this, exp.Interval):
        return "interval"
    name = exp.DataType(this=dt.this).sql(dialect="postgres").lower()
    return _PG_SPELLING.get(name, name)


def _short(base: str) -> str:
    return "varchar" if base == "character varying" else "char"


def _unsupported(name: str) -> PgError:
    """0A000 for a PostgreSQL type the lake cannot store; 42704 for a name that is no type."""
    from icegres.engine.pg_builtins import BUILTIN_TYPES

    bare = name.lower().removeprefix("pg_catalog.").strip('"').removesuffix("[]")
    if bare.split("(")[0].strip() not in _KNOWN_NAMES and bare.split("(")[0].strip() not in {
            t.typname for t in BUILTIN_TYPES.values()}:
        return PgError(e.UNDEFINED_OBJECT, f'type "{name}" does not exist')
    hint = _UNSUPPORTED.get(name.lower(), _AS_TEXT_HINT)
    return PgError(e.FEATURE_NOT_SUPPORTED, f'type "{name}" is not supported in icegres tables', hint=hint)


# Spellings of built-in types that are not their typname (format_type's and SQL's keywords).
_KNOWN_NAMES = frozenset({
    "bit varying", "character varying", "character", "double precision", "time with time zone",
    "time without time zone", "timestamp with time zone", "timestamp without time zone", "decimal",
    "smallint", "integer", "int", "bigint", "real", "float", "boolean", "serial", "bigserial",
    "smallserial", "serial2", "serial4", "serial8", "dec", "varchar", "char", "nchar",
    "national character", "timestamptz", "timetz",
})


# Iceberg primitive -> PostgreSQL format_type spelling, for messages about existing columns.
_ICEBERG_TO_PG = {
    "boolean": "boolean",
    "int": "integer",
    "long": "bigint",
    "float": "real",
    "double": "double precision",
    "string": "text",
    "binary": "bytea",
    "date": "date",
    "time": "time without time zone",
    "timestamp": "timestamp without time zone",
    "timestamptz": "timestamp with time zone",
    "timestamp_ns": "timestamp without time zone",
    "timestamptz_ns": "timestamp with time zone",
    "uuid": "uuid",
}


def pg_name_of(iceberg_type: object) -> str:
    """PostgreSQL's name for an Iceberg type (from its str()), for error messages."""
    text = str(iceberg_type)
    if text in _ICEBERG_TO_PG:
        return _ICEBERG_TO_PG[text]
    if text.startswith("decimal(") and text.endswith(")"):
        return "numeric(" + text[len("decimal("):-1].replace(" ", "") + ")"
    if text.startswith("list<") and text.endswith(">"):
        return pg_name_of(text[len("list<"):-1]) + "[]"
    return text
