"""Heavy statements run in execution processes that a cancel kills, and at most
`--max-concurrent-queries` of them at once (admission control).

Why a process: a DataFusion operator that computes long from memory does not yield to tokio, and
dropping its stream aborts its tasks only at their next yield. The nested-loop self-join of
demo.trips (`a.fare < b.fare`) answered its 57014 within a second, but its partial aggregate
kept one core busy for as long as we measured (> 120 s), and the next `select 3` took 182 s
(docs/architecture.md, "Cancelling a runaway", has the options measured). DataFusion 55 gives
Python no way to interrupt it; a process can be killed. So a plan that may compute for long
(batches.may_run_long: a join, an unnest, a table function, an aggregate, sort or window over
more than 4M rows) is planned here and its physical plan (`ExecutionPlan.to_bytes`, ~1 ms; Python
UDFs and in-memory tables travel inside it) sent to an idle process of the pool, which executes
it and streams Arrow IPC back over a socket pair. A cancel (PullScope) kills the process: its
CPU and memory are the kernel's again at once. A replacement starts in the background.

Admission: each process runs one statement, and there are at most `slots` processes, so the
slots are the admission control. A statement that finds none free raises `Queued` before it has
done anything but plan; `jobs.cancellable_job` waits for a slot on the caller's event loop
(trio's or asyncio's: no worker thread waits, so light statements keep every query thread) under
the statement's own cancel scope, so statement_timeout counts the wait, then runs the job again
with the slot reserved for it. Light statements (streaming plans, small aggregates) run in the
server process as before: their work is bounded, and queueing a point lookup behind a runaway is
what admission control is for avoiding.

A plan that names object-store files (s3://) is preceded by the server's object-store settings
(`mounts.ObjectStores.configs`: endpoint, region, credentials, vended ones included), from which
the process registers the same stores; they go over the process's private socket, never to a log.

A plan whose physical form DataFusion cannot serialise (a recursive CTE's RecursiveQueryExec) goes
as its optimized logical plan, which the process plans again with the server's settings. Some
plans run in the server process as before: those neither codec takes, those over PLAN_BYTES_MAX
or known to carry more than INLINE_BYTES_MAX of in-memory rows (a big literal's value), and
catalog queries (pg_catalog, information_schema: small in-memory tables, and clients send
many; query.py decides). docs/limitations.md lists them.
"""

from __future__ import annotations

import collections
import json
import logging
import os
import re
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from icegres.engine.batches import PullCancelled, current_scope
from icegres.engine.df_config import SETTINGS
from icegres.engine.executor_main import BATCH, DONE, ERROR, LOGICAL, PLAN, SCHEMA, STORES

log = logging.getLogger("icegres.engine")


# A plan larger than this (in-memory tables travel inside it: a transaction's buffered rows, a
# temporary table) runs in the server rather than be copied to a process.
PLAN_BYTES_MAX = 16 << 20
# A plan whose in-memory tables are known to hold more than this runs in the server without being
# serialised at all: `ExecutionPlan.to_bytes` encodes them holding the GIL, ~28 ms per MB (a 50 MB
# literal's one-row table stalled every other session 1.1 s before PLAN_BYTES_MAX sent it back).
INLINE_BYTES_MAX = 1 << 20
# A killed process is replaced this long after: its replacement's start (importing DataFusion,
# ~0.5 s of CPU) would otherwise land in the very second the cancel is to leave quiet.
REPLACE_DELAY_S = 2.0
# The server starts its processes this long after it serves: their imports, ~1 s of CPU each,
# took a 2-core machine's cores from the server's own start-up (3.1-3.4 s to serve with them
# alongside, 2.7-2.9 s without). A heavy statement sooner than that starts one itself.
PRESTART_DELAY_S = 2.0


# DataFusion 55's plan serialisation drops a table function's empty projection: `count(*)` over
# range() or generate_series() arrives with a scan whose batches have a column its schema lacks
# ("number of columns(1) must match number of fields(0) in schema"). Such plans run here.
_EMPTY_TABLE_FUNCTION_SCAN = re.compile(r"TableScan: \w+\(\) projection=\[\]")


# DataFusion 55 serialises a scan that reads `file_row_index()` (position deletes applied,
# position_deletes.py) but cannot read it back ("Column index 1 out of bounds for projected
# expressions"): such plans run here.
_READS_ROW_POSITIONS = b"file_row_index"


def _loses_its_projection(df: Any) -> bool:
    return bool(_EMPTY_TABLE_FUNCTION_SCAN.search(df.optimized_logical_plan().display_indent()))


def _logical(df: Any) -> bytes | None:
    """The LOGICAL message for `df`, or None if its optimized logical plan does not serialise
    either. DataFusion 55's physical codec has no RecursiveQueryExec, but its logical one has
    RecursiveQuery, and a scan there is the listing table itself (files, schema, format), so the
    process plans it again, with the server's settings (df_config.SETTINGS, in its argv), and
    reads the same files the same way. Python UDFs travel inside both codecs."""
    try:
        return LOGICAL + df.optimized_logical_plan().to_bytes()
    except Exception:  # noqa: BLE001 - a node neither codec has
        return None


class Queued(BaseException):  # noqa: N818 - a signal to the job runner, not an error
    """No execution slot is free: the job is to wait for one (`Executors.wait_turn`) and run
    again. A BaseException so that no `except Exception` on its way up takes it for a failure."""

    def __init__(self, executors: Executors) -> None:
        super().__init__("waiting for an execution slot")
        self.executors = executors


class Slot:
    """A slot handed to a queued job by `wait_turn`; released if the job does not use it."""

    def __init__(self) -> None:
        self.used = False


class _Worker:
    def __init__(self, pool_bytes: int, spill: Path) -> None:
        parent, child = socket.socketpair()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "icegres.engine.executor_main", str(child.fileno()), str(pool_bytes), str(spill),
             json.dumps(SETTINGS)],
            pass_fds=(child.fileno(),), stdin=subprocess.DEVNULL, close_fds=True)
        child.close()
        self.conn = Connection(parent.detach())
        self.ready = False

    def wait_ready(self) -> None:
        if not self.ready:
            if self.conn.recv_bytes() != DONE:
                raise RuntimeError("execution process failed to start")
            self.ready = True

    def kill(self) -> None:
        """SIGKILL, from any thread; reaped in the background (a process freeing gigabytes can
        take a while to go). The connection is left to the garbage collector: closing it under
        a thread blocked in recv could hand its fd number to another file while that thread
        still reads it; the kill ends the recv (end of file)."""
        try:
            self.proc.kill()
        except OSError:
            pass
        threading.Thread(target=self.proc.wait, daemon=True, name="icegres-executor-reap").start()


class Executors:
    """The pool of execution processes and its admission slots (module doc)."""

    def __init__(self, slots: int, pool_bytes: int, spill: Path,
                 stores: Callable[[], dict[str, dict[str, Any]]] | None = None) -> None:
        """`slots` processes, each with a memory pool of `pool_bytes`, spilling under `spill`;
        `stores()`: the object stores a plan over s3:// files needs (None: such plans run here)."""
        self.slots = slots
        self._stores = stores
        self._pool_bytes = pool_bytes
        self._spill = spill
        self._lock = threading.Lock()
        self._idle: list[_Worker] = []
        self._running = 0  # slots taken: statements running, and slots handed to queued jobs
        self._waiters: collections.deque[_Waiter] = collections.deque()
        self._closed = False
        self._ready_told = False

    def prestart(self, delay_s: float = PRESTART_DELAY_S) -> None:
        """Start the processes `delay_s` from now, in the background (each imports DataFusion: ~1 s
        of CPU)."""
        for _ in range(self.slots):
            self._replace(delay_s)

    def _replace(self, delay_s: float = REPLACE_DELAY_S) -> None:
        """One more idle process, started `delay_s` from now in the background; a statement that
        needs one sooner starts its own (`start`)."""
        def start() -> None:
            with self._lock:
                if self._closed or len(self._idle) >= self.slots:
                    return
            worker = self._spawn()
            with self._lock:
                if not self._closed and len(self._idle) < self.slots:
                    self._idle.append(worker)
                    self._tell_ready()
                    return
            worker.kill()

        timer = threading.Timer(delay_s, start)
        timer.daemon = True
        timer.name = "icegres-executor-start"
        timer.start()

    def _spawn(self) -> _Worker:
        self._spill.mkdir(parents=True, exist_ok=True)
        worker = _Worker(self._pool_bytes, self._spill)
        worker.wait_ready()
        return worker

    # --- admission ----------------------------------------------------------------------------

    def start(self, df: Any, on_first: Any = None, inline_bytes: int = 0) -> RemoteBatches | None:
        """In a worker thread: `df`'s plan running in an execution process, or None where it
        must run here (module doc). Raises Queued when no slot is free. `on_first` is told how
        many seconds the first pull took, if it completed; `inline_bytes` is what the caller
        knows its in-memory tables hold (its big literals' values)."""
        if inline_bytes > INLINE_BYTES_MAX or _loses_its_projection(df):
            return None
        try:
            plan = PLAN + df.execution_plan().to_bytes()
        except Exception:  # noqa: BLE001 - a node DataFusion's physical codec lacks (a recursive CTE's)
            plan = _logical(df)
            if plan is None:
                return None
        if _READS_ROW_POSITIONS in plan:
            return None
        remote_files = b"s3://" in plan
        if len(plan) > PLAN_BYTES_MAX or (remote_files and self._stores is None):
            return None
        stores = json.dumps(self._stores(), sort_keys=True).encode() if remote_files and self._stores else None
        scope = current_scope()
        slot = getattr(scope, "slot", None)
        with self._lock:
            if slot is not None and not slot.used:
                slot.used = True  # counted in _running when it was handed over
            elif self._running < self.slots and not self._waiters:
                self._running += 1
            else:
                raise Queued(self)
            worker = self._idle.pop() if self._idle else None
        try:
            if worker is None:
                worker = self._spawn()
            if stores is not None:
                worker.conn.send_bytes(STORES + stores)
            worker.conn.send_bytes(plan)
        except BaseException:
            if worker is not None:
                worker.kill()
            self._release(replace=True)
            raise
        return RemoteBatches(self, worker, on_first)

    def _release(self, worker: _Worker | None = None, *, replace: bool = False) -> None:
        """A statement's slot back: to the first queued job, else free; its process back to the
        idle list, or killed and replaced."""
        if replace:
            self._replace()
        with self._lock:
            if worker is not None:
                self._idle.append(worker)
                self._tell_ready()
            while self._waiters:
                waiter = self._waiters.popleft()
                if waiter.grant():
                    return
            self._running -= 1

    def _tell_ready(self) -> None:
        """The first time every process is started and idle, say so (under the lock): from then
        on no heavy statement waits for one to start, and the server's memory is its idle size."""
        if not self._ready_told and len(self._idle) >= self.slots:
            self._ready_told = True
            log.info("%d execution processes ready", len(self._idle))

    def release_unused(self, slot: Slot) -> None:
        """A job ran again with `slot` and did not take it (its plan ran here after all)."""
        if not slot.used:
            slot.used = True
            self._release()

    async def wait_turn(self) -> Slot:
        """On the caller's event loop (trio or asyncio): wait until a slot is handed over.
        Cancellable; a slot handed over just as the caller is cancelled is passed on."""
        waiter = _Waiter()
        with self._lock:
            if self._running < self.slots and not self._waiters:
                self._running += 1
                return waiter.slot
            self._waiters.append(waiter)
        try:
            await waiter.wait()
        except BaseException:
            with self._lock:
                granted = not waiter.cancel()
                if not granted:
                    self._waiters.remove(waiter)
            if granted:
                self.release_unused(waiter.slot)
            raise
        return waiter.slot

    def stats(self) -> tuple[int, int]:
        """(statements running or about to, statements queued)."""
        with self._lock:
            return self._running, len(self._waiters)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
        for worker in idle:
            worker.kill()


class _Waiter:
    """A queued job's wake-up, from whichever thread releases a slot, on its own event loop."""

    def __init__(self) -> None:
        import sniffio

        self.slot = Slot()
        self._state = "waiting"  # -> "granted" | "cancelled", under Executors._lock
        if sniffio.current_async_library() == "trio":
            import trio

            self._event: Any = trio.Event()
            token = trio.lowlevel.current_trio_token()
            self._wake = lambda: token.run_sync_soon(self._event.set)
        else:
            import asyncio

            loop = asyncio.get_running_loop()
            self._event = asyncio.Event()
            self._wake = lambda: loop.call_soon_threadsafe(self._event.set)

    def grant(self) -> bool:
        if self._state != "waiting":
            return False
        self._state = "granted"
        self._wake()
        return True

    def cancel(self) -> bool:
        """False if the slot was granted already (the caller must pass it on)."""
        if self._state == "granted":
            return False
        self._state = "cancelled"
        return True

    async def wait(self) -> None:
        await self._event.wait()


class RemoteBatches:
    """A plan's batches as its execution process sends them (pyarrow RecordBatches). Every pull
    ends at once when the statement is cancelled: the process is killed."""

    def __init__(self, executors: Executors, worker: _Worker, on_first: Any = None) -> None:
        self._executors = executors
        self._worker: _Worker | None = worker
        self._schema: Any = None
        self._on_first = on_first
        self._started = time.perf_counter()

    def __iter__(self) -> RemoteBatches:
        return self

    def __next__(self) -> Any:
        import pyarrow as pa

        worker = self._worker
        if worker is None:
            raise StopIteration
        scope = current_scope()
        if scope is not None and not scope.on_cancel(self.kill):
            self.kill()
            raise PullCancelled("the query was cancelled")
        try:
            while True:
                try:
                    message = worker.conn.recv_bytes()
                except (EOFError, OSError):
                    self.kill()
                    raise PullCancelled("the query was cancelled") from None
                kind, body = message[:1], memoryview(message)[1:]
                if kind == BATCH:
                    self._first_pulled()
                    return pa.ipc.read_record_batch(pa.py_buffer(body), self._schema)
                if kind == SCHEMA:
                    self._schema = pa.ipc.read_schema(pa.py_buffer(body))
                    continue
                self._finish(worker)
                if kind == DONE:
                    self._first_pulled()
                if kind == ERROR:
                    raise RuntimeError(bytes(body).decode("utf-8", "replace"))
                assert kind == DONE
                raise StopIteration
        finally:
            if scope is not None:
                scope.finished()

    def _first_pulled(self) -> None:
        if self._on_first is not None:
            self._on_first(time.perf_counter() - self._started)
            self._on_first = None

    def _finish(self, worker: _Worker) -> None:
        self._worker = None
        self._executors._release(worker)

    def kill(self) -> None:
        """Stop the plan now (any thread): its process is killed and replaced, its slot freed."""
        worker, self._worker = self._worker, None
        if worker is not None:
            started = time.perf_counter()
            worker.kill()
            log.debug("execution process %d killed in %.1f ms", worker.proc.pid, (time.perf_counter() - started) * 1e3)
            self._executors._release(replace=True)

    def close(self) -> None:
        self.kill()

    def __del__(self) -> None:
        # A stream dropped before its end (a portal closed early, a session gone): the process
        # would go on computing for nobody.
        if self._worker is not None:
            self.kill()


def default_slots() -> int:
    """--max-concurrent-queries' default: one heavy statement per core (each already uses every
    core: DataFusion's target_partitions), so more at once only divides the CPU and the memory."""
    return max(1, os.cpu_count() or 1)
