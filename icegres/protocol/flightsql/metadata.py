"""Flight SQL metadata beyond the catalog listing: keys, XDBC type info and SQL capabilities.

Pure data and pure functions over Arrow: the service fetches the rows (catalog calls, in a worker
thread) and these build the result batches. The schemas are the ones the reference servers (C++
`SqlSchema`, Go `schema_ref`) declare, nullability included: clients check them exactly.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from icegres.protocol.flightsql import icegres_flight_sql_metadata_pb2 as meta
from icegres.protocol.flightsql import messages as M

# --- schemas -----------------------------------------------------------------------------------

# FlightSql.proto's comment lists key_name before key_sequence; both reference implementations
# (C++ SqlSchema::GetPrimaryKeysSchema, Go schema_ref.PrimaryKeys) put key_sequence first, and
# their clients compare against those, so we follow the implementations.
PRIMARY_KEYS_SCHEMA = pa.schema([
    pa.field("catalog_name", pa.string()),
    pa.field("db_schema_name", pa.string()),
    pa.field("table_name", pa.string(), nullable=False),
    pa.field("column_name", pa.string(), nullable=False),
    pa.field("key_sequence", pa.int32(), nullable=False),
    pa.field("key_name", pa.string()),
])

# GetImportedKeys, GetExportedKeys and GetCrossReference share one schema.
KEYS_SCHEMA = pa.schema([
    pa.field("pk_catalog_name", pa.string()),
    pa.field("pk_db_schema_name", pa.string()),
    pa.field("pk_table_name", pa.string(), nullable=False),
    pa.field("pk_column_name", pa.string(), nullable=False),
    pa.field("fk_catalog_name", pa.string()),
    pa.field("fk_db_schema_name", pa.string()),
    pa.field("fk_table_name", pa.string(), nullable=False),
    pa.field("fk_column_name", pa.string(), nullable=False),
    pa.field("key_sequence", pa.int32(), nullable=False),
    pa.field("fk_key_name", pa.string()),
    pa.field("pk_key_name", pa.string()),
    pa.field("update_rule", pa.uint8(), nullable=False),
    pa.field("delete_rule", pa.uint8(), nullable=False),
])

XDBC_TYPE_INFO_SCHEMA = pa.schema([
    pa.field("type_name", pa.string(), nullable=False),
    pa.field("data_type", pa.int32(), nullable=False),
    pa.field("column_size", pa.int32()),
    pa.field("literal_prefix", pa.string()),
    pa.field("literal_suffix", pa.string()),
    pa.field("create_params", pa.list_(pa.field("item", pa.string(), nullable=False))),
    pa.field("nullable", pa.int32(), nullable=False),
    pa.field("case_sensitive", pa.bool_(), nullable=False),
    pa.field("searchable", pa.int32(), nullable=False),
    pa.field("unsigned_attribute", pa.bool_()),
    pa.field("fixed_prec_scale", pa.bool_(), nullable=False),
    pa.field("auto_increment", pa.bool_()),
    pa.field("local_type_name", pa.string()),
    pa.field("minimum_scale", pa.int32()),
    pa.field("maximum_scale", pa.int32()),
    pa.field("sql_data_type", pa.int32(), nullable=False),
    pa.field("datetime_subcode", pa.int32()),
    pa.field("num_prec_radix", pa.int32()),
    pa.field("interval_precision", pa.int32()),
])

KEY_COMMANDS = (meta.CommandGetExportedKeys, meta.CommandGetImportedKeys, meta.CommandGetCrossReference)
COMMANDS = (meta.CommandGetXdbcTypeInfo, meta.CommandGetPrimaryKeys, *KEY_COMMANDS)


def schema_of(command: Any) -> pa.Schema | None:
    """The result schema of one of this module's commands; None for any other command."""
    if isinstance(command, meta.CommandGetPrimaryKeys):
        return PRIMARY_KEYS_SCHEMA
    if isinstance(command, KEY_COMMANDS):
        return KEYS_SCHEMA
    if isinstance(command, meta.CommandGetXdbcTypeInfo):
        return XDBC_TYPE_INFO_SCHEMA
    return None


# --- primary keys ------------------------------------------------------------------------------

def primary_keys_batch(database: str, rows: Iterable[Mapping[str, Any]],
                       command: meta.CommandGetPrimaryKeys) -> pa.RecordBatch:
    """GetPrimaryKeys' result from information_schema.key_column_usage rows (table_schema,
    table_name, column_name, ordinal_position, constraint_name) — the key declared by the table
    property `icegres.primary-key`. Catalog and schema, when given, match exactly (not patterns);
    rows are ordered by schema, table, key name and key sequence."""
    if command.HasField("catalog") and command.catalog != database:
        return pa.RecordBatch.from_pylist([], schema=PRIMARY_KEYS_SCHEMA)
    out = [
        {"catalog_name": database, "db_schema_name": r["table_schema"], "table_name": r["table_name"],
         "column_name": r["column_name"], "key_sequence": int(r["ordinal_position"]),
         "key_name": r["constraint_name"]}
        for r in rows
        if r["table_name"] == command.table
        and (not command.HasField("db_schema") or r["table_schema"] == command.db_schema)
    ]
    out.sort(key=lambda r: (r["db_schema_name"], r["table_name"], r["key_name"], r["key_sequence"]))
    return pa.RecordBatch.from_pylist(out, schema=PRIMARY_KEYS_SCHEMA)


def empty_keys_batch() -> pa.RecordBatch:
    """Imported/exported keys and cross references: Iceberg tables have no foreign keys."""
    return pa.RecordBatch.from_pylist([], schema=KEYS_SCHEMA)


# --- XDBC type info ----------------------------------------------------------------------------

# XdbcDataType and XdbcDatetimeSubcode values (FlightSql.proto).
XDBC_BIT, XDBC_SMALLINT, XDBC_INTEGER, XDBC_BIGINT = -7, 5, 4, -5
XDBC_REAL, XDBC_DOUBLE, XDBC_NUMERIC = 7, 8, 2
XDBC_VARCHAR, XDBC_VARBINARY = 12, -3
XDBC_DATETIME, XDBC_DATE, XDBC_TIME, XDBC_TIMESTAMP = 9, 91, 92, 93
SUBCODE_DATE, SUBCODE_TIME, SUBCODE_TIMESTAMP, SUBCODE_TIMESTAMP_TZ = 1, 2, 3, 5
NULLABLE = 1  # Nullable.NULLABILITY_NULLABLE
SEARCHABLE_BASIC, SEARCHABLE_FULL = 2, 3  # Searchable: BASIC = any operator but LIKE


@dataclass(frozen=True)
class XdbcType:
    """One row of GetXdbcTypeInfo: a column type `CREATE TABLE` accepts and the lake stores."""

    type_name: str
    data_type: int
    column_size: int | None = None
    literal_prefix: str | None = None
    literal_suffix: str | None = None
    create_params: tuple[str, ...] | None = None
    case_sensitive: bool = False
    searchable: int = SEARCHABLE_BASIC
    unsigned_attribute: bool | None = None
    fixed_prec_scale: bool = False
    minimum_scale: int | None = None
    maximum_scale: int | None = None
    datetime_subcode: int | None = None
    num_prec_radix: int | None = None

    @property
    def sql_data_type(self) -> int:
        # ODBC's SQL_DESC_TYPE: the datetime types share SQL_DATETIME and differ by subcode.
        return XDBC_DATETIME if self.datetime_subcode is not None else self.data_type

    def row(self) -> dict[str, Any]:
        return {
            "type_name": self.type_name, "data_type": self.data_type, "column_size": self.column_size,
            "literal_prefix": self.literal_prefix, "literal_suffix": self.literal_suffix,
            "create_params": list(self.create_params) if self.create_params is not None else None,
            "nullable": NULLABLE, "case_sensitive": self.case_sensitive, "searchable": self.searchable,
            "unsigned_attribute": self.unsigned_attribute, "fixed_prec_scale": self.fixed_prec_scale,
            # Iceberg has no sequences, hence no auto-increment column of any type.
            "auto_increment": False if self.num_prec_radix is not None else None,
            "local_type_name": self.type_name, "minimum_scale": self.minimum_scale,
            "maximum_scale": self.maximum_scale, "sql_data_type": self.sql_data_type,
            "datetime_subcode": self.datetime_subcode, "num_prec_radix": self.num_prec_radix,
            "interval_precision": None,
        }


# The PostgreSQL spellings icegres's CREATE TABLE maps onto Iceberg types (engine/pg_types.py),
# with PostgreSQL's sizes: decimal precision up to Iceberg's 38, timestamps in microseconds.
XDBC_TYPES: tuple[XdbcType, ...] = (
    XdbcType("boolean", XDBC_BIT, 1),
    XdbcType("smallint", XDBC_SMALLINT, 5, unsigned_attribute=False, num_prec_radix=10),
    XdbcType("integer", XDBC_INTEGER, 10, unsigned_attribute=False, num_prec_radix=10),
    XdbcType("bigint", XDBC_BIGINT, 19, unsigned_attribute=False, num_prec_radix=10),
    XdbcType("real", XDBC_REAL, 24, unsigned_attribute=False, num_prec_radix=2),
    XdbcType("double precision", XDBC_DOUBLE, 53, unsigned_attribute=False, num_prec_radix=2),
    XdbcType("numeric", XDBC_NUMERIC, 38, create_params=("precision", "scale"),
             unsigned_attribute=False, fixed_prec_scale=True, minimum_scale=0, maximum_scale=38,
             num_prec_radix=10),
    XdbcType("text", XDBC_VARCHAR, None, "'", "'", case_sensitive=True, searchable=SEARCHABLE_FULL),
    XdbcType("varchar", XDBC_VARCHAR, None, "'", "'", create_params=("length",), case_sensitive=True,
             searchable=SEARCHABLE_FULL),
    XdbcType("bytea", XDBC_VARBINARY, None, "'\\x", "'"),
    XdbcType("date", XDBC_DATE, 10, "DATE '", "'", datetime_subcode=SUBCODE_DATE),
    XdbcType("time", XDBC_TIME, 15, "TIME '", "'", datetime_subcode=SUBCODE_TIME),
    XdbcType("timestamp", XDBC_TIMESTAMP, 26, "TIMESTAMP '", "'", datetime_subcode=SUBCODE_TIMESTAMP),
    XdbcType("timestamp with time zone", XDBC_TIMESTAMP, 32, "TIMESTAMPTZ '", "'",
             datetime_subcode=SUBCODE_TIMESTAMP_TZ),
)


def xdbc_type_info_batch(command: meta.CommandGetXdbcTypeInfo,
                         types: Iterable[XdbcType] = XDBC_TYPES) -> pa.RecordBatch:
    """GetXdbcTypeInfo's result, ordered by data_type then type_name; only `data_type` when given."""
    chosen = [t for t in types if not command.HasField("data_type") or t.data_type == command.data_type]
    chosen.sort(key=lambda t: (t.data_type, t.type_name))
    return pa.RecordBatch.from_pylist([t.row() for t in chosen], schema=XDBC_TYPE_INFO_SCHEMA)


# --- SqlInfo: SQL capabilities -----------------------------------------------------------------

# Each function below was checked against the engine (tests/unit/test_flightsql_metadata.py
# runs every one of them), so a client can rely on the list.
NUMERIC_FUNCTIONS = (
    "abs", "acos", "asin", "atan", "atan2", "cbrt", "ceil", "ceiling", "cos", "cot", "degrees",
    "exp", "factorial", "floor", "gcd", "lcm", "ln", "log", "log10", "mod", "pi", "power",
    "radians", "random", "round", "sin", "sqrt", "tan", "trunc",
)
STRING_FUNCTIONS = (
    "ascii", "btrim", "char_length", "character_length", "chr", "concat", "concat_ws", "encode",
    "initcap", "left", "length", "lower", "lpad", "ltrim", "md5", "octet_length", "overlay",
    "position", "regexp_match", "regexp_replace", "repeat", "replace", "reverse", "right", "rpad",
    "rtrim", "sha256", "split_part", "starts_with", "strpos", "substr", "substring", "to_hex",
    "translate", "trim", "upper",
)
DATETIME_FUNCTIONS = (
    "current_date", "current_time", "current_timestamp", "date_bin", "date_part", "date_trunc",
    "extract", "make_date", "now", "to_char", "to_timestamp",
)
SYSTEM_FUNCTIONS = (
    "coalesce", "current_database", "current_schema", "current_setting", "current_user",
    "greatest", "has_table_privilege", "least", "nullif", "pg_backend_pid", "session_user",
    "user", "version",
)
# SQL_KEYWORDS lists keywords that are not SQL:2003 keywords: the PostgreSQL extensions the
# parser accepts.
KEYWORDS = ("ilike", "limit", "offset")

# SqlSupportedSubqueries / SqlSupportedUnions / SqlSupportedGroupBy bits.
_SUBQUERIES = (1 << 0) | (1 << 1) | (1 << 2)  # in comparisons, EXISTS, IN (not quantified)
_UNIONS = (1 << 0) | (1 << 1)  # UNION, UNION ALL
_GROUP_BY = (1 << 0) | (1 << 1)  # unrelated, beyond select

SQL_CAPABILITIES: dict[int, M.SqlInfoValue] = {
    508: list(KEYWORDS),  # SQL_KEYWORDS
    509: list(NUMERIC_FUNCTIONS),  # SQL_NUMERIC_FUNCTIONS
    510: list(STRING_FUNCTIONS),  # SQL_STRING_FUNCTIONS
    511: list(SYSTEM_FUNCTIONS),  # SQL_SYSTEM_FUNCTIONS
    512: list(DATETIME_FUNCTIONS),  # SQL_DATETIME_FUNCTIONS
    513: "\\",  # SQL_SEARCH_STRING_ESCAPE: LIKE's default escape, as in PostgreSQL
    514: "",  # SQL_EXTRA_NAME_CHARACTERS: none beyond letters, digits and _
    515: True,  # SQL_SUPPORTS_COLUMN_ALIASING
    516: True,  # SQL_NULL_PLUS_NULL_IS_NULL
    518: True,  # SQL_SUPPORTS_TABLE_CORRELATION_NAMES
    519: False,  # SQL_SUPPORTS_DIFFERENT_TABLE_CORRELATION_NAMES
    520: True,  # SQL_SUPPORTS_EXPRESSIONS_IN_ORDER_BY
    521: True,  # SQL_SUPPORTS_ORDER_BY_UNRELATED
    522: M.Int32(_GROUP_BY),  # SQL_SUPPORTED_GROUP_BY
    523: True,  # SQL_SUPPORTS_LIKE_ESCAPE_CLAUSE
    524: True,  # SQL_SUPPORTS_NON_NULLABLE_COLUMNS: NOT NULL maps to Iceberg's required fields
    528: M.Int32(2),  # SQL_OUTER_JOINS_SUPPORT_LEVEL: full outer joins
    529: "schema",  # SQL_SCHEMA_TERM
    530: "procedure",  # SQL_PROCEDURE_TERM (there are none)
    531: "database",  # SQL_CATALOG_TERM
    532: True,  # SQL_CATALOG_AT_START: catalog.schema.table
    533: M.Int32(0),  # SQL_SCHEMAS_SUPPORTED_ACTIONS: no procedures, indexes or privileges
    534: M.Int32(0),  # SQL_CATALOGS_SUPPORTED_ACTIONS
    535: M.Int32(0),  # SQL_SUPPORTED_POSITIONED_COMMANDS: no cursors' positioned DML
    536: False,  # SQL_SELECT_FOR_UPDATE_SUPPORTED
    537: False,  # SQL_STORED_PROCEDURES_SUPPORTED
    538: M.Int32(_SUBQUERIES),  # SQL_SUPPORTED_SUBQUERIES
    539: True,  # SQL_CORRELATED_SUBQUERIES_SUPPORTED
    540: M.Int32(_UNIONS),  # SQL_SUPPORTED_UNIONS
    574: False,  # SQL_NAMED_PARAMETERS_SUPPORTED: positional $n only
    576: False,  # SQL_STORED_FUNCTIONS_USING_CALL_SYNTAX_SUPPORTED
}


def sql_info_values(server_values: Mapping[int, M.SqlInfoValue]) -> dict[int, M.SqlInfoValue]:
    """Everything GetSqlInfo reports: the capabilities above, under the service's own values
    (server identity, transactions, read-only, ...), which win where both name an id."""
    return {**SQL_CAPABILITIES, **server_values}
