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


def test_merge_as_postgresql_runs_it(icegres: IcegresServer, real_postgres: Any) -> None:  # noqa: F811
    _play(icegres, real_postgres, SETUP + """
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
    """, ("dd.t", "dd.s"))


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
