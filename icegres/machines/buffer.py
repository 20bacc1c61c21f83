"""The group-commit buffer machine: acknowledged rows held in memory, flushed to the lake in batches.

The `--write-buffer-ms N` rung of the durable write ladder. An autocommit INSERT or COPY is handed
here as `Appended`; it is acknowledged at once (from memory, or — with a tail — because the tail
already made it durable at `lsn`), visible to every reader on this server at once, and
group-committed to Iceberg at most `window_ms` after the first buffered entry of its table, or
earlier when a table's batch reaches `max_batch_rows` / `max_batch_bytes`. A driver
(`icegres.machines.drivers.buffer`) performs the effects; `specs/buffer.toml` states the machine
independently of this code.

The buffer is a machine of machines: a machine-wide `Phase` (accepting → draining → stopped) and
one `Lane` per table with its own `LanePhase` (empty, buffering, flushing, retry_wait, adopting).
The spec lists the transitions of both levels.

Why it is shaped this way:

- One lane per table, one batch per lane at a time, batches taken as the whole pending queue in
  append order: a flush is ONE commit per table, and a table's lake holds a prefix of its appends,
  so a tail watermark (the batch's highest lsn) really means "every record of this table up to here
  is in the lake" (exactly-once replay).
- A batch keeps its `flush_id` across retries and a retry carries exactly the same entries. The
  flush id is the commit token: a retry must resolve by token first (the commit machine's
  `run_recovery`), so a batch whose earlier attempt landed despite a timeout is never applied twice.
- Readers see `snapshot ∪ visible_entries` per table. To make that exact, readers of a table switch
  snapshots only through this machine's protocol: while a batch may have landed (flushing,
  retry_wait) a table's readers must stay on their snapshot (`adoption_allowed` is False and
  `SnapshotAdopted` is a protocol error); after `FlushCommitted` the batch stays visible from memory
  and the machine asks the readers to switch (`AdoptSnapshot`); only `SnapshotAdopted` at or past
  the batch's snapshot drops it from the visible set. So at every instant each row is in exactly one
  of the two halves.
- Failures: retryable ones back off (capped doubling, `max_flush_attempts` in all) with the entries
  still visible; non-retryable ones (the schema or the table changed under the buffer: 40001,
  42P01, …) or an exhausted retry budget end in `ReportLost`, which names every entry, says whether
  the batch might still have landed (`in_doubt`), and is never silent. Reported entries leave the
  visible set.
- Time enters only as the `at_ms` of events; the machine asks for a wake-up with `ArmTimer`. Only
  `TimerFired` flushes by age; events about one table touch only that table's lane.
- Shutdown refuses new memory appends (57P01), flushes every lane at once, and emits `Stop` only
  when every lane is empty (every acked entry committed, adopted, or reported).

Admission under the tail policy: a record is durable before `Appended` arrives, so the core cannot
refuse it any more (the client would be told "failed" about a row that replay later applies). The
front door asks `refusal()` before writing the tail; a durable record that still arrives during a
shutdown is accepted and flushed with the drain. With the tail, a `ReportLost` must be recorded by
the tail too, so that replay never resurrects a reported entry.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from enum import Enum
from typing import Any

__all__ = [
    "Ack",
    "AckPolicy",
    "AdoptSnapshot",
    "Appended",
    "ArmTimer",
    "Batch",
    "BufferProtocolError",
    "Config",
    "Effect",
    "Entry",
    "Event",
    "FlushCommitted",
    "FlushFailed",
    "FlushTable",
    "Lane",
    "LanePhase",
    "Metrics",
    "Phase",
    "Recovered",
    "Refuse",
    "ReportLost",
    "ShutdownRequested",
    "SnapshotAdopted",
    "State",
    "Stop",
    "TimerFired",
    "adoption_allowed",
    "initial_state",
    "lane_of",
    "metrics",
    "reader_view",
    "recover",
    "refusal",
    "step",
    "visible_entries",
]

SQLSTATE_ADMIN_SHUTDOWN = "57P01"
SQLSTATE_INSUFFICIENT_RESOURCES = "53000"

SHUTDOWN_MESSAGE = "the server is shutting down: the write buffer accepts no new rows"
FULL_MESSAGE = "the write buffer is full: the lake is not keeping up"


# --- the domain ----------------------------------------------------------------------------------


class AckPolicy(Enum):
    MEMORY = "memory"  # ack from memory: an unclean kill loses up to window_ms of acked rows
    TAIL = "tail"  # the tail made the entry durable at `lsn` before Appended; acks are durable


@dataclass(frozen=True)
class Entry:
    """One acknowledged statement's rows, waiting for the lake. `rows_ref` is opaque to the core."""

    entry_id: str
    table: str
    row_count: int
    size_bytes: int
    lsn: int | None
    appended_ms: int
    rows_ref: Any = field(default=None, compare=False, repr=False)


@dataclass(frozen=True)
class Batch:
    """The entries of one flush of one table: the same flush id and entries on every attempt."""

    flush_id: str
    entries: tuple[Entry, ...]
    watermark: int | None  # highest lsn of the entries (tail policy), else None
    attempts: int  # FlushTable effects emitted for it so far
    started_ms: int  # when attempt 1 was emitted (flush latency)
    retry_at_ms: int | None = None  # set while backing off after a retryable failure
    committed_seq: int | None = None  # the lake snapshot that holds it, once committed
    # Totals of `entries`, kept so the per-append budget check does not walk every entry.
    row_count: int = 0
    size_bytes: int = 0


class LanePhase(Enum):
    EMPTY = "empty"  # nothing buffered, no batch
    BUFFERING = "buffering"  # entries pending, no batch
    FLUSHING = "flushing"  # a FlushTable is outstanding
    RETRY_WAIT = "retry_wait"  # backing off; the batch may have landed
    ADOPTING = "adopting"  # the batch is committed; waiting for readers to adopt its snapshot


@dataclass(frozen=True)
class Lane:
    table: str
    pending: tuple[Entry, ...] = ()  # acked, in no batch yet, in append order
    batch: Batch | None = None
    adopted_seq: int | None = None  # the snapshot this table's readers are on (None: unknown yet)
    lake_watermark: int | None = None  # highest lsn known committed to this table
    flushes: int = 0  # batches started, for flush ids
    urgent: bool = False  # a FlushRequested is waiting: flush pending the moment the lane is free
    # Totals of `pending`, kept with it (`_queued`): every append checks them, and summing the
    # queue each time made an append cost grow with the entries of the window.
    pending_rows: int = 0
    pending_bytes: int = 0

    @property
    def phase(self) -> LanePhase:
        batch = self.batch
        if batch is None:
            return LanePhase.BUFFERING if self.pending else LanePhase.EMPTY
        if batch.committed_seq is not None:
            return LanePhase.ADOPTING
        if batch.retry_at_ms is not None:
            return LanePhase.RETRY_WAIT
        return LanePhase.FLUSHING


# --- events (past tense); every event carries the driver's clock at the moment it is stepped -----


@dataclass(frozen=True)
class Appended:
    """A statement's rows for `table`; under the tail policy, durable at `lsn` already."""

    entry_id: str
    table: str
    rows_ref: Any
    lsn: int | None
    row_count: int
    size_bytes: int
    at_ms: int


@dataclass(frozen=True)
class TimerFired:
    at_ms: int


@dataclass(frozen=True)
class FlushCommitted:
    """The batch `flush_id` is in the lake as snapshot `snapshot_seq` (a sequence number)."""

    table: str
    flush_id: str
    snapshot_seq: int
    lsn_watermark: int | None
    at_ms: int


@dataclass(frozen=True)
class FlushFailed:
    """The batch did not commit. `outcome_unknown`: it may have landed (so it must be retryable)."""

    table: str
    flush_id: str
    sqlstate: str
    message: str
    retryable: bool
    at_ms: int
    outcome_unknown: bool = False


@dataclass(frozen=True)
class SnapshotAdopted:
    """The table's readers now read `snapshot_seq` (a sequence number, only ever forward).

    One at or before the snapshot readers are known to be on is a late or repeated confirmation and
    changes nothing; a newer one while a batch may have landed is a protocol error.
    """

    table: str
    snapshot_seq: int
    at_ms: int


@dataclass(frozen=True)
class FlushRequested:
    """Someone must see `table`'s pending entries in the lake (an UPDATE, DELETE or DDL is waiting):
    flush them now, or the moment the batch in flight is done, instead of at the window's end."""

    table: str
    at_ms: int


@dataclass(frozen=True)
class ShutdownRequested:
    at_ms: int


@dataclass(frozen=True)
class Recovered:
    """A restart under the tail policy: the acked records not yet in the lake, and the readers' heads.

    `entries` are exactly the tail records above their table's lake watermark and not reported
    lost, in lsn order; `heads` the snapshot each table's readers start on.
    """

    entries: tuple[Entry, ...]
    heads: tuple[tuple[str, int], ...]
    at_ms: int


Event = (
    Appended
    | TimerFired
    | FlushCommitted
    | FlushFailed
    | SnapshotAdopted
    | FlushRequested
    | ShutdownRequested
    | Recovered
)


# --- effects (imperative) ------------------------------------------------------------------------


@dataclass(frozen=True)
class Ack:
    """Tell the client its statement succeeded: its rows are visible on this server from now on."""

    entry_id: str


@dataclass(frozen=True)
class Refuse:
    """Tell the client its statement failed and nothing of it will ever be applied."""

    entry_id: str
    sqlstate: str
    message: str


@dataclass(frozen=True)
class FlushTable:
    """Commit `entries` to `table` as ONE commit whose token is `flush_id`; answer with Flush*.

    `watermark` goes into the snapshot summary with the token. From attempt 2 on, an earlier
    attempt may have landed: resolve by the token first and never apply the batch twice.
    """

    table: str
    flush_id: str
    entries: tuple[Entry, ...]
    watermark: int | None
    attempt: int


@dataclass(frozen=True)
class AdoptSnapshot:
    """Switch this table's readers to `snapshot_seq` (or later); answer with SnapshotAdopted."""

    table: str
    snapshot_seq: int


@dataclass(frozen=True)
class ReportLost:
    """Acked entries that will not reach the lake through this buffer: log it, surface it in health.

    `in_doubt`: the batch's last attempt had an unknown outcome, so the rows may be in the lake
    after all (then exactly once); otherwise they are definitely not.
    """

    table: str
    flush_id: str
    entries: tuple[Entry, ...]
    sqlstate: str
    message: str
    in_doubt: bool


@dataclass(frozen=True)
class ArmTimer:
    """Deliver TimerFired at `deadline_ms` (replacing any earlier request)."""

    deadline_ms: int


@dataclass(frozen=True)
class Stop:
    """Every acked entry is committed and adopted, or reported: the driver may exit."""


Effect = Ack | Refuse | FlushTable | AdoptSnapshot | ReportLost | ArmTimer | Stop


# --- state ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Config:
    window_ms: int = 200  # a table's batch is flushed at most this long after its oldest entry
    max_batch_rows: int = 100_000  # flush early at this many pending rows in a table
    max_batch_bytes: int = 64 * 1024 * 1024  # ... or this many pending bytes
    max_buffered_bytes: int = 512 * 1024 * 1024  # refuse memory appends while holding this much
    max_flush_attempts: int = 8
    retry_backoff_initial_ms: int = 100
    retry_backoff_max_ms: int = 5_000
    ack: AckPolicy = AckPolicy.MEMORY

    def __post_init__(self) -> None:
        if self.window_ms < 0:
            raise ValueError("window_ms must be >= 0")
        if min(self.max_batch_rows, self.max_batch_bytes, self.max_buffered_bytes) < 1:
            raise ValueError("buffer bounds must be at least 1")
        if self.max_flush_attempts < 1:
            raise ValueError("max_flush_attempts must be at least 1")
        if not 0 <= self.retry_backoff_initial_ms <= self.retry_backoff_max_ms:
            raise ValueError("need 0 <= retry_backoff_initial_ms <= retry_backoff_max_ms")

    def backoff_ms(self, failures: int) -> int:
        """Pause after the `failures`-th failed attempt of a batch (1-based): doubling, capped."""
        return min(self.retry_backoff_max_ms, self.retry_backoff_initial_ms * 2 ** (failures - 1))


class Phase(Enum):
    ACCEPTING = "accepting"
    DRAINING = "draining"  # shutdown requested: refuse memory appends, flush everything
    STOPPED = "stopped"  # drained; terminal

    @property
    def terminal(self) -> bool:
        return self is Phase.STOPPED


@dataclass(frozen=True)
class State:
    config: Config
    incarnation: str  # unique per process: flush ids (commit tokens) never repeat across restarts
    phase: Phase = Phase.ACCEPTING
    now_ms: int = 0
    lanes: tuple[Lane, ...] = ()  # sorted by table
    timer_ms: int | None = None  # the deadline of the timer the driver holds, if any
    last_lsn: int | None = None
    # Counters for /metrics.
    flushed_batches: int = 0
    flushed_rows: int = 0
    flush_failures: int = 0
    lost_entries: int = 0
    refused_appends: int = 0
    flush_latency_ms_last: int | None = None
    flush_latency_ms_max: int = 0
    flush_latency_ms_total: int = 0


@dataclass(frozen=True)
class Metrics:
    buffered_entries: int  # acked and not yet committed (pending, in flight, retrying)
    buffered_rows: int
    held_bytes: int  # everything held in memory, committed-but-not-adopted included
    oldest_unflushed_age_ms: int | None
    flushes_in_flight: int
    flushed_batches: int
    flushed_rows: int
    flush_failures: int
    lost_entries: int
    refused_appends: int
    flush_latency_ms_last: int | None
    flush_latency_ms_max: int
    flush_latency_ms_total: int


class BufferProtocolError(Exception):
    """An event the current state does not accept (a driver, front-end or world bug)."""


# --- queries (pure) ------------------------------------------------------------------------------


def initial_state(config: Config, incarnation: str) -> State:
    if not incarnation:
        raise ValueError("an incarnation id is required")
    return State(config=config, incarnation=incarnation)


def lane_of(state: State, table: str) -> Lane:
    for lane in state.lanes:
        if lane.table == table:
            return lane
    return Lane(table)


def visible_entries(state: State, table: str) -> tuple[Entry, ...]:
    """The exact entries a reader of `table` must union with its adopted snapshot, in append order.

    Each acked entry not yet in the readers' snapshot is here exactly once: a committed batch until
    its snapshot is adopted, a batch in flight or backing off, and the pending queue.
    """
    lane = lane_of(state, table)
    batch = () if lane.batch is None else lane.batch.entries
    return batch + lane.pending


def reader_view(state: State, table: str) -> tuple[int | None, tuple[Entry, ...]]:
    """(the snapshot readers of `table` are on, the entries to union with it)."""
    return lane_of(state, table).adopted_seq, visible_entries(state, table)


def adoption_allowed(state: State, table: str) -> bool:
    """May the readers of `table` switch to a newer snapshot now? Not while a batch may have landed."""
    return lane_of(state, table).phase not in (LanePhase.FLUSHING, LanePhase.RETRY_WAIT)


def refusal(state: State, size_bytes: int) -> tuple[str, str] | None:
    """(sqlstate, message) if an append of `size_bytes` must be refused now, else None.

    The core applies it to memory appends; under the tail policy the front door must ask before
    writing the tail, because a durable record can no longer be refused.
    """
    if state.phase is not Phase.ACCEPTING:
        return SQLSTATE_ADMIN_SHUTDOWN, SHUTDOWN_MESSAGE
    held = sum(_held_bytes(lane) for lane in state.lanes)
    if held and held + size_bytes > state.config.max_buffered_bytes:
        # An entry bigger than the whole budget still gets in alone, so nothing starves forever.
        return SQLSTATE_INSUFFICIENT_RESOURCES, FULL_MESSAGE
    return None


def metrics(state: State) -> Metrics:
    """The /metrics counters, all derived from the state (time from the last event's clock)."""
    unflushed: list[Entry] = []
    held = in_flight = 0
    for lane in state.lanes:
        held += _held_bytes(lane)
        unflushed.extend(lane.pending)
        if lane.batch is not None and lane.batch.committed_seq is None:
            unflushed.extend(lane.batch.entries)
            in_flight += 1
    oldest = min((e.appended_ms for e in unflushed), default=None)
    return Metrics(
        buffered_entries=len(unflushed),
        buffered_rows=sum(e.row_count for e in unflushed),
        held_bytes=held,
        oldest_unflushed_age_ms=None if oldest is None else state.now_ms - oldest,
        flushes_in_flight=in_flight,
        flushed_batches=state.flushed_batches,
        flushed_rows=state.flushed_rows,
        flush_failures=state.flush_failures,
        lost_entries=state.lost_entries,
        refused_appends=state.refused_appends,
        flush_latency_ms_last=state.flush_latency_ms_last,
        flush_latency_ms_max=state.flush_latency_ms_max,
        flush_latency_ms_total=state.flush_latency_ms_total,
    )


# --- the transition function ---------------------------------------------------------------------


def step(state: State, event: Event) -> tuple[State, list[Effect]]:
    """The only producer of a new State: apply `event`, return the next state and its effects.

    Effects come in the order they must be performed: per-table effects first (Ack, Refuse,
    ReportLost, FlushTable, AdoptSnapshot), then at most one ArmTimer, then Stop. At most one
    FlushTable per table is ever outstanding. Raises BufferProtocolError for an event the state does
    not accept: a terminal state, time going backwards, an answer to a flush that is not
    outstanding, a snapshot switch while a batch may have landed, a malformed append.
    """
    handler = _HANDLERS.get((state.phase, type(event)))
    if handler is None:
        raise BufferProtocolError(f"{type(event).__name__} is not accepted in {state.phase.value}")
    if event.at_ms < state.now_ms:
        raise BufferProtocolError(f"time went backwards: {event.at_ms} < {state.now_ms}")
    state, effects = handler(replace(state, now_ms=event.at_ms), event)
    return _finish(state, effects)


def recover(
    config: Config,
    incarnation: str,
    entries: Iterable[Entry],
    heads: Iterable[tuple[str, int]],
    at_ms: int,
) -> tuple[State, list[Effect]]:
    """The state of a restarted process: replay the tail's records not yet in the lake, flush at once.

    Under the memory policy nothing survives a crash, so there is nothing to recover from (and the
    docs say so): a memory buffer starts with `initial_state`.
    """
    return step(initial_state(config, incarnation), Recovered(tuple(entries), tuple(heads), at_ms))


def _on_appended(state: State, event: Appended) -> tuple[State, list[Effect]]:
    config = state.config
    if not event.table or event.row_count < 0 or event.size_bytes < 0 or not event.entry_id:
        raise BufferProtocolError(f"malformed append {event!r}")
    if config.ack is AckPolicy.MEMORY:
        if event.lsn is not None:
            raise BufferProtocolError("an lsn under the memory policy: is a tail configured?")
        refused = refusal(state, event.size_bytes)
        if refused is not None:
            counted = replace(state, refused_appends=state.refused_appends + 1)
            return counted, [Refuse(event.entry_id, *refused)]
    else:
        if event.lsn is None:
            raise BufferProtocolError("the tail policy needs the lsn the tail made durable")
        if state.last_lsn is not None and event.lsn <= state.last_lsn:
            raise BufferProtocolError(f"lsn {event.lsn} after {state.last_lsn}: tail out of order")
        state = replace(state, last_lsn=event.lsn)
    lane = lane_of(state, event.table)
    if any(e.entry_id == event.entry_id for e in visible_entries(state, event.table)):
        raise BufferProtocolError(f"entry {event.entry_id} appended twice")
    entry = Entry(
        event.entry_id,
        event.table,
        event.row_count,
        event.size_bytes,
        event.lsn,
        event.at_ms,
        event.rows_ref,
    )
    lane = _queued(lane, entry)
    effects: list[Effect] = [Ack(event.entry_id)]
    return _flush_if_due(state, lane, effects)


def _on_timer(state: State, event: TimerFired) -> tuple[State, list[Effect]]:
    if state.timer_ms is not None and event.at_ms >= state.timer_ms:
        state = replace(state, timer_ms=None)  # the driver's timer is spent
    effects: list[Effect] = []
    for lane in state.lanes:
        batch = lane.batch
        if lane.phase is LanePhase.RETRY_WAIT and batch is not None:
            assert batch.retry_at_ms is not None
            if state.now_ms >= batch.retry_at_ms:
                state = _resend(state, lane, batch, effects)
        elif lane.phase is LanePhase.BUFFERING and _due(state, lane):
            state = _start_flush(state, lane, effects)
    return state, effects


def _on_committed(state: State, event: FlushCommitted) -> tuple[State, list[Effect]]:
    lane, batch = _outstanding(state, event.table, event.flush_id)
    if event.lsn_watermark != batch.watermark:
        raise BufferProtocolError(
            f"flush {batch.flush_id} committed watermark {event.lsn_watermark}, "
            f"asked {batch.watermark}"
        )
    if lane.adopted_seq is not None and event.snapshot_seq <= lane.adopted_seq:
        raise BufferProtocolError(
            f"flush {batch.flush_id} landed as snapshot {event.snapshot_seq}, not after the "
            f"readers' {lane.adopted_seq}: readers switched while it was in flight"
        )
    latency = state.now_ms - batch.started_ms
    lake_watermark = lane.lake_watermark
    if batch.watermark is not None:
        lake_watermark = max(batch.watermark, lake_watermark or batch.watermark)
    lane = replace(
        lane,
        batch=replace(batch, committed_seq=event.snapshot_seq, retry_at_ms=None),
        lake_watermark=lake_watermark,
    )
    state = replace(
        _with_lane(state, lane),
        flushed_batches=state.flushed_batches + 1,
        flushed_rows=state.flushed_rows + batch.row_count,
        flush_latency_ms_last=latency,
        flush_latency_ms_max=max(state.flush_latency_ms_max, latency),
        flush_latency_ms_total=state.flush_latency_ms_total + latency,
    )
    return state, [AdoptSnapshot(lane.table, event.snapshot_seq)]


def _on_failed(state: State, event: FlushFailed) -> tuple[State, list[Effect]]:
    lane, batch = _outstanding(state, event.table, event.flush_id)
    if event.outcome_unknown and not event.retryable:
        # A batch that may have landed must be resolved by its token, which only a retry does.
        raise BufferProtocolError(f"flush {batch.flush_id}: an unknown outcome must be retryable")
    state = replace(state, flush_failures=state.flush_failures + 1)
    config = state.config
    if event.retryable and batch.attempts < config.max_flush_attempts:
        retry_at = state.now_ms + config.backoff_ms(batch.attempts)
        lane = replace(lane, batch=replace(batch, retry_at_ms=retry_at))
        return _with_lane(state, lane), []
    message = event.message
    if event.retryable:
        message = f"gave up after {batch.attempts} flush attempts: {event.message}"
    report = ReportLost(
        lane.table, batch.flush_id, batch.entries, event.sqlstate, message, event.outcome_unknown
    )
    state = replace(state, lost_entries=state.lost_entries + len(batch.entries))
    return _flush_if_due(state, replace(lane, batch=None), [report])


def _on_adopted(state: State, event: SnapshotAdopted) -> tuple[State, list[Effect]]:
    lane = lane_of(state, event.table)
    if lane.adopted_seq is not None and event.snapshot_seq <= lane.adopted_seq:
        # A late or repeated confirmation: the readers are there already. Harmless in any phase.
        return state, []
    if not adoption_allowed(state, event.table):
        raise BufferProtocolError(
            f"readers of {event.table} switched snapshot while flush "
            f"{lane.batch.flush_id if lane.batch else '?'} may have landed"
        )
    lane = replace(lane, adopted_seq=event.snapshot_seq)
    batch = lane.batch
    if batch is not None and batch.committed_seq is not None:
        if event.snapshot_seq >= batch.committed_seq:
            lane = replace(lane, batch=None)  # the readers' snapshot holds it now
    return _flush_if_due(state, lane, [])


def _on_flush_requested(state: State, event: FlushRequested) -> tuple[State, list[Effect]]:
    lane = lane_of(state, event.table)
    if not lane.pending or lane.urgent:
        return state, []  # nothing waits outside a batch, or it is already marked
    return _flush_if_due(state, replace(lane, urgent=True), [])


def _on_shutdown(state: State, event: ShutdownRequested) -> tuple[State, list[Effect]]:
    state = replace(state, phase=Phase.DRAINING)
    effects: list[Effect] = []
    for lane in state.lanes:
        if lane.phase is LanePhase.BUFFERING:
            state = _start_flush(state, lane, effects)
    return state, effects


def _on_shutdown_again(state: State, event: ShutdownRequested) -> tuple[State, list[Effect]]:
    return state, []  # a second SIGTERM: already draining


def _on_recovered(state: State, event: Recovered) -> tuple[State, list[Effect]]:
    if state.config.ack is not AckPolicy.TAIL:
        raise BufferProtocolError("only the tail policy has anything to recover")
    if state.lanes or state.last_lsn is not None:
        raise BufferProtocolError("recovery must be the first event")
    lanes = {table: Lane(table, adopted_seq=seq) for table, seq in event.heads}
    last_lsn: int | None = None
    for entry in event.entries:
        if entry.lsn is None or (last_lsn is not None and entry.lsn <= last_lsn):
            raise BufferProtocolError(f"replayed entry {entry.entry_id} out of lsn order")
        last_lsn = entry.lsn
        lane = lanes.get(entry.table, Lane(entry.table))
        # The old process's clock means nothing here: age counts from the replay.
        entry = replace(entry, appended_ms=event.at_ms)
        lanes[entry.table] = _queued(lane, entry)
    state = replace(state, lanes=tuple(lanes[t] for t in sorted(lanes)), last_lsn=last_lsn)
    effects: list[Effect] = []
    for lane in state.lanes:
        if lane.phase is LanePhase.BUFFERING:
            # Replayed records are acked already: get them into the lake before anything else.
            state = _start_flush(state, lane, effects)
    return state, effects


# --- helpers -------------------------------------------------------------------------------------


def _due(state: State, lane: Lane) -> bool:
    if not lane.pending:
        return False
    config = state.config
    return (
        state.phase is Phase.DRAINING
        or lane.urgent
        or lane.pending_rows >= config.max_batch_rows
        or lane.pending_bytes >= config.max_batch_bytes
        or state.now_ms >= lane.pending[0].appended_ms + config.window_ms
    )


def _flush_if_due(state: State, lane: Lane, effects: list[Effect]) -> tuple[State, list[Effect]]:
    """Store `lane`; if it is free and due, start its next batch."""
    state = _with_lane(state, lane)
    if lane.phase is LanePhase.BUFFERING and _due(state, lane):
        state = _start_flush(state, lane, effects)
    return state, effects


def _start_flush(state: State, lane: Lane, effects: list[Effect]) -> State:
    number = lane.flushes + 1
    entries = lane.pending
    lsns = [e.lsn for e in entries if e.lsn is not None]
    batch = Batch(
        flush_id=f"{state.incarnation}:{lane.table}:{number}",
        entries=entries,
        watermark=max(lsns) if lsns else None,
        attempts=1,
        started_ms=state.now_ms,
        row_count=lane.pending_rows,
        size_bytes=lane.pending_bytes,
    )
    effects.append(FlushTable(lane.table, batch.flush_id, entries, batch.watermark, 1))
    emptied = replace(lane, pending=(), pending_rows=0, pending_bytes=0)
    return _with_lane(state, replace(emptied, batch=batch, flushes=number, urgent=False))


def _queued(lane: Lane, entry: Entry) -> Lane:
    return replace(
        lane,
        pending=lane.pending + (entry,),
        pending_rows=lane.pending_rows + entry.row_count,
        pending_bytes=lane.pending_bytes + entry.size_bytes,
    )


def _resend(state: State, lane: Lane, batch: Batch, effects: list[Effect]) -> State:
    attempt = batch.attempts + 1
    batch = replace(batch, attempts=attempt, retry_at_ms=None)
    effects.append(FlushTable(lane.table, batch.flush_id, batch.entries, batch.watermark, attempt))
    return _with_lane(state, replace(lane, batch=batch))


def _outstanding(state: State, table: str, flush_id: str) -> tuple[Lane, Batch]:
    lane = lane_of(state, table)
    batch = lane.batch
    if lane.phase is not LanePhase.FLUSHING or batch is None or batch.flush_id != flush_id:
        raise BufferProtocolError(f"no flush {flush_id} outstanding for {table}")
    return lane, batch


def _with_lane(state: State, lane: Lane) -> State:
    lanes = [other for other in state.lanes if other.table != lane.table]
    lanes.append(lane)
    lanes.sort(key=lambda other: other.table)
    return replace(state, lanes=tuple(lanes))


def _held_bytes(lane: Lane) -> int:
    batch = 0 if lane.batch is None else lane.batch.size_bytes
    return batch + lane.pending_bytes


def _desired_deadline(state: State) -> int | None:
    deadlines = []
    for lane in state.lanes:
        phase = lane.phase
        if phase is LanePhase.RETRY_WAIT and lane.batch is not None:
            assert lane.batch.retry_at_ms is not None
            deadlines.append(lane.batch.retry_at_ms)
        elif phase is LanePhase.BUFFERING and state.phase is Phase.ACCEPTING:
            deadlines.append(lane.pending[0].appended_ms + state.config.window_ms)
    return min(deadlines, default=None)


def _finish(state: State, effects: list[Effect]) -> tuple[State, list[Effect]]:
    if state.phase is Phase.DRAINING and all(lane.phase is LanePhase.EMPTY for lane in state.lanes):
        return replace(state, phase=Phase.STOPPED, timer_ms=None), [*effects, Stop()]
    # Only ever arm earlier: a timer that fires with nothing due is harmless and re-arms then.
    desired = _desired_deadline(state)
    if desired is not None and (state.timer_ms is None or desired < state.timer_ms):
        return replace(state, timer_ms=desired), [*effects, ArmTimer(desired)]
    return state, effects


_Handler = Callable[[State, Any], tuple[State, list[Effect]]]

_HANDLERS: dict[tuple[Phase, type], _Handler] = {
    (Phase.ACCEPTING, Appended): _on_appended,
    (Phase.ACCEPTING, TimerFired): _on_timer,
    (Phase.ACCEPTING, FlushCommitted): _on_committed,
    (Phase.ACCEPTING, FlushFailed): _on_failed,
    (Phase.ACCEPTING, SnapshotAdopted): _on_adopted,
    (Phase.ACCEPTING, FlushRequested): _on_flush_requested,
    (Phase.ACCEPTING, ShutdownRequested): _on_shutdown,
    (Phase.ACCEPTING, Recovered): _on_recovered,
    (Phase.DRAINING, Appended): _on_appended,
    (Phase.DRAINING, TimerFired): _on_timer,
    (Phase.DRAINING, FlushCommitted): _on_committed,
    (Phase.DRAINING, FlushFailed): _on_failed,
    (Phase.DRAINING, SnapshotAdopted): _on_adopted,
    (Phase.DRAINING, FlushRequested): _on_flush_requested,
    (Phase.DRAINING, ShutdownRequested): _on_shutdown_again,
}
