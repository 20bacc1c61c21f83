"""pg_catalog, catalog functions and rewrites, proven on what real clients sent PostgreSQL 15.

tests/unit/client_sql/<client>.sql holds every distinct statement each client sent a real
PostgreSQL 15.18 while we listed schemas, tables, columns, keys and types (capture.py re-records
them). Here a fake lakehouse (demo.trips with a primary key, demo.cities) is mounted in a
DataFusion SessionContext the way the engine does it, and every statement must rewrite, plan and
execute; the important answers are checked against what PostgreSQL itself answered. Session
statements (BEGIN, SET, SHOW, ...) are the session layer's: they must classify as such.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from icegres.engine import (
    catalog_tables,
    pg_builtins,
    pg_catalog,
    pg_functions,
    pg_relations,
    rewrite,
)
from icegres.engine.rewrite.casts import array_literal
from icegres.sql.parse import parse
from icegres.sql.pieces import split_statements
from icegres.sql.statement import Kind, classify

pytestmark = pytest.mark.unit

CORPUS_DIR = Path(__file__).parent / "client_sql"
DATABASE = "icegres"
USER = "icegres"


# --- the fake lakehouse ---------------------------------------------------------------------------

TRIPS = pa.schema([
    pa.field("id", pa.int64(), nullable=False), ("city", pa.string()), ("fare", pa.float64()),
    ("pickup_ts", pa.timestamp("us", tz="UTC")), ("paid", pa.bool_()),
])
CITIES = pa.schema([
    pa.field("name", pa.string(), nullable=False), ("population", pa.int64()),
    ("area", pa.float32()),
])


def _table_info(schema: str, name: str, arrow: pa.Schema, pk: tuple[str, ...] = ()) -> pg_catalog.TableInfo:
    columns = tuple(pg_catalog.ColumnInfo(f.name, f.type, f.nullable, i)
                    for i, f in enumerate(arrow, start=1))
    return pg_catalog.TableInfo(schema, name, columns, pk)


SNAPSHOT = pg_catalog.CatalogSnapshot(
    database=DATABASE, user=USER, schemas=("demo", "public"),
    tables=(_table_info("demo", "trips", TRIPS, ("id",)), _table_info("demo", "cities", CITIES)),
)


@dataclass
class Env:
    database: str = DATABASE
    user: str = USER
    backend_pid: int = 4242
    server_version: str = "15.0"
    settings: dict[str, str] = field(default_factory=lambda: {
        "search_path": '"$user", public', "jit": "on", "default_table_access_method": "heap",
        "max_index_keys": "32", "timezone": "UTC", "transaction_isolation": "read committed",
    })
    relation_oid: Any = staticmethod(pg_catalog.relation_oid)
    # this session's catalog, whatever other tests in the process register meanwhile
    catalog_snapshot: Any = SNAPSHOT

    @property
    def search_path(self) -> list[str]:
        return [USER if s.strip() == '"$user"' else s.strip()
                for s in self.settings["search_path"].split(",")]

    @property
    def current_user(self) -> str:
        return self.user


def make_context(snapshot: pg_catalog.CatalogSnapshot = SNAPSHOT, env: Env | None = None):
    from datafusion import SessionConfig, SessionContext
    from datafusion.catalog import Schema

    config = (SessionConfig().with_information_schema(False)
              .set("datafusion.sql_parser.dialect", "PostgreSQL")
              .set("datafusion.sql_parser.enable_ident_normalization", "true"))
    ctx = SessionContext(config)
    catalog = ctx.catalog()
    for schema in snapshot.schemas:
        if schema not in catalog.schema_names():
            catalog.register_schema(schema, Schema.memory_schema())
    for schema, name, arrow in (("demo", "trips", TRIPS), ("demo", "cities", CITIES)):
        catalog.schema(schema).register_table(name, ctx.from_arrow(arrow.empty_table()).into_view())
    catalog_tables.register_catalog(ctx, snapshot)
    env = env or Env()
    pg_functions.register_functions(ctx, env)
    return ctx, env


@pytest.fixture(scope="module")
def session():
    return make_context()


def run(session, sql: str, params: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    ctx, env = session
    tree = rewrite.rewrite(parse(sql), env)
    return ctx.sql(rewrite.to_sql(tree), param_values=params or None).to_pylist()


# --- the corpus -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Entry:
    client: str
    number: int  # 1-based position in the client's file
    sql: str  # with the real server's OIDs replaced by icegres's
    params: dict[str, Any]


def _oid_map(header: dict[str, int]) -> dict[int, int]:
    """Real PostgreSQL OID -> icegres OID, for the objects both have."""
    ix = SNAPSHOT.index
    ours = {
        "class.demo.trips": ix.relations[("demo", "trips")].oid,
        "class.demo.cities": ix.relations[("demo", "cities")].oid,
        "class.demo.trips_pkey": ix.relations[("demo", "trips_pkey")].oid,
        "namespace.demo": ix.namespaces["demo"],
    }
    return {header[k]: v for k, v in ours.items() if k in header}


def _translate(text: str, oids: dict[int, int]) -> str:
    return re.sub(r"\b(\d{5})\b", lambda m: str(oids.get(int(m.group(1)), m.group(1))), text)


def _param(value: str | None, oids: dict[int, int], typed_text: bool) -> Any:
    """A bind value as the session would hand it to DataFusion: ints, lists, bools, or text.

    The log shows every value as text; the client sent its own type. SQLAlchemy casts its string
    parameters ($1::VARCHAR), so an uncast 't' was a Python bool.
    """
    if value is None:
        return None
    if typed_text:
        return value
    if value in ("t", "f"):
        return value == "t"
    items = array_literal(value)
    if items is not None:
        if all(v is not None and v.isdigit() for v in items):
            return [oids.get(int(v), int(v)) for v in items]
        return items
    if value.isdigit():
        return oids.get(int(value), int(value))
    return value


def _cast_to_text(sql: str, placeholder: str) -> bool:
    return re.search(re.escape(placeholder) + r"::(VARCHAR|TEXT)\b", sql, re.I) is not None


def load_corpus() -> list[Entry]:
    entries = []
    for path in sorted(CORPUS_DIR.glob("*.sql")):
        chunks = path.read_text().split("-- next\n")
        header = json.loads(re.search(r"^-- oids: (.*)$", chunks[0], re.M).group(1))
        oids = _oid_map(header)
        for number, chunk in enumerate(chunks[1:], start=1):
            params: dict[str, Any] = {}
            lines = []
            for line in chunk.splitlines():
                if line.startswith("-- params: "):
                    params = json.loads(line[len("-- params: "):])
                else:
                    lines.append(line)
            sql = "\n".join(lines)
            params = {k.lstrip("$"): _param(v, oids, _cast_to_text(sql, k)) for k, v in params.items()}
            entries.append(Entry(path.stem, number, _translate(sql, oids), params))
    return entries


CORPUS = load_corpus()

# Statements that genuinely can't run here, with why. Everything else must pass.
XFAIL: dict[tuple[str, str], str] = {
    ("asyncpg", "SELECT 'ok'::demo.mood"):
        "our own probe for asyncpg's introspection: enum types don't exist in an Iceberg lakehouse",
    ("asyncpg", "SELECT ROW(1, 2)::demo.pt"):
        "our own probe for asyncpg's introspection: composite types don't exist in a lakehouse",
    ("asyncpg", "SELECT $1::demo.mood[]"):
        "our own probe for asyncpg's introspection: enum types don't exist in a lakehouse",
}

# What the session layer must answer itself (never DataFusion), by statement kind.
SESSION_KINDS = {Kind.BEGIN, Kind.COMMIT, Kind.ROLLBACK, Kind.SAVEPOINT, Kind.RELEASE, Kind.SET,
                 Kind.SHOW, Kind.RESET, Kind.CLOSE, Kind.LISTEN, Kind.DEALLOCATE}
# ibis's con.sql() wraps a query in a temporary view and drops it again.
WRITE_STATEMENTS = {("ibis", "CREATE TEMPORARY VIEW"), ("ibis", "DROP VIEW IF EXISTS")}


def _cases() -> list[Any]:
    cases = []
    for entry in CORPUS:
        first = entry.sql.strip().splitlines()[0].strip().rstrip(";")
        reason = XFAIL.get((entry.client, first))
        marks = [pytest.mark.xfail(reason=reason, strict=True)] if reason else []
        cases.append(pytest.param(entry, id=f"{entry.client}-{entry.number:02d}", marks=marks))
    return cases


@pytest.mark.parametrize("entry", _cases())
def test_client_statement_runs(session, entry: Entry) -> None:
    for statement in split_statements(entry.sql):
        kind = classify(statement).kind
        if kind is Kind.QUERY:
            run(session, statement, entry.params)
        elif kind is Kind.WRITE:
            assert any(entry.client == c and statement.startswith(p) for c, p in WRITE_STATEMENTS)
        else:
            assert kind in SESSION_KINDS, (kind, statement)


def test_corpus_covers_every_client() -> None:
    clients = {e.client for e in CORPUS}
    assert clients >= {"psql", "psycopg", "psycopg2", "asyncpg", "sqlalchemy_psycopg",
                       "sqlalchemy_psycopg2", "sqlalchemy_asyncpg", "pandas", "pgjdbc",
                       "psqlodbc", "ibis", "pg8000", "pgcli"}


def corpus_sql(client: str, contains: str) -> Entry:
    matches = [e for e in CORPUS if e.client == client and contains in e.sql]
    assert matches, f"no {client} statement contains {contains!r}"
    return matches[0]


def run_entry(session, client: str, contains: str, **params: Any) -> list[dict[str, Any]]:
    entry = corpus_sql(client, contains)
    return run(session, entry.sql, {**entry.params, **params})


def values(rows: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    return [tuple(r.values()) for r in rows]


# --- the answers that matter ---------------------------------------------------------------------


def test_version_reads_as_postgresql_15(session) -> None:
    (row,) = run(session, "select pg_catalog.version()")
    assert row["version"].startswith("PostgreSQL 15.")
    (row,) = run(session, "select version()")
    assert row["version"].startswith("PostgreSQL 15.0 (icegres ")


def test_psql_describe_table_lists_columns_with_type_names(session) -> None:
    trips = SNAPSHOT.relation_oid("demo", "trips")
    (found,) = run_entry(session, "psql", "'^(trips)$'")
    assert values([found]) == [(trips, "demo", "trips")]
    rows = run_entry(session, "psql", "a.attgenerated\n\tFROM pg_catalog.pg_attribute a")
    assert [(r["attname"], r["format_type"], r["attnotnull"]) for r in rows] == [
        ("id", "bigint", True), ("city", "text", False), ("fare", "double precision", False),
        ("pickup_ts", "timestamp with time zone", False), ("paid", "boolean", False),
    ]
    (index,) = run_entry(session, "psql", "pg_catalog.pg_get_indexdef(i.indexrelid, 0, true)")
    assert index["relname"] == "trips_pkey" and index["indisprimary"]
    assert index["pg_get_indexdef"] == "CREATE UNIQUE INDEX trips_pkey ON demo.trips USING btree (id)"
    assert index["pg_get_constraintdef"] == "PRIMARY KEY (id)"


def test_psql_lists_tables_schemas_and_databases(session) -> None:
    tables = run_entry(session, "psql", "c.relkind IN ('r','p','t','s','')")
    assert [(r["Schema"], r["Name"], r["Type"], r["Owner"]) for r in tables] == [
        ("demo", "cities", "table", USER), ("demo", "trips", "table", USER)]
    schemas = run_entry(session, "psql", 'n.nspname AS "Name"')
    assert [r["Name"] for r in schemas] == ["demo", "public"]
    (db,) = run_entry(session, "psql", 'd.datname as "Name"')
    assert (db["Name"], db["Owner"], db["Encoding"]) == (DATABASE, USER, "UTF8")


def test_psql_dt_shows_search_path_tables_only(session) -> None:
    # \dt lists what search_path ("$user", public) makes visible: nothing of demo.
    assert run_entry(session, "psql", "c.relkind IN ('r','p','')\n") == []
    ctx, env = session
    env.settings["search_path"] = "demo, public"
    try:
        rows = run_entry(session, "psql", "c.relkind IN ('r','p','')\n")
    finally:
        env.settings["search_path"] = '"$user", public'
    assert [r["Name"] for r in rows] == ["cities", "trips"]


def test_sqlalchemy_get_columns_types(session) -> None:
    rows = run_entry(session, "sqlalchemy_psycopg2", "pg_catalog.pg_class.relname IN ('trips')"
                     " ORDER BY pg_catalog.pg_class.relname, pg_catalog.pg_attribute.attnum")
    assert [(r["name"], r["format_type"], r["not_null"], r["default"]) for r in rows] == [
        ("id", "bigint", True, None), ("city", "text", False, None),
        ("fare", "double precision", False, None),
        ("pickup_ts", "timestamp with time zone", False, None), ("paid", "boolean", False, None),
    ]


def test_sqlalchemy_pk_constraint(session) -> None:
    (pk,) = run_entry(session, "sqlalchemy_psycopg2", "pg_constraint.contype = 'p' AND "
                      "pg_catalog.pg_constraint.conrelid IN (" + str(SNAPSHOT.relation_oid("demo", "trips")) + "))")
    assert (pk["cols"], pk["conname"], pk["indnullsnotdistinct"]) == (["id"], "trips_pkey", False)


def test_sqlalchemy_schema_and_table_names(session) -> None:
    schemas = run_entry(session, "sqlalchemy_psycopg2", "NOT LIKE 'pg/_'")
    assert [r["nspname"] for r in schemas] == ["demo", "information_schema", "public"]
    tables = run_entry(session, "sqlalchemy_psycopg2", "relkind = ANY (ARRAY['r', 'p']) AND "
                       "pg_catalog.pg_class.relpersistence != 't' AND "
                       "pg_catalog.pg_namespace.nspname = 'demo'")
    assert sorted(r["relname"] for r in tables) == ["cities", "trips"]


def test_pgjdbc_get_columns(session) -> None:
    rows = run_entry(session, "pgjdbc", "row_number() OVER (PARTITION BY a.attrelid")
    assert [(r["attname"], r["atttypid"], r["attnotnull"], r["attnum"]) for r in rows] == [
        ("id", 20, True, 1), ("city", 25, False, 2), ("fare", 701, False, 3),
        ("pickup_ts", 1184, False, 4), ("paid", 16, False, 5)]
    assert {r["current_database"] for r in rows} == {DATABASE}


def test_pgjdbc_primary_keys_and_index_info(session) -> None:
    (pk,) = run_entry(session, "pgjdbc", "_pg_expandarray(con.conkey)")
    assert (pk["COLUMN_NAME"], pk["KEY_SEQ"], pk["PK_NAME"]) == ("id", 1, "trips_pkey")
    (index,) = run_entry(session, "pgjdbc", "_pg_expandarray(i.indkey)")
    assert (index["INDEX_NAME"], index["COLUMN_NAME"], index["ORDINAL_POSITION"],
            index["NON_UNIQUE"], index["ASC_OR_DESC"]) == ("trips_pkey", "id", 1, False, "A")


def test_pgjdbc_schemas_and_tables(session) -> None:
    schemas = run_entry(session, "pgjdbc", 'AND nspname LIKE $1 ORDER BY "TABLE_SCHEM"')
    assert values(schemas) == [("demo", DATABASE)]
    tables = run_entry(session, "pgjdbc", "'SYSTEM TABLE'", **{"1": "demo", "2": "%"})
    assert [(r["TABLE_SCHEM"], r["TABLE_NAME"], r["TABLE_TYPE"]) for r in tables] == [
        ("demo", "cities", "TABLE"), ("demo", "trips", "TABLE")]


def test_psqlodbc_primary_key_uses_zero_based_indkey(session) -> None:
    ctx, env = session
    entry = corpus_sql("psqlodbc", "ta.attnum = i.indkey[ia.attnum-1]")
    sql = rewrite.to_sql(rewrite.rewrite(parse(entry.sql), env))
    table = ctx.sql(sql).to_arrow_table()  # two columns are named relname: read by position
    assert table.num_rows == 1
    row = tuple(col[0].as_py() for col in table.columns)
    # ta.attname, ia.attnum, ic.relname, n.nspname, tc.relname
    assert row == ("id", 1, "trips_pkey", "demo", "trips")


def test_psycopg_typeinfo_and_asyncpg_set_config(session) -> None:
    (text,) = run_entry(session, "psycopg", "typdelim AS delimiter")
    assert (text["name"], text["oid"], text["array_oid"], text["regtype"], text["delimiter"]) == (
        "text", 25, 1009, "text", ",")
    ctx, env = session
    (row,) = run_entry(session, "asyncpg", "current_setting('jit') AS cur")
    assert (row["cur"], row["new"], env.settings["jit"]) == ("on", "off", "off")
    run_entry(session, "asyncpg", "set_config('jit', $1, false)", **{"1": "on"})
    assert env.settings["jit"] == "on"


def test_ibis_columns_and_tables(session) -> None:
    rows = run_entry(session, "ibis", "n.nspname = ANY($1)", **{"1": ["demo"], "2": "trips"})
    assert [(r["column_name"], r["data_type"], r["nullable"]) for r in rows] == [
        ("id", "bigint", False), ("city", "text", True), ("fare", "double precision", True),
        ("pickup_ts", "timestamp with time zone", True), ("paid", "boolean", True)]
    tables = run_entry(session, "ibis", "table_schema = 'demo'")
    assert sorted(r["table_name"] for r in tables) == ["cities", "trips"]
    (schema,) = run(session, "SELECT CURRENT_SCHEMA")
    assert schema == {"current_schema": "public"}


def test_pgcli_completion_metadata(session) -> None:
    # What pgcli's completion refresher reads: relations and columns by relkind (a text[]
    # parameter), functions with their argument names and types by name, foreign keys.
    tables = run_entry(session, "pgcli", "WHERE   c.relkind = ANY($1)")
    assert [tuple(r.values()) for r in tables if r["schema_name"] == "demo"] == [
        ("demo", "cities"), ("demo", "trips")]
    columns = run_entry(session, "pgcli", "att.atttypid::regtype::text type_name")
    assert [(r["column_name"], r["type_name"]) for r in columns if r["table_name"] == "cities"] == [
        ("name", "text"), ("population", "bigint"), ("area", "real")]
    functions = run_entry(session, "pgcli", "COALESCE(proallargtypes::regtype[], proargtypes::regtype[])")
    by_name = {r["func_name"]: r for r in functions}
    terminate = by_name["pg_terminate_backend"]
    assert (terminate["proargnames"], terminate["coalesce"], terminate["return_type"],
            terminate["arg_defaults"]) == (["pid", "timeout"], ["integer", "bigint"], "boolean", "0")
    keywords = by_name["pg_get_keywords"]
    assert (keywords["proargmodes"], keywords["coalesce"][:2], keywords["is_set_returning"]) == (
        ["o"] * 5, ["text", '"char"'], True)
    assert run_entry(session, "pgcli", "fk.contype = 'f'") == []  # the lakehouse has no foreign keys
    assert run_entry(session, "pgcli", "regexp_split_to_table(prosrc") == []  # no SQL functions


def test_information_schema_columns(session) -> None:
    rows = run(session, "select column_name, data_type, ordinal_position, is_nullable, udt_name "
                        "from information_schema.columns where table_schema = 'demo' and "
                        "table_name = 'cities' order by ordinal_position")
    assert values(rows) == [("name", "text", 1, "NO", "text"), ("population", "bigint", 2, "YES", "int8"),
                            ("area", "real", 3, "YES", "float4")]


# --- the pieces ----------------------------------------------------------------------------------


def test_relation_oids_are_stable_and_in_range() -> None:
    oid = pg_catalog.relation_oid("nowhere", "t")
    assert oid == pg_catalog.relation_oid("nowhere", "t")
    assert pg_catalog.FIRST_NORMAL_OID <= oid < 2**31
    assert pg_catalog.relation_oid("pg_catalog", "pg_class") == 1259


def test_oid_collisions_are_settled_by_key_order() -> None:
    key_a, key_b = "relation:a.x", "relation:b.y"
    taken = {pg_catalog._stable_oid(key_b)}
    first = pg_catalog._allocate([key_a, key_b], taken=set())
    again = pg_catalog._allocate([key_b, key_a], taken=set())
    assert first == again
    clash = pg_catalog._allocate([key_a], taken=set(taken) | {pg_catalog._stable_oid(key_a)})
    assert clash[key_a] == pg_catalog._stable_oid(key_a) + 1


def test_register_catalog_replaces_tables_when_lakehouse_changes() -> None:
    ctx, env = make_context()
    grown = pg_catalog.CatalogSnapshot(DATABASE, USER, ("demo", "public", "sales"), (
        *SNAPSHOT.tables, _table_info("sales", "orders", CITIES)))
    catalog_tables.register_catalog(ctx, grown)
    try:
        rows = ctx.sql("select relname from pg_catalog.pg_class c join pg_catalog.pg_namespace n "
                       "on n.oid = c.relnamespace where n.nspname = 'sales'").to_pylist()
        assert rows == [{"relname": "orders"}]
    finally:
        catalog_tables.register_catalog(ctx, SNAPSHOT)


@pytest.mark.parametrize(("oid", "typmod", "expected"), [
    (20, -1, "bigint"), (1184, -1, "timestamp with time zone"), (1184, 3, "timestamp(3) with time zone"),
    (1700, ((10 << 16) | 2) + 4, "numeric(10,2)"), (1043, 14, "character varying(10)"),
    (1016, -1, "bigint[]"), (18, -1, '"char"'), (1042, None, "character"), (1042, -1, "bpchar"), (99999, -1, "???"),
])
def test_format_type(oid: int, typmod: int | None, expected: str) -> None:
    assert pg_builtins.format_type(oid, typmod) == expected


@pytest.mark.parametrize(("name", "oid"), [
    ("text", 25), ("integer", 23), ("pg_catalog.int8", 20), ("character varying", 1043),
    ("text[]", 1009), ('"char"', 18), ("nope", None),
])
def test_type_names_resolve(name: str, oid: int | None) -> None:
    assert pg_builtins.type_oid_by_name(name) == oid


@pytest.mark.parametrize(("text", "items"), [
    ("{public}", ["public"]), ("{1,2}", ["1", "2"]), ('{"a b",NULL,c}', ["a b", None, "c"]),
    ("{}", []), ("public", None),
])
def test_array_literal(text: str, items: list[str | None] | None) -> None:
    assert array_literal(text) == items


@pytest.mark.parametrize(("size", "pretty"), [
    (0, "0 bytes"), (10239, "10239 bytes"), (10240, "10 kB"), (10 * 1024 * 1024, "10 MB"),
])
def test_size_pretty(size: int, pretty: str) -> None:
    assert pg_functions.size_pretty(size) == pretty


def test_regclass_literals_follow_search_path(session) -> None:
    ctx, env = session
    trips = SNAPSHOT.relation_oid("demo", "trips")
    assert run(session, "select 'demo.trips'::regclass::oid as o") == [{"o": trips}]
    assert run(session, "select 'pg_class'::regclass::oid as o") == [{"o": 1259}]
    with pytest.raises(Exception, match="does not exist"):
        run(session, "select 'trips'::regclass")
    env.settings["search_path"] = "demo"
    try:
        assert run(session, "select 'trips'::regclass::oid as o") == [{"o": trips}]
        assert run(session, f"select {trips}::regclass") == [{"regclass": "trips"}]
    finally:
        env.settings["search_path"] = '"$user", public'
    assert run(session, f"select {trips}::regclass") == [{"regclass": "demo.trips"}]


def test_current_setting_unknown_raises_unless_missing_ok(session) -> None:
    assert run(session, "select current_setting('nope', true) as v") == [{"v": None}]
    with pytest.raises(Exception, match="unrecognized configuration parameter"):
        run(session, "select current_setting('nope')")


def test_asyncpg_introspects_array_types(session) -> None:
    # SQLAlchemy over asyncpg made asyncpg introspect _bool, _int8 and int2vector so.
    rows = run_entry(session, "asyncpg", "WITH RECURSIVE typeinfo_tree", **{"1": [1016]})
    got = sorted((r["oid"], r["name"], r["kind"], r["elemtype"], r["elemdelim"], r["depth"],
                  r["elemtype_name"]) for r in rows)
    assert got == [(20, "int8", "b", 0, None, 1, "-"), (1016, "_int8", "b", 20, ",", 0, "bigint")]


def test_session_keywords_are_calls(session) -> None:
    (row,) = run(session, "select current_user, session_user, user, current_catalog, current_schema")
    assert row == {"current_user": USER, "session_user": USER, "user": USER,
                   "current_catalog": DATABASE, "current_schema": "public"}
    (row,) = run(session, "select pg_catalog.current_schemas(true) as s, pg_backend_pid() as pid")
    assert row == {"s": ["pg_catalog", "public"], "pid": 4242}


def test_catalog_columns_carry_their_postgresql_type(session) -> None:
    # The wire layer describes and encodes by it: psqlODBC parses indkey as "1 2", not "{1,2}".
    ctx, env = session
    schema = ctx.sql("select i.indkey, c.relname, c.oid from pg_catalog.pg_index i "
                     "join pg_catalog.pg_class c on c.oid = i.indrelid").schema()
    assert [pg_relations.pg_type_oid(f) for f in schema] == [22, 19, 26]
