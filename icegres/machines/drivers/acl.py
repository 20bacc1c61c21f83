"""The trio driver of the shared-document machine: performs its effects against an AclWorld.

The world's catalog calls block, so each runs in a worker thread, shielded: a cancelled statement
must not leave a swap half-known (the machine hears every answer). `apply` runs in the machine,
on the event loop: it is the caller's pure function over a small document. The driver decides
nothing: it turns each answer (or exception) into the machine's event.
"""

from __future__ import annotations

from typing import Protocol

import trio

from icegres.machines.acl import (
    Change,
    Config,
    Done,
    Effect,
    Event,
    Fail,
    Outcome,
    ReadFailed,
    ReadRecord,
    Record,
    RecordRead,
    Refuse,
    Requested,
    Swap,
    SwapFailed,
    SwapOutcomeUnknown,
    Swapped,
    SwapRejected,
    Wait,
    WaitElapsed,
    initial_state,
    outcome_of,
    step,
)

__all__ = ["AclWorld", "SwapNotApplied", "SwapRejectedError", "SwapUnknownError", "run_change"]


class SwapRejectedError(Exception):
    """The version had moved: the swap definitely did not apply."""


class SwapNotApplied(Exception):
    """The swap definitely did not reach the catalog."""


class SwapUnknownError(Exception):
    """The swap was sent and not answered: it may have applied."""


class AclWorld(Protocol):
    """The store's record in the catalog. Both methods block; any other exception from `read` is
    a failed read, from `swap` an unknown outcome."""

    def read(self) -> Record:
        """The record as the catalog has it now (acl.EMPTY if none was ever written)."""
        ...

    def swap(self, record: Record) -> None:
        """Replace the record at version `record.version` by `record`: SwapRejectedError,
        SwapNotApplied or SwapUnknownError where it did not (or may not have) applied."""
        ...


async def run_change(change: Change, world: AclWorld, config: Config | None = None) -> Outcome:
    """Apply one change to the shared document; the outcome says done (with the document its swap
    wrote), refused (with `apply`'s exception) or failed (40001, 58030, 08007)."""
    state, effects = step(initial_state(config), Requested(change))
    with trio.CancelScope(shield=True):
        while True:
            answered = [e for e in effects if not isinstance(e, Done | Refuse | Fail)]
            if not answered:
                break
            [effect] = answered
            state, effects = step(state, await _perform(effect, world))
    outcome = outcome_of(state)
    assert outcome is not None
    return outcome


async def _perform(effect: Effect, world: AclWorld) -> Event:
    match effect:
        case ReadRecord():
            try:
                return RecordRead(await trio.to_thread.run_sync(world.read))
            except Exception as exc:  # noqa: BLE001 - the catalog's failure is the event
                return ReadFailed(_describe(exc))
        case Swap(record=record):
            try:
                await trio.to_thread.run_sync(world.swap, record)
            except SwapRejectedError:
                return SwapRejected()
            except SwapNotApplied as exc:
                return SwapFailed(_describe(exc))
            except Exception as exc:  # noqa: BLE001 - SwapUnknownError, and anything unforeseen
                return SwapOutcomeUnknown(_describe(exc))
            return Swapped()
        case Wait(seconds=seconds):
            await trio.sleep(seconds)
            return WaitElapsed()
    raise AssertionError(f"not an answered effect: {effect!r}")


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
