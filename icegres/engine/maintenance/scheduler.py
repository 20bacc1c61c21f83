"""Automatic maintenance: `serve --maintain`'s background task (docs/maintenance.md, "Automatic
maintenance"). Every interval (or sooner, once the write buffer's flushes have added enough files
to a table) it reads each table's metadata, asks the pure policy (policy.py) what is due, and runs
the due jobs — compaction, manifest rewrite, expiry: the same functions `icegres maintain` and the
`CALL system.*` procedures run — one table at a time, each under the table's maintenance lease
(machines/drivers/lease.py, engine/lease_store.py), so no two servers on a catalog ever maintain
one table at once.

The budget, and why each part:
- **One job at a time, in a process of its own** (worker.py, started with the first job and
  kept, at nice +10): a job is mostly pyiceberg's Python, and on a thread of the server it made
  every foreground statement wait for the GIL (bench auto_maintenance, first full run: point-lookup
  p95 2.42x of idle while a job ran). The scheduler's own reads of the tables' metadata run on one
  thread of its own (a SerialThread, also at nice +10), never on a query thread.
- **A duty cycle** (`--maintain-duty-cycle`, default 0.25): after a job of `t` seconds it rests
  `t * (1 - d) / d`, so however much is due, maintenance averages at most `d` of the time.
- **Quiet first**: a job starts once no statement ran for `quiet_s` (no query thread borrowed,
  no statement finished), or after `max_defer_s` whatever the load (a busy server's tables must
  still be maintained); compaction waits again the same way between its file groups.
- **Fenced by the lease**: while a job runs, `_mirror` keeps the gate it reads (worker.py) current:
  the lease's deadline on the monotonic clock, -inf once the lease is lost (the lease driver
  cancels the job, and with it the mirror). Just before each commit the job requires at least
  `commit_margin_s` (a quarter of the ttl; renewals keep it near the ttl) and no drain; else it
  commits nothing (compaction deletes what it wrote). Not covered: a process paused for longer
  than the margin between that check and the catalog's compare-and-swap
  (docs/maintenance-lease.md, "Why epochs").
- **Reads never lose a file**: expiry keeps what this server's transactions pinned, and does not
  delete a file that a statement running here may still open (the engine's live scan sets, read
  just before the expiry); such a file is left to the orphan sweep.

Drain: `stop()` lets the job in progress end at its next check (no commit after it), releases the
lease and returns; serve calls it before draining the front ends.
"""

from __future__ import annotations

import logging
import mmap
import os
import subprocess
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

import trio

from icegres.engine.maintenance import policy
from icegres.engine.maintenance.policy import (
    EXPIRE,
    Defaults,
    Job,
    Memo,
    Op,
    TableStats,
)
from icegres.engine.maintenance.worker import GATE_BYTES, Gate, LeaseLost, Request, describe, run_op
from icegres.machines.drivers.serial_thread import SerialThread

if TYPE_CHECKING:
    from icegres.config import Settings
    from icegres.engine.lake import Engine
    from icegres.machines.drivers.lease import Holding
    from icegres.machines.lease import Config as LeaseConfig

__all__ = ["Foreground", "LeaseLost", "Maintainer"]

log = logging.getLogger("icegres.maintain")

MIRROR_S = 0.05  # how often a running job's gate is brought up to date
NOOP_RETRY_MS = 600_000  # a job that found nothing is not asked for again on that snapshot this long
HISTORY_MAX = 10_000  # snapshots of main's ancestry the small-file estimate walks


class Foreground(Protocol):
    def load(self) -> tuple[int, int]:
        """(statements running now, statements finished so far), read on the trio thread: before
        a job starts, and into the gate its process reads between compaction's file groups."""
        ...


@dataclass
class Counters:
    """What /metrics shows (icegres_maintenance_*_total): monotonic totals."""

    jobs_run: int = 0
    jobs_failed: int = 0
    jobs_skipped_lease: int = 0
    files_compacted: int = 0
    files_written: int = 0
    manifests_rewritten: int = 0
    snapshots_expired: int = 0
    files_deleted: int = 0
    rounds: int = 0

    def as_dict(self) -> dict[str, int]:
        return dict(vars(self))


@dataclass
class _Done:
    """One job's results, for its log line and the counters."""

    compacted: int = 0
    written: int = 0
    manifests: tuple[int, int] = (0, 0)
    expired: int = 0
    deleted: int = 0
    notes: list[str] = field(default_factory=list)

    def add(self, result: dict[str, Any]) -> None:
        self.compacted += result.get("compacted", 0)
        self.written += result.get("written", 0)
        if result.get("manifests"):
            self.manifests = tuple(result["manifests"])  # type: ignore[assignment]
        self.expired += result.get("expired", 0)
        self.deleted += result.get("deleted", 0)
        self.notes += result.get("notes", [])


class Maintainer:
    """The background task. `run` until cancelled or `stop`ped; `noticed` is the write ladder's
    hook (a flush committed files to a table)."""

    def __init__(self, engine: Engine, *, interval_s: float, duty_cycle: float, holder: str,
                 defaults: Defaults | None = None, foreground: Foreground | None = None,
                 lease_config: LeaseConfig | None = None, quiet_s: float = 0.1,
                 max_defer_s: float | None = None, settings: Settings | None = None) -> None:
        """`settings`: the server's, from which the worker process opens the catalog; None: jobs
        run on the scheduler's own thread (the unit tests)."""
        from icegres.machines.lease import Config

        if interval_s <= 0:
            raise ValueError("the maintenance interval must be > 0 seconds")
        policy.rest_s(0.0, duty_cycle, interval_s)  # a ValueError for a duty cycle out of (0, 1]
        self.engine = engine
        self.interval_s = interval_s
        self.duty_cycle = duty_cycle
        self.holder = holder
        self.defaults = defaults or Defaults()
        self.foreground = foreground
        self.lease_config = lease_config or Config()
        # A commit (a metadata write and a compare-and-swap) must fit in what is left of the lease.
        self.commit_margin_s = self.lease_config.ttl_s / 4
        self.quiet_s = quiet_s
        self.max_defer_s = max_defer_s if max_defer_s is not None else min(interval_s, 30.0)
        self.counters = Counters()
        self._cache: dict[tuple[str, str], tuple[str, TableStats | None]] = {}
        self._memos: dict[tuple[str, str], dict[Op, Memo]] = {}
        self._flushes: dict[tuple[str, str], int] = {}
        self._wake = trio.Event()
        self._worker = SerialThread("icegres-maintain")
        # The worker process shares its gate through a memfd (Linux); elsewhere jobs run on the
        # scheduler's thread, GIL and all.
        self._process = _WorkerProcess(settings) if settings is not None and hasattr(os, "memfd_create") else None
        self._gate = self._process.gate if self._process is not None else Gate()
        self._stopping = False
        self._idle: set[trio.CancelScope] = set()  # every rest in progress: a stop ends them all
        self._stopped = trio.Event()

    # --- the trio side --------------------------------------------------------------------------

    def noticed(self, key: tuple[str, str]) -> None:
        """A flush committed new files to `key`: look at it at the next round, and start that
        round early once a table has taken as many flushes as compaction's trigger."""
        self._flushes[key] = count = self._flushes.get(key, 0) + 1
        if count >= self.defaults.compact_min_files:
            self._wake.set()

    def stats(self) -> dict[str, int]:
        return self.counters.as_dict()

    async def stop(self) -> None:
        """Let the job in progress stop at its next check (committing nothing after it), release
        its lease, and return once the task has ended."""
        self._stopping = True
        self._gate.stopping = True
        for scope in list(self._idle):
            scope.cancel()
        await self._stopped.wait()

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        log.info("automatic maintenance on: every %.0fs, duty cycle %.2f, as %s", self.interval_s,
                 self.duty_cycle, self.holder)
        task_status.started()
        try:
            await self._worker.run(_lower_priority)
            while not self._stopping:
                await self._rest(self.interval_s, wakeable=True)
                if self._stopping:
                    break
                try:
                    await self.round()
                except LeaseLost:
                    break  # stopping
                except Exception as exc:  # noqa: BLE001 - a catalog outage must not end the task
                    log.warning("automatic maintenance: round failed: %s", _describe(exc))
        finally:
            self._worker.close()
            if self._process is not None:
                with trio.CancelScope(shield=True):
                    await trio.to_thread.run_sync(self._process.close)
            self._stopped.set()

    async def round(self) -> int:
        """One pass: every due job, most overdue first, each after a quiet moment and followed by
        its rest. The number of jobs run."""
        self.counters.rounds += 1
        dirty = set(self._flushes)
        self._flushes.clear()
        surveyed = await self._thread(self._survey, dirty)
        now_ms = int(time.time() * 1000)
        jobs = [j for s in surveyed if (j := policy.due(s, self.defaults, now_ms, self._memos.get(s.key))) is not None]
        jobs.sort(key=lambda j: -j.urgency)
        ran = 0
        for job in jobs:
            if self._stopping:
                break
            await self._when_quiet()
            if self._stopping:
                break
            started = trio.current_time()
            await self._run(job, next(s for s in surveyed if s.key == job.key))
            ran += 1
            await self._rest(policy.rest_s(trio.current_time() - started, self.duty_cycle, self.interval_s))
        return ran

    async def _rest(self, seconds: float, *, wakeable: bool = False) -> None:
        with trio.CancelScope() as scope:
            self._idle.add(scope)
            try:
                if self._stopping:
                    return
                with trio.move_on_after(seconds):
                    if wakeable:
                        await self._wake.wait()
                        self._wake = trio.Event()
                    else:
                        await trio.sleep_forever()
            finally:
                self._idle.discard(scope)

    async def _when_quiet(self) -> None:
        """Until the foreground has been quiet for `quiet_s`, or `max_defer_s` has passed."""
        if self.foreground is None:
            return
        deadline = trio.current_time() + self.max_defer_s
        before = self.foreground.load()
        while trio.current_time() < deadline and not self._stopping:
            await trio.sleep(self.quiet_s)
            after = self.foreground.load()
            if policy.quiet(before, after):
                return
            before = after

    async def _run(self, job: Job, stats: TableStats) -> None:
        from icegres.engine.lease_store import IcebergLease
        from icegres.machines.drivers.lease import run_lease
        from icegres.machines.lease import Phase
        from icegres.machines.lease import Request as LeaseRequest

        display = f"{job.key[0]}.{job.key[1]}"
        done = _Done()
        started = time.monotonic()
        epoch: list[int] = []
        held: list[float] = []  # wall-clock start and end of the work under the lease, for the log

        async def work(holding: Holding) -> None:
            epoch.append(holding.epoch)
            held.append(time.time())
            failure: Exception | None = None
            async with trio.open_nursery() as nursery:
                await nursery.start(self._mirror, holding)
                try:
                    await self._ops(job, stats, done, holding.epoch)
                except Exception as exc:  # noqa: BLE001 - raised below, not wrapped in the nursery's group
                    failure = exc
                nursery.cancel_scope.cancel()
            held.append(time.time())
            if failure is not None:
                raise failure

        try:
            world = await self._thread(IcebergLease.for_table, self.engine.lakehouse, *job.key)
            outcome = await run_lease(LeaseRequest(self.holder, f"{self.holder}/{uuid.uuid4().hex}"), world, work,
                                      self.lease_config)
        except Exception as exc:  # noqa: BLE001 - one table's failure is counted and logged, not fatal
            if self._stopping and isinstance(exc, LeaseLost):
                self._count(done)
                log.info("maintenance %s: stopped for the drain, nothing more committed", display)
                return
            self.counters.jobs_failed += 1
            self._count(done)
            log.warning("maintenance %s: %s failed after %.2fs (epoch %s%s): %s", display,
                        "+".join(op.value for op in job.ops), time.monotonic() - started,
                        epoch[0] if epoch else "-", f", held {held[0]:.3f}-{held[-1]:.3f}" if held else "",
                        _describe(exc))
            log.debug("maintenance %s: failure", display, exc_info=True)
            return
        if outcome.phase is Phase.BUSY:
            self.counters.jobs_skipped_lease += 1
            log.info("maintenance %s: skipped, another server holds its lease", display)
            return
        if outcome.phase is not Phase.DONE or not outcome.completed:
            self.counters.jobs_failed += 1
            self._count(done)
            log.warning("maintenance %s: stopped (lease %s, epoch %s): %s", display, outcome.phase.value,
                        outcome.epoch, outcome.message or "the lease was lost")
            return
        self.counters.jobs_run += 1
        self._count(done)
        log.info("maintenance %s: %s in %.2fs (epoch %d, held %.3f-%.3f; %s): compacted %d files into %d, "
                 "manifests %d -> %d, expired %d snapshots, deleted %d files%s", display,
                 "+".join(op.value for op in job.ops), time.monotonic() - started, outcome.epoch or 0,
                 held[0], held[-1], "; ".join(job.reasons), done.compacted,
                 done.written, done.manifests[0], done.manifests[1], done.expired, done.deleted,
                 "".join(f"; {n}" for n in done.notes))

    def _count(self, done: _Done) -> None:
        c = self.counters
        c.files_compacted += done.compacted
        c.files_written += done.written
        c.manifests_rewritten += done.manifests[0]
        c.snapshots_expired += done.expired
        c.files_deleted += done.deleted

    async def _thread(self, fn: Callable[..., Any], *args: Any) -> Any:
        return await self._worker.run(fn, *args)

    # --- worker threads ---------------------------------------------------------------------------

    def _survey(self, dirty: set[tuple[str, str]]) -> list[TableStats]:
        """Every maintainable table's stats, read again only where its metadata moved."""
        from icegres.engine.lease_store import KIND_PROPERTY, NAMESPACE

        out = []
        listed = set()
        for entry in self.engine.lakehouse.listing().tables:
            key = (entry.namespace, entry.name)
            if entry.namespace == NAMESPACE:
                continue
            listed.add(key)
            cached = self._cache.get(key)
            if cached is not None and entry.metadata_location and cached[0] == entry.metadata_location \
                    and key not in dirty:
                if cached[1] is not None:
                    out.append(cached[1])
                continue
            try:
                table = self.engine.lakehouse.load_table(*key)
                if KIND_PROPERTY in table.metadata.properties:
                    # icegres's own bookkeeping tables (sequences): remembered, not maintained.
                    self._cache[key] = (entry.metadata_location, None)
                    continue
                stats = table_stats(key, table)
            except Exception as exc:  # noqa: BLE001 - a damaged or dropped table is skipped this round
                log.debug("maintenance: cannot read %s.%s: %s", *key, _describe(exc))
                continue
            self._cache[key] = (entry.metadata_location, stats)
            out.append(stats)
        for gone in set(self._cache) - listed:
            self._cache.pop(gone, None)
            self._memos.pop(gone, None)
        return out

    async def _ops(self, job: Job, stats: TableStats, done: _Done, epoch: int) -> None:
        for op in job.ops:
            if self._stopping:
                raise LeaseLost("the server is draining")
            result = await self._op(op, job, stats, epoch)
            done.add(result)
            if result["found"]:
                # Mounted at once: new statements read the new files, and the old mount's
                # files stop being in use (expiry, next, deletes only files not in use).
                await self._thread(self.engine.refresh, {job.key})
            else:
                memos = self._memos.setdefault(job.key, {})
                memos[op] = Memo(stats.snapshot_id, int(time.time() * 1000) + NOOP_RETRY_MS)

    async def _mirror(self, holding: Holding, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """While a job runs: keep the gate its process (or thread) reads current — the lease's
        deadline on the monotonic clock, the foreground's load. Cancelled with the job (a lost
        lease cancels it), it leaves the deadline at -inf: nothing commits after that."""
        # trio's clock to the monotonic one (both CLOCK_MONOTONIC on Linux; MockClock in no job).
        offset_s = time.monotonic() - trio.current_time()
        gate = self._gate
        try:
            while True:
                gate.deadline = holding.deadline() + offset_s
                if self.foreground is not None:
                    gate.running, gate.finished = self.foreground.load()
                task_status.started()
                task_status = trio.TASK_STATUS_IGNORED
                await trio.sleep(MIRROR_S)
        finally:
            gate.deadline = float("-inf")

    async def _op(self, op: Op, job: Job, stats: TableStats, epoch: int) -> dict[str, Any]:
        """One operation of a job, in the worker process (or on the scheduler's thread)."""
        pinned: frozenset[int] = frozenset()
        in_use: frozenset[str] = frozenset()
        if op is EXPIRE:
            from icegres.engine.txn import pinned_snapshots

            # Read now, after the job's compaction was mounted: what statements hold at this point.
            pinned = frozenset(pinned_snapshots(stats.table_uuid)) if stats.table_uuid else frozenset()
            in_use = frozenset(_local(p) for p in self.engine.scan_sets.live_files())
        request = Request(op.value, job.key, job.limits.compact_min_input_files, job.limits.expire_max_age_ms,
                          job.limits.expire_retain_last, pinned, in_use, self.commit_margin_s, self.quiet_s,
                          self.max_defer_s, epoch)
        if self._process is None:
            return await self._thread(run_op, self.engine.lakehouse, request, self._gate)
        return await trio.to_thread.run_sync(self._process.call, request)


def table_stats(key: tuple[str, str], table: Any) -> TableStats:
    """What the policy reads of a loaded pyiceberg table: its metadata and one manifest list."""
    from pyiceberg.table.snapshots import ancestors_of

    meta = table.metadata
    snapshot = meta.current_snapshot()
    times = tuple(s.timestamp_ms for s in meta.snapshots)
    if snapshot is None:
        return TableStats(key, None, dict(meta.properties), times, 0, 0, (), 0, str(meta.table_uuid))

    def number(s: Any, name: str) -> int:
        try:
            return int(s.summary.get(name, 0)) if s.summary is not None else 0
        except (TypeError, ValueError):
            return 0

    history = []
    for i, each in enumerate(ancestors_of(snapshot, meta)):
        if i >= HISTORY_MAX:
            break
        operation = each.summary.operation.value if each.summary is not None else ""
        history.append(policy.SnapshotInfo(operation, number(each, "added-data-files"),
                                           number(each, "added-files-size"), number(each, "deleted-data-files")))
    return TableStats(key, snapshot.snapshot_id, dict(meta.properties), times, number(snapshot, "total-data-files"),
                      number(snapshot, "total-files-size"), tuple(history), len(snapshot.manifests(table.io)),
                      str(meta.table_uuid))


NICE = 10  # maintenance's thread, relative to the server's others (Linux: per thread)


def _lower_priority() -> None:
    """Run on the maintenance thread: lower its CPU priority (and so of the threads it starts)."""
    try:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), NICE)
    except (OSError, AttributeError) as exc:  # not Linux, or not permitted: maintenance still runs
        log.debug("maintenance thread keeps its priority: %s", exc)


def _local(path: str) -> str:
    return path.removeprefix("file://")


_describe = describe


class JobFailed(Exception):
    """The worker process answered with an error (its description), or went away."""


class _WorkerProcess:
    """The worker process (worker.py), started on the first job and kept; its calls block."""

    def __init__(self, settings: Settings) -> None:
        import dataclasses

        # What the process needs to open the catalog; the logins' verifiers stay here.
        self.settings = dataclasses.replace(settings, users={})
        self._fd = os.memfd_create("icegres-maintain-gate")
        os.ftruncate(self._fd, GATE_BYTES)
        self.gate = Gate(mmap.mmap(self._fd, GATE_BYTES))
        self.proc: subprocess.Popen[bytes] | None = None
        self.conn: Any = None

    def _start(self) -> None:
        import socket
        import sys
        from multiprocessing.connection import Connection

        ours, theirs = socket.socketpair()
        self.proc = subprocess.Popen([sys.executable, "-m", "icegres.engine.maintenance.worker",
                                      str(theirs.fileno()), str(self._fd)], pass_fds=(theirs.fileno(), self._fd),
                                     stdin=subprocess.DEVNULL)
        theirs.close()
        self.conn = Connection(ours.detach())
        self.conn.send(self.settings)
        kind, _ = self.conn.recv()
        assert kind == "ready", kind

    def call(self, request: Request) -> dict[str, Any]:
        if self.proc is None or self.proc.poll() is not None:
            self._start()
        try:
            self.conn.send(request)
            kind, answer = self.conn.recv()
        except (EOFError, OSError) as exc:
            self.close()  # started again for the next job
            raise JobFailed(f"the maintenance process went away: {describe(exc)}") from None
        if kind == "lost":
            raise LeaseLost(answer)
        if kind == "error":
            raise JobFailed(answer)
        return answer

    def close(self) -> None:
        proc, self.proc = self.proc, None
        if proc is None:
            return
        try:
            self.conn.send(None)
            self.conn.close()
        except OSError:
            pass
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
