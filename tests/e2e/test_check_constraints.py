"""CHECK constraints and NOT NULL (issue 29), statement by statement against a real PostgreSQL 15:
the same tags, SQLSTATEs, messages and DETAILs (`Failing row contains (...)`) and table contents,
on INSERT, multi-row INSERT, INSERT … SELECT, UPDATE, UPDATE … FROM, MERGE, INSERT … ON CONFLICT,
ALTER TABLE … ADD / DROP CONSTRAINT, RENAME and DROP COLUMN; the generated names and what the
catalog shows; then the paths PostgreSQL has no twin for here — COPY, the write buffer, Flight SQL
executemany and bulk ingest — and a second icegres server on the same catalog."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from tests.support.differential import outcome as _run
from tests.support.fixtures import real_postgres  # noqa: F401  (session fixture)
from tests.support.icegres_server import IcegresServer, running_icegres

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]


@pytest.fixture(scope="module")
def icegres(tmp_path_factory: pytest.TempPathFactory) -> Iterator[IcegresServer]:
    with running_icegres(tmp_path_factory.mktemp("checks") / "lake") as srv:
        yield srv


def _play(icegres: IcegresServer, postgres: Any, script: str, tables: tuple[str, ...], exact: bool = True) -> None:
    """`script` on both; `exact` compares the errors' messages and DETAILs too, else the SQLSTATEs."""
    with psycopg.connect(postgres.dsn(), autocommit=True) as pg, psycopg.connect(icegres.dsn(), autocommit=True) as ig:
        _run(pg, "drop schema if exists ck cascade")
        for conn in (pg, ig):
            assert _run(conn, "create schema if not exists ck")[0] == "ok"
        try:
            for sql in (s.strip() for s in script.strip().splitlines() if s.strip()):
                theirs, ours = _run(pg, sql), _run(ig, sql)
                if not exact and theirs[0] == ours[0] == "error":
                    theirs, ours = theirs[:2], ours[:2]
                assert ours == theirs, f"{sql}\n  postgres: {theirs}\n  icegres:  {ours}"
                for table in tables:
                    dump = f"select * from {table} order by 1"
                    assert _run(ig, dump) == _run(pg, dump), f"rows of {table} after: {sql}"
        finally:
            for table in tables:
                _run(ig, f"drop table if exists {table}")


def test_checks_are_enforced_as_postgresql_enforces_them(icegres: IcegresServer, real_postgres: Any) -> None:  # noqa: F811
    _play(icegres, real_postgres, """
        create table ck.t (id int, a int check (a > 0), b text not null constraint short check (length(b) < 5), c numeric(6,2), check (a < id * 10), constraint c_pos check (c is null or c >= 0))
        insert into ck.t values (1, 5, 'x', 1.5)
        insert into ck.t values (2, -1, 'x', null)
        insert into ck.t values (3, 5, 'toolong', null)
        insert into ck.t values (4, null, 'ok', null)
        insert into ck.t values (5, 1, null, null)
        insert into ck.t values (6, 1, 'a', null), (7, -7, 'b', null)
        insert into ck.t values (8, 1, 'a', null), (9, 1, null, null), (10, -1, 'c', null)
        insert into ck.t values (11, -1, 'a', null), (12, 1, null, null)
        insert into ck.t values (13, 200, 'b', -0.5)
        insert into ck.t values (14, 0, 'x', -1)
        insert into ck.t (id, b) values (15, 'd')
        insert into ck.t select 16, -3, 'e', 1
        insert into ck.t select g, g, 'f', g from generate_series(20, 25) g
        insert into ck.t values (30, 1, 'this value is much longer than sixty-four bytes so the detail cuts it short', 2)
        update ck.t set a = -a where id = 1
        update ck.t set b = 'longer' where id = 4
        update ck.t set b = null where id = 4
        update ck.t set a = a + 100 where id >= 20
        update ck.t set a = 2 where id = 1
        update ck.t set c = t.c - s.d from (values (20, 30.0), (21, 1.0)) s(i, d) where t.id = s.i
        update ck.t set c = t.c - s.d from (values (21, 1.0)) s(i, d) where t.id = s.i
        merge into ck.t using (values (22, -5), (40, 1)) s(i, v) on t.id = s.i when matched then update set a = s.v when not matched then insert values (s.i, s.v, 'm', null)
        merge into ck.t using (values (22, 5), (41, -1)) s(i, v) on t.id = s.i when matched then update set a = s.v when not matched then insert values (s.i, s.v, 'm', null)
        merge into ck.t using (values (22, 6), (42, 1)) s(i, v) on t.id = s.i when matched then update set a = s.v when not matched then insert values (s.i, s.v, 'm', null)
        alter table ck.t add constraint small_id check (id < 100)
        alter table ck.t add constraint tiny_id check (id < 5)
        alter table ck.t add constraint tiny_id check (id < 5) not valid
        insert into ck.t values (50, 1, 'v', null)
        alter table ck.t drop constraint tiny_id
        insert into ck.t values (50, 1, 'v', null)
        alter table ck.t drop constraint tiny_id
        alter table ck.t drop constraint if exists tiny_id
        alter table ck.t add constraint short check (id > 0)
        alter table ck.t add check (id > -1), add check (id > -2)
        alter table ck.t rename column a to aa
        insert into ck.t values (51, -1, 'r', null)
        alter table ck.t drop column aa
        insert into ck.t values (52, 'q', -1)
        insert into ck.t values (53, 'q', 1)
    """, ("ck.t",))


def test_a_not_valid_check_leaves_the_old_rows_alone(icegres: IcegresServer, real_postgres: Any) -> None:  # noqa: F811
    """Only new row versions are checked: rows a NOT VALID check never read stay, and rewriting
    their files (an UPDATE or DELETE of a neighbour, MERGE, an upsert) does not check them."""
    _play(icegres, real_postgres, """
        create table ck.nv (id int primary key, a int)
        insert into ck.nv values (1, -1), (2, 5), (3, -3)
        alter table ck.nv add constraint pos check (a > 0)
        alter table ck.nv add constraint pos check (a > 0) not valid
        update ck.nv set a = 6 where id = 2
        update ck.nv set a = -2 where id = 2
        delete from ck.nv where id = 2
        insert into ck.nv values (4, 0)
        merge into ck.nv using (values (1, 3)) s(i, v) on nv.id = s.i when matched then update set a = s.v
        merge into ck.nv using (values (3, -5)) s(i, v) on nv.id = s.i when matched then update set a = s.v
        insert into ck.nv values (5, 1) on conflict (id) do update set a = excluded.a
        insert into ck.nv values (5, -1) on conflict (id) do update set a = excluded.a
        update ck.nv set a = s.v from (values (5, 9)) s(i, v) where nv.id = s.i
    """, ("ck.nv",))


def test_checks_on_upserts_and_keys(icegres: IcegresServer, real_postgres: Any) -> None:  # noqa: F811
    _play(icegres, real_postgres, """
        create table ck.k (id int primary key, qty int not null check (qty >= 0), note text)
        insert into ck.k values (1, 1, 'a'), (2, 2, 'b')
        insert into ck.k values (1, 5, 'x') on conflict (id) do update set qty = excluded.qty - 10
        insert into ck.k values (1, 5, 'x') on conflict (id) do update set qty = excluded.qty
        insert into ck.k values (3, -1, 'x') on conflict (id) do nothing
        insert into ck.k values (3, 3, 'x') on conflict (id) do nothing
        update ck.k set qty = qty - 2 where id <= 2
        update ck.k set qty = qty - 1 where id <= 2
    """, ("ck.k",))


def test_declaring_a_bad_check_fails_as_in_postgresql(icegres: IcegresServer, real_postgres: Any) -> None:  # noqa: F811
    _play(icegres, real_postgres, """
        create table ck.bad (a int check (a + 1))
        create table ck.bad (a int check (nope > 1))
        create table ck.bad (a int check (a > (select 1)))
        create table ck.bad (a int check (count(*) > 0))
        create table ck.bad (a int, constraint x check (a > 0), constraint x check (a < 9))
        create table ck.good (a int, check (a > 0) no inherit)
        alter table ck.good add constraint x check (nope > 0)
        alter table ck.good add constraint x check (a)
        alter table ck.good drop constraint good_pkey
        insert into ck.good values (0)
    """, ("ck.good",), exact=False)


def test_generated_names_and_the_catalog(icegres: IcegresServer, real_postgres: Any) -> None:  # noqa: F811
    _play(icegres, real_postgres, """
        create table ck.n (id int primary key, a int check (a > 0) check (a < 10), b int, check (a < b), check (b > 0), constraint named check (b < 100))
        alter table ck.n add check (b <> 7)
        alter table ck.n add check (id > 0)
        select conname, contype from pg_constraint where conrelid = 'ck.n'::regclass order by conname
        select constraint_name, constraint_type from information_schema.table_constraints where table_schema = 'ck' and constraint_name not like '%not_null' order by 1
        select count(*) from information_schema.table_constraints where table_schema = 'ck' and constraint_name like '%_1_not_null'
        select check_clause from information_schema.check_constraints where constraint_schema = 'ck' and constraint_name like '%not_null'
        select constraint_name from information_schema.check_constraints where constraint_schema = 'ck' and constraint_name not like '%not_null' order by 1
        select pg_get_constraintdef(oid) from pg_constraint where conrelid = 'ck.n'::regclass and conname in ('n_id_check', 'n_a_check')
    """, ("ck.n",))


def test_psql_describes_the_checks(icegres: IcegresServer, tmp_path: Any) -> None:
    import shutil
    import subprocess

    psql = shutil.which("psql")
    assert psql, "psql is installed by infra/system-deps.sh"
    with psycopg.connect(icegres.dsn(), autocommit=True) as c:
        c.execute("create schema if not exists ckd")
        c.execute("create table ckd.p (id int, qty int check (qty >= 0), constraint sane check (id < qty * 100))")
    out = subprocess.run([psql, icegres.dsn(), "-X", "-c", r"\d ckd.p"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "Check constraints:" in out.stdout
    assert '"p_qty_check" CHECK ((qty >= 0))' in out.stdout and '"sane" CHECK ((id < qty * 100))' in out.stdout


def _violation(call: Any) -> str:
    with pytest.raises(Exception) as info:
        call()
    return str(info.value)


def test_every_other_write_path_enforces_checks(tmp_path: Any) -> None:
    """COPY, the write buffer's INSERTs and COPY, Flight SQL executemany and bulk ingest; and
    another server on the same catalog enforces what the first declared."""
    import adbc_driver_flightsql.dbapi as adbc
    import pyarrow as pa

    with running_icegres(tmp_path / "lake", args=("--flight-port", "0", "--write-buffer-ms", "20")) as srv:
        with psycopg.connect(srv.dsn(), autocommit=True) as c:
            c.execute("create schema wp")
            c.execute("create table wp.t (id bigint not null, qty bigint check (qty >= 0))")
            with pytest.raises(psycopg.errors.CheckViolation) as info:
                with c.cursor().copy("copy wp.t from stdin") as copy:
                    copy.write_row((1, 1))
                    copy.write_row((2, -2))
            assert info.value.diag.message_detail == "Failing row contains (2, -2)."
            with pytest.raises(psycopg.errors.NotNullViolation) as nulls:
                with c.cursor().copy("copy wp.t from stdin") as copy:
                    copy.write_row((None, 1))
            assert nulls.value.diag.message_detail == "Failing row contains (null, 1)."
            with pytest.raises(psycopg.errors.CheckViolation):
                c.execute("insert into wp.t values (%s, %s)", (3, -3))  # buffered: checked before the ack
            c.execute("insert into wp.t values (%s, %s)", (4, 4))
        with adbc.connect(f"grpc://127.0.0.1:{srv.flight_port}", autocommit=True) as f, f.cursor() as cur:
            assert "violates check constraint" in _violation(
                lambda: cur.executemany("insert into wp.t values (?, ?)", [(5, 5), (6, -6)]))
            assert "violates check constraint" in _violation(
                lambda: cur.adbc_ingest("t", pa.table({"id": pa.array([7, 8], pa.int64()), "qty": pa.array([7, -8], pa.int64())}),
                                        mode="append", db_schema_name="wp"))
            cur.adbc_ingest("t", pa.table({"id": pa.array([9], pa.int64()), "qty": pa.array([9], pa.int64())}),
                            mode="append", db_schema_name="wp")
        with psycopg.connect(srv.dsn(), autocommit=True) as c:
            assert c.execute("select id from wp.t order by id").fetchall() == [(4,), (9,)]
    catalog = f"sqlite:///{tmp_path / 'lake' / 'catalog.db'}"
    with running_icegres(tmp_path / "other", args=("--catalog-uri", catalog)) as other, \
            psycopg.connect(other.dsn(), autocommit=True) as c:
        with pytest.raises(psycopg.errors.CheckViolation):
            c.execute("insert into wp.t values (10, -10)")
        c.execute("insert into wp.t values (10, 10)")
        assert c.execute("select count(*) from wp.t").fetchone() == (3,)
