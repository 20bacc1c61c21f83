"""Model tests of the group-commit buffer: random schedules with faults, trace replay, the trio driver."""

from __future__ import annotations

import random
from typing import Any

import pytest
import trio
import trio.testing
from hypothesis import strategies as st
from hypothesis.stateful import initialize, precondition, rule

from icegres.machines import buffer
from icegres.machines.buffer import (
    AckPolicy,
    BufferProtocolError,
    Config,
    FlushTable,
    LanePhase,
    Phase,
    ReportLost,
)
from icegres.machines.drivers.buffer import (
    BufferDriver,
    BufferRefused,
    FlushDone,
    FlushError,
    FlushResult,
)
from tests.model import buffer_world
from tests.model.buffer_world import (
    EXERCISED,
    FLUSH_FAULTS,
    READERS,
    RUN_CHECKERS,
    STEP_CHECKERS,
    TABLES,
    WRITERS,
    BufferHarness,
    check_step_invariants,
    load_specs,
)
from tests.model.scaffold import (
    Binding,
    MachineModel,
    ModelMachine,
    ModelTests,
    register,
    type_names,
)

SPEC, LANE_SPEC = load_specs()

pytestmark = pytest.mark.model

# The rarer inputs: readers, foreign writers, stray wake-ups, forced flushes, crash and restart.
WORLD_KINDS = ("stray_timer", "refresh", "confirm", "foreign_commit", "read", "force", "restart")


def _world(harness: BufferHarness, kind: str, table: str, pick: int, applied: bool) -> None:
    if kind == "stray_timer":
        harness.apply({"op": "stray_timer"})
    elif kind == "refresh":
        harness.apply({"op": "refresh", "table": table, "pick": pick})
    elif kind == "confirm":
        harness.apply({"op": "confirm", "table": table})
    elif kind == "foreign_commit":
        harness.apply({"op": "foreign_commit", "table": table})
    elif kind == "force":
        harness.apply({"op": "force", "table": table})
    elif kind == "read":
        harness.apply({"op": "read", "reader": pick % READERS, "table": table})
    elif harness.tail:
        harness.apply({"op": "restart", "applied": applied})


def drive(rng: random.Random, harness: BufferHarness, steps: int) -> None:
    """A seeded walk: writers append to three tables while timers fire, flushes fail, readers
    refresh, foreign writers commit, and (tail policy) the process crashes and replays. The seed
    draws the ack policy, which flush faults and world inputs are on, and when shutdown comes."""
    harness.apply({"op": "configure", "ack": rng.choice(("memory", "tail"))})
    faults = tuple(f for f in FLUSH_FAULTS[1:] if rng.random() < 0.6)
    fault_rate = rng.choice((0.1, 0.3, 0.6)) if faults else 0.0
    kinds = tuple(k for k in WORLD_KINDS if rng.random() < 0.6)
    if not harness.tail:
        kinds = tuple(k for k in kinds if k != "restart")
    shutdown_at = rng.randrange(steps // 2, steps * 2)  # past the end: only settle shuts down
    for index in range(steps):
        if index == shutdown_at and not harness.shutdown and not harness.stopped:
            harness.apply({"op": "shutdown"})
            continue
        ops = ["append"] * 4 + ["tick"] * 2
        ops += ["fire_timer"] * 2 if harness.timer_ms is not None else []
        ops += ["perform"] * 3 if harness.flushes else []
        ops += ["adopt"] * 2 if harness.adopts else []
        ops += ["world"] * 2 if kinds else []
        draining = harness.shutdown and not harness.stopped
        ops += ["shutdown"] if draining else []  # asked again while draining
        ops += ["late_durable_append"] if draining and harness.tail else []
        op = rng.choice(ops)
        if op in ("append", "late_durable_append"):
            writer, table = rng.randrange(WRITERS), rng.choice(TABLES)
            rows = rng.randint(1, 4)
            harness.apply({"op": op, "writer": writer, "table": table, "rows": rows})
        elif op == "tick":
            harness.apply({"op": "tick", "ms": rng.choice((1, 20, 60, 150))})
        elif op == "fire_timer":
            harness.apply({"op": "fire_timer"})
        elif op == "perform":
            fault = rng.choice(faults) if rng.random() < fault_rate else "ok"
            table = rng.choice(harness.flush_tables())
            harness.apply({"op": "perform", "table": table, "fault": fault})
        elif op == "shutdown":
            harness.apply({"op": "shutdown"})
        elif op == "adopt":
            harness.apply({"op": "adopt", "table": rng.choice(harness.adopt_tables())})
        else:
            kind, table = rng.choice(kinds), rng.choice(TABLES)
            _world(harness, kind, table, rng.randrange(4), rng.random() < 0.5)


def settle(harness: BufferHarness) -> None:
    harness.apply({"op": "settle"})


def acknowledged(harness: BufferHarness) -> bool:
    return any(r.status == "acked" for r in harness.entries.values())


MODEL = register(
    MachineModel(
        name="buffer",
        spec=SPEC,
        harness=lambda: BufferHarness(SPEC, LANE_SPEC),
        step_checkers=STEP_CHECKERS,
        run_checkers=RUN_CHECKERS,
        levels={"top": SPEC, "lane": LANE_SPEC},
        exercised=EXERCISED,
        bindings=(
            Binding(
                SPEC,
                Phase,
                initial=Phase.ACCEPTING,
                terminal=True,
                module=buffer,
                events=type_names(buffer.Event),
                effects=type_names(buffer.Effect),
                handlers=buffer._HANDLERS,
            ),
            # The lanes have no handler table of their own: their events are the machine's, and
            # their effects the machine's but for the machine-wide ones.
            Binding(
                LANE_SPEC,
                LanePhase,
                initial=LanePhase.EMPTY,
                events_within=SPEC.events,
                effects=SPEC.effects - {t.__name__ for t in buffer_world.MACHINE_EFFECTS},
            ),
        ),
        drive=drive,
        settle=settle,
        progress=acknowledged,
        walk_steps=100,
        walks_ci=100,
        examples_ci=250,
        example_steps=50,
        required_traces=frozenset({"timeout-after-apply-retried-once"}),
        header_extra={"config": repr(buffer_world.MODEL_CONFIG)},
    )
)
walk = MODEL.walk

# "ok" first and most often: faults are the exception, and shrinking moves towards "ok".
fault_strategy = st.sampled_from(("ok",) * 5 + FLUSH_FAULTS[1:])


class BufferMachine(ModelMachine):
    """Writers append to three tables while readers refresh, timers fire, flushes fail, and it stops."""

    model = MODEL

    def _apply(self, inp: dict[str, Any]) -> None:
        self.harness.apply(inp)

    @initialize(ack=st.sampled_from(("memory", "tail")))
    def configure(self, ack: str) -> None:
        self._apply({"op": "configure", "ack": ack})

    @rule(
        writer=st.integers(0, WRITERS - 1),
        table=st.sampled_from(TABLES),
        rows=st.integers(1, 4),
    )
    def append(self, writer: int, table: str, rows: int) -> None:
        self._apply({"op": "append", "writer": writer, "table": table, "rows": rows})

    @rule(
        writer=st.integers(0, WRITERS - 1),
        table=st.sampled_from(TABLES),
        rows=st.lists(st.integers(1, 3), min_size=2, max_size=4),
    )
    def append_many(self, writer: int, table: str, rows: list[int]) -> None:
        for n in rows:
            self._apply({"op": "append", "writer": writer, "table": table, "rows": n})

    @rule(ms=st.sampled_from((1, 20, 60, 150)))
    def tick(self, ms: int) -> None:
        self._apply({"op": "tick", "ms": ms})

    @precondition(lambda self: self.harness.timer_ms is not None)
    @rule()
    def fire_timer(self) -> None:
        self._apply({"op": "fire_timer"})

    @precondition(lambda self: self.harness.flushes)
    @rule(which=st.integers(0, len(TABLES) - 1), fault=fault_strategy)
    def perform(self, which: int, fault: str) -> None:
        tables = self.harness.flush_tables()
        self._apply({"op": "perform", "table": tables[which % len(tables)], "fault": fault})

    @precondition(lambda self: self.harness.adopts)
    @rule(which=st.integers(0, len(TABLES) - 1))
    def adopt(self, which: int) -> None:
        tables = self.harness.adopt_tables()
        self._apply({"op": "adopt", "table": tables[which % len(tables)]})

    @precondition(lambda self: not self.harness.shutdown and not self.harness.stopped)
    @rule()
    def shutdown(self) -> None:
        self._apply({"op": "shutdown"})

    # Rarer inputs share one rule, so that they do not crowd out appends and flushes.
    @rule(
        kind=st.sampled_from(WORLD_KINDS),
        table=st.sampled_from(TABLES),
        pick=st.integers(0, 3),
        applied=st.booleans(),
    )
    def world(self, kind: str, table: str, pick: int, applied: bool) -> None:
        _world(self.harness, kind, table, pick, applied)


TestBufferMachine = BufferMachine.TestCase
TestBufferMachine.settings = MODEL.hypothesis_settings()


# --- the checkers are live -----------------------------------------------------------------------


def test_harness_catches_a_duplicate_reader_row() -> None:
    """The checkers are live: a lake that applies a batch the buffer still shows is caught."""
    harness = BufferHarness(SPEC, LANE_SPEC)
    harness.apply({"op": "append", "writer": 0, "table": "ns.a", "rows": 1})
    harness.apply({"op": "fire_timer"})
    flush = harness.flushes["ns.a"]
    harness.lake.commit(flush)
    harness.reader_seq["ns.a"] = harness.lake.head("ns.a")  # readers switched behind its back
    with pytest.raises(AssertionError, match="sees acked e1 2 times"):
        check_step_invariants(harness)


def test_readers_switching_mid_flush_is_refused() -> None:
    harness = BufferHarness(SPEC, LANE_SPEC)
    harness.apply({"op": "append", "writer": 0, "table": "ns.a", "rows": 1})
    harness.apply({"op": "fire_timer"})
    harness.lake.foreign_commit("ns.a")
    with pytest.raises(BufferProtocolError, match="may have landed"):
        harness._adopt("ns.a", harness.lake.head("ns.a"))


# --- the trio driver with a world stub -----------------------------------------------------------

DRIVER_CONFIG = Config(
    window_ms=100,
    max_batch_rows=10,
    max_batch_bytes=10_000,
    max_buffered_bytes=100_000,
    max_flush_attempts=3,
    retry_backoff_initial_ms=1000,
    retry_backoff_max_ms=4000,
)


@pytest.fixture
def mock_clock() -> trio.testing.MockClock:
    return trio.testing.MockClock(autojump_threshold=0)


class StubLake:
    """The flush function's world: scripted results per call, a token-idempotent lake, a latency."""

    def __init__(self, script: tuple[str, ...] = (), latency_s: float = 0.01) -> None:
        self.script = list(script)
        self.latency_s = latency_s
        self.calls: list[tuple[float, FlushTable]] = []
        self.commits: dict[str, tuple[str, tuple[str, ...]]] = {}  # flush id -> (table, entries)
        self.adopted: list[tuple[str, int]] = []

    async def flush(self, effect: FlushTable) -> FlushResult:
        self.calls.append((trio.current_time(), effect))
        await trio.sleep(self.latency_s)
        fault = self.script.pop(0) if self.script else "ok"
        if effect.flush_id in self.commits:
            return FlushDone(self._seq(effect.flush_id))
        if fault == "raise_after":
            self._apply(effect)
            raise TimeoutError("catalog timed out")
        if fault == "refused":
            return FlushError("58030", "connection refused", retryable=True)
        if fault == "schema":
            return FlushError("40001", "the table's schema changed", retryable=False)
        self._apply(effect)
        return FlushDone(self._seq(effect.flush_id))

    def _apply(self, effect: FlushTable) -> None:
        self.commits[effect.flush_id] = (effect.table, tuple(e.entry_id for e in effect.entries))

    def _seq(self, flush_id: str) -> int:
        return list(self.commits).index(flush_id) + 1

    async def adopt(self, table: str, seq: int) -> None:
        await trio.sleep(0.001)
        self.adopted.append((table, seq))

    def rows(self) -> list[str]:
        return [e for _, entries in self.commits.values() for e in entries]


async def _started(nursery: trio.Nursery, driver: BufferDriver) -> BufferDriver:
    await nursery.start(driver.run)
    return driver


async def test_driver_acks_at_once_and_group_commits_per_table(mock_clock) -> None:
    lake = StubLake()
    async with trio.open_nursery() as nursery:
        driver = await _started(nursery, BufferDriver(DRIVER_CONFIG, lake.flush, adopt=lake.adopt))
        ids = []
        for table in ("ns.a", "ns.b", "ns.a", "ns.a"):
            ids.append(await driver.append(table, object(), 1, 100))
        assert trio.current_time() == 0  # acked from memory, no waiting
        assert [e.entry_id for e in driver.reader_view("ns.a")[1]] == [ids[0], ids[2], ids[3]]
        assert driver.metrics().buffered_rows == 4
        await trio.sleep(0.2)
        assert sorted((t, f.table, len(f.entries)) for t, f in lake.calls) == [
            (0.1, "ns.a", 3),
            (0.1, "ns.b", 1),
        ]
        assert sorted(lake.rows()) == sorted(ids)
        (flush_a,) = [f for _, f in lake.calls if f.table == "ns.a"]
        assert driver.reader_view("ns.a") == (lake._seq(flush_a.flush_id), ())
        m = driver.metrics()
        assert m.flushed_batches == 2 and m.flushed_rows == 4 and m.buffered_rows == 0
        assert m.flush_latency_ms_last == 10
        await driver.shutdown()


async def test_driver_flushes_at_once_when_asked(mock_clock) -> None:
    lake = StubLake()
    async with trio.open_nursery() as nursery:
        driver = await _started(nursery, BufferDriver(DRIVER_CONFIG, lake.flush, adopt=lake.adopt))
        first = await driver.append("ns.a", object(), 1, 100)
        await trio.sleep(0.03)
        driver.request_flush("ns.a")
        driver.request_flush("ns.b")  # nothing buffered there: a no-op
        await driver.wait_until(lambda s: not driver.reader_view("ns.a")[1])
        # Not at the window's end (0.1 s): at once, and it took the flush's own 10 ms.
        assert [(t, len(f.entries)) for t, f in lake.calls] == [(0.03, 1)]
        assert trio.current_time() < 0.05 and lake.rows() == [first]
        await driver.shutdown()


async def test_driver_flushes_early_at_the_row_bound(mock_clock) -> None:
    lake = StubLake()
    async with trio.open_nursery() as nursery:
        driver = await _started(nursery, BufferDriver(DRIVER_CONFIG, lake.flush))
        await driver.append("ns.a", None, 6, 600)
        await trio.sleep(0.05)
        assert lake.calls == []
        await driver.append("ns.a", None, 4, 400)
        await trio.sleep(0.001)
        assert [t for t, _ in lake.calls] == [0.05]  # the bound, not the 100 ms window
        await driver.shutdown()


async def test_driver_retries_with_backoff_and_keeps_rows_visible(mock_clock) -> None:
    lake = StubLake(script=("refused", "raise_after"))
    async with trio.open_nursery() as nursery:
        driver = await _started(nursery, BufferDriver(DRIVER_CONFIG, lake.flush))
        entry = await driver.append("ns.a", None, 1, 100)
        await trio.sleep(1.2)
        assert len(lake.calls) == 2 and lake.calls[1][0] == pytest.approx(0.11 + 1.0)
        assert [e.entry_id for e in driver.reader_view("ns.a")[1]] == [entry]
        await trio.sleep(3.0)
        # The second attempt landed but timed out; the third resolved by the token.
        assert [t for t, _ in lake.calls] == pytest.approx([0.1, 1.11, 3.12])
        assert len({f.flush_id for _, f in lake.calls}) == 1 and lake.rows() == [entry]
        assert driver.metrics().flush_failures == 2 and driver.lost == []
        await driver.shutdown()


async def test_driver_reports_a_poisoned_batch(mock_clock) -> None:
    lake = StubLake(script=("schema",))
    reported: list[ReportLost] = []
    async with trio.open_nursery() as nursery:
        driver = await _started(
            nursery, BufferDriver(DRIVER_CONFIG, lake.flush, on_lost=reported.append)
        )
        entry = await driver.append("ns.a", None, 1, 100)
        await trio.sleep(0.2)
        assert len(reported) == 1 and reported == driver.lost
        assert reported[0].sqlstate == "40001" and not reported[0].in_doubt
        assert [e.entry_id for e in reported[0].entries] == [entry]
        assert driver.reader_view("ns.a")[1] == () and driver.metrics().lost_entries == 1
        await driver.shutdown()


async def test_driver_shutdown_flushes_everything_and_refuses_new_rows(mock_clock) -> None:
    lake = StubLake(latency_s=0.5)
    async with trio.open_nursery() as nursery:
        driver = await _started(nursery, BufferDriver(DRIVER_CONFIG, lake.flush))
        ids = [await driver.append(t, None, 1, 100) for t in ("ns.a", "ns.b", "ns.c")]
        await trio.sleep(0.01)

        async def late_append() -> None:
            await trio.sleep(0.1)
            with pytest.raises(BufferRefused) as refused:
                await driver.append("ns.a", None, 1, 100)
            assert refused.value.sqlstate == "57P01"

        nursery.start_soon(late_append)
        await driver.shutdown()
        assert trio.current_time() == pytest.approx(0.51)  # flushed at once, not at the window
        assert sorted(lake.rows()) == sorted(ids) and driver.state.phase is Phase.STOPPED
        with pytest.raises(BufferRefused):
            await driver.append("ns.a", None, 1, 100)


async def test_driver_tail_policy_passes_the_watermark(mock_clock) -> None:
    lake = StubLake()
    config = Config(window_ms=100, ack=AckPolicy.TAIL)
    async with trio.open_nursery() as nursery:
        driver = await _started(nursery, BufferDriver(config, lake.flush))
        for lsn in (7, 9, 12):
            await driver.append("ns.a", None, 1, 100, lsn=lsn)
        await driver.shutdown()
    ((_, effect),) = lake.calls
    assert effect.watermark == 12
    assert [lane.lake_watermark for lane in driver.state.lanes] == [12]


async def test_driver_treats_a_raising_flush_as_unknown_and_retries(mock_clock) -> None:
    calls = []

    async def flaky(effect: FlushTable) -> FlushResult:
        calls.append(effect.attempt)
        if len(calls) == 1:
            raise ConnectionError("reset")
        return FlushDone(1)

    async with trio.open_nursery() as nursery:
        driver = await _started(nursery, BufferDriver(DRIVER_CONFIG, flaky))
        await driver.append("ns.a", None, 1, 100)
        await driver.shutdown()
    assert calls == [1, 2]


# --- the shared tests (tests/model/scaffold.py): last, so that coverage counts every run above ---


class TestBufferModel(ModelTests):
    model = MODEL
