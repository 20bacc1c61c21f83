"""Model tests of the transaction block machine: random sessions against a reference, traces, walks."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest
from hypothesis import strategies as st
from hypothesis.stateful import rule

from icegres.machines import txblock
from icegres.machines.txblock import transaction_status
from tests.model.scaffold import (
    Binding,
    MachineModel,
    ModelMachine,
    ModelTests,
    register,
    type_names,
)
from tests.model.trace import load_spec, read_trace, trace_header, write_trace
from tests.model.txblock_world import (
    EXERCISED,
    GATE_OPTIONAL,
    PORTAL_NAMES,
    RUN_CHECKERS,
    SAVEPOINT_NAMES,
    SETTINGS,
    STEP_CHECKERS,
    TxBlockHarness,
    check_step_invariants,
)

SPEC = load_spec("txblock")

pytestmark = pytest.mark.model

ROWS = st.integers(1, 9)
SETTING = st.sampled_from(sorted(SETTINGS)).flatmap(
    lambda name: st.tuples(st.just(name), st.sampled_from(SETTINGS[name]))
)
STATEMENT = st.one_of(
    ROWS.map(lambda row: ["write", row]),
    st.just(["read"]),
    st.just(["fail"]),
)


def _gated(op: str, gated: bool) -> dict[str, Any]:
    return {} if gated or op not in GATE_OPTIONAL else {"gated": False}


class TxBlockMachine(ModelMachine):
    """One session: blocks, savepoints, SETs, writes, failures, cursors, portals and Syncs."""

    model = None  # set below, once MODEL is registered

    def _apply(self, inp: dict[str, Any]) -> None:
        self.harness.apply(inp)

    @rule(read_only=st.sampled_from((None, None, True, False)), gated=st.booleans())
    def begin(self, read_only: bool | None, gated: bool) -> None:
        self._apply({"op": "begin", "read_only": read_only, **_gated("begin", gated)})

    @rule()
    def commit(self) -> None:
        self._apply({"op": "commit"})

    @rule()
    def rollback(self) -> None:
        self._apply({"op": "rollback"})

    @rule(name=st.sampled_from(SAVEPOINT_NAMES), gated=st.booleans())
    def savepoint(self, name: str, gated: bool) -> None:
        self._apply({"op": "savepoint", "name": name, **_gated("savepoint", gated)})

    @rule(which=st.integers(0, 7), gated=st.booleans())
    def release(self, which: int, gated: bool) -> None:
        name = self.harness.savepoint_name(which)
        self._apply({"op": "release", "name": name, **_gated("release", gated)})

    @rule(which=st.integers(0, 7))
    def rollback_to(self, which: int) -> None:
        self._apply({"op": "rollback_to", "name": self.harness.savepoint_name(which)})

    @rule(setting=SETTING, local=st.booleans())
    def set(self, setting: tuple[str, str], local: bool) -> None:
        self._apply({"op": "set", "name": setting[0], "value": setting[1], "local": local})

    @rule(read_only=st.booleans(), gated=st.booleans())
    def set_transaction(self, read_only: bool, gated: bool) -> None:
        self._apply(
            {"op": "set_transaction", "read_only": read_only, **_gated("set_transaction", gated)}
        )

    @rule(row=ROWS, gated=st.booleans())
    def write(self, row: int, gated: bool) -> None:
        self._apply({"op": "write", "row": row, **_gated("write", gated)})

    @rule()
    def read(self) -> None:
        self._apply({"op": "read"})

    @rule()
    def fail(self) -> None:
        self._apply({"op": "fail"})

    @rule(statements=st.lists(STATEMENT, min_size=1, max_size=4))
    def script(self, statements: list[list[Any]]) -> None:
        self._apply({"op": "script", "statements": statements})

    @rule(which=st.integers(0, 3), hold=st.booleans(), gated=st.booleans())
    def declare(self, which: int, hold: bool, gated: bool) -> None:
        name = self.harness.cursor_name(which)
        self._apply({"op": "declare", "name": name, "hold": hold, **_gated("declare", gated)})

    @rule(gated=st.booleans())
    def discard_all(self, gated: bool) -> None:
        self._apply({"op": "discard_all", **_gated("discard_all", gated)})

    @rule(name=st.sampled_from(PORTAL_NAMES))
    def bind(self, name: str) -> None:
        self._apply({"op": "bind", "name": name})

    @rule()
    def sync(self) -> None:
        self._apply({"op": "sync"})

    @rule()
    def reconnect(self) -> None:
        self._apply({"op": "reconnect"})

    @rule(pick=st.integers(0, 15))
    def raw(self, pick: int) -> None:
        rejected = self.harness.rejected_events()
        if rejected:
            self._apply({"op": "raw", "event": rejected[pick % len(rejected)]})


# --- seeded walks: deep, reproducible sessions beside Hypothesis's ----------------------------------


def drive(rng: random.Random, harness: TxBlockHarness, steps: int) -> None:
    """A seeded session: the seed draws how often statements fail and whether the front end may
    skip the block's gate (Flight SQL's actions), then every input."""
    failures = rng.choice((0.02, 0.08, 0.2))  # swarm: some sessions fail often, some hardly ever
    ungated = rng.random() < 0.5
    for _ in range(steps):
        harness.apply(_walk_input(rng, harness, failures, ungated))


def settle(harness: TxBlockHarness) -> None:
    """A session has no liveness phase: nothing is outstanding once an input has returned (every
    effect is performed within its step)."""


def opened_blocks(harness: TxBlockHarness) -> bool:
    return harness.started >= 3


# Most statements of a session are writes, reads and SETs; a failed block mostly ends soon.
_OPS = (
    ("begin",) * 3
    + ("commit",) * 2
    + ("rollback", "savepoint", "savepoint", "release", "rollback_to")
    + ("set",) * 3
    + ("set_transaction",)
    + ("write",) * 4
    + ("read", "script", "script", "declare")
    + ("discard_all", "bind", "sync", "raw", "reconnect")
)
_ENDS = ("commit", "rollback", "rollback_to", "rollback_to")


def _walk_input(
    rng: random.Random, harness: TxBlockHarness, failures: float, ungated: bool
) -> dict[str, Any]:
    if rng.random() < failures:
        return {"op": "fail"}
    failed = transaction_status(harness.state) == "E"
    op = rng.choice(_ENDS) if failed and rng.random() < 0.5 else rng.choice(_OPS)
    inp: dict[str, Any] = {"op": op}
    if op == "begin":
        inp["read_only"] = rng.choice((None, None, None, True, False))
    elif op == "savepoint":
        inp["name"] = rng.choice(SAVEPOINT_NAMES)
    elif op in ("release", "rollback_to"):
        inp["name"] = harness.savepoint_name(rng.randrange(8))
    elif op == "set":
        name = rng.choice(sorted(SETTINGS))
        inp.update(name=name, value=rng.choice(SETTINGS[name]), local=rng.random() < 0.5)
    elif op == "set_transaction":
        inp["read_only"] = rng.random() < 0.5
    elif op == "write":
        inp["row"] = rng.randint(1, 9)
    elif op == "script":
        kinds = [rng.choice(("write", "write", "read", "fail")) for _ in range(rng.randint(1, 4))]
        inp["statements"] = [[k, rng.randint(1, 9)] if k == "write" else [k] for k in kinds]
    elif op == "declare":
        inp.update(name=harness.cursor_name(rng.randrange(4)), hold=rng.random() < 0.5)
    elif op == "bind":
        inp["name"] = rng.choice(PORTAL_NAMES)
    elif op == "raw":
        rejected = harness.rejected_events()
        return {"op": "raw", "event": rng.choice(rejected)} if rejected else {"op": "sync"}
    if ungated and op in GATE_OPTIONAL and rng.random() < 0.3:
        inp["gated"] = False
    return inp


# --- traces --------------------------------------------------------------------------------------


def test_a_hand_made_session_roundtrips(tmp_path: Path) -> None:
    harness = TxBlockHarness(SPEC)
    for inp in (
        {"op": "begin"},
        {"op": "write", "row": 1},
        {"op": "savepoint", "name": "a"},
        {"op": "fail"},
        {"op": "rollback_to", "name": "a"},
        {"op": "commit"},
    ):
        harness.apply(inp)
    path = write_trace(tmp_path / "t.ndjson", trace_header(SPEC), harness.inputs)
    header, inputs = read_trace(path)
    assert header["spec_sha256"] == SPEC.sha256 and inputs == harness.inputs
    again = MODEL.replay(path)
    assert again.steps == harness.steps and again.lake == [1]


def test_the_reference_catches_a_block_that_commits_after_failing() -> None:
    """The checkers are live: a world that publishes a failed block's rows is caught."""
    harness = TxBlockHarness(SPEC)
    for inp in ({"op": "begin"}, {"op": "write", "row": 7}, {"op": "fail"}):
        harness.apply(inp)
    assert harness.txn is not None
    harness.lake += harness.txn.staged  # as if the COMMIT had published
    with pytest.raises(AssertionError):
        check_step_invariants(harness)


MODEL = register(
    MachineModel(
        name="txblock",
        spec=SPEC,
        harness=lambda: TxBlockHarness(SPEC),
        step_checkers=STEP_CHECKERS,
        run_checkers=RUN_CHECKERS,
        levels={"top": SPEC},
        exercised=EXERCISED,
        bindings=(
            Binding(
                SPEC,
                txblock.Phase,
                initial=txblock.recover().phase,
                module=txblock,
                events=type_names(txblock.Event),
                effects=type_names(txblock.Effect),
                handlers=txblock._HANDLERS,
            ),
        ),
        drive=drive,
        settle=settle,
        progress=opened_blocks,
        walk_steps=120,
        walks_ci=300,
        examples_ci=300,
        example_steps=40,
        required_traces=frozenset({"set-local-then-set-survives-commit", "failed-block-rollback-to-savepoint"}),
    )
)
walk = MODEL.walk
TxBlockMachine.model = MODEL
TestTxBlockMachine = TxBlockMachine.TestCase
TestTxBlockMachine.settings = MODEL.hypothesis_settings()


def test_a_block_is_never_durable() -> None:
    """`recover` (after a crash) is where every session starts: idle, no block."""
    assert SPEC.terminal == set()
    assert txblock.recover() == txblock.initial_state()


# --- the shared model tests; the run-scope coverage test comes last -------------------------------


class TestTxBlockModel(ModelTests):
    model = MODEL
