"""What the write ladder asks of a tail, and the part of the tail drivers that is the same.

The ladder (`icegres/ladder.py`) makes each acknowledged statement's rows durable in a tail before
it acknowledges them, and tells the tail how far the lake has caught up. Three tails serve it: the
local WAL (`drivers/wal.py`), the Postgres tail (`drivers/pgtail.py`) and the quorum tail
(`drivers/quorum.py`, through `QuorumLadderTail`). `Tail` is everything the ladder may call on any
of them; it never asks which one it holds. A tail that several writers hold in turn (the quorum
and the Postgres tail) is also a `LakeFencedTail`: a deposed writer may still hold acknowledged
rows it has not flushed, and only the lake can stop it publishing them after its successor did.

The WAL and Postgres drivers step cores that share their append vocabulary
(`machines/tail_events.py`), so what an appender sees of them is written once here, in
`SteppedTail`: an append waits for its LSN's `Acknowledge` (or `FailAppends`, or the core's
`RefuseAppend`), the watermark is an event, timers are trio sleeps, and the core is stepped
without re-entry (`InOrder`). Each driver adds only the effects of its medium (`_perform_own`).
The quorum proposer counts in slots and terms and keeps its own driver; it shares the `Waiters`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any, ClassVar, Protocol, runtime_checkable

import trio

from icegres import faults
from icegres.machines.drivers.in_order import InOrder
from icegres.machines.tail_events import (
    Acknowledge,
    AppendRequested,
    FailAppends,
    RefuseAppend,
    StartTimer,
    TimerFired,
    WatermarkAdvanced,
)

__all__ = [
    "AppendFailed",
    "LakeFencedTail",
    "PG_TAIL_EPOCH_PROPERTY",
    "QUORUM_TERM_PROPERTY",
    "SteppedTail",
    "Tail",
    "TailHealth",
    "TailRecord",
    "TailUnavailable",
    "Waiter",
    "Waiters",
    "drain",
]

log = logging.getLogger(__name__)


class TailUnavailable(Exception):
    """The tail could not be opened: start-up stops with this one-line message (secrets redacted)."""


class AppendFailed(Exception):
    """The tail could not make the append durable. When `outcome_unknown`, its record was being
    made durable when the tail failed: it may be on disk (or committed, or chosen) and be replayed
    after a restart. One exception for every tail, so that the server handles each the same way."""

    def __init__(self, message: str, *, outcome_unknown: bool) -> None:
        super().__init__(message)
        self.outcome_unknown = outcome_unknown


# --- what the ladder asks of a tail -----------------------------------------------------------------


class TailRecord(Protocol):
    """A record recovered when the tail opened: the ladder replays those above each table's lake
    watermark before the server accepts clients."""

    @property
    def lsn(self) -> int: ...

    @property
    def payload(self) -> bytes: ...


class TailHealth(Protocol):
    """What every tail reports of itself (each reports more in `Tail.stats`)."""

    @property
    def ok(self) -> bool: ...

    @property
    def phase(self) -> str: ...

    @property
    def reason(self) -> str | None: ...

    @property
    def durable_lsn(self) -> int: ...


class Tail(Protocol):
    """A durable log of the ladder's payloads, open for one server (module docstring)."""

    # The tail's name in /metrics and in messages ("wal", "postgres", "quorum"); never branched on.
    kind: str

    @property
    def tail_id(self) -> str:
        """Names the log in the lake's snapshot summaries (`icegres.tail-id`)."""
        ...

    @property
    def next_lsn(self) -> int:
        """The LSN the next `append` gets: it is assigned before the append's first await."""
        ...

    @property
    def replay(self) -> Sequence[TailRecord]:
        """The records found at opening, in LSN order (the ladder filters them by watermark)."""
        ...

    async def append(self, payload: bytes) -> int:
        """Append one record; return its LSN once the tail holds it durably. Raises AppendFailed
        when it does not (`outcome_unknown`: it may all the same)."""
        ...

    def advance_watermark(self, lsn: int) -> None:
        """Every record up to `lsn` is in the lake: the tail may let them go."""
        ...

    def health(self) -> TailHealth: ...

    def stats(self) -> dict[str, Any]:
        """This tail's own numbers for the ladder's /metrics (trimmed LSN, segments, epoch, term)."""
        ...


# The snapshot-summary property each lake-fenced tail asserts its writer term in. One per kind of
# term, not one shared: a quorum term is "round/writer", ordered by round then writer, and a
# Postgres tail's term is its claim epoch, an integer. A property's name then fixes how its value
# is read, whoever reads it (a fence, `icegres verify`, an operator), and the quorum's property
# keeps meaning exactly what it meant before the Postgres tail was fenced too. Tail ids never
# collide across kinds (`serve.quorum_tail_id` is "q…", `serve.pg_tail_id` "pg-…"), so a fence
# never has to compare one kind of term with the other.
QUORUM_TERM_PROPERTY = "icegres.quorum-term"
PG_TAIL_EPOCH_PROPERTY = "icegres.pg-tail-epoch"


@runtime_checkable
class LakeFencedTail(Tail, Protocol):
    """A tail that writers hold in turn: a stale writer is stopped at the lake.

    The tail itself refuses a deposed writer's appends (the keepers' promises; the Postgres tail's
    advisory lock and epoch), but a writer that was paused may hold acknowledged rows it has not
    flushed while its successor replays them from the tail; resumed, it would publish them again.
    So every flush asserts `writer_term` in its snapshot summary (under `term_property`); a flush
    that finds a higher term published to its table must not commit, and the tail then
    acknowledges nothing more (`fence`). The WAL is one server's local directory (an flock): it has
    no second writer to fence."""

    # The snapshot-summary property `writer_term` goes in (QUORUM_TERM_PROPERTY, PG_TAIL_EPOCH_PROPERTY).
    term_property: str

    @property
    def writer_term(self) -> str: ...

    def outranked_by(self, published_term: str) -> bool:
        """Whether a writer of term `published_term` supersedes this one."""
        ...

    def fence(self, reason: str) -> None:
        """The lake refused a flush of this writer (`reason`): stop appending."""
        ...


# --- the appends waiting for their outcome ----------------------------------------------------------


@dataclass
class Waiter:
    done: trio.Event = field(default_factory=trio.Event)
    error: Exception | None = None


class Waiters:
    """The appends waiting for their record's outcome, by LSN (a quorum tail's slot)."""

    def __init__(self) -> None:
        self._by_lsn: dict[int, Waiter] = {}

    def add(self, lsn: int) -> Waiter:
        """Register before stepping the append: its answer may come during that very step."""
        waiter = self._by_lsn[lsn] = Waiter()
        return waiter

    async def wait(self, lsn: int, waiter: Waiter) -> None:
        """Until `waiter` is answered; then raise the error it was answered with, if any. It is
        forgotten either way: a caller cancelled meanwhile leaves its record in flight."""
        try:
            if not waiter.done.is_set():
                await waiter.done.wait()
        finally:
            self._by_lsn.pop(lsn, None)
        if waiter.error is not None:
            raise waiter.error

    def wake(self, lsns: Iterable[int]) -> None:
        """These records are durable: their appends return."""
        for lsn in lsns:
            waiter = self._by_lsn.get(lsn)
            if waiter is not None:
                waiter.done.set()

    def fail(self, lsns: Iterable[int], error: Callable[[], Exception]) -> None:
        """These appends raise `error()`: one exception each, as each is raised in its own task."""
        for lsn in lsns:
            waiter = self._by_lsn.get(lsn)
            if waiter is not None:
                waiter.error = error()
                waiter.done.set()

    def fail_unanswered(self, error: Callable[[], Exception]) -> None:
        """Every append not answered yet raises `error()` (the tail is closing)."""
        self.fail([lsn for lsn, w in self._by_lsn.items() if not w.done.is_set()], error)


async def drain(io: object) -> None:
    """Wait, shielded, for every call `io` (a segment store, a database backend) answers through
    a callback (`submit_*`): as a nursery waits for its shielded I/O tasks before the files or the
    connection those calls use are closed."""
    drained = getattr(io, "drained", None)
    if drained is not None:
        with trio.CancelScope(shield=True):
            await drained()


# --- the facade the WAL and Postgres drivers share --------------------------------------------------


class SteppedTail:
    """An open tail whose core speaks `machines/tail_events.py` (module docstring).

    A subclass names its core (`_core_step`, the phases before it is open), reports its `health`
    and `stats`, and performs the effects of its medium in `_perform_own`; it sets what those
    need before calling `__init__` here, which performs recovery's effects. Use it only from the
    trio run that made it.
    """

    kind: ClassVar[str]  # "wal" | "postgres"
    name: ClassVar[str]  # "WAL" | "Postgres", in messages
    _opening: ClassVar[frozenset[Any]]  # the core's phases before appends may be stepped
    _core_step: Callable[[Any, Any], tuple[Any, list[Any]]]
    replay: tuple[Any, ...]  # the recovered records (TailRecord)

    def __init__(self, recovery: Any, nursery: trio.Nursery) -> None:
        self._nursery = nursery
        self._state: Any = recovery.state
        self._waiters = Waiters()
        self._opened = trio.Event()
        self._idle = trio.Event()
        # Events raised while effects are being performed are stepped after them, in order
        # (an answer known at once never re-enters the core).
        self._step: InOrder[Any] = InOrder(self._step_now)
        self.replay = recovery.replay
        self.recovery = recovery
        self._perform_all(recovery.effects)
        if self._state.phase not in self._opening:
            self._opened.set()

    @property
    def tail_id(self) -> str:
        return self._state.tail_id

    @property
    def state(self) -> Any:
        return self._state

    @property
    def next_lsn(self) -> int:
        return self._state.next_lsn

    @property
    def durable_lsn(self) -> int:
        return self._state.durable_lsn

    async def append(self, payload: bytes) -> int:
        """Append one record; return its LSN once the tail holds it durably (an fsync covers it,
        or the COMMIT holding it returned).

        Raises AppendFailed if the tail is (or becomes) poisoned first; `outcome_unknown` says the
        record may be durable all the same. If the caller is cancelled while waiting, the record
        may still become durable and be replayed.
        """
        if self._state.phase in self._opening:
            await self._opened.wait()
        if len(payload) > self._state.config.payload_bytes_max:
            raise ValueError(f"payload of {len(payload)} bytes is too large for the {self.name} tail")
        lsn = self._state.next_lsn
        waiter = self._waiters.add(lsn)
        # A poisoned core answers with RefuseAppend, which fails this waiter before step returns.
        self._step(AppendRequested(payload))
        if faults.broken("durable-ack"):
            waiter.done.set()  # acknowledged before any byte of it is written (`_perform`)
        await self._waiters.wait(lsn, waiter)
        return lsn

    def advance_watermark(self, lsn: int) -> None:
        """The lake committed every record up to `lsn`: the tail may let them go."""
        if faults.broken("durable-ack"):
            lsn = min(lsn, self._state.durable_lsn)  # the lake may hold records the tail never wrote
        self._step(WatermarkAdvanced(lsn))

    async def wait_opened(self) -> None:
        await self._opened.wait()

    async def wait_settled(self) -> None:
        """Until nothing is queued or in flight (idle or poisoned)."""
        while self._state.pending or self._state.inflight:
            self._idle = trio.Event()
            await self._idle.wait()

    def _fail_waiters(self, reason: str) -> None:
        """The tail is closing: no append may wait for an answer that will never come."""
        self._waiters.fail_unanswered(partial(AppendFailed, reason, outcome_unknown=True))

    def _step_now(self, event: Any) -> None:
        self._state, effects = type(self)._core_step(self._state, event)
        self._perform_all(effects)
        if self._state.phase not in self._opening:
            self._opened.set()
        if not self._state.pending and not self._state.inflight:
            self._idle.set()

    def _perform_all(self, effects: list[Any]) -> None:
        for effect in effects:
            self._perform(effect)

    def _perform(self, effect: Any) -> None:
        match effect:
            case Acknowledge(first_lsn=first, last_lsn=last):
                self._waiters.wake(range(first, last + 1))
            case FailAppends(reason=reason, unknown=unknown, failed=failed):
                log.error("%s tail %s poisoned: %s", self.name, self.tail_id, reason)
                self._waiters.fail(unknown, partial(AppendFailed, reason, outcome_unknown=True))
                self._waiters.fail(failed, partial(AppendFailed, reason, outcome_unknown=False))
            case RefuseAppend(reason=reason):
                # The core refused the append being stepped, and gave it no LSN: next_lsn is its.
                refused = (self._state.next_lsn,)
                self._waiters.fail(refused, partial(AppendFailed, reason, outcome_unknown=False))
            case StartTimer(timer=timer, seconds=seconds):
                self._nursery.start_soon(self._timer, timer, seconds)
            case _ if faults.broken("durable-ack"):
                self._nursery.start_soon(self._perform_late, effect)
            case _:
                self._perform_own(effect)

    def _perform_own(self, effect: Any) -> None:
        raise AssertionError(f"unknown effect {effect!r}")

    async def _perform_late(self, effect: Any) -> None:
        """The durable-ack break: the medium hears of each write a second after it was acked."""
        await trio.sleep(1.0)
        self._perform_own(effect)

    async def _timer(self, timer: int, seconds: float) -> None:
        await trio.sleep(seconds)
        self._step(TimerFired(timer))
