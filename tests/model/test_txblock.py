"""Model tests of the transaction block machine: random sessions against a reference, traces, walks."""

from __future__ import annotations

import hashlib
import json
import os
import random
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.control import current_build_context
from hypothesis.stateful import RuleBasedStateMachine, rule

from icegres.machines.txblock import transaction_status
from tests.model import txblock_world
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

# CI size (see tests/model/README.md); the environment raises it for a deep run.
EXAMPLES = int(os.environ.get("ICEGRES_TXBLOCK_EXAMPLES", "300"))
STEPS = int(os.environ.get("ICEGRES_TXBLOCK_STEPS", "40"))
SEEDS = int(os.environ.get("ICEGRES_TXBLOCK_SEEDS", "300"))
WALK_STEPS = 120

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


class TxBlockMachine(RuleBasedStateMachine):
    """One session: blocks, savepoints, SETs, writes, failures, cursors, portals and Syncs."""

    def __init__(self) -> None:
        super().__init__()
        self.harness = TxBlockHarness(SPEC)

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

    def teardown(self) -> None:
        # Only Hypothesis's final (shrunk, failing) run is marked final: keep it as a trace.
        if current_build_context().is_final:
            _save_new_trace(self.harness.inputs)


def _save_new_trace(inputs: list[dict[str, Any]]) -> Path:
    digest = hashlib.sha256(json.dumps(inputs, sort_keys=True).encode()).hexdigest()[:12]
    header = trace_header(SPEC, config=repr(txblock_world.MODEL_CONFIG))
    path = write_trace(NEW_TRACES_DIR / f"txblock-{digest}.ndjson", header, inputs)
    print(
        f"txblock model trace written to {path}; move it to tests/model/traces/txblock/ with the fix"
    )
    return path


TestTxBlockMachine = TxBlockMachine.TestCase
TestTxBlockMachine.settings = settings(
    max_examples=EXAMPLES,
    stateful_step_count=STEPS,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)


# --- seeded walks: deep, reproducible sessions beside Hypothesis's ----------------------------------


def walk(seed: int, steps: int = WALK_STEPS) -> TxBlockHarness:
    """One random session; the seed draws how often blocks fail and every input.

    Each input goes through the harness, so a failing walk is saved as a trace like any other.
    """
    rng = random.Random(seed)
    failures = rng.choice((0.02, 0.08, 0.2))  # swarm: some sessions fail often, some hardly ever
    ungated = rng.random() < 0.5
    harness = TxBlockHarness(SPEC)
    try:
        for _ in range(steps):
            harness.apply(_walk_input(rng, harness, failures, ungated))
    except Exception:
        _save_new_trace(harness.inputs)
        raise
    return harness


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


def test_seeded_walks() -> None:
    blocks = 0
    for seed in range(SEEDS):
        try:
            harness = walk(seed)
        except Exception as exc:
            raise AssertionError(f"reproduce with walk(seed={seed}): {exc!r}") from exc
        blocks += harness.started
    # Not vacuous: the walks open blocks, and plenty of them.
    assert blocks > SEEDS * 5, blocks


# --- traces --------------------------------------------------------------------------------------


def replay(path: Path) -> TxBlockHarness:
    header, inputs = read_trace(path)
    assert header["machine"] == "txblock", header
    harness = TxBlockHarness(SPEC)
    for inp in inputs:
        harness.apply(inp)
    return harness


@pytest.mark.parametrize("path", traces_for("txblock"), ids=lambda p: p.stem)
def test_replay_trace(path: Path) -> None:
    replay(path)


def test_there_are_traces_to_replay() -> None:
    names = {p.stem for p in traces_for("txblock")}
    assert {"set-local-then-set-survives-commit", "failed-block-rollback-to-savepoint"} <= names, (
        names
    )


def test_trace_roundtrip(tmp_path: Path) -> None:
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
    again = replay(path)
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


# --- spec bookkeeping ----------------------------------------------------------------------------


def test_every_invariant_in_the_spec_has_a_checker_and_vice_versa() -> None:
    assert_checkers_match(SPEC, STEP_CHECKERS, RUN_CHECKERS)


def test_spec_names_match_the_code() -> None:
    from icegres.machines import txblock

    assert SPEC.states == {p.value for p in txblock.Phase}
    assert SPEC.terminal == set()
    assert SPEC.initial == txblock.initial_state().phase.value == txblock.recover().phase.value
    for name in SPEC.events | SPEC.effects:
        assert hasattr(txblock, name), name
    assert SPEC.events == {t.__name__ for t in txblock.Event.__args__}
    assert SPEC.effects == {t.__name__ for t in txblock.Effect.__args__}
    assert_transitions_match(SPEC, txblock._HANDLERS)


# --- run-scope invariant: keep last in this module -----------------------------------------------


def test_every_spec_transition_exercised() -> None:
    """Across this module's runs (and the saved traces and a few walks, again, so `-k` works alone)."""
    for path in traces_for("txblock"):
        replay(path)
    for seed in range(20):
        walk(seed)
    RUN_CHECKERS["every_transition_exercised"](SPEC, EXERCISED)
