"""Flight SQL keys, XDBC type info and SQL capabilities: exact schemas, filters, honest values."""

from __future__ import annotations

import pyarrow as pa
import pytest

from icegres.engine.catalog import Lakehouse
from icegres.engine.lake import Engine, SessionEnv
from icegres.engine.query import open_session
from icegres.protocol.flightsql import icegres_flight_sql_metadata_pb2 as meta
from icegres.protocol.flightsql import messages as M
from icegres.protocol.flightsql import metadata
from icegres.sql.statement import query

pytestmark = pytest.mark.unit


def _fields(schema: pa.Schema) -> list[tuple[str, str, bool]]:
    return [(f.name, str(f.type), f.nullable) for f in schema]


# The schemas as the Go Flight SQL package (arrow-go flightsql/schema_ref), which the ADBC driver
# is built on, declares them: a second statement, written out rather than derived.
GO_PRIMARY_KEYS = [
    ("catalog_name", "string", True), ("db_schema_name", "string", True),
    ("table_name", "string", False), ("column_name", "string", False),
    ("key_sequence", "int32", False), ("key_name", "string", True),
]
GO_KEYS = [
    ("pk_catalog_name", "string", True), ("pk_db_schema_name", "string", True),
    ("pk_table_name", "string", False), ("pk_column_name", "string", False),
    ("fk_catalog_name", "string", True), ("fk_db_schema_name", "string", True),
    ("fk_table_name", "string", False), ("fk_column_name", "string", False),
    ("key_sequence", "int32", False), ("fk_key_name", "string", True), ("pk_key_name", "string", True),
    ("update_rule", "uint8", False), ("delete_rule", "uint8", False),
]
GO_XDBC = [
    ("type_name", "string", False), ("data_type", "int32", False), ("column_size", "int32", True),
    ("literal_prefix", "string", True), ("literal_suffix", "string", True),
    ("create_params", "list<item: string not null>", True), ("nullable", "int32", False),
    ("case_sensitive", "bool", False), ("searchable", "int32", False),
    ("unsigned_attribute", "bool", True), ("fixed_prec_scale", "bool", False),
    ("auto_increment", "bool", True), ("local_type_name", "string", True),
    ("minimum_scale", "int32", True), ("maximum_scale", "int32", True),
    ("sql_data_type", "int32", False), ("datetime_subcode", "int32", True),
    ("num_prec_radix", "int32", True), ("interval_precision", "int32", True),
]


def test_schemas_are_the_reference_ones_nullability_included():
    assert _fields(metadata.PRIMARY_KEYS_SCHEMA) == GO_PRIMARY_KEYS
    assert _fields(metadata.KEYS_SCHEMA) == GO_KEYS
    assert _fields(metadata.XDBC_TYPE_INFO_SCHEMA) == GO_XDBC
    assert not metadata.XDBC_TYPE_INFO_SCHEMA.field("create_params").type.value_field.nullable
    for cls in metadata.KEY_COMMANDS:
        assert metadata.schema_of(cls()) is metadata.KEYS_SCHEMA
        assert metadata.empty_keys_batch().schema.equals(metadata.KEYS_SCHEMA)


def test_commands_decode_from_their_upstream_type_urls():
    for message in (meta.CommandGetPrimaryKeys(catalog="icegres", db_schema="demo", table="t"),
                    meta.CommandGetXdbcTypeInfo(data_type=12), meta.CommandGetXdbcTypeInfo(),
                    meta.CommandGetExportedKeys(table="t"), meta.CommandGetImportedKeys(table="t"),
                    meta.CommandGetCrossReference(pk_table="a", fk_table="b", fk_db_schema="s")):
        packed = M.pack_any(message)
        assert b"arrow.flight.protocol.sql." + message.DESCRIPTOR.name.encode() in packed
        assert M.decode_command(packed) == message


def test_xdbc_type_info_rows_ordered_and_filtered():
    batch = metadata.xdbc_type_info_batch(meta.CommandGetXdbcTypeInfo())
    assert batch.schema.equals(metadata.XDBC_TYPE_INFO_SCHEMA)
    rows = batch.to_pylist()
    keys = [(r["data_type"], r["type_name"]) for r in rows]
    assert keys == sorted(keys) and len(set(keys)) == len(keys)
    by_name = {r["type_name"]: r for r in rows}
    assert by_name["bigint"]["data_type"] == -5 and by_name["bigint"]["column_size"] == 19
    assert by_name["numeric"]["create_params"] == ["precision", "scale"]
    assert by_name["numeric"]["maximum_scale"] == 38  # Iceberg's decimal bound
    assert by_name["date"]["sql_data_type"] == 9 and by_name["date"]["datetime_subcode"] == 1
    assert by_name["timestamp with time zone"]["datetime_subcode"] == 5
    assert all(r["nullable"] == 1 and r["auto_increment"] in (False, None) for r in rows)
    only = metadata.xdbc_type_info_batch(meta.CommandGetXdbcTypeInfo(data_type=12)).to_pylist()
    assert sorted(r["type_name"] for r in only) == ["text", "varchar"]
    assert metadata.xdbc_type_info_batch(meta.CommandGetXdbcTypeInfo(data_type=1234)).num_rows == 0


def test_primary_keys_from_key_column_usage_rows():
    rows = [
        {"table_schema": "s", "table_name": "t", "column_name": "b", "ordinal_position": 2, "constraint_name": "t_pkey"},
        {"table_schema": "s", "table_name": "t", "column_name": "a", "ordinal_position": 1, "constraint_name": "t_pkey"},
        {"table_schema": "other", "table_name": "t", "column_name": "id", "ordinal_position": 1, "constraint_name": "t_pkey"},
        {"table_schema": "s", "table_name": "u", "column_name": "id", "ordinal_position": 1, "constraint_name": "u_pkey"},
    ]
    got = metadata.primary_keys_batch("icegres", rows, meta.CommandGetPrimaryKeys(db_schema="s", table="t"))
    assert got.schema.equals(metadata.PRIMARY_KEYS_SCHEMA)
    assert got.to_pylist() == [
        {"catalog_name": "icegres", "db_schema_name": "s", "table_name": "t", "column_name": "a",
         "key_sequence": 1, "key_name": "t_pkey"},
        {"catalog_name": "icegres", "db_schema_name": "s", "table_name": "t", "column_name": "b",
         "key_sequence": 2, "key_name": "t_pkey"},
    ]
    any_schema = metadata.primary_keys_batch("icegres", rows, meta.CommandGetPrimaryKeys(table="t"))
    assert [r["db_schema_name"] for r in any_schema.to_pylist()] == ["other", "s", "s"]
    other_catalog = meta.CommandGetPrimaryKeys(catalog="elsewhere", table="t")
    assert metadata.primary_keys_batch("icegres", rows, other_catalog).num_rows == 0


def test_sql_info_service_values_win_and_every_value_encodes():
    values = metadata.sql_info_values({504: '"', 8: M.Int32(0)})
    assert values[504] == '"' and values[8] == M.Int32(0)
    batch = M.sql_info_batch(values, [])
    assert batch.schema.equals(M.SQL_INFO_SCHEMA)
    got = dict(zip(batch.column(0).to_pylist(), batch.column(1).to_pylist(), strict=True))
    assert got[509] == list(metadata.NUMERIC_FUNCTIONS)
    assert got[522] == 3 and got[528] == 2
    assert set(metadata.SQL_CAPABILITIES) <= set(got)


@pytest.fixture
def engine_session(tmp_path):
    lake = Lakehouse.embedded(tmp_path)
    lake.create_namespace_if_missing("demo")
    table = lake.catalog.create_table(("demo", "t"), schema=pa.schema([pa.field("id", pa.int64())]))
    table.append(pa.table({"id": [1, 2, 3]}))
    engine = Engine(lake)
    engine.refresh()
    return open_session(engine, SessionEnv("icegres", "icegres", 1, {"search_path": "demo"}))


# One call per listed function: what GetSqlInfo promises, the engine runs.
CALLS = {
    "abs": "abs(-1)", "acos": "acos(0.5)", "asin": "asin(0.5)", "atan": "atan(1)", "atan2": "atan2(1, 1)",
    "cbrt": "cbrt(8)", "ceil": "ceil(1.5)", "ceiling": "ceiling(1.5)", "cos": "cos(1)", "cot": "cot(1)",
    "degrees": "degrees(1)", "exp": "exp(1)", "factorial": "factorial(3)", "floor": "floor(1.5)",
    "gcd": "gcd(4, 6)", "lcm": "lcm(4, 6)", "ln": "ln(2)", "log": "log(2)", "log10": "log10(2)",
    "mod": "mod(5, 2)", "pi": "pi()", "power": "power(2, 3)", "radians": "radians(1)", "random": "random()",
    "round": "round(1.5)", "sin": "sin(1)", "sqrt": "sqrt(4)", "tan": "tan(1)", "trunc": "trunc(1.5)",
    "ascii": "ascii('a')", "btrim": "btrim(' a ')", "char_length": "char_length('a')",
    "character_length": "character_length('a')", "chr": "chr(65)", "concat": "concat('a', 'b')",
    "concat_ws": "concat_ws(',', 'a', 'b')", "encode": "encode('a', 'hex')", "initcap": "initcap('ab')",
    "left": "left('abc', 1)", "length": "length('a')", "lower": "lower('A')", "lpad": "lpad('a', 3)",
    "ltrim": "ltrim(' a')", "md5": "md5('a')", "octet_length": "octet_length('a')",
    "overlay": "overlay('abc' placing 'x' from 2)", "position": "position('b' in 'abc')",
    "regexp_match": "regexp_match('a', 'a')", "regexp_replace": "regexp_replace('a', 'a', 'b')",
    "repeat": "repeat('a', 2)", "replace": "replace('abc', 'b', 'x')", "reverse": "reverse('abc')",
    "right": "right('abc', 1)", "rpad": "rpad('a', 3)", "rtrim": "rtrim('a ')", "sha256": "sha256('a')",
    "split_part": "split_part('a,b', ',', 1)", "starts_with": "starts_with('ab', 'a')",
    "strpos": "strpos('ab', 'b')", "substr": "substr('abc', 1, 2)",
    "substring": "substring('abc' from 1 for 2)", "to_hex": "to_hex(10)",
    "translate": "translate('abc', 'a', 'x')", "trim": "trim(' a ')", "upper": "upper('a')",
    "current_date": "current_date", "current_time": "current_time", "current_timestamp": "current_timestamp",
    "date_bin": "date_bin(interval '1 hour', now())", "date_part": "date_part('year', now())",
    "date_trunc": "date_trunc('day', now())", "extract": "extract(year from now())",
    "make_date": "make_date(2020, 1, 1)", "now": "now()", "to_char": "to_char(now(), 'YYYY')",
    "to_timestamp": "to_timestamp(0)",
    "coalesce": "coalesce(null, 1)", "current_database": "current_database()",
    "current_schema": "current_schema()", "current_setting": "current_setting('search_path')",
    "current_user": "current_user", "greatest": "greatest(1, 2)",
    "has_table_privilege": "has_table_privilege('demo.t', 'select')", "least": "least(1, 2)",
    "nullif": "nullif(1, 1)", "pg_backend_pid": "pg_backend_pid()", "session_user": "session_user",
    "user": "user", "version": "version()",
}


def _rows(batches) -> int:
    return sum((b if isinstance(b, pa.RecordBatch) else b.to_pyarrow()).num_rows for b in batches)


def test_every_listed_function_runs_on_the_engine(engine_session):
    listed = (*metadata.NUMERIC_FUNCTIONS, *metadata.STRING_FUNCTIONS, *metadata.DATETIME_FUNCTIONS,
              *metadata.SYSTEM_FUNCTIONS)
    assert set(listed) == set(CALLS)
    for name in listed:
        _, batches = engine_session.start(query(f"select {CALLS[name]} from demo.t limit 1"), None)
        assert _rows(batches) == 1, name
    for keyword, text in (("ilike", "select id from demo.t where 'A' ilike 'a'"),
                          ("limit", "select id from demo.t limit 1"),
                          ("offset", "select id from demo.t order by id offset 2")):
        assert keyword in metadata.KEYWORDS
        _, batches = engine_session.start(query(text), None)
        assert _rows(batches) >= 1, keyword
