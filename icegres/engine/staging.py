"""Staging records: which data files a write attempt may have written, durable before each file.

A transaction that writes data files gets a `Stager` on its first file. Before pyiceberg (or the
position-delete writer) creates a file, the stager appends the file's path, table and table uuid
to the transaction's record and flushes it to the kernel, so that a process killed at any
instant leaves every file it created named in a record. (Not fsynced: a machine crash may lose
the last lines, and their files are then the orphan GC's, as every staged file was before.) When the statement ends the staged-file machine
(`machines/staged.py`) decides from its verdict what to delete; a record a dead process left is
recovered at the next start (`recover_staged`), by what the catalog shows.

Layout: `<data dir>/staged/<run>/<token>.ndjson`, one directory per server run holding an
exclusive `flock` on its `lock` file for the process's life. Recovery acts only on the runs whose
lock it can take: their process is gone (a second server started on the same data directory
must not delete a live one's files mid-commit). A server without a data directory (an engine made
in-process) keeps records in memory: the same protocol, nothing to recover after a crash.

Why the writer thread deletes a file it finishes after its statement ended: a cancelled statement
(57014) abandons its worker thread (pgwire's `abandon_on_cancel`), which may be inside pyiceberg
writing a file when the statement's cleanup runs. The stager is closed then; a file still being
written is deleted by its writer as it closes it, and no new one may start.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from icegres.machines.staged import StagedFile, StagingRecord, TableSeen, Verdict

log = logging.getLogger("icegres.staging")


class StagingClosed(Exception):
    """The statement that owns this stager has ended: no new file may be staged for it."""


# --- stores --------------------------------------------------------------------------------------


class MemoryStaging:
    """Records of an engine without a data directory."""

    durable = False

    def __init__(self) -> None:
        self._records: dict[str, list[StagedFile]] = {}
        self._lock = threading.Lock()

    def stager(self, token: str | None = None) -> Stager:
        return Stager(self, token or uuid.uuid4().hex)

    def append(self, token: str, staged: StagedFile) -> None:
        with self._lock:
            self._records.setdefault(token, []).append(staged)

    def forget(self, token: str) -> None:
        with self._lock:
            self._records.pop(token, None)

    def records(self) -> list[StagingRecord]:
        with self._lock:
            return [StagingRecord(t, tuple(files)) for t, files in self._records.items()]


class FileStaging(MemoryStaging):
    """Records as files under `root/<run>/` (blocking: call from worker threads)."""

    durable = True

    def __init__(self, root: Path) -> None:
        super().__init__()
        self.root = root
        self.run = root / uuid.uuid4().hex
        self.run.mkdir(parents=True, exist_ok=True)
        self._lock_file = _lock(self.run)
        if self._lock_file is None:
            raise RuntimeError(f"could not lock the new staging directory {self.run}")
        _sync_directory(root)
        self._open: dict[str, Any] = {}

    def append(self, token: str, staged: StagedFile) -> None:
        line = json.dumps({"path": staged.path, "table": staged.table, "uuid": staged.table_uuid}) + "\n"
        with self._lock:
            f = self._open.get(token)
            if f is None:
                f = self._open[token] = open(self.run / f"{token}.ndjson", "a", encoding="utf-8")  # noqa: SIM115
            f.write(line)
            # In the kernel's hands before the file is created: a killed process never loses it.
            # Not fsynced: that cost ~9 ms a statement here (a 1-row INSERT's commit is ~70 ms),
            # and a record lost to a machine crash is never a danger, only a file left for the
            # orphan GC, as before records existed.
            f.flush()

    def forget(self, token: str) -> None:
        with self._lock:
            f = self._open.pop(token, None)
        if f is not None:
            f.close()
        # (no directory sync: a record that survives a crash is recovered, at the cost of a look)
        (self.run / f"{token}.ndjson").unlink(missing_ok=True)

    def records(self) -> list[StagingRecord]:
        return [read_record(p) for p in sorted(self.run.glob("*.ndjson"))]


def read_record(path: Path) -> StagingRecord:
    """A record file; a torn last line (the crash came mid-append, before its file existed) is dropped."""
    files = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            doc = json.loads(line)
        except ValueError:
            continue
        files.append(StagedFile(doc["path"], doc["table"], doc["uuid"]))
    return StagingRecord(path.stem, tuple(files))


@dataclass(frozen=True)
class DeadRun:
    """A run directory found at start-up: its records, and whether its process still holds it."""

    directory: Path
    owner_running: bool
    records: tuple[StagingRecord, ...]
    lock: Any = None  # the open lock file while this process holds it


def dead_runs(root: Path, own: Path | None) -> list[DeadRun]:
    """The other run directories under `root`. Blocking."""
    out = []
    if not root.is_dir():
        return out
    for run in sorted(p for p in root.iterdir() if p.is_dir() and p != own):
        held = None
        try:
            held = _lock(run)
            records = tuple(read_record(p) for p in sorted(run.glob("*.ndjson")))
        except FileNotFoundError:
            # Its server finished it between the listing and here (a server starting while
            # another stops: test_crash.py's turns); nothing of it is left to recover.
            if held is not None:
                held.close()
            continue
        out.append(DeadRun(run, held is None, records, held))
    return out


def _lock(run: Path) -> Any:
    import fcntl

    f = open(run / "lock", "a+")  # noqa: SIM115
    try:
        fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        f.close()
        return None
    return f


def _sync_directory(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


# --- one transaction's stager --------------------------------------------------------------------


@dataclass(eq=False)
class Stager:
    store: MemoryStaging
    token: str
    files: list[StagedFile] = field(default_factory=list)
    ios: dict[str, Any] = field(default_factory=dict)  # path -> the FileIO it is written with
    in_flight: set[str] = field(default_factory=set)  # paths being written
    closed: bool = False
    publishing: bool = False  # a commit of these files may have been sent
    verdict: Verdict | None = None  # the commit machine's, once it has one
    published: frozenset[str] = frozenset()  # the files the committed request held
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def announce(self, path: str, table: str, table_uuid: str, io: Any) -> None:
        """Before creating `path`: record it durably. Raises StagingClosed after the statement ended."""
        staged = StagedFile(path, table, table_uuid)
        with self._lock:
            if self.closed:
                raise StagingClosed(f"statement ended: not writing {path}")
            self.in_flight.add(path)
            self.ios[path] = io
        try:
            self.store.append(self.token, staged)
        except BaseException:
            with self._lock:
                self.in_flight.discard(path)
            raise
        with self._lock:
            self.files.append(staged)

    def finished(self, path: str) -> None:
        """After `path` was closed (written or not). Deletes it if the statement ended meanwhile."""
        with self._lock:
            late = self.closed and path in self.in_flight
            self.in_flight.discard(path)
            last = late and not self.in_flight
        if late:
            delete_file(self.ios[path], path)
            if last:
                self.store.forget(self.token)

    def settle(self, phase: str, published: frozenset[str]) -> None:
        """The commit machine's verdict (its terminal phase's value) on the request of these files."""
        self.verdict = Verdict(phase)
        self.published = frozenset(published) if self.verdict is Verdict.COMMITTED else frozenset()

    def close(self) -> tuple[StagingRecord, bool]:
        """No more files: the record as it stands, and whether a writer is still in flight (it
        deletes its own file as it finishes, and the last one forgets the record)."""
        with self._lock:
            self.closed = True
            return StagingRecord(self.token, tuple(self.files)), bool(self.in_flight)


# --- binding a transaction's stager to the worker thread that writes its files -------------------

_thread = threading.local()
_writing: dict[str, tuple[Stager, str, str, Any]] = {}  # write uuid -> (stager, table, uuid, io)
_ended: dict[str, tuple[float, tuple[Stager, str, str, Any]]] = {}  # failed writes' (when, registration)
_writing_lock = threading.Lock()


@contextmanager
def bound(txn: Any, store: MemoryStaging | None) -> Iterator[None]:
    """While a worker thread runs a transaction's work: the files it writes are staged for `txn`."""
    previous = getattr(_thread, "binding", None)
    _thread.binding = (txn, store) if txn is not None and store is not None else None
    try:
        yield
    finally:
        _thread.binding = previous


_made_lock = threading.Lock()


def current() -> Stager | None:
    """The stager of the transaction this thread works for (made on its first file; a closed
    one once the transaction ended, so that an abandoned thread stages nothing more)."""
    binding = getattr(_thread, "binding", None)
    if binding is None:
        return None
    txn, store = binding
    with _made_lock:
        if txn.stager is None:
            txn.stager = store.stager()
        return txn.stager


def run_bound(txn: Any, store: MemoryStaging | None, fn: Any, *args: Any) -> Any:
    """`fn(*args)` with the files it writes staged for `txn` (whatever the thread was bound to)."""
    with bound(txn, store):
        return fn(*args)


def keeping_binding(fn: Any) -> Any:
    """`fn`, bound when called to the transaction this thread works for now: for work a later
    call may do in another thread (a block's pending rows, written when a query reads them)."""
    binding = getattr(_thread, "binding", None)
    if binding is None:
        return fn
    return functools.partial(run_bound, *binding, fn)


@contextmanager
def writing(table: Any) -> Iterator[uuid.UUID | None]:
    """Around one pyiceberg write of `table`'s data files from a bound thread: the write uuid to
    name them with, so that the Parquet writer (in pyiceberg's own pool threads) finds the stager
    to announce each file to (`before_create`). None: no stager (maintenance, an unbound thread)."""
    stager = current()
    if stager is None or not stageable(table):
        yield None
        return
    write_uuid = uuid.uuid4()
    key = str(write_uuid)
    with _writing_lock:
        _writing[key] = (stager, table_name(table), str(table.metadata.table_uuid), table.io)
    try:
        yield write_uuid
    except BaseException:
        # pyiceberg writes a statement's files in its pool's threads, all submitted at once:
        # when one fails (StagingClosed after a cancel, a full disk) the call returns while
        # others are still starting theirs. They must still find the stager, which refuses them
        # once the statement has ended, or records them for its end to delete: forgotten here,
        # they were written unrecorded (a cancelled 20-file INSERT left 5-20 files behind).
        with _writing_lock:
            _ended[key] = (time.monotonic(), _writing.pop(key))
            horizon = time.monotonic() - _ENDED_KEPT_S
            for stale in [k for k, (at, _) in _ended.items() if at < horizon]:
                del _ended[stale]
        raise
    else:
        with _writing_lock:
            _writing.pop(key, None)


_ENDED_KEPT_S = 600.0  # far longer than a pool thread takes to reach its file's creation


def _registration(path: str) -> tuple[Stager, str, str, Any] | None:
    stem = path.rsplit("/", 1)[-1].rsplit(".", 1)[0]
    if len(stem) < 36:
        return None
    with _writing_lock:
        found = _writing.get(stem[-36:])
        if found is None and (ended := _ended.get(stem[-36:])) is not None:
            found = ended[1]
        return found


def before_create(path: str) -> None:
    """pyiceberg is about to create data file `path` (any thread)."""
    found = _registration(path)
    if found is not None:
        stager, table, table_uuid, io = found
        stager.announce(path, table, table_uuid, io)


def after_close(path: str) -> None:
    found = _registration(path)
    if found is not None:
        found[0].finished(path)


def stageable(table: Any) -> bool:
    """Whether `table`'s files are staged: a lake table's. A temporary table's files live in its
    session's directory, which dies with the process (temp_tables.py)."""
    return table.name()[0] != "pg_temp"


def table_name(table: Any) -> str:
    """The machine's name of a pyiceberg table: its namespace and name joined by dots."""
    return ".".join(table.name())


def delete_file(io: Any, path: str) -> bool:
    try:
        io.delete(path)
    except FileNotFoundError:
        return True
    except Exception:
        log.warning("could not delete staged file %s", path, exc_info=True)
        return False
    return True


# --- worlds of the staged-file machine -----------------------------------------------------------


class StatementWorld:
    """A statement's own end: deletes through the FileIO each file was written with."""

    def __init__(self, stager: Stager) -> None:
        self.stager = stager

    def inspect(self, record: StagingRecord, tables: tuple[str, ...]) -> tuple[TableSeen, ...]:
        raise AssertionError("a statement's end decides by its verdict, without inspecting")

    def delete_files(self, files: frozenset[str]) -> frozenset[str]:
        return frozenset(p for p in files if not delete_file(self.stager.ios[p], p))

    def forget(self, token: str) -> None:
        self.stager.store.forget(token)


# --- the two ways in -----------------------------------------------------------------------------


async def end_statement(txn: Any) -> None:
    """The transaction `txn` ended (committed, failed, rolled back or cancelled): its stager
    closes and the staged-file machine deletes what the commit's verdict allows (`Stager.settle`;
    none: nothing was published). Idempotent. A stager whose commit was being published and got
    no verdict (the statement failed in between) ends as UNKNOWN: its files may be in a landed
    commit, and only the next start's inspection may decide."""
    from icegres.machines.drivers.staged import run_statement_end

    with _made_lock:
        stager = txn.stager
        if stager is None:
            # No file yet; an abandoned thread of a cancelled statement may still start one: it
            # is refused (StagingClosed).
            txn.stager = Stager(MemoryStaging(), "ended", closed=True)
            return
    if stager.closed:
        return
    verdict = stager.verdict
    if verdict is None:
        verdict = Verdict.UNKNOWN if stager.publishing else Verdict.NONE
    published = stager.published
    record, writers_left = stager.close()
    if verdict is Verdict.UNKNOWN:
        # (the record stays for the next start; nothing else to do now)
        log.warning("commit outcome of %s unknown: its %d staged files stay for the next start's recovery",
                    stager.token, len(record.files))
        return
    if writers_left:
        # A cancelled statement's abandoned thread is still writing: the files recorded so far go
        # now, and each writer deletes its own file as it finishes, the last forgetting the record.
        record = StagingRecord(record.token, tuple(f for f in record.files if f.path not in stager.in_flight))
        world = _KeepRecord(stager)
    else:
        world = StatementWorld(stager)
    state = await run_statement_end(record, verdict, published, world)
    if state.reason:
        log.warning("staged files of %s: %s", stager.token, state.reason)


class _KeepRecord(StatementWorld):
    """A statement end whose last writer forgets the record (`Stager.finished`)."""

    def forget(self, token: str) -> None:
        with self.stager._lock:
            done = not self.stager.in_flight
        if done:  # (they all finished meanwhile)
            self.stager.store.forget(token)
