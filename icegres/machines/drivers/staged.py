"""The trio driver of the staged-file machine: performs its effects against a StagedWorld.

The world's methods block (catalog reads, manifests, storage deletes, the local record), so each
runs in a worker thread; `Wait` is a trio sleep. The driver decides nothing: it translates effects
into calls and call results into events, and returns the terminal state.
"""

from __future__ import annotations

import logging
from collections import deque
from typing import Protocol

import trio

from icegres.machines.staged import (
    Config,
    DeleteFiles,
    Effect,
    Event,
    FilesDeleted,
    ForgetFailed,
    ForgetRecord,
    Inspect,
    InspectFailed,
    RecordForgotten,
    ReportCleaned,
    ReportKept,
    StagingRecord,
    State,
    StatementEnded,
    TableSeen,
    TablesInspected,
    Verdict,
    Wait,
    WaitElapsed,
    initial_state,
    recover,
    step,
)

__all__ = ["StagedWorld", "run_recovery", "run_statement_end"]

log = logging.getLogger(__name__)


class StagedWorld(Protocol):
    """The catalog, storage and record side. Every method blocks; the driver calls it in a thread."""

    def inspect(self, record: StagingRecord, tables: tuple[str, ...]) -> tuple[TableSeen, ...]:
        """One TableSeen per table, from the table's current metadata and EVERY snapshot's
        manifests. Raise if anything cannot be read (counted as InspectFailed: fail closed)."""
        ...

    def delete_files(self, files: frozenset[str]) -> frozenset[str]:
        """Delete `files`; return those still present (a missing file counts as deleted)."""
        ...

    def forget(self, token: str) -> None:
        """Remove the record. Raising counts as ForgetFailed."""
        ...


async def run_statement_end(record: StagingRecord, verdict: Verdict, published: frozenset[str],
                            world: StagedWorld, config: Config | None = None) -> State:
    """Clean up after a statement of this process: its verdict decides (no inspection)."""
    state, effects = step(initial_state(config), StatementEnded(record, verdict, published))
    return await _drive(state, effects, world)


async def run_recovery(record: StagingRecord, owner_running: bool, world: StagedWorld,
                       config: Config | None = None) -> State:
    """Recover a record found at start-up: inspect the catalog before deleting anything."""
    state, effects = recover(record, owner_running, config)
    return await _drive(state, effects, world)


async def _drive(state: State, effects: list[Effect], world: StagedWorld) -> State:
    # Shielded: a cleanup abandoned between its delete and its forget is safe (the next start
    # redoes it), but one abandoned before its delete leaves the files to the 3-day GC.
    with trio.CancelScope(shield=True):
        pending = deque(effects)
        while pending:
            event = await _perform(pending.popleft(), state, world)
            if event is not None:
                if pending:
                    raise AssertionError(f"effects after an answered one: {list(pending)}")
                state, effects = step(state, event)
                pending.extend(effects)
    if not state.phase.terminal:
        raise AssertionError(f"staged machine stopped in non-terminal {state.phase.value}")
    return state


async def _perform(effect: Effect, state: State, world: StagedWorld) -> Event | None:
    record = state.record
    assert record is not None
    match effect:
        case Inspect(tables=tables):
            try:
                seen = await trio.to_thread.run_sync(world.inspect, record, tables)
            except Exception as exc:  # anything unreadable: decide nothing
                return InspectFailed(_describe(exc))
            return TablesInspected(tuple(seen))
        case Wait(seconds=seconds):
            await trio.sleep(seconds)
            return WaitElapsed()
        case DeleteFiles(files=files):
            try:
                failed = await trio.to_thread.run_sync(world.delete_files, files)
            except Exception:
                log.warning("could not delete staged files of %s", record.token, exc_info=True)
                failed = files
            return FilesDeleted(frozenset(failed))
        case ForgetRecord(token=token):
            try:
                await trio.to_thread.run_sync(world.forget, token)
            except Exception as exc:
                return ForgetFailed(_describe(exc))
            return RecordForgotten()
        case ReportCleaned() | ReportKept():
            return None
    raise AssertionError(f"unknown effect {effect!r}")


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
