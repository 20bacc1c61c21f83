"""A three-part name whose first part is the current database works everywhere a two-part name
does (dbt names every relation `"db"."schema"."table"`); another database's is 0A000; clients
that connect to database `postgres` reach the lakehouse. Differential against PostgreSQL 15: the
same statements, each server's own database name in them."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from tests.support.fixtures import real_postgres  # noqa: F401  (session fixture)
from tests.support.icegres_server import IcegresServer, running_icegres

pytestmark = pytest.mark.e2e

SCRIPT = [
    'create table "{db}"."threep"."t" (id int, name text)',
    'insert into "{db}"."threep"."t" values (1, \'a\'), (2, \'b\')',
    "insert into {db}.threep.t (id, name) select id + 10, name from {db}.threep.t",
    'update "{db}"."threep"."t" set name = \'z\' where id = 11',
    "delete from {db}.threep.t where id = 12",
    'select id, name from "{db}"."threep"."t" order by id',
    "select count(*) from {db}.threep.t x join threep.t y on x.id = y.id",
    "select table_name from {db}.information_schema.tables where table_schema = 'threep'",
    "select count(*) from {db}.pg_catalog.pg_class where relname = 't'",
    'create table "{db}"."threep"."c" as select id from "{db}"."threep"."t"',
    'alter table "{db}"."threep"."c" rename to "d"',
    'alter table "{db}"."threep"."d" add column extra int',
    "select * from {db}.threep.d order by id",
    # a view the way dbt creates one, an ephemeral model's CTE inside, then renames it
    'create view "{db}"."threep"."v__tmp" as (with e as (select id from "{db}"."threep"."t") '
    'select e.id, x.name from e join "{db}"."threep"."t" as x on x.id = e.id)',
    'alter table "{db}"."threep"."v__tmp" rename to "v"',
    'select id, name from "{db}"."threep"."v" order by id',
    'create view "{db}"."threep"."w" as select * from "other"."threep"."t"',
    'drop view if exists "{db}"."threep"."v" cascade',
    'drop table if exists "{db}"."threep"."d" cascade',
    'select * from "other"."threep"."t"',
    "insert into other.threep.t values (3, 'c')",
    "drop table other.threep.t",
]


def _run(conn: psycopg.Connection, sql: str) -> object:
    try:
        cur = conn.execute(sql)
        return ("rows", [tuple(map(str, r)) for r in cur.fetchall()]) if cur.description else ("ok",)
    except psycopg.Error as err:
        return ("error", err.diag.sqlstate)


@pytest.fixture(scope="module")
def icegres(tmp_path_factory: pytest.TempPathFactory) -> Iterator[IcegresServer]:
    with running_icegres(Path(tmp_path_factory.mktemp("dbnames")) / "data") as srv:
        yield srv


def test_three_part_names_as_postgresql(real_postgres, icegres: IcegresServer) -> None:  # noqa: F811
    with psycopg.connect(real_postgres.dsn(), autocommit=True) as pg, \
            psycopg.connect(icegres.dsn(), autocommit=True) as ours:
        for conn in (pg, ours):
            conn.execute("drop schema if exists threep cascade")
            conn.execute("create schema threep")
        pg_db = pg.execute("select current_database()").fetchone()[0]
        our_db = ours.execute("select current_database()").fetchone()[0]
        for template in SCRIPT:
            assert _run(ours, template.format(db=our_db)) == _run(pg, template.format(db=pg_db)), template


def test_database_postgres_is_the_lakehouse(icegres: IcegresServer) -> None:
    dsn = icegres.dsn().replace("dbname=icegres", "dbname=postgres")
    assert "dbname=postgres" in dsn
    with psycopg.connect(dsn, autocommit=True) as conn:
        assert conn.execute("select current_database()").fetchone() == ("icegres",)
        conn.execute("create schema if not exists viapg")
        conn.execute('create table "postgres"."viapg"."t" as select 1 as x')
        assert conn.execute("select x from postgres.viapg.t").fetchall() == [(1,)]
    with pytest.raises(psycopg.OperationalError, match='database "nope" does not exist'):
        psycopg.connect(icegres.dsn().replace("dbname=icegres", "dbname=nope"))


MISSING = [
    # dbt's singular tests read a seed and a model: the model missing, the seed there
    'with e as (select id from "{db}"."threep"."t") select * from "{db}"."threep"."gone" g join e on true',
    'select * from "{db}"."threep"."t" x join "{db}"."threep"."gone" y on x.id = y.id',
    "select * from {db}.threep.t x where x.id in (select id from {db}.threep.gone)",
    'select * from "{db}"."threep"."gone"',
]


def _failure(conn: psycopg.Connection, sql: str) -> tuple[str | None, str | None, str]:
    """(SQLSTATE, message, the statement from the error's position on): positions differ by the
    database names' lengths, the text they point at must not."""
    with pytest.raises(psycopg.Error) as caught:
        conn.execute(sql)
    diag = caught.value.diag
    at = sql[int(diag.statement_position) - 1:] if diag.statement_position else ""
    return diag.sqlstate, diag.message_primary, at


def test_a_missing_relation_beside_three_part_names_is_the_one_named(real_postgres, icegres: IcegresServer) -> None:  # noqa: F811
    with psycopg.connect(real_postgres.dsn(), autocommit=True) as pg, \
            psycopg.connect(icegres.dsn(), autocommit=True) as ours:
        dbs = {}
        for name, conn in (("pg", pg), ("ours", ours)):
            conn.execute("drop schema if exists threep cascade")
            conn.execute("create schema threep")
            conn.execute("create table threep.t (id int)")
            dbs[name] = conn.execute("select current_database()").fetchone()[0]
        for template in MISSING:
            theirs = _failure(pg, template.format(db=dbs["pg"]))
            got = _failure(ours, template.format(db=dbs["ours"]))
            assert got[:2] == (theirs[0], theirs[1].replace(dbs["pg"], dbs["ours"])), template
            assert got[2].replace(dbs["ours"], "{db}") == theirs[2].replace(dbs["pg"], "{db}"), template
