"""Compaction and manifest rewrite (issue 30; docs/maintenance-compaction.md) on a real server:
CALL system.rewrite_data_files / rewrite_manifests, ALTER TABLE ... EXECUTE optimize, and the
CLI, checked by a checksum of the whole table, time travel to the snapshots before, pyiceberg and
DuckDB reading the lake after, and races with a user's UPDATE and INSERT."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tests.e2e.test_writes import _duckdb_scan
from tests.support.icegres_server import running_icegres

pytestmark = pytest.mark.e2e


@dataclass
class Server:
    dsn: str
    data_dir: Path
    flight_port: int = 0


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    data_dir = tmp_path_factory.mktemp("maintenance_compact") / "data"
    data_dir.mkdir()
    with running_icegres(data_dir, args=("--flight-port", "0")) as srv:
        yield Server(f"host=127.0.0.1 port={srv.port} dbname=icegres user=icegres", data_dir, srv.flight_port)


@pytest.fixture
def conn(server: Server) -> Iterator[psycopg.Connection]:
    with psycopg.connect(server.dsn, autocommit=True) as c:
        yield c


def small_files_table(c: psycopg.Connection, name: str, commits: int, rows_each: int = 3) -> None:
    """demo.<name> (id, v, n) written by `commits` INSERTs: one data file and one snapshot each."""
    c.execute("create schema if not exists demo")
    c.execute(f"drop table if exists demo.{name}")
    c.execute(f"create table demo.{name} (id bigint, v text, n numeric(10,2))")
    for i in range(commits):
        values = ", ".join(f"({i * rows_each + j}, 'v{(i * 7 + j) % 11}', {i}.{j:02d})" for j in range(rows_each))
        c.execute(f"insert into demo.{name} values {values}")


def checksum(c: psycopg.Connection, sql: str) -> tuple[int, str]:
    """Row count and a digest of every row in a canonical order."""
    rows = sorted(c.execute(sql).fetchall(), key=repr)
    return len(rows), hashlib.sha256(repr(rows).encode()).hexdigest()


def count(c: psycopg.Connection, sql: str) -> int:
    return c.execute(sql).fetchone()[0]


def lake_table(server: Server, name: str) -> Any:
    from icegres.engine.catalog import Lakehouse

    return Lakehouse.embedded(server.data_dir).load_table("demo", name)


def snapshot_ids(c: psycopg.Connection, name: str) -> list[int]:
    return [r[0] for r in c.execute(f'select snapshot_id from demo."{name}$snapshots" order by committed_at')]


def test_many_small_inserts_compact_into_one_file_with_the_same_rows(conn: psycopg.Connection,
                                                                      server: Server) -> None:
    small_files_table(conn, "t", 30)
    before = checksum(conn, "select * from demo.t")
    history = snapshot_ids(conn, "t")
    assert count(conn, 'select count(*) from demo."t$files"') == 30

    cur = conn.execute("call system.rewrite_data_files('demo.t')")
    assert [d.name for d in cur.description] == ["rewritten_data_files_count", "added_data_files_count",
                                                 "rewritten_bytes_count", "failed_data_files_count"]
    rewritten, added, nbytes, failed = cur.fetchone()
    assert (rewritten, added, failed) == (30, 1, 0) and nbytes > 0

    assert checksum(conn, "select * from demo.t") == before
    assert count(conn, 'select count(*) from demo."t$files"') == 1
    after = snapshot_ids(conn, "t")
    assert after[:-1] == history  # one snapshot more, every earlier one kept
    operation = conn.execute(f'select operation from demo."t$snapshots" where snapshot_id = {after[-1]}').fetchone()
    assert operation == ("replace",)
    # Time travel to the snapshots before the compaction reads them as they were.
    assert checksum(conn, f"select * from demo.t for version as of {history[-1]}") == before
    assert count(conn, f"select count(*) from demo.t for system_version as of {history[9]}") == 30
    assert count(conn, f'select count(*) from "demo"."t@{history[0]}"') == 3

    # pyiceberg and DuckDB read the compacted table, and the snapshot before it.
    table = lake_table(server, "t")
    rows = table.scan().to_arrow().sort_by("id")
    assert rows.num_rows == 90 and rows["id"].to_pylist() == list(range(90))
    assert table.scan(snapshot_id=history[9]).to_arrow().num_rows == 30
    assert _duckdb_scan(table.metadata_location, "select count(*), sum(id) from {scan}") == [(90, sum(range(90)))]

    # Nothing left to do: no commit.
    cur = conn.execute("call system.rewrite_data_files(table => 'demo.t')")
    assert cur.fetchone() == (0, 0, 0, 0)
    assert snapshot_ids(conn, "t") == after


def test_only_small_files_in_groups_of_min_input_files_are_rewritten(conn: psycopg.Connection) -> None:
    small_files_table(conn, "m", 4)
    cur = conn.execute("call system.rewrite_data_files('demo.m')")  # 4 < min-input-files (5)
    assert cur.fetchone()[0] == 0
    cur = conn.execute("call system.rewrite_data_files(table => 'demo.m', strategy => 'binpack', "
                       "options => map('min-input-files', '2'))")
    assert cur.fetchone()[:2] == (4, 1)
    small_files_table(conn, "m", 6)
    # Files of 1 byte or more are not "small" under a 1-byte threshold: nothing to rewrite.
    cur = conn.execute("call system.rewrite_data_files(table => 'demo.m', "
                       "options => map('min-file-size-bytes', '1', 'min-input-files', '2'))")
    assert cur.fetchone()[0] == 0
    cur = conn.execute("call system.rewrite_data_files(table => 'demo.m', "
                       "options => map('rewrite-all', 'true', 'target-file-size-bytes', '1048576'))")
    assert cur.fetchone()[:2] == (6, 1)


def test_partitions_are_compacted_apart(conn: psycopg.Connection, server: Server) -> None:
    conn.execute("create schema if not exists demo")
    conn.execute("create table demo.p (id bigint, region text) with (partitioning = 'region')")
    for i in range(12):
        conn.execute(f"insert into demo.p values ({i}, '{'eu' if i % 2 else 'us'}')")
    before = checksum(conn, "select * from demo.p")
    cur = conn.execute("call system.rewrite_data_files(table => 'demo.p', options => map('min-input-files', '2'))")
    assert cur.fetchone()[:2] == (12, 2)
    assert checksum(conn, "select * from demo.p") == before
    table = lake_table(server, "p")
    for task in table.scan().plan_files():  # one file per region, each holding only its region
        assert task.file.record_count == 6


def test_sort_strategy_writes_rows_in_the_index_order(conn: psycopg.Connection, server: Server) -> None:
    conn.execute("create schema if not exists demo")
    conn.execute("create table demo.s (id bigint, k int)")
    conn.execute("create index s_k on demo.s (k)")
    for i in range(6):
        conn.execute(f"insert into demo.s values ({i}, {(i * 37) % 100}), ({i + 100}, {(i * 53) % 100})")
    cur = conn.execute("call system.rewrite_data_files(table => 'demo.s', strategy => 'sort')")
    assert cur.fetchone()[:2] == (6, 1)
    keys = lake_table(server, "s").scan().to_arrow()["k"].to_pylist()
    assert keys == sorted(keys)
    cur = conn.execute("call system.rewrite_data_files(table => 'demo.s', strategy => 'sort', "
                       "sort_order => 'k DESC NULLS LAST', options => map('rewrite-all', 'true'))")
    assert cur.fetchone()[:2] == (1, 1)
    keys = lake_table(server, "s").scan().to_arrow()["k"].to_pylist()
    assert keys == sorted(keys, reverse=True)


def test_trinos_optimize(conn: psycopg.Connection) -> None:
    small_files_table(conn, "o", 3)
    before = checksum(conn, "select * from demo.o")
    cur = conn.execute("alter table demo.o execute optimize(file_size_threshold => '10MB')")
    assert cur.statusmessage == "ALTER TABLE"
    assert count(conn, 'select count(*) from demo."o$files"') == 1
    assert checksum(conn, "select * from demo.o") == before
    conn.execute("insert into demo.o values (1000, 'x', 1)")
    conn.execute("alter table demo.o execute optimize")  # Trino's rule: two small files are enough
    assert count(conn, 'select count(*) from demo."o$files"') == 1


def test_rewrite_manifests_merges_them_and_keeps_the_rows(conn: psycopg.Connection, server: Server) -> None:
    small_files_table(conn, "r", 25)
    before = checksum(conn, "select * from demo.r")
    history = snapshot_ids(conn, "r")
    assert count(conn, 'select count(*) from demo."r$manifests"') == 25
    cur = conn.execute("call system.rewrite_manifests('demo.r')")
    assert [d.name for d in cur.description] == ["rewritten_manifests_count", "added_manifests_count"]
    assert cur.fetchone() == (25, 1)
    assert count(conn, 'select count(*) from demo."r$manifests"') == 1
    assert checksum(conn, "select * from demo.r") == before
    assert count(conn, f"select count(*) from demo.r for version as of {history[4]}") == 15
    conn.execute("insert into demo.r values (1000, 'x', 1)")  # appends after it still work
    assert count(conn, "select count(*) from demo.r") == 76
    table = lake_table(server, "r")
    assert _duckdb_scan(table.metadata_location, "select count(*) from {scan}") == [(76,)]
    assert conn.execute("call system.rewrite_manifests(table => 'demo.r', use_caching => false)").fetchone() == (2, 1)


def test_compaction_loses_to_a_concurrent_update_and_changes_nothing(conn: psycopg.Connection,
                                                                       server: Server) -> None:
    """The UPDATE commits while the compaction has written its files but not committed them: the
    UPDATE wins, the compaction aborts with 40001, deletes its files and commits nothing."""
    from icegres.engine.catalog import Lakehouse
    from icegres.engine.maintenance.compact import CompactOptions, compact
    from icegres.pg.errors import PgError

    small_files_table(conn, "u", 8)
    lakehouse = Lakehouse.embedded(server.data_dir)
    written: list[int] = []

    def update_meanwhile(done: int, total: int, group: Any, files: int) -> None:
        written.append(files)
        conn.execute("update demo.u set v = 'updated' where id = 4")

    with pytest.raises(PgError) as raised:
        compact(lakehouse, ("demo", "u"), CompactOptions(), update_meanwhile)
    assert raised.value.sqlstate == "40001"
    assert "compaction of table \"demo.u\" aborted" in raised.value.message
    assert "unchanged" in raised.value.message
    assert written == [1]
    after_update = checksum(conn, "select * from demo.u")
    assert conn.execute("select v from demo.u where id = 4").fetchone() == ("updated",)
    assert count(conn, 'select count(*) from demo."u$files"') == 8  # the UPDATE rewrote one file of 8
    operations = [r[0] for r in conn.execute('select operation from demo."u$snapshots" order by committed_at')]
    assert "replace" not in operations and operations[-1] == "overwrite"
    # The compacted file it wrote is gone from storage (no orphan left behind).
    data = server.data_dir / "warehouse" / "demo" / "u" / "data"
    listed = {f.file_path.removeprefix("file://") for f in (t.file for t in lake_table(server, "u").scan().plan_files())}
    history_files = {str(p) for p in data.rglob("*.parquet")}
    referenced = set()
    for snapshot in lake_table(server, "u").snapshots():
        table = lake_table(server, "u")
        referenced |= {t.file.file_path.removeprefix("file://")
                       for t in table.scan(snapshot_id=snapshot.snapshot_id).plan_files()}
    assert listed <= referenced and history_files == referenced
    # Run again, it compacts the table as the UPDATE left it.
    result = compact(lakehouse, ("demo", "u"), CompactOptions())
    assert result.rewritten_data_files_count == 8 and result.added_data_files_count == 1
    assert checksum(conn, "select * from demo.u") == after_update


def test_compaction_racing_an_insert_rebases_and_both_land(conn: psycopg.Connection, server: Server) -> None:
    from icegres.engine.catalog import Lakehouse
    from icegres.engine.maintenance.compact import CompactOptions, compact

    small_files_table(conn, "i", 8)
    lakehouse = Lakehouse.embedded(server.data_dir)

    def insert_meanwhile(done: int, total: int, group: Any, files: int) -> None:
        conn.execute("insert into demo.i values (5000, 'late', 1), (5001, 'late', 2)")

    result = compact(lakehouse, ("demo", "i"), CompactOptions(), insert_meanwhile)
    assert result.rewritten_data_files_count == 8 and result.added_data_files_count == 1
    assert count(conn, "select count(*) from demo.i") == 26
    assert count(conn, "select count(*) from demo.i where v = 'late'") == 2
    assert count(conn, 'select count(*) from demo."i$files"') == 2  # the compacted file and the INSERT's
    operations = [r[0] for r in conn.execute('select operation from demo."i$snapshots" order by committed_at')]
    assert operations[-2:] == ["append", "replace"]


def test_the_cli_compacts_and_rewrites_manifests_with_json_reports(conn: psycopg.Connection,
                                                                    server: Server) -> None:
    small_files_table(conn, "c", 12)
    before = checksum(conn, "select * from demo.c")
    run = subprocess.run([sys.executable, "-m", "icegres", "maintain", "rewrite-data-files",
                          "--data-dir", str(server.data_dir), "--table", "demo.c", "--json"],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    (report,) = json.loads(run.stdout)
    assert report["table"] == "demo.c" and report["rewritten_data_files_count"] == 12
    assert report["added_data_files_count"] == 1 and report["data_files_before"] == 12
    assert "[1/1] demo.c unpartitioned: 12 files" in run.stderr  # progress, a line per group
    assert checksum(conn, "select * from demo.c") == before  # the running server sees it at once
    assert count(conn, 'select count(*) from demo."c$files"') == 1
    run = subprocess.run([sys.executable, "-m", "icegres", "maintain", "rewrite-manifests",
                          "--data-dir", str(server.data_dir), "--table", "demo.c", "--table", "demo.nope"],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 1
    assert "demo.c" in run.stdout and 'relation "demo.nope" does not exist (SQLSTATE 42P01)' in run.stderr
    assert count(conn, 'select count(*) from demo."c$manifests"') == 1
    assert checksum(conn, "select * from demo.c") == before


@pytest.mark.parametrize(("sql", "sqlstate"), [
    ("call system.rewrite_data_files('demo.nope')", "42P01"),
    ("call system.rewrite_manifests(table => 'nope')", "42P01"),
    ("call system.rewrite_data_files('demo.t', 'zorder')", "22023"),
    ("call system.rewrite_data_files(table => 'demo.t', options => map('bogus', '1'))", "22023"),
    ("call system.rewrite_data_files(table => 'demo.t', options => map('min-input-files', 'many'))", "22023"),
    ("call system.rewrite_data_files(table => 'demo.t', options => map('target-file-size-bytes'))", "22023"),
    ("call system.rewrite_data_files(table => 'demo.t', sort_order => 'id')", "22023"),
    ("call system.rewrite_data_files(table => 'demo.t', strategy => 'sort')", "22023"),
    ("call system.rewrite_data_files(table => 'demo.t', strategy => 'sort', sort_order => 'nope')", "42703"),
    ("call system.rewrite_data_files(table => 'demo.t', where => 'id > 3')", "0A000"),
    ("call system.rewrite_manifests(table => 'demo.t', spec_id => 7)", "22023"),
    ("alter table demo.t execute optimize(file_size_threshold => 'lots')", "22023"),
    ("alter table demo.t execute vacuum", "42883"),
    ("call system.rewrite_data_files(table => 'demo.t', bogus => 1)", "42883"),
])
def test_bad_arguments_are_postgresql_errors(conn: psycopg.Connection, sql: str, sqlstate: str) -> None:
    conn.execute("create schema if not exists demo")
    conn.execute("create table if not exists demo.t (id bigint, v text, n numeric(10,2))")
    with pytest.raises(psycopg.Error) as raised:
        conn.execute(sql)
    assert raised.value.sqlstate == sqlstate, raised.value


@pytest.mark.parametrize("sql", ["call system.rewrite_data_files('demo.t')",
                                 "call system.rewrite_manifests('demo.t')",
                                 "alter table demo.t execute optimize"])
def test_not_in_a_transaction_block(server: Server, sql: str) -> None:
    with psycopg.connect(server.dsn) as c:
        c.execute("create schema if not exists demo")
        c.execute("create table if not exists demo.t (id bigint, v text, n numeric(10,2))")
        c.commit()
        c.execute("select 1")
        with pytest.raises(psycopg.Error) as raised:
            c.execute(sql)
        assert raised.value.sqlstate == "25001"


def test_an_update_that_loses_its_commit_to_a_compaction_runs_again_and_lands(
        tmp_path_factory: pytest.TempPathFactory) -> None:
    """The other order: the UPDATE has staged its rewrite (held before publishing by a fault
    point) when the compaction commits. Its commit finds its files replaced; since only a
    compaction came between, the statement runs again on the new head and lands: the user's
    write never fails because of compaction."""
    import threading
    import time

    import pyarrow as pa

    from icegres.engine.catalog import Lakehouse
    from icegres.engine.maintenance.compact import CompactOptions, compact

    data_dir = tmp_path_factory.mktemp("compaction_first") / "data"
    data_dir.mkdir()
    lakehouse = Lakehouse.embedded(data_dir)
    lakehouse.create_namespace_if_missing("demo")
    schema = pa.schema([("id", pa.int64()), ("v", pa.string())])
    table = lakehouse.create_table("demo", "w", schema)
    for i in range(8):
        table.append(pa.table({"id": [2 * i, 2 * i + 1], "v": ["a", "b"]}, schema=schema))
    with running_icegres(data_dir, env={"ICEGRES_FAULTS": "before-publish=sleep:2"}) as srv:
        dsn = f"host=127.0.0.1 port={srv.port} dbname=icegres user=icegres"
        outcome: dict[str, Any] = {}

        def update() -> None:
            try:
                with psycopg.connect(dsn, autocommit=True) as c:
                    outcome["rowcount"] = c.execute("update demo.w set v = 'updated' where id = 5").rowcount
            except Exception as exc:  # reported below
                outcome["error"] = exc

        offset = srv.log_path.stat().st_size
        worker = threading.Thread(target=update)
        worker.start()
        deadline = time.monotonic() + 60
        while "reached before-publish" not in srv.log_path.read_text()[offset:]:
            assert time.monotonic() < deadline and worker.is_alive(), outcome
            time.sleep(0.05)
        result = compact(lakehouse, ("demo", "w"), CompactOptions())  # lands while the UPDATE waits
        assert result.rewritten_data_files_count == 8
        worker.join(timeout=60)
        assert "error" not in outcome, outcome.get("error")
        assert outcome["rowcount"] == 1
        with psycopg.connect(dsn, autocommit=True) as c:
            assert c.execute("select id, v from demo.w where v <> 'a' and v <> 'b'").fetchall() == [(5, "updated")]
            assert count(c, "select count(*) from demo.w") == 16
            operations = [r[0] for r in c.execute('select operation from demo."w$snapshots" order by committed_at')]
        assert operations[-2:] == ["replace", "overwrite"]
        assert "running it again" in srv.log_path.read_text()[offset:]


# --- merge-on-read deletes another engine wrote (DuckDB-iceberg through SeaweedFS's REST catalog) --


def test_compaction_applies_position_deletes_another_engine_wrote(stack: Any, tmp_path: Path) -> None:
    import uuid

    from tests.e2e.test_position_deletes import _duck, _rows_everywhere, _snapshot

    ns = f"cmor_{uuid.uuid4().hex[:8]}"
    expected = {i: "x" for i in range(1, 61)}
    with running_icegres(tmp_path / "data", env=stack.env()) as srv, psycopg.connect(srv.dsn(), autocommit=True) as c:
        c.execute(f"create schema {ns}")
        c.execute(f"create table {ns}.t (id bigint, v text)")
        for lo in (1, 21, 41):
            c.execute(f"insert into {ns}.t select g, 'x' from generate_series({lo}, {lo + 19}) g")
        duck = _duck(stack)
        try:
            duck.execute(f"delete from lake.{ns}.t where id <= 5 or id = 45")
            duck.execute(f"update lake.{ns}.t set v = 'u' where id between 20 and 24")
            for i in (1, 2, 3, 4, 5, 45):
                del expected[i]
            expected.update({i: "u" for i in range(20, 25)})
            before = _snapshot(stack, ns)
            assert _rows_everywhere(stack, c, duck, ns) == sorted(expected.items())
            # 4 data files (3 INSERTs, DuckDB's update) < min-input-files, but those with deletes go
            cur = c.execute(f"call system.rewrite_data_files('{ns}.t')")
            rewritten, added = cur.fetchone()[:2]
            assert rewritten >= 3 and added == 1
            assert _rows_everywhere(stack, c, duck, ns) == sorted(expected.items())
            from pyiceberg.catalog import load_catalog

            table = load_catalog("rest", **stack.pyiceberg_properties()).load_table((ns, "t"))
            assert not any(t.delete_files for t in table.scan().plan_files())  # nothing left to apply
            assert c.execute(f"select count(*) from {ns}.t for system_version as of {before}").fetchone() == (54,)
        finally:
            duck.close()


def test_a_delete_another_engine_commits_during_a_compaction_aborts_it(stack: Any, tmp_path: Path) -> None:
    import threading
    import time
    import uuid

    from tests.e2e.test_position_deletes import _duck, _rows_everywhere

    ns = f"cmor_{uuid.uuid4().hex[:8]}"
    env = {**stack.env(), "ICEGRES_FAULTS": "before-publish=sleep:3"}
    with running_icegres(tmp_path / "data", env=env) as srv, psycopg.connect(srv.dsn(), autocommit=True) as c:
        c.execute(f"create schema {ns}")
        c.execute(f"create table {ns}.t (id bigint, v text)")
        c.execute(f"insert into {ns}.t select g, 'x' from generate_series(1, 20) g")
        c.execute(f"insert into {ns}.t select g, 'x' from generate_series(21, 40) g")
        outcome: dict[str, Any] = {}

        def compaction() -> None:
            try:
                with psycopg.connect(srv.dsn(), autocommit=True) as other:
                    other.execute(f"call system.rewrite_data_files(table => '{ns}.t', "
                                  "options => map('min-input-files', '2'))")
            except psycopg.Error as exc:
                outcome["error"] = exc

        offset = srv.log_path.stat().st_size
        worker = threading.Thread(target=compaction)
        worker.start()
        deadline = time.monotonic() + 60
        while "reached before-publish" not in srv.log_path.read_text()[offset:]:
            assert time.monotonic() < deadline and worker.is_alive(), outcome
            time.sleep(0.05)
        duck = _duck(stack)
        try:
            duck.execute(f"delete from lake.{ns}.t where id <= 5")  # lands while the compaction waits
            worker.join(timeout=60)
            assert outcome["error"].sqlstate == "40001"
            assert "unchanged" in str(outcome["error"])
            assert _rows_everywhere(stack, c, duck, ns) == [(i, "x") for i in range(6, 41)]
            operations = [r[0] for r in c.execute(f'select operation from {ns}."t$snapshots"')]
            assert "replace" not in operations
        finally:
            duck.close()


def test_on_a_terminal_the_cli_draws_a_progress_bar(conn: psycopg.Connection, server: Server) -> None:
    """stderr a terminal (a pseudo-terminal here): a bar that reaches its total, where a pipe gets
    a line per group (above); stdout keeps only the report."""
    import os
    import pty

    small_files_table(conn, "pb", 6)
    primary, secondary = pty.openpty()
    try:
        run = subprocess.run([sys.executable, "-m", "icegres", "maintain", "rewrite-data-files",
                              "--data-dir", str(server.data_dir), "--table", "demo.pb", "--json"],
                             stdout=subprocess.PIPE, stderr=secondary, text=True, timeout=120)
        os.close(secondary)
        secondary = -1
        drawn = b""
        while True:
            try:
                chunk = os.read(primary, 65536)
            except OSError:  # (EIO: the terminal's other end is closed and drained)
                break
            if not chunk:
                break
            drawn += chunk
    finally:
        if secondary >= 0:
            os.close(secondary)
        os.close(primary)
    assert run.returncode == 0
    assert json.loads(run.stdout)[0]["rewritten_data_files_count"] == 6
    shown = drawn.decode(errors="replace")
    assert "demo.pb: compacting" in shown and "1/1" in shown and "\x1b[" in shown
    assert "unpartitioned: 6 files" in shown  # (the group's note as the bar's description)


def test_a_call_over_flight_sql_answers_its_row(conn: psycopg.Connection, server: Server) -> None:
    """ADBC's execute/fetch of a CALL: the procedure runs and its result row comes back, as over
    pgwire (execute_update runs it too, with no row count: Flight SQL's update has none to give)."""
    import adbc_driver_flightsql.dbapi as flight_sql

    small_files_table(conn, "fl", 5)
    before = checksum(conn, "select * from demo.fl")
    with flight_sql.connect(f"grpc://127.0.0.1:{server.flight_port}",
                            db_kwargs={"username": "icegres", "password": ""}) as flight, flight.cursor() as cur:
        cur.execute("CALL system.rewrite_data_files(table => 'demo.fl', options => map('min-input-files', '2'))")
        assert [d[0] for d in cur.description] == ["rewritten_data_files_count", "added_data_files_count",
                                                   "rewritten_bytes_count", "failed_data_files_count"]
        row = cur.fetchone()
        assert row[:2] == (5, 1) and row[2] > 0 and row[3] == 0
        cur.execute("CALL system.rewrite_manifests('demo.fl')")
        assert [d[0] for d in cur.description] == ["rewritten_manifests_count", "added_manifests_count"]
        assert len(cur.fetchall()) == 1
    assert checksum(conn, "select * from demo.fl") == before
    assert count(conn, 'select count(*) from demo."fl$files"') == 1
