"""apply_ddl against a real embedded lakehouse (pyiceberg SQL catalog on SQLite, local files)."""

import pyarrow as pa
import pytest
from pyiceberg.transforms import BucketTransform, DayTransform, IdentityTransform
from pyiceberg.types import DecimalType, DoubleType, IntegerType, ListType, LongType, StringType

from icegres.engine.catalog import DEFAULT_TABLE_PROPERTIES, Lakehouse
from icegres.engine.ddl import parse_ddl
from icegres.engine.ddl_apply import apply_ddl, iceberg_schema_for, partition_spec_for
from icegres.pg.errors import PgError

pytestmark = pytest.mark.unit

PATH = ["$user", "public"]


@pytest.fixture
def lake(tmp_path):
    return Lakehouse.embedded(tmp_path)


def run(lake, sql, path=PATH):
    return apply_ddl(lake, parse_ddl(sql), path)


def fails(lake, sql, path=PATH) -> PgError:
    with pytest.raises(PgError) as info:
        run(lake, sql, path)
    return info.value


def test_schemas(lake):
    assert run(lake, "CREATE SCHEMA s") == []
    assert lake.namespace_exists("s")
    assert fails(lake, "CREATE SCHEMA s").sqlstate == "42P06"
    assert run(lake, "CREATE SCHEMA IF NOT EXISTS s") == ['schema "s" already exists, skipping']
    run(lake, "CREATE TABLE s.t (a int)")
    error = fails(lake, "DROP SCHEMA s")
    assert (error.sqlstate, error.message) == ("2BP01", "cannot drop schema s because other objects depend on it")
    assert error.hint == "Use DROP ... CASCADE to drop the dependent objects too."
    assert error.detail == "table s.t depends on schema s"
    assert fails(lake, "DROP SCHEMA nope").sqlstate == "3F000"
    assert fails(lake, "DROP SCHEMA s, nope CASCADE").sqlstate == "3F000"
    assert lake.table_exists("s", "t")  # nothing dropped when one name fails
    assert run(lake, "DROP SCHEMA IF EXISTS nope, s CASCADE") == [
        'schema "nope" does not exist, skipping', "drop cascades to table s.t"]
    assert not lake.namespace_exists("s")
    run(lake, "CREATE SCHEMA e")
    assert run(lake, "DROP SCHEMA e") == []


def test_create_table_schema_spec_and_properties(lake):
    run(lake, "CREATE SCHEMA s")
    run(lake, "CREATE TABLE s.trips (id bigint PRIMARY KEY, pickup_ts timestamp NOT NULL, "
              "fare numeric(10,2), tags text[], \"Zone\" varchar(20)) "
              "WITH (partitioning = 'day(pickup_ts), bucket(16, id)', "
              "\"write.parquet.compression-codec\" = 'snappy', owner = 'ops')")
    table = lake.load_table("s", "trips")
    schema = table.schema()
    assert [(f.name, str(f.field_type), f.required) for f in schema.fields] == [
        ("id", "long", True), ("pickup_ts", "timestamp", True), ("fare", "decimal(10, 2)", False),
        ("tags", "list<string>", False), ("Zone", "string", False)]
    assert isinstance(schema.find_field("tags").field_type, ListType)
    assert schema.identifier_field_names() == {"id"}
    spec = table.spec()
    assert [(f.name, f.transform, schema.find_column_name(f.source_id)) for f in spec.fields] == [
        ("pickup_ts_day", DayTransform(), "pickup_ts"), ("id_bucket_16", BucketTransform(16), "id")]
    props = table.properties
    assert props["icegres.primary-key"] == "id"
    assert props["owner"] == "ops"
    assert props["write.parquet.compression-codec"] == "snappy"
    assert props["write.parquet.row-group-limit"] == DEFAULT_TABLE_PROPERTIES["write.parquet.row-group-limit"]


def test_create_table_names_and_notices(lake):
    # public does not exist as a namespace yet: it is created on demand.
    assert not lake.namespace_exists("public")
    assert run(lake, "CREATE TABLE t (a int)") == []
    assert lake.table_exists("public", "t")
    error = fails(lake, "CREATE TABLE t (a int)")
    assert (error.sqlstate, error.message) == ("42P07", 'relation "t" already exists')
    assert run(lake, "CREATE TABLE IF NOT EXISTS t (b int)") == ['relation "t" already exists, skipping']
    assert fails(lake, "CREATE TABLE nope.t (a int)").sqlstate == "3F000"
    error = fails(lake, "CREATE TABLE u (a int)", path=["$user", "nope"])
    assert (error.sqlstate, error.message) == ("3F000", "no schema has been selected to create in")
    run(lake, "CREATE SCHEMA s")
    run(lake, "CREATE TABLE u (a int)", path=["nope", "s", "public"])
    assert lake.table_exists("s", "u")
    error = fails(lake, "CREATE TABLE v (a int) WITH (partitioning = 'day(a)')")
    assert error.sqlstate == "42804"
    assert not lake.table_exists("public", "v")


def test_drop_table(lake):
    run(lake, "CREATE SCHEMA s")
    run(lake, "CREATE TABLE s.a (x int)")
    run(lake, "CREATE TABLE s.b (x int)")
    error = fails(lake, "DROP TABLE s.a, s.nope")
    assert (error.sqlstate, error.message) == ("42P01", 'table "s.nope" does not exist')
    assert lake.table_exists("s", "a")
    assert run(lake, "DROP TABLE IF EXISTS s.a, nope CASCADE") == ['table "nope" does not exist, skipping']
    assert not lake.table_exists("s", "a")
    # Unqualified: the search path is searched in order.
    assert run(lake, "DROP TABLE b", path=["public", "s"]) == []
    assert not lake.table_exists("s", "b")
    assert fails(lake, "DROP TABLE b").sqlstate == "42P01"


def test_alter_table_columns_in_one_commit(lake):
    run(lake, "CREATE TABLE t (id int PRIMARY KEY, f real NOT NULL, d numeric(10,2), s text, gone int)")
    before = len(lake.load_table("public", "t").metadata.metadata_log)
    run(lake, "ALTER TABLE t ADD COLUMN n bigint, ALTER id TYPE bigint, ALTER f TYPE double precision, "
              "ALTER d TYPE numeric(20,2), ALTER f DROP NOT NULL, DROP COLUMN gone, "
              "ALTER s TYPE varchar(5), SET (k = 'v', k2 = 'w')")
    table = lake.load_table("public", "t")
    assert len(table.metadata.metadata_log) == before + 1
    fields = {f.name: (f.field_type, f.required) for f in table.schema().fields}
    assert fields == {"id": (LongType(), True), "f": (DoubleType(), False),
                      "d": (DecimalType(20, 2), False), "s": (StringType(), False),
                      "n": (LongType(), False)}
    assert table.properties["k"] == "v"
    run(lake, "ALTER TABLE t RESET (k, never_set)")
    assert "k" not in lake.load_table("public", "t").properties
    assert lake.load_table("public", "t").properties["k2"] == "w"


def test_alter_table_errors_and_notices(lake):
    run(lake, "CREATE TABLE t (id int PRIMARY KEY, a int, b text, ts timestamp) "
              "WITH (partitioning = 'day(ts)')")
    cases = [
        ("ALTER TABLE t ADD a int", "42701", 'column "a" of relation "t" already exists'),
        ("ALTER TABLE t DROP nope", "42703", 'column "nope" of relation "t" does not exist'),
        ("ALTER TABLE t ALTER nope TYPE bigint", "42703", 'column "nope" of relation "t" does not exist'),
        ("ALTER TABLE t RENAME nope TO x", "42703", 'column "nope" does not exist'),
        ("ALTER TABLE t RENAME a TO b", "42701", 'column "b" of relation "t" already exists'),
        ("ALTER TABLE t ALTER b TYPE integer", "0A000",
         "cannot change column type from text to integer: Iceberg only allows widening"),
        ("ALTER TABLE t ALTER a TYPE smallint", None, None),  # int -> int: no change
        ("ALTER TABLE t ALTER id DROP NOT NULL", "42P16", 'column "id" is in a primary key'),
        ("ALTER TABLE t DROP ts", "0A000", None),
        ("ALTER TABLE nope ADD x int", "42P01", 'relation "nope" does not exist'),
        ("ALTER TABLE t RENAME TO t", "42P07", 'relation "t" already exists'),
    ]
    for sql, sqlstate, message in cases:
        if sqlstate is None:
            assert run(lake, sql) == []
            continue
        error = fails(lake, sql)
        assert error.sqlstate == sqlstate, sql
        if message:
            assert error.message == message
    assert run(lake, "ALTER TABLE t ADD COLUMN IF NOT EXISTS a int, DROP COLUMN IF EXISTS nope") == [
        'column "a" of relation "t" already exists, skipping',
        'column "nope" of relation "t" does not exist, skipping']
    assert run(lake, "ALTER TABLE IF EXISTS nope ADD x int") == ['relation "nope" does not exist, skipping']
    # A failed ALTER changed nothing.
    assert [f.name for f in lake.load_table("public", "t").schema().fields] == ["id", "a", "b", "ts"]


def test_not_null_column_without_a_default_needs_an_empty_table(lake):
    run(lake, "CREATE TABLE t (a int)")
    run(lake, "ALTER TABLE t ADD b int NOT NULL")
    assert lake.load_table("public", "t").schema().find_field("b").required
    table = lake.load_table("public", "t")
    table.append(pa.table({"a": pa.array([1], pa.int32()), "b": pa.array([2], pa.int32())},
                          schema=table.schema().as_arrow()))
    error = fails(lake, "ALTER TABLE t ADD c int NOT NULL")  # the row there would hold NULL
    assert error.sqlstate == "23502" and error.message == 'column "c" of relation "t" contains null values'
    run(lake, "ALTER TABLE t ADD c int")


def test_primary_key_follows_renames_and_drops(lake):
    run(lake, "CREATE TABLE t (a int, b int, c int, PRIMARY KEY (a, b))")
    table = lake.load_table("public", "t")
    assert table.properties["icegres.primary-key"] == "a,b"
    assert table.schema().identifier_field_names() == {"a", "b"}
    run(lake, "ALTER TABLE t RENAME a TO z")
    table = lake.load_table("public", "t")
    assert table.properties["icegres.primary-key"] == "z,b"
    assert table.schema().identifier_field_names() == {"z", "b"}
    run(lake, "ALTER TABLE t DROP b")
    table = lake.load_table("public", "t")
    assert "icegres.primary-key" not in table.properties
    assert table.schema().identifier_field_names() == set()
    run(lake, "ALTER TABLE t ALTER z DROP NOT NULL")
    assert not lake.load_table("public", "t").schema().find_field("z").required


def test_rename_table(lake):
    run(lake, "CREATE SCHEMA s")
    run(lake, "CREATE TABLE s.t (a int)")
    run(lake, "CREATE TABLE s.u (a int)")
    assert fails(lake, "ALTER TABLE s.t RENAME TO u").sqlstate == "42P07"
    run(lake, "ALTER TABLE t RENAME TO v", path=["s"])
    assert lake.table_exists("s", "v") and not lake.table_exists("s", "t")


def test_schema_and_spec_helpers_for_ctas():
    cmd = parse_ddl("CREATE TABLE t (id int PRIMARY KEY, name text, xs int[]) "
                    "WITH (partitioning = 'truncate(3, name), id')")
    schema = iceberg_schema_for(cmd.columns, cmd.primary_key)
    assert [f.field_id for f in schema.fields] == [1, 2, 3]
    assert schema.find_field("xs").field_type.element_type == IntegerType()
    assert schema.identifier_field_ids == [1]
    spec = partition_spec_for(schema, cmd.partitioning)
    assert [(f.name, f.source_id) for f in spec.fields] == [("name_trunc_3", 2), ("id", 1)]
    assert spec.fields[1].transform == IdentityTransform()
    ctas = parse_ddl("CREATE TABLE c WITH (partitioning = 'nope') AS SELECT 1 AS a")
    with pytest.raises(PgError) as info:
        partition_spec_for(schema, ctas.partitioning)
    assert info.value.sqlstate == "42703"
    with pytest.raises(PgError) as info:
        partition_spec_for(schema, parse_ddl(
            "CREATE TABLE c WITH (partitioning = 'bucket(4, xs)') AS SELECT 1").partitioning)
    assert info.value.sqlstate == "42804"
