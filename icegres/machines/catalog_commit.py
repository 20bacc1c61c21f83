"""The catalog commit machine: a transaction block's DDL published with its data, or not at all.

A block's CREATE / DROP / RENAME of tables and views take effect at COMMIT. An Iceberg catalog cannot put
a rename, a create or a drop in the same atomic operation as the data commit (they are separate
catalog calls), so this machine orders them and keeps an intent record from which a crash at any
point is recovered to the whole old state or the whole new one. `specs/catalog_commit.toml` is
the independent statement of this machine; the driver is `icegres.machines.drivers.catalog_commit`.

Why it is shaped this way:

- Every step before the decision is a rename (`Move`, of a table or a view), because a rename
  can be undone by the reverse rename. A relation the block created already exists in the catalog under a hidden name
  (nobody else lists it) and is placed under its name by a Move; a table the block dropped is
  moved aside to a hidden graveyard name and only purged once the block is decided. So until
  the decision nothing is lost, and undoing is renaming back, newest first.
- The decision is one atomic act. With data to publish it is the data commit itself (the commit
  machine: one atomic catalog operation over every written table, carrying the block's token);
  without data it is writing the decision into the intent record. After it, only purges are
  left, which need no undo and may be retried for ever.
- Before anything is recorded or moved, the whole plan is checked against the catalog as it
  stands (`CheckPlan`): every move's table still under its name, every destination free. A
  block that another session's DDL got ahead of is refused there, with nothing to undo. That
  matters for recovery: the plan's moves are written into the intent record only after the
  check (a record written while the block was being staged names only its hidden tables), so a
  crash cannot make recovery "undo" a rename another session made that looks exactly like one
  of the block's own (the same table under the same new name). The deep walks of the model
  found that case (tests/model/traces/catalog_commit/).
- Recovery never guesses: the driver tells it whether the block was decided (the intent record
  says so, or the token is in a written table's snapshots), and the machine rolls forward
  (purge) or back (undo every move, newest first, then purge what the block created). Undoing a
  move that never happened is a no-op in the world (the table is still under its old name), so
  recovery undoes all of them.
- Other sessions can see the moves between the first one and the decision (a rename of `x` to
  `x_backup` then of `x_tmp` to `x` shows no `x` for that instant), as on any catalog without
  multi-object transactions; what the machine guarantees is the outcome, never a half-applied
  block after COMMIT or after a crash and restart.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from enum import Enum
from typing import Any

__all__ = [
    "Abort",
    "Acknowledge",
    "ApplyMove",
    "CatalogPlan",
    "CheckPlan",
    "CommitData",
    "Config",
    "DataAborted",
    "DataCommitted",
    "DataUnknown",
    "DecisionFailed",
    "DecisionRecorded",
    "Effect",
    "Event",
    "ForgetIntent",
    "IntentFailed",
    "IntentForgotten",
    "IntentRecorded",
    "Move",
    "MoveApplied",
    "MoveFailed",
    "MoveRefused",
    "Outcome",
    "Phase",
    "PlanCheckFailed",
    "PlanChecked",
    "PlanRefused",
    "Purge",
    "Purged",
    "RecordDecision",
    "RecordIntent",
    "Recovered",
    "ReportStranded",
    "Requested",
    "State",
    "UndoApplied",
    "UndoFailed",
    "UndoMove",
    "initial_state",
    "outcome_of",
    "recover",
    "step",
]

SQLSTATE_SERIALIZATION_FAILURE = "40001"
SQLSTATE_IO_ERROR = "58030"
SQLSTATE_CONNECTION_FAILURE = "08006"

Key = tuple[str, str]


# --- the domain ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Move:
    """Rename the relation `identity` from `src` to `dst` in `namespace`: refused unless `src`
    holds that relation and `dst` is free (another session's DDL got there first). A table is
    known by its uuid, a view (`kind` "view") by its metadata file, which a rename keeps and any
    other change of the view replaces."""

    namespace: str
    src: str
    dst: str
    table_uuid: str  # the identity
    kind: str = "table"  # or "view"

    def undo(self) -> Move:
        return Move(self.namespace, self.dst, self.src, self.table_uuid, self.kind)


@dataclass(frozen=True)
class CatalogPlan:
    """What a block's COMMIT does to the catalog, besides its data."""

    token: str  # the block's; the data commit writes it into every snapshot it makes
    moves: tuple[Move, ...]  # in the order the block's statements asked for them
    created: tuple[Key, ...] = ()  # hidden tables made for the block's CREATEs
    graveyard: tuple[Key, ...] = ()  # where the block's DROPs moved tables aside
    has_data: bool = False  # a data commit (with the block's token) is the decision
    written: tuple[Key, ...] = ()  # the tables that data commit writes, by their new names

    @property
    def placed(self) -> frozenset[Key]:
        return frozenset((m.namespace, m.src) for m in self.moves)

    @property
    def purged_when_decided(self) -> tuple[Key, ...]:
        """Dropped tables, and tables created then dropped again within the block."""
        return self.graveyard + tuple(k for k in self.created if k not in self.placed)


# --- events (past tense) -------------------------------------------------------------------------


@dataclass(frozen=True)
class Requested:
    plan: CatalogPlan


@dataclass(frozen=True)
class Recovered:
    """A process crashed with this plan's intent recorded; `decided`: the record says so, or the
    block's token is in a table it wrote."""

    plan: CatalogPlan
    decided: bool


@dataclass(frozen=True)
class PlanChecked:
    """Every move's relation is under its source name and every destination is free."""


@dataclass(frozen=True)
class PlanRefused:
    """Another session's DDL moved, dropped or replaced a relation of the plan, or took a name."""

    reason: str


@dataclass(frozen=True)
class PlanCheckFailed:
    """The catalog could not be read."""

    message: str


@dataclass(frozen=True)
class IntentRecorded:
    pass


@dataclass(frozen=True)
class IntentFailed:
    message: str


@dataclass(frozen=True)
class MoveApplied:
    pass


@dataclass(frozen=True)
class MoveRefused:
    """`src` no longer holds the table, or `dst` is taken: another session's DDL. Not applied."""

    reason: str


@dataclass(frozen=True)
class MoveFailed:
    """The catalog failed; the rename may or may not have applied (its undo finds out)."""

    message: str


@dataclass(frozen=True)
class DataCommitted:
    pass


@dataclass(frozen=True)
class DataAborted:
    sqlstate: str
    message: str
    detail: str = ""


@dataclass(frozen=True)
class DataUnknown:
    message: str


@dataclass(frozen=True)
class DecisionRecorded:
    pass


@dataclass(frozen=True)
class DecisionFailed:
    message: str


@dataclass(frozen=True)
class Purged:
    ok: bool  # False: some table could not be purged; the intent stays for the next start


@dataclass(frozen=True)
class IntentForgotten:
    pass


@dataclass(frozen=True)
class UndoApplied:
    pass


@dataclass(frozen=True)
class UndoFailed:
    message: str


Event = (
    Requested | Recovered | PlanChecked | PlanRefused | PlanCheckFailed | IntentRecorded | IntentFailed
    | MoveApplied | MoveRefused | MoveFailed | DataCommitted | DataAborted | DataUnknown | DecisionRecorded | DecisionFailed | Purged
    | IntentForgotten | UndoApplied | UndoFailed
)


# --- effects (imperative) ------------------------------------------------------------------------


@dataclass(frozen=True)
class CheckPlan:
    """Read the catalog: would every move of the plan, in order, find its relation and a free name?"""


@dataclass(frozen=True)
class RecordIntent:
    """Write the plan durably (fsync) where this server's next start finds it."""

    plan: CatalogPlan


@dataclass(frozen=True)
class ApplyMove:
    index: int


@dataclass(frozen=True)
class UndoMove:
    """Undo plan.moves[index] if it applied: rename dst back to src when dst holds the table."""

    index: int


@dataclass(frozen=True)
class CommitData:
    """Run the block's data commit (the commit machine), on the names the moves gave the tables."""


@dataclass(frozen=True)
class RecordDecision:
    """Write into the intent record that the block committed (a plan without data)."""


@dataclass(frozen=True)
class Purge:
    """Drop these hidden tables from the catalog (their files are unreferenced)."""

    tables: tuple[Key, ...]


@dataclass(frozen=True)
class ForgetIntent:
    pass


@dataclass(frozen=True)
class Acknowledge:
    pass


@dataclass(frozen=True)
class Abort:
    sqlstate: str
    message: str
    detail: str = ""


@dataclass(frozen=True)
class ReportStranded:
    """Tell the client the block's outcome is left to recovery (the intent record stays)."""

    sqlstate: str
    message: str
    detail: str = ""


Effect = (
    CheckPlan | RecordIntent | ApplyMove | UndoMove | CommitData | RecordDecision | Purge
    | ForgetIntent | Acknowledge | Abort | ReportStranded
)


# --- state ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Config:
    pass


class Phase(Enum):
    IDLE = "idle"
    CHECKING = "checking"  # CheckPlan outstanding
    RECORDING = "recording"  # RecordIntent outstanding
    MOVING = "moving"  # ApplyMove(index) outstanding
    COMMITTING_DATA = "committing_data"  # CommitData outstanding: the decision
    DECIDING = "deciding"  # RecordDecision outstanding: the decision of a plan without data
    PURGING = "purging"  # decided; Purge outstanding
    UNDOING = "undoing"  # not decided; UndoMove(index) outstanding
    DISCARDING = "discarding"  # undone; Purge of the created tables outstanding
    RETIRING = "retiring"  # undone, a purge failed: RecordIntent of the plan without its moves
    FORGETTING = "forgetting"  # ForgetIntent outstanding
    COMMITTED = "committed"
    ABORTED = "aborted"
    STRANDED = "stranded"  # the outcome is left to recovery at the next start

    @property
    def terminal(self) -> bool:
        return self in _TERMINAL


_TERMINAL = frozenset({Phase.COMMITTED, Phase.ABORTED, Phase.STRANDED})


@dataclass(frozen=True)
class State:
    phase: Phase = Phase.IDLE
    plan: CatalogPlan | None = None
    index: int = 0  # the move outstanding (MOVING, UNDOING)
    decided: bool = False
    moves_recorded: bool = False  # the intent record may name the plan's moves
    sqlstate: str | None = None  # the verdict of an aborted or stranded block
    message: str | None = None
    detail: str = ""


@dataclass(frozen=True)
class Outcome:
    phase: Phase
    sqlstate: str | None = None
    message: str | None = None
    detail: str = ""

    @property
    def committed(self) -> bool:
        return self.phase is Phase.COMMITTED


class CatalogCommitProtocolError(Exception):
    """An event the current state does not accept (a driver or world bug)."""


def initial_state(config: Config | None = None) -> State:
    return State()


def outcome_of(state: State) -> Outcome | None:
    if not state.phase.terminal:
        return None
    return Outcome(state.phase, state.sqlstate, state.message, state.detail)


def step(state: State, event: Event) -> tuple[State, list[Effect]]:
    """The only producer of a new State. A non-terminal result emits exactly one effect that is
    answered by an event; a terminal one only effects nobody answers."""
    handler = _HANDLERS.get((state.phase, type(event)))
    if handler is None:
        raise CatalogCommitProtocolError(f"{type(event).__name__} is not accepted in {state.phase.value}")
    return handler(state, event)


def recover(plan: CatalogPlan, decided: bool) -> tuple[State, list[Effect]]:
    """State for a plan whose process crashed: roll forward if decided, else back."""
    return step(initial_state(), Recovered(plan, decided))


# --- handlers ------------------------------------------------------------------------------------


def _on_requested(state: State, event: Requested) -> tuple[State, list[Effect]]:
    return replace(state, phase=Phase.CHECKING, plan=event.plan), [CheckPlan()]


def _on_plan_checked(state: State, event: PlanChecked) -> tuple[State, list[Effect]]:
    return replace(state, phase=Phase.RECORDING), [RecordIntent(_plan(state))]


def _on_plan_refused(state: State, event: PlanRefused) -> tuple[State, list[Effect]]:
    # Nothing moved: only the block's hidden tables to drop.
    state = _verdict(state, SQLSTATE_SERIALIZATION_FAILURE,
                     "could not serialize access due to concurrent update", event.reason)
    return _undo_from(state, -1)


def _on_plan_check_failed(state: State, event: PlanCheckFailed) -> tuple[State, list[Effect]]:
    state = _verdict(state, SQLSTATE_IO_ERROR, "could not read the catalog to apply the transaction's changes",
                     event.message)
    return _undo_from(state, -1)


def _on_recovered(state: State, event: Recovered) -> tuple[State, list[Effect]]:
    state = replace(state, plan=event.plan, moves_recorded=bool(event.plan.moves))
    if event.decided:
        return _purge(replace(state, decided=True))
    # Undo every move, newest first: one that never applied is a no-op in the world.
    state = _verdict(state, SQLSTATE_CONNECTION_FAILURE, "transaction rolled back by recovery",
                     "the server stopped before the transaction's COMMIT was decided")
    return _undo_from(state, len(event.plan.moves) - 1)


def _on_intent_recorded(state: State, event: IntentRecorded) -> tuple[State, list[Effect]]:
    return _move_from(replace(state, moves_recorded=True), 0)


def _on_intent_failed(state: State, event: IntentFailed) -> tuple[State, list[Effect]]:
    # Nothing moved yet: only the block's hidden tables to drop. The record may have been
    # written all the same (a failed fsync of its directory), moves and all.
    state = replace(state, moves_recorded=True)
    return _undo_from(_verdict(state, SQLSTATE_IO_ERROR, "could not record the transaction's catalog changes",
                               event.message), -1)


def _on_move_applied(state: State, event: MoveApplied) -> tuple[State, list[Effect]]:
    return _move_from(state, state.index + 1)


def _on_move_refused(state: State, event: MoveRefused) -> tuple[State, list[Effect]]:
    state = _verdict(state, SQLSTATE_SERIALIZATION_FAILURE,
                     "could not serialize access due to concurrent update", event.reason)
    return _undo_from(state, state.index - 1)


def _on_move_failed(state: State, event: MoveFailed) -> tuple[State, list[Effect]]:
    # It may have applied: its own undo is the first.
    state = _verdict(state, SQLSTATE_IO_ERROR, "could not apply the transaction's catalog changes",
                     event.message)
    return _undo_from(state, state.index)


def _on_data_committed(state: State, event: DataCommitted) -> tuple[State, list[Effect]]:
    return _purge(replace(state, decided=True))


def _on_data_aborted(state: State, event: DataAborted) -> tuple[State, list[Effect]]:
    state = _verdict(state, event.sqlstate, event.message, event.detail)
    return _undo_from(state, len(_plan(state).moves) - 1)


def _on_data_unknown(state: State, event: DataUnknown) -> tuple[State, list[Effect]]:
    return _strand(state, SQLSTATE_CONNECTION_FAILURE, "commit outcome unknown",
                   f"{event.message}; the next start of this server finishes or undoes the transaction")


def _on_decision_recorded(state: State, event: DecisionRecorded) -> tuple[State, list[Effect]]:
    return _purge(replace(state, decided=True))


def _on_decision_failed(state: State, event: DecisionFailed) -> tuple[State, list[Effect]]:
    state = _verdict(state, SQLSTATE_IO_ERROR, "could not record the transaction's commit", event.message)
    return _undo_from(state, len(_plan(state).moves) - 1)


def _on_purged(state: State, event: Purged) -> tuple[State, list[Effect]]:
    if not event.ok:
        # Hidden leftovers only: the intent stays so that the next start purges them. An undone
        # plan's record must not name its moves any more: once this block is over, another
        # session may rename a table to where a move had put it, and recovery would undo that.
        plan = _plan(state)
        if state.phase is Phase.DISCARDING and state.moves_recorded and plan.moves:
            return replace(state, phase=Phase.RETIRING), [RecordIntent(replace(plan, moves=()))]
        return _finish(state)
    return replace(state, phase=Phase.FORGETTING), [ForgetIntent()]


def _on_retired(state: State, event: IntentRecorded) -> tuple[State, list[Effect]]:
    return _finish(state)


def _on_retire_failed(state: State, event: IntentFailed) -> tuple[State, list[Effect]]:
    return _strand(state, state.sqlstate or SQLSTATE_IO_ERROR,
                   state.message or "could not undo the transaction's catalog changes",
                   f"could not record the undone plan ({event.message}); the next start of this server finishes it")


def _on_intent_forgotten(state: State, event: IntentForgotten) -> tuple[State, list[Effect]]:
    return _finish(state)


def _on_undo_applied(state: State, event: UndoApplied) -> tuple[State, list[Effect]]:
    return _undo_from(state, state.index - 1)


def _on_undo_failed(state: State, event: UndoFailed) -> tuple[State, list[Effect]]:
    return _strand(state, state.sqlstate or SQLSTATE_IO_ERROR,
                   state.message or "could not undo the transaction's catalog changes",
                   f"undo failed ({event.message}); the next start of this server undoes the transaction")


# --- helpers -------------------------------------------------------------------------------------


def _plan(state: State) -> CatalogPlan:
    if state.plan is None:
        raise CatalogCommitProtocolError("no plan in this state")
    return state.plan


def _move_from(state: State, index: int) -> tuple[State, list[Effect]]:
    plan = _plan(state)
    if index < len(plan.moves):
        return replace(state, phase=Phase.MOVING, index=index), [ApplyMove(index)]
    if plan.has_data:
        return replace(state, phase=Phase.COMMITTING_DATA), [CommitData()]
    return replace(state, phase=Phase.DECIDING), [RecordDecision()]


def _undo_from(state: State, index: int) -> tuple[State, list[Effect]]:
    if index >= 0:
        return replace(state, phase=Phase.UNDOING, index=index), [UndoMove(index)]
    return replace(state, phase=Phase.DISCARDING), [Purge(_plan(state).created)]


def _purge(state: State) -> tuple[State, list[Effect]]:
    return replace(state, phase=Phase.PURGING), [Purge(_plan(state).purged_when_decided)]


def _finish(state: State) -> tuple[State, list[Effect]]:
    if state.decided:
        return replace(state, phase=Phase.COMMITTED, sqlstate=None, message=None, detail=""), [Acknowledge()]
    assert state.sqlstate is not None and state.message is not None
    return replace(state, phase=Phase.ABORTED), [Abort(state.sqlstate, state.message, state.detail)]


def _verdict(state: State, sqlstate: str, message: str, detail: str) -> State:
    return replace(state, sqlstate=sqlstate, message=message, detail=detail)


def _strand(state: State, sqlstate: str, message: str, detail: str) -> tuple[State, list[Effect]]:
    state = replace(state, phase=Phase.STRANDED, sqlstate=sqlstate, message=message, detail=detail)
    return state, [ReportStranded(sqlstate, message, detail)]


_Handler = Callable[[State, Any], tuple[State, list[Effect]]]

_HANDLERS: dict[tuple[Phase, type], _Handler] = {
    (Phase.IDLE, Requested): _on_requested,
    (Phase.IDLE, Recovered): _on_recovered,
    (Phase.CHECKING, PlanChecked): _on_plan_checked,
    (Phase.CHECKING, PlanRefused): _on_plan_refused,
    (Phase.CHECKING, PlanCheckFailed): _on_plan_check_failed,
    (Phase.RECORDING, IntentRecorded): _on_intent_recorded,
    (Phase.RECORDING, IntentFailed): _on_intent_failed,
    (Phase.MOVING, MoveApplied): _on_move_applied,
    (Phase.MOVING, MoveRefused): _on_move_refused,
    (Phase.MOVING, MoveFailed): _on_move_failed,
    (Phase.COMMITTING_DATA, DataCommitted): _on_data_committed,
    (Phase.COMMITTING_DATA, DataAborted): _on_data_aborted,
    (Phase.COMMITTING_DATA, DataUnknown): _on_data_unknown,
    (Phase.DECIDING, DecisionRecorded): _on_decision_recorded,
    (Phase.DECIDING, DecisionFailed): _on_decision_failed,
    (Phase.PURGING, Purged): _on_purged,
    (Phase.UNDOING, UndoApplied): _on_undo_applied,
    (Phase.UNDOING, UndoFailed): _on_undo_failed,
    (Phase.DISCARDING, Purged): _on_purged,
    (Phase.RETIRING, IntentRecorded): _on_retired,
    (Phase.RETIRING, IntentFailed): _on_retire_failed,
    (Phase.FORGETTING, IntentForgotten): _on_intent_forgotten,
}
