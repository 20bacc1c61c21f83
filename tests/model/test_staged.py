"""Model tests of the staged-file machine: write attempts that stage files and end in every way,
crashes anywhere (the recovery's own too), lost commit replies, another server committing,
compacting and staging on the same table, expiry and a replaced table; traces, walks, spec
bookkeeping."""

from __future__ import annotations

import random
from typing import Any

import pytest
import trio
import trio.testing
from hypothesis import strategies as st
from hypothesis.stateful import rule

from icegres.machines import staged
from icegres.machines.drivers.staged import run_recovery, run_statement_end
from tests.model.scaffold import (
    Binding,
    MachineModel,
    ModelMachine,
    ModelTests,
    register,
    type_names,
)
from tests.model.staged_world import (
    CONFIG,
    EXERCISED,
    FAULTS,
    PUBLISH,
    RUN_CHECKERS,
    STEP_CHECKERS,
    TABLE,
    StagedHarness,
    settled_clean,
)
from tests.model.trace import load_spec

SPEC = load_spec("staged")

pytestmark = pytest.mark.model

FOREIGN = ("foreign_commit", "foreign_staged", "foreign_overwrite", "expire", "drop_recreate")
# Mostly clean answers, so that recoveries finish; every fault often enough to matter.
FAULT = st.sampled_from(("ok",) * 5 + FAULTS[1:])


class StagedMachine(ModelMachine):
    model = None  # set below, once MODEL is registered

    @rule()
    def begin(self) -> None:
        self.harness.apply({"op": "begin"})

    @rule()
    def announce(self) -> None:
        self.harness.apply({"op": "announce"})

    @rule()
    def create(self) -> None:
        self.harness.apply({"op": "create"})

    @rule()
    def rewrite(self) -> None:
        self.harness.apply({"op": "rewrite"})

    @rule(outcome=st.sampled_from(PUBLISH))
    def publish(self, outcome: str) -> None:
        self.harness.apply({"op": "publish", "outcome": outcome})

    @rule()
    def fail(self) -> None:
        self.harness.apply({"op": "fail"})

    @rule(fault=FAULT)
    def perform(self, fault: str) -> None:
        self.harness.apply({"op": "perform", "fault": fault})

    @rule()
    def crash(self) -> None:
        self.harness.apply({"op": "crash"})

    @rule()
    def restart(self) -> None:
        self.harness.apply({"op": "restart"})

    @rule()
    def torn(self) -> None:
        self.harness.apply({"op": "torn"})

    @rule()
    def peek(self) -> None:
        self.harness.apply({"op": "peek"})

    @rule(op=st.sampled_from(FOREIGN))
    def foreign(self, op: str) -> None:
        self.harness.apply({"op": op})


def drive(rng: random.Random, harness: StagedHarness, steps: int) -> None:
    """A seed's swarm: how often faults, crashes and the other server come."""
    fault_rate = rng.choice((0.0, 0.15, 0.4))
    crash_rate = rng.choice((0.0, 0.03, 0.1))
    foreign_rate = rng.choice((0.0, 0.05, 0.15))
    for _ in range(steps):
        roll = rng.random()
        inp: dict[str, Any]
        if roll < crash_rate:
            inp = {"op": rng.choice(("crash", "crash", "torn"))}
        elif roll < crash_rate + foreign_rate:
            inp = {"op": rng.choice(FOREIGN)}
        elif harness.running is None:
            inp = {"op": "restart"}
        elif harness.cleanup is not None:
            fault = rng.choice(FAULTS[1:]) if rng.random() < fault_rate else "ok"
            inp = {"op": "perform", "fault": fault}
        elif harness.attempt is None:
            inp = {"op": rng.choice(("begin",) * 6 + ("peek",))}
        else:
            inp = {"op": rng.choice(("announce", "create", "create", "rewrite", "fail", "publish", "publish"))}
            if inp["op"] == "publish":
                inp["outcome"] = rng.choice(PUBLISH)
        harness.apply(inp)


def settle(harness: StagedHarness) -> None:
    """Liveness: the attempt in flight ends, then a crash and a clean restart recover every
    record: nothing staged and unreferenced is left in the table, and no record."""
    for _ in range(50):
        harness.apply({"op": "perform", "fault": "ok"})
    harness.apply({"op": "create"})
    harness.apply({"op": "fail"})
    for _ in range(50):
        harness.apply({"op": "perform", "fault": "ok"})
    harness.apply({"op": "crash"})
    harness.apply({"op": "restart"})
    for _ in range(200):
        if harness.cleanup is None:
            break
        harness.apply({"op": "perform", "fault": "ok"})
    settled_clean(harness)


def recovered_something(harness: StagedHarness) -> bool:
    return harness.deleted_by_recovery > 0


MODEL = register(
    MachineModel(
        name="staged",
        spec=SPEC,
        harness=lambda: StagedHarness(SPEC),
        step_checkers=STEP_CHECKERS,
        run_checkers=RUN_CHECKERS,
        levels={"top": SPEC},
        exercised=EXERCISED,
        bindings=(
            Binding(
                SPEC,
                staged.Phase,
                initial=staged.initial_state().phase,
                terminal=True,
                module=staged,
                events=type_names(staged.Event),
                effects=type_names(staged.Effect),
                handlers=staged._HANDLERS,
            ),
        ),
        drive=drive,
        settle=settle,
        progress=recovered_something,
        walk_steps=120,
        walks_ci=200,
        examples_ci=200,
        example_steps=50,
        required_traces=frozenset({"killed-mid-write-recovered", "lost-reply-landed-keeps-files"}),
    )
)
walk = MODEL.walk
StagedMachine.model = MODEL
TestStagedMachine = StagedMachine.TestCase
TestStagedMachine.settings = MODEL.hypothesis_settings()


# --- hand-written scenarios ----------------------------------------------------------------------


def _h() -> StagedHarness:
    return StagedHarness(SPEC)


def test_a_crash_mid_write_is_recovered_at_the_next_start() -> None:
    h = _h()
    for op in ("begin", "announce", "create", "announce", "create", "announce", "crash", "restart"):
        h.apply({"op": op})
    assert len(h.storage) == 2 and len(h.records) == 1
    for _ in range(3):
        h.apply({"op": "perform", "fault": "ok"})
    assert not h.storage and not h.records and h.deleted_by_recovery == 3  # (the third never existed)


def test_a_landed_commit_whose_reply_was_lost_keeps_its_files_and_its_orphans_go() -> None:
    h = _h()
    for op in ("begin", "announce", "create", "rewrite"):
        h.apply({"op": op})
    h.apply({"op": "publish", "outcome": "lost_applied"})
    assert h.verdicts == ["ReportKept"] and h.records  # the owner deletes nothing
    h.apply({"op": "crash"})
    h.apply({"op": "restart"})
    for _ in range(3):
        h.apply({"op": "perform", "fault": "ok"})
    assert h.storage == h.referenced() and len(h.storage) == 1 and not h.records


def test_expiry_takes_the_token_but_the_files_still_live_are_kept() -> None:
    h = _h()
    for op in ("begin", "announce", "create"):
        h.apply({"op": op})
    h.apply({"op": "publish", "outcome": "lost_applied"})
    h.apply({"op": "foreign_commit"})
    h.apply({"op": "expire"})  # our snapshot (and its token) is gone; its file is live in the head
    h.apply({"op": "crash"})
    h.apply({"op": "restart"})
    for _ in range(3):
        h.apply({"op": "perform", "fault": "ok"})
    assert h.storage == h.referenced() and len(h.storage) == 2


def test_a_second_process_on_the_same_data_directory_leaves_a_running_write_alone() -> None:
    h = _h()
    for op in ("begin", "announce", "create", "peek"):
        h.apply({"op": op})
    assert h.verdicts == ["ReportKept"] and len(h.storage) == 1 and h.records


def test_a_recovery_that_crashes_between_delete_and_forget_runs_again() -> None:
    h = _h()
    for op in ("begin", "announce", "create", "crash", "restart"):
        h.apply({"op": op})
    h.apply({"op": "perform", "fault": "ok"})  # inspected
    h.apply({"op": "perform", "fault": "ok"})  # deleted
    h.apply({"op": "crash"})  # before the record is forgotten
    h.apply({"op": "restart"})
    for _ in range(3):
        h.apply({"op": "perform", "fault": "ok"})  # inspected, deleted again (gone: idempotent), forgotten
    assert not h.storage and not h.records and h.verdicts[-1] == "ReportCleaned"


def test_the_checker_catches_a_file_created_before_its_record() -> None:
    h = _h()
    h.record_first = False
    h.apply({"op": "begin"})
    with pytest.raises(AssertionError, match="recorded_before_written"):
        from tests.model.staged_world import check_recorded_before_written

        h.storage.add("ours-early")
        h.file_uuid["ours-early"] = h.uuid
        check_recorded_before_written(h)


def test_the_checker_catches_a_recovery_that_deletes_a_referenced_file() -> None:
    h = _h()
    for op in ("begin", "announce", "create"):
        h.apply({"op": op})
    h.apply({"op": "publish", "outcome": "lost_applied"})
    h.apply({"op": "crash"})
    h.apply({"op": "restart"})
    real = staged.deletable
    try:
        staged.deletable = lambda record, seen: (record.paths, frozenset())  # ignores references
        h.apply({"op": "perform", "fault": "ok"})  # inspected: the broken rule deletes everything
        with pytest.raises(AssertionError, match="referenced_never_deleted"):
            h.apply({"op": "perform", "fault": "ok"})
    finally:
        staged.deletable = real


# --- the trio driver -----------------------------------------------------------------------------


class _World:
    def __init__(self, referenced: frozenset[str], fail_inspects: int = 0) -> None:
        self.referenced = referenced
        self.fail_inspects = fail_inspects
        self.deleted: set[str] = set()
        self.forgotten: list[str] = []

    def inspect(self, record: staged.StagingRecord, tables: tuple[str, ...]) -> tuple[staged.TableSeen, ...]:
        if self.fail_inspects:
            self.fail_inspects -= 1
            raise OSError("manifest unreadable")
        return tuple(staged.TableSeen(t, True, "u0", False, record.paths & self.referenced) for t in tables)

    def delete_files(self, files: frozenset[str]) -> frozenset[str]:
        self.deleted |= files
        return frozenset()

    def forget(self, token: str) -> None:
        self.forgotten.append(token)


RECORD = staged.StagingRecord("t1", (staged.StagedFile("a", TABLE, "u0"), staged.StagedFile("b", TABLE, "u0")))


def test_the_driver_recovers_through_failed_inspections_on_virtual_time() -> None:
    world = _World(frozenset({"b"}), fail_inspects=1)

    async def main() -> staged.State:
        return await run_recovery(RECORD, False, world, CONFIG)

    state = trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    assert state.phase is staged.Phase.CLEANED and world.deleted == {"a"} and world.forgotten == ["t1"]


def test_the_driver_keeps_an_unreadable_lake_s_record() -> None:
    world = _World(frozenset(), fail_inspects=CONFIG.max_inspect_attempts)

    async def main() -> staged.State:
        return await run_recovery(RECORD, False, world, CONFIG)

    state = trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    assert state.phase is staged.Phase.KEPT and not world.deleted and not world.forgotten


def test_the_driver_ends_a_committed_statement_deleting_only_what_it_did_not_publish() -> None:
    world = _World(frozenset())

    async def main() -> staged.State:
        return await run_statement_end(RECORD, staged.Verdict.COMMITTED, frozenset({"a"}), world, CONFIG)

    state = trio.run(main)
    assert state.phase is staged.Phase.CLEANED and world.deleted == {"b"} and world.forgotten == ["t1"]


class TestStagedModel(ModelTests):
    model = MODEL
