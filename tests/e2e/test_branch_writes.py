"""Writes to a branch (`INSERT INTO "t@b"`, UPDATE, DELETE), the session's `icegres.branch`,
`serve --branch`, and the write-audit-publish recipe of docs/time-travel.md — over pgwire
(psycopg) and Flight SQL (ADBC), checked against what pyiceberg reads from the same lake."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tests.e2e.test_flightsql import flight_server

pytestmark = pytest.mark.e2e


@dataclass
class Server:
    dsn: str
    flight_uri: str
    data_dir: Path


def _dsn(port: int | None) -> str:
    return f"host=127.0.0.1 port={port} dbname=icegres user=icegres"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    data_dir = tmp_path_factory.mktemp("branch_writes") / "data"
    with flight_server(data_dir, command="serve") as (uri, _, _, port):
        with psycopg.connect(_dsn(port), autocommit=True) as c:
            c.execute("create schema demo")
        yield Server(_dsn(port), uri, data_dir)


@pytest.fixture
def conn(server: Server) -> Iterator[psycopg.Connection]:
    with psycopg.connect(server.dsn, autocommit=True) as c:
        yield c


_tables = iter(range(1_000_000))


@pytest.fixture
def table(conn: psycopg.Connection) -> str:
    """A fresh demo table with rows 1, 2 on main and a branch `dev` made there."""
    name = f"t{next(_tables)}"
    conn.execute(f"create table demo.{name} (id bigint, v text)")
    conn.execute(f"insert into demo.{name} values (1, 'a'), (2, 'b')")
    conn.execute(f"alter table demo.{name} create branch dev")
    return name


def rows(c: Any, sql: str, params: Any = None) -> list[tuple[Any, ...]]:
    return c.execute(sql, params).fetchall()


def _iceberg(server: Server, name: str) -> Any:
    from icegres.engine.catalog import Lakehouse

    return Lakehouse.embedded(server.data_dir).load_table("demo", name)


def _branch_rows(server: Server, name: str, ref: str = "dev") -> list[tuple[Any, ...]]:
    """The branch as pyiceberg reads it: another engine sees what icegres wrote there."""
    t = _iceberg(server, name)
    arrow = t.scan(snapshot_id=t.metadata.refs[ref].snapshot_id).to_arrow()
    return sorted(zip(*(arrow.column(c).to_pylist() for c in arrow.column_names), strict=True))


def _heads(server: Server, name: str) -> dict[str, int]:
    return {ref: r.snapshot_id for ref, r in _iceberg(server, name).metadata.refs.items()}


# --- writing a branch --------------------------------------------------------------------------


def test_insert_update_delete_go_to_the_branch_and_leave_main_alone(conn, server, table):
    main_before = _heads(server, table)["main"]
    assert conn.execute(f'insert into demo."{table}@dev" values (3, \'c\')').statusmessage == "INSERT 0 1"
    assert conn.execute(f"update demo.\"{table}@dev\" set v = 'B' where id = 2").statusmessage == "UPDATE 1"
    assert conn.execute(f'delete from demo."{table}@dev" where id = 1').statusmessage == "DELETE 1"
    want = [(2, "B"), (3, "c")]
    assert rows(conn, f'select * from demo."{table}@dev" order by id') == want
    assert rows(conn, f"select * from demo.{table} order by id") == [(1, "a"), (2, "b")]
    assert _branch_rows(server, table) == want
    heads = _heads(server, table)
    assert heads["main"] == main_before  # main never moved
    # Three snapshots on the branch, each the child of the one before: one commit per statement.
    t = _iceberg(server, table)
    chain = [s.snapshot_id for s in t.snapshots()]
    parent = {s.snapshot_id: s.parent_snapshot_id for s in t.snapshots()}
    walk, at = [], heads["dev"]
    while at is not None and at != main_before:
        walk.append(at)
        at = parent[at]
    assert len(walk) == 3 and at == main_before and set(walk) <= set(chain)


def test_returning_self_reads_and_a_table_alias(conn, server, table):
    got = rows(conn, f'insert into demo."{table}@dev" select id + 10, v from demo."{table}@dev" returning id')
    assert sorted(got) == [(11,), (12,)]
    got = rows(conn, f"update demo.\"{table}@dev\" as x set v = x.v || '!' where x.id > 10 returning x.id, x.v")
    assert sorted(got) == [(11, "a!"), (12, "b!")]
    got = rows(conn, f'update demo."{table}@dev" set v = \'q\' where "{table}@dev".id = 1 returning v')
    assert got == [("q",)]
    assert rows(conn, f'delete from demo."{table}@dev" where id > 10 returning id') in ([(11,), (12,)], [(12,), (11,)])
    assert _branch_rows(server, table) == [(1, "q"), (2, "b")]
    assert rows(conn, f"select count(*) from demo.{table}") == [(2,)]


def test_prepared_statements_write_the_branch(conn, server, table):
    for i in range(3, 6):  # psycopg prepares a statement run this often (prepare_threshold)
        conn.execute(f'insert into demo."{table}@dev" values (%s, %s)', (i, f"p{i}"), prepare=True)
    conn.execute(f'update demo."{table}@dev" set v = %s where id = %s', ("two", 2), prepare=True)
    assert _branch_rows(server, table) == [(1, "a"), (2, "two"), (3, "p3"), (4, "p4"), (5, "p5")]
    assert rows(conn, f"select count(*) from demo.{table}") == [(2,)]


def test_a_block_reads_its_own_branch_writes_and_rolls_them_back(server, table):
    before = _heads(server, table)
    with psycopg.connect(server.dsn) as c:
        c.execute(f'insert into demo."{table}@dev" values (3, \'c\')')
        c.execute(f"update demo.\"{table}@dev\" set v = 'A' where id = 1")
        assert rows(c, f'select * from demo."{table}@dev" order by id') == [(1, "A"), (2, "b"), (3, "c")]
        assert rows(c, f"select count(*) from demo.{table}") == [(2,)]
        c.rollback()
    assert _heads(server, table) == before
    with psycopg.connect(server.dsn) as c:
        c.execute(f'insert into demo."{table}@dev" values (3, \'c\')')
        c.execute(f'insert into demo."{table}@dev" values (4, \'d\')')
        c.commit()
    assert _branch_rows(server, table) == [(1, "a"), (2, "b"), (3, "c"), (4, "d")]
    # One commit for the block: the branch moved by one snapshot.
    t = _iceberg(server, table)
    head = t.metadata.snapshot_by_id(t.metadata.refs["dev"].snapshot_id)
    assert head.parent_snapshot_id == before["dev"]


def test_one_transaction_writes_one_ref_of_a_table(server, table, conn):
    other = f"{table}_other"
    conn.execute(f"create table demo.{other} (id bigint)")
    with psycopg.connect(server.dsn) as c:
        c.execute(f'insert into demo."{table}@dev" values (3, \'c\')')
        c.execute(f"insert into demo.{other} values (1)")  # another table's main: fine
        with pytest.raises(psycopg.errors.FeatureNotSupported, match="cannot write both"):
            c.execute(f"insert into demo.{table} values (9, 'z')")
        c.rollback()
    assert rows(conn, f"select count(*) from demo.{other}") == [(0,)]
    assert _branch_rows(server, table) == [(1, "a"), (2, "b")]


@pytest.mark.parametrize(("target", "sqlstate", "message"), [
    ('"{t}@tg"', "42809", "is a tag"),
    ('"{t}@nope"', "42704", 'branch "nope" of table'),
    ('"{t}@{snap}"', "0A000", "only a branch can be written"),
    ('"missing@dev"', "42P01", "does not exist"),
])
def test_what_cannot_be_written(conn, server, table, target, sqlstate, message):
    conn.execute(f"alter table demo.{table} create tag tg")
    snap = _heads(server, table)["main"]
    before = _heads(server, table)
    name = "demo." + target.format(t=table, snap=snap)
    for sql in (f"insert into {name} values (5, 'e')", f"update {name} set v = 'x'", f"delete from {name}"):
        with pytest.raises(psycopg.Error, match=message) as err:
            conn.execute(sql)
        assert err.value.sqlstate == sqlstate
    assert _heads(server, table) == before  # a statement that errors changes nothing


def test_t_at_main_is_the_table(conn, server, table):
    conn.execute(f'insert into demo."{table}@main" values (3, \'c\')')
    assert rows(conn, f"select count(*) from demo.{table}") == [(3,)]
    assert _branch_rows(server, table) == [(1, "a"), (2, "b")]


# --- concurrency: first committer wins, per ref ------------------------------------------------


def test_racing_updates_of_one_branch_one_wins_with_40001(server, table):
    with psycopg.connect(server.dsn) as a, psycopg.connect(server.dsn) as b:
        a.execute(f"update demo.\"{table}@dev\" set v = 'from a' where id = 1")
        b.execute(f"update demo.\"{table}@dev\" set v = 'from b' where id = 1")
        a.commit()
        with pytest.raises(psycopg.errors.SerializationFailure):
            b.commit()
    assert _branch_rows(server, table) == [(1, "from a"), (2, "b")]


def test_a_branch_and_main_commit_independently(server, table):
    with psycopg.connect(server.dsn) as a, psycopg.connect(server.dsn) as b:
        a.execute(f"update demo.\"{table}@dev\" set v = 'dev' where id = 1")
        b.execute(f"update demo.{table} set v = 'main' where id = 1")
        a.commit()
        b.commit()  # another ref moved: no conflict
        assert rows(a, f"select v from demo.{table} where id = 1") == [("main",)]
    assert _branch_rows(server, table) == [(1, "dev"), (2, "b")]


def test_concurrent_appends_to_a_branch_all_land(server, table):
    errors: list[BaseException] = []

    def writer(w: int) -> None:
        try:
            with psycopg.connect(server.dsn, autocommit=True) as c:
                for i in range(8):
                    c.execute(f'insert into demo."{table}@dev" values (%s, %s)', (100 * w + i, f"w{w}"))
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(1, 4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors[:2]  # a blind append rebases onto a racing one, never 40001
    got = _branch_rows(server, table)
    assert len(got) == 2 + 24 and len({r[0] for r in got}) == 26
    assert _branch_rows(server, table, "main") == [(1, "a"), (2, "b")]


# --- the session's branch ----------------------------------------------------------------------


def test_set_icegres_branch_routes_unqualified_reads_and_writes(conn, server, table):
    lacking = f"{table}_plain"
    conn.execute(f"create table demo.{lacking} (id bigint)")
    conn.execute(f"insert into demo.{lacking} values (1), (2)")
    conn.execute("set icegres.branch = 'dev'")
    assert rows(conn, "show icegres.branch") == [("dev",)]
    conn.execute(f"insert into demo.{table} values (3, 'c')")
    conn.execute(f"update demo.{table} set v = 'B' where {table}.id = 2")
    assert rows(conn, f"select * from demo.{table} order by id") == [(1, "a"), (2, "B"), (3, "c")]
    # A join of a branched table with one that lacks the branch reads the latter's main.
    assert rows(conn, f"select count(*) from demo.{table} t join demo.{lacking} u using (id)") == [(2,)]
    # A CTE of the same name is the CTE.
    assert rows(conn, f"with {table} as (select 42 as id) select id from {table}") == [(42,)]
    with pytest.raises(psycopg.errors.UndefinedObject, match="has no branch"):
        conn.execute(f"insert into demo.{lacking} values (3)")
    # Naming a ref or a snapshot still reads that.
    assert rows(conn, f'select count(*) from demo."{table}@main"') == [(2,)]
    conn.execute("reset icegres.branch")
    assert rows(conn, f"select * from demo.{table} order by id") == [(1, "a"), (2, "b")]
    assert rows(conn, f"select count(*) from demo.{lacking}") == [(2,)]
    assert _branch_rows(server, table) == [(1, "a"), (2, "B"), (3, "c")]


def test_set_icegres_branch_in_a_block(server, table):
    with psycopg.connect(server.dsn) as c:
        c.execute("set local icegres.branch = 'dev'")
        c.execute(f"insert into demo.{table} values (3, 'c')")
        assert rows(c, f"select count(*) from demo.{table}") == [(3,)]
        c.commit()
        assert rows(c, f"select count(*) from demo.{table}") == [(2,)]  # SET LOCAL ended with the block
    assert _branch_rows(server, table) == [(1, "a"), (2, "b"), (3, "c")]


def test_serve_branch_is_every_sessions_default(server, table, tmp_path):
    catalog = f"sqlite:///{server.data_dir / 'catalog.db'}"
    with flight_server(tmp_path / "preview", "--catalog-uri", catalog, "--branch", "dev",
                       command="serve") as (uri, _, _, port):
        with psycopg.connect(_dsn(port), autocommit=True) as c:
            assert rows(c, "show icegres.branch") == [("dev",)]
            c.execute(f"insert into demo.{table} values (3, 'preview')")
            assert rows(c, f"select count(*) from demo.{table}") == [(3,)]
            c.execute("reset icegres.branch")  # back to the server's default, as PostgreSQL resets
            assert rows(c, "show icegres.branch") == [("dev",)]
            c.execute("set icegres.branch = main")
            assert rows(c, f"select count(*) from demo.{table}") == [(2,)]
        import adbc_driver_flightsql.dbapi as adbc
        import pyarrow as pa

        with adbc.connect(uri, autocommit=True) as f:
            with f.cursor() as cur:
                cur.execute(f"select count(*) from demo.{table}")
                assert cur.fetchall() == [(3,)]
            with f.cursor() as cur:  # a bulk ingest goes to the server's branch too
                more = pa.table({"id": pa.array([4], pa.int64()), "v": pa.array(["ingested"])})
                assert cur.adbc_ingest(table, more, mode="append", db_schema_name="demo") == 1
    assert _branch_rows(server, table) == [(1, "a"), (2, "b"), (3, "preview"), (4, "ingested")]
    assert _branch_rows(server, table, "main") == [(1, "a"), (2, "b")]


# --- Flight SQL --------------------------------------------------------------------------------


def test_flight_sql_writes_a_branch(server, table):
    import adbc_driver_flightsql.dbapi as adbc

    with adbc.connect(server.flight_uri, autocommit=True) as c, c.cursor() as cur:
        cur.execute(f'insert into demo."{table}@dev" values (?, ?)', parameters=(3, "flight"))
        cur.execute(f"update demo.\"{table}@dev\" set v = 'F' where id = 1")
        cur.execute(f'select * from demo."{table}@dev" order by id')
        assert cur.fetchall() == [(1, "F"), (2, "b"), (3, "flight")]
        cur.execute(f"select count(*) from demo.{table}")
        assert cur.fetchall() == [(2,)]
    assert _branch_rows(server, table) == [(1, "F"), (2, "b"), (3, "flight")]


def test_flight_sql_executemany_and_bulk_ingest_into_a_branch(server, table):
    import adbc_driver_flightsql.dbapi as adbc
    import pyarrow as pa

    more = pa.table({"id": pa.array([30], pa.int64()), "v": pa.array(["i3"])})
    with adbc.connect(server.flight_uri, autocommit=True) as c:
        with c.cursor() as cur:
            cur.executemany(f'insert into demo."{table}@dev" values (?, ?)', [(10, "m1"), (11, "m2")])
        with c.cursor() as cur:
            ingest = pa.table({"id": pa.array([20, 21], pa.int64()), "v": pa.array(["i1", "i2"])})
            assert cur.adbc_ingest(f"{table}@dev", ingest, mode="append", db_schema_name="demo") == 2
        with c.cursor() as cur, pytest.raises(adbc.Error, match="cannot replace branch"):
            cur.adbc_ingest(f"{table}@dev", more, mode="replace", db_schema_name="demo")
    assert _branch_rows(server, table) == [(1, "a"), (2, "b"), (10, "m1"), (11, "m2"), (20, "i1"), (21, "i2")]
    assert _branch_rows(server, table, "main") == [(1, "a"), (2, "b")]


def test_copy_from_writes_the_branch(conn, server, table):
    with conn.cursor().copy(f'copy demo."{table}@dev" (id, v) from stdin') as copy:
        copy.write_row((3, "copied"))
    conn.execute("set icegres.branch = 'dev'")
    with conn.cursor().copy(f"copy demo.{table} from stdin") as copy:
        copy.write_row((4, "session"))
    with conn.cursor().copy(f"copy demo.{table} to stdout") as copy:
        out = b"".join(bytes(chunk) for chunk in copy)
    assert out.count(b"\n") == 4  # COPY TO reads the branch too
    assert _branch_rows(server, table) == [(1, "a"), (2, "b"), (3, "copied"), (4, "session")]
    assert _branch_rows(server, table, "main") == [(1, "a"), (2, "b")]


# --- write-audit-publish (docs/time-travel.md) -------------------------------------------------


def test_write_audit_publish_recipe(conn, server):
    """The recipe as docs/time-travel.md writes it: stage on a branch, audit there, publish by
    fast-forwarding main, drop the branch."""
    conn.execute("create table demo.orders (id bigint, amount numeric(10, 2))")
    conn.execute("insert into demo.orders values (1, 10.00)")
    # 1. A branch for the batch.
    conn.execute("alter table demo.orders create branch etl_batch")
    # 2. Write: this session's statements go to the branch.
    conn.execute("set icegres.branch = 'etl_batch'")
    conn.execute("insert into demo.orders values (2, 20.00), (3, -5.00)")
    # 3. Audit on the branch; a failed check is fixed there, main never saw the bad row.
    assert rows(conn, "select count(*) from demo.orders where amount < 0") == [(1,)]
    conn.execute("delete from demo.orders where amount < 0")
    assert rows(conn, "select count(*) from demo.orders where amount < 0") == [(0,)]
    conn.execute("reset icegres.branch")
    assert rows(conn, "select count(*) from demo.orders") == [(1,)]  # readers of main: unchanged
    # 4. Publish: main fast-forwards to the audited branch, one metadata commit.
    conn.execute("call system.fast_forward('demo.orders', 'main', 'etl_batch')")
    conn.execute("alter table demo.orders drop branch etl_batch")
    assert rows(conn, "select id, amount::text from demo.orders order by id") == [(1, "10.00"), (2, "20.00")]
    t = _iceberg(server, "orders")
    assert sorted(t.scan().to_arrow().column("id").to_pylist()) == [1, 2]
    assert set(t.metadata.refs) == {"main"}


# --- the write ladder ----------------------------------------------------------------------------


def test_the_write_buffer_takes_branch_rows_and_replays_them_per_ref(tmp_path):
    """Under --write-buffer-ms with a WAL tail, an INSERT into "t@dev" is acked from the buffer
    like main's, and flushed to the branch (its watermark on the branch's snapshots). Reading or
    updating the branch settles its rows first. After a SIGKILL, each ref replays exactly the
    records its own snapshots lack: none twice, none lost."""
    import signal

    from tests.support.ladder import serve

    data_dir = tmp_path / "data"
    args = ("--write-buffer-ms", "60000", "--tail-dir", str(tmp_path / "wal"))
    lake = Server("", "", data_dir)
    with serve(data_dir, *args) as srv, srv.connect() as c:
        c.execute("create schema demo")
        c.execute("create table demo.t (id bigint, v text)")
        c.execute("insert into demo.t values (0, 'seed')")
        c.execute("select count(*) from demo.t").fetchall()
        c.execute("alter table demo.t create branch dev")  # (settles the seed into the lake first)
        for i in (101, 102, 103):
            assert c.execute("insert into demo.\"t@dev\" values (%s, 'dev')", (i,)).statusmessage == "INSERT 0 1"
        assert _branch_rows(lake, "t") == [(0, "seed")]  # acked from the buffer, not in the lake yet
        # A read of the branch settles its rows into the lake (on the branch only).
        assert rows(c, 'select count(*) from demo."t@dev"') == [(4,)]
        assert _branch_rows(lake, "t") == [(0, "seed"), (101, "dev"), (102, "dev"), (103, "dev")]
        assert _branch_rows(lake, "t", "main") == [(0, "seed")]
        c.execute('insert into demo."t@dev" values (104, \'dev\')')
        assert c.execute("update demo.\"t@dev\" set v = 'upd' where id = 104").statusmessage == "UPDATE 1"
        c.execute('insert into demo."t@dev" values (105, \'dev\')')
        c.execute("set icegres.branch = 'dev'")
        c.execute("insert into demo.t values (106, 'session')")
        c.execute("reset icegres.branch")
        for i in range(1, 6):
            c.execute("insert into demo.t values (%s, 'main')", (i,))
        assert _branch_rows(lake, "t", "main") == [(0, "seed")]  # main's rows wait in the buffer
        srv.stop(signal.SIGKILL)
    with serve(data_dir, *args) as srv, srv.connect() as c:
        assert rows(c, "select id from demo.t order by id") == [(i,) for i in range(6)]
        got = rows(c, 'select id, v from demo."t@dev" order by id')
        assert got == [(0, "seed"), (101, "dev"), (102, "dev"), (103, "dev"), (104, "upd"), (105, "dev"),
                       (106, "session")]
    assert _branch_rows(lake, "t") == got


def test_a_written_branch_is_no_table_in_the_catalog(server, table):
    """pg_catalog and information_schema list tables, never a branch a block writes (a block with
    DDL of its own sees its own catalog)."""
    with psycopg.connect(server.dsn) as c:
        c.execute(f'insert into demo."{table}@dev" values (3, \'c\')')
        c.execute(f"create table demo.{table}_ddl (id int)")  # the block's own catalog now
        listed = {r[0] for r in c.execute("select relname from pg_class where relname like %s", (f"{table}%",))}
        assert listed == {table, f"{table}_ddl"}
        names = {r[0] for r in c.execute("select table_name from information_schema.tables where table_schema = 'demo'")}
        assert f"{table}@dev" not in names and table in names
        c.rollback()
