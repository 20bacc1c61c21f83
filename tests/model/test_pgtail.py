"""Model tests of the Postgres tail machine: random schedules with database faults, trace replay,
and the trio driver on an in-memory backend in virtual time."""

from __future__ import annotations

import random

import pytest
from hypothesis import strategies as st
from hypothesis.stateful import initialize, precondition, rule

from icegres.machines import pgtail
from tests.model.pgtail_world import (
    EXERCISED,
    RUN_CHECKERS,
    STEP_CHECKERS,
    PgTailHarness,
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

SPEC = load_spec("pgtail")

pytestmark = pytest.mark.model

DB_FAULTS = ("abort", "lost", "applied", "io_error")


def drive(rng: random.Random, harness: PgTailHarness, steps: int) -> None:
    """A seeded walk: concurrent appends, effects performed in any order (slow commits), lake
    flushes, stale watermarks, connection faults, crashes and takeover attempts. The seed draws
    which database faults are on and how often, and whether crashes and takeovers are."""
    harness.apply({"op": "open"})
    faults = tuple(f for f in DB_FAULTS if rng.random() < 0.6)
    fault_rate = rng.choice((0.05, 0.15, 0.4)) if faults else 0.0
    crashes = rng.random() < 0.5
    takeovers = rng.random() < 0.4
    for _ in range(steps):
        ops = ["append"] * 3 + ["flush", "deliver"]
        ops += ["perform"] * 4 if harness.pending else []
        ops += ["crash"] if crashes else []
        ops += ["takeover"] if takeovers else []
        op = rng.choice(ops)
        if op == "append":
            harness.apply({"op": "append", "size": rng.randint(1, 120)})
        elif op == "perform":
            fault = rng.choice(faults) if rng.random() < fault_rate else "ok"
            harness.apply({"op": "perform", "which": rng.randrange(4), "fault": fault})
        elif op == "flush":
            harness.apply({"op": "flush", "pick": rng.randrange(16), "deliver": rng.random() < 0.7})
        elif op == "deliver":
            harness.apply({"op": "deliver", "stale": rng.random() < 0.3})
        elif op == "crash":
            harness.apply({"op": "crash", "applied": rng.random() < 0.5})
        else:
            live = rng.random() < 2 / 3
            harness.apply({"op": "takeover", "live": live, "records": rng.randint(0, 3)})


def settle(harness: PgTailHarness) -> None:
    if harness.running:
        harness.apply({"op": "settle"})


def acknowledged(harness: PgTailHarness) -> bool:
    return any("Acknowledge" in effects for *_, effects in harness.steps)


MODEL = register(
    MachineModel(
        name="pgtail",
        spec=SPEC,
        harness=lambda: PgTailHarness(SPEC),
        step_checkers=STEP_CHECKERS,
        run_checkers=RUN_CHECKERS,
        levels={"top": SPEC},
        exercised=EXERCISED,
        bindings=(
            Binding(
                SPEC,
                pgtail.Phase,
                initial=pgtail.Phase.STARTING,
                events=type_names(pgtail.Event),
                effects=type_names(pgtail.Effect),
                handlers=pgtail._HANDLERS,
            ),
        ),
        drive=drive,
        settle=settle,
        progress=acknowledged,
        walk_steps=150,
        walks_ci=100,
        examples_ci=200,
        example_steps=50,
        required_traces=frozenset(
            {"unknown-commit-applied-read-back-acks", "takeover-fences-the-old-writer"}
        ),
    )
)
walk = MODEL.walk

# "ok" first and most often: faults are the exception, and shrinking moves towards "ok".
fault_strategy = st.sampled_from(("ok",) * 8 + DB_FAULTS)


class PgTailMachine(ModelMachine):
    """Concurrent appends, effects performed in any order (slow commits), flushes, connection
    faults, crashes and takeover attempts."""

    model = MODEL

    @initialize()
    def open(self) -> None:
        self.harness.apply({"op": "open"})

    @precondition(lambda self: self.harness.running)
    @rule(size=st.integers(1, 120))
    def append(self, size: int) -> None:
        self.harness.apply({"op": "append", "size": size})

    @precondition(lambda self: self.harness.running and self.harness.pending)
    @rule(which=st.integers(0, 3), fault=fault_strategy)
    def perform(self, which: int, fault: str) -> None:
        self.harness.apply({"op": "perform", "which": which, "fault": fault})

    @precondition(lambda self: self.harness.running)
    @rule(pick=st.integers(0, 15), deliver=st.booleans())
    def flush(self, pick: int, deliver: bool) -> None:
        self.harness.apply({"op": "flush", "pick": pick, "deliver": deliver})

    @precondition(lambda self: self.harness.running)
    @rule(stale=st.booleans())
    def deliver(self, stale: bool) -> None:
        self.harness.apply({"op": "deliver", "stale": stale})

    @precondition(lambda self: self.harness.running)
    @rule(applied=st.booleans())
    def crash(self, applied: bool) -> None:
        self.harness.apply({"op": "crash", "applied": applied})

    @precondition(lambda self: self.harness.running)
    @rule(live=st.sampled_from((True, True, False)), records=st.integers(0, 3))
    def takeover(self, live: bool, records: int) -> None:
        self.harness.apply({"op": "takeover", "live": live, "records": records})


TestPgTailMachine = PgTailMachine.TestCase
TestPgTailMachine.settings = MODEL.hypothesis_settings()


# --- the checkers are live -----------------------------------------------------------------------


def test_harness_catches_an_early_ack() -> None:
    """Acknowledging a batch whose COMMIT never ran is caught."""
    harness = PgTailHarness(SPEC)
    harness.apply({"op": "open"})
    harness.apply({"op": "append", "size": 10})
    harness._on_ack(harness.state, harness.state, 1, 1)
    with pytest.raises(AssertionError, match="acked but not committed"):
        check_step_invariants(harness)


def test_harness_catches_a_lost_acked_record() -> None:
    harness = PgTailHarness(SPEC)
    for inp in ({"op": "open"}, {"op": "append", "size": 10}, {"op": "settle"}):
        harness.apply(inp)
    del harness.db.rows[1]  # the database forgets an acked row behind the harness's back
    with pytest.raises(AssertionError, match="not committed"):
        check_step_invariants(harness)


def test_harness_catches_interleaved_writers() -> None:
    harness = PgTailHarness(SPEC)
    for inp in ({"op": "open"}, {"op": "append", "size": 10}, {"op": "settle"}):
        harness.apply(inp)
    from tests.model.pgtail_world import Row

    harness.db.rows[2] = Row(0, b"x", 0)  # an older epoch above a newer one
    with pytest.raises(AssertionError, match="interleave"):
        check_step_invariants(harness)


# --- the trio driver on the model database, in virtual time ---------------------------------------

import trio  # noqa: E402
import trio.testing  # noqa: E402

from icegres.machines.drivers.pgtail import AppendFailed, TailOwned, open_pg_tail  # noqa: E402
from icegres.machines.pgtail import (  # noqa: E402
    BatchAborted,
    BatchCommitted,
    Claim,
    Commit,
    CommitOutcomeUnknown,
    Config,
    Event,
    Fenced,
    ReadBack,
    ReadBackDone,
    Trim,
    TrimDone,
)
from tests.model.pgtail_world import ModelDb  # noqa: E402


class MemoryBackend:
    """The model database behind the driver's backend interface; commits take virtual time and
    fail as scripted (`faults`, one per commit: ok / abort / lost / applied)."""

    def __init__(self, db: ModelDb, commit_seconds: float = 0.0, faults: tuple[str, ...] = ()):
        self.db = db
        self.commit_seconds = commit_seconds
        self.faults = list(faults)
        self.commits: list[tuple[float, int]] = []  # (virtual time, records)
        self.events: list[Event] = []

    async def claim(self, watermark_lsn: int) -> Claim:
        if self.db.lock is not None:
            raise TailOwned(f"held by {self.db.lock}")
        return self.db.claim("node", watermark_lsn)

    async def commit(self, effect: Commit) -> Event:
        await trio.sleep(self.commit_seconds)
        self.commits.append((trio.current_time(), len(effect.records)))
        fault = self.faults.pop(0) if self.faults else "ok"
        event: Event
        if fault == "abort":
            event = BatchAborted("connection reset")
        elif fault == "lost":
            event = CommitOutcomeUnknown("connection lost during COMMIT")
        elif not self.db.commit(effect):
            event = Fenced(f"epoch {self.db.epoch}")
        else:
            event = CommitOutcomeUnknown("lost reply") if fault == "applied" else BatchCommitted()
        self.events.append(event)
        return event

    async def read_back(self, effect: ReadBack) -> Event:
        event = ReadBackDone(self.db.read_back(effect))
        self.events.append(event)
        return event

    async def trim(self, effect: Trim) -> Event:
        self.db.trim(effect)
        return TrimDone(effect.through_lsn)

    def close(self) -> None:
        if self.db.lock == "node":
            self.db.lock = None


@pytest.fixture
def mock_clock() -> trio.testing.MockClock:
    return trio.testing.MockClock(autojump_threshold=0)


async def test_driver_group_commit_shares_transactions_in_virtual_time(mock_clock) -> None:
    backend = MemoryBackend(ModelDb(), commit_seconds=1.0)
    done: dict[int, float] = {}

    async def append(tail, payload: bytes) -> None:
        lsn = await tail.append(payload)
        done[lsn] = trio.current_time()

    async with open_pg_tail(backend, Config(), tail_id="t1") as tail:
        start = trio.current_time()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(append, tail, b"first")
            await trio.sleep(0.1)  # the first commit is in flight
            for i in range(7):
                nursery.start_soon(append, tail, b"rider%d" % i)
    assert [n for _, n in backend.commits] == [1, 7]  # eight writers, two transactions
    assert done[1] - start == pytest.approx(1.0)
    assert all(done[lsn] - start == pytest.approx(2.0) for lsn in range(2, 9))


async def test_driver_resolves_an_unknown_commit_by_reading_back(mock_clock) -> None:
    db = ModelDb()
    backend = MemoryBackend(db, faults=("applied", "lost"))
    async with open_pg_tail(backend, Config(), tail_id="t1") as tail:
        assert await tail.append(b"a") == 1  # committed, reply lost: read back, acked once
        assert await tail.append(b"b") == 2  # not committed, reply lost: read back, retried
    kinds = [type(e).__name__ for e in backend.events]
    assert kinds == [
        "CommitOutcomeUnknown",
        "ReadBackDone",
        "CommitOutcomeUnknown",
        "ReadBackDone",
        "BatchCommitted",
    ]
    assert sorted(db.rows) == [1, 2] and len(backend.commits) == 3


async def test_driver_retries_with_backoff_then_gives_up_definitely(mock_clock) -> None:
    config = Config(commit_attempts_max=3, retry_backoff_seconds=0.5)
    backend = MemoryBackend(ModelDb(), faults=("abort",) * 3)
    async with open_pg_tail(backend, config, tail_id="t1") as tail:
        start = trio.current_time()
        with pytest.raises(AppendFailed) as failed:
            await tail.append(b"a")
        assert failed.value.outcome_unknown is False
        assert trio.current_time() - start == pytest.approx(0.5 + 1.0)
        assert not tail.health().ok and "giving up" in tail.health().reason
        with pytest.raises(AppendFailed):
            await tail.append(b"b")


async def test_driver_refused_while_owned_and_fenced_after_takeover(mock_clock) -> None:
    db = ModelDb()
    async with open_pg_tail(MemoryBackend(db), Config(), tail_id="t1") as tail:
        assert await tail.append(b"a") == 1
        with pytest.raises(TailOwned):
            async with open_pg_tail(MemoryBackend(db), Config(), tail_id="t1"):
                pass
        db.lock = None  # our session died; another writer claims
        db.claim("intruder", 0)
        with pytest.raises(AppendFailed, match="fenced") as failed:
            await tail.append(b"b")
        assert failed.value.outcome_unknown is False
    assert sorted(db.rows) == [1]


# --- the shared tests (tests/model/scaffold.py): last, so that coverage counts every run above ---


class TestPgTailModel(ModelTests):
    model = MODEL
