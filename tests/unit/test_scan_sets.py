"""ScanSets: one scan over a snapshot's local files, and directories that never vanish under a
statement still able to read them."""

from __future__ import annotations

import gc
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pyarrow as pa
import pytest

from icegres.engine import scan_sets
from icegres.engine.catalog import Lakehouse
from icegres.engine.lake import Engine, SessionEnv
from icegres.engine.query import open_session
from icegres.engine.scan_sets import Retirements, ScanSets
from icegres.sql.statement import query

pytestmark = pytest.mark.unit


# --- the bookkeeping (pure) ------------------------------------------------------------------------


def test_a_retired_set_waits_for_the_statements_that_began_before_it() -> None:
    books = Retirements()
    books.begin(1)
    assert books.retire("x") == []  # statement 1 may still read x
    books.begin(2)  # began after x was retired: planned over x's successor
    assert books.end(2) == []
    assert books.end(1) == ["x"]


def test_a_set_retired_with_no_statement_running_goes_at_once() -> None:
    books = Retirements()
    assert books.retire("x") == ["x"]
    books.begin(1)
    books.end(1)
    assert books.retired == []


def test_sets_go_in_retirement_order_as_their_readers_finish() -> None:
    books = Retirements()
    books.begin(1)
    books.retire("a")
    books.begin(2)
    books.retire("b")
    assert books.end(2) == []  # 1 began before both
    books.begin(3)
    assert books.end(1) == ["a", "b"]
    assert books.end(3) == []


# --- the directories ---------------------------------------------------------------------------


def _removals_done() -> None:
    gc.collect()
    deadline = time.monotonic() + 5
    while not scan_sets._doomed.empty() and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.1)  # (the last one taken may still be being removed)


def _wait_gone(path: Path) -> None:
    deadline = time.monotonic() + 5
    while path.exists() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not path.exists()


def test_a_set_links_its_files_in_order_and_is_shared_while_held(tmp_path: Path) -> None:
    files = []
    for name in ("b.parquet", "a.parquet"):
        (tmp_path / name).write_bytes(b"x")
        files.append(str(tmp_path / name))
    sets = ScanSets()
    one = sets.acquire("meta-1", files)
    assert sorted(os.listdir(one.segments[0].path)) == ["000000-b.parquet", "000001-a.parquet"]
    assert all(os.path.samefile(one.segments[0].path / n, f) for n, f in zip(sorted(os.listdir(one.segments[0].path)), files, strict=True))
    assert not any(os.path.islink(one.segments[0].path / n) for n in os.listdir(one.segments[0].path))  # hard links on one filesystem
    assert sets.acquire("meta-1", files) is one  # a transaction pinning the mounted snapshot
    assert sets.acquire("meta-2", files) is not one
    path = one.segments[0].path
    del one
    gc.collect()
    _wait_gone(path)


def test_a_set_of_many_files_shares_segments_with_the_sets_before_it(tmp_path: Path) -> None:
    from icegres.engine.scan_sets import SEGMENTED_FROM

    files = []
    for i in range(SEGMENTED_FROM + 40):
        (tmp_path / f"{i}.parquet").write_bytes(b"x")
        files.append(str(tmp_path / f"{i}.parquet"))
    sets = ScanSets()
    held = [sets.acquire("meta-0", files[:SEGMENTED_FROM])]
    paths = {seg.path for seg in held[0].segments}
    for n in range(SEGMENTED_FROM + 1, len(files) + 1):  # one append per commit
        held.append(sets.acquire(f"meta-{n}", files[:n]))
        before, after = held[-2], held[-1]
        paths |= {seg.path for seg in after.segments}
        assert set(after.segments[:-2]) <= set(before.segments)  # only the last runs are new
        listed = [os.path.join(u, name) for u in after.urls for name in sorted(os.listdir(u))]
        assert len(listed) == n and all(os.path.samefile(p, f) for p, f in zip(listed, files[:n], strict=True))
        held[-2:-1] = []  # the previous snapshot let go
    assert len(held[-1].segments) <= 8
    held.clear()
    del before, after
    gc.collect()
    for path in paths:  # (every segment made, the ones dropped on the way too)
        _wait_gone(path)
    assert sets._starting == {}  # (the index of runs forgets the segments that went)


def test_a_set_links_symbolically_where_hard_links_are_refused(tmp_path: Path, monkeypatch) -> None:
    files = []
    for name in ("b.parquet", "a.parquet"):
        (tmp_path / name).write_bytes(b"x")
        files.append(str(tmp_path / name))
    tried: list[str] = []

    def cross_device(target, link):
        tried.append(target)
        raise OSError(18, "Invalid cross-device link")

    monkeypatch.setattr(scan_sets.os, "link", cross_device)
    sets = ScanSets()
    one = sets.acquire("meta", files)
    names = sorted(os.listdir(one.segments[0].path))
    assert [os.readlink(one.segments[0].path / n) for n in names] == files
    assert tried == files[:1]  # one refusal, not one per file


def test_a_retired_set_outlives_a_held_statement(tmp_path: Path) -> None:
    (tmp_path / "f.parquet").write_bytes(b"x")
    sets = ScanSets()
    hold = sets.hold()
    mounted = [sets.acquire("meta", [str(tmp_path / "f.parquet")])]
    path = mounted[0].segments[0].path
    sets.retire(mounted)
    del mounted
    gc.collect()
    time.sleep(0.05)
    assert path.exists()  # the statement began before the retirement
    del hold
    gc.collect()
    _wait_gone(path)


def test_a_hold_collected_inside_the_books_lock_does_not_deadlock() -> None:
    """The cycle collector may finalize a hold in the middle of the sets' own locked code."""
    sets = ScanSets()

    def collect_while_locked() -> None:
        cycle: list[object] = [sets.hold()]
        cycle.append(cycle)
        del cycle
        with sets._lock:
            gc.collect()  # finalizes the hold: ends it under the lock this thread holds

    worker = threading.Thread(target=collect_while_locked, daemon=True)
    worker.start()
    worker.join(5)
    assert not worker.is_alive()
    assert sets._books.holds == {}


def test_roots_of_dead_processes_are_removed(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(scan_sets.tempfile, "gettempdir", lambda: str(tmp_path))
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True, check=True).stdout.strip()
    orphan = tmp_path / f"icegres-scan-{dead}-abc"
    (orphan / "0").mkdir(parents=True)
    live = tmp_path / f"icegres-scan-{os.getpid()}-def"
    live.mkdir()
    monkeypatch.setattr(scan_sets.tempfile, "tempdir", str(tmp_path))
    (tmp_path / "f.parquet").write_bytes(b"x")
    ScanSets().acquire("meta", [str(tmp_path / "f.parquet")])
    assert not orphan.exists()
    assert live.exists()


# --- through the engine ----------------------------------------------------------------------------


SCHEMA = pa.schema([pa.field("id", pa.int64()), pa.field("v", pa.string())])


@pytest.fixture
def engine(tmp_path: Path):
    lh = Lakehouse.embedded(tmp_path / "lake")
    lh.create_namespace_if_missing("demo")
    t = lh.catalog.create_table(("demo", "t"), schema=SCHEMA)
    for k in range(4):
        t.append(pa.table({"id": list(range(k * 10, k * 10 + 10)), "v": [f"f{k}"] * 10}, schema=SCHEMA))
    engine = Engine(lh)
    engine.refresh()
    return engine, lh


def test_a_table_of_several_local_files_is_one_scan(engine) -> None:
    eng, _ = engine
    q = open_session(eng, SessionEnv("icegres", "icegres", 1, {"search_path": "demo"}))
    plan = q.plan(query("select count(*), sum(id) from demo.t")).df.execution_plan().display_indent()
    assert plan.count("DataSourceExec") == 1
    assert plan.count(".parquet") >= 4
    assert q.plan(query("select count(*), sum(id) from demo.t")).df.to_arrow_table().to_pylist() == [
        {"count(*)": 40, "sum(demo.t.id)": sum(range(40))}]


def test_a_running_statement_reads_on_while_commits_remount_the_table(engine) -> None:
    eng, lh = engine
    q = open_session(eng, SessionEnv("icegres", "icegres", 1, {"search_path": "demo"}))
    # One batch per file at most: the stream opens the later files only as it is pulled.
    eng.master.sql("set datafusion.execution.batch_size = 10")
    schema, stream = q.start(query("select id from demo.t"), None)
    first = next(iter(stream))
    _removals_done()  # (directories earlier tests let go are removed on the remover's thread)
    before = {p for p in Path(scan_sets.tempfile.gettempdir()).glob(f"icegres-scan-{os.getpid()}-*/*")}
    t = lh.catalog.load_table(("demo", "t"))
    for k in range(4, 7):  # three commits, each a re-mount retiring the previous set
        t.append(pa.table({"id": [k * 10], "v": ["new"]}, schema=SCHEMA))
        eng.refresh()
        t = lh.catalog.load_table(("demo", "t"))
    gc.collect()
    assert all(p.exists() for p in before)
    ids = sorted([*first.to_pyarrow().column(0).to_pylist(),
                  *(i for b in stream for i in b.to_pyarrow().column(0).to_pylist())])
    assert ids == list(range(40))  # the snapshot it began on, every file of it
    del stream
    gc.collect()
    for p in before:
        _wait_gone(p)


def _first_value(q, sql: str):
    _, stream = q.start(query(sql), None)
    return next(b.to_pyarrow().column(0)[0].as_py() for b in stream)


def test_a_transaction_reads_its_pinned_snapshot_after_remounts(engine) -> None:
    from icegres.engine.txn import new_transaction

    eng, lh = engine
    q = open_session(eng, SessionEnv("icegres", "icegres", 1, {"search_path": "demo"}))
    q.txn = new_transaction(None, "repeatable read")
    assert _first_value(q, "select count(*) from demo.t") == 40
    t = lh.catalog.load_table(("demo", "t"))
    for k in range(4, 7):
        t.append(pa.table({"id": [k * 10], "v": ["new"]}, schema=SCHEMA))
        eng.refresh()
        t = lh.catalog.load_table(("demo", "t"))
    gc.collect()
    time.sleep(0.05)
    assert _first_value(q, "select sum(id) from demo.t") == sum(range(40))  # still its snapshot
    q.end_transaction()
    assert _first_value(q, "select count(*) from demo.t") == 43


def test_statements_planned_outside_a_session_hold_too(engine) -> None:
    """ibis plans on `Engine.new_context` directly: its DataFrames carry a hold as well."""
    eng, _ = engine
    df = eng.new_context("public")[0].sql("select count(*) from demo.t")
    assert df.hold is not None
    assert eng.scan_sets._books.holds  # begun, and ends with the DataFrame
    del df
    gc.collect()
    assert not eng.scan_sets._books.holds


def test_a_statement_outlives_the_private_context_it_was_planned_in(engine) -> None:
    """A transaction's (or the write buffer's) context holds the sets of its snapshots; a stream
    planned there keeps them after the context is dropped."""
    from icegres.engine.txn import new_transaction

    eng, lh = engine
    t = lh.catalog.load_table(("demo", "t"))
    for k in range(4, 16):  # 16 files: the stream opens the later ones only as it is pulled
        t.append(pa.table({"id": list(range(k * 10, k * 10 + 10)), "v": [f"f{k}"] * 10}, schema=SCHEMA))
    eng.refresh()
    eng.master.sql("set datafusion.execution.batch_size = 10")
    q = open_session(eng, SessionEnv("icegres", "icegres", 1, {"search_path": "demo"}))
    q.txn = new_transaction(None, "repeatable read")
    assert _first_value(q, "select count(*) from demo.t") == 160  # pins the 16-file snapshot
    t = lh.catalog.load_table(("demo", "t"))
    t.append(pa.table({"id": [999], "v": ["new"]}, schema=SCHEMA))
    eng.refresh()  # the engine's set of the pinned snapshot is retired and goes
    gc.collect()
    _, stream = q.start(query("select id from demo.t"), None)  # read through the private context's own set
    first = next(iter(stream))
    q.end_transaction()  # drops that context
    gc.collect()
    time.sleep(0.05)
    ids = sorted([*first.to_pyarrow().column(0).to_pylist(),
                  *(i for b in stream for i in b.to_pyarrow().column(0).to_pylist())])
    assert ids == list(range(160))


def test_a_table_is_still_read_when_no_scan_directory_can_be_made(tmp_path: Path, monkeypatch) -> None:
    made: list[Path] = []

    def refuse(target, link):
        made.append(Path(link).parent)
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(scan_sets.os, "symlink", refuse)
    monkeypatch.setattr(scan_sets.os, "link", refuse)
    lh = Lakehouse.embedded(tmp_path / "lake")
    lh.create_namespace_if_missing("demo")
    t = lh.catalog.create_table(("demo", "t"), schema=SCHEMA)
    for k in range(3):
        t.append(pa.table({"id": [k], "v": ["x"]}, schema=SCHEMA))
    eng = Engine(lh)
    eng.refresh()
    q = open_session(eng, SessionEnv("icegres", "icegres", 1, {"search_path": "demo"}))
    planned = q.plan(query("select sum(id) from demo.t"))
    assert planned.df.execution_plan().display_indent().count("DataSourceExec") == 3  # a scan per file
    assert planned.df.to_arrow_table().column(0).to_pylist() == [3]
    assert made and not any(p.exists() for p in made)  # the half-made directory is gone
