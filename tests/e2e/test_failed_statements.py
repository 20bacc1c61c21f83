"""A statement that fails changes nothing: the lake's catalog (every table's metadata location,
every namespace) and every table's rows are exactly as before it, for every DDL and DML kind,
in autocommit and inside a transaction block (where the block is then rolled back).

PostgreSQL gives this by construction; here a statement may be several catalog calls, and a
refusal found after the first of them left it applied (ALTER ... RENAME after a write in a block
answered 0A000 with the rename done). DDL in a block is transactional now (ddl_block.py): after
a write it succeeds, and the block's ROLLBACK leaves the catalog exactly as it was."""

from __future__ import annotations

import io
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from tests.support.icegres_server import running_icegres

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]

SETUP = [
    "create schema if not exists fs",
    "drop table if exists fs.a",
    "drop table if exists fs.b",
    "drop table if exists fs.made",
    "drop table if exists fs.renamed",
    "create table fs.a (id int not null, name text)",
    "insert into fs.a values (1, 'one'), (2, 'two')",
    "create table fs.b (id int)",
    "insert into fs.b values (10)",
]

# (statement, SQLSTATE PostgreSQL 15 gives); each runs against the SETUP state.
FAILING = [
    ("create table fs.a (x int)", "42P07"),
    ("create table fs.made (x no_such_type)", "42704"),
    ("create table fs.made as select 1 / 0 as x", "22012"),
    ("create table fs.made as select nope from fs.a", "42703"),
    ("drop table fs.nope", "42P01"),
    ("drop table fs.b, fs.nope", "42P01"),
    ("alter table fs.a add column name text", "42701"),
    ("alter table fs.a rename column nope to x", "42703"),
    ("alter table fs.a rename to b", "42P07"),
    ("alter table fs.nope rename to c", "42P01"),
    ("insert into fs.a values (3, 'three'), ('x', 'bad')", "22P02"),
    ("insert into fs.a values (3, 'three'), (null, 'null id')", "23502"),
    ("insert into fs.a select id / 0, name from fs.a", "22012"),
    ("update fs.a set id = id / 0", "22012"),
    ("update fs.a set nope = 1", "42703"),
    ("delete from fs.a where nope = 1", "42703"),
    ("delete from fs.a where id / 0 = 1", "22012"),
    ("truncate fs.nope", "42P01"),
    ("create schema fs", "42P06"),
    ("drop schema fs", "2BP01"),
    ("drop schema fs_nope", "3F000"),
]

# DDL after a write in the same block (once refused with 0A000): applied to the block only.
AFTER_A_WRITE = [
    "alter table fs.a rename to renamed",
    "alter table fs.a add column extra int",
    "alter table fs.a drop column name",
    "drop table fs.a",
    "create table fs.made as select * from fs.a",
    "create table fs.made (x int)",
]


def _catalog_state(data_dir: Path) -> tuple[list[tuple[str, ...]], list[tuple[str, ...]]]:
    with sqlite3.connect(data_dir / "catalog.db") as db:
        tables = db.execute("select table_namespace, table_name, metadata_location from iceberg_tables "
                            "order by 1, 2").fetchall()
        spaces = db.execute("select distinct namespace from iceberg_namespace_properties order by 1").fetchall()
    return tables, spaces


def _rows(conn: psycopg.Connection) -> dict[str, list[tuple[object, ...]]]:
    return {t: sorted(conn.execute(f"select * from fs.{t}").fetchall(), key=repr) for t in ("a", "b")}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, str]]:
    data_dir = tmp_path_factory.mktemp("failed") / "data"
    with running_icegres(data_dir) as srv:
        yield data_dir, srv.dsn()


def _reset(conn: psycopg.Connection) -> None:
    for statement in SETUP:
        conn.execute(statement)


def _fails_with(conn: psycopg.Connection, sql: str) -> str | None:
    try:
        conn.execute(sql)
    except psycopg.Error as err:
        return err.diag.sqlstate
    return None


@pytest.mark.parametrize(("sql", "sqlstate"), FAILING)
def test_a_failed_statement_changes_nothing_in_autocommit(server: tuple[Path, str], sql: str, sqlstate: str) -> None:
    data_dir, dsn = server
    with psycopg.connect(dsn, autocommit=True) as conn:
        _reset(conn)
        before, rows = _catalog_state(data_dir), _rows(conn)
        assert _fails_with(conn, sql) == sqlstate
        assert _catalog_state(data_dir) == before
        assert _rows(conn) == rows


@pytest.mark.parametrize(("sql", "sqlstate"), FAILING)
def test_a_failed_statement_in_a_block_changes_nothing(server: tuple[Path, str], sql: str, sqlstate: str) -> None:
    data_dir, dsn = server
    with psycopg.connect(dsn, autocommit=True) as conn:
        _reset(conn)
        before, rows = _catalog_state(data_dir), _rows(conn)
        conn.execute("begin")
        assert _fails_with(conn, sql) == sqlstate
        conn.execute("rollback")
        assert _catalog_state(data_dir) == before
        assert _rows(conn) == rows


@pytest.mark.parametrize("sql", AFTER_A_WRITE)
def test_ddl_after_a_write_in_a_rolled_back_block_changes_nothing(server: tuple[Path, str], sql: str) -> None:
    data_dir, dsn = server
    with psycopg.connect(dsn, autocommit=True) as conn:
        _reset(conn)
        before, rows = _catalog_state(data_dir), _rows(conn)
        conn.execute("begin")
        conn.execute("insert into fs.a values (3, 'three')")
        conn.execute(sql)
        assert _catalog_state(data_dir) != before or "create" not in sql  # the block's new table is hidden
        with psycopg.connect(dsn, autocommit=True) as other:
            assert _rows(other) == rows  # nobody else sees the block
        conn.execute("rollback")
        assert _catalog_state(data_dir) == before
        assert _rows(conn) == rows


def test_a_failed_copy_changes_nothing(server: tuple[Path, str]) -> None:
    data_dir, dsn = server
    with psycopg.connect(dsn, autocommit=True) as conn:
        _reset(conn)
        before, rows = _catalog_state(data_dir), _rows(conn)
        with pytest.raises(psycopg.errors.InvalidTextRepresentation):
            with conn.cursor().copy("copy fs.a from stdin") as copy:
                copy.write(io.BytesIO(b"3\tthree\nx\tbad\n").read())
        assert _catalog_state(data_dir) == before
        assert _rows(conn) == rows
