"""The local WAL tail machine: acknowledged writes are durable in an fsynced log before the lake.

The `--tail-dir PATH` rung of the durable write ladder (issue 6). A writer hands an opaque payload
(an Arrow IPC stream of the rows plus the target table) to `AppendRequested`; the core gives it the
next LSN, frames it (`icegres.machines.wal_format`) and acknowledges it only after an fsync that
covers it has completed. A driver (`icegres.machines.drivers.wal`) performs the effects with real
file I/O. `specs/wal.toml` is the independent statement of this machine.

Why it is shaped this way:

- Group fsync: at most one Write+Fsync is in flight. Appends that arrive meanwhile are queued and
  ride the next one, so N concurrent writers share one fsync instead of queueing N of them. An
  optional window (`group_fsync_window_seconds`) holds the first append of an idle tail to gather
  more; the batch bound (`batch_bytes_max`) cuts the window short.
- An I/O failure on the write path (write, fsync, segment creation, recovery's syncs) poisons the
  tail for good. PostgreSQL's fsyncgate lesson: after a failed fsync the kernel may have dropped the
  dirty pages and marked them clean, so a retried fsync "succeeds" without the data. Nothing is
  acknowledged after that; queued appends fail definitely, the in-flight batch fails as "outcome
  unknown" (its bytes may be on disk and be replayed after a restart). Health reports it.
- Segments rotate before a write that would take a non-empty segment past `segment_bytes_max`. A
  segment is deleted only when it is not the current one and every record in it is at or below
  the watermark: the lake's committed LSN, fed in as `WatermarkAdvanced`.
- `recover()` scans the durable files: a torn or corrupt final record of the last segment is cut
  (`SyncSegment` truncates it), anything else out of place refuses to start (`PoisonedTail`).
  Every kept segment is fsynced before its records are replayed: after a process crash the page
  cache still holds bytes that were never fsynced, and replaying them to the lake before they are
  durable here could let a later power loss take them back (PostgreSQL fsyncs its data directory
  at crash recovery for the same reason).
- Time enters only as `TimerFired`; the core asks for it with `StartTimer`. Timers are numbered,
  and a timer that fires after its batch already left is stale and ignored.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from enum import Enum
from typing import Any

# Appends, acknowledgements, poisoning, timers and the watermark: what both tail cores share.
from icegres.machines.tail_events import (
    Acknowledge,
    AppendRequested,
    FailAppends,
    RefuseAppend,
    StartTimer,
    TimerFired,
    WatermarkAdvanced,
)
from icegres.machines.wal_format import (
    Record,
    SegmentScan,
    WalFormatError,
    encode_record,
    is_tail_id,
    parse_segment_name,
    scan_segment,
    segment_name,
)

__all__ = [
    "Acknowledge",
    "AppendRequested",
    "Config",
    "CreateSegment",
    "Cut",
    "DeleteSegments",
    "DirectorySynced",
    "Effect",
    "Event",
    "FailAppends",
    "Fsync",
    "FsyncDone",
    "FsyncFailed",
    "Health",
    "IoFailed",
    "PendingRecord",
    "Phase",
    "PoisonedTail",
    "Recovery",
    "RefuseAppend",
    "Segment",
    "SegmentCreated",
    "SegmentSynced",
    "StartTimer",
    "State",
    "SyncDirectory",
    "SyncSegment",
    "TailRecovered",
    "TimerFired",
    "WalProtocolError",
    "WatermarkAdvanced",
    "Write",
    "WriteDone",
    "health",
    "recover",
    "step",
]


# --- configuration -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Config:
    # A segment is rotated before a write that would take it past this (a record larger than the
    # bound still goes into a segment of its own).
    segment_bytes_max: int = 64 * 1024 * 1024
    # One Write carries at most this many bytes (at least one record).
    batch_bytes_max: int = 4 * 1024 * 1024
    # How long the first append of an idle tail waits for company before it is written; 0 writes
    # at once (appends still group behind an fsync in flight).
    group_fsync_window_seconds: float = 0.0
    payload_bytes_max: int = 256 * 1024 * 1024

    def __post_init__(self) -> None:
        if self.segment_bytes_max < 1 or self.batch_bytes_max < 1 or self.payload_bytes_max < 0:
            raise ValueError("segment_bytes_max and batch_bytes_max must be at least 1")
        if self.group_fsync_window_seconds < 0:
            raise ValueError("group_fsync_window_seconds must be >= 0")


# --- events (past tense) -------------------------------------------------------------------------


@dataclass(frozen=True)
class Segment:
    first_lsn: int  # names the file
    length: int  # bytes written to it (durable once no batch is in flight)
    last_lsn: int  # highest LSN in it; first_lsn - 1 while empty


@dataclass(frozen=True)
class TailRecovered:
    """What recover() found on disk, and the effects that make it durable before serving."""

    tail_id: str
    segments: tuple[Segment, ...]
    next_lsn: int
    watermark_lsn: int
    opening: tuple[Effect, ...]  # performed one after another; the last is SyncDirectory


@dataclass(frozen=True)
class WriteDone:
    pass


@dataclass(frozen=True)
class FsyncDone:
    pass


@dataclass(frozen=True)
class SegmentCreated:
    first_lsn: int


@dataclass(frozen=True)
class SegmentSynced:
    first_lsn: int


@dataclass(frozen=True)
class DirectorySynced:
    pass


@dataclass(frozen=True)
class IoFailed:
    """A write, a file creation or a truncation failed (EIO, ENOSPC, ...)."""

    reason: str


@dataclass(frozen=True)
class FsyncFailed:
    """An fsync (of a segment or the directory) failed. Never retried: see the module docstring."""

    reason: str


Event = (
    TailRecovered
    | AppendRequested
    | TimerFired
    | WriteDone
    | FsyncDone
    | SegmentCreated
    | SegmentSynced
    | DirectorySynced
    | IoFailed
    | FsyncFailed
    | WatermarkAdvanced
)


# --- effects (imperative) ------------------------------------------------------------------------


@dataclass(frozen=True)
class Write:
    """Write `data` at `offset` of segment `segment` (records first_lsn..last_lsn). -> WriteDone."""

    segment: int
    offset: int
    data: bytes = field(repr=False)
    first_lsn: int
    last_lsn: int


@dataclass(frozen=True)
class Fsync:
    """fsync the segment file. -> FsyncDone | FsyncFailed."""

    segment: int


@dataclass(frozen=True)
class CreateSegment:
    """Create the (empty) segment file exclusively, fsync it and the directory. -> SegmentCreated."""

    first_lsn: int


@dataclass(frozen=True)
class SyncSegment:
    """Recovery: truncate the segment file to `length` bytes (cutting a torn tail), then fsync it."""

    segment: int
    length: int


@dataclass(frozen=True)
class SyncDirectory:
    """fsync the tail directory, making file creations and deletions durable. -> DirectorySynced."""


@dataclass(frozen=True)
class DeleteSegments:
    """Unlink these segment files, then fsync the directory. Best effort, nobody answers."""

    segments: tuple[int, ...]


Effect = (
    Write
    | Fsync
    | CreateSegment
    | SyncSegment
    | SyncDirectory
    | DeleteSegments
    | StartTimer
    | Acknowledge
    | FailAppends
    | RefuseAppend
)


# --- state ---------------------------------------------------------------------------------------


class Phase(Enum):
    STARTING = "starting"  # before recover() has described the disk
    OPENING = "opening"  # recovery's syncs in flight, one at a time
    IDLE = "idle"  # nothing queued, nothing in flight
    GATHERING = "gathering"  # appends queued, the group window's timer armed
    ROTATING = "rotating"  # a CreateSegment outstanding before the next batch
    WRITING = "writing"  # a batch's Write outstanding
    SYNCING = "syncing"  # the batch's Fsync outstanding; new appends queue for the next one
    POISONED = "poisoned"  # an I/O failure: nothing more is written or acknowledged


@dataclass(frozen=True)
class PendingRecord:
    lsn: int
    data: bytes = field(repr=False)  # encoded


@dataclass(frozen=True)
class State:
    config: Config
    phase: Phase = Phase.STARTING
    tail_id: str = ""
    next_lsn: int = 1
    durable_lsn: int = 0  # every LSN up to here is acknowledged (or was recovered and synced)
    watermark_lsn: int = 0  # every LSN up to here is in the lake
    segments: tuple[Segment, ...] = ()  # oldest first; the last is the current one
    pending: tuple[PendingRecord, ...] = ()  # queued, not yet written
    inflight: range = range(0)  # LSNs of the batch being written and fsynced
    outstanding: Effect | None = None  # the one I/O effect whose answer the core waits for
    opening: tuple[Effect, ...] = ()  # recovery's remaining effects
    timer: int = 0  # number of the latest StartTimer
    poison_reason: str | None = None

    @property
    def pending_bytes(self) -> int:
        return sum(len(p.data) for p in self.pending)


class WalProtocolError(Exception):
    """An event the current state does not accept (a driver bug)."""


class PoisonedTail(Exception):
    """recover() refuses to start: the files hold damage that cutting cannot explain away."""


@dataclass(frozen=True)
class Health:
    ok: bool
    phase: str
    reason: str | None
    durable_lsn: int
    watermark_lsn: int
    next_lsn: int
    pending_records: int
    segments: int


def health(state: State) -> Health:
    """What /health and /ready report. `ok` is False once poisoned, and stays so."""
    return Health(
        ok=state.phase is not Phase.POISONED,
        phase=state.phase.value,
        reason=state.poison_reason,
        durable_lsn=state.durable_lsn,
        watermark_lsn=state.watermark_lsn,
        next_lsn=state.next_lsn,
        pending_records=len(state.pending) + len(state.inflight),
        segments=len(state.segments),
    )


# --- recovery ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Cut:
    segment: str  # file name
    valid_bytes: int
    torn_bytes: int
    reason: str


@dataclass(frozen=True)
class Recovery:
    state: State
    effects: list[Effect]
    replay: tuple[Record, ...]  # records above the watermark, in LSN order: not yet in the lake
    cuts: tuple[Cut, ...]  # torn tails that SyncSegment will cut

    @property
    def tail_id(self) -> str:
        return self.state.tail_id


def recover(
    files: Mapping[str, bytes],
    config: Config,
    *,
    watermark_lsn: int,
    new_tail_id: str | None = None,
) -> Recovery:
    """The state of a tail directory after a crash (or a clean stop), and what to replay.

    `files` maps every file name in the directory to its contents (names that are not segments
    are ignored); `watermark_lsn` is the lake's committed LSN for this tail (0: none).
    `new_tail_id` names the tail of an empty directory. Records above the watermark are returned
    for replay; they become durable through the returned effects, which must complete (state
    leaves OPENING) before they are replayed. Raises PoisonedTail when a segment other than the
    last ends in a bad record, a bad record is followed by a valid one, records of the tail are
    missing above the watermark, or the directory mixes tails.
    """
    if watermark_lsn < 0:
        raise ValueError("watermark_lsn must be >= 0")
    named: list[tuple[int, str, str]] = []
    for name in files:
        try:
            parsed = parse_segment_name(name)
        except WalFormatError as exc:
            raise PoisonedTail(str(exc)) from None
        if parsed is not None:
            named.append((parsed[0], parsed[1], name))
    named.sort()
    tails = {tail for _, tail, _ in named}
    if len(tails) > 1:
        raise PoisonedTail(f"the tail directory holds segments of several tails: {sorted(tails)}")
    if tails:
        tail_id = tails.pop()
    elif new_tail_id is not None and is_tail_id(new_tail_id):
        tail_id = new_tail_id
    else:
        raise ValueError(f"an empty tail directory needs a valid new_tail_id, not {new_tail_id!r}")

    segments: list[Segment] = []
    opening: list[Effect] = []
    replay: list[Record] = []
    cuts: list[Cut] = []
    last_lsn = 0  # the highest LSN known to have been written (records, or implied by names)
    for index, (first_lsn, _, name) in enumerate(named):
        data = files[name]
        is_last = index == len(named) - 1
        if not is_last and named[index + 1][0] - 1 <= watermark_lsn:
            # Wholly in the lake: not read, not replayed, deleted once the watermark is fed in.
            implied_last = named[index + 1][0] - 1
            segments.append(Segment(first_lsn, len(data), implied_last))
            last_lsn = max(last_lsn, implied_last)
            continue
        scan = _scan(name, data, first_lsn, tail_id)
        if scan.torn_bytes:
            if not is_last:
                raise PoisonedTail(
                    f"segment {name} ends in a bad record ({scan.torn_reason}) but newer "
                    "segments follow it: acknowledged records may be damaged"
                )
            cuts.append(Cut(name, scan.valid_bytes, scan.torn_bytes, scan.torn_reason))
        for record in scan.records:
            if record.lsn > watermark_lsn:
                expected = max(last_lsn, watermark_lsn) + 1
                if record.lsn != expected:
                    raise PoisonedTail(
                        f"records {expected}..{record.lsn - 1} of tail {tail_id} are missing "
                        f"above the lake's watermark {watermark_lsn} (segment {name})"
                    )
                replay.append(record)
            last_lsn = max(last_lsn, record.lsn)
        if scan.records:
            segment_last = scan.records[-1].lsn
        else:
            segment_last = first_lsn - 1
            if first_lsn - 1 > max(last_lsn, watermark_lsn):
                raise PoisonedTail(
                    f"empty segment {name} starts after LSN {max(last_lsn, watermark_lsn)}: "
                    "records before it are missing"
                )
        last_lsn = max(last_lsn, segment_last)
        segments.append(Segment(first_lsn, scan.valid_bytes, segment_last))
        opening.append(SyncSegment(first_lsn, scan.valid_bytes))
    next_lsn = max(last_lsn, watermark_lsn) + 1
    if not segments or segments[-1].last_lsn + 1 != next_lsn:
        # A fresh directory, or the lake is ahead of the disk: LSNs the lake already has are never
        # reused, so writing continues in a new segment named by the next LSN.
        opening.append(CreateSegment(next_lsn))
    opening.append(SyncDirectory())
    recovered = TailRecovered(tail_id, tuple(segments), next_lsn, watermark_lsn, tuple(opening))
    state, effects = step(State(config=config), recovered)
    return Recovery(state, effects, tuple(replay), tuple(cuts))


def _scan(name: str, data: bytes, first_lsn: int, tail_id: str) -> SegmentScan:
    try:
        return scan_segment(data, first_lsn=first_lsn, tail_id=tail_id)
    except WalFormatError as exc:
        raise PoisonedTail(f"segment {name}: {exc}") from None


def segment_file(state: State, first_lsn: int) -> str:
    """The file name of one of this tail's segments."""
    return segment_name(state.tail_id, first_lsn)


# --- the transition function ---------------------------------------------------------------------


def step(state: State, event: Event) -> tuple[State, list[Effect]]:
    """The only producer of a new State: apply `event`, return the next state and its effects.

    Effects are in the order they must be performed. At most one effect answered by an I/O event
    (Write, Fsync, CreateSegment, SyncSegment, SyncDirectory) is outstanding at any time; timers
    and deletions may overlap it. Raises WalProtocolError for an event the state does not accept.
    """
    handler = _HANDLERS.get((state.phase, type(event)))
    if handler is None:
        raise WalProtocolError(f"{type(event).__name__} is not accepted in {state.phase.value}")
    return handler(state, event)


def _on_recovered(state: State, event: TailRecovered) -> tuple[State, list[Effect]]:
    if not event.opening or not isinstance(event.opening[-1], SyncDirectory):
        raise WalProtocolError("recovery must end by syncing the directory")
    state = replace(
        state,
        tail_id=event.tail_id,
        segments=event.segments,
        next_lsn=event.next_lsn,
        watermark_lsn=event.watermark_lsn,
    )
    return _next_opening(state, event.opening)


def _next_opening(state: State, opening: tuple[Effect, ...]) -> tuple[State, list[Effect]]:
    effect = opening[0]
    state = replace(state, phase=Phase.OPENING, outstanding=effect, opening=opening[1:])
    return state, [effect]


def _on_opening_answer(state: State, event: Event) -> tuple[State, list[Effect]]:
    _expect_answer(state, event)
    if isinstance(event, SegmentCreated):
        state = replace(state, segments=state.segments + (_empty_segment(event.first_lsn),))
    if state.opening:
        return _next_opening(state, state.opening)
    # Everything recovered is durable now: it counts as acknowledged from here on.
    opened = replace(
        state, phase=Phase.IDLE, outstanding=None, durable_lsn=state.next_lsn - 1, opening=()
    )
    return opened, []


def _on_append(state: State, event: AppendRequested) -> tuple[State, list[Effect]]:
    if len(event.payload) > state.config.payload_bytes_max:
        raise WalProtocolError(
            f"payload of {len(event.payload)} bytes exceeds {state.config.payload_bytes_max}"
        )
    lsn = state.next_lsn
    data = encode_record(Record(lsn, state.tail_id, event.payload))
    state = replace(state, next_lsn=lsn + 1, pending=state.pending + (PendingRecord(lsn, data),))
    if state.phase in (Phase.ROTATING, Phase.WRITING, Phase.SYNCING):
        return state, []  # rides the next fsync
    full = state.pending_bytes >= state.config.batch_bytes_max
    window = state.config.group_fsync_window_seconds
    if state.phase is Phase.IDLE:
        if window == 0 or full:
            return _start_batch(state)
        timer = state.timer + 1
        return replace(state, phase=Phase.GATHERING, timer=timer), [StartTimer(timer, window)]
    # GATHERING
    return _start_batch(state) if full else (state, [])


def _on_append_poisoned(state: State, event: AppendRequested) -> tuple[State, list[Effect]]:
    return state, [RefuseAppend(f"the WAL tail is poisoned: {state.poison_reason}")]


def _on_timer(state: State, event: TimerFired) -> tuple[State, list[Effect]]:
    if not 1 <= event.timer <= state.timer:
        raise WalProtocolError(f"timer {event.timer} was never started")
    if state.phase is Phase.GATHERING and event.timer == state.timer:
        return _start_batch(state)
    return state, []  # stale: its batch already left on the size bound


def _on_segment_created(state: State, event: SegmentCreated) -> tuple[State, list[Effect]]:
    _expect_answer(state, event)
    state = replace(state, segments=state.segments + (_empty_segment(event.first_lsn),))
    return _start_batch(replace(state, outstanding=None))


def _on_write_done(state: State, event: WriteDone) -> tuple[State, list[Effect]]:
    write = _expect_answer(state, event)
    assert isinstance(write, Write)
    fsync = Fsync(write.segment)
    return replace(state, phase=Phase.SYNCING, outstanding=fsync), [fsync]


def _on_fsync_done(state: State, event: FsyncDone) -> tuple[State, list[Effect]]:
    _expect_answer(state, event)
    batch = state.inflight
    ack = Acknowledge(batch.start, batch.stop - 1)
    state = replace(state, durable_lsn=batch.stop - 1, inflight=range(0), outstanding=None)
    if not state.pending:
        return replace(state, phase=Phase.IDLE), [ack]
    # These already waited for an fsync: no window again.
    state, effects = _start_batch(state)
    return state, [ack, *effects]


def _on_io_failed(state: State, event: IoFailed | FsyncFailed) -> tuple[State, list[Effect]]:
    _expect_answer(state, event)
    kind = "fsync" if isinstance(event, FsyncFailed) else "I/O"
    return _poison(state, f"{kind} failed during {_describe(state.outstanding)}: {event.reason}")


def _on_watermark(state: State, event: WatermarkAdvanced) -> tuple[State, list[Effect]]:
    # A poisoned tail may not have finished opening: the lake's word is taken as it comes.
    if event.lsn < 0 or (event.lsn > state.durable_lsn and state.phase is not Phase.POISONED):
        raise WalProtocolError(
            f"watermark {event.lsn} is beyond the durable LSN {state.durable_lsn}: the lake "
            "cannot hold records this tail never made durable"
        )
    if event.lsn < state.watermark_lsn:
        return state, []  # a stale report: the watermark only moves forward
    state = replace(state, watermark_lsn=event.lsn)
    if state.phase is Phase.POISONED:
        return state, []
    # Oldest first, never the current segment: a prefix of the list.
    covered = 0
    for segment in state.segments[:-1]:
        if segment.last_lsn > event.lsn:
            break
        covered += 1
    if not covered:
        return state, []
    doomed = tuple(s.first_lsn for s in state.segments[:covered])
    return replace(state, segments=state.segments[covered:]), [DeleteSegments(doomed)]


def _start_batch(state: State) -> tuple[State, list[Effect]]:
    """Write the head of the queue (rotating first if the current segment is full)."""
    assert state.pending and state.outstanding is None and not state.inflight
    batch: list[PendingRecord] = []
    size = 0
    for record in state.pending:
        if batch and size + len(record.data) > state.config.batch_bytes_max:
            break
        batch.append(record)
        size += len(record.data)
    current = state.segments[-1]
    if current.length and current.length + size > state.config.segment_bytes_max:
        create = CreateSegment(batch[0].lsn)
        return replace(state, phase=Phase.ROTATING, outstanding=create), [create]
    write = Write(
        current.first_lsn,
        current.length,
        b"".join(r.data for r in batch),
        batch[0].lsn,
        batch[-1].lsn,
    )
    grown = replace(current, length=current.length + size, last_lsn=batch[-1].lsn)
    state = replace(
        state,
        phase=Phase.WRITING,
        segments=state.segments[:-1] + (grown,),
        pending=state.pending[len(batch) :],
        inflight=range(batch[0].lsn, batch[-1].lsn + 1),
        outstanding=write,
    )
    return state, [write]


def _poison(state: State, reason: str) -> tuple[State, list[Effect]]:
    failed = range(state.pending[0].lsn, state.pending[-1].lsn + 1) if state.pending else range(0)
    fail = FailAppends(reason, state.inflight, failed)
    poisoned = replace(
        state,
        phase=Phase.POISONED,
        pending=(),
        inflight=range(0),
        outstanding=None,
        opening=(),
        poison_reason=reason,
    )
    return poisoned, [fail]


_ANSWERS: dict[type, tuple[type, ...]] = {
    Write: (WriteDone, IoFailed),
    Fsync: (FsyncDone, FsyncFailed),
    CreateSegment: (SegmentCreated, IoFailed),
    SyncSegment: (SegmentSynced, IoFailed, FsyncFailed),
    SyncDirectory: (DirectorySynced, FsyncFailed, IoFailed),
}


def _expect_answer(state: State, event: Event) -> Effect:
    effect = state.outstanding
    if effect is None or not isinstance(event, _ANSWERS[type(effect)]):
        raise WalProtocolError(f"{type(event).__name__} does not answer {effect!r}")
    if isinstance(event, SegmentCreated | SegmentSynced):
        wanted = effect.first_lsn if isinstance(effect, CreateSegment) else effect.segment  # type: ignore[union-attr]
        if event.first_lsn != wanted:
            raise WalProtocolError(f"{event!r} does not answer {effect!r}")
    return effect


def _empty_segment(first_lsn: int) -> Segment:
    return Segment(first_lsn, 0, first_lsn - 1)


def _describe(effect: Effect | None) -> str:
    match effect:
        case Write(segment=segment, first_lsn=first, last_lsn=last):
            return f"the write of LSNs {first}..{last} to segment {segment}"
        case Fsync(segment=segment):
            return f"the fsync of segment {segment}"
        case CreateSegment(first_lsn=first):
            return f"the creation of segment {first}"
        case SyncSegment(segment=segment):
            return f"recovery's sync of segment {segment}"
        case SyncDirectory():
            return "recovery's directory sync"
    return repr(effect)


_Handler = Callable[[State, Any], tuple[State, list[Effect]]]

_RUNNING = (Phase.IDLE, Phase.GATHERING, Phase.ROTATING, Phase.WRITING, Phase.SYNCING)

_HANDLERS: dict[tuple[Phase, type], _Handler] = {
    (Phase.STARTING, TailRecovered): _on_recovered,
    (Phase.OPENING, SegmentSynced): _on_opening_answer,
    (Phase.OPENING, SegmentCreated): _on_opening_answer,
    (Phase.OPENING, DirectorySynced): _on_opening_answer,
    (Phase.OPENING, IoFailed): _on_io_failed,
    (Phase.OPENING, FsyncFailed): _on_io_failed,
    **{(phase, AppendRequested): _on_append for phase in _RUNNING},
    (Phase.POISONED, AppendRequested): _on_append_poisoned,
    **{(phase, TimerFired): _on_timer for phase in (*_RUNNING, Phase.POISONED)},
    (Phase.ROTATING, SegmentCreated): _on_segment_created,
    (Phase.ROTATING, IoFailed): _on_io_failed,
    (Phase.WRITING, WriteDone): _on_write_done,
    (Phase.WRITING, IoFailed): _on_io_failed,
    (Phase.SYNCING, FsyncDone): _on_fsync_done,
    (Phase.SYNCING, FsyncFailed): _on_io_failed,
    **{(phase, WatermarkAdvanced): _on_watermark for phase in (*_RUNNING, Phase.POISONED)},
}
