"""The maintenance lease: at most one maintenance job per table across every server on a catalog.

Automatic maintenance (issue 30) runs on every `serve --maintain` server, and two compactions of
one table at once would waste the work of one of them (first committer wins) or, worse, two expiries
could each delete files the other's view still needed. So a server runs a table's job only while it
holds that table's lease: a record in the catalog (`engine/lease_store.py`) written by
compare-and-swap, like a sequence's head. `specs/lease.toml` is the independent statement of this
machine; the driver is `icegres.machines.drivers.lease`; `docs/maintenance-lease.md` is the prose.

The record names a holder, the token of the swap that wrote it, an epoch, a ttl and a released
flag; the catalog's version of it (a snapshot id) is what the next swap asserts. Nothing here reads a
clock: every event carries `at`, the driver's monotonic clock when the event was delivered, and the
only clock assumption is that every server's clock runs at a rate within 1 ± `drift` of real time.
No wall clock is ever compared across machines.

Why it is shaped this way:

- **The holder's deadline is measured from when it sent the swap**, `sent_at + ttl * (1 - drift)`:
  at most `ttl` of real time after the swap left, so at most `ttl` after it landed. A reply that
  comes late only leaves less of the lease to use. (Measured from the reply instead, a slow reply
  would let the holder run past the moment another server may take over; the model test shows it.)
  `sent_at` is the `at` of the event whose step emitted the swap: the driver sends it after that,
  so the real send is later still — the safe side.
- **Taking over needs the same version observed for `ttl * (1 + drift) + margin`** of this server's
  own clock, from the reply of a read that showed it (that read ran after the version landed), with
  the record's own ttl (not this server's configuration). That is more than `ttl` of real time after
  the version landed, so its holder's deadline has passed. The takeover swap asserts that version:
  if the holder renewed meanwhile, the swap is refused.
- **A version that moved under us is a live holder**: an observed version that changed, or a swap of
  ours refused with another's unreleased record there now, ends the attempt as Busy (the scheduler
  skips the table this round) instead of starting another observation period. The observer reads
  again every quarter of the record's ttl, so a live holder's renewal makes it Busy within about
  half a ttl, and a release lets it acquire at once, instead of either waiting out the period.
  (At least every `poll_max_s` too: a maintenance job takes seconds, not a quarter of a minute,
  and a server that waited 15 s to see it released lost its turn to the holder's next job.)
- **An unknown swap outcome is resolved by reading**, never by swapping again blind: every swap has
  its own token, and a read that shows a token of this run says which swap landed (and so from which
  send time its deadline runs). A record of this run whose deadline already passed is nobody's: this
  run may swap it again at once.
- **A renewal refused, or a read showing another's record while holding, is Lost**: stop the job at
  once. A renewal that fails outright is retried until the deadline; at the deadline the job stops
  (the driver cancels it there itself; the machine's Wait may be answered late).
- **Release is a swap too** (asserting the version held), sent after the job ended, best effort: if it
  fails, the lease simply expires. An unconditional release could erase a takeover that already
  landed, and a third server would then start beside the second.
- **Epochs**: every acquisition writes `epoch + 1` of the record it replaces, renewals and releases
  keep it. Successive holders' epochs therefore strictly increase: a fencing number a job can write
  into its commits' summaries, and which a commit can assert through the lease version it holds
  (a multi-table commit with a read guard on the lease table), for the one case no clock bound covers:
  a process paused mid-commit past its deadline.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from enum import Enum
from typing import Any

__all__ = [
    "FREE",
    "NO_VERSION",
    "Acquire",
    "Config",
    "Effect",
    "Event",
    "ExtendJob",
    "JobEnded",
    "Lease",
    "LeaseRead",
    "Outcome",
    "Phase",
    "ReadFailed",
    "ReadLease",
    "Release",
    "Renew",
    "Request",
    "Requested",
    "StartJob",
    "State",
    "StopJob",
    "SwapApplied",
    "SwapFailed",
    "SwapRejected",
    "SwapUnknown",
    "Wait",
    "WaitElapsed",
    "initial_state",
    "outcome_of",
    "step",
]

NO_VERSION = -1  # the version of a lease never written


# --- the domain ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Lease:
    """One table's lease record as the catalog holds it. `version` is the catalog's (the snapshot id
    that wrote it): what a swap asserts; a swap's own record carries 0 there (the catalog assigns
    it). `token` names the swap that wrote it, `holder` the server (for operators only: a restarted
    server is another holder to itself)."""

    version: int
    holder: str
    token: str
    epoch: int
    ttl_s: float
    released: bool


FREE = Lease(NO_VERSION, "", "", 0, 0.0, True)


@dataclass(frozen=True)
class Request:
    holder: str  # this server, as operators should see it
    token: str  # unique per run: the swaps' tokens are derived from it


@dataclass(frozen=True)
class Config:
    ttl_s: float = 60.0  # what this server's records promise: written into them
    drift: float = 0.05  # every server's monotonic clock runs at 1 +- drift of real time
    margin_s: float = 1.0  # added to a takeover's observation period (scheduling slack)
    renew_fraction: float = 1 / 3  # renew this far into the usable lease (ttl * (1 - drift))
    poll_fraction: float = 1 / 4  # observing, read again every this much of the record's ttl,
    poll_max_s: float = 2.0  # and at least this often: a job ends and releases in seconds
    max_attempts: int = 5  # failed reads, swaps refused before sending or unanswered, in one run
    backoff_s: float = 0.2
    backoff_max_s: float = 5.0

    @property
    def usable_s(self) -> float:
        """How long, on the holder's own clock, a swap sent now keeps the job running."""
        return self.ttl_s * (1 - self.drift)

    def observation_s(self, ttl_s: float) -> float:
        """How long, on the observer's own clock, a record of `ttl_s` must stay unchanged before it
        may be taken over: more than `ttl_s` of real time at any rate within the drift."""
        return ttl_s * (1 + self.drift) + self.margin_s


# --- events (past tense; `at`: the driver's monotonic clock at delivery) ------------------------


@dataclass(frozen=True)
class Requested:
    at: float
    request: Request


@dataclass(frozen=True)
class LeaseRead:
    at: float
    lease: Lease


@dataclass(frozen=True)
class ReadFailed:
    at: float
    message: str


@dataclass(frozen=True)
class SwapApplied:
    """The swap landed; `version` is the record's catalog version now (the snapshot id the swap
    chose: a swap's writer knows it before sending)."""

    at: float
    version: int


@dataclass(frozen=True)
class SwapRejected:
    """The version had moved: definitely not applied."""

    at: float


@dataclass(frozen=True)
class SwapFailed:
    """Definitely not applied (refused before it was sent)."""

    at: float
    message: str


@dataclass(frozen=True)
class SwapUnknown:
    """Sent, no answer: it may have landed, now or later."""

    at: float
    message: str


@dataclass(frozen=True)
class WaitElapsed:
    at: float


@dataclass(frozen=True)
class JobEnded:
    """The job's task returned (`completed`) or was cancelled at its deadline. The driver delivers
    it only in place of a Wait (while held), so it never overtakes a catalog answer."""

    at: float
    completed: bool


Event = (Requested | LeaseRead | ReadFailed | SwapApplied | SwapRejected | SwapFailed | SwapUnknown | WaitElapsed
         | JobEnded)


# --- effects (imperative) ------------------------------------------------------------------------


@dataclass(frozen=True)
class ReadLease:
    pass


@dataclass(frozen=True)
class Acquire:
    """Swap the record at version `expected` for `lease` (this run's, epoch + 1)."""

    expected: int
    lease: Lease


@dataclass(frozen=True)
class Renew:
    """Swap this run's record at `expected` for `lease` (a new token, the same epoch)."""

    expected: int
    lease: Lease


@dataclass(frozen=True)
class Release:
    """Swap this run's record at `expected` for `lease` (released); best effort."""

    expected: int
    lease: Lease


@dataclass(frozen=True)
class Wait:
    """Answer with WaitElapsed once the driver's clock reads `until` (or JobEnded, if held)."""

    until: float


@dataclass(frozen=True)
class StartJob:
    """Run the job; cancel it when the driver's clock reads `deadline`."""

    deadline: float
    epoch: int


@dataclass(frozen=True)
class ExtendJob:
    deadline: float


@dataclass(frozen=True)
class StopJob:
    """Cancel the job now: the lease is (or may be) another's."""


Effect = ReadLease | Acquire | Renew | Release | Wait | StartJob | ExtendJob | StopJob
SWAPS = (Acquire, Renew, Release)


# --- state ---------------------------------------------------------------------------------------


class Phase(Enum):
    IDLE = "idle"
    READING = "reading"  # ReadLease outstanding, acquiring
    OBSERVING = "observing"  # Wait outstanding: another's record must stay unchanged this long
    BACKING_OFF = "backing_off"  # Wait outstanding after a failure, acquiring
    ACQUIRING = "acquiring"  # Acquire outstanding
    HELD = "held"  # the job runs; Wait outstanding until the next renewal (or JobEnded)
    RENEWING = "renewing"  # Renew outstanding; the job runs
    CONFIRMING = "confirming"  # ReadLease outstanding after an unknown renewal; the job runs
    RELEASING = "releasing"  # Release outstanding; the job has ended
    BUSY = "busy"  # another server holds it (terminal: never held)
    FAILED = "failed"  # the catalog kept failing (terminal: never held)
    LOST = "lost"  # held, then lost or expired: the job was stopped (terminal)
    DONE = "done"  # held, the job ended, release tried (terminal)

    @property
    def terminal(self) -> bool:
        return self in (Phase.BUSY, Phase.FAILED, Phase.LOST, Phase.DONE)


@dataclass(frozen=True)
class State:
    phase: Phase = Phase.IDLE
    request: Request | None = None
    config: Config = Config()
    attempts: int = 0  # charged: failed reads, swaps failed or unanswered
    swaps: int = 0  # swaps sent: the next token's serial
    sent: tuple[str, float, Lease] | None = None  # outstanding swap: token, sent_at, record (version: asserted)
    maybe: tuple[tuple[str, float], ...] = ()  # unanswered swaps of this run: (token, sent_at)
    blind: bool = False  # a swap's outcome is unknown and no read has answered since
    observed: tuple[int, float] | None = None  # another's version, first seen at (reply time)
    contended: int | None = None  # a swap of ours asserting this version was refused
    held: Lease | None = None  # this run's record, its catalog version known
    deadline: float | None = None  # the job's, on the driver's clock
    completed: bool = False
    message: str | None = None


@dataclass(frozen=True)
class Outcome:
    phase: Phase
    epoch: int | None  # the epoch held, if the lease was ever held
    completed: bool  # the job ran to its end
    message: str | None = None


class LeaseProtocolError(Exception):
    """An event the current state does not accept (a driver or world bug)."""


def initial_state(config: Config | None = None) -> State:
    return State(config=config or Config())


def outcome_of(state: State) -> Outcome | None:
    if not state.phase.terminal:
        return None
    epoch = state.held.epoch if state.held is not None else None
    return Outcome(state.phase, epoch, state.completed, state.message)


def step(state: State, event: Event) -> tuple[State, list[Effect]]:
    """The only producer of a new State. A non-terminal result has exactly one effect outstanding
    that an event answers (a catalog call or a Wait); StartJob, ExtendJob and StopJob are orders
    nobody answers."""
    handler = _HANDLERS.get((state.phase, type(event)))
    if handler is None:
        raise LeaseProtocolError(f"{type(event).__name__} is not accepted in {state.phase.value}")
    return handler(state, event)


# --- handlers ------------------------------------------------------------------------------------


def _request(state: State) -> Request:
    assert state.request is not None
    return state.request


def _on_requested(state: State, event: Requested) -> tuple[State, list[Effect]]:
    return replace(state, phase=Phase.READING, request=event.request), [ReadLease()]


def _on_read(state: State, event: LeaseRead) -> tuple[State, list[Effect]]:
    lease, at, c = event.lease, event.at, state.config
    state = replace(state, blind=False)
    landed = _landed(state, lease)
    if landed is not None and at < landed + c.usable_s:
        # A swap of ours whose answer was lost (or that landed late) holds it, nothing overtook it.
        return _hold(replace(state, maybe=()), lease, landed)
    if state.attempts >= c.max_attempts:
        return replace(state, phase=Phase.FAILED, message=f"the catalog failed {state.attempts} times"), []
    if lease.released or landed is not None:
        # Free; or our own record whose deadline passed unused: nobody can be running through it.
        return _swap(state, at, Phase.ACQUIRING, Acquire, lease, epoch=lease.epoch + 1)
    if state.contended is not None or (state.observed is not None and state.observed[0] != lease.version):
        return replace(state, phase=Phase.BUSY, message=f"held by {lease.holder} (epoch {lease.epoch})"), []
    if state.observed is None:
        state = replace(state, observed=(lease.version, at))
    since = state.observed[1] if state.observed is not None else at
    if at - since >= c.observation_s(lease.ttl_s):
        # Unchanged for longer than its ttl in real time, whatever our clock's rate: abandoned.
        return _swap(state, at, Phase.ACQUIRING, Acquire, lease, epoch=lease.epoch + 1)
    # Read again before the period is over, so that a renewal (busy) or a release (free) is seen
    # within a fraction of a ttl, not at its end.
    until = min(since + c.observation_s(lease.ttl_s), at + min(lease.ttl_s * c.poll_fraction, c.poll_max_s))
    return replace(state, phase=Phase.OBSERVING), [Wait(until)]


def _on_read_failed(state: State, event: ReadFailed) -> tuple[State, list[Effect]]:
    return _retry(replace(state, attempts=state.attempts + 1), event.at, event.message)


def _on_observed(state: State, event: WaitElapsed) -> tuple[State, list[Effect]]:
    return replace(state, phase=Phase.READING), [ReadLease()]


def _on_acquired(state: State, event: SwapApplied) -> tuple[State, list[Effect]]:
    assert state.sent is not None
    _, sent_at, lease = state.sent
    held = replace(lease, version=event.version)
    if event.at >= sent_at + state.config.usable_s:
        # Won, but the answer came after the lease it bought ran out: give it back unused.
        return _release(replace(state, sent=None, held=held), event.at)
    return _hold(replace(state, sent=None, maybe=()), held, sent_at)


def _on_acquire_rejected(state: State, event: SwapRejected) -> tuple[State, list[Effect]]:
    assert state.sent is not None
    asserted = state.sent[2].version
    return replace(state, phase=Phase.READING, sent=None, contended=asserted), [ReadLease()]


def _on_acquire_failed(state: State, event: SwapFailed) -> tuple[State, list[Effect]]:
    return _retry(replace(state, attempts=state.attempts + 1, sent=None), event.at, event.message)


def _on_acquire_unknown(state: State, event: SwapUnknown) -> tuple[State, list[Effect]]:
    # Find out first: the record says whether it landed; never swap again without reading.
    assert state.sent is not None
    token, sent_at, _ = state.sent
    state = replace(state, attempts=state.attempts + 1, sent=None, maybe=(*state.maybe, (token, sent_at)))
    return replace(state, phase=Phase.READING, blind=True), [ReadLease()]


def _on_backed_off(state: State, event: WaitElapsed) -> tuple[State, list[Effect]]:
    return replace(state, phase=Phase.READING), [ReadLease()]


def _on_renew_due(state: State, event: WaitElapsed) -> tuple[State, list[Effect]]:
    assert state.held is not None and state.deadline is not None
    if event.at >= state.deadline:
        return _lost(state, "the lease ran out before a renewal landed")
    if state.blind:
        # A renewal of ours may have landed unseen: read before swapping again.
        return replace(state, phase=Phase.CONFIRMING), [ReadLease()]
    return _swap(state, event.at, Phase.RENEWING, Renew, state.held, epoch=state.held.epoch)


def _on_job_ended(state: State, event: JobEnded) -> tuple[State, list[Effect]]:
    return _release(replace(state, completed=event.completed), event.at)


def _on_renewed(state: State, event: SwapApplied) -> tuple[State, list[Effect]]:
    assert state.sent is not None
    _, sent_at, lease = state.sent
    return _extend(replace(state, sent=None), replace(lease, version=event.version), sent_at)


def _on_renew_rejected(state: State, event: SwapRejected) -> tuple[State, list[Effect]]:
    return _lost(replace(state, sent=None), "a renewal was refused: the record is another's")


def _on_renew_failed(state: State, event: SwapFailed) -> tuple[State, list[Effect]]:
    return _retry_renewal(replace(state, sent=None, attempts=state.attempts + 1), event.at)


def _on_renew_unknown(state: State, event: SwapUnknown) -> tuple[State, list[Effect]]:
    assert state.sent is not None
    token, sent_at, _ = state.sent
    state = replace(state, sent=None, attempts=state.attempts + 1, maybe=(*state.maybe, (token, sent_at)))
    return replace(state, phase=Phase.CONFIRMING, blind=True), [ReadLease()]


def _on_confirmed(state: State, event: LeaseRead) -> tuple[State, list[Effect]]:
    assert state.held is not None
    lease, state = event.lease, replace(state, blind=False)
    landed = _landed(state, lease)
    if landed is not None:
        return _extend(replace(state, maybe=()), lease, landed)
    if lease.version == state.held.version:
        # Ours, unchanged: the renewal did not land (yet; if it lands later the next one is refused).
        return _retry_renewal(replace(state, held=lease), event.at)
    return _lost(state, f"the record is {lease.holder}'s now (epoch {lease.epoch})")


def _on_confirm_failed(state: State, event: ReadFailed) -> tuple[State, list[Effect]]:
    return _retry_renewal(replace(state, attempts=state.attempts + 1), event.at)


def _on_release_answered(state: State, event: SwapApplied | SwapRejected | SwapFailed | SwapUnknown
                         ) -> tuple[State, list[Effect]]:
    return replace(state, phase=Phase.DONE, sent=None), []


# --- helpers -------------------------------------------------------------------------------------

def _landed(state: State, lease: Lease) -> float | None:
    """The send time of the swap of this run that wrote `lease`, if one did and was not answered."""
    for token, sent_at in state.maybe:
        if lease.token == token and not lease.released:
            return sent_at
    return None


def _swap(state: State, at: float, phase: Phase, kind: type, base: Lease, epoch: int) -> tuple[State, list[Effect]]:
    """Send a swap of `base` (at its version) for a record of this run, sent at `at`."""
    request, c = _request(state), state.config
    token = f"{request.token}.{state.swaps + 1}"
    lease = Lease(base.version, request.holder, token, epoch, c.ttl_s, kind is Release)
    state = replace(state, phase=phase, swaps=state.swaps + 1, sent=(token, at, lease))
    return state, [kind(base.version, replace(lease, version=0))]


def _hold(state: State, lease: Lease, sent_at: float) -> tuple[State, list[Effect]]:
    deadline = sent_at + state.config.usable_s
    state = replace(state, phase=Phase.HELD, held=lease, deadline=deadline, observed=None, contended=None)
    return state, [StartJob(deadline, lease.epoch), Wait(_renewal_due(state, sent_at))]


def _extend(state: State, lease: Lease, sent_at: float) -> tuple[State, list[Effect]]:
    deadline = sent_at + state.config.usable_s
    state = replace(state, phase=Phase.HELD, held=lease, deadline=deadline)
    return state, [ExtendJob(deadline), Wait(_renewal_due(state, sent_at))]


def _renewal_due(state: State, sent_at: float) -> float:
    return sent_at + state.config.usable_s * state.config.renew_fraction


def _retry(state: State, at: float, message: str) -> tuple[State, list[Effect]]:
    if state.attempts >= state.config.max_attempts:
        return replace(state, phase=Phase.FAILED, message=message), []
    c = state.config
    return replace(state, phase=Phase.BACKING_OFF), [Wait(at + min(c.backoff_s * 2 ** (state.attempts - 1),
                                                                   c.backoff_max_s))]


def _retry_renewal(state: State, at: float) -> tuple[State, list[Effect]]:
    """Try again soon, but never wait past the deadline: that is when the job stops."""
    assert state.deadline is not None
    c = state.config
    return replace(state, phase=Phase.HELD), [Wait(min(at + c.backoff_s, state.deadline))]


def _release(state: State, at: float) -> tuple[State, list[Effect]]:
    assert state.held is not None
    return _swap(state, at, Phase.RELEASING, Release, state.held, epoch=state.held.epoch)


def _lost(state: State, message: str) -> tuple[State, list[Effect]]:
    return replace(state, phase=Phase.LOST, message=message), [StopJob()]


_Handler = Callable[[State, Any], tuple[State, list[Effect]]]

_HANDLERS: dict[tuple[Phase, type], _Handler] = {
    (Phase.IDLE, Requested): _on_requested,
    (Phase.READING, LeaseRead): _on_read,
    (Phase.READING, ReadFailed): _on_read_failed,
    (Phase.OBSERVING, WaitElapsed): _on_observed,
    (Phase.BACKING_OFF, WaitElapsed): _on_backed_off,
    (Phase.ACQUIRING, SwapApplied): _on_acquired,
    (Phase.ACQUIRING, SwapRejected): _on_acquire_rejected,
    (Phase.ACQUIRING, SwapFailed): _on_acquire_failed,
    (Phase.ACQUIRING, SwapUnknown): _on_acquire_unknown,
    (Phase.HELD, WaitElapsed): _on_renew_due,
    (Phase.HELD, JobEnded): _on_job_ended,
    (Phase.RENEWING, SwapApplied): _on_renewed,
    (Phase.RENEWING, SwapRejected): _on_renew_rejected,
    (Phase.RENEWING, SwapFailed): _on_renew_failed,
    (Phase.RENEWING, SwapUnknown): _on_renew_unknown,
    (Phase.CONFIRMING, LeaseRead): _on_confirmed,
    (Phase.CONFIRMING, ReadFailed): _on_confirm_failed,
    (Phase.RELEASING, SwapApplied): _on_release_answered,
    (Phase.RELEASING, SwapRejected): _on_release_answered,
    (Phase.RELEASING, SwapFailed): _on_release_answered,
    (Phase.RELEASING, SwapUnknown): _on_release_answered,
}
