"""The trio driver of the commit machine: performs effects against a CommitWorld.

The world's methods block (pyiceberg, HTTP, SQL), so each runs in a worker thread; the pause the
core asks for (`Wait`) is a trio sleep, so `trio.testing.MockClock` makes a whole commit
deterministic. The driver decides nothing: it only translates effects into calls and call results
into events, and reports the core's terminal verdict.
"""

from __future__ import annotations

import logging
from collections import deque
from typing import Protocol

import trio

from icegres.machines.commit import (
    Abort,
    Acknowledge,
    CommitOutcome,
    CommitRequest,
    CommitRequested,
    Config,
    DeleteFiles,
    Effect,
    Event,
    Inspect,
    InspectFailed,
    Phase,
    Publish,
    PublishFailed,
    PublishOutcomeUnknown,
    PublishRejected,
    PublishSucceeded,
    ReportOutcomeUnknown,
    State,
    TableHead,
    TablesInspected,
    Wait,
    WaitElapsed,
    initial_state,
    outcome_of,
    recover,
    step,
)

__all__ = ["CommitWorld", "PublishResult", "run_commit", "run_recovery"]

log = logging.getLogger(__name__)

PublishResult = PublishSucceeded | PublishRejected | PublishFailed | PublishOutcomeUnknown


class CommitWorld(Protocol):
    """The catalog and storage side of a commit. Every method blocks; the driver calls it in a thread.

    Implementations must bound their own calls (client timeouts): the driver never abandons one,
    because a publish abandoned mid-flight could still apply after we had looked for it.
    """

    def publish(self, request: CommitRequest, publish: Publish) -> PublishResult:
        """Build each write's snapshot on `publish.bases` and commit all tables atomically.

        Every snapshot summary carries `request.token`. Requirements per written table:
        assert-table-uuid, assert-current-schema-id, assert-ref-snapshot-id(main) = base; per
        `publish.guards` entry: assert-table-uuid, assert-ref-snapshot-id(main) = its snapshot.
        Returns PublishSucceeded; PublishRejected when a requirement failed; PublishFailed when the
        commit definitely did not apply; PublishOutcomeUnknown when it might have. When it returns,
        the publish must no longer be able to apply later. Raising counts as an unknown outcome.
        """
        ...

    def inspect(self, request: CommitRequest, tables: tuple[str, ...]) -> tuple[TableHead, ...]:
        """One TableHead per table, read fresh from the catalog. Raising counts as InspectFailed."""
        ...

    def delete_files(self, files: frozenset[str]) -> None:
        """Delete staged data files nothing references. Best effort; errors are logged."""
        ...


async def run_commit(request: CommitRequest, world: CommitWorld, config: Config) -> CommitOutcome:
    """Drive `request` to a terminal verdict. `committed` is True only if the core reached COMMITTED.

    Cancelling the caller does not abandon a commit halfway (Postgres, too, finishes a COMMIT whose
    client went away): the machine runs to its terminal state, bounded by the config's attempts.
    Raises the core's InvariantViolation if the catalog shows a partially applied commit.
    """
    state, effects = step(initial_state(config), CommitRequested(request))
    return await _drive(state, effects, world)


async def run_recovery(request: CommitRequest, world: CommitWorld, config: Config) -> CommitOutcome:
    """Resolve a request staged by a process that crashed: inspect for its token before anything."""
    state, effects = recover(request, config)
    return await _drive(state, effects, world)


async def _drive(state: State, effects: list[Effect], world: CommitWorld) -> CommitOutcome:
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
        raise AssertionError(f"commit machine stopped in non-terminal {state.phase.value}")
    if outcome.committed != (state.phase is Phase.COMMITTED):
        raise AssertionError("outcome disagrees with the core's state")
    return outcome


async def _perform(effect: Effect, state: State, world: CommitWorld) -> Event | None:
    """Carry out one effect; the event that answers it, or None for effects nobody answers."""
    request = state.request
    assert request is not None
    match effect:
        case Publish():
            return await _publish(world, request, effect)
        case Inspect(tables=tables):
            try:
                heads = await trio.to_thread.run_sync(world.inspect, request, tables)
            except Exception as exc:  # any failure to look is just "could not look"
                return InspectFailed(_describe(exc))
            return TablesInspected(tuple(heads))
        case Wait(seconds=seconds):
            await trio.sleep(seconds)
            return WaitElapsed()
        case DeleteFiles(files=files):
            if files:
                try:
                    await trio.to_thread.run_sync(world.delete_files, files)
                except Exception:
                    # Orphaned staged files waste space but are never read: no metadata names them.
                    log.warning(
                        "could not delete %d staged files of %s",
                        len(files),
                        request.token,
                        exc_info=True,
                    )
            return None
        case Acknowledge() | Abort() | ReportOutcomeUnknown():
            return None  # the verdict is read off the terminal state by the caller
    raise AssertionError(f"unknown effect {effect!r}")


async def _publish(world: CommitWorld, request: CommitRequest, effect: Publish) -> Event:
    try:
        result = await trio.to_thread.run_sync(world.publish, request, effect)
    except Exception as exc:
        # We cannot tell whether it was sent, so it may have applied.
        return PublishOutcomeUnknown(_describe(exc))
    if not isinstance(
        result, PublishSucceeded | PublishRejected | PublishFailed | PublishOutcomeUnknown
    ):
        raise TypeError(f"CommitWorld.publish returned {result!r}, not a publish event")
    return result


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
