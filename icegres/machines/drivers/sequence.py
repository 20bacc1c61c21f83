"""The trio driver of the sequence machine: performs its effects against a SequenceWorld.

The world's catalog calls block, so each runs in a worker thread. The driver decides nothing: it
turns each answer (or exception) into the machine's event.
"""

from __future__ import annotations

from typing import Protocol

import trio

from icegres.machines.sequence import (
    Advance,
    Advanced,
    AdvanceFailed,
    AdvanceOutcomeUnknown,
    AdvanceRejected,
    Config,
    Effect,
    Event,
    Fail,
    Grant,
    Head,
    HeadRead,
    Outcome,
    ReadFailed,
    ReadHead,
    Request,
    Requested,
    SequenceMissing,
    Wait,
    WaitElapsed,
    initial_state,
    outcome_of,
    step,
)

__all__ = ["SequenceGone", "SequenceWorld", "SwapNotApplied", "SwapRejected", "SwapUnknown", "run_reservation"]


class SequenceGone(Exception):
    """The sequence does not exist (dropped)."""


class SwapRejected(Exception):
    """The head had moved: the swap definitely did not apply."""


class SwapNotApplied(Exception):
    """The swap definitely did not reach the catalog."""


class SwapUnknown(Exception):
    """The swap was sent and not answered: it may have applied."""


class SequenceWorld(Protocol):
    """One sequence in the catalog. Both methods block; any other exception from `read_head`
    is a failed read."""

    def read_head(self) -> Head:
        """The head as the catalog has it now (SequenceGone if the sequence is not there)."""
        ...

    def advance(self, expected: int, head: Head) -> None:
        """Swap the head at version `expected` for `head`: SwapRejected, SwapNotApplied,
        SwapUnknown or SequenceGone where it did not (or may not have) applied."""
        ...


async def run_reservation(request: Request, world: SequenceWorld, config: Config | None = None) -> Outcome:
    """Reserve one block of `request.definition`'s values; shielded, like every catalog commit:
    a cancelled statement must not leave a swap half-known."""
    state, effects = step(initial_state(config), Requested(request))
    with trio.CancelScope(shield=True):
        while True:
            answered = [e for e in effects if not isinstance(e, Grant | Fail)]
            if not answered:
                break
            [effect] = answered
            state, effects = step(state, await _perform(effect, world))
    outcome = outcome_of(state)
    assert outcome is not None
    return outcome


async def _perform(effect: Effect, world: SequenceWorld) -> Event:
    match effect:
        case ReadHead():
            try:
                return HeadRead(await trio.to_thread.run_sync(world.read_head))
            except SequenceGone:
                return SequenceMissing()
            except Exception as exc:  # noqa: BLE001 - the catalog's failure is the event
                return ReadFailed(_describe(exc))
        case Advance(expected=expected, head=head):
            try:
                await trio.to_thread.run_sync(world.advance, expected, head)
            except SwapRejected:
                return AdvanceRejected()
            except SequenceGone:
                return SequenceMissing()
            except SwapNotApplied as exc:
                return AdvanceFailed(_describe(exc))
            except Exception as exc:  # noqa: BLE001 - SwapUnknown, and anything unforeseen
                return AdvanceOutcomeUnknown(_describe(exc))
            return Advanced()
        case Wait(seconds=seconds):
            await trio.sleep(seconds)
            return WaitElapsed()
    raise AssertionError(f"not an answered effect: {effect!r}")


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
