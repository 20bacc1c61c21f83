"""Staging records (engine/staging.py): durable lines, torn tails, run locks, a closed stager."""

from __future__ import annotations

import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import trio

from icegres.engine import staging
from icegres.engine.staging import FileStaging, MemoryStaging, StagingClosed, dead_runs, read_record
from icegres.machines.staged import StagedFile


class _IO:
    """A FileIO over local paths, as pyiceberg's is for file:// locations."""

    def delete(self, path: str) -> None:
        Path(path).unlink()


def test_a_record_lists_each_file_announced_and_drops_a_torn_last_line(tmp_path: Path) -> None:
    store = FileStaging(tmp_path / "staged")
    stager = store.stager("t1")
    stager.announce(str(tmp_path / "a.parquet"), "ns.t", "u1", _IO())
    stager.announce(str(tmp_path / "b.parquet"), "ns.t", "u1", _IO())
    path = store.run / "t1.ndjson"
    with open(path, "a") as f:
        f.write('{"path": "c.parq')  # the crash came mid-append: its file was never created
    record = read_record(path)
    assert record.token == "t1"
    assert record.files == (StagedFile(str(tmp_path / "a.parquet"), "ns.t", "u1"),
                            StagedFile(str(tmp_path / "b.parquet"), "ns.t", "u1"))
    store.forget("t1")
    assert not path.exists()


def test_a_run_whose_process_holds_its_lock_is_running_and_a_dead_one_is_not(tmp_path: Path) -> None:
    root = tmp_path / "staged"
    mine = FileStaging(root)
    mine.stager("t1").announce("p", "ns.t", "u1", _IO())
    # Another process's run, alive while the child holds its lock; then dead.
    child = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import sys
        from pathlib import Path
        from icegres.engine.staging import FileStaging
        s = FileStaging(Path({str(root)!r}))
        s.stager("t2").announce("q", "ns.t", "u1", None)
        print(s.run.name, flush=True)
        sys.stdin.read()
    """)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        other = child.stdout.readline().strip()
        runs = {r.directory.name: r for r in dead_runs(root, mine.run)}
        assert set(runs) == {other} and runs[other].owner_running
        assert [f.path for f in runs[other].records[0].files] == ["q"]
    finally:
        child.stdin.close()
        child.wait(timeout=30)
    [run] = dead_runs(root, mine.run)
    assert not run.owner_running and run.lock is not None
    run.lock.close()


def test_a_run_its_server_removes_while_another_starts_is_skipped(tmp_path: Path, monkeypatch) -> None:
    """A server starting while another stops: the other's run directory goes between the
    listing and the lock (a crash at start-up before: FileNotFoundError, test_crash.py)."""
    from icegres.engine import staging

    root = tmp_path / "staged"
    mine = FileStaging(root)
    gone = FileStaging(root)
    gone.stager("t2").announce("q", "ns.t", "u1", None)
    kept = FileStaging(root)
    kept.stager("t3").announce("r", "ns.t", "u1", None)
    real_lock = staging._lock

    def lock_after_its_owner_finished(run: Path):  # noqa: ANN202
        if run == gone.run:
            shutil.rmtree(run)
        return real_lock(run)

    monkeypatch.setattr(staging, "_lock", lock_after_its_owner_finished)
    runs = dead_runs(root, mine.run)
    assert [r.directory for r in runs] == [kept.run]


def test_a_closed_stager_refuses_new_files_and_a_late_writer_deletes_its_own(tmp_path: Path) -> None:
    stager = MemoryStaging().stager("t1")
    late = tmp_path / "late.parquet"
    stager.announce(str(late), "ns.t", "u1", _IO())
    late.write_bytes(b"PAR1")  # being written when the statement was cancelled
    record, writers_left = stager.close()
    assert writers_left and [f.path for f in record.files] == [str(late)]
    with pytest.raises(StagingClosed):
        stager.announce(str(tmp_path / "next.parquet"), "ns.t", "u1", _IO())
    stager.finished(str(late))
    assert not late.exists() and not stager.store.records()


def test_a_transaction_that_ends_before_its_first_file_refuses_a_late_one() -> None:
    class Txn:
        stager = None

    txn = Txn()
    trio.run(staging.end_statement, txn)
    with staging.bound(txn, MemoryStaging()):
        stager = staging.current()
        assert stager is not None and stager.closed
        with pytest.raises(StagingClosed):
            stager.announce("p", "ns.t", "u1", _IO())
