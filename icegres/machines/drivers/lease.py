"""The trio driver of the maintenance lease: performs its effects against a LeaseWorld and runs the
job while the lease is held.

The world's catalog calls block, so each runs in a worker thread, shielded (a cancelled run must
not leave a swap half-known: the machine hears every answer). The job runs in the run's nursery
inside a cancel scope whose deadline is the machine's: `StartJob` opens it, `ExtendJob` moves it,
`StopJob` cancels it; trio cancels the job at the deadline by itself, however late the machine's
own Wait is answered. Time is `trio.current_time()`, a monotonic clock (MockClock in tests). The
driver decides nothing: it turns each answer (or exception) into the machine's event.

A job is an async callable given the `Holding` (epoch, for fencing). A job cancelled at its deadline
stops at its next checkpoint; a worker thread it waits on (a catalog commit) runs to its end — that
is what the epoch is for (docs/maintenance-lease.md).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Protocol

import trio

from icegres.machines.lease import (
    SWAPS,
    Config,
    Effect,
    Event,
    ExtendJob,
    JobEnded,
    Lease,
    LeaseRead,
    Outcome,
    ReadFailed,
    ReadLease,
    Request,
    Requested,
    StartJob,
    StopJob,
    SwapApplied,
    SwapFailed,
    SwapRejected,
    SwapUnknown,
    Wait,
    WaitElapsed,
    initial_state,
    outcome_of,
    step,
)

__all__ = ["Holding", "LeaseWorld", "SwapNotApplied", "SwapRejectedError", "SwapUnknownError", "run_lease"]


class SwapRejectedError(Exception):
    """The record had moved: the swap definitely did not apply."""


class SwapNotApplied(Exception):
    """The swap definitely did not reach the catalog."""


class SwapUnknownError(Exception):
    """The swap was sent and not answered: it may have applied."""


class LeaseWorld(Protocol):
    """One table's lease record in the catalog. Both methods block; any other exception from
    `read` is a failed read, from `swap` an unknown outcome."""

    def read(self) -> Lease:
        """The record as the catalog has it now (FREE if none was ever written)."""
        ...

    def swap(self, expected: int, lease: Lease) -> int:
        """Replace the record at version `expected` by `lease`; its new version. SwapRejectedError,
        SwapNotApplied or SwapUnknownError where it did not (or may not have) applied."""
        ...


@dataclass(frozen=True)
class Holding:
    """What a job knows of the lease it runs under. `deadline()`: when the job will be stopped,
    on trio's clock (`trio.current_time()`), `-inf` once the lease is lost or the job stopped —
    what a job checks just before a commit that must not land outside the lease. It only reads
    two attributes of the job's cancel scope, so a worker thread may call it (a worker whose own
    code runs a trio loop of its own cannot call back into this one)."""

    epoch: int
    deadline: Callable[[], float] = lambda: float("inf")


Job = Callable[[Holding], Awaitable[None]]


async def run_lease(request: Request, world: LeaseWorld, job: Job, config: Config | None = None) -> Outcome:
    """Run `job` under the table's lease: only while this run holds it, and at most until its
    deadline. Busy if another server holds it; the job is cancelled if the lease is lost. An
    exception of the job is raised here, after the lease was released."""
    runner = _Runner(world, job)
    async with trio.open_nursery() as nursery:
        runner.nursery = nursery
        state, effects = step(initial_state(config), Requested(trio.current_time(), request))
        while True:
            answered = None
            for effect in effects:
                if isinstance(effect, StartJob | ExtendJob | StopJob):
                    runner.order(effect)
                else:
                    assert answered is None, "one answered effect at a time"
                    answered = effect
            if answered is None:
                break
            state, effects = step(state, await runner.perform(answered))
        runner.order(StopJob())  # terminal: no job outlives its run (a no-op unless lost)
    if runner.error is not None:
        raise runner.error  # after the release: a failed job does not keep the lease
    outcome = outcome_of(state)
    assert outcome is not None
    return outcome


class _Runner:
    def __init__(self, world: LeaseWorld, job: Job) -> None:
        self.world = world
        self.job = job
        self.nursery: trio.Nursery | None = None
        self.scope: trio.CancelScope | None = None
        self.ended = trio.Event()
        self.completed = False
        self.reported = False
        self.error: Exception | None = None
        self.stopped = False  # StopJob ordered: the lease is lost, or the run is over

    def order(self, effect: StartJob | ExtendJob | StopJob) -> None:
        match effect:
            case StartJob(deadline=deadline, epoch=epoch):
                assert self.nursery is not None and self.scope is None
                self.scope = trio.CancelScope(deadline=deadline)
                self.nursery.start_soon(self._run_job, self.scope, Holding(epoch, self._deadline(self.scope)))
            case ExtendJob(deadline=deadline):
                assert self.scope is not None
                self.scope.deadline = deadline  # a scope already cancelled stays cancelled
            case StopJob():
                self.stopped = True
                if self.scope is not None:
                    self.scope.cancel()

    def _deadline(self, scope: trio.CancelScope) -> Callable[[], float]:
        # Not `scope.cancel_called`: it reads trio's clock, which a worker thread cannot.
        def deadline() -> float:
            return float("-inf") if self.stopped else scope.deadline
        return deadline

    async def _run_job(self, scope: trio.CancelScope, holding: Holding) -> None:
        try:
            with scope:
                await self.job(holding)
                self.completed = True
        except Exception as exc:  # noqa: BLE001 - raised by run_lease once the lease is released
            self.error = exc
        finally:
            self.ended.set()

    async def perform(self, effect: Effect) -> Event:
        match effect:
            case Wait(until=until):
                if self.scope is not None and not self.reported:
                    # Held: the job's end answers the Wait if it comes first.
                    with trio.move_on_at(until):
                        await self.ended.wait()
                    if self.ended.is_set():
                        self.reported = True
                        return JobEnded(trio.current_time(), self.completed)
                else:
                    await trio.sleep_until(until)
                return WaitElapsed(trio.current_time())
            case ReadLease():
                with trio.CancelScope(shield=True):
                    try:
                        lease = await trio.to_thread.run_sync(self.world.read)
                    except Exception as exc:  # noqa: BLE001 - the catalog's failure is the event
                        return ReadFailed(trio.current_time(), _describe(exc))
                return LeaseRead(trio.current_time(), lease)
            case _ if isinstance(effect, SWAPS):
                with trio.CancelScope(shield=True):
                    try:
                        version = await trio.to_thread.run_sync(self.world.swap, effect.expected, effect.lease)
                    except SwapRejectedError:
                        return SwapRejected(trio.current_time())
                    except SwapNotApplied as exc:
                        return SwapFailed(trio.current_time(), _describe(exc))
                    except Exception as exc:  # noqa: BLE001 - SwapUnknownError, and anything unforeseen
                        return SwapUnknown(trio.current_time(), _describe(exc))
                return SwapApplied(trio.current_time(), version)
        raise AssertionError(f"not an answered effect: {effect!r}")


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
