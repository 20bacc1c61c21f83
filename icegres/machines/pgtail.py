"""The Postgres tail machine: acknowledged writes are committed rows of a PostgreSQL table first.

The `--tail-url postgresql://...` rung of the durable write ladder (issue 6): the same log as the
local WAL tail (`icegres.machines.wal`), kept in PostgreSQL so that it survives the loss of this
node. A writer hands an opaque payload to `AppendRequested`; the core gives it the next LSN and
acknowledges it only after the COMMIT of a transaction holding its row has returned. A driver
(`icegres.machines.drivers.pgtail`) performs the effects with psycopg. `specs/pgtail.toml` is the
independent statement of this machine.

Storage (created by the driver if missing; names configurable, these are the defaults):

    icegres_tail        (tail_id text, lsn bigint, epoch bigint, payload bytea, checksum bigint,
                         PRIMARY KEY (tail_id, lsn))
    icegres_tail_owner  (tail_id text PRIMARY KEY, epoch bigint, owner text, backend_pid int,
                         trimmed_lsn bigint, claimed_at timestamptz)

`checksum` is the CRC-32 of the payload (`wal_format.checksum`); `epoch` is the epoch of the writer
that committed the row.

Why it is shaped this way:

- One writer per tail, two mechanisms. A live writer holds a session-level advisory lock keyed by
  the tail id on its write connection for as long as that connection lives: a second process that
  tries to open the tail finds the lock taken and is refused with a clear error (the liveness
  signal; no lease clocks). Opening the tail bumps the owner row's epoch; every batch transaction
  re-reads its epoch `FOR SHARE` in the same statement that inserts the rows and inserts nothing if
  the epoch moved (the safety signal). The row lock orders a takeover's epoch bump strictly after
  or strictly before any batch, so the LSNs of two writers can never interleave: a writer that lost
  its lock (its connection died) and was taken over finds out at its next batch (`Fenced`), and the
  rows it did commit are read back by the new owner's recovery. The epoch fences appends only: a
  deposed writer's flushes of rows it acknowledged before are fenced at the lake, where each
  asserts the epoch (`drivers/pgtail.PgTail`, a `LakeFencedTail`; docs/quorum-protocol.md).
- Group commit: at most one batch transaction is in flight. Appends that arrive meanwhile are
  queued and go in the next one (one INSERT of many rows, bounded by `batch_records_max` and
  `batch_bytes_max`). Nothing is acknowledged before the COMMIT returned.
- A commit whose outcome is unknown (the connection dropped while COMMIT was on the wire, or an
  INSERT hit an LSN that already exists) is never guessed: the batch's LSNs are known, so a
  read-back (`ReadBack`) asks which of them hold a row of this epoch with the right checksum. All
  of them: committed, acknowledged. None: definitely not committed (the read-back first waits for
  the owner row's lock, so the old transaction is over), retried. Some: impossible for one
  transaction; the tail is poisoned with the batch's outcome reported unknown.
- A batch that definitely did not commit (the connection failed before COMMIT was sent, the server
  refused it) is retried with bounded exponential backoff; after `commit_attempts_max` failed
  attempts, or when fenced, the tail is poisoned: queued appends fail definitely, and health
  reports it. A restart re-claims the tail and replays everything committed.
- Trimming: rows at or below the lake's watermark (`WatermarkAdvanced`) are deleted in the
  background, `trim_batch_max` LSNs per transaction, one transaction at a time, concurrently with
  batches (the driver uses a second connection). The owner row remembers `trimmed_lsn`, so a
  recovery against a lake whose watermark is behind what was trimmed refuses to start instead of
  silently missing records. A failed trim is retried at the next watermark report.
- Time enters only as `TimerFired`; the core asks for it with `StartTimer` (retry backoff).
"""

from __future__ import annotations

from collections.abc import Callable
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
from icegres.machines.wal_format import Record, checksum, is_tail_id

__all__ = [
    "Acknowledge",
    "AppendRequested",
    "BatchAborted",
    "BatchCommitted",
    "Claim",
    "Commit",
    "CommitOutcomeUnknown",
    "Config",
    "Effect",
    "Event",
    "FailAppends",
    "Fenced",
    "Health",
    "PendingRecord",
    "PgTailProtocolError",
    "Phase",
    "PoisonedTail",
    "ReadBack",
    "ReadBackDone",
    "ReadBackFailed",
    "Recovery",
    "RefuseAppend",
    "StartTimer",
    "State",
    "StoredRow",
    "TailRecovered",
    "TimerFired",
    "Trim",
    "TrimDone",
    "TrimFailed",
    "WatermarkAdvanced",
    "backoff_seconds",
    "health",
    "recover",
    "step",
]


# --- configuration -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Config:
    # One batch transaction carries at most this many records and bytes (at least one record).
    batch_records_max: int = 10_000
    batch_bytes_max: int = 8 * 1024 * 1024
    payload_bytes_max: int = 256 * 1024 * 1024
    # Attempts of one batch (commits that definitely failed, read-backs that failed) before the
    # tail gives up and poisons itself. Backoff doubles from the first delay up to the cap.
    commit_attempts_max: int = 8
    retry_backoff_seconds: float = 0.05
    retry_backoff_seconds_max: float = 2.0
    # LSNs deleted per trim transaction.
    trim_batch_max: int = 10_000

    def __post_init__(self) -> None:
        if self.batch_records_max < 1 or self.batch_bytes_max < 1 or self.payload_bytes_max < 0:
            raise ValueError("batch_records_max and batch_bytes_max must be at least 1")
        if self.commit_attempts_max < 1 or self.trim_batch_max < 1:
            raise ValueError("commit_attempts_max and trim_batch_max must be at least 1")
        if not 0 <= self.retry_backoff_seconds <= self.retry_backoff_seconds_max:
            raise ValueError("need 0 <= retry_backoff_seconds <= retry_backoff_seconds_max")


def backoff_seconds(config: Config, attempts: int) -> float:
    """The delay before retry number `attempts` (1-based) of a batch."""
    delay = config.retry_backoff_seconds * (2 ** min(attempts - 1, 30))
    return min(delay, config.retry_backoff_seconds_max)


# --- records -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PendingRecord:
    lsn: int
    payload: bytes = field(repr=False)
    checksum: int


@dataclass(frozen=True)
class StoredRow:
    """A row of the tail table as the driver read it."""

    lsn: int
    payload: bytes = field(repr=False)
    checksum: int
    epoch: int = 0


@dataclass(frozen=True)
class Claim:
    """What opening the tail found, read in the transaction that bumped the epoch to `epoch`."""

    tail_id: str
    epoch: int
    trimmed_lsn: int  # rows up to here were deleted (the owner row remembers it)
    last_lsn: int  # the highest LSN of any row of the tail; 0 when there are none
    rows: tuple[StoredRow, ...]  # every row above the lake's watermark, in LSN order


# --- events (past tense) -------------------------------------------------------------------------


@dataclass(frozen=True)
class TailRecovered:
    tail_id: str
    epoch: int
    next_lsn: int
    watermark_lsn: int
    trimmed_lsn: int


@dataclass(frozen=True)
class BatchCommitted:
    """The batch's commit returned successfully."""


@dataclass(frozen=True)
class BatchAborted:
    """The batch definitely did not commit: the server answered it with an error (and rolled it
    back), or the connection failed before the batch was sent."""

    reason: str


@dataclass(frozen=True)
class CommitOutcomeUnknown:
    """The batch may or may not have committed (the connection dropped before its answer)."""

    reason: str


@dataclass(frozen=True)
class Fenced:
    """Another writer claimed the tail (the epoch moved): the batch was not committed."""

    reason: str


@dataclass(frozen=True)
class ReadBackDone:
    """The rows of this epoch found at the batch's LSNs: (lsn, checksum) pairs."""

    found: tuple[tuple[int, int], ...]


@dataclass(frozen=True)
class ReadBackFailed:
    reason: str


@dataclass(frozen=True)
class TrimDone:
    through_lsn: int


@dataclass(frozen=True)
class TrimFailed:
    reason: str


Event = (
    TailRecovered
    | AppendRequested
    | BatchCommitted
    | BatchAborted
    | CommitOutcomeUnknown
    | Fenced
    | ReadBackDone
    | ReadBackFailed
    | TimerFired
    | WatermarkAdvanced
    | TrimDone
    | TrimFailed
)


# --- effects (imperative) ------------------------------------------------------------------------


@dataclass(frozen=True)
class Commit:
    """Insert these rows in ONE transaction that first checks the owner row still holds `epoch`.

    -> BatchCommitted | BatchAborted | CommitOutcomeUnknown | Fenced."""

    epoch: int
    records: tuple[PendingRecord, ...] = field(repr=False)
    first_lsn: int
    last_lsn: int


@dataclass(frozen=True)
class ReadBack:
    """After waiting for the owner row's lock, read (lsn, checksum) of rows of `epoch` in
    first_lsn..last_lsn. -> ReadBackDone | ReadBackFailed."""

    epoch: int
    first_lsn: int
    last_lsn: int


@dataclass(frozen=True)
class Trim:
    """Delete rows after_lsn < lsn <= through_lsn and raise the owner row's trimmed_lsn, in one
    transaction. -> TrimDone | TrimFailed."""

    after_lsn: int
    through_lsn: int


Effect = Commit | ReadBack | Trim | StartTimer | Acknowledge | FailAppends | RefuseAppend


# --- state ---------------------------------------------------------------------------------------


class Phase(Enum):
    STARTING = "starting"  # before recover() has described the table
    IDLE = "idle"  # nothing queued, nothing in flight
    COMMITTING = "committing"  # a batch's Commit outstanding; new appends queue for the next one
    RESOLVING = "resolving"  # the batch's outcome was unknown: its ReadBack outstanding
    RETRYING = "retrying"  # waiting out a backoff before retrying the Commit or the ReadBack
    POISONED = "poisoned"  # fenced or out of attempts: nothing more is written or acknowledged


@dataclass(frozen=True)
class State:
    config: Config
    phase: Phase = Phase.STARTING
    tail_id: str = ""
    epoch: int = 0
    next_lsn: int = 1
    durable_lsn: int = 0  # every LSN up to here is committed (acknowledged or recovered)
    watermark_lsn: int = 0  # every LSN up to here is in the lake
    trimmed_lsn: int = 0  # rows up to here are deleted
    trim_through: int = 0  # through_lsn of the Trim in flight; 0 when none
    pending: tuple[PendingRecord, ...] = ()  # queued, not yet in a batch
    inflight: tuple[PendingRecord, ...] = ()  # the batch being committed (or resolved)
    attempts: int = 0  # failed attempts of the in-flight batch
    retry: str = ""  # in RETRYING: "commit" or "read_back"
    timer: int = 0  # number of the latest StartTimer
    poison_reason: str | None = None


class PgTailProtocolError(Exception):
    """An event the current state does not accept (a driver bug)."""


class PoisonedTail(Exception):
    """recover() refuses to start: the table is missing records the lake does not have."""


@dataclass(frozen=True)
class Health:
    ok: bool
    phase: str
    reason: str | None
    epoch: int
    durable_lsn: int
    watermark_lsn: int
    trimmed_lsn: int
    next_lsn: int
    pending_records: int
    attempts: int


def health(state: State) -> Health:
    """What /health and /ready report. `ok` is False once poisoned, and stays so."""
    return Health(
        ok=state.phase is not Phase.POISONED,
        phase=state.phase.value,
        reason=state.poison_reason,
        epoch=state.epoch,
        durable_lsn=state.durable_lsn,
        watermark_lsn=state.watermark_lsn,
        trimmed_lsn=state.trimmed_lsn,
        next_lsn=state.next_lsn,
        pending_records=len(state.pending) + len(state.inflight),
        attempts=state.attempts,
    )


# --- recovery ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Recovery:
    state: State
    effects: list[Effect]
    replay: tuple[Record, ...]  # records above the watermark, in LSN order: not yet in the lake

    @property
    def tail_id(self) -> str:
        return self.state.tail_id


def recover(claim: Claim, config: Config, *, watermark_lsn: int) -> Recovery:
    """The state of a claimed tail and what to replay.

    `claim` is what the claiming transaction read; `watermark_lsn` is the lake's committed LSN for
    this tail (0: none). Every committed row is durable, so the tail is open at once. Raises
    PoisonedTail when records above the watermark are missing (trimmed, or a gap), out of order,
    or fail their checksum: replaying around them would lose acknowledged rows silently.
    """
    if watermark_lsn < 0:
        raise ValueError("watermark_lsn must be >= 0")
    if not is_tail_id(claim.tail_id):
        raise ValueError(f"tail id {claim.tail_id!r} must match [A-Za-z0-9_-]{{1,64}}")
    if claim.epoch < 1:
        raise ValueError("a claimed tail has an epoch >= 1")
    if claim.trimmed_lsn > watermark_lsn:
        raise PoisonedTail(
            f"tail {claim.tail_id} trimmed its rows through LSN {claim.trimmed_lsn}, but the "
            f"lake's watermark is only {watermark_lsn}: records the lake needs are gone"
        )
    replay: list[Record] = []
    expected = watermark_lsn + 1
    for row in claim.rows:
        if row.lsn <= watermark_lsn:
            continue
        if row.lsn != expected:
            raise PoisonedTail(
                f"records {expected}..{row.lsn - 1} of tail {claim.tail_id} are missing above "
                f"the lake's watermark {watermark_lsn}"
            )
        if checksum(row.payload) != row.checksum:
            raise PoisonedTail(f"record {row.lsn} of tail {claim.tail_id} fails its checksum")
        replay.append(Record(row.lsn, claim.tail_id, row.payload))
        expected += 1
    if claim.last_lsn > watermark_lsn and claim.last_lsn != expected - 1:
        raise PoisonedTail(
            f"tail {claim.tail_id} has rows up to LSN {claim.last_lsn} but only "
            f"{watermark_lsn + 1}..{expected - 1} were read above the watermark"
        )
    next_lsn = max(claim.last_lsn, watermark_lsn, claim.trimmed_lsn) + 1
    recovered = TailRecovered(
        claim.tail_id, claim.epoch, next_lsn, watermark_lsn, claim.trimmed_lsn
    )
    state, effects = step(State(config=config), recovered)
    return Recovery(state, effects, tuple(replay))


# --- the transition function ---------------------------------------------------------------------


def step(state: State, event: Event) -> tuple[State, list[Effect]]:
    """The only producer of a new State: apply `event`, return the next state and its effects.

    Effects are in the order they must be performed. At most one Commit or ReadBack is outstanding
    at any time, and at most one Trim (which may overlap it). Raises PgTailProtocolError for an
    event the state does not accept.
    """
    handler = _HANDLERS.get((state.phase, type(event)))
    if handler is None:
        raise PgTailProtocolError(f"{type(event).__name__} is not accepted in {state.phase.value}")
    return handler(state, event)


def _on_recovered(state: State, event: TailRecovered) -> tuple[State, list[Effect]]:
    state = replace(
        state,
        phase=Phase.IDLE,
        tail_id=event.tail_id,
        epoch=event.epoch,
        next_lsn=event.next_lsn,
        durable_lsn=event.next_lsn - 1,
        watermark_lsn=event.watermark_lsn,
        trimmed_lsn=event.trimmed_lsn,
    )
    return _maybe_trim(state, [])


def _on_append(state: State, event: AppendRequested) -> tuple[State, list[Effect]]:
    if len(event.payload) > state.config.payload_bytes_max:
        raise PgTailProtocolError(
            f"payload of {len(event.payload)} bytes exceeds {state.config.payload_bytes_max}"
        )
    lsn = state.next_lsn
    record = PendingRecord(lsn, event.payload, checksum(event.payload))
    state = replace(state, next_lsn=lsn + 1, pending=state.pending + (record,))
    if state.phase is Phase.IDLE:
        return _start_batch(state, [])
    return state, []  # rides the next batch


def _on_append_poisoned(state: State, event: AppendRequested) -> tuple[State, list[Effect]]:
    return state, [RefuseAppend(f"the Postgres tail is poisoned: {state.poison_reason}")]


def _on_committed(state: State, event: BatchCommitted) -> tuple[State, list[Effect]]:
    return _acknowledge(state)


def _on_aborted(state: State, event: BatchAborted) -> tuple[State, list[Effect]]:
    return _retry(state, "commit", f"the batch did not commit: {event.reason}", unknown=False)


def _on_unknown(state: State, event: CommitOutcomeUnknown) -> tuple[State, list[Effect]]:
    read = _read_back(state)
    return replace(state, phase=Phase.RESOLVING), [read]


def _on_fenced(state: State, event: Fenced) -> tuple[State, list[Effect]]:
    return _poison(state, f"fenced: {event.reason}", unknown=False)


def _on_read_back_done(state: State, event: ReadBackDone) -> tuple[State, list[Effect]]:
    want = {r.lsn: r.checksum for r in state.inflight}
    found = dict(event.found)
    if found == want:
        return _acknowledge(state)
    if not found:
        # Definitely not committed: the read-back waited out the old transaction first.
        attempts = state.attempts + 1
        if attempts >= state.config.commit_attempts_max:
            return _poison(
                state,
                f"the batch of LSNs {_span(state)} did not commit in {attempts} attempts",
                unknown=False,
            )
        state = replace(state, phase=Phase.COMMITTING, attempts=attempts)
        return state, [_commit(state)]
    stray = sorted(set(found) - set(want))
    wrong = sorted(lsn for lsn in found if lsn in want and found[lsn] != want[lsn])
    return _poison(
        state,
        f"the read-back of LSNs {_span(state)} found {len(found)} of {len(want)} rows "
        f"(wrong checksum at {wrong}, unexpected {stray}): the outcome cannot be decided",
        unknown=True,
    )


def _on_read_back_failed(state: State, event: ReadBackFailed) -> tuple[State, list[Effect]]:
    return _retry(state, "read_back", f"the read-back failed: {event.reason}", unknown=True)


def _on_timer(state: State, event: TimerFired) -> tuple[State, list[Effect]]:
    if event.timer != state.timer:
        raise PgTailProtocolError(f"timer {event.timer} is not the armed timer {state.timer}")
    if state.retry == "commit":
        state = replace(state, phase=Phase.COMMITTING, retry="")
        return state, [_commit(state)]
    state = replace(state, phase=Phase.RESOLVING, retry="")
    return state, [_read_back(state)]


def _on_watermark(state: State, event: WatermarkAdvanced) -> tuple[State, list[Effect]]:
    # A poisoned tail takes the lake's word as it comes: it may have committed rows it never acked.
    if event.lsn < 0 or (event.lsn > state.durable_lsn and state.phase is not Phase.POISONED):
        raise PgTailProtocolError(
            f"watermark {event.lsn} is beyond the durable LSN {state.durable_lsn}: the lake "
            "cannot hold records this tail never committed"
        )
    if event.lsn > state.watermark_lsn:
        state = replace(state, watermark_lsn=event.lsn)
    if state.phase is Phase.POISONED:
        return state, []
    return _maybe_trim(state, [])


def _on_trim_done(state: State, event: TrimDone) -> tuple[State, list[Effect]]:
    if not state.trim_through or event.through_lsn != state.trim_through:
        raise PgTailProtocolError(
            f"{event!r} does not answer the trim through {state.trim_through}"
        )
    state = replace(state, trimmed_lsn=event.through_lsn, trim_through=0)
    if state.phase is Phase.POISONED:
        return state, []
    return _maybe_trim(state, [])


def _on_trim_failed(state: State, event: TrimFailed) -> tuple[State, list[Effect]]:
    if not state.trim_through:
        raise PgTailProtocolError("TrimFailed without a trim in flight")
    # Retried at the next watermark report: the rows are in the lake, nothing waits on them.
    return replace(state, trim_through=0), []


def _maybe_trim(state: State, effects: list[Effect]) -> tuple[State, list[Effect]]:
    if state.trim_through or state.watermark_lsn <= state.trimmed_lsn:
        return state, effects
    through = min(state.watermark_lsn, state.trimmed_lsn + state.config.trim_batch_max)
    return replace(state, trim_through=through), [*effects, Trim(state.trimmed_lsn, through)]


def _start_batch(state: State, effects: list[Effect]) -> tuple[State, list[Effect]]:
    assert state.pending and not state.inflight
    batch: list[PendingRecord] = []
    size = 0
    for record in state.pending:
        if batch and (
            len(batch) >= state.config.batch_records_max
            or size + len(record.payload) > state.config.batch_bytes_max
        ):
            break
        batch.append(record)
        size += len(record.payload)
    state = replace(
        state,
        phase=Phase.COMMITTING,
        pending=state.pending[len(batch) :],
        inflight=tuple(batch),
        attempts=0,
    )
    return state, [*effects, _commit(state)]


def _acknowledge(state: State) -> tuple[State, list[Effect]]:
    ack = Acknowledge(state.inflight[0].lsn, state.inflight[-1].lsn)
    state = replace(state, durable_lsn=ack.last_lsn, inflight=(), attempts=0)
    if not state.pending:
        return replace(state, phase=Phase.IDLE), [ack]
    return _start_batch(state, [ack])


def _retry(state: State, what: str, reason: str, *, unknown: bool) -> tuple[State, list[Effect]]:
    attempts = state.attempts + 1
    if attempts >= state.config.commit_attempts_max:
        return _poison(state, f"{reason} (attempt {attempts}, giving up)", unknown=unknown)
    timer = state.timer + 1
    state = replace(state, phase=Phase.RETRYING, attempts=attempts, retry=what, timer=timer)
    return state, [StartTimer(timer, backoff_seconds(state.config, attempts))]


def _poison(state: State, reason: str, *, unknown: bool) -> tuple[State, list[Effect]]:
    start = state.inflight[0].lsn if state.inflight else state.next_lsn
    unknown_lsns = range(start, start + len(state.inflight)) if unknown else range(0)
    failed = range(start + len(state.inflight) if unknown else start, state.next_lsn)
    fail = FailAppends(reason, unknown_lsns, failed if len(failed) else range(0))
    poisoned = replace(
        state,
        phase=Phase.POISONED,
        pending=(),
        inflight=(),
        retry="",
        poison_reason=reason,
    )
    return poisoned, [fail]


def _commit(state: State) -> Commit:
    return Commit(state.epoch, state.inflight, state.inflight[0].lsn, state.inflight[-1].lsn)


def _read_back(state: State) -> ReadBack:
    return ReadBack(state.epoch, state.inflight[0].lsn, state.inflight[-1].lsn)


def _span(state: State) -> str:
    return f"{state.inflight[0].lsn}..{state.inflight[-1].lsn}"


_Handler = Callable[[State, Any], tuple[State, list[Effect]]]

_RUNNING = (Phase.IDLE, Phase.COMMITTING, Phase.RESOLVING, Phase.RETRYING)
_OPEN = (*_RUNNING, Phase.POISONED)

_HANDLERS: dict[tuple[Phase, type], _Handler] = {
    (Phase.STARTING, TailRecovered): _on_recovered,
    **{(phase, AppendRequested): _on_append for phase in _RUNNING},
    (Phase.POISONED, AppendRequested): _on_append_poisoned,
    (Phase.COMMITTING, BatchCommitted): _on_committed,
    (Phase.COMMITTING, BatchAborted): _on_aborted,
    (Phase.COMMITTING, CommitOutcomeUnknown): _on_unknown,
    (Phase.COMMITTING, Fenced): _on_fenced,
    (Phase.RESOLVING, ReadBackDone): _on_read_back_done,
    (Phase.RESOLVING, ReadBackFailed): _on_read_back_failed,
    (Phase.RETRYING, TimerFired): _on_timer,
    **{(phase, WatermarkAdvanced): _on_watermark for phase in _OPEN},
    **{(phase, TrimDone): _on_trim_done for phase in _OPEN},
    **{(phase, TrimFailed): _on_trim_failed for phase in _OPEN},
}
