"""The transaction block machine: BEGIN, COMMIT, ROLLBACK, savepoints and SET in a block.

One rule set for both front ends. pgwire's session and each Flight SQL transaction hold a `State`
and feed it what the client asked for; the core decides, as PostgreSQL 15 does, what that means
for the block and returns it as effects, which a driver (`icegres.engine.txblock_driver`) performs:
the engine's `TxnState` starts, marks, rolls back to a mark, publishes or discards; the front end
restores settings, closes portals and tells the client. `specs/txblock.toml` is the independent
statement of this machine.

Why it is shaped this way:

- The phases are PostgreSQL's `TBlockState` as a client can see them: `idle` ('I' in
  ReadyForQuery), `in_block` ('T'), `failed` ('E': an error aborted the block; everything but
  COMMIT, ROLLBACK and ROLLBACK TO is refused with 25P02 until it ends), and the implicit block
  of a multi-statement simple Query that writes ('T' and 'E' while it runs; it ends with the
  Query message, committing all its writes or none).
- A refusal (`Refuse`) is the only effect of its step and never changes the state: the front end
  reports the error, and an error inside a block is `StatementFailed`, which aborts it.
- A warning (`Notice`) lets the statement go on: BEGIN inside a block (25001), COMMIT or
  ROLLBACK outside one (25P01), SET LOCAL outside one (25P01; the value does not last).
- Settings stay opaque strings. The front end validates and applies a SET, then reports what it
  assigned (`SettingChanged`: name, value before, value after). The core keeps what the end of the
  block must restore: ROLLBACK every value as it was before the block; COMMIT the value of the
  last plain SET of each setting, or, if only SET LOCAL changed it, its value before the block
  (SET LOCAL lasts until the block ends either way; a plain SET after it survives COMMIT).
- Savepoint names may repeat; RELEASE and ROLLBACK TO find the newest of a name. The engine's
  marks are parallel to `State.savepoints`: effects name savepoints by index.
- Nothing here is durable, so nothing is recovered: a block lives in one connection's memory and a
  crash (or a lost connection) ends it like a ROLLBACK, as in PostgreSQL. `recover` returns idle.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from enum import Enum
from typing import Any

__all__ = [
    "BeginRequested",
    "CloseBlockPortals",
    "ClosePortals",
    "CommitRequested",
    "Config",
    "CursorDeclareRequested",
    "DiscardAllRequested",
    "DiscardWrites",
    "Effect",
    "Event",
    "ImplicitBlockEnded",
    "ImplicitBlockStarted",
    "MarkSavepoint",
    "Notice",
    "Phase",
    "PublishWrites",
    "ReadOnlyRequested",
    "Refuse",
    "ReleaseSavepoint",
    "ReportRolledBack",
    "RestoreSavepoint",
    "RestoreSettings",
    "RollbackRequested",
    "RolledBackTo",
    "SavepointDeclared",
    "SavepointReleased",
    "SettingChanged",
    "StartTransaction",
    "State",
    "StatementFailed",
    "StatementStarted",
    "SyncReceived",
    "TxBlockProtocolError",
    "WriteStarted",
    "initial_state",
    "recover",
    "step",
    "transaction_status",
]

# PostgreSQL's SQLSTATEs for the block's own errors and warnings (errcodes.txt).
ACTIVE_SQL_TRANSACTION = "25001"
NO_ACTIVE_SQL_TRANSACTION = "25P01"
IN_FAILED_SQL_TRANSACTION = "25P02"
READ_ONLY_SQL_TRANSACTION = "25006"
INVALID_SAVEPOINT_SPECIFICATION = "3B001"
PROGRAM_LIMIT_EXCEEDED = "53400"

IN_FAILED_MESSAGE = (
    "current transaction is aborted, commands ignored until end of transaction block"
)


# --- events (past tense: what the client asked for, or what happened) ---------------------------


@dataclass(frozen=True)
class BeginRequested:
    """BEGIN / START TRANSACTION. `read_only`: as the statement says, else the session's default."""

    isolation: str | None = None
    read_only: bool = False


@dataclass(frozen=True)
class ImplicitBlockStarted:
    """A multi-statement simple Query that writes begins: its statements are one transaction."""

    read_only: bool = False  # the session's default_transaction_read_only


@dataclass(frozen=True)
class ImplicitBlockEnded:
    """The last statement of that Query message has run (or one failed and the rest were skipped)."""


@dataclass(frozen=True)
class StatementStarted:
    """Any statement is about to run. `exits_block`: COMMIT, ROLLBACK or ROLLBACK TO (PostgreSQL's
    IsTransactionExitStmt), the only ones a failed block runs."""

    exits_block: bool = False


@dataclass(frozen=True)
class WriteStarted:
    """A statement that changes the lake (`what`: its tag, e.g. "INSERT", "COPY FROM") is about to
    run. `default_read_only`: the session's default_transaction_read_only, which rules outside a
    block."""

    what: str
    default_read_only: bool = False


@dataclass(frozen=True)
class StatementFailed:
    """A statement (or a protocol message) failed and its error went to the client."""


@dataclass(frozen=True)
class CommitRequested:
    """COMMIT / END."""


@dataclass(frozen=True)
class RollbackRequested:
    """ROLLBACK / ABORT."""


@dataclass(frozen=True)
class SavepointDeclared:
    """SAVEPOINT name."""

    name: str


@dataclass(frozen=True)
class SavepointReleased:
    """RELEASE [SAVEPOINT] name."""

    name: str


@dataclass(frozen=True)
class RolledBackTo:
    """ROLLBACK TO [SAVEPOINT] name."""

    name: str


@dataclass(frozen=True)
class SettingChanged:
    """A SET (or SET LOCAL) the front end validated and applied: (name, before, after) for every
    setting it assigned, even to the value it had (a plain SET still outlasts an earlier SET LOCAL
    then, as in PostgreSQL)."""

    local: bool
    changes: tuple[tuple[str, str, str], ...]


@dataclass(frozen=True)
class ReadOnlyRequested:
    """SET TRANSACTION READ ONLY (True) / READ WRITE (False)."""

    read_only: bool


@dataclass(frozen=True)
class CursorDeclareRequested:
    """A statement that holds something for the rest of its block: DECLARE name CURSOR [WITH
    HOLD] FOR ... (only a WITH HOLD cursor may outlive its block), and LOCK TABLE (`what`)."""

    hold: bool
    what: str = "DECLARE CURSOR"


@dataclass(frozen=True)
class DiscardAllRequested:
    """DISCARD ALL, which cannot run inside a block."""


@dataclass(frozen=True)
class SyncReceived:
    """The extended protocol's Sync: outside a block it ends the implicit transaction."""


Event = (
    BeginRequested
    | ImplicitBlockStarted
    | ImplicitBlockEnded
    | StatementStarted
    | WriteStarted
    | StatementFailed
    | CommitRequested
    | RollbackRequested
    | SavepointDeclared
    | SavepointReleased
    | RolledBackTo
    | SettingChanged
    | ReadOnlyRequested
    | CursorDeclareRequested
    | DiscardAllRequested
    | SyncReceived
)


# --- effects (imperative), performed in the order given --------------------------------------------


@dataclass(frozen=True)
class StartTransaction:
    """Begin the engine's transaction: snapshot pins and staged writes (`isolation`: as asked,
    None for the session's default_transaction_isolation)."""

    isolation: str | None


@dataclass(frozen=True)
class PublishWrites:
    """Commit the block's staged writes through the commit machine, and end its transaction. May
    fail (40001, ...): the block has ended either way."""


@dataclass(frozen=True)
class DiscardWrites:
    """Drop the block's staged writes (their files are unreferenced) and end its transaction."""


@dataclass(frozen=True)
class MarkSavepoint:
    """Remember the staged writes as they are now, as the newest savepoint mark."""

    name: str


@dataclass(frozen=True)
class ReleaseSavepoint:
    """Forget the marks from `index` on; the writes since stay staged."""

    index: int


@dataclass(frozen=True)
class RestoreSavepoint:
    """Staged writes back to mark `index`, which stays; later marks are forgotten."""

    index: int


@dataclass(frozen=True)
class RestoreSettings:
    """Set each (name, value), as it was: a block ended, or a SET LOCAL outside one lapsed."""

    values: tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class CloseBlockPortals:
    """Close what lives until the end of the transaction: named portals and cursors without HOLD."""


@dataclass(frozen=True)
class ClosePortals:
    """Close every portal: the extended protocol's implicit transaction ended at a Sync."""


@dataclass(frozen=True)
class Notice:
    """Tell the client a WARNING; the statement goes on."""

    sqlstate: str
    message: str


@dataclass(frozen=True)
class Refuse:
    """The statement fails with this error; nothing else happened."""

    sqlstate: str
    message: str


@dataclass(frozen=True)
class ReportRolledBack:
    """The COMMIT of a failed block rolled it back: PostgreSQL answers it with the tag ROLLBACK."""


Effect = (
    StartTransaction
    | PublishWrites
    | DiscardWrites
    | MarkSavepoint
    | ReleaseSavepoint
    | RestoreSavepoint
    | RestoreSettings
    | CloseBlockPortals
    | ClosePortals
    | Notice
    | Refuse
    | ReportRolledBack
)


# --- state ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Config:
    # Open savepoints per block (53400 beyond it); None: no bound but memory, as PostgreSQL.
    savepoints_max: int | None = None

    def __post_init__(self) -> None:
        if self.savepoints_max is not None and self.savepoints_max < 1:
            raise ValueError("savepoints_max must be at least 1 (or None)")


class Phase(Enum):
    IDLE = "idle"
    IN_BLOCK = "in_block"  # BEGIN ran
    FAILED = "failed"  # a statement failed in the block: only COMMIT / ROLLBACK [TO] run
    IMPLICIT = "implicit"  # the statements of one multi-statement Query that writes
    IMPLICIT_FAILED = "implicit_failed"  # one of them failed: the rest are skipped, nothing commits

    @property
    def status(self) -> str:
        """ReadyForQuery's transaction status byte for this phase."""
        return _STATUS[self]


_STATUS = {
    Phase.IDLE: "I",
    Phase.IN_BLOCK: "T",
    Phase.FAILED: "E",
    Phase.IMPLICIT: "T",
    Phase.IMPLICIT_FAILED: "E",
}

Settings = tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class State:
    config: Config = field(default_factory=Config)
    phase: Phase = Phase.IDLE
    savepoints: tuple[str, ...] = ()  # names, oldest first; the engine's marks are parallel
    read_only: bool = False
    # What the end of the block sets again: on ROLLBACK each changed setting's value before the
    # block; on COMMIT its last plain SET's value, else (SET LOCAL only) its value before the block.
    before: Settings = ()
    after_commit: Settings = ()

    @property
    def idle(self) -> bool:
        return self.phase is Phase.IDLE

    @property
    def open(self) -> bool:
        """A block whose statements run: they read its snapshots and stage into its writes."""
        return self.phase in (Phase.IN_BLOCK, Phase.IMPLICIT)


class TxBlockProtocolError(Exception):
    """An event the current phase does not accept (a front end bug, never a client's)."""


# --- the transition function ---------------------------------------------------------------------


def initial_state(config: Config | None = None) -> State:
    return State(config=config or Config())


def recover(config: Config | None = None) -> State:
    """The state after a crash: idle. A block is never durable (its writes are only staged until
    COMMIT publishes them), and a client whose connection is gone cannot continue it, so it ended
    as a ROLLBACK would have; PostgreSQL does the same."""
    return initial_state(config)


def transaction_status(state: State) -> str:
    """'I', 'T' or 'E': what ReadyForQuery says of this state."""
    return state.phase.status


def step(state: State, event: Event) -> tuple[State, list[Effect]]:
    """The only producer of a new State: apply `event`, return the next state and its effects.

    Effects are in the order they must be performed. A `Refuse` is always alone and leaves the
    state as it was. Raises TxBlockProtocolError for an event the phase does not accept.
    """
    handler = _HANDLERS.get((state.phase, type(event)))
    if handler is None:
        raise TxBlockProtocolError(f"{type(event).__name__} is not accepted in {state.phase.value}")
    return handler(state, event)


def _nothing(state: State, event: Any) -> tuple[State, list[Effect]]:
    return state, []


def _refuse(state: State, sqlstate: str, message: str) -> tuple[State, list[Effect]]:
    return state, [Refuse(sqlstate, message)]


def _in_failed(state: State, event: Any) -> tuple[State, list[Effect]]:
    return _refuse(state, IN_FAILED_SQL_TRANSACTION, IN_FAILED_MESSAGE)


def _end(state: State, restore: Settings, *effects: Effect) -> tuple[State, list[Effect]]:
    return initial_state(state.config), [RestoreSettings(restore), CloseBlockPortals(), *effects]


# idle


def _on_begin(state: State, event: BeginRequested) -> tuple[State, list[Effect]]:
    started = replace(initial_state(state.config), phase=Phase.IN_BLOCK, read_only=event.read_only)
    return started, [StartTransaction(event.isolation)]


def _on_implicit_started(state: State, event: ImplicitBlockStarted) -> tuple[State, list[Effect]]:
    started = replace(initial_state(state.config), phase=Phase.IMPLICIT, read_only=event.read_only)
    return started, [StartTransaction(None)]


def _on_write(state: State, event: WriteStarted) -> tuple[State, list[Effect]]:
    read_only = event.default_read_only if state.idle else state.read_only
    if read_only:
        return _refuse(
            state,
            READ_ONLY_SQL_TRANSACTION,
            f"cannot execute {event.what} in a read-only transaction",
        )
    return state, []


def _no_block_to_end(state: State, event: Any) -> tuple[State, list[Effect]]:
    # What is open outside a block still ends with the statement's implicit transaction.
    return state, [
        Notice(NO_ACTIVE_SQL_TRANSACTION, "there is no transaction in progress"),
        CloseBlockPortals(),
    ]


def _savepoint_outside(what: str) -> Callable[[State, Any], tuple[State, list[Effect]]]:
    def refuse(state: State, event: Any) -> tuple[State, list[Effect]]:
        return _refuse(
            state, NO_ACTIVE_SQL_TRANSACTION, f"{what} can only be used in transaction blocks"
        )

    return refuse


def _on_setting_outside(state: State, event: SettingChanged) -> tuple[State, list[Effect]]:
    if not event.local:
        return state, []
    # SET LOCAL lasts until the end of the transaction, here the statement's own: it lapses at once.
    lapsed = tuple((name, old) for name, old, _ in event.changes)
    notice = Notice(NO_ACTIVE_SQL_TRANSACTION, "SET LOCAL can only be used in transaction blocks")
    return state, [notice, RestoreSettings(lapsed)]


def _on_declare_outside(state: State, event: CursorDeclareRequested) -> tuple[State, list[Effect]]:
    if event.hold:
        return state, []
    return _refuse(state, NO_ACTIVE_SQL_TRANSACTION, f"{event.what} can only be used in transaction blocks")


def _on_sync_outside(state: State, event: SyncReceived) -> tuple[State, list[Effect]]:
    return state, [ClosePortals()]


# in a block


def _on_begin_inside(state: State, event: BeginRequested) -> tuple[State, list[Effect]]:
    return state, [Notice(ACTIVE_SQL_TRANSACTION, "there is already a transaction in progress")]


def _on_failed(state: State, event: StatementFailed) -> tuple[State, list[Effect]]:
    aborted = Phase.IMPLICIT_FAILED if state.phase is Phase.IMPLICIT else Phase.FAILED
    return replace(state, phase=aborted), []


def _on_commit(state: State, event: CommitRequested) -> tuple[State, list[Effect]]:
    return _end(state, state.after_commit, PublishWrites())


def _on_rollback(state: State, event: RollbackRequested) -> tuple[State, list[Effect]]:
    return _end(state, state.before, DiscardWrites())


def _on_commit_failed(state: State, event: CommitRequested) -> tuple[State, list[Effect]]:
    return _end(state, state.before, DiscardWrites(), ReportRolledBack())


def _on_savepoint(state: State, event: SavepointDeclared) -> tuple[State, list[Effect]]:
    limit = state.config.savepoints_max
    if limit is not None and len(state.savepoints) >= limit:
        return _refuse(
            state,
            PROGRAM_LIMIT_EXCEEDED,
            f"too many savepoints in this transaction (at most {limit}): release some first",
        )
    return replace(state, savepoints=(*state.savepoints, event.name)), [MarkSavepoint(event.name)]


def _on_release(state: State, event: SavepointReleased) -> tuple[State, list[Effect]]:
    index = _newest(state, event.name)
    if index is None:
        return _no_such_savepoint(state, event.name)
    return replace(state, savepoints=state.savepoints[:index]), [ReleaseSavepoint(index)]


def _on_rolled_back_to(state: State, event: RolledBackTo) -> tuple[State, list[Effect]]:
    index = _newest(state, event.name)
    if index is None:
        return _no_such_savepoint(state, event.name)
    # The savepoint stays (it can be rolled back to again), and a failed block is usable again.
    kept = replace(state, phase=Phase.IN_BLOCK, savepoints=state.savepoints[: index + 1])
    return kept, [RestoreSavepoint(index)]


def _on_setting_inside(state: State, event: SettingChanged) -> tuple[State, list[Effect]]:
    before, after_commit = dict(state.before), dict(state.after_commit)
    for name, old, new in event.changes:
        before.setdefault(name, old)
        if event.local:
            after_commit.setdefault(name, old)
        else:
            after_commit[name] = new
    return replace(
        state, before=tuple(before.items()), after_commit=tuple(after_commit.items())
    ), []


def _on_read_only(state: State, event: ReadOnlyRequested) -> tuple[State, list[Effect]]:
    return replace(state, read_only=event.read_only), []


def _on_discard_all_inside(state: State, event: DiscardAllRequested) -> tuple[State, list[Effect]]:
    return _refuse(
        state, ACTIVE_SQL_TRANSACTION, "DISCARD ALL cannot run inside a transaction block"
    )


# failed


def _on_statement_in_failed(state: State, event: StatementStarted) -> tuple[State, list[Effect]]:
    if event.exits_block:
        return state, []
    return _in_failed(state, event)


# the implicit block


def _on_implicit_ended(state: State, event: ImplicitBlockEnded) -> tuple[State, list[Effect]]:
    failed = state.phase is Phase.IMPLICIT_FAILED
    return initial_state(state.config), [
        CloseBlockPortals(),
        DiscardWrites() if failed else PublishWrites(),
    ]


def _newest(state: State, name: str) -> int | None:
    for index in range(len(state.savepoints) - 1, -1, -1):
        if state.savepoints[index] == name:
            return index
    return None


def _no_such_savepoint(state: State, name: str) -> tuple[State, list[Effect]]:
    return _refuse(state, INVALID_SAVEPOINT_SPECIFICATION, f'savepoint "{name}" does not exist')


_Handler = Callable[[State, Any], tuple[State, list[Effect]]]

_HANDLERS: dict[tuple[Phase, type], _Handler] = {
    (Phase.IDLE, BeginRequested): _on_begin,
    (Phase.IDLE, ImplicitBlockStarted): _on_implicit_started,
    (Phase.IDLE, StatementStarted): _nothing,
    (Phase.IDLE, WriteStarted): _on_write,
    (Phase.IDLE, StatementFailed): _nothing,
    (Phase.IDLE, CommitRequested): _no_block_to_end,
    (Phase.IDLE, RollbackRequested): _no_block_to_end,
    (Phase.IDLE, SavepointDeclared): _savepoint_outside("SAVEPOINT"),
    (Phase.IDLE, SavepointReleased): _savepoint_outside("RELEASE SAVEPOINT"),
    (Phase.IDLE, RolledBackTo): _savepoint_outside("ROLLBACK TO SAVEPOINT"),
    (Phase.IDLE, SettingChanged): _on_setting_outside,
    (Phase.IDLE, ReadOnlyRequested): _nothing,  # PostgreSQL warns; icegres has always been silent
    (Phase.IDLE, CursorDeclareRequested): _on_declare_outside,
    (Phase.IDLE, DiscardAllRequested): _nothing,
    (Phase.IDLE, SyncReceived): _on_sync_outside,
    (Phase.IN_BLOCK, BeginRequested): _on_begin_inside,
    (Phase.IN_BLOCK, StatementStarted): _nothing,
    (Phase.IN_BLOCK, WriteStarted): _on_write,
    (Phase.IN_BLOCK, StatementFailed): _on_failed,
    (Phase.IN_BLOCK, CommitRequested): _on_commit,
    (Phase.IN_BLOCK, RollbackRequested): _on_rollback,
    (Phase.IN_BLOCK, SavepointDeclared): _on_savepoint,
    (Phase.IN_BLOCK, SavepointReleased): _on_release,
    (Phase.IN_BLOCK, RolledBackTo): _on_rolled_back_to,
    (Phase.IN_BLOCK, SettingChanged): _on_setting_inside,
    (Phase.IN_BLOCK, ReadOnlyRequested): _on_read_only,
    (Phase.IN_BLOCK, CursorDeclareRequested): _nothing,
    (Phase.IN_BLOCK, DiscardAllRequested): _on_discard_all_inside,
    (Phase.IN_BLOCK, SyncReceived): _nothing,
    (Phase.FAILED, BeginRequested): _in_failed,
    (Phase.FAILED, StatementStarted): _on_statement_in_failed,
    (Phase.FAILED, WriteStarted): _in_failed,
    (Phase.FAILED, StatementFailed): _nothing,
    (Phase.FAILED, CommitRequested): _on_commit_failed,
    (Phase.FAILED, RollbackRequested): _on_rollback,
    (Phase.FAILED, SavepointDeclared): _in_failed,
    (Phase.FAILED, SavepointReleased): _in_failed,
    (Phase.FAILED, RolledBackTo): _on_rolled_back_to,
    (Phase.FAILED, ReadOnlyRequested): _in_failed,
    (Phase.FAILED, CursorDeclareRequested): _in_failed,
    (Phase.FAILED, DiscardAllRequested): _in_failed,
    (Phase.FAILED, SyncReceived): _nothing,
    (Phase.IMPLICIT, StatementStarted): _nothing,
    (Phase.IMPLICIT, WriteStarted): _on_write,
    (Phase.IMPLICIT, StatementFailed): _on_failed,
    (Phase.IMPLICIT, ImplicitBlockEnded): _on_implicit_ended,
    (Phase.IMPLICIT_FAILED, ImplicitBlockEnded): _on_implicit_ended,
}
