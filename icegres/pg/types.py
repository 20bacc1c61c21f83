"""PostgreSQL's types: OIDs, names, sizes, and which PostgreSQL type an Arrow type is sent as."""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa

# --------------------------------------------------------------------------------------------------
# Types


@dataclass(frozen=True)
class PgType:
    oid: int
    name: str
    typlen: int  # bytes; -1 varlena, -2 C string
    array_oid: int  # 0 if none
    element_oid: int = 0  # for array types


BOOL = PgType(16, "bool", 1, 1000)
BYTEA = PgType(17, "bytea", -1, 1001)
CHAR = PgType(18, "char", 1, 1002)
NAME = PgType(19, "name", 64, 1003, 18)  # PostgreSQL lets name be subscripted as char[]
INT8 = PgType(20, "int8", 8, 1016)
INT2 = PgType(21, "int2", 2, 1005)
INT2VECTOR = PgType(22, "int2vector", -1, 1006, 21)
INT4 = PgType(23, "int4", 4, 1007)
REGPROC = PgType(24, "regproc", 4, 1008)
TEXT = PgType(25, "text", -1, 1009)
OID = PgType(26, "oid", 4, 1028)
XID = PgType(28, "xid", 4, 1011)
OIDVECTOR = PgType(30, "oidvector", -1, 1013, 26)
JSON = PgType(114, "json", -1, 199)
FLOAT4 = PgType(700, "float4", 4, 1021)
FLOAT8 = PgType(701, "float8", 8, 1022)
UNKNOWN = PgType(705, "unknown", -2, 0)
BPCHAR = PgType(1042, "bpchar", -1, 1014)
VARCHAR = PgType(1043, "varchar", -1, 1015)
DATE = PgType(1082, "date", 4, 1182)
TIME = PgType(1083, "time", 8, 1183)
TIMESTAMP = PgType(1114, "timestamp", 8, 1115)
TIMESTAMPTZ = PgType(1184, "timestamptz", 8, 1185)
INTERVAL = PgType(1186, "interval", 16, 1187)
TIMETZ = PgType(1266, "timetz", 12, 1270)
NUMERIC = PgType(1700, "numeric", -1, 1231)
REGCLASS = PgType(2205, "regclass", 4, 2210)
REGTYPE = PgType(2206, "regtype", 4, 2211)
CSTRING = PgType(2275, "cstring", -2, 1263)
RECORD = PgType(2249, "record", -1, 2287)
VOID = PgType(2278, "void", 4, 0)
UUID = PgType(2950, "uuid", 16, 2951)
JSONB = PgType(3802, "jsonb", -1, 3807)

_SCALAR_TYPES = (
    BOOL,
    BYTEA,
    CHAR,
    NAME,
    INT8,
    INT2,
    INT2VECTOR,
    INT4,
    REGPROC,
    TEXT,
    OID,
    XID,
    OIDVECTOR,
    JSON,
    FLOAT4,
    FLOAT8,
    UNKNOWN,
    BPCHAR,
    VARCHAR,
    DATE,
    TIME,
    TIMESTAMP,
    TIMESTAMPTZ,
    INTERVAL,
    TIMETZ,
    NUMERIC,
    REGCLASS,
    REGTYPE,
    CSTRING,
    RECORD,
    VOID,
    UUID,
    JSONB,
)


def _array_type(elem: PgType) -> PgType:
    # PostgreSQL names array types after their element with a leading underscore (_int4).
    return PgType(elem.array_oid, "_" + elem.name, -1, 0, elem.oid)


_TYPES_BY_OID: dict[int, PgType] = {t.oid: t for t in _SCALAR_TYPES}
_TYPES_BY_OID.update({t.array_oid: _array_type(t) for t in _SCALAR_TYPES if t.array_oid})


def pg_type_by_oid(oid: int) -> PgType | None:
    return _TYPES_BY_OID.get(oid)


def _is_array(t: PgType) -> bool:
    """A true array type (_int4, ...): name, int2vector and oidvector also have an element type."""
    return t.name.startswith("_")


def _element_type(array_type: PgType) -> PgType:
    return _TYPES_BY_OID[array_type.element_oid]


def _storage(dt: pa.DataType) -> pa.DataType:
    """The type whose values we render: extension types by their storage, dictionaries by value."""
    if isinstance(dt, pa.BaseExtensionType) and not _is_uuid_type(dt):
        return _storage(dt.storage_type)
    if pa.types.is_dictionary(dt):
        return _storage(dt.value_type)
    return dt


def _is_uuid_type(dt: pa.DataType) -> bool:
    return isinstance(dt, pa.BaseExtensionType) and dt.extension_name == "arrow.uuid"


def pg_type_for_arrow(dt: pa.DataType) -> PgType:
    """The PostgreSQL type a column of Arrow type `dt` is announced and rendered as.

    Unsigned integers widen to the next signed type (uint64 to numeric) so every value fits. Types
    with no PostgreSQL counterpart (struct, map) are rendered as json text. Anything unknown is text.
    """
    if _is_uuid_type(dt):
        return UUID
    if isinstance(dt, pa.BaseExtensionType) and dt.extension_name == "arrow.json":
        return JSON  # its storage is the JSON text
    dt = _storage(dt)
    t = pa.types
    if t.is_boolean(dt):
        return BOOL
    if t.is_int8(dt) or t.is_int16(dt) or t.is_uint8(dt):
        return INT2
    if t.is_int32(dt) or t.is_uint16(dt):
        return INT4
    if t.is_int64(dt) or t.is_uint32(dt):
        return INT8
    if t.is_uint64(dt) or t.is_decimal(dt):
        return NUMERIC
    if t.is_float16(dt) or t.is_float32(dt):
        return FLOAT4
    if t.is_float64(dt):
        return FLOAT8
    if t.is_string(dt) or t.is_large_string(dt) or t.is_string_view(dt) or t.is_null(dt):
        return TEXT
    if t.is_fixed_size_binary(dt) and dt.byte_width == 16:
        return UUID
    if (
        t.is_binary(dt)
        or t.is_large_binary(dt)
        or t.is_binary_view(dt)
        or t.is_fixed_size_binary(dt)
    ):
        return BYTEA
    if t.is_date(dt):
        return DATE
    if t.is_time(dt):
        return TIME
    if t.is_timestamp(dt):
        return TIMESTAMPTZ if dt.tz is not None else TIMESTAMP
    if t.is_duration(dt) or dt == pa.month_day_nano_interval():
        return INTERVAL
    if _is_list_type(dt):
        elem = pg_type_for_arrow(dt.value_type)
        # A list of lists is a multidimensional PostgreSQL array of the same array type.
        return elem if _is_array(elem) else _TYPES_BY_OID[elem.array_oid]
    if t.is_struct(dt) or t.is_map(dt):
        return JSON
    return TEXT


def _is_list_type(dt: pa.DataType) -> bool:
    t = pa.types
    return bool(
        t.is_list(dt)
        or t.is_large_list(dt)
        or t.is_fixed_size_list(dt)
        or t.is_list_view(dt)
        or t.is_large_list_view(dt)
    )


# Parameter types. numeric maps to decimal128(38, 10): exact for the values clients actually bind
# (money, ids, ratios) and comparable with Iceberg decimal columns, where float64 would silently
# round. Values needing more than 28 integer or 10 fractional digits are the binder's problem: it
# gets the exact Decimal from decode_param. uuid maps to its fixed_size_binary(16) storage because
# DataFusion sees extension types only as their storage.
_ARROW_FOR_OID: dict[int, pa.DataType] = {
    BOOL.oid: pa.bool_(),
    INT2.oid: pa.int16(),
    INT4.oid: pa.int32(),
    INT8.oid: pa.int64(),
    OID.oid: pa.int64(),
    XID.oid: pa.int64(),
    REGPROC.oid: pa.int64(),
    REGCLASS.oid: pa.string(),  # bound as a name ('pg_class') or an OID string; the catalog resolves it
    REGTYPE.oid: pa.string(),
    FLOAT4.oid: pa.float32(),
    FLOAT8.oid: pa.float64(),
    NUMERIC.oid: pa.decimal128(38, 10),
    TEXT.oid: pa.string(),
    VARCHAR.oid: pa.string(),
    BPCHAR.oid: pa.string(),
    NAME.oid: pa.string(),
    CHAR.oid: pa.string(),
    UNKNOWN.oid: pa.string(),
    CSTRING.oid: pa.string(),
    JSON.oid: pa.string(),
    JSONB.oid: pa.string(),
    BYTEA.oid: pa.binary(),
    DATE.oid: pa.date32(),
    TIME.oid: pa.time64("us"),
    TIMETZ.oid: pa.time64("us"),  # Arrow has no time with zone; decode_param keeps the offset
    TIMESTAMP.oid: pa.timestamp("us"),
    TIMESTAMPTZ.oid: pa.timestamp("us", tz="UTC"),
    INTERVAL.oid: pa.month_day_nano_interval(),
    UUID.oid: pa.binary(16),
}


def arrow_type_for_oid(oid: int) -> pa.DataType | None:
    """The Arrow type a Bind parameter of PostgreSQL type `oid` becomes; None if icegres has none."""
    if oid in _ARROW_FOR_OID:
        return _ARROW_FOR_OID[oid]
    t = _TYPES_BY_OID.get(oid)
    if t is not None and _is_array(t) and t.element_oid in _ARROW_FOR_OID:
        return pa.list_(_ARROW_FOR_OID[t.element_oid])
    return None
