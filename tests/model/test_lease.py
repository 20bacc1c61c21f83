"""Model tests of the maintenance lease: three servers with drifting clocks competing for one
table's lease against a simulated catalog and real time, with failed reads, swaps refused, lost,
timed out, slow or delivered late, crashes and jobs that end or run out; traces, walks, spec
bookkeeping, and tests that the checkers catch the two classic lease bugs."""

from __future__ import annotations

import random
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from typing import Any

import pytest
from hypothesis import strategies as st
from hypothesis.stateful import rule

from icegres.machines import lease
from icegres.machines.lease import Phase
from tests.model.lease_world import (
    CONFIG,
    EXERCISED,
    OUTCOMES,
    RUN_CHECKERS,
    SERVERS,
    STEP_CHECKERS,
    LeaseHarness,
    check_step_invariants,
)
from tests.model.scaffold import (
    Binding,
    MachineModel,
    ModelMachine,
    ModelTests,
    register,
    type_names,
)
from tests.model.trace import load_spec

SPEC = load_spec("lease")

pytestmark = pytest.mark.model

SERVER = st.integers(0, SERVERS - 1)
# Mostly clean answers, so that leases get held; every fault often enough to matter.
OUTCOME = st.sampled_from(("ok",) * 6 + OUTCOMES[1:])
# Steps of real time against a ttl of 10 s: within a renewal period, across one, past a lease.
TICKS = (0.05, 0.3, 1.0, 2.5, 6.0, 12.0)
RATE = st.sampled_from((1 - CONFIG.drift, 1 - CONFIG.drift / 2, 1.0, 1 + CONFIG.drift / 2, 1 + CONFIG.drift))


class LeaseMachine(ModelMachine):
    model = None  # set below, once MODEL is registered

    @rule(server=SERVER)
    def request(self, server: int) -> None:
        self.harness.apply({"op": "request", "server": server})

    @rule(server=SERVER, outcome=OUTCOME)
    def answer(self, server: int, outcome: str) -> None:
        self.harness.apply({"op": "answer", "server": server, "outcome": outcome})

    @rule(dt=st.sampled_from(TICKS))
    def tick(self, dt: float) -> None:
        self.harness.apply({"op": "tick", "dt": dt})

    @rule(index=st.integers(0, 5))
    def deliver(self, index: int) -> None:
        self.harness.apply({"op": "deliver", "index": index})

    @rule(server=SERVER)
    def finish(self, server: int) -> None:
        self.harness.apply({"op": "finish", "server": server})

    @rule(server=SERVER)
    def crash(self, server: int) -> None:
        self.harness.apply({"op": "crash", "server": server})

    @rule(server=SERVER, rate=RATE)
    def rate(self, server: int, rate: float) -> None:
        self.harness.apply({"op": "rate", "server": server, "rate": rate})


def _rate(rng: random.Random, extreme: bool) -> float:
    d = CONFIG.drift
    return rng.choice((1 - d, 1 + d)) if extreme else round(rng.uniform(1 - d, 1 + d), 6)


def drive(rng: random.Random, harness: LeaseHarness, steps: int) -> None:
    """A seed's swarm: clock rates (often at the drift's bounds), how often faults, crashes, late
    swaps, jobs finishing, and how big the steps of time are."""
    extreme = rng.random() < 0.5
    rates = [_rate(rng, extreme) for _ in range(SERVERS)]
    # A zombie: once one server holds the lease its calls all fail for good; its clock is the
    # slowest allowed and the others' the fastest, and time moves in small steps: the tightest case.
    zombie = rng.random() < 0.2
    partitioned = rng.randrange(SERVERS)
    if zombie:
        rates = [1 - CONFIG.drift if s == partitioned else 1 + CONFIG.drift for s in range(SERVERS)]
    harness.apply({"op": "clocks", "rates": rates})
    fault_rate = rng.choice((0.0, 0.1, 0.3, 0.6))
    faults = rng.sample(OUTCOMES[1:], rng.randint(1, len(OUTCOMES) - 1))
    crash_rate = rng.choice((0.0, 0.02, 0.05))
    deliver_rate = rng.choice((0.05, 0.2))
    finish_rate = rng.choice((0.0, 0.02, 0.1))
    tick_rate = rng.choice((0.2, 0.4))
    ticks = list(TICKS[:3]) if zombie else rng.sample(TICKS, rng.randint(2, len(TICKS)))
    rate_rate = rng.choice((0.0, 0.02))
    # A partition: one server's catalog calls all fail for a while (a holder that cannot renew),
    # or, once it holds the lease, for good (a zombie holder: its job runs to its deadline).
    partition_rate, cut = rng.choice((0.0, 0.05, 0.2)), False
    for _ in range(steps):
        roll = rng.random()
        server = rng.randrange(SERVERS)
        if zombie:
            run = harness.runs.get(partitioned)
            cut = cut or (run is not None and run.state.phase is Phase.HELD)
        elif rng.random() < partition_rate:
            cut = not cut
        if cut and server == partitioned and server in harness.runs and rng.random() < 0.7:
            pending = harness.runs[server].pending
            outcome = "fail" if isinstance(pending, lease.ReadLease) else rng.choice(("failed", "timeout", "late"))
            harness.apply({"op": "answer", "server": server, "outcome": outcome})
            continue
        edges = [crash_rate, deliver_rate, finish_rate, tick_rate, rate_rate]
        if roll < sum(edges[:1]):
            inp: dict[str, Any] = {"op": "crash", "server": server}
        elif roll < sum(edges[:2]) and harness.in_flight:
            inp = {"op": "deliver", "index": rng.randrange(6)}
        elif roll < sum(edges[:3]):
            inp = {"op": "finish", "server": server}
        elif roll < sum(edges[:4]):
            inp = {"op": "tick", "dt": rng.choice(ticks)}
        elif roll < sum(edges[:5]):
            inp = {"op": "rate", "server": server, "rate": _rate(rng, extreme)}
        elif server in harness.runs:
            outcome = rng.choice(faults) if rng.random() < fault_rate else "ok"
            inp = {"op": "answer", "server": server, "outcome": outcome}
        else:
            inp = {"op": "request", "server": server}
        harness.apply(inp)


def _run_clean(harness: LeaseHarness, server: int, until: Any, limit: int = 200) -> None:
    """Answer `server`'s run cleanly and let time pass to its Waits until `until(harness)`."""
    for _ in range(limit):
        if until(harness):
            return
        run = harness.runs.get(server)
        assert run is not None, f"server {server}'s run ended: {harness.outcomes[-1:]}"
        if isinstance(run.pending, lease.Wait):
            dt = max(0.0, run.pending.until - harness.clocks[server]) / harness.rates[server]
            harness.apply({"op": "tick", "dt": dt + 1e-3})
        else:
            harness.apply({"op": "answer", "server": server, "outcome": "ok"})
    raise AssertionError(f"server {server} never got there")


def _job_running(server: int) -> Any:
    def running(h: LeaseHarness) -> bool:
        run = h.runs.get(server)
        return run is not None and run.job is not None and run.job.end is None
    return running


def settle(harness: LeaseHarness) -> None:
    """Liveness. Every late swap lands (or not) and every server crashes: the lease is abandoned.
    With clean answers a server then takes it over within the observation period (of real time,
    at its clock's rate); its job ends, it releases; another server then acquires it at once."""
    while harness.in_flight:
        harness.apply({"op": "deliver", "index": 0})
    for server in range(SERVERS):
        harness.apply({"op": "crash", "server": server})
    c = harness.config
    started = harness.now
    harness.apply({"op": "request", "server": 0})
    _run_clean(harness, 0, _job_running(0))
    bound = (c.observation_s(c.ttl_s) + c.backoff_s) / (1 - c.drift) + 0.1
    assert harness.now - started <= bound, (harness.now - started, bound)
    harness.apply({"op": "finish", "server": 0})
    _run_clean(harness, 0, lambda h: 0 not in h.runs)
    assert harness.outcomes[-1] is Phase.DONE and harness.record.released, harness.record
    released = harness.now
    harness.apply({"op": "request", "server": 1})
    _run_clean(harness, 1, _job_running(1))
    assert harness.now == released, "a released lease is acquired without waiting"
    harness.apply({"op": "finish", "server": 1})
    _run_clean(harness, 1, lambda h: 1 not in h.runs)


def held_something(harness: LeaseHarness) -> bool:
    """A job ran before settle took over (settle's own jobs are the last two)."""
    return len(harness.jobs) > 2


MODEL = register(
    MachineModel(
        name="lease",
        spec=SPEC,
        harness=lambda: LeaseHarness(SPEC),
        step_checkers=STEP_CHECKERS,
        run_checkers=RUN_CHECKERS,
        levels={"top": SPEC},
        exercised=EXERCISED,
        bindings=(
            Binding(
                SPEC,
                lease.Phase,
                initial=lease.initial_state().phase,
                terminal=True,
                module=lease,
                events=type_names(lease.Event),
                effects=type_names(lease.Effect),
                handlers=lease._HANDLERS,
            ),
        ),
        drive=drive,
        settle=settle,
        progress=held_something,
        walk_steps=200,
        walks_ci=200,
        examples_ci=200,
        example_steps=60,
        required_traces=frozenset({
            "abandoned-lease-taken-over-after-observation",
            "renewal-makes-the-observer-busy",
            "slow-acquire-reply-shortens-the-lease",
            "unknown-renewal-confirmed-by-its-token",
            "late-acquire-lands-after-failure",
        }),
    )
)
walk = MODEL.walk
LeaseMachine.model = MODEL
TestLeaseMachine = LeaseMachine.TestCase
TestLeaseMachine.settings = MODEL.hypothesis_settings()


# --- scenarios -----------------------------------------------------------------------------------


def _ok(h: LeaseHarness, server: int, times: int = 1) -> None:
    for _ in range(times):
        h.apply({"op": "answer", "server": server, "outcome": "ok"})


def test_a_free_lease_is_held_and_renewed_and_a_second_server_is_busy() -> None:
    h = LeaseHarness(SPEC)
    h.apply({"op": "request", "server": 0})
    _ok(h, 0, 2)  # read (free), acquire
    assert h.runs[0].state.phase is Phase.HELD and h.record.epoch == 1
    h.apply({"op": "request", "server": 1})
    _ok(h, 1)  # reads server 0's record: observes it
    assert h.runs[1].state.phase is Phase.OBSERVING
    # Server 0 renews every ttl * (1 - drift) / 3 = 3 s; 1 reads every min(ttl / 4, poll_max_s) = 2 s.
    while not h.outcomes:
        h.apply({"op": "tick", "dt": 0.5})
        _ok(h, 0)
        _ok(h, 1)
    # Busy at its first read after server 0's first renewal, long before its 11.5 s were up.
    assert h.outcomes == [Phase.BUSY] and h.now == 4.0 and h.runs[0].state.phase is Phase.HELD
    assert [j.end for j in h.jobs] == [None]


def test_an_observer_acquires_a_released_lease_at_its_next_read() -> None:
    h = LeaseHarness(SPEC)
    h.apply({"op": "request", "server": 0})
    _ok(h, 0, 2)
    h.apply({"op": "request", "server": 1})
    _ok(h, 1)
    h.apply({"op": "tick", "dt": 1.0})
    h.apply({"op": "finish", "server": 0})
    _ok(h, 0)  # released
    h.apply({"op": "tick", "dt": 1.5})
    _ok(h, 1, 2)  # read at 2.5 s: released, so acquired with epoch 2
    assert h.outcomes == [Phase.DONE] and h.runs[1].state.phase is Phase.HELD and h.record.epoch == 2


def test_a_slow_acquire_reply_leaves_less_of_the_lease() -> None:
    """The deadline runs from the send: a reply 4 s late leaves 9 - 4 = 5 s of job."""
    h = LeaseHarness(SPEC)
    h.apply({"op": "request", "server": 0})
    _ok(h, 0)
    h.apply({"op": "answer", "server": 0, "outcome": "slow"})  # lands now; the reply waits
    h.apply({"op": "tick", "dt": 4.0})
    _ok(h, 0)
    (job,) = h.jobs
    assert job.start == 4.0 and job.deadline == h.clocks[0] - 4.0 + CONFIG.usable_s


@contextmanager
def _patched(phase: Phase, event: type, handler: Any) -> Iterator[None]:
    original = lease._HANDLERS[(phase, event)]
    lease._HANDLERS[(phase, event)] = handler
    try:
        yield
    finally:
        lease._HANDLERS[(phase, event)] = original


def test_the_checkers_catch_a_machine_that_measures_the_deadline_from_the_reply() -> None:
    """The checkers are live: a holder whose reply came 3 s after its swap landed, and which counts
    its lease from the reply, still runs when an observer that saw the record land takes over."""

    def from_the_reply(state: lease.State, event: lease.SwapApplied) -> Any:
        assert state.sent is not None
        token, _, record = state.sent
        return lease._on_acquired(replace(state, sent=(token, event.at, record)), event)

    with _patched(Phase.ACQUIRING, lease.SwapApplied, from_the_reply):
        h = LeaseHarness(SPEC)
        h.apply({"op": "request", "server": 0})
        _ok(h, 0)
        h.apply({"op": "answer", "server": 0, "outcome": "slow"})  # landed now, reply later
        h.apply({"op": "request", "server": 1})
        _ok(h, 1)  # server 1 sees the record that just landed: observes from now
        h.apply({"op": "tick", "dt": 3.0})
        _ok(h, 0)  # the reply: server 0's job starts, deadline from now (the bug)
        with pytest.raises(AssertionError):
            for _ in range(40):  # server 0's renewals all fail; server 1 waits out its period
                h.apply({"op": "tick", "dt": 0.5})
                h.apply({"op": "answer", "server": 0, "outcome": "failed"})
                _ok(h, 1)
            check_step_invariants(h)


def test_the_checkers_catch_a_machine_that_takes_over_without_the_observation_period() -> None:
    def impatient(state: lease.State, event: lease.LeaseRead) -> Any:
        record = event.lease
        if not record.released and lease._landed(state, record) is None:
            return lease._swap(state, event.at, Phase.ACQUIRING, lease.Acquire, record, epoch=record.epoch + 1)
        return lease._on_read(state, event)

    with _patched(Phase.READING, lease.LeaseRead, impatient):
        h = LeaseHarness(SPEC)
        h.apply({"op": "request", "server": 0})
        _ok(h, 0, 2)
        with pytest.raises(AssertionError):
            h.apply({"op": "request", "server": 1})
            _ok(h, 1, 2)  # reads server 0's live record and takes it over at once
            check_step_invariants(h)


def test_the_checkers_catch_a_machine_that_ignores_the_drift() -> None:
    """A holder whose clock runs 10% slow and counts a full ttl runs 11 s of real time; an
    observer whose clock runs 10% fast and waits ttl + margin takes over after ~9.5 s."""
    blind_to_drift = replace(CONFIG, drift=0.0)
    h = LeaseHarness(SPEC)
    h.apply({"op": "clocks", "rates": [1 - CONFIG.drift, 1 + CONFIG.drift, 1.0]})
    h.config = blind_to_drift  # the machine's Config; the world's clocks still drift by 10%
    h.apply({"op": "request", "server": 0})
    _ok(h, 0, 2)
    h.apply({"op": "request", "server": 1})
    with pytest.raises(AssertionError):
        for _ in range(40):
            h.apply({"op": "tick", "dt": 0.5})
            h.apply({"op": "answer", "server": 0, "outcome": "failed"})
            _ok(h, 1)
        check_step_invariants(h)


class TestLeaseModel(ModelTests):
    model = MODEL
