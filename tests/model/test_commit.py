"""Model tests of the commit machine: random schedules with faults, trace replay, the trio driver."""

from __future__ import annotations

import hashlib
import json
from typing import Any

import pytest
import trio
import trio.testing
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.control import current_build_context
from hypothesis.stateful import RuleBasedStateMachine, precondition, rule

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
from tests.model.trace import (
    NEW_TRACES_DIR,
    assert_checkers_match,
    assert_transitions_match,
    load_spec,
    read_trace,
    trace_header,
    traces_for,
    write_trace,
)

SPEC = load_spec("commit")

pytestmark = pytest.mark.model

# "ok" first and most often: faults are the exception, and shrinking moves towards "ok".
fault_strategy = st.sampled_from(("ok",) * 4 + FAULTS[1:])
write_strategy = st.fixed_dictionaries(
    {
        "kind": st.sampled_from(("append", "overwrite")),
        "remove_mask": st.integers(0, 255),
        "add": st.integers(1, 2),
    }
)


class CommitMachine(RuleBasedStateMachine):
    """Several sessions commit against one model catalog while foreign writers and faults interleave."""

    def __init__(self) -> None:
        super().__init__()
        self.harness = CommitHarness(SPEC)

    def _apply(self, inp: dict[str, Any]) -> None:
        self.harness.apply(inp)

    @precondition(lambda self: self.harness.idle_sessions())
    @rule(
        tables=st.lists(st.sampled_from(TABLES), min_size=1, max_size=3, unique=True),
        writes=st.lists(write_strategy, min_size=3, max_size=3),
        reads=st.lists(st.sampled_from(TABLES), max_size=2, unique=True),
    )
    def begin(self, tables: list[str], writes: list[dict[str, Any]], reads: list[str]) -> None:
        session = self.harness.idle_sessions()[0]
        self._apply(
            {
                "op": "begin",
                "session": session,
                "writes": [{"table": t, **w} for t, w in zip(tables, writes, strict=False)],
                "reads": reads,
            }
        )

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

    @rule(table=st.sampled_from(TABLES))
    def foreign_append(self, table: str) -> None:
        self._apply({"op": "foreign_append", "table": table})

    @rule(table=st.sampled_from(TABLES), pick=st.integers(0, 7))
    def foreign_overwrite(self, table: str, pick: int) -> None:
        self._apply({"op": "foreign_overwrite", "table": table, "pick": pick})

    @rule(table=st.sampled_from(TABLES))
    def schema_change(self, table: str) -> None:
        self._apply({"op": "schema_change", "table": table})

    @rule(table=st.sampled_from(TABLES))
    def drop_recreate(self, table: str) -> None:
        self._apply({"op": "drop_recreate", "table": table})

    def teardown(self) -> None:
        try:
            if not self.harness.blind_republishes:
                self._apply({"op": "settle"})
        finally:
            # Only Hypothesis's final (shrunk, failing) run is marked final: keep it as a trace.
            if current_build_context().is_final:
                _save_new_trace(self.harness.inputs)


def _save_new_trace(inputs: list[dict[str, Any]]) -> None:
    digest = hashlib.sha256(json.dumps(inputs, sort_keys=True).encode()).hexdigest()[:12]
    header = trace_header(SPEC, config=repr(commit_world.MODEL_CONFIG))
    path = write_trace(NEW_TRACES_DIR / f"commit-{digest}.ndjson", header, inputs)
    print(
        f"commit model trace written to {path}; move it to tests/model/traces/commit/ with the fix"
    )


TestCommitMachine = CommitMachine.TestCase
TestCommitMachine.settings = settings(
    max_examples=300,
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)


# --- traces --------------------------------------------------------------------------------------


def replay(path) -> CommitHarness:
    header, inputs = read_trace(path)
    assert header["machine"] == "commit", header
    harness = CommitHarness(SPEC)
    for inp in inputs:
        harness.apply(inp)
    return harness


@pytest.mark.parametrize("path", traces_for("commit"), ids=lambda p: p.stem)
def test_replay_trace(path) -> None:
    replay(path)


def test_there_are_traces_to_replay() -> None:
    names = [p.stem for p in traces_for("commit")]
    assert "unknown-outcome-then-landed" in names, names


def test_trace_roundtrip(tmp_path) -> None:
    harness = CommitHarness(SPEC)
    harness.apply(
        {
            "op": "begin",
            "session": 0,
            "reads": [],
            "writes": [{"table": "ns.a", "kind": "append", "remove_mask": 0, "add": 1}],
        }
    )
    harness.apply({"op": "settle"})
    path = write_trace(tmp_path / "t.ndjson", trace_header(SPEC), harness.inputs)
    header, inputs = read_trace(path)
    assert header["spec_sha256"] == SPEC.sha256 and inputs == harness.inputs
    again = replay(path)
    assert again.steps == harness.steps


def test_harness_catches_partial_commit() -> None:
    """The checkers are live: a catalog that applies half a commit is caught."""
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


# --- spec bookkeeping ----------------------------------------------------------------------------


def test_every_invariant_in_the_spec_has_a_checker_and_vice_versa() -> None:
    assert_checkers_match(SPEC, STEP_CHECKERS, RUN_CHECKERS)


def test_spec_names_match_the_code() -> None:
    from icegres.machines import commit

    assert SPEC.states == {p.value for p in commit.Phase}
    assert SPEC.terminal == {p.value for p in commit.Phase if p.terminal}
    assert SPEC.initial == commit.Phase.IDLE.value
    for name in SPEC.events | SPEC.effects:
        assert hasattr(commit, name), name
    assert SPEC.events == {t.__name__ for t in commit.Event.__args__}
    assert SPEC.effects == {t.__name__ for t in commit.Effect.__args__}
    assert_transitions_match(SPEC, commit._HANDLERS)


# --- the trio driver on the model world ----------------------------------------------------------

DRIVER_CONFIG = Config(
    max_attempts=4, max_inspect_attempts=3, backoff_initial_seconds=1.0, backoff_max_seconds=4.0
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


async def test_driver_surfaces_half_applied_commits(mock_clock) -> None:
    catalog = ModelCatalog()
    request = stage_request(catalog, "t1", [("ns.a", "append", 0), ("ns.b", "append", 0)])
    catalog.tables["ns.a"].add_snapshot(999, "t1", frozenset(), frozenset())  # a broken catalog
    world = ThreadedModelWorld(catalog, publish_faults=("raise_before",))
    with pytest.raises(InvariantViolation):
        await run_commit(request, world, DRIVER_CONFIG)


# --- run-scope invariant: keep last in this module -----------------------------------------------


def test_every_spec_transition_exercised() -> None:
    """Across this module's runs (and the saved traces, replayed again so `-k` works alone)."""
    for path in traces_for("commit"):
        replay(path)
    RUN_CHECKERS["every_transition_exercised"](SPEC, EXERCISED)
