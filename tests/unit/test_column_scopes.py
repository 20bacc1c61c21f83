"""A bare column name binds where PostgreSQL binds it: to the innermost FROM that has a column of
that name, else outwards (rewrite/scopes.py). Checked against PostgreSQL 15 over the catalog
queries IDEs, BI tools and pg_dump send: the same tables in both, answers that name no OID."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import psycopg
import pyarrow as pa
import pytest

from tests.support.differential import ours, theirs
from tests.support.fixtures import real_postgres  # noqa: F401  (session fixture)

pytestmark = pytest.mark.unit

_TABLES = {
    "a": pa.schema([pa.field("id", pa.int64()), pa.field("name", pa.string()), pa.field("city", pa.string())]),
    "b": pa.schema([pa.field("id", pa.int64()), pa.field("a_id", pa.int64()), pa.field("note", pa.string())]),
    "c": pa.schema([pa.field("id", pa.int64())]),
}
_ROWS = {
    "a": {"id": [1, 2, 3], "name": ["x", "y", "z"], "city": ["p", "q", "p"]},
    "b": {"id": [1, 1, 2, 10], "a_id": [1, 1, 3, 3], "note": ["n1", "n2", "n3", "x"]},
    "c": {"id": [2]},
}
_PG_DDL = [
    "drop schema if exists scopes cascade",
    "create schema scopes",
    "create table scopes.a (id bigint, name text, city text)",
    "create table scopes.b (id bigint, a_id bigint, note text)",
    "create table scopes.c (id bigint)",
    "insert into scopes.a values (1, 'x', 'p'), (2, 'y', 'q'), (3, 'z', 'p')",
    "insert into scopes.b values (1, 1, 'n1'), (1, 1, 'n2'), (2, 3, 'n3'), (10, 3, 'x')",
    "insert into scopes.c values (2)",
    "drop schema if exists scopes_pk cascade",
    "create schema scopes_pk",
    "create table scopes_pk.k (id bigint not null, a_id bigint not null, note text, primary key (id, a_id))",
]


@pytest.fixture(scope="module")
def qctx(tmp_path_factory: pytest.TempPathFactory) -> Any:
    from icegres.engine.catalog import Lakehouse
    from icegres.engine.lake import Engine, SessionEnv
    from icegres.engine.query import open_session

    lake = Lakehouse.embedded(Path(tmp_path_factory.mktemp("lake")))
    lake.create_namespace_if_missing("scopes")
    for name, schema in _TABLES.items():
        table = lake.catalog.create_table(("scopes", name), schema=schema)
        table.append(pa.table(_ROWS[name], schema=schema))
    lake.create_namespace_if_missing("scopes_pk")
    keyed = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("a_id", pa.int64(), nullable=False),
                       pa.field("note", pa.string())])
    # how CREATE TABLE ... PRIMARY KEY (id, a_id) records it (engine/mounts.py reads it back)
    lake.catalog.create_table(("scopes_pk", "k"), schema=keyed, properties={"icegres.primary-key": "id,a_id"})
    engine = Engine(lake)
    engine.refresh()
    return open_session(engine, SessionEnv("icegres", "icegres", 1, {"search_path": "scopes"}))


@pytest.fixture(scope="module")
def pg(real_postgres: Any) -> Any:  # noqa: F811
    with psycopg.connect(real_postgres.dsn(), autocommit=True) as conn:
        for statement in _PG_DDL:
            conn.execute(statement)
        conn.execute("set search_path = scopes")
        yield conn
        conn.execute("drop schema scopes cascade")
        conn.execute("drop schema scopes_pk cascade")


CATALOG_QUERIES = [
    # The two: an unqualified inner name that the outer row also has, and one it doesn't.
    "select table_name, (select count(*) from information_schema.columns where table_name = t.table_name"
    " and table_schema = t.table_schema) from information_schema.tables t where table_schema = 'scopes'"
    " order by 1",
    "select relname, (select nspname from pg_namespace where oid = c.relnamespace) from pg_class c"
    " where relname in ('a', 'b', 'c') order by 1",
    # The bare name is the outer row's: no relation of the subquery has it.
    "select relname, (select nspname from pg_namespace where oid = relnamespace) from pg_class"
    " where relname in ('a', 'b') order by 1",
    "select relname, (select count(*) from pg_namespace where nspname = 'scopes' and oid = relnamespace)"
    " from pg_class where relname in ('a', 'c') order by 1",
    # Both levels bare, in a condition of the outer query.
    "select t.table_name from information_schema.tables t where table_schema = 'scopes' and (select"
    " count(*) from information_schema.columns where table_schema = t.table_schema and table_name ="
    " t.table_name) > 1 order by 1",
    "select n.nspname, (select count(*) from pg_class where relnamespace = n.oid and relkind = 'r')"
    " from pg_namespace n where nspname = 'scopes'",
    "select relname, (select count(*) from pg_attribute where attrelid = c.oid and attnum > 0)"
    " from pg_class c join pg_namespace n on n.oid = c.relnamespace where nspname = 'scopes' order by 1",
    "select c.relname, (select attname from pg_attribute where attrelid = c.oid and attnum = 1)"
    " from pg_class c where relnamespace = (select oid from pg_namespace where nspname = 'scopes')"
    " order by 1",
    # Lakehouse tables inside a statement that takes the rewrite path: `id` is the inner table's.
    "select id, (select count(*) from b where id = a.id), (select nspname from pg_namespace where"
    " nspname = 'scopes') from a order by 1",
    "select id, (select count(*) from b where a_id = id) from a order by 1",
    "select a.id, (select max(note) from b where a_id = a.id and id < 5), current_schema() from a"
    " order by 1",
    # An untyped array literal compared with = ANY (pgcli's \\dt, \\di): an array of the column's type.
    "select relname from pg_class c where c.relkind = any('{r,p}') and c.relnamespace ="
    " (select oid from pg_namespace where nspname = 'scopes') order by 1",
    "select relname from pg_class c where c.relkind <> all('{v,i}') and c.relnamespace ="
    " (select oid from pg_namespace where nspname = 'scopes') order by 1",
    # A CTE and a derived table with named outputs are scopes with known columns too.
    "with t as (select table_name as tn from information_schema.tables where table_schema = 'scopes')"
    " select tn, (select count(*) from information_schema.columns where table_name = tn and"
    " table_schema = 'scopes') from t order by 1",
    "select tn, (select count(*) from information_schema.columns where table_name = tn and"
    " table_schema = 'scopes') from (select table_name as tn from information_schema.tables"
    " where table_schema = 'scopes') d order by 1",
]


@pytest.mark.parametrize("sql", CATALOG_QUERIES)
def test_catalog_subqueries_bind_bare_names_as_postgresql(qctx: Any, pg: Any, sql: str) -> None:
    assert ours(qctx, sql) == theirs(pg, sql)


# A derived table without FROM that reads the outer row (a LATERAL one in all but name), inside a
# subquery: pgcli's foreignkeys() names a constraint's columns so (rewrite/functions.py,
# lateral_derived_tables). The lakehouse has no foreign keys, so the same shape over primary keys.
LATERAL_QUERIES = [
    "select t.relname, unnest((select array_agg(attname order by i) from (select unnest(conkey) as attnum,"
    " generate_subscripts(conkey, 1) as i) x join pg_catalog.pg_attribute c using (attnum)"
    " where c.attrelid = k.conrelid)) as col from pg_catalog.pg_constraint k"
    " join pg_catalog.pg_class t on t.oid = k.conrelid join pg_catalog.pg_namespace n on n.oid = t.relnamespace"
    " where k.contype = 'p' and n.nspname = 'scopes_pk'",
    "select a.id, (select count(*) from (select a.id as k) x join b on b.a_id = x.k) from a order by 1",
    "select a.id, (select string_agg(b.note, ',' order by b.note) from (select a.id as k, a.city as c) x"
    " join b on b.a_id = x.k where x.c = 'p') from a order by 1",
    "select relname, (select max(x.n) from (select c.relnatts + 1 as n) x) from pg_class c"
    " where relname in ('a', 'b', 'k') order by 1",
]


@pytest.mark.parametrize("sql", LATERAL_QUERIES)
def test_lateral_derived_tables_answer_as_postgresql(qctx: Any, pg: Any, sql: str) -> None:
    assert ours(qctx, sql) == theirs(pg, sql)
