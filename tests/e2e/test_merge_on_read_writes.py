"""icegres's own merge-on-read writes: a table with write.delete.mode / write.update.mode /
write.merge.mode = merge-on-read gets position-delete files, not rewritten data files.

Every statement runs on a merge-on-read table and on a copy-on-write twin, and both must hold the
same rows after it (RETURNING and command tags alike); pyiceberg reads the merge-on-read table as
icegres does, on the default SQLite catalog; DuckDB-iceberg and pyiceberg do through SeaweedFS's
REST catalog. A block's two statements on one table commit one delete file or roll back to
nothing; two sessions updating one row concurrently: one gets 40001 (else the row would live
twice); time travel before the commit and a restarted server read what they should.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tests.e2e import test_merge
from tests.e2e.test_dml_semantics import _play
from tests.support.fixtures import real_postgres  # noqa: F401  (session fixture)
from tests.support.icegres_server import IcegresServer, running_icegres
from tests.support.ladder import catalog

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]

MOR = ('("write.delete.mode" = \'merge-on-read\', "write.update.mode" = \'merge-on-read\', '
       '"write.merge.mode" = \'merge-on-read\')')


@pytest.fixture(scope="module")
def icegres(tmp_path_factory: pytest.TempPathFactory) -> Iterator[IcegresServer]:
    with running_icegres(tmp_path_factory.mktemp("mor") / "lake", args=("--flight-port", "0")) as srv:
        yield srv


def test_over_flight_sql_and_into_a_branch(icegres: IcegresServer) -> None:
    """Flight SQL's statements write merge-on-read too; a branch's are copy-on-write (and right)."""
    import adbc_driver_flightsql.dbapi as adbc

    with psycopg.connect(icegres.dsn(), autocommit=True) as c:
        c.execute("create schema fm")
        c.execute("create table fm.t (id int, v text)")
        c.execute("create table fm.s (id int, v text)")
        c.execute("insert into fm.t values (1, 'a'), (2, 'b')")
        c.execute("insert into fm.s values (1, 'one'), (3, 'three')")
        c.execute(f"alter table fm.t set {MOR}")
        c.execute("alter table fm.t create branch dev")
        c.execute('update fm."t@dev" set v = \'dev\' where id = 2')
        assert c.execute('select id, v from fm."t@dev" order by id').fetchall() == [(1, "a"), (2, "dev")]
    with adbc.connect(f"grpc://127.0.0.1:{icegres.flight_port}", autocommit=True) as f, f.cursor() as cur:
        cur.execute("merge into fm.t using fm.s on t.id = s.id when matched then update set v = s.v "
                    "when not matched then insert values (s.id, s.v)")
        cur.execute("delete from fm.t where id = 2")
        cur.execute("select id, v from fm.t order by id")
        assert cur.fetchall() == [(1, "one"), (3, "three")]
    with psycopg.connect(icegres.dsn(), autocommit=True) as c:
        summaries = [s for (s,) in c.execute('select summary from fm."t$snapshots" order by committed_at')]
        assert [s.get("added-position-delete-files") for s in summaries[-2:]] == ["1", "1"]
        assert all(s.get("deleted-data-files") is None for s in summaries[-2:])


PLAYS = {"merge": (test_merge.SCRIPT, ("t", "s")),
         **{name: (script, test_merge.EDGE_TABLES[name]) for name, script in test_merge.EDGE_SCRIPTS.items()}}


@pytest.mark.parametrize("name", sorted(PLAYS))
def test_merge_on_read_tables_answer_as_postgresql_does(icegres: IcegresServer, real_postgres: Any,  # noqa: F811
                                                        name: str) -> None:
    """test_merge's scripts (MERGE, UPDATE … FROM, DELETE … USING; NULL keys, a partitioned table,
    types, a self-join) on tables made merge-on-read as they are created."""
    script, tables = PLAYS[name]
    with psycopg.connect(icegres.dsn(), autocommit=True) as c:
        c.execute("create schema if not exists dd")
        c.execute("drop table if exists dd.p")
        c.execute("create table dd.p (id int, day date, v int) with (partitioning = 'day(day)')")
    _play(icegres, real_postgres, script, tuple(f"dd.{t}" for t in tables), after_create=f"alter table {{table}} set {MOR}")


def _make(c: psycopg.Connection, ns: str) -> None:
    c.execute(f"create schema {ns}")
    for t in ("mor", "cow"):
        c.execute(f"create table {ns}.{t} (id bigint, v text, n int)")
        c.execute(f"insert into {ns}.{t} select g, 'x', g from generate_series(1, 200) g")
        c.execute(f"insert into {ns}.{t} select g, 'y', g from generate_series(201, 300) g")  # a second file
    c.execute(f"alter table {ns}.mor set {MOR}")
    c.execute(f"create table {ns}.src (id bigint, v text, op text)")
    c.execute(f"insert into {ns}.src values (1, 'A', 'u'), (2, 'B', 'd'), (250, 'C', 'u'), (400, 'N', 'i'), "
              f"(3, 'D', null), (401, 'M', 'x')")


def _both(c: psycopg.Connection, ns: str, sql: str) -> Any:
    """Run `sql` ({t}: the table, {src}: the source) on both twins; the same tag, RETURNING rows
    and table rows."""
    out = []
    for t in ("mor", "cow"):
        cur = c.execute(sql.format(t=f"{ns}.{t}", src=f"{ns}.src"))
        out.append((cur.statusmessage, sorted(cur.fetchall()) if cur.description else None))
    assert out[0] == out[1], sql
    assert _rows(c, f"{ns}.mor") == _rows(c, f"{ns}.cow"), sql
    return out[0]


def _rows(c: psycopg.Connection, table: str, at: str = "") -> list[tuple[Any, ...]]:
    return [tuple(r) for r in c.execute(f"select id, v, n from {table} {at} order by id").fetchall()]


def _pyiceberg_rows(table: Any) -> list[tuple[Any, ...]]:
    arrow = table.scan().to_arrow().sort_by("id")
    return list(zip(*(arrow.column(c).to_pylist() for c in ("id", "v", "n")), strict=True))


def _summaries(table: Any) -> list[tuple[str, dict[str, str]]]:
    return [(s.summary.operation.value, s.summary.additional_properties) for s in table.metadata.snapshots]


def test_merge_on_read_statements_leave_the_rows_copy_on_write_leaves(tmp_path: Path) -> None:
    ns = "m"
    data = tmp_path / "lake"
    with running_icegres(data) as srv, psycopg.connect(srv.dsn(), autocommit=True) as c:
        _make(c, ns)
        lake = catalog(data)
        before = lake.load_table((ns, "mor")).metadata.current_snapshot_id
        assert _both(c, ns, "delete from {t} where id <= 5 or id = 260") == ("DELETE 6", None)
        assert _both(c, ns, "update {t} set v = 'u', n = n * 10 where id between 20 and 24 returning id, v, n") == \
            ("UPDATE 5", [(i, "u", i * 10) for i in range(20, 25)])
        assert _both(c, ns, "delete from {t} where v = 'u' and id > 22 returning *")[0] == "DELETE 2"
        _both(c, ns, "update {t} set v = v || '!' where id in (30, 230)")
        _both(c, ns, "update {t} set n = 0 where id = 30")  # a row an earlier UPDATE rewrote
        _both(c, ns, "merge into {t} t using {src} s on t.id = s.id when matched and s.op = 'd' then delete "
                     "when matched and s.op = 'u' then update set v = s.v, n = t.n + 1 when matched then do nothing "
                     "when not matched and s.op = 'i' then insert (id, v) values (s.id, s.v)")
        _both(c, ns, "merge into {t} t using (select 400 as id) s on t.id = s.id when matched then update set n = 4")
        assert _both(c, ns, "update {t} t set v = s.v || t.v from {src} s where t.id = s.id returning t.id, t.v, s.op") \
            == ("UPDATE 2", [(250, "CC", "u"), (400, "NN", "i")])
        assert _both(c, ns, "delete from {t} t using {src} s where t.id = s.id + 100 returning t.id, s.v") == \
            ("DELETE 3", [(101, "A"), (102, "B"), (103, "D")])
        _both(c, ns, "delete from {t} where id = 12345")  # nothing matches
        with pytest.raises(psycopg.errors.CardinalityViolation):
            c.execute(f"merge into {ns}.mor t using (select 7 as id union all select 7) q on t.id = q.id "
                      "when matched then update set v = 'twice'")
        with pytest.raises(psycopg.errors.DivisionByZero):
            c.execute(f"update {ns}.mor set n = n / 0 where id = 8")
        expected = _rows(c, f"{ns}.mor")
        table = lake.load_table((ns, "mor"))
        assert _pyiceberg_rows(table) == expected  # pyiceberg applies icegres's delete files
        # No data file was rewritten: each change added a delete file (and its new versions).
        changes = _summaries(table)[2:]  # (after the two INSERTs)
        assert all(s.get("deleted-data-files") is None for _, s in changes), changes
        assert all(s["added-position-delete-files"] == "1" for _, s in changes), changes
        assert [op for op, _ in changes] == ["delete", "overwrite", "delete", "overwrite", "overwrite",
                                             "overwrite", "overwrite", "overwrite", "delete"]
        assert changes[0][1]["added-position-deletes"] == "6"
        # (the MERGE updates only 250: ids 1, 2 and 3 were deleted before it)
        assert int(changes[-1][1]["total-position-deletes"]) == 6 + 5 + 2 + 2 + 1 + 1 + 1 + 2 + 3
        # time travel to before the first merge-on-read commit
        assert len(_rows(c, f"{ns}.mor", f"for system_version as of {before}")) == 300
        # a join and an aggregate over the deleted rows' files (the execution paths)
        assert c.execute(f"select count(*) from {ns}.mor a join {ns}.mor b on a.id = b.id").fetchone() == \
            (len(expected),)
    with running_icegres(data) as srv, psycopg.connect(srv.dsn(), autocommit=True) as c:
        assert _rows(c, f"{ns}.mor") == expected  # a restarted server


def test_a_block_stages_its_deletes_and_commits_one_delete_file(tmp_path: Path) -> None:
    ns = "b"
    data = tmp_path / "lake"
    with running_icegres(data) as srv, psycopg.connect(srv.dsn(), autocommit=True) as c:
        _make(c, ns)
        lake = catalog(data)
        start = _rows(c, f"{ns}.mor")
        snapshots = len(lake.load_table((ns, "mor")).metadata.snapshots)
        c.execute("begin")
        c.execute(f"delete from {ns}.mor where id between 10 and 19")
        assert c.execute(f"select count(*) from {ns}.mor where id between 10 and 19").fetchone() == (0,)
        assert c.execute(f"update {ns}.mor set v = 'b' where id between 15 and 25").statusmessage == "UPDATE 6"
        assert c.execute(f"select count(*) from {ns}.mor").fetchone() == (290,)
        c.execute("rollback")
        assert _rows(c, f"{ns}.mor") == start
        assert len(lake.load_table((ns, "mor")).metadata.snapshots) == snapshots
        for t in ("mor", "cow"):
            c.execute("begin")
            c.execute(f"delete from {ns}.{t} where id between 10 and 19")
            c.execute(f"update {ns}.{t} set v = 'b' where id between 15 and 25")
            c.execute(f"update {ns}.{t} set n = -n where v = 'b' or id = 250")  # rows of the block's own file too
            c.execute(f"insert into {ns}.{t} values (1000, 'i', 1)")
            c.execute(f"delete from {ns}.{t} where id = 1000")
            c.execute("savepoint s")
            c.execute(f"delete from {ns}.{t} where id between 100 and 150")
            c.execute(f"update {ns}.{t} set v = 'gone' where id = 160")
            c.execute("rollback to savepoint s")
            assert c.execute(f"select count(*) from {ns}.{t} where id between 100 and 160 and v = 'x'").fetchone() \
                == (61,)
            c.execute("commit")
        assert _rows(c, f"{ns}.mor") == _rows(c, f"{ns}.cow")
        table = lake.load_table((ns, "mor"))
        assert len(table.metadata.snapshots) == snapshots + 1
        summary = _summaries(table)[-1][1]
        assert summary["added-position-delete-files"] == "1"
        assert summary["added-position-deletes"] == str(10 + 6 + 1)
        assert summary.get("deleted-data-files") is None
        assert _pyiceberg_rows(table) == _rows(c, f"{ns}.mor")


def test_two_sessions_updating_one_row_one_gets_40001(tmp_path: Path) -> None:
    ns = "c"
    with running_icegres(tmp_path / "lake") as srv, psycopg.connect(srv.dsn(), autocommit=True) as a, \
            psycopg.connect(srv.dsn(), autocommit=True) as b:
        _make(a, ns)
        a.execute("begin isolation level repeatable read")
        a.execute(f"update {ns}.mor set n = n + 1 where id = 7")
        b.execute(f"update {ns}.mor set n = n + 100 where id = 7")  # commits first
        with pytest.raises(psycopg.errors.SerializationFailure):
            a.execute("commit")
        assert _rows(a, f"{ns}.mor where id = 7") == [(7, "x", 107)]
        # a row of another file of the table: no conflict, the second commit rebases
        a.execute("begin isolation level repeatable read")
        a.execute(f"update {ns}.mor set n = 1 where id = 7")
        b.execute(f"delete from {ns}.mor where id = 270")
        a.execute("commit")
        assert _rows(a, f"{ns}.mor where id in (7, 270)") == [(7, "x", 1)]
        assert a.execute(f"select count(*) from {ns}.mor").fetchone() == (299,)


def test_duckdb_and_pyiceberg_read_icegres_merge_on_read_writes(stack, tmp_path: Path) -> None:
    from pyiceberg.catalog import load_catalog

    from bench.suites.merge import duck_lake

    ns = f"iw_{uuid.uuid4().hex[:8]}"
    with running_icegres(tmp_path / "data", env=stack.env()) as srv, psycopg.connect(srv.dsn(), autocommit=True) as c:
        _make(c, ns)
        _both(c, ns, "delete from {t} where id <= 10 or id = 299")
        _both(c, ns, "update {t} set v = 'u' where id between 100 and 110")
        _both(c, ns, "merge into {t} t using {src} s on t.id = s.id when matched and s.op = 'u' then update set n = 0 "
                     "when not matched and s.op = 'i' then insert (id, v) values (s.id, s.v)")
        ours = _rows(c, f"{ns}.mor")
        assert _rows(c, f"{ns}.cow") == ours
        table = load_catalog("rest", **stack.pyiceberg_properties()).load_table((ns, "mor"))
        assert _pyiceberg_rows(table) == ours
        assert all(s.get("deleted-data-files") is None for _, s in _summaries(table))
        duck = duck_lake(stack)
        try:
            theirs = duck.execute(f"select id, v, n from lake.{ns}.mor order by id").fetchall()
            assert [tuple(r) for r in theirs] == ours
            # and icegres reads DuckDB's deletes on top of its own
            duck.execute(f"delete from lake.{ns}.mor where id = 150")
            assert c.execute(f"select count(*) from {ns}.mor").fetchone() == (len(ours) - 1,)
        finally:
            duck.close()
