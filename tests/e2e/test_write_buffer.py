"""The write ladder's first two rungs end to end: `icegres serve --write-buffer-ms N [--tail-dir D]`.

Real server processes on the embedded SQLite lake, real psycopg clients, pyiceberg looking at the
catalog from outside. What is proven: an autocommit INSERT is acked before any commit and is seen
by other connections at once, exactly once even while flushes land; many writers make one commit
per table per flush; SIGTERM flushes everything; SIGKILL with a WAL tail loses no acked row and
duplicates none, at random moments and right after a flush committed but before the WAL trimmed;
SIGKILL without a tail loses at most the unflushed window; UPDATE sees buffered rows.
"""

from __future__ import annotations

import contextlib
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support import ladder
from tests.support.ladder import Server, Writers, catalog, lake_ids, make_table

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(240)]

WINDOW_MS = 200
TAIL_ID = "icegres.tail-id"
TAIL_LSN = "icegres.tail-lsn"


@contextlib.contextmanager
def serve(data_dir: Path, *args: str, faults: str = "") -> Iterator[Server]:
    with ladder.serve(data_dir, *args, env={"ICEGRES_FAULTS": faults}) as srv:
        yield srv


def snapshots(data_dir: Path, ns: str, name: str) -> list[Any]:
    return list(catalog(data_dir).load_table((ns, name)).metadata.snapshots)


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    d = tmp_path / "data"
    d.mkdir()
    return d


def test_tail_dir_without_a_buffer_window_is_a_start_up_error(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "icegres", "serve", "--data-dir", str(tmp_path / "d"),
                           "--tail-dir", str(tmp_path / "wal")], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert "--tail-dir needs the write buffer" in proc.stderr


def test_a_second_server_on_a_tail_dir_in_use_is_refused_until_the_first_dies(data_dir: Path) -> None:
    """One writer per WAL directory: the second would write segments the first trims (found by
    `icegres verify`: both started, and the second's acknowledged rows were lost)."""
    wal = data_dir.parent / "wal"
    args = ("--write-buffer-ms", str(WINDOW_MS), "--tail-dir", str(wal))
    with serve(data_dir, *args) as first:
        second = subprocess.run([sys.executable, "-m", "icegres", "serve", "--data-dir", str(data_dir.parent / "d2"),
                                 "--port", "0", *args], capture_output=True, text=True, timeout=120,
                                stdin=subprocess.DEVNULL)
        assert second.returncode == 1, second.stderr[-2000:]
        assert second.stderr.strip().splitlines()[-1] == (
            f"icegres: the WAL directory {wal} is in use by pid {first.proc.pid}: one server per --tail-dir "
            "(stop it first, or give this server a directory of its own)")
        first.proc.send_signal(signal.SIGKILL)
        first.proc.wait(timeout=30)
    with serve(data_dir, *args) as again:  # the kernel released the dead server's lock
        assert again.proc.poll() is None


@pytest.mark.parametrize("tail", [False, True], ids=["memory", "wal"])
def test_insert_is_acked_before_the_flush_and_visible_at_once(data_dir: Path, tail: bool) -> None:
    args = ["--write-buffer-ms", str(WINDOW_MS)] + (["--tail-dir", str(data_dir.parent / "wal")] if tail else [])
    with serve(data_dir, *args) as srv:
        ns = make_table(srv)
        before = len(snapshots(data_dir, ns, "t"))
        with srv.connect() as writer, srv.connect() as reader:
            started = time.monotonic()
            cur = writer.execute(f"insert into {ns}.t values (1, 0, 'a'), (2, 0, 'b')")
            assert cur.statusmessage == "INSERT 0 2"
            assert writer.execute(f"insert into {ns}.t values (3, 0, 'c') returning id, note").fetchall() == [(3, "c")]
            c = writer.cursor()
            with c.copy(f"copy {ns}.t (id, w, note) from stdin") as copy:
                copy.write_row((4, 0, "d"))
            assert c.statusmessage == "COPY 1"
            c.close()
            seen = reader.execute(f"select id from {ns}.t order by id").fetchall()
            in_lake = len(snapshots(data_dir, ns, "t"))
            # (timed after the lake was read: reading it takes a while on a busy machine, and the
            # window may close meanwhile)
            elapsed = time.monotonic() - started
            # Nothing is in the lake yet, but another connection sees every acked row.
            if elapsed < WINDOW_MS / 1000 * 0.8:
                assert in_lake == before
            assert seen == [(1,), (2,), (3,), (4,)]
            time.sleep(WINDOW_MS / 1000 * 3)
            assert sorted(lake_ids(data_dir, ns, "t")) == [1, 2, 3, 4]
            assert reader.execute(f"select count(*) from {ns}.t").fetchone() == (4,)
            flushes = [s for s in snapshots(data_dir, ns, "t") if s.summary and s.summary.get(TAIL_ID)]
            assert len(flushes) == 1, "three statements, one window: one commit"


def test_reads_see_buffered_rows_exactly_once_while_flushes_land(data_dir: Path) -> None:
    with serve(data_dir, "--write-buffer-ms", "50") as srv:
        ns = make_table(srv)
        table = f"{ns}.t"
        failures: list[str] = []
        reads = 0
        with Writers(srv, table, 4) as writers, srv.connect() as reader:
            deadline = time.monotonic() + 3
            while time.monotonic() < deadline:
                low = writers.count()
                total, distinct = reader.execute(f"select count(*), count(distinct id) from {table}").fetchone()
                high = writers.count() + 4  # at most one statement in flight per writer
                reads += 1
                if total != distinct or not low <= total <= high:
                    failures.append(f"read {reads}: {total} rows, {distinct} distinct, acked {low}..{high}")
        assert not writers.errors, writers.errors
        assert not failures, failures[:5]
        flushes = [s for s in snapshots(data_dir, ns, "t") if s.summary and s.summary.get(TAIL_ID)]
        assert reads > 20 and len(flushes) > 5, (reads, len(flushes))


def test_many_writers_make_one_commit_per_table_per_flush(data_dir: Path) -> None:
    with serve(data_dir, "--write-buffer-ms", str(WINDOW_MS), "--tail-dir", str(data_dir.parent / "wal")) as srv:
        ns = make_table(srv, "a")
        with srv.connect() as conn:
            conn.execute(f"create table {ns}.b (id bigint, w int, note text)")
        started = time.monotonic()
        with Writers(srv, f"{ns}.a", 8) as wa, Writers(srv, f"{ns}.b", 8):
            time.sleep(2)
        elapsed = time.monotonic() - started
        assert not wa.errors, wa.errors
        time.sleep(WINDOW_MS / 1000 * 3)
        for name in ("a", "b"):
            snaps = [s for s in snapshots(data_dir, ns, name) if s.summary and s.summary.get(TAIL_ID)]
            rows = sum(int(s.summary.get("added-records") or 0) for s in snaps)
            # One commit per window at most (plus the last partial window and scheduling slack).
            assert len(snaps) <= elapsed / (WINDOW_MS / 1000) + 3, (name, len(snaps), elapsed)
            assert rows == len(lake_ids(data_dir, ns, name)) and rows > 8 * len(snaps), (rows, len(snaps))
            lsns = [int(s.summary[TAIL_LSN]) for s in snaps]
            assert lsns == sorted(lsns), "the watermark only moves forward"


@pytest.mark.parametrize("tail", [False, True], ids=["memory", "wal"])
def test_sigterm_flushes_every_acked_row_before_exit(data_dir: Path, tail: bool) -> None:
    args = ["--write-buffer-ms", "5000"] + (["--tail-dir", str(data_dir.parent / "wal")] if tail else [])
    with serve(data_dir, *args) as srv:
        ns = make_table(srv)
        with Writers(srv, f"{ns}.t", 4) as writers:
            time.sleep(0.5)
            assert snapshots(data_dir, ns, "t") == [], "a 5 s window: nothing flushed yet"
            srv.stop(signal.SIGTERM)
        assert srv.proc.returncode == 0, srv.log()[-3000:]
        assert "write buffer flushed" in srv.log()
    acked = writers.acked
    ids = lake_ids(data_dir, ns, "t")
    assert len(acked) > 10
    assert set(acked) <= set(ids), "an acked row is missing after SIGTERM"
    assert len(ids) == len(set(ids)), "a row is duplicated"


def _kill_round(data_dir: Path, wal: Path, ns: str, base: int, *, kill_after_s: float, faults: str = "") -> list[int]:
    """Writers against a fresh server; SIGKILL it (or let a fault crash it); return the acked ids."""
    args = ("--write-buffer-ms", str(WINDOW_MS), "--tail-dir", str(wal))
    with serve(data_dir, *args, faults=faults) as srv:
        with Writers(srv, f"{ns}.t", 6, base=base) as writers:
            deadline = time.monotonic() + kill_after_s
            while time.monotonic() < deadline and srv.proc.poll() is None:
                time.sleep(0.01)
            if srv.proc.poll() is None:
                srv.stop(signal.SIGKILL)
        assert not writers.errors, writers.errors
        if faults:
            assert "icegres-fault: reached after-flush-commit" in srv.log()
        return list(writers.acked)


def test_sigkill_with_a_wal_tail_then_restart_replays_every_acked_row_exactly_once(data_dir: Path) -> None:
    wal = data_dir.parent / "wal"
    with serve(data_dir, "--write-buffer-ms", str(WINDOW_MS), "--tail-dir", str(wal)) as srv:
        ns = make_table(srv)
        srv.stop()
    rng = random.Random(6)
    acked: list[int] = []
    rounds = [dict(kill_after_s=rng.uniform(0.2, 1.2)) for _ in range(4)]
    # A flush committed (its snapshot holds the watermark) and then the process died before the
    # WAL heard of it: replay must skip exactly those records.
    rounds.append(dict(kill_after_s=30, faults="after-flush-commit=crash"))
    for n, r in enumerate(rounds):
        acked += _kill_round(data_dir, wal, ns, (n + 1) * 100_000_000, **r)
        with serve(data_dir, "--write-buffer-ms", str(WINDOW_MS), "--tail-dir", str(wal)) as srv:
            # Replay flushed before serving: the lake alone holds every acked row, once.
            ids = lake_ids(data_dir, ns, "t")
            dupes = [i for i, n in Counter(ids).items() if n > 1]
            assert not dupes, f"duplicated after replay: {dupes[:10]}"
            missing = set(acked) - set(ids)
            assert not missing, f"acked but lost: {sorted(missing)[:10]}"
            with srv.connect() as conn:
                assert conn.execute(f"select count(*) from {ns}.t").fetchone() == (len(ids),)
            srv.stop()
    assert len(acked) > 50


def test_sigkill_without_a_tail_loses_at_most_the_unflushed_window(data_dir: Path) -> None:
    with serve(data_dir, "--write-buffer-ms", str(WINDOW_MS)) as srv:
        ns = make_table(srv)
        with srv.connect() as conn:
            conn.execute(f"insert into {ns}.t values (1, 0, 'flushed'), (2, 0, 'flushed')")
            time.sleep(WINDOW_MS / 1000 * 4)
            conn.execute(f"insert into {ns}.t values (3, 0, 'in the window')")
        srv.stop(signal.SIGKILL)
    with serve(data_dir, "--write-buffer-ms", str(WINDOW_MS)) as srv, srv.connect() as conn:
        ids = sorted(r[0] for r in conn.execute(f"select id from {ns}.t").fetchall())
    assert ids[:2] == [1, 2], "rows older than the window were in the lake"
    assert ids in ([1, 2], [1, 2, 3]), "the unflushed window may be lost, nothing is duplicated"


def test_update_and_delete_see_buffered_rows(data_dir: Path) -> None:
    with serve(data_dir, "--write-buffer-ms", "2000") as srv, srv.connect() as conn:
        ns = make_table(srv)
        conn.execute(f"insert into {ns}.t values (1, 0, 'a'), (2, 0, 'b'), (3, 0, 'c')")
        assert conn.execute(f"update {ns}.t set note = 'z' where id >= 2").statusmessage == "UPDATE 2"
        conn.execute(f"insert into {ns}.t values (4, 0, 'd')")
        assert conn.execute(f"delete from {ns}.t where id = 1").statusmessage == "DELETE 1"
        assert conn.execute(f"select id, note from {ns}.t order by id").fetchall() == [(2, "z"), (3, "z"), (4, "d")]
        # A transaction block reads lake snapshots: buffered rows are flushed before it pins them.
        conn.execute(f"insert into {ns}.t values (5, 0, 'e')")
        with conn.transaction():
            assert conn.execute(f"select count(*) from {ns}.t").fetchone() == (4,)
        # INSERT … SELECT reads the buffer too.
        conn.execute(f"insert into {ns}.t select id + 10, w, note from {ns}.t")
        assert conn.execute(f"select count(*) from {ns}.t").fetchone() == (8,)
        # Primary-key tables stay synchronous: the row is in the lake when the ack arrives.
        conn.execute(f"create table {ns}.k (id bigint primary key, v text)")
        conn.execute(f"insert into {ns}.k values (1, 'a')")
        assert len(snapshots(data_dir, ns, "k")) == 1
