"""The lease driver (machines/drivers/lease.py) on an in-memory catalog, in trio's virtual time:
servers competing for one lease run their jobs one at a time, renew while a job runs long, lose
nothing when a crashed holder is taken over, and cancel a job at its deadline by themselves."""

from __future__ import annotations

import threading
from dataclasses import replace

import pytest
import trio
import trio.testing

from icegres.machines.drivers.lease import Holding, SwapNotApplied, SwapRejectedError, run_lease
from icegres.machines.lease import FREE, Config, Lease, Phase, Request

pytestmark = pytest.mark.unit

CONFIG = Config(ttl_s=30.0, drift=0.05, margin_s=1.0)


class MemoryLease:
    """A lease record under compare-and-swap; `refuse` makes every swap fail before sending."""

    def __init__(self) -> None:
        self.record = FREE
        self.version = 0
        self.refuse = False
        self.history: list[Lease] = []
        self._lock = threading.Lock()

    def read(self) -> Lease:
        with self._lock:
            return self.record

    def swap(self, expected: int, lease: Lease) -> int:
        with self._lock:
            if self.refuse:
                raise SwapNotApplied("catalog down")
            if self.record.version != expected:
                raise SwapRejectedError("moved")
            self.version += 1
            self.record = replace(lease, version=self.version)
            self.history.append(self.record)
            return self.version


def _run(main: object) -> None:
    # The clock jumps only when every task has waited on trio for this long in real time: a
    # world call in a worker thread answers within microseconds alone, but took over 50 ms on a
    # loaded machine, and a jump during it made a renewal look late (a lost lease). (0.5 s made
    # one test take 50 s.)
    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0.15))  # type: ignore[arg-type]


class Recorder:
    def __init__(self, length_s: float) -> None:
        self.length_s = length_s
        self.spans: list[tuple[str, int, float, float]] = []

    def job(self, name: str):  # noqa: ANN201
        async def job(holding: Holding) -> None:
            start = trio.current_time()
            try:
                await trio.sleep(self.length_s)
            finally:
                self.spans.append((name, holding.epoch, start, trio.current_time()))
        return job


def _disjoint(spans: list[tuple[str, int, float, float]]) -> None:
    ordered = sorted(spans, key=lambda s: s[2])
    for a, b in zip(ordered, ordered[1:], strict=False):
        assert a[3] <= b[2], f"overlap: {a} and {b}"
        assert b[1] > a[1], f"epochs: {a} then {b}"


def test_a_long_job_renews_and_a_second_server_is_busy() -> None:
    world, jobs = MemoryLease(), Recorder(100.0)
    outcomes = {}

    async def server(name: str, delay: float) -> None:
        await trio.sleep(delay)
        outcomes[name] = await run_lease(Request(name, f"{name}-1"), world, jobs.job(name), CONFIG)

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(server, "a", 0.0)
            nursery.start_soon(server, "b", 1.0)

    _run(main)
    assert outcomes["a"].phase is Phase.DONE and outcomes["a"].completed
    assert outcomes["b"].phase is Phase.BUSY
    assert [s[0] for s in jobs.spans] == ["a"] and jobs.spans[0][3] - jobs.spans[0][2] == pytest.approx(100.0)
    renewals = [r for r in world.history if not r.released][1:]
    assert len(renewals) >= 100 // (CONFIG.usable_s * CONFIG.renew_fraction) - 1
    assert world.record.released and world.record.epoch == 1


def test_a_crashed_holder_is_taken_over_after_the_observation_period() -> None:
    world, jobs = MemoryLease(), Recorder(1000.0)
    taken: list[float] = []

    async def main() -> None:
        with trio.move_on_after(40.0):  # server a "crashes": its run and job are gone, no release
            await run_lease(Request("a", "a-1"), world, jobs.job("a"), CONFIG)
        crashed = trio.current_time()
        last = world.record
        jobs.length_s = 5.0
        outcome = await run_lease(Request("b", "b-1"), world, jobs.job("b"), CONFIG)
        taken.append(jobs.spans[-1][2] - crashed)
        assert outcome.phase is Phase.DONE and outcome.epoch == last.epoch + 1

    _run(main)
    _disjoint(jobs.spans)
    # a renewed at most usable/3 before it crashed; b waited its whole period after reading.
    assert CONFIG.observation_s(CONFIG.ttl_s) <= taken[0] <= CONFIG.observation_s(CONFIG.ttl_s) + 1.0


def test_a_job_stops_at_its_deadline_when_renewals_fail() -> None:
    world, jobs = MemoryLease(), Recorder(1000.0)

    async def main() -> None:
        async def refuse_later() -> None:
            await trio.sleep(1.0)
            world.refuse = True

        async with trio.open_nursery() as nursery:
            nursery.start_soon(refuse_later)
            outcome = await run_lease(Request("a", "a-1"), world, jobs.job("a"), CONFIG)
        assert outcome.phase in (Phase.LOST, Phase.DONE) and not outcome.completed

    _run(main)
    [(_, _, start, end)] = jobs.spans
    assert end - start == pytest.approx(CONFIG.usable_s)


def test_servers_taking_turns_never_overlap() -> None:
    world, jobs = MemoryLease(), Recorder(7.0)
    counts = {"done": 0, "busy": 0}

    async def server(name: str) -> None:
        for n in range(6):
            outcome = await run_lease(Request(name, f"{name}-{n}"), world, jobs.job(name), CONFIG)
            counts[outcome.phase.value] += 1
            await trio.sleep(3.0)

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            for name in ("a", "b", "c"):
                nursery.start_soon(server, name)

    _run(main)
    _disjoint(jobs.spans)
    assert counts["done"] >= 3 and counts["done"] + counts["busy"] == 18


def test_a_failing_job_is_raised_after_the_release() -> None:
    world = MemoryLease()

    async def job(holding: Holding) -> None:
        raise ValueError("compaction failed")

    async def main() -> None:
        with pytest.raises(ValueError, match="compaction failed"):
            await run_lease(Request("a", "a-1"), world, job, CONFIG)

    _run(main)
    assert world.record.released and world.record.epoch == 1
