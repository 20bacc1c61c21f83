"""Automatic maintenance: `serve --maintain`'s background task (docs/maintenance.md, "Automatic
maintenance"). Every interval (or sooner, once the write buffer's flushes have added enough files
to a table) it reads each table's metadata, asks the pure policy (policy.py) what is due, and runs
the due jobs — compaction, manifest rewrite, expiry: the same functions `icegres maintain` and the
`CALL system.*` procedures run — one table at a time, each under the table's maintenance lease
(machines/drivers/lease.py, engine/lease_store.py), so no two servers on a catalog ever maintain
one table at once.

The budget, and why each part:
- **One job at a time**, on one thread of its own (a SerialThread) at a lower CPU priority
  (`nice` +10 for that thread and the threads it starts): maintenance never takes a query thread,
  at most one core's worth of its Python runs beside the foreground, and when the CPU is short
  the kernel serves the foreground's threads first. (It does not help against the GIL: two
  quick bench runs, other processes using 61% and 69% of the machine, put the foreground's p95
  during a job at 1.79x of idle without it and 1.63x with it, within that noise;
  bench/SCORECARD.md, section auto_maintenance, has the full run.)
- **A duty cycle** (`--maintain-duty-cycle`, default 0.25): after a job of `t` seconds it rests
  `t * (1 - d) / d`, so however much is due, maintenance averages at most `d` of a core.
- **Quiet first**: a job starts once no statement ran for `quiet_s` (no query thread borrowed,
  no statement finished), or after `max_defer_s` whatever the load (a busy server's tables must
  still be maintained); compaction waits again the same way between its file groups.
- **Fenced by the lease**: just before each commit the job checks, on the trio thread, that its
  lease still has at least `commit_margin_s` to run (renewals keep it near the ttl); a job whose
  lease was lost, expired or is about to, or a server that is draining, stops there and commits
  nothing (its written files deleted). Not covered: a process paused for longer than the margin
  between that check and the commit's compare-and-swap (docs/maintenance-lease.md, "Why epochs").
- **Reads never lose a file**: expiry keeps what this server's transactions pinned, and does not
  delete a file that a statement running here may still open (the engine's live scan sets); such
  a file is left to the orphan sweep.

Drain: `stop()` lets the job in progress end at its next check (no commit after it), releases the
lease and returns; serve calls it before draining the front ends.
"""

from __future__ import annotations

import logging
import os
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

import trio

from icegres.engine.maintenance import policy
from icegres.engine.maintenance.policy import (
    COMPACT,
    EXPIRE,
    MANIFESTS,
    Defaults,
    Job,
    Memo,
    Op,
    TableStats,
)
from icegres.machines.drivers.serial_thread import SerialThread

if TYPE_CHECKING:
    from icegres.engine.lake import Engine
    from icegres.machines.drivers.lease import Holding
    from icegres.machines.lease import Config as LeaseConfig

__all__ = ["Foreground", "LeaseLost", "Maintainer"]

log = logging.getLogger("icegres.maintain")

NOOP_RETRY_MS = 600_000  # a job that found nothing is not asked for again on that snapshot this long
HISTORY_MAX = 10_000  # snapshots of main's ancestry the small-file estimate walks


class LeaseLost(Exception):
    """The job must not commit: its lease is lost or nearly out, or the server is draining."""


class Foreground(Protocol):
    def load(self) -> tuple[int, int]:
        """(statements running now, statements finished so far); called from the trio thread and
        from maintenance's worker thread, so it only reads counters."""
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


class Maintainer:
    """The background task. `run` until cancelled or `stop`ped; `noticed` is the write ladder's
    hook (a flush committed files to a table)."""

    def __init__(self, engine: Engine, *, interval_s: float, duty_cycle: float, holder: str,
                 defaults: Defaults | None = None, foreground: Foreground | None = None,
                 lease_config: LeaseConfig | None = None, quiet_s: float = 0.1,
                 max_defer_s: float | None = None) -> None:
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
        self._stopping = False
        self._idle: trio.CancelScope | None = None
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
        if self._idle is not None:
            self._idle.cancel()
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
        with trio.CancelScope() as self._idle:
            if self._stopping:
                return
            with trio.move_on_after(seconds):
                if wakeable:
                    await self._wake.wait()
                    self._wake = trio.Event()
                else:
                    await trio.sleep_forever()
        self._idle = None

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
        from icegres.machines.lease import Phase, Request

        display = f"{job.key[0]}.{job.key[1]}"
        done = _Done()
        started = time.monotonic()
        epoch: list[int] = []
        held: list[float] = []  # wall-clock start and end of the work under the lease, for the log

        async def work(holding: Holding) -> None:
            epoch.append(holding.epoch)
            held.append(time.time())
            # trio's clock to the monotonic one the worker thread reads (both CLOCK_MONOTONIC).
            offset_s = time.monotonic() - trio.current_time()
            for op in job.ops:
                if self._stopping:
                    raise LeaseLost("the server is draining")
                found = await self._thread(self._op, op, job, holding, offset_s, done)
                if found:
                    # Mounted at once: new statements read the new files, and the old mount's
                    # files stop being in use (expiry, next, deletes only files not in use).
                    await self._thread(self.engine.refresh, {job.key})
                else:
                    memos = self._memos.setdefault(job.key, {})
                    memos[op] = Memo(stats.snapshot_id, int(time.time() * 1000) + NOOP_RETRY_MS)
            held.append(time.time())

        try:
            world = await self._thread(IcebergLease.for_table, self.engine.lakehouse, *job.key)
            outcome = await run_lease(Request(self.holder, f"{self.holder}/{uuid.uuid4().hex}"), world, work,
                                      self.lease_config)
        except Exception as exc:  # noqa: BLE001 - one table's failure is counted and logged, not fatal
            if self._stopping and isinstance(exc, LeaseLost):
                self._count(done)
                log.info("maintenance %s: stopped for the drain, nothing more committed", display)
                return
            self.counters.jobs_failed += 1
            self._count(done)
            log.warning("maintenance %s: %s failed after %.2fs (epoch %s): %s", display,
                        "+".join(op.value for op in job.ops), time.monotonic() - started,
                        epoch[0] if epoch else "-", _describe(exc))
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

    def _op(self, op: Op, job: Job, holding: Holding, offset_s: float, done: _Done) -> bool:
        """Run one operation; whether it changed anything."""
        lakehouse = self.engine.lakehouse

        def left_s() -> float:
            return holding.deadline() + offset_s - time.monotonic()

        def fence() -> None:
            if self._stopping:
                raise LeaseLost("the server is draining: nothing committed")
            left = left_s()
            if left < self.commit_margin_s:
                raise LeaseLost(f"the lease has {max(left, 0):.1f}s left (< {self.commit_margin_s:.1f}s): "
                                "nothing committed")

        if op is COMPACT:
            from icegres.engine.maintenance.compact import CompactOptions, compact

            options = CompactOptions(min_input_files=job.limits.compact_min_input_files)
            result = compact(lakehouse, job.key, options, lambda *_: self._pause(left_s), fence)
            done.compacted += result.rewritten_data_files_count
            done.written += result.added_data_files_count
            return result.snapshot_id is not None
        if op is MANIFESTS:
            from icegres.engine.maintenance.manifests import rewrite_manifests

            merged = rewrite_manifests(lakehouse, job.key, before_commit=fence)
            if merged.snapshot_id is not None:
                done.manifests = (merged.rewritten_manifests_count, merged.added_manifests_count)
            return merged.snapshot_id is not None
        assert op is EXPIRE
        from icegres.engine.maintenance import expire
        from icegres.engine.txn import pinned_snapshots

        now_ms = int(time.time() * 1000)
        in_use = {_local(p) for p in self.engine.scan_sets.live_files()}
        kept: list[str] = []

        def delete(io: Any, path: str) -> None:
            if _local(path) in in_use:
                kept.append(path)  # a running statement may still open it: the orphan sweep's
                return
            expire._delete(io, path)

        report = expire.expire(lambda: lakehouse.load_table(*job.key), f"{job.key[0]}.{job.key[1]}",
                               expire.Policy(now_ms - job.limits.expire_max_age_ms, job.limits.expire_retain_last),
                               pinned=lambda table: pinned_snapshots(str(table.metadata.table_uuid)),
                               local_requirements=lakehouse.kind == "sql", delete=delete, before_commit=fence)
        done.expired += len(report.expired_snapshots)
        done.deleted += len(report.deleted.kinds) - len(kept)
        if kept:
            done.notes.append(f"{len(kept)} files in use left for the orphan sweep")
        if report.kept_files:
            done.notes.append("metadata unreadable after the expiry: no file deleted")
        return bool(report.expired_snapshots)

    def _pause(self, left_s: Callable[[], float]) -> None:
        """Between compaction's file groups: wait (in this worker thread) for a quiet foreground,
        up to `max_defer_s`; stop if the lease is gone or the server drains."""
        if self.foreground is not None:
            deadline = time.monotonic() + self.max_defer_s
            before = self.foreground.load()
            while time.monotonic() < deadline and not self._stopping:
                time.sleep(self.quiet_s)
                after = self.foreground.load()
                if policy.quiet(before, after):
                    break
                before = after
        if self._stopping or left_s() <= 0:
            raise LeaseLost("stopped between file groups: the lease is gone or the server drains")


def table_stats(key: tuple[str, str], table: Any) -> TableStats:
    """What the policy reads of a loaded pyiceberg table: its metadata and one manifest list."""
    from pyiceberg.table.snapshots import ancestors_of

    meta = table.metadata
    snapshot = meta.current_snapshot()
    times = tuple(s.timestamp_ms for s in meta.snapshots)
    if snapshot is None:
        return TableStats(key, None, dict(meta.properties), times, 0, 0, (), 0)

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
                      number(snapshot, "total-files-size"), tuple(history), len(snapshot.manifests(table.io)))


NICE = 10  # maintenance's thread, relative to the server's others (Linux: per thread)


def _lower_priority() -> None:
    """Run on the maintenance thread: lower its CPU priority (and so of the threads it starts)."""
    try:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), NICE)
    except (OSError, AttributeError) as exc:  # not Linux, or not permitted: maintenance still runs
        log.debug("maintenance thread keeps its priority: %s", exc)


def _local(path: str) -> str:
    return path.removeprefix("file://")


def _describe(exc: BaseException) -> str:
    message = getattr(exc, "message", None) or str(exc)
    detail = getattr(exc, "detail", None)
    shown = f"{type(exc).__name__}: {message}" if message else type(exc).__name__
    return f"{shown} ({detail})" if detail else shown
