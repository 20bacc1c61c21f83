"""Column DEFAULTs (issue 29), statement by statement against a real PostgreSQL 15 (tags,
SQLSTATEs, table contents): on INSERT with a column list, `DEFAULT` in VALUES, DEFAULT VALUES,
INSERT … SELECT, MERGE's INSERT, ALTER COLUMN SET/DROP DEFAULT; then COPY, the volatile defaults,
what the catalog shows, and another icegres server applying the same defaults."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from tests.e2e.test_dml_semantics import _play
from tests.support.fixtures import real_postgres  # noqa: F401  (session fixture)
from tests.support.icegres_server import IcegresServer, running_icegres

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(240)]


@pytest.fixture(scope="module")
def icegres(tmp_path_factory: pytest.TempPathFactory) -> Iterator[IcegresServer]:
    with running_icegres(tmp_path_factory.mktemp("defaults") / "lake") as srv:
        yield srv


def test_defaults_are_applied_as_postgresql_applies_them(icegres: IcegresServer, real_postgres: Any) -> None:  # noqa: F811
    _play(icegres, real_postgres, """
        create table dd.d (id int, s text default 'x', n int default 40 + 2, f numeric(6,2) default 1.005, b boolean default true, z int)
        insert into dd.d (id) values (1), (2)
        insert into dd.d values (3, default, default, default, default, 7)
        insert into dd.d (id, n) values (4, default)
        insert into dd.d default values
        insert into dd.d (id, s) select 5, 'given'
        insert into dd.d (z, id) select 8, 6
        merge into dd.d using (select 9 as id) q on d.id = q.id when not matched then insert (id) values (q.id)
        merge into dd.d using (select 10 as id) q on d.id = q.id when not matched then insert default values
        alter table dd.d alter column z set default -1
        alter table dd.d alter column s drop default
        insert into dd.d (id) values (11)
        alter table dd.d alter column n set default 'abc'
        insert into dd.d (id, z) values (12, default)
        alter table dd.d alter column nope set default 1
        create table dd.bad (a int default b)
        create table dd.bad (a int default (select 1))
        create table dd.bad (a int default count(*))
    """, ("dd.d",))


def test_adding_a_column_with_a_default_fills_the_rows_there(icegres: IcegresServer, real_postgres: Any) -> None:  # noqa: F811
    """PostgreSQL gives the rows already there the new column's default (Iceberg v2 cannot say
    it in metadata: the rows are rewritten in the same commit as the schema change)."""
    _play(icegres, real_postgres, """
        create table dd.a (id int, v text)
        insert into dd.a values (1, 'x'), (2, 'y')
        alter table dd.a add column n int default 40 + 2
        insert into dd.a (id) values (3)
        alter table dd.a add column s text default 'dflt', add column k int
        alter table dd.a add column m numeric(5,2) default 1.005
        alter table dd.a add column bad int default 'abc'
        alter table dd.a add column nn int not null default 0
        alter table dd.a add column nz int not null default null
        alter table dd.a alter column n set not null
        insert into dd.a (id, n) values (9, null)
        alter table dd.a alter column k set not null
        alter table dd.a alter column k drop not null
        alter table dd.a add column n int default 1
        update dd.a set n = n + 1 where id = 1
    """, ("dd.a",))


def test_copy_volatile_defaults_and_the_catalog(icegres: IcegresServer, tmp_path: Any) -> None:
    with psycopg.connect(icegres.dsn(), autocommit=True) as c:
        c.execute("create schema vd")
        c.execute("create table vd.t (id int, at timestamptz default now(), u text default gen_random_uuid()::text, "
                  "n int default 7)")
        with c.cursor().copy("copy vd.t (id) from stdin") as copy:
            for i in range(3):
                copy.write_row((i,))
        c.execute("insert into vd.t (id) values (3), (4)")
        rows = c.execute("select id, at, u, n from vd.t order by id").fetchall()
        assert [r[3] for r in rows] == [7] * 5 and all(r[1] is not None for r in rows)
        assert len({r[2] for r in rows}) == 5  # a volatile default is evaluated per row
        got = c.execute("select column_name, column_default from information_schema.columns "
                        "where table_schema = 'vd' and table_name = 't' order by ordinal_position").fetchall()
        assert [g[0] for g in got] == ["id", "at", "u", "n"]
        assert got[0][1] is None and got[3][1] == "7" and got[1][1] and "uuid" in got[2][1].lower()
        # psql's \\d reads pg_attrdef through pg_get_expr.
        shown = c.execute("select a.attname, pg_catalog.pg_get_expr(d.adbin, d.adrelid, true) from pg_attribute a "
                          "join pg_attrdef d on d.adrelid = a.attrelid and d.adnum = a.attnum "
                          "where a.attrelid = 'vd.t'::regclass and a.atthasdef order by a.attnum").fetchall()
        assert [s[0] for s in shown] == ["at", "u", "n"]
    # Another server on the same catalog applies the same defaults: they live in the table's metadata.
    catalog = f"sqlite:///{icegres.data_dir / 'catalog.db'}"
    with running_icegres(tmp_path / "other", args=("--catalog-uri", catalog)) as other, \
            psycopg.connect(other.dsn(), autocommit=True) as c:
        c.execute("insert into vd.t (id) values (5)")
        assert c.execute("select n, u is not null from vd.t where id = 5").fetchone() == (7, True)


def test_flight_sql_bulk_ingest_fills_defaults(tmp_path: Any) -> None:
    import adbc_driver_flightsql.dbapi as adbc
    import pyarrow as pa

    with running_icegres(tmp_path / "lake", args=("--flight-port", "0")) as srv:
        with psycopg.connect(srv.dsn(), autocommit=True) as c:
            c.execute("create schema fi")
            c.execute("create table fi.t (id bigint, tag text default 'ingested', n int)")
        with adbc.connect(f"grpc://127.0.0.1:{srv.flight_port}", autocommit=True) as f, f.cursor() as cur:
            cur.adbc_ingest("t", pa.table({"id": pa.array([1, 2], pa.int64())}), mode="append", db_schema_name="fi")
        with psycopg.connect(srv.dsn(), autocommit=True) as c:
            assert c.execute("select id, tag, n from fi.t order by id").fetchall() == [(1, "ingested", None),
                                                                                      (2, "ingested", None)]
