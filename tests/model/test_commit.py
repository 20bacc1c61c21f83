"""Model tests of the commit machine: random schedules with faults, trace replay, the trio driver."""

from __future__ import annotations

import random
from dataclasses import replace
from typing import Any

import pytest
import trio
import trio.testing
from hypothesis import strategies as st
from hypothesis.stateful import precondition, rule

from icegres.machines import commit
from icegres.machines.commit import Config, InvariantViolation, Phase, Publish, PublishSucceeded
from icegres.machines.drivers.commit import run_commit, run_recovery
from tests.model import commit_world
from tests.model.commit_world import (
    EXERCISED,
    FAULTS,
    RUN_CHECKERS,
    SESSIONS,
    STEP_CHECKERS,
    TABLES,
    CommitHarness,
    ModelCatalog,
    ThreadedModelWorld,
    check_step_invariants,
    stage_request,
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

SPEC = load_spec("commit")

pytestmark = pytest.mark.model

FOREIGN_WRITES = ("foreign_append", "foreign_overwrite", "schema_change", "drop_recreate")
KEYS = 4  # primary-key values keyed appends draw from: few, so that they collide


def _begin(session: int, tables: list[str], writes: list[dict[str, Any]], reads: list[str]):
    return {
        "op": "begin",
        "session": session,
        "writes": [{"table": t, **w} for t, w in zip(tables, writes, strict=False)],
        "reads": reads,
    }


def drive(rng: random.Random, harness: CommitHarness, steps: int) -> None:
    """A seeded walk: up to three sessions commit while foreign writers, faults and crashes
    interleave. The seed draws which faults and which foreign writers are on, and how often."""
    faults = tuple(f for f in FAULTS[1:] if rng.random() < 0.6)
    fault_rate = rng.choice((0.1, 0.3, 0.6)) if faults else 0.0
    crashes = rng.random() < 0.5
    foreign = tuple(k for k in FOREIGN_WRITES if rng.random() < 0.5)
    sessions = rng.randint(1, SESSIONS)
    keyed = rng.random() < 0.5  # appends that check primary keys, and foreign rows with keys
    for _ in range(steps):
        idle = [s for s in harness.idle_sessions() if s < sessions]
        pending = harness.pending_sessions()
        ops = ["begin"] * 2 if idle else []
        ops += ["perform"] * 4 if pending else []
        ops += ["crash"] if crashes and pending else []
        ops += ["foreign"] if foreign else []
        op = rng.choice(ops)
        if op == "begin":
            tables = rng.sample(TABLES, rng.randint(1, len(TABLES)))
            writes = [
                {
                    "kind": rng.choice(("append", "overwrite")),
                    "remove_mask": rng.randrange(256),
                    "add": rng.randint(1, 2),
                }
                for _ in tables
            ]
            for w in writes:
                if keyed and w["kind"] == "append" and rng.random() < 0.5:
                    w["keys"] = [rng.randrange(KEYS)]
                if rng.random() < 0.2:
                    w["serializable"] = True
            reads = rng.sample(TABLES, rng.randint(0, 2))
            harness.apply(_begin(rng.choice(idle), tables, writes, reads))
        elif op == "perform":
            fault = rng.choice(faults) if rng.random() < fault_rate else "ok"
            harness.apply({"op": "perform", "session": rng.choice(pending), "fault": fault})
        elif op == "crash":
            session, applied = rng.choice(pending), rng.random() < 0.5
            harness.apply({"op": "crash", "session": session, "applied": applied})
        else:
            kind, table = rng.choice(foreign), rng.choice(TABLES)
            inp: dict[str, Any] = {"op": kind, "table": table}
            if kind == "foreign_overwrite":
                inp["pick"] = rng.randrange(8)
            elif kind == "foreign_append" and keyed and rng.random() < 0.5:
                inp["key"] = rng.randrange(KEYS)
            harness.apply(inp)


def settle(harness: CommitHarness) -> None:
    # A blind republish already failed its invariant: settling would only bury that failure.
    if not harness.blind_republishes:
        harness.apply({"op": "settle"})


def acknowledged(harness: CommitHarness) -> bool:
    return any("Acknowledge" in effects for *_, effects in harness.steps)


MODEL = register(
    MachineModel(
        name="commit",
        spec=SPEC,
        harness=lambda: CommitHarness(SPEC),
        step_checkers=STEP_CHECKERS,
        run_checkers=RUN_CHECKERS,
        levels={"top": SPEC},
        exercised=EXERCISED,
        bindings=(
            Binding(
                SPEC,
                commit.Phase,
                initial=commit.Phase.IDLE,
                terminal=True,
                module=commit,
                events=type_names(commit.Event),
                effects=type_names(commit.Effect),
                handlers=commit._HANDLERS,
            ),
        ),
        drive=drive,
        settle=settle,
        progress=acknowledged,
        walk_steps=80,
        walks_ci=100,
        examples_ci=300,
        example_steps=40,
        required_traces=frozenset({"unknown-outcome-then-landed"}),
        header_extra={"config": repr(commit_world.MODEL_CONFIG)},
    )
)
walk = MODEL.walk

# "ok" first and most often: faults are the exception, and shrinking moves towards "ok".
fault_strategy = st.sampled_from(("ok",) * 4 + FAULTS[1:])
write_strategy = st.fixed_dictionaries(
    {
        "kind": st.sampled_from(("append", "overwrite")),
        "remove_mask": st.integers(0, 255),
        "add": st.integers(1, 2),
    },
    optional={"keys": st.lists(st.integers(0, KEYS - 1), max_size=2, unique=True), "serializable": st.booleans()},
)


class CommitMachine(ModelMachine):
    """Several sessions commit against one model catalog while foreign writers and faults interleave."""

    model = MODEL

    def _apply(self, inp: dict[str, Any]) -> None:
        self.harness.apply(inp)

    @precondition(lambda self: self.harness.idle_sessions())
    @rule(
        tables=st.lists(st.sampled_from(TABLES), min_size=1, max_size=3, unique=True),
        writes=st.lists(write_strategy, min_size=3, max_size=3),
        reads=st.lists(st.sampled_from(TABLES), max_size=2, unique=True),
    )
    def begin(self, tables: list[str], writes: list[dict[str, Any]], reads: list[str]) -> None:
        self._apply(_begin(self.harness.idle_sessions()[0], tables, writes, reads))

    @precondition(lambda self: self.harness.pending_sessions())
    @rule(which=st.integers(0, SESSIONS - 1), fault=fault_strategy)
    def perform(self, which: int, fault: str) -> None:
        pending = self.harness.pending_sessions()
        self._apply({"op": "perform", "session": pending[which % len(pending)], "fault": fault})

    @precondition(lambda self: self.harness.active_sessions())
    @rule(which=st.integers(0, SESSIONS - 1), applied=st.booleans())
    def crash(self, which: int, applied: bool) -> None:
        active = self.harness.active_sessions()
        self._apply({"op": "crash", "session": active[which % len(active)], "applied": applied})

    @rule(table=st.sampled_from(TABLES), key=st.none() | st.integers(0, KEYS - 1))
    def foreign_append(self, table: str, key: int | None) -> None:
        inp: dict[str, Any] = {"op": "foreign_append", "table": table}
        self._apply(inp if key is None else {**inp, "key": key})

    @rule(table=st.sampled_from(TABLES), pick=st.integers(0, 7))
    def foreign_overwrite(self, table: str, pick: int) -> None:
        self._apply({"op": "foreign_overwrite", "table": table, "pick": pick})

    @rule(table=st.sampled_from(TABLES))
    def schema_change(self, table: str) -> None:
        self._apply({"op": "schema_change", "table": table})

    @rule(table=st.sampled_from(TABLES))
    def drop_recreate(self, table: str) -> None:
        self._apply({"op": "drop_recreate", "table": table})


TestCommitMachine = CommitMachine.TestCase
TestCommitMachine.settings = MODEL.hypothesis_settings()


# --- the checkers are live -----------------------------------------------------------------------


def test_harness_catches_partial_commit() -> None:
    """A catalog that applies half a commit is caught."""
    harness = CommitHarness(SPEC)
    harness.apply(
        {
            "op": "begin",
            "session": 0,
            "reads": [],
            "writes": [
                {"table": "ns.a", "kind": "append", "remove_mask": 0, "add": 1},
                {"table": "ns.b", "kind": "append", "remove_mask": 0, "add": 1},
            ],
        }
    )
    request = harness.sessions[0].state.request
    harness.catalog.tables["ns.a"].add_snapshot(999, request.token, frozenset(), frozenset())
    with pytest.raises(AssertionError, match="only some tables"):
        check_step_invariants(harness)


# --- the trio driver on the model world ----------------------------------------------------------

DRIVER_CONFIG = Config(
    max_attempts=4,
    max_rebases=50,
    max_inspect_attempts=3,
    backoff_initial_seconds=1.0,
    backoff_max_seconds=4.0,
)


@pytest.fixture
def mock_clock() -> trio.testing.MockClock:
    return trio.testing.MockClock(autojump_threshold=0)


def _files_of(request) -> frozenset[str]:
    return request.added_files


async def test_driver_commits_two_tables(mock_clock) -> None:
    catalog = ModelCatalog()
    request = stage_request(catalog, "t1", [("ns.a", "append", 0), ("ns.b", "append", 0)])
    world = ThreadedModelWorld(catalog)
    outcome = await run_commit(request, world, DRIVER_CONFIG)
    assert outcome.committed and outcome.phase is Phase.COMMITTED and outcome.attempts == 1
    assert catalog.tables["ns.a"].has_token("t1") and catalog.tables["ns.b"].has_token("t1")


async def test_driver_timeout_after_apply_resolves_by_token(mock_clock) -> None:
    catalog = ModelCatalog()
    request = stage_request(catalog, "t1", [("ns.a", "append", 0)])
    world = ThreadedModelWorld(catalog, publish_faults=("raise_after",))
    outcome = await run_commit(request, world, DRIVER_CONFIG)
    assert outcome.committed
    assert len(world.publishes) == 1 and world.inspections == 1  # never published again
    assert [s.token for s in catalog.tables["ns.a"].snapshots] == ["seed-ns.a", "t1"]


async def test_driver_timeout_before_apply_rebases_and_commits(mock_clock) -> None:
    catalog = ModelCatalog()
    request = stage_request(catalog, "t1", [("ns.a", "append", 0)])
    catalog.foreign_append("ns.a")  # the head moves while our publish is lost
    moved = catalog.tables["ns.a"].head
    world = ThreadedModelWorld(catalog, publish_faults=("raise_before",))
    outcome = await run_commit(request, world, DRIVER_CONFIG)
    assert outcome.committed and outcome.attempts == 2
    assert world.publishes[1].bases == (("ns.a", moved),)


async def test_driver_backs_off_on_virtual_time_then_aborts(mock_clock) -> None:
    catalog = ModelCatalog()
    request = stage_request(catalog, "t1", [("ns.a", "append", 0)])
    world = ThreadedModelWorld(catalog, publish_faults=("refused",) * 10)
    start = trio.current_time()
    outcome = await run_commit(request, world, DRIVER_CONFIG)
    assert outcome.phase is Phase.ABORTED and outcome.sqlstate == "58030"
    assert "connection refused" in outcome.message
    assert len(world.publishes) == DRIVER_CONFIG.max_attempts
    assert trio.current_time() - start == pytest.approx(1.0 + 2.0 + 4.0)
    assert _files_of(request) <= catalog.deleted and not catalog.tables["ns.a"].has_token("t1")


async def test_driver_conflict_aborts_40001(mock_clock) -> None:
    catalog = ModelCatalog()
    catalog.foreign_append("ns.a")
    request = stage_request(catalog, "t1", [("ns.a", "overwrite", 1)])
    catalog.foreign_overwrite("ns.a", 0)  # another writer rewrote the row we update
    world = ThreadedModelWorld(catalog)
    outcome = await run_commit(request, world, DRIVER_CONFIG)
    assert outcome.phase is Phase.ABORTED and outcome.sqlstate == "40001"
    assert '"ns.a"' in outcome.message and not outcome.committed
    assert world.delete_calls == [_files_of(request)]


async def test_driver_unknown_when_inspection_keeps_failing(mock_clock) -> None:
    catalog = ModelCatalog()
    request = stage_request(catalog, "t1", [("ns.a", "append", 0)])
    world = ThreadedModelWorld(
        catalog, publish_faults=("unknown_after",), inspect_faults=("raise",) * 10
    )
    outcome = await run_commit(request, world, DRIVER_CONFIG)
    assert outcome.phase is Phase.UNKNOWN and not outcome.committed
    assert outcome.sqlstate == "08006" and outcome.message == "commit outcome unknown"
    assert world.inspections == DRIVER_CONFIG.max_inspect_attempts
    assert world.delete_calls == [] and _files_of(request) <= catalog.storage


async def test_driver_recovery_inspects_before_publishing(mock_clock) -> None:
    catalog = ModelCatalog()
    request = stage_request(catalog, "t1", [("ns.a", "append", 0)])
    # The crashed process got its publish out before dying.
    landed = catalog.publish(request, Publish(1, (("ns.a", request.writes[0].base_snapshot),)))
    assert landed == PublishSucceeded()
    world = ThreadedModelWorld(catalog)
    outcome = await run_recovery(request, world, DRIVER_CONFIG)
    assert outcome.committed and world.publishes == [] and world.inspections == 1


async def test_driver_finishes_a_commit_whose_caller_is_cancelled(mock_clock) -> None:
    catalog = ModelCatalog()
    request = stage_request(catalog, "t1", [("ns.a", "append", 0)])
    world = ThreadedModelWorld(catalog, publish_faults=("refused", "refused"))
    with trio.move_on_after(0.5) as scope:
        await run_commit(request, world, DRIVER_CONFIG)
    assert scope.cancel_called and trio.current_time() >= 1.0 + 2.0
    assert catalog.tables["ns.a"].has_token("t1")  # it ran to its verdict under the shield


async def test_driver_blind_append_outlasts_appends_that_land_first(mock_clock) -> None:
    """Issue 25: another append lands before each of our first 20 publishes (5x max_attempts);
    the blind append rebases onto each new head, without waiting, and commits."""
    catalog = ModelCatalog()
    request = stage_request(catalog, "t1", [("ns.a", "append", 0)])
    world = ThreadedModelWorld(catalog, overtake=20)
    start = trio.current_time()
    outcome = await run_commit(request, world, DRIVER_CONFIG)
    assert outcome.committed and outcome.attempts == 21 and len(world.publishes) == 21
    assert trio.current_time() == start  # rebases do not back off
    tokens = [s.token for s in catalog.tables["ns.a"].snapshots]
    assert tokens[-1] == "t1" and len(tokens) == 1 + 20 + 1  # seed, the others, ours once


async def test_driver_blind_append_gives_up_after_max_rebases(mock_clock) -> None:
    catalog = ModelCatalog()
    request = stage_request(catalog, "t1", [("ns.a", "append", 0)])
    world = ThreadedModelWorld(catalog, overtake=1000)
    outcome = await run_commit(request, world, replace(DRIVER_CONFIG, max_rebases=7))
    assert outcome.phase is Phase.ABORTED and outcome.sqlstate == "40001"
    assert len(world.publishes) == 8 and "rebased 7 times" in outcome.detail
    assert _files_of(request) <= catalog.deleted and not catalog.tables["ns.a"].has_token("t1")


async def test_driver_no_free_rebase_when_configured_off(mock_clock) -> None:
    """max_rebases=0 (a writer fenced at the lake): a moved head is charged, as before."""
    catalog = ModelCatalog()
    request = stage_request(catalog, "t1", [("ns.a", "append", 0)])
    world = ThreadedModelWorld(catalog, overtake=1)
    outcome = await run_commit(request, world, replace(DRIVER_CONFIG, max_attempts=1, max_rebases=0))
    assert outcome.phase is Phase.ABORTED and outcome.sqlstate == "40001"
    assert len(world.publishes) == 1


async def test_driver_append_that_read_its_table_keeps_the_bound(mock_clock) -> None:
    """An append that read its table (keys checked) is charged for every rebase: 40001 after
    max_attempts, as before issue 25."""
    catalog = ModelCatalog()
    request = stage_request(catalog, "t1", [("ns.a", "append", 0)], keys=frozenset({1}))
    world = ThreadedModelWorld(catalog, overtake=20)
    outcome = await run_commit(request, world, DRIVER_CONFIG)
    assert outcome.phase is Phase.ABORTED and outcome.sqlstate == "40001"
    assert "gave up after 4 attempts" in outcome.message
    assert len(world.publishes) == DRIVER_CONFIG.max_attempts


async def test_driver_key_inserted_by_another_commit_is_40001_at_once(mock_clock) -> None:
    catalog = ModelCatalog()
    request = stage_request(catalog, "t1", [("ns.a", "append", 0)], keys=frozenset({1}))
    world = ThreadedModelWorld(catalog, overtake=1, overtake_key=1)
    outcome = await run_commit(request, world, DRIVER_CONFIG)
    assert outcome.phase is Phase.ABORTED and outcome.sqlstate == "40001"
    assert "inserted a key" in outcome.detail and len(world.publishes) == 1


async def test_driver_blind_append_refused_without_progress_is_58030(mock_clock) -> None:
    """A catalog that keeps timing out is charged: 58030 after max_attempts, not a 40001."""
    catalog = ModelCatalog()
    request = stage_request(catalog, "t1", [("ns.a", "append", 0)])
    world = ThreadedModelWorld(catalog, publish_faults=("raise_before",) * 10)
    outcome = await run_commit(request, world, DRIVER_CONFIG)
    assert outcome.phase is Phase.ABORTED and outcome.sqlstate == "58030"
    assert len(world.publishes) == DRIVER_CONFIG.max_attempts and "read timed out" in outcome.message


async def test_driver_surfaces_half_applied_commits(mock_clock) -> None:
    catalog = ModelCatalog()
    request = stage_request(catalog, "t1", [("ns.a", "append", 0), ("ns.b", "append", 0)])
    catalog.tables["ns.a"].add_snapshot(999, "t1", frozenset(), frozenset())  # a broken catalog
    world = ThreadedModelWorld(catalog, publish_faults=("raise_before",))
    with pytest.raises(InvariantViolation):
        await run_commit(request, world, DRIVER_CONFIG)


# --- the shared tests (tests/model/scaffold.py): last, so that coverage counts every run above ---


class TestCommitModel(ModelTests):
    model = MODEL
