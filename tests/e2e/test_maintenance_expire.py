"""Snapshot expiry and orphan GC on real servers (docs/maintenance.md): the write tail's
exactly-once replay survives expiry of the snapshots holding its watermark; expiry while writers
and readers run loses, duplicates and breaks nothing; CALL and ALTER TABLE EXECUTE over psycopg
and psql; orphan GC dry run, grace period, delete and fail-closed; pyiceberg reads the table after
each operation."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import psycopg
import pyarrow as pa
import pytest

from tests.e2e.test_writes import _duckdb_scan
from tests.support import ladder
from tests.support.ladder import Writers, catalog, lake_ids, make_table

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]

WINDOW_MS = 200
TAIL_ID = "icegres.tail-id"


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    d = tmp_path / "data"
    d.mkdir()
    return d


def maintain(data_dir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "icegres", "maintain", *args, "--data-dir", str(data_dir)],
                          capture_output=True, text=True, timeout=120)


def read_every_snapshot(data_dir: Path, ns: str, name: str = "t") -> dict[int, int]:
    """pyiceberg reads every snapshot the metadata still lists (and so every branch and tag):
    snapshot id -> rows. A file expiry deleted that one of them needs fails here. DuckDB reads the
    current one from the same metadata file."""
    table = catalog(data_dir).load_table((ns, name))
    rows = {s.snapshot_id: table.scan(snapshot_id=s.snapshot_id).to_arrow().num_rows for s in table.metadata.snapshots}
    if table.metadata.current_snapshot_id is not None:
        assert _duckdb_scan(table.metadata_location, "select count(*) from {scan}") == \
            [(rows[table.metadata.current_snapshot_id],)]
    return rows


def test_expiring_the_tails_snapshots_before_a_replay_replays_each_row_exactly_once(data_dir: Path) -> None:
    wal = data_dir.parent / "wal"
    args = ("--write-buffer-ms", str(WINDOW_MS), "--tail-dir", str(wal))
    with ladder.serve(data_dir, *args) as srv:
        ns = make_table(srv)
        srv.stop()
    # A flush commits (its snapshot holds the watermark), then the server dies before the WAL
    # hears of it: the WAL still holds records that are in the lake.
    with ladder.serve(data_dir, *args, env={"ICEGRES_FAULTS": "after-flush-commit=crash"}) as srv:
        with Writers(srv, f"{ns}.t", 4) as writers:
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and srv.proc.poll() is None:
                time.sleep(0.01)
        assert "icegres-fault: reached after-flush-commit" in srv.log()
    acked = list(writers.acked)
    assert acked and not writers.errors
    table = catalog(data_dir).load_table((ns, "t"))
    tail_snapshots = [s.snapshot_id for s in table.metadata.snapshots if s.summary and s.summary.get(TAIL_ID)]
    assert tail_snapshots
    # Another engine writes on top, then expiry removes every snapshot the tail wrote.
    foreign = pa.Table.from_pylist([{"id": -1, "w": 0, "note": "foreign"}], schema=table.schema().as_arrow())
    table.append(foreign)
    done = maintain(data_dir, "expire-snapshots", "--table", f"{ns}.t", "--older-than", "0s", "--retain-last", "1",
                    "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert set(tail_snapshots) <= set(report["expired_snapshots"])
    metadata = catalog(data_dir).load_table((ns, "t")).metadata
    assert not [s for s in metadata.snapshots if s.summary and s.summary.get(TAIL_ID)]
    assert any(k.startswith("icegres.tail-marks.") for k in metadata.properties)
    with ladder.serve(data_dir, *args) as srv:
        ids = lake_ids(data_dir, ns, "t")
        dupes = [i for i, n in Counter(ids).items() if n > 1]
        assert not dupes, f"replayed twice after expiry: {dupes[:10]}"
        assert not set(acked) - set(ids), "an acked row is lost"
        with srv.connect() as conn:
            assert conn.execute(f"select count(*) from {ns}.t").fetchone() == (len(ids),)
        srv.stop()
    read_every_snapshot(data_dir, ns)


class Readers:
    """Threads reading the table through icegres while maintenance runs: every error is kept."""

    def __init__(self, srv: ladder.Server, table: str, n: int) -> None:
        self.srv, self.table = srv, table
        self.errors: list[BaseException] = []
        self.reads = 0
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._run, daemon=True) for _ in range(n)]

    def __enter__(self) -> Readers:
        for t in self._threads:
            t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(timeout=30)

    def _run(self) -> None:
        try:
            with self.srv.connect() as conn:
                while not self._stop.is_set():
                    count, distinct = conn.execute(f"select count(*), count(distinct id) from {self.table}").fetchone()
                    assert count == distinct, f"a reader saw {count} rows, {distinct} distinct"
                    self.reads += 1
        except BaseException as exc:  # noqa: BLE001 - kept for the test to report
            self.errors.append(exc)


@pytest.mark.parametrize("buffered", [False, True], ids=["sync", "wal-tail"])
def test_expiry_while_writers_and_readers_run_loses_duplicates_and_breaks_nothing(data_dir: Path,
                                                                                  buffered: bool) -> None:
    args = ("--write-buffer-ms", str(WINDOW_MS), "--tail-dir", str(data_dir.parent / "wal")) if buffered else ()
    with ladder.serve(data_dir, *args) as srv:
        ns = make_table(srv)
        table = f"{ns}.t"
        with srv.connect() as conn:
            for i in range(3):
                conn.execute(f"insert into {table} values (%s, 0, 'seed')", (-10 - i,))
            conn.execute(f"alter table {table} create tag v1")
            conn.execute(f"alter table {table} create branch dev")
            conn.execute(f"insert into {ns}.\"t@dev\" values (-100, 0, 'dev')")
        pinned = srv.connect()
        pinned.autocommit = False
        pinned_count = pinned.execute(f"select count(*) from {table}").fetchone()[0]  # the block pins its snapshot
        expired_total = 0
        with Writers(srv, table, 3) as writers, Readers(srv, table, 2) as readers, srv.connect() as conn:
            for round_ in range(8):
                time.sleep(0.4)
                spelling = (f"call system.expire_snapshots('{table}', TIMESTAMP '2999-01-01 00:00', 2)" if round_ % 2
                            else f"alter table {table} execute expire_snapshots(retention_threshold => '0s')")
                conn.execute("set statement_timeout = 0")
                conn.execute(spelling)
                expired_total += 1
            writers.stop()
        assert not writers.errors, writers.errors
        assert not readers.errors, readers.errors[:3]
        assert readers.reads > 0 and expired_total == 8
        # The open block's snapshot was kept: it still reads what it read first.
        assert pinned.execute(f"select count(*) from {table}").fetchone()[0] == pinned_count
        pinned.rollback()
        pinned.close()
        acked = writers.acked
        with srv.connect() as conn:
            conn.execute(f"call system.expire_snapshots('{table}', TIMESTAMP '2999-01-01 00:00', 1)")
            served = [r[0] for r in conn.execute(f"select id from {table}").fetchall()]
            assert sorted(r[0] for r in conn.execute(f'select id from {ns}."t@dev"').fetchall()) == \
                [-100, -12, -11, -10]
            assert conn.execute(f"select count(*) from {table} for version as of 'v1'").fetchone() == (3,)
        srv.stop()
    ids = lake_ids(data_dir, ns, "t")
    assert sorted(ids) == sorted(served)
    assert len(ids) == len(set(ids)), "a row is duplicated"
    assert set(acked) <= set(ids), "an acked row is lost"
    snapshots = read_every_snapshot(data_dir, ns)
    metadata = catalog(data_dir).load_table((ns, "t")).metadata
    assert set(metadata.refs) == {"main", "dev", "v1"}
    assert len(snapshots) < 3 + 3 + len(acked)  # history was expired


def test_call_spellings_results_and_errors_over_psycopg_and_psql(data_dir: Path) -> None:
    with ladder.serve(data_dir) as srv:
        ns = make_table(srv)
        table = f"{ns}.t"
        with srv.connect() as conn:
            for i in range(4):
                conn.execute(f"insert into {table} values (%s, 0, 'x')", (i,))
            conn.execute(f"delete from {table} where id = 0")
            notices: list[str] = []
            conn.add_notice_handler(lambda d: notices.append(d.message_primary))
            dry = conn.execute(f"call system.expire_snapshots(table => '{table}', older_than => "
                               "TIMESTAMP '2999-01-01 00:00', dry_run => true)")
            assert [d.name for d in dry.description][:2] == ["deleted_data_files_count",
                                                             "deleted_position_delete_files_count"]
            dry_row = dry.fetchone()
            assert "would expire 4 snapshot(s)" in notices[-1]
            row = conn.execute(f"call system.expire_snapshots('{table}', TIMESTAMP '2999-01-01 00:00', 1)").fetchone()
            assert row == dry_row and row[0] == 1 and row[4] == 4  # the deleted row's file; 4 manifest lists
            assert conn.execute(f"select count(*) from {table}").fetchone() == (3,)
            orphans = conn.execute(f"alter table {table} execute remove_orphan_files(retention_threshold => '0s')")
            assert [d.name for d in orphans.description] == ["orphan_file_location", "file_size_in_bytes"]
            assert orphans.fetchall() == []
            for sql, state in [
                ("call system.expire_snapshots('nope.nope')", "42P01"),
                (f"call system.expire_snapshots('{table}', retain_last => 0)", "22023"),
                (f"call system.expire_snapshots('{table}', older_than => 'yesterday')", "22023"),
                (f"alter table {table} execute expire_snapshots(retention_threshold => 'soon')", "22023"),
                (f"call system.remove_orphan_files('{table}', dry_run => 'no')", "22023"),
                (f"call system.remove_orphan_files('{table}', location => '/elsewhere')", "22023"),
                (f"alter table {table} execute vacuum", "42883"),
            ]:
                with pytest.raises(psycopg.Error) as err:
                    conn.execute(sql)
                assert err.value.sqlstate == state, (sql, err.value)
            conn.execute("begin")
            for sql in (f"call system.expire_snapshots('{table}')",
                        f"alter table {table} execute remove_orphan_files"):
                with pytest.raises(psycopg.Error) as err:
                    conn.execute(sql)
                assert err.value.sqlstate == "25001"
                conn.execute("rollback")
                conn.execute("begin")
            conn.execute("rollback")
        psql = shutil.which("psql")
        if psql is not None:
            out = subprocess.run([psql, srv.dsn(), "-X", "-A", "-t", "-c",
                                  f"call system.expire_snapshots('{table}', TIMESTAMP '2999-01-01 00:00')"],
                                 capture_output=True, text=True, timeout=60)
            assert out.returncode == 0, out.stderr
            assert out.stdout.strip() == "0|0|0|0|0|0"
            assert "expired 0 snapshot(s)" in out.stderr
        srv.stop()
    assert sorted(lake_ids(data_dir, ns, "t")) == [1, 2, 3]


def test_orphan_gc_dry_run_grace_period_delete_and_fail_closed(data_dir: Path) -> None:
    with ladder.serve(data_dir) as srv:
        ns = make_table(srv)
        with srv.connect() as conn:
            conn.execute(f"insert into {ns}.t values (1, 0, 'a')")
            conn.execute(f"insert into {ns}.t values (2, 0, 'b')")
        srv.stop()
    location = Path(catalog(data_dir).load_table((ns, "t")).metadata.location.removeprefix("file://"))
    old = location / "data" / "00000-crashed-statement.parquet"
    young = location / "data" / "00001-in-flight.parquet"
    old.write_bytes(b"o" * 1000)
    young.write_bytes(b"y" * 10)
    os.utime(old, (time.time() - 4 * 86_400,) * 2)  # older than the default 3 days
    dry = maintain(data_dir, "remove-orphan-files", "--table", f"{ns}.t", "--json")
    assert dry.returncode == 0, dry.stderr
    report = json.loads(dry.stdout)
    assert report["dry_run"] and [o["path"] for o in report["orphan_files"]] == [str(old)]
    assert report["orphan_bytes"] == 1000 and old.exists()
    text = maintain(data_dir, "remove-orphan-files", "--table", f"{ns}.t")
    assert f"1000  {old}" in text.stdout and "would delete 1 orphan file(s), 1000 bytes" in text.stdout
    done = maintain(data_dir, "remove-orphan-files", "--table", f"{ns}.t", "--delete")
    assert done.returncode == 0, done.stderr
    assert not old.exists() and young.exists()  # the young one is inside the grace period
    assert sorted(lake_ids(data_dir, ns, "t")) == [1, 2]
    read_every_snapshot(data_dir, ns)
    # A manifest that cannot be read: nothing is deleted, and the command says why.
    table = catalog(data_dir).load_table((ns, "t"))
    manifest = Path(table.metadata.current_snapshot().manifests(table.io)[0].manifest_path.removeprefix("file://"))
    manifest.write_bytes(b"garbage")
    before = sorted(p for p in location.rglob("*") if p.is_file())
    broken = maintain(data_dir, "remove-orphan-files", "--table", f"{ns}.t", "--older-than", "0s", "--delete")
    assert broken.returncode == 1 and "58030" in broken.stderr and "Nothing was deleted" in broken.stderr
    broken = maintain(data_dir, "expire-snapshots", "--table", f"{ns}.t", "--older-than", "0s")
    assert broken.returncode == 1 and "58030" in broken.stderr
    assert sorted(p for p in location.rglob("*") if p.is_file()) == before
    assert maintain(data_dir, "remove-orphan-files", "--table", f"{ns}.nope").returncode == 1


def test_a_write_that_dies_before_publishing_leaves_staged_files_that_orphan_gc_collects(data_dir: Path) -> None:
    with ladder.serve(data_dir) as srv:
        ns = make_table(srv)
        with srv.connect() as conn:
            conn.execute(f"insert into {ns}.t values (1, 0, 'a')")
        srv.stop()
    # Data files, manifest and manifest list written, the catalog never asked: what a statement
    # killed mid-commit leaves behind.
    with ladder.serve(data_dir, env={"ICEGRES_FAULTS": "before-publish=crash"}) as srv:
        with pytest.raises(psycopg.Error), srv.connect() as conn:
            conn.execute(f"insert into {ns}.t select g, 0, 'x' from generate_series(1, 10000) g")
        srv.proc.wait(timeout=30)
        assert "icegres-fault: reached before-publish" in srv.log()
    listed = maintain(data_dir, "remove-orphan-files", "--table", f"{ns}.t", "--older-than", "0s", "--json")
    report = json.loads(listed.stdout)
    names = [Path(o["path"]).name for o in report["orphan_files"]]
    assert any(n.endswith(".parquet") for n in names) and any(n.startswith("snap-") for n in names), names
    done = maintain(data_dir, "remove-orphan-files", "--table", f"{ns}.t", "--older-than", "0s", "--delete")
    assert done.returncode == 0, done.stderr
    assert all(not Path(o["path"]).exists() for o in report["orphan_files"])
    again = json.loads(maintain(data_dir, "remove-orphan-files", "--table", f"{ns}.t", "--older-than", "0s",
                                "--json").stdout)
    assert again["orphan_files_count"] == 0
    assert lake_ids(data_dir, ns, "t") == [1]
    read_every_snapshot(data_dir, ns)
