"""MERGE (issue 29), statement by statement against a real PostgreSQL 15: the same command tags,
SQLSTATEs and table contents after every statement; then one Iceberg commit per MERGE, 40001 under
a concurrent commit, prepared statements, Flight SQL, and a MERGE into a branch."""

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
    with running_icegres(tmp_path_factory.mktemp("merge") / "lake", args=("--flight-port", "0")) as srv:
        yield srv


SETUP = """
    create table dd.t (id int, v text, n int)
    create table dd.s (id int, v text, op text)
    insert into dd.t values (1, 'a', 1), (2, 'b', 2), (3, 'c', 3), (6, null, 6)
    insert into dd.s values (1, 'A', 'u'), (2, 'B', 'd'), (4, 'D', 'i'), (5, 'E', 'x'), (6, 'F', null)
"""


SCRIPT = SETUP + """
        merge into dd.t using dd.s on t.id = s.id when matched and s.op = 'd' then delete when matched and s.op = 'u' then update set v = s.v, n = t.n + 10 when not matched and s.op = 'i' then insert (id, v) values (s.id, s.v) when not matched then do nothing
        merge into dd.t as x using (select 3 as id, 'q' as w) q on x.id = q.id when matched then update set v = q.w
        merge into dd.t using dd.s on t.id = s.id when matched then do nothing when not matched then insert values (s.id, s.v || '!', 0)
        merge into dd.t using dd.s on t.id = s.id and s.op is null when matched then update set n = -1
        merge into dd.t using (select 100 as id) q on t.id = q.id when not matched then insert default values
        merge into dd.t using (select 3 as id union all select 3) q on t.id = q.id when matched then update set v = 'twice'
        merge into dd.t using (select 3 as id union all select 3) q on t.id = q.id when matched then do nothing
        merge into dd.t using dd.s on t.id = s.id when matched then insert values (1)
        merge into dd.t using dd.s on t.id = s.id when not matched then delete
        merge into dd.t using dd.s on t.id = s.nope when matched then delete
        merge into dd.t using dd.missing m on t.id = m.id when matched then delete
        merge into dd.t using dd.s on t.id = s.id when not matched then insert (id, v) values (s.id, t.v)
        merge into dd.t using dd.s on t.id = s.id when matched then update set n = s.v
        merge into dd.t using dd.s on t.id = s.id when matched then update set nope = 1
        merge into dd.t using dd.s on t.id = s.id when not matched then insert (id, nope) values (1, 2)
        merge into dd.t using dd.s on t.id = s.id when not matched then insert (id, v) values (1)
        merge into dd.t using dd.s on t.id = s.id when matched then update set n = n / 0
        merge into dd.t using dd.s on t.id = s.id when matched then delete
    """


def test_merge_as_postgresql_runs_it(icegres: IcegresServer, real_postgres: Any) -> None:  # noqa: F811
    _play(icegres, real_postgres, SCRIPT, ("dd.t", "dd.s"))


def test_merge_into_an_empty_table_and_from_an_empty_source(icegres: IcegresServer, real_postgres: Any) -> None:  # noqa: F811
    _play(icegres, real_postgres, """
        create table dd.e (id int, v text)
        create table dd.src (id int, v text)
        merge into dd.e using dd.src on e.id = src.id when not matched then insert values (src.id, src.v)
        insert into dd.src values (1, 'x'), (2, 'y')
        merge into dd.e using dd.src on e.id = src.id when matched then update set v = src.v when not matched then insert values (src.id, src.v)
        merge into dd.e using dd.src on e.id = src.id when matched then update set v = src.v || src.v when not matched then insert values (src.id, src.v)
        delete from dd.src
        merge into dd.e using dd.src on e.id = src.id when matched then delete
    """, ("dd.e", "dd.src"))


def _seed(dsn: str, schema: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute(f"create schema {schema}")
        c.execute(f"create table {schema}.t (id int, v text)")
        c.execute(f"create table {schema}.s (id int, v text)")
        c.execute(f"insert into {schema}.t values (1, 'a'), (2, 'b')")
        c.execute(f"insert into {schema}.s values (1, 'one'), (3, 'three')")


UPSERT = ("merge into {ns}.t using {ns}.s on t.id = s.id when matched then update set v = s.v || '{who}' "
          "when not matched then insert values (s.id, s.v || '{who}')")


def test_one_merge_is_one_iceberg_commit(icegres: IcegresServer) -> None:
    _seed(icegres.dsn(), "oc")
    with psycopg.connect(icegres.dsn(), autocommit=True) as c:
        before = c.execute('select count(*) from oc."t$snapshots"').fetchone()[0]
        assert c.execute(UPSERT.format(ns="oc", who="")).statusmessage == "MERGE 2"
        assert c.execute('select count(*) from oc."t$snapshots"').fetchone()[0] == before + 1
        assert c.execute("select id, v from oc.t order by id").fetchall() == [(1, "one"), (2, "b"), (3, "three")]


def test_concurrent_merges_of_the_same_keys_one_gets_40001(icegres: IcegresServer) -> None:
    _seed(icegres.dsn(), "cm")
    with psycopg.connect(icegres.dsn()) as a, psycopg.connect(icegres.dsn()) as b:
        a.execute(UPSERT.format(ns="cm", who="-a"))
        b.execute(UPSERT.format(ns="cm", who="-b"))
        a.commit()
        with pytest.raises(psycopg.errors.SerializationFailure):
            b.commit()
        b.execute(UPSERT.format(ns="cm", who="-b"))  # retried: it runs after a, a serial order
        b.commit()
        got = a.execute("select id, v from cm.t order by id").fetchall()
    assert got == [(1, "one-b"), (2, "b"), (3, "three-b")]


def test_prepared_merge_with_parameters(icegres: IcegresServer) -> None:
    _seed(icegres.dsn(), "pm")
    sql = ("merge into pm.t using (select %s::int as id, %s::text as v) q on t.id = q.id "
           "when matched then update set v = %s when not matched then insert values (q.id, q.v)")
    with psycopg.connect(icegres.dsn(), autocommit=True) as c:
        for args in ((1, "x", "updated"), (7, "seven", "unused"), (7, "again", "re-updated")):
            assert c.execute(sql, args, prepare=True).statusmessage == "MERGE 1"
        assert c.execute("select id, v from pm.t order by id").fetchall() == [(1, "updated"), (2, "b"),
                                                                             (7, "re-updated")]


def test_merge_over_flight_sql_and_into_a_branch(icegres: IcegresServer) -> None:
    import adbc_driver_flightsql.dbapi as adbc

    _seed(icegres.dsn(), "fm")
    with psycopg.connect(icegres.dsn(), autocommit=True) as c:
        c.execute("alter table fm.t create branch dev")
        assert c.execute(UPSERT.format(ns="fm", who="@dev").replace("into fm.t", 'into fm."t@dev"', 1)
                         .replace("on t.id", 'on "t@dev".id')).statusmessage == "MERGE 2"
        assert c.execute('select id, v from fm."t@dev" order by id').fetchall() == [
            (1, "one@dev"), (2, "b"), (3, "three@dev")]
        assert c.execute("select id, v from fm.t order by id").fetchall() == [(1, "a"), (2, "b")]
    with adbc.connect(f"grpc://127.0.0.1:{icegres.flight_port}", autocommit=True) as f, f.cursor() as cur:
        cur.execute(UPSERT.format(ns="fm", who="-flight"))
        cur.execute("select id, v from fm.t order by id")
        assert cur.fetchall() == [(1, "one-flight"), (2, "b"), (3, "three-flight")]


# NULL keys and conditions, a partitioned target (icegres's own partitioning: PostgreSQL gets a
# plain table of the same columns), every column type a change assigns, and a table joined to
# itself — MERGE, UPDATE … FROM and DELETE … USING each, differential against PostgreSQL 15.
EDGE_SCRIPTS = {
"nulls": """
    create table dd.t (id int, v text, n int)
    create table dd.s (id int, v text)
    insert into dd.t values (1, 'a', 1), (null, 'n', 2), (3, null, 3)
    insert into dd.s values (1, 'A'), (null, 'N'), (4, null)
    merge into dd.t using dd.s on t.id = s.id when matched then update set v = s.v when not matched then insert values (s.id, s.v, 0)
    merge into dd.t using dd.s on t.id = s.id and s.v is not null when matched and t.n > 0 then update set n = t.n * 10 when not matched and s.id is not null then insert (id) values (s.id)
    update dd.t set n = coalesce(t.n, 0) + 1 from dd.s where t.id is not distinct from s.id
    delete from dd.t using dd.s where t.v = s.v or (t.v is null and s.v is null)
""",
"partitioned": """
    create table if not exists dd.p (id int, day date, v int)
    create table dd.q (id int, v int)
    insert into dd.p values (1, '2024-01-01', 1), (2, '2024-01-02', 2), (3, '2024-01-03', 3)
    insert into dd.q values (2, 20), (3, 30), (4, 40)
    merge into dd.p using dd.q on p.id = q.id when matched and q.v > 25 then delete when matched then update set v = q.v when not matched then insert values (q.id, '2024-01-09', q.v)
    update dd.p set v = p.v + q.v from dd.q where p.id = q.id
    delete from dd.p using dd.q where p.id = q.id
""",
"types": """
    create table dd.ty (id int, b boolean, d date, ts timestamp, f double precision, x numeric(10,3), arr int[])
    create table dd.src (id int, b boolean, d date, ts timestamp, f double precision, x numeric(10,3))
    insert into dd.ty values (1, true, '2024-01-01', '2024-01-01 10:00', 1.5, 1.25, array[1,2])
    insert into dd.src values (1, false, '2024-02-02', '2024-02-02 12:30:45', 2.25, 9.875), (2, null, null, null, null, null)
    merge into dd.ty using dd.src on ty.id = src.id when matched then update set b = src.b, d = src.d, ts = src.ts, f = src.f, x = src.x when not matched then insert (id, b, d, ts, f, x) values (src.id, src.b, src.d, src.ts, src.f, src.x)
    update dd.ty set x = src.x * 2, f = src.f / 2 from dd.src where ty.id = src.id and src.id = 1
    update dd.ty set d = src.d + 1 from dd.src where ty.id = src.id
    merge into dd.ty using (select 1 as id) q on ty.id = q.id when matched then update set x = 12345678.9999
""",
"self": """
    create table dd.e (id int, boss int, name text)
    insert into dd.e values (1, null, 'a'), (2, 1, 'b'), (3, 2, 'c')
    update dd.e set name = e.name || '<' || b.name from dd.e b where e.boss = b.id
    merge into dd.e using dd.e b on e.id = b.boss when matched then update set name = e.name || '^'
    merge into dd.e as x using (select id + 10 as id, name from dd.e) y on x.id = y.id when not matched then insert values (y.id, null, y.name)
    delete from dd.e as x using dd.e y where x.boss = y.id and y.name like 'a%'
""",
}

EDGE_TABLES = {"nulls": ("t", "s"), "partitioned": ("p", "q"), "types": ("ty", "src"), "self": ("e",)}


@pytest.mark.parametrize("name", sorted(EDGE_SCRIPTS))
def test_edges_as_postgresql_runs_them(icegres: IcegresServer, real_postgres: Any, name: str) -> None:  # noqa: F811
    with psycopg.connect(icegres.dsn(), autocommit=True) as c:
        c.execute("create schema if not exists dd")
        c.execute("drop table if exists dd.p")
        c.execute("create table dd.p (id int, day date, v int) with (partitioning = 'day(day)')")
    _play(icegres, real_postgres, EDGE_SCRIPTS[name], tuple(f"dd.{t}" for t in EDGE_TABLES[name]))
