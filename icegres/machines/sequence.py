"""The sequence machine: a block of a sequence's values reserved in the catalog, or none.

A sequence (CREATE SEQUENCE, serial, identity) must never hand out one value twice — across
sessions, across icegres servers on one catalog, and across a crash. Its state lives in the
catalog as a head: the last value reserved, with the version it was written at. A server reserves
a block of values by compare-and-swap on that head (the new head names the block's last value,
asserting the version it read) and hands the block out from memory; gaps are allowed, as in
PostgreSQL (a crash loses the unused rest of a block). `specs/sequence.toml` is the independent
statement of this machine; the driver is `icegres.machines.drivers.sequence`.

Why it is shaped this way:

- A value is handed out only from a block whose swap is known to have landed: the swap answered
  "applied", or a later read shows the head this run wrote (its token). After an answer that
  does not say (a timeout, a dropped connection), the machine reads before doing anything else
  and never reuses the block it may have written unless the head proves it is this run's; a
  block that landed and was then overtaken is simply skipped (a gap).
- Swaps are linear: each one asserts the version it read, so two servers that read one head
  cannot both land, and every landed block starts past the head it replaced. That is the whole
  argument that no value is given twice (the model test checks it across servers, crashes,
  lost replies and swaps delivered late).
- Losing a race to another server is progress of the sequence, so it is not charged as a
  failure; it is bounded separately (max_conflicts) so that a run always ends.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from enum import Enum
from typing import Any

__all__ = [
    "Advance",
    "AdvanceFailed",
    "AdvanceOutcomeUnknown",
    "AdvanceRejected",
    "Advanced",
    "Config",
    "Definition",
    "Effect",
    "Event",
    "Fail",
    "Grant",
    "Head",
    "HeadRead",
    "Outcome",
    "Phase",
    "ReadFailed",
    "ReadHead",
    "Request",
    "Requested",
    "SequenceMissing",
    "State",
    "Wait",
    "WaitElapsed",
    "initial_state",
    "next_block",
    "outcome_of",
    "step",
]

SQLSTATE_LIMIT_EXCEEDED = "2200H"  # sequence_generator_limit_exceeded
SQLSTATE_UNDEFINED_TABLE = "42P01"
SQLSTATE_SERIALIZATION_FAILURE = "40001"
SQLSTATE_IO_ERROR = "58030"


# --- the domain ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Definition:
    """What CREATE SEQUENCE said: PostgreSQL's options. `cache` is how many values one swap
    reserves at least (the block size)."""

    name: str
    increment: int = 1
    min_value: int = 1
    max_value: int = 2**63 - 1
    start: int = 1
    cycle: bool = False
    cache: int = 1


@dataclass(frozen=True)
class Head:
    """The sequence's state in the catalog: `last_value` as PostgreSQL's (the last value handed
    out or reserved; with `is_called` False, the next nextval returns it). `first` and `token`
    name the block that wrote it (token "" for CREATE SEQUENCE and setval). `version` is what a
    swap asserts."""

    version: int
    last_value: int
    is_called: bool
    first: int = 0
    token: str = ""


@dataclass(frozen=True)
class Request:
    definition: Definition
    count: int  # values wanted now: the block is max(count, cache) values, bounds permitting
    token: str  # unique per run: how a read recognises a head this run wrote


def next_block(head: Head, definition: Definition, count: int) -> tuple[int, int] | None:
    """(first, last) of the block after `head`, or None where the sequence is exhausted and does
    not cycle. A block may be shorter than `count` at a bound; it is never empty."""
    d = definition
    step_ = d.increment
    first = head.last_value + step_ if head.is_called else head.last_value
    up = step_ > 0
    if (up and first > d.max_value) or (not up and first < d.min_value):
        if not d.cycle:
            return None
        first = d.min_value if up else d.max_value
    n = max(count, d.cache, 1)
    last = first + (n - 1) * step_
    last = min(last, first + ((d.max_value - first) // step_) * step_) if up else \
        max(last, first + ((first - d.min_value) // -step_) * step_)
    return first, last


# --- events (past tense) -------------------------------------------------------------------------


@dataclass(frozen=True)
class Requested:
    request: Request


@dataclass(frozen=True)
class HeadRead:
    head: Head


@dataclass(frozen=True)
class SequenceMissing:
    """The sequence was dropped (or never existed)."""


@dataclass(frozen=True)
class ReadFailed:
    message: str


@dataclass(frozen=True)
class Advanced:
    """The swap landed: the head is the one this run wrote."""


@dataclass(frozen=True)
class AdvanceRejected:
    """The head had moved (another server's block, a setval): definitely not applied."""


@dataclass(frozen=True)
class AdvanceFailed:
    """Definitely not applied (refused before it was sent)."""

    message: str


@dataclass(frozen=True)
class AdvanceOutcomeUnknown:
    """Sent, no answer: it may have landed, now or later."""

    message: str


@dataclass(frozen=True)
class WaitElapsed:
    pass


Event = (Requested | HeadRead | SequenceMissing | ReadFailed | Advanced | AdvanceRejected | AdvanceFailed
         | AdvanceOutcomeUnknown | WaitElapsed)


# --- effects (imperative) ------------------------------------------------------------------------


@dataclass(frozen=True)
class ReadHead:
    pass


@dataclass(frozen=True)
class Advance:
    """Swap the head at `expected` for `head` (whose version the catalog assigns)."""

    expected: int
    head: Head


@dataclass(frozen=True)
class Wait:
    seconds: float


@dataclass(frozen=True)
class Grant:
    """Hand out first, first + increment, ..., last: reserved in the catalog by this run."""

    first: int
    last: int
    increment: int


@dataclass(frozen=True)
class Fail:
    sqlstate: str
    message: str


Effect = ReadHead | Advance | Wait | Grant | Fail


# --- state ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Config:
    max_attempts: int = 5  # swaps that failed or went unanswered, and failed reads, in one run
    max_conflicts: int = 1000  # swaps lost to other servers in one run
    backoff_s: float = 0.05
    backoff_max_s: float = 2.0


class Phase(Enum):
    IDLE = "idle"
    READING = "reading"  # ReadHead outstanding
    ADVANCING = "advancing"  # Advance outstanding
    WAITING = "waiting"  # backing off before reading again
    GRANTED = "granted"
    FAILED = "failed"

    @property
    def terminal(self) -> bool:
        return self in (Phase.GRANTED, Phase.FAILED)


@dataclass(frozen=True)
class State:
    phase: Phase = Phase.IDLE
    request: Request | None = None
    config: Config = Config()
    attempts: int = 0  # charged: failed or unanswered swaps, failed reads
    conflicts: int = 0
    uncertain: bool = False  # a swap of this run may have landed unseen
    sent: Head | None = None  # the head the outstanding swap writes
    grant: tuple[int, int] | None = None
    sqlstate: str | None = None
    message: str | None = None


@dataclass(frozen=True)
class Outcome:
    phase: Phase
    grant: tuple[int, int] | None
    sqlstate: str | None = None
    message: str | None = None


class SequenceProtocolError(Exception):
    """An event the current state does not accept (a driver or world bug)."""


def initial_state(config: Config | None = None) -> State:
    return State(config=config or Config())


def outcome_of(state: State) -> Outcome | None:
    if not state.phase.terminal:
        return None
    return Outcome(state.phase, state.grant, state.sqlstate, state.message)


def step(state: State, event: Event) -> tuple[State, list[Effect]]:
    """The only producer of a new State. A non-terminal result emits exactly one effect that is
    answered by an event; a terminal one only effects nobody answers."""
    handler = _HANDLERS.get((state.phase, type(event)))
    if handler is None:
        raise SequenceProtocolError(f"{type(event).__name__} is not accepted in {state.phase.value}")
    return handler(state, event)


# --- handlers ------------------------------------------------------------------------------------


def _request(state: State) -> Request:
    assert state.request is not None
    return state.request


def _on_requested(state: State, event: Requested) -> tuple[State, list[Effect]]:
    return replace(state, phase=Phase.READING, request=event.request), [ReadHead()]


def _on_head_read(state: State, event: HeadRead) -> tuple[State, list[Effect]]:
    request, head = _request(state), event.head
    if state.uncertain and head.token == request.token:
        # A swap whose answer was lost (or one delivered late) landed, and nothing overtook it.
        return _granted(state, head.first, head.last_value)
    if state.attempts >= state.config.max_attempts:
        return _failed(state, SQLSTATE_IO_ERROR, f'could not reserve values of sequence "{request.definition.name}": '
                                                 f"the catalog failed {state.attempts} times")
    block = next_block(head, request.definition, request.count)
    if block is None:
        d = request.definition
        bound, which = (d.max_value, "maximum") if d.increment > 0 else (d.min_value, "minimum")
        return _failed(state, SQLSTATE_LIMIT_EXCEEDED, f'nextval: reached {which} value of sequence "{d.name}" ({bound})')
    first, last = block
    new = Head(version=0, last_value=last, is_called=True, first=first, token=request.token)
    return replace(state, phase=Phase.ADVANCING, sent=new), [Advance(head.version, new)]


def _on_missing(state: State, event: SequenceMissing) -> tuple[State, list[Effect]]:
    return _failed(state, SQLSTATE_UNDEFINED_TABLE, f'relation "{_request(state).definition.name}" does not exist')


def _on_read_failed(state: State, event: ReadFailed) -> tuple[State, list[Effect]]:
    return _retry(replace(state, attempts=state.attempts + 1), event.message)


def _on_advanced(state: State, event: Advanced) -> tuple[State, list[Effect]]:
    assert state.sent is not None
    return _granted(state, state.sent.first, state.sent.last_value)


def _on_rejected(state: State, event: AdvanceRejected) -> tuple[State, list[Effect]]:
    conflicts = state.conflicts + 1
    if conflicts > state.config.max_conflicts:
        return _failed(replace(state, conflicts=conflicts), SQLSTATE_SERIALIZATION_FAILURE,
                       f'could not reserve values of sequence "{_request(state).definition.name}": '
                       f"{conflicts} concurrent reservations won")
    return replace(state, phase=Phase.READING, conflicts=conflicts), [ReadHead()]


def _on_advance_failed(state: State, event: AdvanceFailed) -> tuple[State, list[Effect]]:
    return _retry(replace(state, attempts=state.attempts + 1), event.message)


def _on_unknown(state: State, event: AdvanceOutcomeUnknown) -> tuple[State, list[Effect]]:
    # Find out first: the head says whether it landed; never swap again blind.
    return replace(state, phase=Phase.READING, attempts=state.attempts + 1, uncertain=True), [ReadHead()]


def _on_wait_elapsed(state: State, event: WaitElapsed) -> tuple[State, list[Effect]]:
    return replace(state, phase=Phase.READING), [ReadHead()]


def _retry(state: State, message: str) -> tuple[State, list[Effect]]:
    if state.attempts >= state.config.max_attempts:
        return _failed(state, SQLSTATE_IO_ERROR,
                       f'could not reserve values of sequence "{_request(state).definition.name}": {message}')
    c = state.config
    return replace(state, phase=Phase.WAITING), [Wait(min(c.backoff_s * 2 ** (state.attempts - 1), c.backoff_max_s))]


def _granted(state: State, first: int, last: int) -> tuple[State, list[Effect]]:
    increment = _request(state).definition.increment
    return replace(state, phase=Phase.GRANTED, grant=(first, last)), [Grant(first, last, increment)]


def _failed(state: State, sqlstate: str, message: str) -> tuple[State, list[Effect]]:
    return replace(state, phase=Phase.FAILED, sqlstate=sqlstate, message=message), [Fail(sqlstate, message)]


_Handler = Callable[[State, Any], tuple[State, list[Effect]]]

_HANDLERS: dict[tuple[Phase, type], _Handler] = {
    (Phase.IDLE, Requested): _on_requested,
    (Phase.READING, HeadRead): _on_head_read,
    (Phase.READING, SequenceMissing): _on_missing,
    (Phase.READING, ReadFailed): _on_read_failed,
    (Phase.ADVANCING, Advanced): _on_advanced,
    (Phase.ADVANCING, AdvanceRejected): _on_rejected,
    (Phase.ADVANCING, AdvanceFailed): _on_advance_failed,
    (Phase.ADVANCING, AdvanceOutcomeUnknown): _on_unknown,
    (Phase.ADVANCING, SequenceMissing): _on_missing,
    (Phase.WAITING, WaitElapsed): _on_wait_elapsed,
}
