"""Temporary tables (engine/temp_tables.py), against a real PostgreSQL 15: the same statements in
both, the same rows and the same SQLSTATEs; then what only icegres can show — the lake's catalog
never holds them, another session never sees them, and they are gone at disconnect."""

from __future__ import annotations

import os
import sqlite3
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from tests.support.differential import beside_postgres
from tests.support.fixtures import real_postgres  # noqa: F401  (the fixture)

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]


@pytest.fixture(scope="module")
def dsns(tmp_path_factory: pytest.TempPathFactory, real_postgres) -> Iterator[list[str]]:  # noqa: F811
    with beside_postgres(tmp_path_factory.mktemp("temp") / "data", real_postgres) as both:
        yield both


def _run(conn: psycopg.Connection, sql: str) -> object:
    try:
        cur = conn.execute(sql)
    except psycopg.Error as err:
        return ("error", err.diag.sqlstate)
    if cur.description is None:
        return cur.statusmessage
    return sorted((tuple(None if v is None else str(v) for v in row) for row in cur.fetchall()), key=repr)


def _script(schema: str) -> list[str]:
    return [
        f"create table {schema}.t (a int, b text)",
        f"insert into {schema}.t values (1, 'lake')",
        f"set search_path = {schema}",
        "create temp table t (a int, b text)",  # shadows the lake table of the same name
        "insert into t values (2, 'temp'), (3, 'temp')",
        "select * from t",
        f"select * from {schema}.t",
        "select * from pg_temp.t",
        f"select l.a, x.a from {schema}.t l join t x on x.a > l.a",
        "update t set b = 'changed' where a = 3 returning a, b",
        "delete from t where a = 2",
        "select * from t",
        "begin",
        "insert into t values (9, 'in block')",
        "select count(*) from t",
        "rollback",
        "select * from t",
        "begin",
        "create temp table s as select a * 100 as x from t",
        "select * from s",
        "rollback",
        "select * from s",
        "create temp table s as select a * 100 as x from t",
        "create temp table s (x int)",
        "create temp table if not exists s (x int)",
        f"create temp table {schema}.u (x int)",
        "create temp table u (x int) on commit preserve rows",
        "insert into u select generate_series(1, 5)",
        "select sum(x) from u",
        "truncate u",
        "select count(*) from u",
        "drop table t",
        "select * from t",  # the lake table again
        "drop table t_nope",
        "drop table if exists pg_temp.t_nope",
    ]


def test_temporary_tables_behave_as_in_postgresql(dsns: list[str]) -> None:
    schema = f"tmp_{uuid.uuid4().hex[:8]}"
    answers = []
    for dsn in dsns:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(f"create schema {schema}")
            try:
                answers.append([(sql, _run(conn, sql)) for sql in _script(schema)])
            finally:
                conn.execute("reset search_path")
                conn.execute(f"drop schema {schema} cascade")
    theirs, ours = answers
    for (sql, want), (_, got) in zip(theirs, ours, strict=True):
        assert got == want, sql


@pytest.fixture
def server(tmp_path: Path) -> Iterator[object]:
    from tests.support.icegres_server import running_icegres

    with running_icegres(tmp_path / "data") as srv:
        yield srv


def test_never_in_the_catalog_never_seen_by_others_gone_at_disconnect(server) -> None:
    def catalog() -> list[tuple[str, str]]:
        with sqlite3.connect(server.data_dir / "catalog.db") as db:
            return sorted(db.execute("select table_namespace, table_name from iceberg_tables").fetchall())

    before = catalog()
    temp_root = server.data_dir / "temp"
    with psycopg.connect(server.dsn(), autocommit=True) as conn, \
            psycopg.connect(server.dsn(), autocommit=True) as other:
        conn.execute("create temp table scratch as select 1 as x")
        conn.execute("insert into scratch values (2)")
        assert conn.execute("select sum(x) from scratch").fetchone() == (3,)
        with pytest.raises(psycopg.errors.UndefinedTable):
            other.execute("select * from scratch")
        with pytest.raises(psycopg.errors.UndefinedTable):
            other.execute("select * from pg_temp.scratch")
        other.execute("create temp table scratch (y text)")  # each session has its own
        other.execute("insert into scratch values ('other')")
        assert conn.execute("select sum(x) from scratch").fetchone() == (3,)
        assert catalog() == before
        assert len([p for p in _files(temp_root) if p.suffix == ".parquet"]) >= 2
    # Both sessions ended: their tables and files are gone (the server notices the disconnect
    # on its own time: wait for it, bounded).
    deadline = time.monotonic() + 20
    while _files(temp_root) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _files(temp_root) == []
    with psycopg.connect(server.dsn(), autocommit=True) as conn:
        with pytest.raises(psycopg.errors.UndefinedTable):
            conn.execute("select * from scratch")
    assert catalog() == before


def _files(root: Path) -> list[Path]:
    """Every file under `root`, while the server may be deleting them."""
    return [Path(d) / f for d, _, names in os.walk(root) for f in names]


def test_psql_lists_and_describes_them(server) -> None:
    import subprocess

    def psql(*commands: str) -> str:
        args = ["psql", "-X", server.dsn()]
        for command in commands:
            args += ["-c", command]
        done = subprocess.run(args, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
        assert done.returncode == 0, done.stderr
        return done.stdout

    out = psql("create table lake_t (a int)", "create temp table tt (x int, y text)", r"\dt", r"\d tt")
    assert " pg_temp | tt     | table |" in out and " public  | lake_t | table |" in out
    assert 'Table "pg_temp.tt"' in out and " x      | integer |" in out
    assert "tt" not in psql(r"\dt")  # another session (another psql) has none


def test_failed_statements_leave_temporary_tables_as_they_were(server) -> None:
    with psycopg.connect(server.dsn(), autocommit=True) as conn:
        with pytest.raises(psycopg.errors.DivisionByZero):
            conn.execute("create temp table never as select 1 / 0 as x")
        with pytest.raises(psycopg.errors.UndefinedTable):
            conn.execute("select * from never")
        conn.execute("create temp table short (v varchar(3))")
        conn.execute("insert into short values ('ok')")
        with pytest.raises(psycopg.errors.StringDataRightTruncation):
            conn.execute("insert into short values ('abc'), ('too long')")
        with pytest.raises(psycopg.errors.DivisionByZero):
            conn.execute("update short set v = (1 / 0)::text")
        assert conn.execute("select v from short").fetchall() == [("ok",)]
