"""DDL inside transaction blocks, as PostgreSQL has it: seen by the block's later statements,
invisible to other sessions until COMMIT, applied with the block's rows at COMMIT, gone on
ROLLBACK — and a crash at any point of the COMMIT recovered at the next start to the whole old
state or the whole new one (machines/catalog_commit.py, specs/catalog_commit.toml).

The crash tests kill the server at each fault point of the catalog commit (icegres/faults.py:
`after-catalog-intent`, `after-catalog-move`, `before-publish` of the data commit,
`after-catalog-purge`) and restart it on the same data directory."""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from tests.support.icegres_server import running_icegres

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]

Catalog = list[tuple[str, str]]


def _tables(data_dir: Path) -> Catalog:
    """Every table row of the catalog, hidden ones included: (namespace, name)."""
    with sqlite3.connect(data_dir / "catalog.db") as db:
        return sorted(db.execute("select table_namespace, table_name from iceberg_tables "
                                 "where iceberg_type is null or iceberg_type != 'VIEW'").fetchall())


def _rows(conn: psycopg.Connection, table: str) -> list[tuple[object, ...]]:
    return sorted(conn.execute(f"select * from {table}").fetchall(), key=repr)


@pytest.fixture
def server(tmp_path: Path) -> Iterator[object]:
    with running_icegres(tmp_path / "data") as srv:
        yield srv


def _setup(conn: psycopg.Connection) -> None:
    conn.execute("create schema if not exists dbt")
    conn.execute("create table dbt.model (id int, v text)")
    conn.execute("insert into dbt.model values (1, 'old'), (2, 'old')")
    conn.execute("create view dbt.downstream as select id from dbt.model")


def _dbt_rebuild(conn: psycopg.Connection, *, rename_first: bool = False) -> None:
    """dbt-postgres's table materialization, statement for statement (`rename_first`: the old
    table moved aside before the new one is made, so the first move leaves no `model`)."""
    if rename_first:
        conn.execute('alter table "icegres"."dbt"."model" rename to "model__dbt_backup"')
        conn.execute('create table "icegres"."dbt"."model__dbt_tmp" as '
                     '(select id * 10 as id, \'new\' as v from dbt.model__dbt_backup)')
    else:
        conn.execute('create table "icegres"."dbt"."model__dbt_tmp" as '
                     '(select id * 10 as id, \'new\' as v from dbt.model)')
        conn.execute('alter table "icegres"."dbt"."model" rename to "model__dbt_backup"')
    conn.execute('alter table "icegres"."dbt"."model__dbt_tmp" rename to "model"')


def test_a_dbt_table_rebuild_is_one_atomic_change(server) -> None:
    with psycopg.connect(server.dsn(), autocommit=True) as conn, \
            psycopg.connect(server.dsn(), autocommit=True) as other:
        _setup(conn)
        before = _tables(server.data_dir)
        conn.execute("begin")
        _dbt_rebuild(conn)
        assert _rows(conn, "dbt.model") == [(10, "new"), (20, "new")]
        assert _rows(conn, "dbt.model__dbt_backup") == [(1, "old"), (2, "old")]
        # Another session sees none of it, and lists no table the block made.
        assert _rows(other, "dbt.model") == [(1, "old"), (2, "old")]
        listed = other.execute("select table_name from information_schema.tables "
                               "where table_schema = 'dbt' order by 1").fetchall()
        assert listed == [("downstream",), ("model",)]
        with pytest.raises(psycopg.errors.UndefinedTable):
            other.execute("select * from dbt.model__dbt_tmp")
        conn.execute("commit")
        assert _rows(other, "dbt.model") == [(10, "new"), (20, "new")]
        assert _rows(other, "dbt.model__dbt_backup") == [(1, "old"), (2, "old")]
        # The view follows its table, as a PostgreSQL view follows the table's OID.
        assert _rows(other, "dbt.downstream") == [(1,), (2,)]
        conn.execute('drop table if exists "icegres"."dbt"."model__dbt_backup" cascade')
        assert [n for _, n in _tables(server.data_dir)] == [n for _, n in before if n != "model"] + ["model"]
        with pytest.raises(psycopg.errors.UndefinedTable):
            other.execute("select * from dbt.downstream")


def test_rollback_and_savepoints_undo_ddl(server) -> None:
    with psycopg.connect(server.dsn(), autocommit=True) as conn:
        _setup(conn)
        before = _tables(server.data_dir)
        conn.execute("begin")
        conn.execute("insert into dbt.model values (3, 'in block')")
        conn.execute("alter table dbt.model add column extra int")
        conn.execute("insert into dbt.model values (4, 'after alter', 44)")
        assert _rows(conn, "dbt.model") == [(1, "old", None), (2, "old", None), (3, "in block", None),
                                            (4, "after alter", 44)]
        conn.execute("savepoint s")
        conn.execute("drop table dbt.model cascade")
        conn.execute("create table dbt.model (other text)")
        assert _rows(conn, "dbt.model") == []
        conn.execute("rollback to savepoint s")
        assert _rows(conn, "dbt.model")[-1] == (4, "after alter", 44)
        conn.execute("rollback")
        assert _tables(server.data_dir) == before  # the hidden table the block made is gone too
        assert _rows(conn, "dbt.model") == [(1, "old"), (2, "old")]
        assert not list((server.data_dir / "intents").glob("*.json"))


def test_create_insert_alter_in_a_block_commits_together(server) -> None:
    with psycopg.connect(server.dsn(), autocommit=True) as conn:
        conn.execute("begin")
        conn.execute("create table made (id int primary key, name text)")
        conn.execute("insert into made values (1, 'a')")
        conn.execute("alter table made rename column name to label")
        conn.execute("insert into made values (2, 'b')")
        with pytest.raises(psycopg.errors.UniqueViolation):
            conn.execute("insert into made values (2, 'dup')")
        conn.execute("rollback")
        assert conn.execute("select count(*) from pg_class where relname = 'made'").fetchone() == (0,)
        conn.execute("begin")
        conn.execute("create table made (id int primary key, name text)")
        conn.execute("insert into made values (1, 'a')")
        conn.execute("alter table made rename column name to label")
        conn.execute("insert into made values (2, 'b')")
        conn.execute("commit")
        assert _rows(conn, "made") == [(1, "a"), (2, "b")]
        assert conn.execute("select label from made where id = 2").fetchone() == ("b",)


def test_concurrent_ddl_on_the_same_name_is_40001_at_commit(server) -> None:
    with psycopg.connect(server.dsn(), autocommit=True) as conn, \
            psycopg.connect(server.dsn(), autocommit=True) as other:
        _setup(conn)
        conn.execute("begin")
        _dbt_rebuild(conn)
        other.execute("alter table dbt.model rename to stolen")  # another session's DDL lands first
        before = _tables(server.data_dir)
        with pytest.raises(psycopg.errors.SerializationFailure):
            conn.execute("commit")
        hidden = [n for _, n in _tables(server.data_dir) if n.startswith("icegres__block_")]
        assert hidden == [] and _tables(server.data_dir) == [t for t in before if not t[1].startswith("icegres__block_")]
        assert _rows(conn, "dbt.stolen") == [(1, "old"), (2, "old")]
        conn.execute("begin")
        conn.execute("create table dbt.fresh (x int)")
        other.execute("create table dbt.fresh (y int)")
        with pytest.raises(psycopg.errors.SerializationFailure):
            conn.execute("commit")
        assert [c for (c,) in conn.execute("select column_name from information_schema.columns "
                                           "where table_name = 'fresh'").fetchall()] == ["y"]


# --- crashes ---------------------------------------------------------------------------------------

OLD = {"model": [(1, "old"), (2, "old")], "model__dbt_backup": None}
NEW = {"model": [(10, "new"), (20, "new")], "model__dbt_backup": [(1, "old"), (2, "old")]}


def _state(dsn: str) -> dict[str, object]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        out: dict[str, object] = {}
        for name in OLD:
            try:
                out[name] = _rows(conn, f"dbt.{name}")
            except psycopg.errors.UndefinedTable:
                out[name] = None
        return out


def _commit_in_background(dsn: str, rename_first: bool) -> threading.Thread:
    def run() -> None:
        try:
            with psycopg.connect(dsn, autocommit=True) as conn:
                conn.execute("begin")
                conn.execute("insert into dbt.other values (7)")  # data too: the data commit decides
                _dbt_rebuild(conn, rename_first=rename_first)
                conn.execute("commit")
        except psycopg.Error:
            pass  # the server dies under it

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


@pytest.mark.parametrize(("point", "rename_first", "expected"), [
    ("after-catalog-intent", False, OLD),  # the plan recorded, nothing moved: undone
    ("after-catalog-move", False, OLD),  # the new table placed as model__dbt_tmp: undone
    ("after-catalog-move", True, OLD),  # model renamed away, no model at all: undone
    ("before-publish", False, OLD),  # every rename applied, the data commit not sent: undone
    ("after-catalog-purge", False, NEW),  # decided: finished
])
def test_a_crash_during_commit_recovers_to_the_whole_old_or_new_state(
        tmp_path: Path, point: str, rename_first: bool, expected: dict[str, object]) -> None:
    data_dir = tmp_path / "data"
    with running_icegres(data_dir) as srv:
        with psycopg.connect(srv.dsn(), autocommit=True) as conn:
            _setup(conn)
            conn.execute("create table dbt.other (x int)")
    with running_icegres(data_dir, env={"ICEGRES_FAULTS": f"{point}=crash"}) as srv:
        thread = _commit_in_background(srv.dsn(), rename_first)
        srv.wait_log(f"reached {point}", timeout_s=60)
        thread.join(timeout=30)
    with running_icegres(data_dir) as srv:
        assert _state(srv.dsn()) == expected
        with psycopg.connect(srv.dsn(), autocommit=True) as conn:
            others = _rows(conn, "dbt.other")
            assert others == ([(7,)] if expected is NEW else [])
            assert _rows(conn, "dbt.downstream") == [(1,), (2,)]
        assert not [n for _, n in _tables(data_dir) if n.startswith("icegres__block_")]
        assert not list((data_dir / "intents").glob("*.json"))


def test_the_same_on_the_rest_catalog(stack, tmp_path: Path) -> None:
    """SeaweedFS's Iceberg REST catalog: renames and creates are REST calls there, and tables are
    pinned as statements name them."""
    import uuid

    schema = f"ddlblk_{uuid.uuid4().hex[:8]}"
    with running_icegres(tmp_path / "data", env=stack.env()) as srv, \
            psycopg.connect(srv.dsn(), autocommit=True) as conn, \
            psycopg.connect(srv.dsn(), autocommit=True) as other:
        conn.execute(f"create schema {schema}")
        conn.execute(f"create table {schema}.model (id int, v text)")
        conn.execute(f"insert into {schema}.model values (1, 'old'), (2, 'old')")
        conn.execute("begin")
        conn.execute(f"create table {schema}.model__dbt_tmp as select id * 10 as id, 'new' as v from {schema}.model")
        conn.execute(f"alter table {schema}.model rename to model__dbt_backup")
        conn.execute(f"alter table {schema}.model__dbt_tmp rename to model")
        assert _rows(conn, f"{schema}.model") == [(10, "new"), (20, "new")]
        assert _rows(other, f"{schema}.model") == [(1, "old"), (2, "old")]
        conn.execute("rollback")
        assert _rows(other, f"{schema}.model") == [(1, "old"), (2, "old")]
        conn.execute("begin")
        conn.execute(f"create table {schema}.model__dbt_tmp as select id * 10 as id, 'new' as v from {schema}.model")
        conn.execute(f"alter table {schema}.model rename to model__dbt_backup")
        conn.execute(f"alter table {schema}.model__dbt_tmp rename to model")
        conn.execute("commit")
        assert _rows(other, f"{schema}.model") == [(10, "new"), (20, "new")]
        assert _rows(other, f"{schema}.model__dbt_backup") == [(1, "old"), (2, "old")]
        listed = other.execute("select table_name from information_schema.tables where table_schema = %s "
                               "order by 1", (schema,)).fetchall()
        assert listed == [("model",), ("model__dbt_backup",)]
        from pyiceberg.catalog import load_catalog

        names = [ident[-1] for ident in load_catalog("rest", **stack.pyiceberg_properties()).list_tables(schema)]
        assert sorted(names) == ["model", "model__dbt_backup"]  # no hidden table left behind


def test_view_ddl_in_a_block_dbt_view_rebuild(server) -> None:
    """dbt's view materialization: create v__dbt_tmp, rename v aside, rename the new one to v,
    COMMIT, drop the backup; OR REPLACE and DROP VIEW in a block, rolled back."""
    with psycopg.connect(server.dsn(), autocommit=True) as conn, \
            psycopg.connect(server.dsn(), autocommit=True) as other:
        _setup(conn)  # dbt.model, and the view dbt.downstream over it
        before = _tables(server.data_dir)
        conn.execute("begin")
        conn.execute('create view "icegres"."dbt"."downstream__dbt_tmp" as (select id + 100 as id from dbt.model)')
        conn.execute('alter table "icegres"."dbt"."downstream" rename to "downstream__dbt_backup"')
        conn.execute('alter table "icegres"."dbt"."downstream__dbt_tmp" rename to "downstream"')
        assert _rows(conn, "dbt.downstream") == [(101,), (102,)]
        assert _rows(other, "dbt.downstream") == [(1,), (2,)]
        conn.execute("commit")
        assert _rows(other, "dbt.downstream") == [(101,), (102,)]
        assert _rows(other, "dbt.downstream__dbt_backup") == [(1,), (2,)]
        conn.execute('drop view if exists "icegres"."dbt"."downstream__dbt_backup" cascade')
        conn.execute("begin")
        conn.execute("create or replace view dbt.downstream as select id + 100 as id, id * 2 as twice from dbt.model")
        assert _rows(conn, "dbt.downstream") == [(101, 2), (102, 4)]
        conn.execute("drop view dbt.downstream")
        with pytest.raises(psycopg.errors.UndefinedTable):
            conn.execute("select * from dbt.downstream")
        conn.execute("rollback")
        assert _rows(other, "dbt.downstream") == [(101,), (102,)]
        views = other.execute("select table_name from information_schema.views where table_schema = 'dbt'").fetchall()
        assert views == [("downstream",)]
        assert _tables(server.data_dir) == before
        with sqlite3.connect(server.data_dir / "catalog.db") as db:
            hidden = db.execute("select table_name from iceberg_tables where table_name like 'icegres__block_%'").fetchall()
        assert hidden == []


def test_rows_staged_around_column_changes_commit_in_the_new_shape(server) -> None:
    with psycopg.connect(server.dsn(), autocommit=True) as conn:
        conn.execute("create table shaped (id int, gone text, kept text)")
        conn.execute("insert into shaped values (1, 'x', 'a')")
        conn.execute("begin")
        conn.execute("insert into shaped values (2, 'y', 'b')")
        conn.execute("alter table shaped drop column gone")
        conn.execute("insert into shaped values (3, 'c')")
        conn.execute("alter table shaped add column extra int")
        conn.execute("insert into shaped values (4, 'd', 44)")
        conn.execute("create index shaped_id on shaped (id)")
        conn.execute("insert into shaped values (5, 'e', 55)")
        assert _rows(conn, "shaped") == [(1, "a", None), (2, "b", None), (3, "c", None), (4, "d", 44), (5, "e", 55)]
        conn.execute("commit")
        assert _rows(conn, "shaped") == [(1, "a", None), (2, "b", None), (3, "c", None), (4, "d", 44), (5, "e", 55)]
        assert conn.execute("select indexname from pg_indexes where tablename = 'shaped'").fetchall() == [("shaped_id",)]


def test_the_blocks_catalog_relations_describe_its_own_ddl(server) -> None:
    """pg_class, information_schema and regclass inside the block show its DDL; others don't."""
    with psycopg.connect(server.dsn(), autocommit=True) as conn, \
            psycopg.connect(server.dsn(), autocommit=True) as other:
        conn.execute("create table kept (a int)")
        conn.execute("create view old_view as select a from kept")
        listed = "select relname, relkind from pg_class where relnamespace = 'public'::regnamespace order by 1"
        conn.execute("begin")
        conn.execute("create table fresh (x int, y text)")
        conn.execute("alter table kept rename to renamed")
        conn.execute("drop view old_view")
        conn.execute("create view new_view as select x from fresh")
        assert conn.execute(listed).fetchall() == [("fresh", "r"), ("new_view", "v"), ("renamed", "r")]
        assert conn.execute("select column_name from information_schema.columns where table_name = 'fresh' "
                            "order by ordinal_position").fetchall() == [("x",), ("y",)]
        assert conn.execute("select 'fresh'::regclass::oid > 0").fetchone() == (True,)
        assert other.execute(listed).fetchall() == [("kept", "r"), ("old_view", "v")]
        conn.execute("rollback")
        assert conn.execute(listed).fetchall() == [("kept", "r"), ("old_view", "v")]
