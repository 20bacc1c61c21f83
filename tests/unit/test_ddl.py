"""parse_ddl: every statement form, every refusal. Pure: no catalog."""

import pytest

from icegres.engine.ddl import (
    AddColumn,
    AlterColumnType,
    AlterTable,
    ColumnDef,
    CommentColumn,
    CreateSchema,
    CreateTable,
    CreateTableAs,
    DropColumn,
    DropNotNull,
    DropSchema,
    DropTable,
    PartitionField,
    RenameColumn,
    RenameTable,
    ResetProperties,
    SetProperties,
    parse_ddl,
)
from icegres.engine.ddl_commands import (
    AddCheck,
    CheckDef,
    CreateView,
    DropConstraint,
    DropView,
    RenameView,
    SetDefault,
    command_tag,
)
from icegres.engine.ddl_options import parse_partitioning
from icegres.engine.pg_types import ColumnType, pg_name_of
from icegres.pg.errors import PgError

pytestmark = pytest.mark.unit

INT = ColumnType("integer", "int")
BIGINT = ColumnType("bigint", "long")


def err(sql: str) -> PgError:
    with pytest.raises(PgError) as info:
        parse_ddl(sql)
    return info.value


def col(sql_type: str) -> ColumnDef:
    cmd = parse_ddl(f"CREATE TABLE t (c {sql_type})")
    assert isinstance(cmd, CreateTable)
    return cmd.columns[0]


# --- schemas


def test_create_schema():
    assert parse_ddl("CREATE SCHEMA s") == CreateSchema("s")
    assert parse_ddl("create schema if not exists \"My S\";") == CreateSchema("My S", True)
    assert parse_ddl("CREATE SCHEMA Sales") == CreateSchema("sales")


@pytest.mark.parametrize("sql,sqlstate", [
    ("CREATE SCHEMA s AUTHORIZATION bob", "0A000"),
    ("CREATE SCHEMA AUTHORIZATION bob", "0A000"),
    ("CREATE SCHEMA s CREATE TABLE t (a int)", "0A000"),
    ("CREATE SCHEMA pg_mine", "42939"),
    ("CREATE SCHEMA", "42601"),
    ("CREATE SCHEMA s t", "42601"),
    ("CREATE SCHEMA select", "42601"),
])
def test_create_schema_errors(sql, sqlstate):
    assert err(sql).sqlstate == sqlstate


def test_drop_schema():
    assert parse_ddl("DROP SCHEMA s") == DropSchema(("s",))
    assert parse_ddl("DROP SCHEMA IF EXISTS a, \"B\" CASCADE") == DropSchema(("a", "B"), True, True)
    assert parse_ddl("DROP SCHEMA a RESTRICT") == DropSchema(("a",))
    assert err("DROP SCHEMA a.b").sqlstate == "42601"
    assert err("DROP SCHEMA a CASCADE RESTRICT").sqlstate == "42601"


# --- CREATE TABLE


def test_create_table_every_type():
    cmd = parse_ddl(
        'CREATE TABLE IF NOT EXISTS s.t (id bigint PRIMARY KEY, "Name" varchar(10) NOT NULL, '
        "x numeric(10,2) DEFAULT NULL, y int[], z int ARRAY, ts timestamp with time zone, "
        "t2 time without time zone, d double precision, c character varying(3), ch char(3), "
        "u uuid, j jsonb, b bytea, r real, sm int2, nm name, bp bpchar, bo boolean, dt date) "
        "WITH (partitioning = 'day(ts), bucket(16, id)', \"write.format.default\" = 'parquet', "
        "foo = 3, write.x.y = -1, flag)")
    assert isinstance(cmd, CreateTable)
    assert (cmd.schema, cmd.name, cmd.if_not_exists) == ("s", "t", True)
    kinds = {c.name: (c.type.pg_name, c.type.iceberg_name, c.not_null) for c in cmd.columns}
    assert kinds == {
        "id": ("bigint", "long", True),
        "Name": ("character varying(10)", "string", True),
        "x": ("numeric(10,2)", "decimal(10, 2)", False),
        "y": ("integer[]", "list<int>", False),
        "z": ("integer[]", "list<int>", False),
        "ts": ("timestamp with time zone", "timestamptz", False),
        "t2": ("time without time zone", "time", False),
        "d": ("double precision", "double", False),
        "c": ("character varying(3)", "string", False),
        "ch": ("character(3)", "string", False),
        "u": ("uuid", "uuid", False),
        "j": ("jsonb", "string", False),
        "b": ("bytea", "binary", False),
        "r": ("real", "float", False),
        "sm": ("smallint", "int", False),
        "nm": ("name", "string", False),
        "bp": ("bpchar", "string", False),
        "bo": ("boolean", "boolean", False),
        "dt": ("date", "date", False),
    }
    assert cmd.partitioning == (PartitionField("day", "ts"), PartitionField("bucket", "id", 16))
    assert cmd.properties == {"write.format.default": "parquet", "foo": "3", "write.x.y": "-1",
                              "flag": "true"}
    assert cmd.primary_key == ("id",)
    assert command_tag(cmd) == "CREATE TABLE"


@pytest.mark.parametrize("sql_type,pg,iceberg", [
    ("int", "integer", "int"), ("int4", "integer", "int"), ("integer", "integer", "int"),
    ("int8", "bigint", "long"), ("float4", "real", "float"), ("float8", "double precision", "double"),
    ("float", "double precision", "double"), ("float(24)", "real", "float"),
    ("float(25)", "double precision", "double"), ("decimal(38, 0)", "numeric(38,0)", "decimal(38, 0)"),
    ("numeric(5)", "numeric(5,0)", "decimal(5, 0)"), ("text", "text", "string"),
    ("varchar", "character varying", "string"), ("character(2)", "character(2)", "string"),
    ("json", "json", "string"), ("timestamp", "timestamp without time zone", "timestamp"),
    ("timestamp(3)", "timestamp without time zone", "timestamp"),
    ("timestamptz", "timestamp with time zone", "timestamptz"), ("time", "time without time zone", "time"),
    ("bool", "boolean", "boolean"), ("text[][]", "text[][]", "list<list<string>>"),
    ("numeric(12,2)[]", "numeric(12,2)[]", "list<decimal(12, 2)>"),
])
def test_type_mapping(sql_type, pg, iceberg):
    c = col(sql_type)
    assert (c.type.pg_name, c.type.iceberg_name) == (pg, iceberg)


@pytest.mark.parametrize("sql_type,sqlstate,needle", [
    ("numeric", "0A000", "numeric without precision"),
    ("decimal", "0A000", "numeric without precision"),
    ("numeric(39,2)", "0A000", "exceeds the Iceberg maximum of 38"),
    ("numeric(1001)", "22023", "must be between 1 and 1000"),
    ("numeric(5,6)", "0A000", "scale 6"),
    ("float(60)", "22023", "less than 54 bits"),
    ("timestamp(7)", "22023", "precision must be between 0 and 6"),
    ("interval", "0A000", '"interval"'),
    ("interval day", "0A000", '"interval"'),
    ("money", "0A000", '"money"'),
    ("inet", "0A000", '"inet"'),
    ("cidr", "0A000", '"cidr"'),
    ("xml", "0A000", '"xml"'),
    ("point", "0A000", '"point"'),
    ("polygon", "0A000", '"polygon"'),
    ("mood", "42704", 'type "mood" does not exist'),  # no CREATE TYPE here: never a type
    ("public.mood", "42704", 'type "public.mood" does not exist'),
    ("time with time zone", "0A000", '"time with time zone"'),
    ("oid", "0A000", '"oid"'),
])
def test_unsupported_types(sql_type, sqlstate, needle):
    error = err(f"CREATE TABLE t (c {sql_type})")
    assert error.sqlstate == sqlstate
    assert needle in error.message
    if sqlstate == "0A000":
        assert error.hint


def test_constraints():
    cmd = parse_ddl("CREATE TABLE t (a int NOT NULL, b int NULL, c int DEFAULT NULL, "
                    'd text COLLATE "C", e int CONSTRAINT nn NOT NULL)')
    assert [c.not_null for c in cmd.columns] == [True, False, False, False, True]
    assert cmd.primary_key == ()


def test_primary_keys():
    table_level = parse_ddl("CREATE TABLE t (a int, b text, PRIMARY KEY (b, a))")
    assert table_level.primary_key == ("b", "a")
    assert all(c.not_null for c in table_level.columns)
    named = parse_ddl("CREATE TABLE t (a int, CONSTRAINT t_pk PRIMARY KEY (a))")
    assert named.primary_key == ("a",)
    assert parse_ddl('CREATE TABLE t ("A" int PRIMARY KEY)').primary_key == ("A",)


def test_check_constraints_are_read_in_the_order_written():
    cmd = parse_ddl("CREATE TABLE t (a int CHECK (a > 0), b text CONSTRAINT short CHECK (length(b) < 5), "
                    "CHECK (a < b::int), CONSTRAINT named CHECK (a <> 3) NO INHERIT)")
    assert cmd.checks == (CheckDef(None, "a > 0", "a"), CheckDef("short", "length(b) < 5", "b"),
                          CheckDef(None, "a < CAST(b AS INT)"), CheckDef("named", "a <> 3"))
    assert parse_ddl("ALTER TABLE t ADD CONSTRAINT c CHECK (a > 0) NOT VALID") == AlterTable(
        None, "t", (AddCheck(CheckDef("c", "a > 0", not_valid=True)),))
    assert parse_ddl("ALTER TABLE t ADD CHECK (a > 0)") == AlterTable(None, "t", (AddCheck(CheckDef(None, "a > 0")),))
    assert parse_ddl("ALTER TABLE t DROP CONSTRAINT IF EXISTS c CASCADE") == AlterTable(
        None, "t", (DropConstraint("c", True),))


@pytest.mark.parametrize("sql,sqlstate,needle", [
    ("CREATE TABLE t (a int CHECK (a > (SELECT 1)))", "0A000", "subquery"),
    ("CREATE TABLE t (a int CHECK (count(*) > 0))", "42803", "aggregate"),
    ("CREATE TABLE t (a int, CHECK (a > 0) NOT NULL)", "42601", '"NULL"'),
    ("CREATE TABLE t (a int, CHECK ())", "42601", '")"'),
    ("CREATE TABLE t (a int UNIQUE)", "0A000", "UNIQUE"),
    ("CREATE TABLE t (a int REFERENCES u (id))", "0A000", "FOREIGN KEY"),
    ("CREATE TABLE t (a int, UNIQUE (a))", "0A000", "UNIQUE"),
    ("CREATE TABLE t (a int, FOREIGN KEY (a) REFERENCES u (id))", "0A000", "FOREIGN KEY"),
    ("CREATE TABLE t (a int, EXCLUDE USING gist (a WITH =))", "0A000", "EXCLUDE"),
    ("CREATE TABLE t (a int DEFAULT b)", "0A000", "column reference in DEFAULT"),
    ("CREATE TABLE t (a int DEFAULT (select 1))", "0A000", "subquery in DEFAULT"),
    ("CREATE TABLE t (a int DEFAULT max(1))", "42803", "aggregate functions are not allowed"),
    ("CREATE TABLE t (a text GENERATED ALWAYS AS IDENTITY)", "22023", "identity column type"),
    ("CREATE TABLE t (a int DEFAULT 1 GENERATED ALWAYS AS IDENTITY)", "42601", "both default and identity"),
    ("CREATE TABLE t (a int GENERATED ALWAYS AS (1) STORED)", "0A000", "generated"),
    ('CREATE TABLE t (a text COLLATE "de_DE")', "0A000", "collation"),
    ("CREATE TABLE t (a int NOT NULL NULL)", "42601", "conflicting NULL/NOT NULL"),
    ("CREATE TABLE t (a int PRIMARY KEY, b int PRIMARY KEY)", "42P16", "multiple primary keys"),
    ("CREATE TABLE t (a int PRIMARY KEY, PRIMARY KEY (a))", "42P16", "multiple primary keys"),
    ("CREATE TABLE t (a int, PRIMARY KEY (b))", "42703", 'column "b" named in key does not exist'),
    ("CREATE TABLE t (a int, PRIMARY KEY (a, a))", "42701", "appears twice"),
    ("CREATE TABLE t (a real PRIMARY KEY)", "0A000", "primary key column"),
    ("CREATE TABLE t (a int, a text)", "42701", 'column "a" specified more than once'),
    ("CREATE TABLE t (a int, PRIMARY KEY (a) INCLUDE (a))", "0A000", "index parameters"),
    ("CREATE TABLE t (LIKE u)", "0A000", "LIKE"),
])
def test_constraint_errors(sql, sqlstate, needle):
    error = err(sql)
    assert error.sqlstate == sqlstate
    assert needle in error.message


@pytest.mark.parametrize("sql,message,position", [
    ("CREATE TABLE t (a int, )", 'syntax error at or near ")"', 24),
    ("CREATE TABLE t (a)", 'syntax error at or near ")"', 18),
    ("CREATE TABLE t (a int foo)", 'syntax error at or near "foo"', 23),
    ("CREATE TABLE t (select int)", 'syntax error at or near "select"', 17),
    ("CREATE TABLE t (a int", "syntax error at end of input", None),
    ("CREATE TABLE t (a int[)", "syntax error at end of input", None),
    ("CREATE TABLE (a int)", 'syntax error at or near "("', 14),
    ('CREATE TABLE "" (a int)', 'zero-length delimited identifier at or near """"', 14),
    ("CREATE TABLE t (a int) garbage", 'syntax error at or near "garbage"', 24),
    ("CREATE TABLE t (a int); SELECT 1", 'syntax error at or near ";"', 23),
    ("DROP TABLE", "syntax error at end of input", None),
    ("SELECT 1", 'syntax error at or near "SELECT"', 1),
    ("CREATE TABLE 't' (a int)", "syntax error at or near \"'t'\"", 14),
    ("CREATE TABLE t (a 'int')", None, None),
    ("CREATE TABLE t (a int) WITH (x = )", 'syntax error at or near ")"', 34),
    ("CREATE TABLE t (a int) WITH (x 'y')", "syntax error at or near \"'y'\"", 32),
    ("CREATE TABLE t (a int) WITH ()", 'syntax error at or near ")"', 30),
    ("CREATE TABLE t (a 'unterminated)", None, None),
])
def test_syntax_errors(sql, message, position):
    error = err(sql)
    assert error.sqlstate == "42601"
    if message is not None:
        assert error.message == message
    if position is not None:
        assert error.position == position


@pytest.mark.parametrize("sql,needle", [
    ("CREATE TEMP TABLE t (a int) ON COMMIT DROP", "ON COMMIT DELETE ROWS / DROP"),
    ("CREATE TEMPORARY TABLE t (a int) ON COMMIT DELETE ROWS", "ON COMMIT DELETE ROWS / DROP"),
    ("CREATE UNLOGGED TABLE t (a int)", "UNLOGGED"),
    ("CREATE TABLE t (a int) PARTITION BY RANGE (a)", "PARTITION BY"),
    ("CREATE TABLE t (a int) INHERITS (u)", "inheritance"),
    ("CREATE TABLE t (a int) TABLESPACE x", "TABLESPACE"),
    ("CREATE TABLE t (a int) USING heap", "access methods"),
    ("CREATE TABLE t (a int) WITH OIDS", "OIDS"),
    ("CREATE TABLE t PARTITION OF u FOR VALUES IN (1)", "OF"),
    ("CREATE TABLE a.b.c (x int)", "cross-database"),
    ("CREATE UNIQUE INDEX i ON t (a)", "CREATE UNIQUE INDEX"),
    ("CREATE INDEX i ON t ((a + 1))", "expression indexes"),
    ("CREATE INDEX i ON t (a) WHERE a > 0", "WHERE"),
    ("CREATE INDEX i ON t USING gin (a)", "gin"),
    ("CREATE OR REPLACE FUNCTION f() RETURNS int AS 'select 1'", "OR REPLACE FUNCTION"),
    ("CREATE MATERIALIZED VIEW m AS SELECT 1", "MATERIALIZED VIEW"),
    ("CREATE TEMP VIEW v AS SELECT 1", "TEMPORARY VIEW"),
    ("CREATE RECURSIVE VIEW v (n) AS SELECT 1", "RECURSIVE VIEW"),
    ("CREATE VIEW v WITH (security_barrier) AS SELECT 1", "view option security_barrier"),
    ("CREATE VIEW v AS SELECT a FROM t WITH CHECK OPTION", "CHECK OPTION"),
    ("CREATE VIEW v AS SELECT a FROM t WITH LOCAL CHECK OPTION", "CHECK OPTION"),
    ("ALTER VIEW v OWNER TO x", "ALTER VIEW ... OWNER"),
    ("ALTER VIEW v RENAME COLUMN a TO b", "RENAME COLUMN"),
    ("CREATE TABLE t AS EXECUTE p", "EXECUTE"),
])
def test_unsupported_statements(sql, needle):
    error = err(sql)
    assert error.sqlstate == "0A000"
    assert needle in error.message


@pytest.mark.parametrize("sql,cmd", [
    ("CREATE VIEW v AS SELECT 1", CreateView(None, "v", "SELECT 1")),
    ("create or replace view Demo.V (a, \"B\") as select x, y from t;",
     CreateView("demo", "v", "select x, y from t", ("a", "B"), True)),
    ("CREATE VIEW v AS TABLE demo.t", CreateView(None, "v", "SELECT * FROM demo.t")),
    ("CREATE VIEW v AS WITH c AS (SELECT 1) SELECT * FROM c",
     CreateView(None, "v", "WITH c AS (SELECT 1) SELECT * FROM c")),
    ("DROP VIEW v", DropView(((None, "v"),))),
    ("DROP VIEW IF EXISTS a, s.b CASCADE", DropView(((None, "a"), ("s", "b")), True, True)),
    ("DROP VIEW v RESTRICT", DropView(((None, "v"),))),
    ("ALTER VIEW v RENAME TO w", RenameView(None, "v", "w")),
    ("ALTER VIEW IF EXISTS s.v RENAME TO w", RenameView("s", "v", "w", True)),
])
def test_view_statements(sql, cmd):
    assert parse_ddl(sql) == cmd


@pytest.mark.parametrize("sql", [
    "CREATE VIEW v", "CREATE VIEW v AS", "CREATE VIEW v AS 1", "CREATE VIEW (a) AS SELECT 1",
    "DROP VIEW", "DROP VIEW v,", "ALTER VIEW v RENAME TO", "CREATE VIEW v (a,) AS SELECT 1",
])
def test_view_syntax_errors(sql):
    assert err(sql).sqlstate == "42601"


def test_on_commit_needs_temporary():
    assert err("CREATE TABLE t (a int) ON COMMIT DROP").sqlstate == "42P16"


def test_create_table_options():
    cmd = parse_ddl("CREATE TABLE t (a int) WITHOUT OIDS")
    assert cmd.properties == {}
    cmd = parse_ddl("CREATE TABLE t () WITH (A = On, \"K\" = 'V', n = +5)")
    assert cmd.columns == ()
    assert cmd.properties == {"a": "on", "K": "V", "n": "5"}


# --- partitioning


@pytest.mark.parametrize("text,fields", [
    ("region", (PartitionField("identity", "region"),)),
    ("identity(region)", (PartitionField("identity", "region"),)),
    ('"Region"', (PartitionField("identity", "Region"),)),
    ("year(ts), month(ts), day(ts), hour(ts)",
     tuple(PartitionField(t, "ts") for t in ("year", "month", "day", "hour"))),
    ("days(ts)", (PartitionField("day", "ts"),)),
    ("bucket(16, id), truncate(4, name)",
     (PartitionField("bucket", "id", 16), PartitionField("truncate", "name", 4))),
    ("bucket(id, 8)", (PartitionField("bucket", "id", 8),)),
    ("", ()),
])
def test_partitioning(text, fields):
    assert parse_partitioning(text) == fields


@pytest.mark.parametrize("text,sqlstate", [
    ("foo(a)", "42601"), ("day(a, b)", "42601"), ("bucket(a)", "42601"), ("bucket(0, a)", "22023"),
    ("bucket(x, a)", "42601"), ("day(a", "42601"), ("a b", "42601"), ("a,", "42601"),
    ("a, a", "42601"), ("'a'", "42601"), ("bucket(1.5, a)", "42601"),
])
def test_partitioning_errors(text, sqlstate):
    with pytest.raises(PgError) as info:
        parse_partitioning(text)
    assert info.value.sqlstate == sqlstate


def test_partition_column_must_exist():
    error = err("CREATE TABLE t (a int) WITH (partitioning = 'day(b)')")
    assert (error.sqlstate, error.message) == ("42703", 'column "b" named in partition key does not exist')
    assert err("CREATE TABLE t (a int) WITH (partitioning = 'nope(a)')").sqlstate == "42601"


@pytest.mark.parametrize("sql", [
    "CREATE TABLE t (a int) WITH (\"write.parquet.page-row-limit\" = 'many')",
    "ALTER TABLE t SET (\"write.parquet.row-group-limit\" = 'x1')",
])
def test_writer_settings_must_be_integers(sql):
    error = err(sql)
    assert error.sqlstate == "22023" and error.message.startswith("invalid value for integer option")


def test_writer_settings_must_be_positive():
    error = err("ALTER TABLE t SET (\"write.parquet.page-row-limit\" = '0')")
    assert (error.sqlstate, error.message) == (
        "22023", 'value 0 out of bounds for option "write.parquet.page-row-limit"')
    assert parse_ddl("CREATE TABLE t (a int) WITH (\"write.parquet.page-row-limit\" = 1000)").properties == {
        "write.parquet.page-row-limit": "1000"}


# --- CREATE TABLE AS


def test_create_table_as():
    assert parse_ddl("CREATE TABLE s.t AS SELECT 1 AS a;") == CreateTableAs("s", "t", "SELECT 1 AS a")
    cmd = parse_ddl("CREATE TABLE IF NOT EXISTS t (a, b) WITH (partitioning = 'a', k = 'v') "
                    "AS SELECT x, y FROM u WHERE x > 'WITH NO DATA' WITH NO DATA")
    assert cmd == CreateTableAs(None, "t", "SELECT x, y FROM u WHERE x > 'WITH NO DATA'", True,
                                (PartitionField("identity", "a"),), {"k": "v"}, ("a", "b"), False)
    assert parse_ddl("CREATE TABLE t AS SELECT 1 WITH DATA").query_sql == "SELECT 1"
    assert parse_ddl("CREATE TABLE t AS TABLE s.u").query_sql == "SELECT * FROM s.u"
    assert parse_ddl("CREATE TABLE t AS (SELECT 1)").query_sql == "(SELECT 1)"
    assert parse_ddl("CREATE TABLE t AS VALUES (1)").query_sql == "VALUES (1)"
    with_cte = "WITH x AS (SELECT 1 AS a) SELECT * FROM x"
    assert parse_ddl(f"CREATE TABLE t AS {with_cte}").query_sql == with_cte
    assert command_tag(cmd, 42) == "SELECT 42"


@pytest.mark.parametrize("sql", [
    "CREATE TABLE t AS", "CREATE TABLE t AS WITH NO DATA", "CREATE TABLE t AS DELETE FROM u",
    "CREATE TABLE t (a, b AS SELECT 1",
])
def test_create_table_as_errors(sql):
    assert err(sql).sqlstate == "42601"


# --- DROP TABLE


def test_drop_table():
    assert parse_ddl("DROP TABLE t") == DropTable(((None, "t"),))
    assert parse_ddl('DROP TABLE IF EXISTS a, s."B" CASCADE') == DropTable(((None, "a"), ("s", "B")), True, True)
    assert parse_ddl("DROP TABLE a RESTRICT") == DropTable(((None, "a"),))
    assert command_tag(parse_ddl("DROP TABLE t")) == "DROP TABLE"
    assert err("DROP TABLE a,").sqlstate == "42601"


# --- ALTER TABLE


def test_alter_many_actions():
    cmd = parse_ddl("ALTER TABLE IF EXISTS ONLY s.t ADD COLUMN IF NOT EXISTS a int NOT NULL, ADD b text, "
                    "DROP COLUMN IF EXISTS c CASCADE, DROP d, ALTER e TYPE bigint, "
                    "ALTER COLUMN f SET DATA TYPE numeric(12,2), ALTER g DROP NOT NULL, "
                    "SET (k = 'v', n = 1), RESET (old, write.x)")
    assert cmd == AlterTable("s", "t", (
        AddColumn(ColumnDef("a", INT, True), True),
        AddColumn(ColumnDef("b", ColumnType("text", "string"))),
        DropColumn("c", True),
        DropColumn("d"),
        AlterColumnType("e", BIGINT),
        AlterColumnType("f", ColumnType("numeric(12,2)", "decimal", 12, 2)),
        DropNotNull("g"),
        SetProperties({"k": "v", "n": "1"}),
        ResetProperties(("old", "write.x")),
    ), True)
    assert command_tag(cmd) == "ALTER TABLE"


def test_defaults_are_kept_as_sql_text():
    cmd = parse_ddl("CREATE TABLE t (a int DEFAULT 40 + 2, b text DEFAULT 'x', c timestamptz DEFAULT now(), "
                    "d int DEFAULT NULL)")
    assert [c.default for c in cmd.columns] == ["40 + 2", "'x'", "CURRENT_TIMESTAMP", None]
    assert parse_ddl("ALTER TABLE t ALTER a SET DEFAULT -1") == AlterTable(None, "t", (SetDefault("a", "-1"),))
    assert parse_ddl("ALTER TABLE t ALTER COLUMN a DROP DEFAULT") == AlterTable(None, "t", (SetDefault("a", None),))
    added = parse_ddl("ALTER TABLE t ADD COLUMN z int DEFAULT 7").actions[0]
    assert added.column.default == "7"


@pytest.mark.parametrize("sql,position,near", [
    ("ALTER TABLE t ALTER a SET DEFAULT 1 +", 35, '"1"'),
    ("ALTER TABLE t ALTER a SET DEFAULT (1", 37, "end of input"),
    ("CREATE TABLE t (a int DEFAULT 1 +)", 34, '")"'),
    # Once read as `SELECT 1 FROM x` and kept as DEFAULT 1: a DEFAULT is one expression.
    ("ALTER TABLE t ALTER a SET DEFAULT 1 FROM x", 35, '"1"'),
])
def test_a_default_that_does_not_parse_is_a_syntax_error_where_it_starts(sql, position, near):
    error = err(sql)
    assert (error.sqlstate, error.position) == ("42601", position)
    assert near in error.message


def test_a_column_is_read_by_the_statements_dialect():
    """Column bodies go through icegres.sql.parse: to_char's template stays as written, as in a
    statement (sqlglot's own postgres dialect reads it as a strftime format)."""
    cmd = parse_ddl("CREATE TABLE t (a text DEFAULT to_char(now(), 'Day') CHECK (to_char(b, 'Day') <> ''))")
    assert cmd.columns[0].default == "to_char(CURRENT_TIMESTAMP, 'Day')"
    assert cmd.columns[0].checks[0].text == "to_char(b, 'Day') <> ''"


def test_alter_renames():
    assert parse_ddl("ALTER TABLE t RENAME TO u") == AlterTable(None, "t", (RenameTable("u"),))
    assert parse_ddl("ALTER TABLE t RENAME a TO b") == AlterTable(None, "t", (RenameColumn("a", "b"),))
    assert parse_ddl('ALTER TABLE t RENAME COLUMN "A" TO B') == AlterTable(None, "t", (RenameColumn("A", "b"),))


@pytest.mark.parametrize("sql,sqlstate,needle", [
    ("ALTER TABLE t ALTER a SET DEFAULT b + 1", "0A000", "column reference in DEFAULT"),
    ("ALTER TABLE t ALTER a TYPE bigint USING a::bigint", "0A000", "USING"),
    ("ALTER TABLE t ALTER a TYPE money", "0A000", "money"),
    ("ALTER TABLE t ADD a int PRIMARY KEY", "0A000", "PRIMARY KEY"),
    ("ALTER TABLE t ADD PRIMARY KEY (a)", "0A000", "PRIMARY KEY"),
    ("ALTER TABLE t ADD CONSTRAINT u UNIQUE (a)", "0A000", "UNIQUE"),
    ("ALTER TABLE t OWNER TO bob", "0A000", "OWNER"),
    ("ALTER TABLE t SET SCHEMA s", "0A000", "SET SCHEMA"),
    ("ALTER TABLE t SET LOGGED", "0A000", "SET LOGGED"),
    ("ALTER TABLE t SET (partitioning = 'a')", "0A000", "partitioning"),
    ("ALTER TABLE t RESET (partitioning)", "0A000", "partitioning"),
    ("ALTER TABLE t RENAME CONSTRAINT a TO b", "0A000", "RENAME CONSTRAINT"),
    ("ALTER TABLE t", "42601", "end of input"),
    ("ALTER TABLE t ADD a int, RENAME TO u", "42601", '"RENAME"'),
    ("ALTER TABLE t RENAME TO u, ADD a int", "42601", '","'),
    ("ALTER TABLE t RENAME TO s.u", "42601", '"."'),
    ("ALTER TABLE t RESET (a = 1)", "42601", '"="'),
    ("ALTER TABLE t ALTER a TYPE int NOT NULL", "42601", None),
    ("ALTER TABLE t ADD COLUMN", "42601", None),
])
def test_alter_errors(sql, sqlstate, needle):
    error = err(sql)
    assert error.sqlstate == sqlstate
    if needle:
        assert needle in error.message


def test_pg_name_of_iceberg_types():
    from pyiceberg.types import DecimalType, IntegerType, ListType, StringType, TimestamptzType

    assert pg_name_of(IntegerType()) == "integer"
    assert pg_name_of(DecimalType(10, 2)) == "numeric(10,2)"
    assert pg_name_of(TimestamptzType()) == "timestamp with time zone"
    assert pg_name_of(ListType(1, StringType())) == "text[]"


@pytest.mark.parametrize(("given", "stored"), [("false", "false"), ("OFF", "false"), ("0", "false"),
                                                 ("true", "true"), ("yes", "true"), ("On", "true")])
def test_the_delta_switch_is_a_boolean_stored_as_true_or_false(given, stored):
    sql = f"CREATE TABLE t (a int) WITH (\"icegres.parquet.delta-integers\" = '{given}')"
    assert parse_ddl(sql).properties == {"icegres.parquet.delta-integers": stored}


def test_the_delta_switch_refuses_other_values():
    error = err("ALTER TABLE t SET (\"icegres.parquet.delta-integers\" = 'sometimes')")
    assert (error.sqlstate, error.message) == (
        "22023", 'invalid value for boolean option "icegres.parquet.delta-integers": sometimes')


def test_comment_on_table_and_column():
    assert parse_ddl("COMMENT ON TABLE s.t IS 'it''s here'") == AlterTable(
        "s", "t", (SetProperties({"comment": "it's here"}),), tag="COMMENT")
    assert parse_ddl("comment on table t is null") == AlterTable(None, "t", (ResetProperties(("comment",)),), tag="COMMENT")
    assert parse_ddl("comment on table t is ''") == AlterTable(None, "t", (ResetProperties(("comment",)),), tag="COMMENT")
    assert parse_ddl('comment on column s.t."Col" is \'x\'') == AlterTable("s", "t", (CommentColumn("Col", "x"),), tag="COMMENT")
    assert parse_ddl("comment on column t.c is null") == AlterTable(None, "t", (CommentColumn("c", ""),), tag="COMMENT")
    assert command_tag(parse_ddl("comment on table t is 'x'")) == "COMMENT"


@pytest.mark.parametrize(("sql", "sqlstate"), [
    ("comment on column c is 'x'", "42601"),  # a column needs its table
    ("comment on table t is 5", "42601"),
    ("comment on table t", "42601"),
    ("comment on view v is 'x'", "0A000"),
])
def test_comment_errors(sql, sqlstate):
    assert err(sql).sqlstate == sqlstate


def test_temporary_tables_parse_as_postgresql_reads_them():
    from icegres.engine.ddl import parse_ddl

    assert parse_ddl("CREATE TEMP TABLE t (a int)", "icegres").temporary
    assert parse_ddl("CREATE LOCAL TEMPORARY TABLE t AS SELECT 1 AS a", "icegres").temporary
    assert parse_ddl("CREATE TABLE pg_temp.t (a int)", "icegres").temporary  # pg_temp makes it one
    assert parse_ddl("CREATE TEMP TABLE t (a int) ON COMMIT PRESERVE ROWS", "icegres").temporary
    assert not parse_ddl("CREATE TABLE t (a int)", "icegres").temporary
    assert err("CREATE TEMP TABLE s.t (a int)").sqlstate == "42P16"
    assert err("CREATE TABLE t (a int) ON COMMIT PRESERVE ROWS").sqlstate == "42P16"


def test_serial_and_identity_columns_are_read() -> None:
    from icegres.engine.ddl_commands import SequenceOptions

    cmd = parse_ddl("CREATE TABLE t (a serial, b bigserial, c int GENERATED ALWAYS AS IDENTITY, "
                    "d bigint GENERATED BY DEFAULT AS IDENTITY (START WITH 10 INCREMENT BY 5))")
    assert [(c.name, c.type.pg_name, c.identity, c.not_null) for c in cmd.columns] == [
        ("a", "integer", "s", True), ("b", "bigint", "s", True), ("c", "integer", "a", True), ("d", "bigint", "d", True)]
    assert cmd.columns[3].sequence == SequenceOptions(as_type="bigint", increment=5, start=10)
