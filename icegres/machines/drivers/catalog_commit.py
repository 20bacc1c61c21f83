"""The trio driver of the catalog commit machine: performs effects against a CatalogWorld.

The world's catalog methods block, so each runs in a worker thread; the data commit is itself a
machine (the commit machine) that the world drives and awaits. The driver decides nothing.
"""

from __future__ import annotations

import logging
from collections import deque
from typing import Protocol

import trio

from icegres.machines.catalog_commit import (
    Abort,
    Acknowledge,
    ApplyMove,
    CatalogPlan,
    CheckPlan,
    CommitData,
    DataAborted,
    DataCommitted,
    DataUnknown,
    DecisionFailed,
    DecisionRecorded,
    Effect,
    Event,
    ForgetIntent,
    IntentFailed,
    IntentForgotten,
    IntentRecorded,
    Move,
    MoveApplied,
    MoveFailed,
    MoveRefused,
    Outcome,
    PlanChecked,
    PlanCheckFailed,
    PlanRefused,
    Purge,
    Purged,
    RecordDecision,
    RecordIntent,
    ReportStranded,
    Requested,
    State,
    UndoApplied,
    UndoFailed,
    UndoMove,
    initial_state,
    outcome_of,
    recover,
    step,
)

__all__ = ["CatalogWorld", "run_catalog_commit", "run_catalog_recovery"]

log = logging.getLogger(__name__)


class CatalogWorld(Protocol):
    """The catalog, the intent records and the data commit of one block. Every method but
    `commit_data` blocks; raising counts as the failure event of its effect."""

    def check_plan(self, plan: CatalogPlan) -> PlanChecked | PlanRefused:
        """Would every move, in order, find its relation under its source and a free name?"""
        ...

    def record_intent(self, plan: CatalogPlan, decided: bool) -> None: ...

    def forget_intent(self, token: str) -> None: ...

    def apply_move(self, move: Move) -> MoveApplied | MoveRefused | MoveFailed:
        """Rename if `move.src` holds the table and `move.dst` is free; refused otherwise."""
        ...

    def undo_move(self, move: Move) -> None:
        """Rename `move.dst` back to `move.src` if dst holds the table; nothing if it never moved."""
        ...

    def purge(self, tables: tuple[tuple[str, str], ...]) -> bool:
        """Drop these hidden tables where they exist; False if some could not be dropped."""
        ...

    async def commit_data(self) -> DataCommitted | DataAborted | DataUnknown: ...


async def run_catalog_commit(plan: CatalogPlan, world: CatalogWorld) -> Outcome:
    """Drive a block's COMMIT to its verdict; shielded from cancellation like the data commit."""
    state, effects = step(initial_state(), Requested(plan))
    return await _drive(state, effects, world)


async def run_catalog_recovery(plan: CatalogPlan, decided: bool, world: CatalogWorld) -> Outcome:
    state, effects = recover(plan, decided)
    return await _drive(state, effects, world)


async def _drive(state: State, effects: list[Effect], world: CatalogWorld) -> Outcome:
    with trio.CancelScope(shield=True):
        pending = deque(effects)
        while pending:
            event = await _perform(pending.popleft(), state, world)
            if event is not None:
                if pending:
                    raise AssertionError(f"effects after an answered one: {list(pending)}")
                state, effects = step(state, event)
                pending.extend(effects)
    outcome = outcome_of(state)
    if outcome is None:
        raise AssertionError(f"catalog commit machine stopped in non-terminal {state.phase.value}")
    return outcome


async def _perform(effect: Effect, state: State, world: CatalogWorld) -> Event | None:
    plan = state.plan
    assert plan is not None
    match effect:
        case CheckPlan():
            try:
                return await trio.to_thread.run_sync(world.check_plan, plan)
            except Exception as exc:
                return PlanCheckFailed(_describe(exc))
        case RecordIntent(plan=recorded):
            try:
                await trio.to_thread.run_sync(world.record_intent, recorded, False)
            except Exception as exc:
                return IntentFailed(_describe(exc))
            return IntentRecorded()
        case ApplyMove(index=index):
            try:
                return await trio.to_thread.run_sync(world.apply_move, plan.moves[index])
            except Exception as exc:
                return MoveFailed(_describe(exc))
        case UndoMove(index=index):
            try:
                await trio.to_thread.run_sync(world.undo_move, plan.moves[index])
            except Exception as exc:
                return UndoFailed(_describe(exc))
            return UndoApplied()
        case CommitData():
            try:
                return await world.commit_data()
            except Exception as exc:  # whether it reached the catalog is not known
                return DataUnknown(_describe(exc))
        case RecordDecision():
            try:
                await trio.to_thread.run_sync(world.record_intent, plan, True)
            except Exception as exc:
                return DecisionFailed(_describe(exc))
            return DecisionRecorded()
        case Purge(tables=tables):
            try:
                ok = await trio.to_thread.run_sync(world.purge, tables)
            except Exception:
                log.warning("could not purge %s of transaction %s", tables, plan.token, exc_info=True)
                ok = False
            return Purged(ok)
        case ForgetIntent():
            try:
                await trio.to_thread.run_sync(world.forget_intent, plan.token)
            except Exception:
                # The next start finds the record, sees the block decided and finishes it: no harm.
                log.warning("could not forget the intent of %s", plan.token, exc_info=True)
            return IntentForgotten()
        case Acknowledge() | Abort() | ReportStranded():
            return None
    raise AssertionError(f"unknown effect {effect!r}")


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
