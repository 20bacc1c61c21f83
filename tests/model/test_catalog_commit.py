"""Model tests of the catalog commit machine: blocks with DDL against a simulated catalog, with
faults at every effect and crashes anywhere; traces, walks, spec bookkeeping."""

from __future__ import annotations

import random
from typing import Any

import pytest
from hypothesis import strategies as st
from hypothesis.stateful import rule

from icegres.machines import catalog_commit
from tests.model.catalog_commit_world import (
    EXERCISED,
    NAMES,
    OUTCOMES,
    RUN_CHECKERS,
    STEP_CHECKERS,
    CatalogCommitHarness,
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

SPEC = load_spec("catalog_commit")

pytestmark = pytest.mark.model

NAME = st.sampled_from(NAMES)
STATEMENT = st.one_of(
    st.tuples(st.just("create"), NAME).map(list),
    st.tuples(st.just("drop"), NAME).map(list),
    st.tuples(st.just("rename"), NAME, NAME).map(list),
)
# Mostly clean answers, so that blocks get through; every fault often enough to matter.
OUTCOME = st.sampled_from(("ok",) * 6 + OUTCOMES[1:])


class CatalogCommitMachine(ModelMachine):
    model = None  # set below, once MODEL is registered

    @rule(ddl=st.lists(STATEMENT, min_size=1, max_size=4), data=st.booleans())
    def block(self, ddl: list[list[str]], data: bool) -> None:
        self.harness.apply({"op": "block", "ddl": ddl, "data": data})

    @rule(src=NAME, dst=st.sampled_from(("",) + NAMES))
    def interfere(self, src: str, dst: str) -> None:
        self.harness.apply({"op": "interfere", "src": src, "dst": dst})

    @rule()
    def commit(self) -> None:
        self.harness.apply({"op": "commit"})

    @rule(outcome=OUTCOME)
    def answer(self, outcome: str) -> None:
        self.harness.apply({"op": "answer", "outcome": outcome})

    @rule()
    def crash(self) -> None:
        self.harness.apply({"op": "crash"})


def drive(rng: random.Random, harness: CatalogCommitHarness, steps: int) -> None:
    """A seed's swarm: how often faults, interference and crashes come."""
    fault_rate = rng.choice((0.0, 0.1, 0.3))
    crash_rate = rng.choice((0.0, 0.02, 0.08))
    interfere_rate = rng.choice((0.0, 0.05))
    for _ in range(steps):
        roll = rng.random()
        if roll < crash_rate:
            inp: dict[str, Any] = {"op": "crash"}
        elif roll < crash_rate + interfere_rate:
            inp = {"op": "interfere", "src": rng.choice(NAMES), "dst": rng.choice(("",) + NAMES)}
        elif harness.pending is not None:
            outcome = rng.choice(OUTCOMES[1:]) if rng.random() < fault_rate else "ok"
            inp = {"op": "answer", "outcome": outcome}
        elif harness.block is not None and harness.state is None:
            inp = {"op": "commit"}
        else:
            ddl = [[rng.choice(("create", "drop", "rename")), rng.choice(NAMES), rng.choice(NAMES)][:3]
                   for _ in range(rng.randint(1, 4))]
            ddl = [s[:2] if s[0] != "rename" else s for s in ddl]
            inp = {"op": "block", "ddl": ddl, "data": rng.random() < 0.5}
        harness.apply(inp)


def settle(harness: CatalogCommitHarness) -> None:
    """Liveness: with clean answers and, if need be, one restart, every block reaches a verdict
    and nothing is left behind (no hidden table, no intent record)."""
    for _ in range(100):
        if harness.pending is None:
            break
        harness.apply({"op": "answer", "outcome": "ok"})
    if harness.intents or harness.block is not None:
        harness.apply({"op": "crash"})
    assert harness.pending is None and not harness.intents, (harness.pending, harness.intents)
    assert not [n for n in harness.catalog if n.startswith("icegres__block_")], harness.catalog


def committed_blocks(harness: CatalogCommitHarness) -> bool:
    return "Acknowledge" in harness.verdicts


MODEL = register(
    MachineModel(
        name="catalog_commit",
        spec=SPEC,
        harness=lambda: CatalogCommitHarness(SPEC),
        step_checkers=STEP_CHECKERS,
        run_checkers=RUN_CHECKERS,
        levels={"top": SPEC},
        exercised=EXERCISED,
        bindings=(
            Binding(
                SPEC,
                catalog_commit.Phase,
                initial=catalog_commit.initial_state().phase,
                terminal=True,
                module=catalog_commit,
                events=type_names(catalog_commit.Event),
                effects=type_names(catalog_commit.Effect),
                handlers=catalog_commit._HANDLERS,
            ),
        ),
        drive=drive,
        settle=settle,
        progress=committed_blocks,
        walk_steps=150,
        walks_ci=300,
        examples_ci=200,
        example_steps=40,
        required_traces=frozenset({"dbt-rebuild-crash-after-first-move", "concurrent-rename-refused"}),
    )
)
walk = MODEL.walk
CatalogCommitMachine.model = MODEL
TestCatalogCommitMachine = CatalogCommitMachine.TestCase
TestCatalogCommitMachine.settings = MODEL.hypothesis_settings()


def test_a_crash_after_the_first_move_is_undone() -> None:
    """dbt's rebuild: `a` moved aside, the crash comes before the new table is placed — for that
    instant no `a` exists; recovery puts the old `a` back."""
    h = CatalogCommitHarness(SPEC)
    h.apply({"op": "block", "ddl": [["rename", "a", "c"], ["create", "a"]], "data": True})
    h.apply({"op": "commit"})
    h.apply({"op": "answer", "outcome": "ok"})  # plan checked
    h.apply({"op": "answer", "outcome": "ok"})  # intent recorded
    h.apply({"op": "answer", "outcome": "ok"})  # a -> c
    assert "a" not in h.catalog
    h.apply({"op": "crash"})
    assert h.catalog == {"a": "u-a", "b": "u-b"} and not h.intents


def test_the_checkers_catch_a_commit_that_undoes_nothing() -> None:
    """The checkers are live: a world that forgets to undo a move is caught."""
    h = CatalogCommitHarness(SPEC)
    h._undo = lambda move: None  # type: ignore[method-assign]
    h.apply({"op": "block", "ddl": [["rename", "a", "c"], ["rename", "b", "d"]], "data": False})
    h.apply({"op": "commit"})
    h.apply({"op": "answer", "outcome": "ok"})  # plan checked
    h.apply({"op": "answer", "outcome": "ok"})  # intent recorded
    h.apply({"op": "answer", "outcome": "ok"})  # a -> c
    with pytest.raises(AssertionError):
        h.apply({"op": "answer", "outcome": "failed"})  # b -> d fails: undo a -> c, which it doesn't
        for _ in range(5):
            h.apply({"op": "answer", "outcome": "ok"})
        check_step_invariants(h)


def test_a_block_refused_at_the_check_with_a_failed_purge_keeps_a_record_without_moves() -> None:
    h = CatalogCommitHarness(SPEC)
    h.apply({"op": "block", "ddl": [["rename", "a", "c"], ["create", "d"]], "data": False})
    h.apply({"op": "interfere", "src": "a", "dst": "c"})  # the very rename the block makes
    h.apply({"op": "commit"})
    h.apply({"op": "answer", "outcome": "ok"})  # plan checked: refused, nothing moved
    h.apply({"op": "answer", "outcome": "failed"})  # the hidden table stays
    assert h.verdicts[-1] == "Abort"
    [(plan, decided)] = h.intents.values()
    assert plan.moves == () and not decided
    h.apply({"op": "crash"})  # recovery purges, and leaves the other session's rename alone
    assert h.catalog == {"b": "u-b", "c": "u-a"} and not h.intents


def test_an_undone_block_that_cannot_rewrite_its_record_is_stranded() -> None:
    h = CatalogCommitHarness(SPEC)
    h.apply({"op": "block", "ddl": [["rename", "a", "c"], ["create", "d"]], "data": True})
    h.apply({"op": "commit"})
    for outcome in ("ok", "ok", "refused", "failed", "failed"):  # check, intent, move, purge, retire
        h.apply({"op": "answer", "outcome": outcome})
    assert h.verdicts[-1] == "ReportStranded"
    h.apply({"op": "crash"})
    assert h.catalog == {"a": "u-a", "b": "u-b"} and not h.intents


class TestCatalogCommitModel(ModelTests):
    model = MODEL
