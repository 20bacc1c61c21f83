"""A simulated catalog and real time for the lease machine: one table's lease record under
compare-and-swap, three servers whose clocks run at their own rates (within the drift), jobs that
run between StartJob and their deadline, faults at every catalog call, swaps landing late, slow
replies, crashes; and the checkers of `specs/lease.toml`.

Time: `now` is real time; each server's clock advances at its rate (1 +- drift, set by `clocks`,
changed by `rate`). A `tick` advances real time, stopping at every instant some server's clock
reaches a job deadline (the driver cancels the job there: `trio.move_on_at`) or a Wait's time
(answered WaitElapsed, or JobEnded if the job has ended: the driver delivers that only in place
of a Wait). Events carry the server's clock at delivery.

Catalog calls are answered by `answer` inputs, executed when answered: `ok`; `fail` (a read);
`failed` (a swap refused before sending); `timeout` (sent, not applied, unknown); `lost` (applied,
the reply lost); `late` (held in flight, landing, if its version still holds, at a later
`deliver`); `slow` (executed now, the reply delivered by the server's next `answer`, after
whatever time passed). A `crash` ends the server's run and job at once; its swaps in flight stay
in flight. The harness models the driver too: it starts, extends and stops jobs as the effects
say, and records every job's real-time interval and epoch for the checkers.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any

from icegres.machines.lease import (
    FREE,
    SWAPS,
    Acquire,
    Config,
    Effect,
    Event,
    ExtendJob,
    JobEnded,
    Lease,
    LeaseRead,
    Phase,
    ReadFailed,
    ReadLease,
    Renew,
    Request,
    Requested,
    StartJob,
    State,
    StopJob,
    SwapApplied,
    SwapFailed,
    SwapRejected,
    SwapUnknown,
    Wait,
    WaitElapsed,
    initial_state,
    step,
)
from tests.model.scaffold import Exercised, check_every_transition_exercised
from tests.model.trace import Spec

SERVERS = 3
EXERCISED: Exercised = set()
OUTCOMES = ("ok", "fail", "failed", "timeout", "lost", "late", "slow")
CONFIG = Config(ttl_s=10.0, drift=0.1, margin_s=0.5, renew_fraction=1 / 3, max_attempts=4, backoff_s=0.5,
                backoff_max_s=2.0)
_EPSILON_S = 1e-6  # float slack of the simulated clocks


def run_of(token: str) -> str:
    """The run a swap's token belongs to (tokens are `<run token>.<n>`)."""
    return token.rpartition(".")[0]


@dataclass
class Job:
    server: int
    run: str
    epoch: int
    start: float  # real time
    deadline: float  # on the server's clock
    end: float | None = None  # real time


@dataclass
class Run:
    token: str
    state: State
    pending: Effect | None = None  # the catalog call or Wait outstanding
    reply: tuple[str, Any] | None = None  # a slow reply, delivered by the next answer
    blind: bool = False  # a swap's outcome is unknown and no read has answered since
    job: Job | None = None
    job_end: bool | None = None  # the job ended (completed?) and JobEnded is not delivered yet


@dataclass
class LeaseHarness:
    spec: Spec
    config: Config = CONFIG
    inputs: list[dict[str, Any]] = field(default_factory=list)
    steps: list[tuple[Any, ...]] = field(default_factory=list)
    now: float = 0.0
    clocks: list[float] = field(default_factory=lambda: [1000.0 * (s + 1) for s in range(SERVERS)])
    rates: list[float] = field(default_factory=lambda: [1.0] * SERVERS)
    record: Lease = FREE
    version: int = 0
    history: list[Lease] = field(default_factory=list)  # every record that landed, in order
    runs: dict[int, Run] = field(default_factory=dict)
    jobs: list[Job] = field(default_factory=list)
    in_flight: list[tuple[int, Lease]] = field(default_factory=list)  # late swaps: (expected, record)
    sent_at: dict[str, float] = field(default_factory=dict)  # a swap's token -> real send time
    landed: set[str] = field(default_factory=set)  # tokens of swaps that landed
    outcomes: list[Phase] = field(default_factory=list)
    serial: int = 0

    # --- the one entry point ----------------------------------------------------------------

    def apply(self, inp: dict[str, Any]) -> None:
        self.inputs.append(inp)
        op = inp["op"]
        if op == "clocks":
            for server, rate in enumerate(inp["rates"]):
                self._set_rate(server, rate)
        elif op == "rate":
            self._set_rate(inp["server"], inp["rate"])
        elif op == "request":
            self._request(inp["server"])
        elif op == "answer":
            self._answer(inp["server"], inp["outcome"])
        elif op == "deliver":
            if self.in_flight:
                self._land(*self.in_flight.pop(inp["index"] % len(self.in_flight)))
        elif op == "tick":
            self._tick(inp["dt"])
        elif op == "finish":
            run = self.runs.get(inp["server"])
            if run is not None and run.job is not None and run.job.end is None:
                self._end_job(inp["server"], completed=True)
        elif op == "crash":
            self._crash(inp["server"])
        else:
            raise ValueError(f"unknown input {inp}")
        check_step_invariants(self)

    def _set_rate(self, server: int, rate: float) -> None:
        assert abs(rate - 1) <= self.config.drift + 1e-12, f"rate {rate} outside the drift bound"
        self.rates[server] = rate

    def _request(self, server: int) -> None:
        if server in self.runs:
            return
        self.serial += 1
        token = f"s{server}-{self.serial}"
        self.runs[server] = Run(token, initial_state(self.config))
        self._step(server, Requested(self.clocks[server], Request(f"server{server}", token)))

    def _crash(self, server: int) -> None:
        run = self.runs.pop(server, None)
        if run is not None and run.job is not None and run.job.end is None:
            run.job.end = self.now

    # --- time -------------------------------------------------------------------------------

    def _due(self, server: int) -> tuple[float, str] | None:
        """The next instant (on the server's clock) the driver acts by itself: a job deadline or
        a Wait's time."""
        run = self.runs.get(server)
        if run is None:
            return None
        dues = []
        # At one instant the Wait goes first: the machine sees its own deadline pass (held ->
        # lost); the driver's cancel at the deadline is then already done.
        if isinstance(run.pending, Wait):
            dues.append((run.pending.until, "wait"))
        if run.job is not None and run.job.end is None:
            dues.append((run.job.deadline, "x-deadline"))
        return min(dues) if dues else None

    def _tick(self, dt: float) -> None:
        target = self.now + dt
        while True:
            best: tuple[float, int, float, str] | None = None
            for server in sorted(self.runs):
                due = self._due(server)
                if due is None:
                    continue
                local, what = due
                at = self.now + max(0.0, local - self.clocks[server]) / self.rates[server]
                if at <= target and (best is None or at < best[0]):
                    best = (at, server, local, what)
            if best is None:
                break
            at, server, local, what = best
            self._advance(at)
            self.clocks[server] = max(self.clocks[server], local)
            run = self.runs[server]
            if what == "x-deadline":
                self._end_job(server, completed=False)  # the driver's move_on_at
            else:
                run.pending = None
                if run.job_end is not None:
                    self._deliver_job_end(server)
                else:
                    self._step(server, WaitElapsed(self.clocks[server]))
        self._advance(target)

    def _advance(self, to: float) -> None:
        for server in range(SERVERS):
            self.clocks[server] += (to - self.now) * self.rates[server]
        self.now = max(self.now, to)

    # --- the driver's jobs ------------------------------------------------------------------

    def _end_job(self, server: int, completed: bool) -> None:
        run = self.runs[server]
        assert run.job is not None and run.job.end is None
        run.job.end = self.now
        run.job_end = completed
        if isinstance(run.pending, Wait):
            run.pending = None
            self._deliver_job_end(server)

    def _deliver_job_end(self, server: int) -> None:
        run = self.runs[server]
        completed, run.job_end = run.job_end, None
        assert completed is not None
        self._step(server, JobEnded(self.clocks[server], completed))

    # --- the catalog ------------------------------------------------------------------------

    def _answer(self, server: int, outcome: str) -> None:
        run = self.runs.get(server)
        if run is None:
            return
        if run.reply is not None:
            kind, value = run.reply
            run.reply = None
            self._reply(server, kind, value)
            return
        effect = run.pending
        if effect is None or isinstance(effect, Wait):
            return
        run.pending = None
        if isinstance(effect, ReadLease):
            if outcome == "fail":
                self._step(server, ReadFailed(self.clocks[server], "catalog down"))
            elif outcome == "slow":
                run.reply = ("read", self.record)
            else:
                self._reply(server, "read", self.record)
            return
        assert isinstance(effect, SWAPS)
        if outcome == "failed":
            self._step(server, SwapFailed(self.clocks[server], "refused before sending"))
        elif outcome == "timeout":
            self._reply(server, "unknown", "timeout, not applied")
        elif outcome == "late":
            self.in_flight.append((effect.expected, effect.lease))
            self._reply(server, "unknown", "timeout, still in flight")
        else:
            version = self._land(effect.expected, effect.lease)
            if outcome == "lost":
                self._reply(server, "unknown", "connection dropped after sending")
            elif outcome == "slow":
                run.reply = ("swap", version)
            else:
                self._reply(server, "swap", version)

    def _reply(self, server: int, kind: str, value: Any) -> None:
        run = self.runs[server]
        at = self.clocks[server]
        event: Event
        if kind == "read":
            run.blind = False
            event = LeaseRead(at, value)
        elif kind == "unknown":
            run.blind = True
            event = SwapUnknown(at, value)
        else:
            event = SwapApplied(at, value) if value is not None else SwapRejected(at)
        self._step(server, event)

    def _land(self, expected: int, new: Lease) -> int | None:
        """The catalog's compare-and-swap; the new version, or None where it did not hold."""
        if self.record.version != expected:
            return None
        before = self.record
        self.version += 1
        self.record = replace(new, version=self.version)
        self.history.append(self.record)
        self.landed.add(new.token)
        assert self.record.epoch >= before.epoch, (before, self.record)
        if before.token and run_of(before.token) != run_of(new.token):
            assert self.record.epoch > before.epoch, (before, self.record)
        return self.version

    # --- stepping ---------------------------------------------------------------------------

    def _step(self, server: int, event: Event) -> None:
        run = self.runs[server]
        before = run.state
        after, effects = step(before, event)
        t = self.spec.check_step(before.phase.value, type(event).__name__, after.phase.value,
                                 tuple(type(e).__name__ for e in effects))
        EXERCISED.add(("top", t))
        self.steps.append(("top", server, t.source, t.event, t.target, t.effects))
        run.state = after
        for effect in effects:
            self._perform(server, run, effect)
        if after.phase.terminal:
            assert run.job is None or run.job.end is not None, "a run ended with its job running"
            self.outcomes.append(after.phase)
            del self.runs[server]

    def _perform(self, server: int, run: Run, effect: Effect) -> None:
        match effect:
            case StartJob(deadline=deadline, epoch=epoch):
                assert run.job is None, "one job per run"
                run.job = Job(server, run.token, epoch, self.now, deadline)
                self.jobs.append(run.job)
            case ExtendJob(deadline=deadline):
                assert run.job is not None
                if run.job.end is None:  # a cancelled scope stays cancelled
                    run.job.deadline = deadline
            case StopJob():
                if run.job is not None and run.job.end is None:
                    run.job.end = self.now
                run.job_end = None
            case Wait():
                assert run.pending is None, "one answered effect at a time"
                if run.job_end is not None:
                    self._deliver_job_end(server)
                else:
                    run.pending = effect
            case _:
                assert run.pending is None, "one answered effect at a time"
                if isinstance(effect, SWAPS):
                    assert not (run.blind and isinstance(effect, Acquire | Renew)), \
                        "an acquisition or renewal after an unknown outcome, with no read since"
                    self.sent_at[effect.lease.token] = self.now
                run.pending = effect


# --- checkers ------------------------------------------------------------------------------------


def check_one_job_at_a_time(h: LeaseHarness) -> None:
    spans = [(j.start, math.inf if j.end is None else j.end, j) for j in h.jobs]
    for i, (start_a, end_a, a) in enumerate(spans):
        for start_b, end_b, b in spans[i + 1:]:
            assert not (start_a < end_b and start_b < end_a), f"two jobs at once: {a} and {b} (now {h.now})"


def check_job_within_its_lease(h: LeaseHarness) -> None:
    for j in h.jobs:
        if j.end is not None:
            continue
        sends = [h.sent_at[t] for t in h.landed if run_of(t) == j.run and t in h.sent_at]
        assert sends and h.now <= max(sends) + h.config.ttl_s + _EPSILON_S, \
            f"{j} runs at {h.now}, past every landed swap's send + ttl ({sends})"


def check_epochs_increase(h: LeaseHarness) -> None:
    ordered = sorted(h.jobs, key=lambda j: j.start)
    for a, b in zip(ordered, ordered[1:], strict=False):
        assert b.epoch > a.epoch, f"epochs do not increase: {a} then {b}"
    for a, b in zip(h.history, h.history[1:], strict=False):
        assert b.epoch >= a.epoch and (run_of(a.token) == run_of(b.token) or b.epoch > a.epoch), (a, b)


def check_no_blind_swap(h: LeaseHarness) -> None:
    """(Checked as each swap is sent, in `_perform`; here: a blind run has no swap pending.)"""
    for run in h.runs.values():
        if run.blind:
            assert not isinstance(run.pending, Acquire | Renew), run


def check_retries_bounded(h: LeaseHarness) -> None:
    for run in h.runs.values():
        s = run.state
        if s.phase in (Phase.READING, Phase.OBSERVING, Phase.BACKING_OFF, Phase.ACQUIRING):
            assert s.attempts <= h.config.max_attempts, s
        if s.phase is Phase.HELD and isinstance(run.pending, Wait):
            assert s.deadline is not None and run.pending.until <= s.deadline + _EPSILON_S, s


def check_spec_transitions_only(h: LeaseHarness) -> None:
    """(Checked at every step by `spec.check_step` in `_step`.)"""


STEP_CHECKERS = {
    "one_job_at_a_time": check_one_job_at_a_time,
    "job_within_its_lease": check_job_within_its_lease,
    "epochs_increase": check_epochs_increase,
    "no_blind_swap": check_no_blind_swap,
    "retries_bounded": check_retries_bounded,
    "spec_transitions_only": check_spec_transitions_only,
}
RUN_CHECKERS = {"every_transition_exercised": check_every_transition_exercised}


def check_step_invariants(h: LeaseHarness) -> None:
    for check in STEP_CHECKERS.values():
        check(h)
