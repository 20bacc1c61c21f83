"""UPDATE … FROM and DELETE … USING (issue 29), statement by statement against a real PostgreSQL
15: the same command tags, SQLSTATEs and table contents after every statement; then their 40001
under a concurrent commit, and the statements over Flight SQL."""

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
    with running_icegres(tmp_path_factory.mktemp("update_from") / "lake", args=("--flight-port", "0")) as srv:
        yield srv


SETUP = """
    create table dd.t (id int, x text, n int)
    create table dd.s (id int, y text, k int)
    insert into dd.t values (1, 'a', 10), (2, 'b', 20), (3, 'c', 30), (4, null, 40)
    insert into dd.s values (1, 'A', 1), (2, 'B', 2), (2, 'B', 3), (9, 'Z', 9)
"""


def test_update_from_joins_other_tables_as_postgresql_does(icegres: IcegresServer, real_postgres: Any) -> None:  # noqa: F811
    _play(icegres, real_postgres, SETUP + """
        update dd.t set x = s.y from dd.s where t.id = s.id
        update dd.t set n = t.n + s.k from dd.s where t.id = s.id and s.k = 1
        update dd.t as a set x = s.y || '!', n = s.k * 100 from dd.s s where a.id = s.id and s.y = 'A' returning a.id, a.x, a.n
        update dd.t set x = q.v from (select 3 as id, 'sub' as v) q where t.id = q.id returning t.*
        update dd.t set n = q.k from (select 3 as id, 7 as k, 'q' as note) q where t.id = q.id returning t.id, q.note, q.k + t.n as sum, note
        update dd.t set n = 5 from dd.s where t.id = s.id and s.k = 1 returning *
        update dd.t set n = 6 from dd.s where t.id = s.id and s.k = 1 returning s.*, t.x
        update dd.t set n = 6 from dd.s where t.id = s.id and s.k = 100 returning s.*, t.x
        update dd.t set x = 'joined' from dd.s join dd.t t2 on t2.id = s.id where t.id = s.id and t2.n > 20
        update dd.t set x = 'none' from dd.s where t.id = s.id and s.k > 100
        update dd.t set n = s.k from dd.s, (select 2 as id) w where t.id = s.id and s.id = w.id and s.k = 3
        update dd.t as a set x = t.x || '?' from dd.t where a.id = t.id + 1
        update dd.t set x = s.y from dd.s where id = s.id
        update dd.t set x = s.nope from dd.s where t.id = s.id
        update dd.t set x = s.y from dd.missing s where t.id = s.id
        update dd.t set x = 'z' from dd.t where t.id = 1
        update dd.t set n = s.y from dd.s where t.id = s.id
        update dd.t set n = s.k / 0 from dd.s where t.id = s.id
        update dd.t set n = x where id = 1
        update dd.t set x = n where id = 1
        update dd.t set n = (n > 5) where id = 1
    """, ("dd.t", "dd.s"))


def test_delete_using_joins_other_tables_as_postgresql_does(icegres: IcegresServer, real_postgres: Any) -> None:  # noqa: F811
    _play(icegres, real_postgres, SETUP + """
        delete from dd.t using dd.s where t.id = s.id and s.y = 'Z'
        delete from dd.t using dd.s where t.id = s.id and s.y = 'B' and s.k = 2 returning *
        delete from dd.t as a using dd.s s, (select 1 as id) q where a.id = s.id and s.id = q.id returning a.id, s.y, q.id + 1
        delete from dd.t using dd.s join dd.s s2 on s2.id = s.id where t.id = s.id
        delete from dd.t using dd.s where id = s.id
        delete from dd.t using dd.s where t.id = s.nope
        delete from dd.t using dd.t where t.id = 1
        delete from dd.t using dd.s where t.n > 30 and s.id = 9
    """, ("dd.t", "dd.s"))


def test_a_view_and_a_cte_as_sources(icegres: IcegresServer, real_postgres: Any) -> None:  # noqa: F811
    _play(icegres, real_postgres, SETUP + """
        create view dd.v as select id, upper(y) as y from dd.s where k < 3
        update dd.t set x = v.y from dd.v where t.id = v.id
        delete from dd.t using dd.v where t.id = v.id and v.y = 'A'
        drop view dd.v
    """, ("dd.t",))


def _seed(dsn: str, schema: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute(f"create schema {schema}")
        c.execute(f"create table {schema}.t (id int, x text)")
        c.execute(f"create table {schema}.s (id int, y text)")
        c.execute(f"insert into {schema}.t values (1, 'a'), (2, 'b')")
        c.execute(f"insert into {schema}.s values (1, 'one'), (2, 'two')")


@pytest.mark.parametrize("second", [
    "update cc{n}.t set x = s.y || '-b' from cc{n}.s where t.id = s.id",
    "delete from cc{n}.t using cc{n}.s where t.id = s.id",
])
def test_a_concurrent_commit_to_the_rows_makes_the_second_40001(icegres: IcegresServer, second: str) -> None:
    n = abs(hash(second)) % 10_000
    _seed(icegres.dsn(), f"cc{n}")
    with psycopg.connect(icegres.dsn()) as a, psycopg.connect(icegres.dsn()) as b:
        a.execute(f"update cc{n}.t set x = s.y || '-a' from cc{n}.s where t.id = s.id")
        b.execute(second.format(n=n))
        a.commit()
        with pytest.raises(psycopg.errors.SerializationFailure):
            b.commit()
        # Retried, it applies on top of the first: the result of some serial order.
        b.execute(second.format(n=n))
        b.commit()
        got = a.execute(f"select id, x from cc{n}.t order by id").fetchall()
    assert got in ([(1, "one-b"), (2, "two-b")], [])


def test_over_flight_sql(icegres: IcegresServer) -> None:
    import adbc_driver_flightsql.dbapi as adbc

    _seed(icegres.dsn(), "fl")
    with adbc.connect(f"grpc://127.0.0.1:{icegres.flight_port}", autocommit=True) as c, c.cursor() as cur:
        cur.execute("update fl.t set x = s.y from fl.s where t.id = s.id and s.id = ?", parameters=(1,))
        cur.execute("delete from fl.t using fl.s where t.id = s.id and s.y = 'two'")
        cur.execute("select id, x from fl.t order by id")
        assert cur.fetchall() == [(1, "one")]


def test_prepared_with_parameters_over_pgwire(icegres: IcegresServer) -> None:
    _seed(icegres.dsn(), "pp")
    with psycopg.connect(icegres.dsn(), autocommit=True) as c:
        for i in (1, 2):
            tag = c.execute("update pp.t set x = s.y || %s from pp.s where t.id = s.id and s.id = %s",
                            ("!", i), prepare=True).statusmessage
            assert tag == "UPDATE 1"
        assert c.execute("delete from pp.t using pp.s where t.id = s.id and s.y = %s returning t.id",
                         ("two",), prepare=True).fetchall() == [(2,)]
        assert c.execute("select id, x from pp.t").fetchall() == [(1, "one!")]


def test_assigned_values_are_conformed_as_postgresql_assigns(icegres: IcegresServer, real_postgres: Any) -> None:  # noqa: F811
    _play(icegres, real_postgres, """
        create table dd.v (id int, v varchar(3))
        create table dd.w (id int, w text)
        insert into dd.v values (1, 'a')
        insert into dd.w values (1, 'abcdef'), (2, 'xy')
        update dd.v set v = w.w from dd.w where v.id = w.id
        update dd.v set v = w.w from dd.w where w.id = 2 and v.id = 1
        merge into dd.v using dd.w on v.id = w.id when matched then update set v = w.w || 'z'
        merge into dd.v using dd.w on v.id = w.id when matched then update set v = 'q'
        create table dd.n (id int, d numeric(6,2))
        insert into dd.n values (1, 0), (2, 0)
        update dd.n set d = 1.005 where id = 1
        update dd.n set d = -2.675 from dd.w where n.id = w.id and w.id = 2
        merge into dd.n using dd.w on n.id = w.id when matched then update set d = 3.335
    """, ("dd.v", "dd.w", "dd.n"))


def test_now_in_a_joined_update_and_a_merge(icegres: IcegresServer) -> None:
    """DataFusion's now() is nanoseconds; the column keeps microseconds (it failed XX000)."""
    _seed(icegres.dsn(), "nw")
    with psycopg.connect(icegres.dsn(), autocommit=True) as c:
        c.execute("alter table nw.t add column at timestamptz")
        assert c.execute("update nw.t set at = now() from nw.s where t.id = s.id").statusmessage == "UPDATE 2"
        c.execute("merge into nw.t using nw.s on t.id = s.id when matched then update set at = now() - interval '1 day'")
        assert c.execute("select count(*) from nw.t where at < now() - interval '23 hours'").fetchone() == (2,)
