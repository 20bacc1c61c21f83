"""The statements dbt's incremental models and snapshots send that icegres answered wrongly, each
against a real PostgreSQL 15 (the same command tags, SQLSTATEs and table contents after every
statement; test_dbt_incremental.py runs dbt itself). Found by that test:

- `merge into t as DBT_INTERNAL_DEST ... DBT_INTERNAL_DEST.id`: an unquoted name is folded to lower
  case, in DML targets, aliases, SET and INSERT column lists and output names too;
- `when not matched then insert ("id") values ("id")`: a NOT MATCHED clause sees the source alone;
- `delete ... where (k1, k2) in (select distinct k1, k2 from tmp)`: an IN of a row of values;
- `create temporary table ... as (select ... from <a view>)`: a temporary table's query reads views;
- `create table ... as select now()::timestamp ...`: a nanosecond column of DataFusion's is stored
  as PostgreSQL's microsecond timestamp.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.e2e.test_dml_semantics import _play
from tests.support.fixtures import real_postgres  # noqa: F401  (session fixture)
from tests.support.icegres_server import IcegresServer, running_icegres

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(240)]


@pytest.fixture(scope="module")
def icegres(tmp_path_factory: pytest.TempPathFactory) -> Iterator[IcegresServer]:
    with running_icegres(tmp_path_factory.mktemp("dbt_statements") / "lake") as srv:
        yield srv


def test_unquoted_names_fold_to_lower_case_in_writes(icegres: IcegresServer, real_postgres: Any) -> None:  # noqa: F811
    _play(icegres, real_postgres, """
        create table dd.f (id int, v text, "Q" int)
        insert into dd.f (ID, V) values (1, 'a'), (2, 'b')
        insert into DD.F values (3, 'c', 3)
        update dd.f as D set V = D.v || '!' where D.ID = 1
        update DD.f set "Q" = 7 where ID = 2 returning ID, "Q"
        update dd.f set q = 1
        merge into dd.f as DBT_INTERNAL_DEST using (select 2 as id, 'B' as v) as DBT_INTERNAL_SOURCE on DBT_INTERNAL_SOURCE.id = DBT_INTERNAL_DEST.id when matched then update set "v" = DBT_INTERNAL_SOURCE."v"
        merge into dd.f as T using (select 4 as Id) as S on S.ID = t.id when not matched then insert (ID, V) values (s.id, 'd')
        delete from dd.f as D using (select 3 as id) as S where S.id = d.ID
        delete from dd.f as X where X.id = 4 returning X.V
        select id as Total, v as "Value" from dd.f where id = 1
        select D.id from dd.f as D where d.id = 1
    """, ("dd.f",))


def test_a_merge_inserts_from_the_source_alone(icegres: IcegresServer, real_postgres: Any) -> None:  # noqa: F811
    """dbt's merge: `when not matched then insert ("id", "v") values ("id", "v")`, names the
    target has too; unqualified, they are the source's. The target is no FROM-clause entry there."""
    _play(icegres, real_postgres, """
        create table dd.m (id int, v text, n int)
        create table dd.ms (id int, v text, n int)
        insert into dd.m values (1, 'a', 1), (2, 'b', 2)
        insert into dd.ms values (2, 'B', 20), (3, 'C', 30), (null, 'N', 0)
        merge into dd.m as DBT_INTERNAL_DEST using dd.ms as DBT_INTERNAL_SOURCE on (DBT_INTERNAL_SOURCE.id = DBT_INTERNAL_DEST.id) when matched then update set "v" = DBT_INTERNAL_SOURCE."v","n" = DBT_INTERNAL_SOURCE."n" when not matched then insert ("id", "v", "n") values ("id", "v", "n")
        merge into dd.m as t using (select 5 as id, 'e' as v) s on s.id = t.id when not matched and v = 'e' then insert (id, v, n) values (id + 1, upper(v), 0)
        merge into dd.m t using dd.ms on ms.id = t.id when not matched and ms.id is null then insert values (ms.id, ms.v || '?', n)
        merge into dd.m using (select 7 as id) s on s.id = m.id when not matched then insert (id, v) values (s.id, m.v)
        merge into dd.m as t using (select 8 as id) s on s.id = t.id when not matched and t.id is null then insert (id) values (8)
        merge into dd.m as t using (select 9 as k, 'x' as v) s on s.k = t.id when not matched then insert (id, v) values (k, v)
    """, ("dd.m", "dd.ms"))


def test_a_row_of_values_in_a_subquery(icegres: IcegresServer, real_postgres: Any) -> None:  # noqa: F811
    """dbt's delete+insert with a composite unique_key: `where (k1, k2) in (select distinct k1,
    k2 from <new rows>)`; NULLs in the row or in the subquery's rows match nothing."""
    _play(icegres, real_postgres, """
        create table dd.r (a int, b int, v text)
        create table dd.rs (a int, b int)
        insert into dd.r values (1, 1, 'a'), (1, 2, 'b'), (2, 1, 'c'), (null, 1, 'n'), (3, 3, 'd')
        insert into dd.rs values (1, 2), (2, 1), (null, 1), (3, null)
        select v from dd.r where (a, b) in (select a, b from dd.rs) order by v
        select v from dd.r where (a, b) in (select * from dd.rs) or v = 'n' order by v
        select v from dd.r where (a, b) in (select a, b from dd.rs union select 1, 1) order by v
        select v from dd.r r where (b, a) in (select b as k, max(a) from dd.rs group by k) order by v
        select v from dd.r where ((a, b) in (select a, b from dd.rs)) is true order by v
        select v from dd.r where (a, b) in (select 1, 1) order by v
        update dd.r set v = v || '!' where (b, a) in (select 1, 1)
        delete from dd.r as DBT_INTERNAL_DEST where (a, b) in (select distinct a, b from dd.rs as DBT_INTERNAL_SOURCE)
        delete from dd.r where (a, b) in (select a, b from dd.rs where a > 5)
    """, ("dd.r", "dd.rs"))


def test_a_temporary_table_as_the_rows_of_a_view(icegres: IcegresServer, real_postgres: Any) -> None:  # noqa: F811
    """dbt's snapshot of a view model: `create temporary table "x__dbt_tmp..." as (with
    snapshot_query as (select * from <the view>) ...)`, in a block and out of one."""
    _play(icegres, real_postgres, """
        create table dd.vt (a int, b text)
        insert into dd.vt values (1, 'x'), (2, 'y')
        create view dd.vw as select a * 10 as a10, b from dd.vt
        create temporary table vw_rows as select * from dd.vw
        select * from vw_rows order by a10
        begin
        create temporary table vw_more as (with q as (select * from "dd"."vw") select a10 + 1 as n from q)
        select n from vw_more order by n
        commit
        create table dd.vt_copy as select * from vw_rows
        drop view dd.vw
    """, ("dd.vt", "dd.vt_copy"))


def test_a_table_made_from_now_holds_microsecond_timestamps(icegres: IcegresServer, real_postgres: Any) -> None:  # noqa: F811
    """dbt's check-strategy snapshot: `create table ... as (select *, now()::timestamp without
    time zone as dbt_valid_from, ...)`. DataFusion's now() is nanoseconds, which an Iceberg
    timestamp (microseconds, as PostgreSQL's) could not hold."""
    _play(icegres, real_postgres, """
        create table dd.nt as select 1::int as id, now() as at, now()::timestamp without time zone as local_at, current_date as day
        select id, at is not null, local_at is not null, day = current_date from dd.nt
        select column_name, data_type from information_schema.columns where table_schema = 'dd' and table_name = 'nt' order by ordinal_position
        insert into dd.nt select 2, now(), now()::timestamp, current_date
        select count(*), count(distinct id) from dd.nt where at <= now() and local_at is not null
    """, ())
    # (its values are the time of the run, which no two servers share: compared by the queries above)
