"""The trio driver of the group-commit buffer machine.

The core is stepped synchronously by whichever task has news — a writer's append, a finished
flush, the timer — as the WAL driver does: trio switches tasks only at awaits, so steps never
interleave, and an append is acknowledged before its writer's `submit` returns (a hand-off to a
driver task and back cost two scheduler passes and ~0.1 ms of every tail ack). Each event is
stamped with the clock at the moment it is stepped, so time never goes backwards. One task
(`BufferDriver.run`) keeps the single timer and owns the nursery where flushes and snapshot
adoptions run, so one table's slow commit never blocks another table's appends. The driver
decides nothing; under `trio.testing.MockClock(autojump_threshold=0)` a whole run is
deterministic.

Injected functions:
- `flush(effect: FlushTable) -> FlushResult`: commit the batch as ONE commit through the commit
  machine, token = `effect.flush_id`, watermark in the snapshot summary; from attempt 2 on, resolve
  by the token first (`run_recovery`). Raising counts as a retryable unknown outcome.
- `adopt(table, snapshot_seq)`: switch the table's readers to that snapshot (default: nothing to
  switch). Must not return before the readers are switched.
- `on_lost(report: ReportLost)`: log it and surface it in health (default: log an error). Reports
  are kept in `driver.lost` too.
"""

from __future__ import annotations

import logging
import math
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

import trio

from icegres.machines.buffer import (
    Ack,
    AdoptSnapshot,
    Appended,
    ArmTimer,
    Config,
    Effect,
    Entry,
    Event,
    FlushCommitted,
    FlushFailed,
    FlushRequested,
    FlushTable,
    Metrics,
    Phase,
    Recovered,
    Refuse,
    ReportLost,
    ShutdownRequested,
    SnapshotAdopted,
    State,
    Stop,
    TimerFired,
    initial_state,
    metrics,
    reader_view,
    refusal,
    step,
)
from icegres.machines.drivers.in_order import InOrder

__all__ = [
    "BufferDriver",
    "BufferRefused",
    "FlushDone",
    "FlushError",
    "FlushResult",
]

log = logging.getLogger(__name__)

SQLSTATE_IO_ERROR = "58030"
SQLSTATE_CONNECTION_FAILURE = "08006"
ADOPT_RETRY_SECONDS = 1.0


@dataclass(frozen=True)
class FlushDone:
    snapshot_seq: int  # the sequence number of the snapshot that holds the batch


@dataclass(frozen=True)
class FlushError:
    sqlstate: str
    message: str
    retryable: bool
    outcome_unknown: bool = False  # it may have landed: the retry resolves by the token


FlushResult = FlushDone | FlushError
FlushFn = Callable[[FlushTable], Awaitable[FlushResult]]
AdoptFn = Callable[[str, int], Awaitable[None]]


class BufferRefused(Exception):
    """The buffer refused an append: nothing of it will ever be applied."""

    def __init__(self, sqlstate: str, message: str) -> None:
        super().__init__(message)
        self.sqlstate = sqlstate
        self.message = message


async def _no_adopt(table: str, snapshot_seq: int) -> None:
    return None


def _log_lost(report: ReportLost) -> None:
    log.error(
        "write buffer: %d acked entries of %s %s (flush %s): %s %s",
        len(report.entries),
        report.table,
        "may not have reached the lake" if report.in_doubt else "did not reach the lake",
        report.flush_id,
        report.sqlstate,
        report.message,
    )


class BufferDriver:
    """Drives one buffer core. Start `run` in a nursery, then `append`, read views, `shutdown`."""

    def __init__(
        self,
        config: Config,
        flush: FlushFn,
        *,
        adopt: AdoptFn = _no_adopt,
        on_lost: Callable[[ReportLost], None] = _log_lost,
        incarnation: str | None = None,
    ) -> None:
        self._state: State = initial_state(config, incarnation or uuid.uuid4().hex[:12])
        self._flush = flush
        self._adopt = adopt
        self._on_lost = on_lost
        self._waiters: dict[str, trio.Event] = {}
        self._answers: dict[str, Refuse | None] = {}
        self._deadline_ms: int | None = None
        self._timer = trio.CancelScope()  # the run task's wait for the deadline (or for Stop)
        # Commands that arrive while a step is performing its effects are stepped after it, in order.
        self._commands: InOrder[Callable[[int], Event]] = InOrder(self._step_now)
        self._nursery: trio.Nursery | None = None
        self._entries = 0
        self._stopped = trio.Event()
        self._stepped = trio.Event()
        self._running = False
        self.lost: list[ReportLost] = []

    # --- what the server uses -------------------------------------------------------------------

    @property
    def state(self) -> State:
        return self._state

    def metrics(self) -> Metrics:
        return metrics(self._state)

    def reader_view(self, table: str) -> tuple[int | None, tuple[Entry, ...]]:
        """(snapshot readers are on, entries to union with it): one consistent instant."""
        return reader_view(self._state, table)

    def refusal(self, size_bytes: int) -> tuple[str, str] | None:
        """Ask before writing a tail record: (sqlstate, message) if the append would be refused."""
        if self._stopped.is_set():
            return refusal(self._state, size_bytes) or ("57P01", "the write buffer has stopped")
        return refusal(self._state, size_bytes)

    async def append(
        self,
        table: str,
        rows_ref: Any,
        row_count: int,
        size_bytes: int,
        lsn: int | None = None,
    ) -> str:
        """Hand rows to the buffer; returns the entry id once acked (visible to readers from then).

        Raises BufferRefused when the buffer refuses (shutting down, full). Not cancellable midway
        in effect: once sent, the entry is acked or refused whether or not the caller waits.
        """
        entry_id = self.submit(table, rows_ref, row_count, size_bytes, lsn)
        await self.acked(entry_id)
        return entry_id

    def submit(
        self,
        table: str,
        rows_ref: Any,
        row_count: int,
        size_bytes: int,
        lsn: int | None = None,
    ) -> str:
        """The first half of `append`, without waiting: the entry joins the command queue now.

        Entries reach the core in the order of `submit` calls, which is how a tail front door
        keeps lsn order when its durable acks wake writers in any order. Await `acked` next.
        """
        if self._stopped.is_set() or not self._running:
            raise BufferRefused("57P01", "the write buffer is not running")
        self._entries += 1
        entry_id = f"{self._state.incarnation}-{self._entries}"
        self._waiters[entry_id] = trio.Event()
        self._command(partial(Appended, entry_id, table, rows_ref, lsn, row_count, size_bytes))
        return entry_id

    async def acked(self, entry_id: str) -> None:
        """Wait for the core's answer to a submitted entry; BufferRefused if it was refused.
        An answer the core gave at once (the usual case) is returned without a checkpoint."""
        done = self._waiters.get(entry_id)
        if done is not None:
            await done.wait()
        refused = self._answers.pop(entry_id)
        if refused is not None:
            raise BufferRefused(refused.sqlstate, refused.message)

    def replay(self, entries: list[tuple[str, Any, int, int, int]]) -> None:
        """Restart under the tail policy: hand the core the acked records not yet in the lake.

        `entries` are (table, rows_ref, lsn, row_count, size_bytes) in lsn order. Must be the
        first command after `run` started (the core accepts `Recovered` only first); the replayed
        batches are flushed at once. Readers start with no snapshot adopted.
        """
        if self._entries or not self._running:
            raise AssertionError("replay must come first, after run started")
        made = []
        for table, rows_ref, lsn, row_count, size_bytes in entries:
            self._entries += 1
            entry_id = f"{self._state.incarnation}-{self._entries}"
            made.append(Entry(entry_id, table, row_count, size_bytes, lsn, 0, rows_ref))
        self._command(partial(Recovered, tuple(made), ()))

    async def wait_until(self, predicate: Callable[[State], bool]) -> None:
        """Return once `predicate(state)` holds (checked after every step) or the core stopped."""
        while not predicate(self._state) and not self._stopped.is_set():
            await self._stepped.wait()

    def request_flush(self, table: str) -> None:
        """Flush `table`'s pending entries now rather than at the end of its window."""
        if not self._stopped.is_set():
            self._command(partial(FlushRequested, table))

    async def shutdown(self) -> None:
        """Refuse new appends, flush everything, and return when the core has stopped."""
        if not self._stopped.is_set():
            self._command(ShutdownRequested)
        await self._stopped.wait()

    # --- stepping ---------------------------------------------------------------------------------

    def _command(self, make: Callable[[int], Event]) -> None:
        """Step the core with `make(now_ms)` now, or right after the step being performed."""
        self._commands(make)

    def _step_now(self, make: Callable[[int], Event]) -> None:
        self._state, effects = step(self._state, make(self._now_ms()))
        for effect in effects:
            self._perform(effect)
        self._stepped.set()
        self._stepped = trio.Event()

    # --- the one task ---------------------------------------------------------------------------

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Keep the timer and the nursery of flushes until the core stops (after `shutdown`)."""
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            self._running = True
            task_status.started()
            try:
                while self._state.phase is not Phase.STOPPED:
                    deadline_ms = self._deadline_ms
                    with trio.CancelScope(deadline=math.inf if deadline_ms is None else deadline_ms / 1000) as timer:
                        self._timer = timer
                        await trio.sleep_forever()
                    # Woken by the deadline (steps move it: ArmTimer) or by Stop: fire only a
                    # deadline still armed and reached.
                    armed = self._deadline_ms
                    if armed is not None and trio.current_time() * 1000 >= armed:
                        self._deadline_ms = None
                        self._command(partial(_timer_fired, armed))
            finally:
                self._running = False
                self._stopped.set()
                self._stepped.set()
                self._refuse_waiters()

    def _now_ms(self) -> int:
        return max(self._state.now_ms, round(trio.current_time() * 1000))

    def _perform(self, effect: Effect) -> None:
        nursery = self._nursery
        assert nursery is not None
        match effect:
            case Ack(entry_id=entry_id):
                self._answer(entry_id, None)
            case Refuse(entry_id=entry_id):
                self._answer(entry_id, effect)
            case FlushTable():
                nursery.start_soon(self._run_flush, effect)
            case AdoptSnapshot(table=table, snapshot_seq=seq):
                nursery.start_soon(self._run_adopt, table, seq)
            case ReportLost():
                self.lost.append(effect)
                try:
                    self._on_lost(effect)
                except Exception:
                    log.exception("on_lost failed for flush %s", effect.flush_id)
            case ArmTimer(deadline_ms=deadline_ms):
                self._deadline_ms = deadline_ms
                self._timer.deadline = deadline_ms / 1000  # the run task's wait, if it is in one
            case Stop():
                self._deadline_ms = None
                self._timer.cancel()  # the run task sees the core stopped and ends
            case _:
                raise AssertionError(f"unknown effect {effect!r}")

    def _answer(self, entry_id: str, refused: Refuse | None) -> None:
        waiter = self._waiters.pop(entry_id, None)
        if waiter is None:
            raise AssertionError(f"an answer for unknown entry {entry_id}")
        self._answers[entry_id] = refused
        waiter.set()

    def _refuse_waiters(self) -> None:
        for entry_id in list(self._waiters):
            self._answer(entry_id, Refuse(entry_id, "57P01", "the write buffer has stopped"))

    async def _run_flush(self, effect: FlushTable) -> None:
        # Shielded: a flush abandoned midway could still land after we stopped looking for it.
        with trio.CancelScope(shield=True):
            try:
                result = await self._flush(effect)
            except Exception as exc:
                log.warning("flush %s raised", effect.flush_id, exc_info=True)
                result = FlushError(SQLSTATE_CONNECTION_FAILURE, _describe(exc), True, True)
        if isinstance(result, FlushDone):
            self._command(
                partial(
                    FlushCommitted,
                    effect.table,
                    effect.flush_id,
                    result.snapshot_seq,
                    effect.watermark,
                )
            )
        elif isinstance(result, FlushError):
            self._command(
                lambda now_ms: FlushFailed(
                    effect.table,
                    effect.flush_id,
                    result.sqlstate,
                    result.message,
                    result.retryable,
                    now_ms,
                    result.outcome_unknown,
                )
            )
        else:
            raise TypeError(f"flush returned {result!r}, not FlushDone or FlushError")

    async def _run_adopt(self, table: str, snapshot_seq: int) -> None:
        while True:
            try:
                await self._adopt(table, snapshot_seq)
                break
            except Exception:
                # Until the readers switch, the batch stays visible from memory: correct, just held.
                log.warning("could not switch readers of %s", table, exc_info=True)
                await trio.sleep(ADOPT_RETRY_SECONDS)
        self._command(partial(SnapshotAdopted, table, snapshot_seq))


def _timer_fired(deadline_ms: int, now_ms: int) -> TimerFired:
    # The clock may read a hair before the deadline it woke for; never report it early.
    return TimerFired(max(now_ms, deadline_ms))


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
