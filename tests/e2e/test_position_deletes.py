"""Rows another engine deleted with merge-on-read position deletes are gone in icegres too.

DuckDB's iceberg extension deletes and updates through SeaweedFS's REST catalog by writing
position-delete files (it never rewrites a data file). icegres applies them as it reads
(engine/position_deletes.py): on a server that had the table mounted and on a fresh one, at the
current snapshot and at earlier ones; its own copy-on-write writes to such a table keep every
row the deletes removed gone; pyiceberg and DuckDB read what icegres reads. A transaction that
rewrites a file another engine added deletes to meanwhile fails with 40001 rather than bring
the deleted rows back.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tests.support.icegres_server import running_icegres

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]


def _duck(stack: Any) -> Any:
    from bench.suites.merge import duck_lake

    return duck_lake(stack)


def _rows_everywhere(stack: Any, conn: psycopg.Connection, duck: Any, ns: str) -> list[tuple[int, str]]:
    """The table's rows as icegres reads them, after checking DuckDB and pyiceberg read the same."""
    from pyiceberg.catalog import load_catalog

    ours = conn.execute(f"select id, v from {ns}.t order by id").fetchall()
    theirs = duck.execute(f"select id, v from lake.{ns}.t order by id").fetchall()
    table = load_catalog("rest", **stack.pyiceberg_properties()).load_table((ns, "t"))
    arrow = table.scan().to_arrow().sort_by("id")
    pyice = list(zip(arrow.column("id").to_pylist(), arrow.column("v").to_pylist(), strict=True))
    assert [tuple(r) for r in theirs] == [tuple(r) for r in ours] == pyice
    return [tuple(r) for r in ours]


def _snapshot(stack: Any, ns: str) -> int:
    from pyiceberg.catalog import load_catalog

    return load_catalog("rest", **stack.pyiceberg_properties()).load_table((ns, "t")).metadata.current_snapshot_id


def test_rows_another_engine_deleted_stay_deleted_through_reads_and_writes(stack, tmp_path: Path) -> None:
    ns = f"mor_{uuid.uuid4().hex[:8]}"
    expected = {i: "x" for i in range(1, 101)}
    with running_icegres(tmp_path / "data", env=stack.env()) as srv, psycopg.connect(srv.dsn(), autocommit=True) as c:
        c.execute(f"create schema {ns}")
        c.execute(f"create table {ns}.t (id bigint, v text)")
        c.execute(f"insert into {ns}.t select g, 'x' from generate_series(1, 100) g")
        assert c.execute(f"select count(*) from {ns}.t").fetchone() == (100,)  # mounted before the deletes
        before = _snapshot(stack, ns)
        duck = _duck(stack)
        try:
            duck.execute(f"delete from lake.{ns}.t where id <= 10")
            for i in range(1, 11):
                del expected[i]
            assert c.execute(f"select count(*), sum(id), min(id) from {ns}.t").fetchone() == (90, 4995, 11)
            assert c.execute(f"select * from {ns}.t where id = 5").fetchall() == []
            duck.execute(f"update lake.{ns}.t set v = 'u' where id between 20 and 29")
            expected.update({i: "u" for i in range(20, 30)})
            assert _rows_everywhere(stack, c, duck, ns) == sorted(expected.items())
            # icegres's own writes to files with deletes: copy-on-write keeps the deleted rows gone
            c.execute(f"update {ns}.t set v = 'w' where id in (50, 25)")
            expected.update({50: "w", 25: "w"})
            c.execute(f"delete from {ns}.t where id > 95")
            for i in range(96, 101):
                del expected[i]
            c.execute(f"insert into {ns}.t values (5, 'again')")
            expected[5] = "again"
            assert _rows_everywhere(stack, c, duck, ns) == sorted(expected.items())
            # an earlier snapshot is read as it was
            assert c.execute(f"select count(*) from {ns}.t for system_version as of {before}").fetchone() == (100,)
            # a join, an aggregate and a filter over the deleted rows' file (execution paths)
            assert c.execute(f"select count(*) from {ns}.t a join {ns}.t b on a.id = b.id").fetchone() == (len(expected),)
            assert c.execute(f"select v, count(*) from {ns}.t group by v order by v").fetchall() == \
                sorted({v: sum(1 for x in expected.values() if x == v) for v in expected.values()}.items())
        finally:
            duck.close()
    with running_icegres(tmp_path / "data", env=stack.env()) as srv, psycopg.connect(srv.dsn(), autocommit=True) as c:
        rows = c.execute(f"select id, v from {ns}.t order by id").fetchall()
        assert [tuple(r) for r in rows] == sorted(expected.items())


def test_a_rewrite_of_a_file_another_engine_deleted_from_meanwhile_is_40001(stack, tmp_path: Path) -> None:
    ns = f"mor_{uuid.uuid4().hex[:8]}"
    with running_icegres(tmp_path / "data", env=stack.env()) as srv, psycopg.connect(srv.dsn(), autocommit=True) as c:
        c.execute(f"create schema {ns}")
        c.execute(f"create table {ns}.t (id bigint, v text)")
        c.execute(f"insert into {ns}.t select g, 'x' from generate_series(1, 50) g")
        duck = _duck(stack)
        try:
            c.execute("begin isolation level repeatable read")
            c.execute(f"update {ns}.t set v = 'mine' where id = 40")  # rewrites the one data file
            duck.execute(f"delete from lake.{ns}.t where id <= 10")  # deletes rows that rewrite holds
            with pytest.raises(psycopg.errors.SerializationFailure):
                c.execute("commit")
            assert c.execute(f"select count(*), count(*) filter (where v = 'mine') from {ns}.t").fetchone() == (40, 0)
            c.execute(f"update {ns}.t set v = 'mine' where id = 40")  # the retry
            assert c.execute(f"select count(*), count(*) filter (where v = 'mine') from {ns}.t").fetchone() == (40, 1)
            assert duck.execute(f"select count(*), min(id) from lake.{ns}.t").fetchone() == (40, 11)
        finally:
            duck.close()
