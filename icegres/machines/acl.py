"""The shared-document machine: one change to a document kept in the catalog, by compare-and-swap.

Roles, grants and policies (issue 31) are one JSON document shared by every icegres server of a
catalog. This machine does not know what the document says: it is an opaque `str`, and a change
is `(change_id, apply)`, where `apply` is a pure function from the document read to the document to
write, or raises to refuse the change (e.g. "role already exists"). The catalog keeps a record: the
document, the ids of the last `kept_ids` changes applied to it, and how many changes were ever
applied (`count`), at a version that a swap asserts. `specs/acl.toml` is the independent statement
of this machine; the driver is `icegres.machines.drivers.acl`, the world `engine/acl_store.py`.

Why it is shaped this way:

- **Apply to what was read, swap asserting its version.** Two servers that read one version cannot
  both land a swap, so the landed documents are a serial order of changes, each applied to the
  document the one before it wrote. A swap refused (the version moved) reads again and re-applies:
  that loss is another server's progress, bounded separately (`max_conflicts`, then 40001).
  A refusal is decided by that read too, like an unknown outcome: a request the transport retried
  is refused after its first copy landed, so "refused" alone does not prove "not applied".
- **An unknown outcome is resolved by reading, never by guessing.** A swap sent and not answered
  may land, now or later. The record carries the ids of recent changes, so a read that shows this
  change's id says it landed. A read that does not, at a version other than the one the swap
  asserted, says it never will: versions are never reused, and once the version moved past the one
  a swap asserts, that swap can only be refused. At the same version, it may still land late, so
  the run swaps again on that same document: `apply` is pure, so every swap of the run that may
  still land writes the same document, and at most one of them lands.
- **The recent ids are bounded, so a read checks it can still decide.** If so many changes landed
  after an unanswered swap that its id would have been dropped from the record, the run fails with
  08007 (transaction_resolution_unknown) rather than apply the change a second time.
- **A refusal writes nothing.** `apply` raising ends the run with that exception, for the caller to
  re-raise. It is called only on a document none of this run's swaps can still land on (any swap
  still pending asserts the version read, on the same document, where `apply` did not raise).
- **A change that leaves the document as it was is done without a swap** (a GRANT already granted):
  it is serialised at the version read.
- **Failures say what is known.** 40001 (conflicts) and 58030 (the catalog failed) mean the change
  is not applied and never will be; 08007 means it may have been.

Recovery: nothing of a run is durable outside the record. A change in flight when its process died
is in the record (it landed, once) or not (and then never will be, once the version moves): there
is nothing to finish or undo, and `recover()` is the idle state. The caller that died never heard
an answer, as with any lost connection.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from enum import Enum
from typing import Any

__all__ = [
    "EMPTY",
    "NO_VERSION",
    "Change",
    "Config",
    "Done",
    "Effect",
    "Event",
    "Fail",
    "Outcome",
    "Phase",
    "ReadFailed",
    "ReadRecord",
    "Record",
    "RecordRead",
    "Refuse",
    "Requested",
    "State",
    "Swap",
    "SwapFailed",
    "SwapOutcomeUnknown",
    "SwapRejected",
    "Swapped",
    "Wait",
    "WaitElapsed",
    "initial_state",
    "outcome_of",
    "recover",
    "step",
]

SQLSTATE_SERIALIZATION_FAILURE = "40001"
SQLSTATE_IO_ERROR = "58030"
SQLSTATE_RESOLUTION_UNKNOWN = "08007"  # transaction_resolution_unknown

NO_VERSION = -1  # the version of a store never written (or not created yet)


# --- the domain ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Record:
    """The store's record as the catalog has it: `document`, the ids of the last changes applied
    (oldest first) and how many were ever applied. `version` is what a swap asserts; a record to
    write carries the version the swap asserts (the catalog assigns the new one)."""

    version: int
    document: str = ""
    applied: tuple[str, ...] = ()
    count: int = 0


EMPTY = Record(NO_VERSION)


@dataclass(frozen=True)
class Change:
    """`apply(document) -> document`, pure (the same input gives the same output or the same
    refusal): a run may call it more than once, and relies on that (see the module docstring)."""

    change_id: str
    apply: Callable[[str], str]


# --- events (past tense) -------------------------------------------------------------------------


@dataclass(frozen=True)
class Requested:
    change: Change


@dataclass(frozen=True)
class RecordRead:
    record: Record


@dataclass(frozen=True)
class ReadFailed:
    message: str


@dataclass(frozen=True)
class Swapped:
    """The swap landed."""


@dataclass(frozen=True)
class SwapRejected:
    """The version had moved: definitely not applied, and never will be."""


@dataclass(frozen=True)
class SwapFailed:
    """Definitely not applied (refused before it was sent)."""

    message: str


@dataclass(frozen=True)
class SwapOutcomeUnknown:
    """Sent, no answer (a lost reply, a timeout, a 5xx): it may land, now or later."""

    message: str


@dataclass(frozen=True)
class WaitElapsed:
    pass


Event = Requested | RecordRead | ReadFailed | Swapped | SwapRejected | SwapFailed | SwapOutcomeUnknown | WaitElapsed


# --- effects (imperative) ------------------------------------------------------------------------


@dataclass(frozen=True)
class ReadRecord:
    pass


@dataclass(frozen=True)
class Swap:
    """Replace the record at version `record.version` (NO_VERSION: none yet) by `record`."""

    record: Record


@dataclass(frozen=True)
class Wait:
    seconds: float


@dataclass(frozen=True)
class Done:
    """The change is in the record: `document` is what its swap wrote (or, for a change that left
    the document as it was, the document it was applied to)."""

    document: str


@dataclass(frozen=True)
class Refuse:
    """`apply` refused the change: nothing was written; the caller re-raises `error`."""

    error: Exception


@dataclass(frozen=True)
class Fail:
    sqlstate: str
    message: str


Effect = ReadRecord | Swap | Wait | Done | Refuse | Fail


# --- state ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Config:
    kept_ids: int = 64  # recent change ids the record keeps: how far back an unknown outcome is decidable
    max_attempts: int = 5  # failed reads, swaps refused before sending or unanswered, in one run
    max_conflicts: int = 32  # swaps lost to other servers in one run
    backoff_s: float = 0.05
    backoff_max_s: float = 2.0


class Phase(Enum):
    IDLE = "idle"
    READING = "reading"  # ReadRecord outstanding
    SWAPPING = "swapping"  # Swap outstanding
    WAITING = "waiting"  # backing off before reading again
    DONE = "done"
    REFUSED = "refused"
    FAILED = "failed"

    @property
    def terminal(self) -> bool:
        return self in (Phase.DONE, Phase.REFUSED, Phase.FAILED)


@dataclass(frozen=True)
class State:
    phase: Phase = Phase.IDLE
    change: Change | None = None
    config: Config = Config()
    attempts: int = 0  # charged: failed reads, swaps refused before sending or unanswered
    conflicts: int = 0
    sent: Record | None = None  # the record the latest swap writes
    # The version every swap of this run that may still land asserts (None: none may). They all
    # assert one version and write one document: a run swaps again only after a read that showed
    # that version unchanged (so the same document, and `apply` is pure) or a newer one (and then
    # the older swaps can never land).
    pending: int | None = None
    document: str | None = None
    error: Exception | None = None
    sqlstate: str | None = None
    message: str | None = None


@dataclass(frozen=True)
class Outcome:
    phase: Phase
    document: str | None = None
    error: Exception | None = None
    sqlstate: str | None = None
    message: str | None = None


class AclProtocolError(Exception):
    """An event the current state does not accept (a driver or world bug)."""


def initial_state(config: Config | None = None) -> State:
    return State(config=config or Config())


def recover(config: Config | None = None) -> State:
    """The state after a crash: idle. A change in flight then is in the record or, once the version
    moves, never will be; nothing is kept elsewhere (module docstring, "Recovery")."""
    return initial_state(config)


def outcome_of(state: State) -> Outcome | None:
    if not state.phase.terminal:
        return None
    return Outcome(state.phase, state.document, state.error, state.sqlstate, state.message)


def step(state: State, event: Event) -> tuple[State, list[Effect]]:
    """The only producer of a new State. A non-terminal result emits exactly one effect that is
    answered by an event; a terminal one only an effect nobody answers."""
    handler = _HANDLERS.get((state.phase, type(event)))
    if handler is None:
        raise AclProtocolError(f"{type(event).__name__} is not accepted in {state.phase.value}")
    return handler(state, event)


def next_record(record: Record, change_id: str, document: str, kept_ids: int) -> Record:
    """The record a swap writes over `record` (asserting its version) for a change that wrote
    `document`."""
    applied = (*record.applied, change_id)[-kept_ids:] if kept_ids > 0 else ()
    return Record(record.version, document, applied, record.count + 1)


# --- handlers ------------------------------------------------------------------------------------


def _change(state: State) -> Change:
    assert state.change is not None
    return state.change


def _on_requested(state: State, event: Requested) -> tuple[State, list[Effect]]:
    return replace(state, phase=Phase.READING, change=event.change), [ReadRecord()]


def _on_record_read(state: State, event: RecordRead) -> tuple[State, list[Effect]]:
    change, record, sent = _change(state), event.record, state.sent
    if state.pending is not None:
        assert sent is not None
        if change.change_id in record.applied:
            # One swap of this run landed; every one that might have writes `sent.document`.
            return _done(replace(state, pending=None), sent.document)
        if record.version != state.pending and record.count - len(record.applied) > sent.count - 1:
            # The id of a change landed at count `sent.count` would be dropped by now: whether it
            # is ours cannot be told.
            return _failed(state, SQLSTATE_RESOLUTION_UNKNOWN,
                           f"the outcome of change {change.change_id} is unknown: more than "
                           f"{state.config.kept_ids} changes landed since it was sent")
        if record.version != state.pending:
            state = replace(state, pending=None)  # the version moved on without it: it never lands
    if state.conflicts > state.config.max_conflicts:
        return _give_up(state, SQLSTATE_SERIALIZATION_FAILURE,
                        f"could not serialize access due to concurrent update: change "
                        f"{change.change_id} lost to {state.conflicts} concurrent changes")
    if state.attempts >= state.config.max_attempts:
        return _give_up(state, SQLSTATE_IO_ERROR, f"could not apply change {change.change_id}: the catalog failed")
    try:
        document = change.apply(record.document)
    except Exception as exc:  # noqa: BLE001 - the refusal is the caller's to raise
        assert state.pending is None, "apply refused a document it accepted at the same version"
        return replace(state, phase=Phase.REFUSED, error=exc), [Refuse(exc)]
    if document == record.document and state.pending is None:
        return _done(state, document)
    new = next_record(record, change.change_id, document, state.config.kept_ids)
    return replace(state, phase=Phase.SWAPPING, sent=new), [Swap(new)]


def _on_read_failed(state: State, event: ReadFailed) -> tuple[State, list[Effect]]:
    return _retry(replace(state, attempts=state.attempts + 1), event.message)


def _on_swapped(state: State, event: Swapped) -> tuple[State, list[Effect]]:
    assert state.sent is not None
    return _done(replace(state, pending=None), state.sent.document)


def _on_swap_rejected(state: State, event: SwapRejected) -> tuple[State, list[Effect]]:
    # The version is not the one the swap asserted, now. A retried request is refused after its
    # first copy landed, so "rejected" does not prove "not applied": the read decides, as after
    # an unknown outcome (not charged: another server's change, or this one, is progress).
    assert state.sent is not None
    return replace(state, phase=Phase.READING, conflicts=state.conflicts + 1,
                   pending=state.sent.version), [ReadRecord()]


def _on_swap_failed(state: State, event: SwapFailed) -> tuple[State, list[Effect]]:
    return _retry(replace(state, attempts=state.attempts + 1), event.message)


def _on_swap_unknown(state: State, event: SwapOutcomeUnknown) -> tuple[State, list[Effect]]:
    assert state.sent is not None
    # Find out first: the record says whether it landed; never swap again without reading.
    return replace(state, phase=Phase.READING, attempts=state.attempts + 1,
                   pending=state.sent.version), [ReadRecord()]


def _on_wait_elapsed(state: State, event: WaitElapsed) -> tuple[State, list[Effect]]:
    return replace(state, phase=Phase.READING), [ReadRecord()]


def _retry(state: State, message: str) -> tuple[State, list[Effect]]:
    if state.attempts >= state.config.max_attempts:
        return _give_up(state, SQLSTATE_IO_ERROR, f"could not apply change {_change(state).change_id}: {message}")
    c = state.config
    return replace(state, phase=Phase.WAITING), [Wait(min(c.backoff_s * 2 ** (state.attempts - 1), c.backoff_max_s))]


def _give_up(state: State, sqlstate: str, message: str) -> tuple[State, list[Effect]]:
    """Fail with `sqlstate` (not applied, never will be), or 08007 if a swap may still land."""
    if state.pending is not None:
        return _failed(state, SQLSTATE_RESOLUTION_UNKNOWN,
                       f"the outcome of change {_change(state).change_id} is unknown: {message}")
    return _failed(state, sqlstate, message)


def _done(state: State, document: str) -> tuple[State, list[Effect]]:
    return replace(state, phase=Phase.DONE, document=document), [Done(document)]


def _failed(state: State, sqlstate: str, message: str) -> tuple[State, list[Effect]]:
    return replace(state, phase=Phase.FAILED, sqlstate=sqlstate, message=message), [Fail(sqlstate, message)]


_Handler = Callable[[State, Any], tuple[State, list[Effect]]]

_HANDLERS: dict[tuple[Phase, type], _Handler] = {
    (Phase.IDLE, Requested): _on_requested,
    (Phase.READING, RecordRead): _on_record_read,
    (Phase.READING, ReadFailed): _on_read_failed,
    (Phase.SWAPPING, Swapped): _on_swapped,
    (Phase.SWAPPING, SwapRejected): _on_swap_rejected,
    (Phase.SWAPPING, SwapFailed): _on_swap_failed,
    (Phase.SWAPPING, SwapOutcomeUnknown): _on_swap_unknown,
    (Phase.WAITING, WaitElapsed): _on_wait_elapsed,
}
