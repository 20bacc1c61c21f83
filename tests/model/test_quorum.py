"""Model tests of the quorum tail: competing writers and keepers over a faulty network, traces."""

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
from hypothesis.stateful import RuleBasedStateMachine, initialize, precondition, rule

from tests.model.quorum_world import (
    EXERCISED,
    REJOIN_SPEC,
    RUN_CHECKERS,
    STEP_CHECKERS,
    QuorumHarness,
    check_step_invariants,
    load_specs,
)
from tests.model.trace import (
    NEW_TRACES_DIR,
    assert_checkers_match,
    assert_transitions_match,
    read_trace,
    trace_header,
    traces_for,
    write_trace,
)

SPEC, ACCEPTOR_SPEC = load_specs()

pytestmark = pytest.mark.model

# CI size (see tests/model/README.md); `make model-deep` raises it through the environment.
EXAMPLES = int(os.environ.get("ICEGRES_QUORUM_EXAMPLES", "600"))
STEPS = int(os.environ.get("ICEGRES_QUORUM_STEPS", "60"))

# "ok" first and most often: faults are the exception, and shrinking moves towards "ok".
delivery_fault = st.sampled_from(("ok",) * 4 + ("drop", "duplicate"))


# A keeper crashing while it handles a request: before its Persist is durable, or after it but
# before its reply leaves. "rejoin_keeper": the keeper that lost its disk starts its catch-up
# (`icegres keeper --rejoin`); a no-op while no keeper is lost.
fault_kinds = ("restart_keeper",) * 6 + (
    "crash_writer",
    "crash_keeper",
    "lose_keeper_disk",
    "rejoin_keeper",
    "crash_before_persist",
    "crash_after_persist",
)


def _fault(harness: QuorumHarness, kind: str, which: int) -> None:
    if kind == "crash_writer":
        harness.apply({"op": "crash_proposer", "p": which})
    elif kind == "restart_keeper":
        harness.apply({"op": "restart_acceptor", "a": which})
    elif kind == "rejoin_keeper":
        lost = [i for i, a in enumerate(harness.acceptors) if a.lost and a.state is None]
        if lost:
            harness.apply({"op": "rejoin_acceptor", "a": lost[which % len(lost)]})
    elif kind in ("crash_before_persist", "crash_after_persist"):
        if harness.net:
            harness.apply({"op": "deliver", "i": which, "fault": kind})
    else:
        disk = kind == "lose_keeper_disk"
        harness.apply({"op": "crash_acceptor", "a": which, "disk": disk})


class QuorumMachine(RuleBasedStateMachine):
    """2-3 competing writers, 3 keepers, a network that drops, duplicates, delays and reorders."""

    def __init__(self) -> None:
        super().__init__()
        self.harness = QuorumHarness(SPEC, ACCEPTOR_SPEC)

    # Swarm testing: each run enables a subset of the faults, so that some runs go deep without
    # them and others concentrate them.
    @initialize(round_=st.integers(1, 3), net_faults=st.booleans(), crashes=st.booleans())
    def first_writer(self, round_: int, net_faults: bool, crashes: bool) -> None:
        self.net_faults = net_faults
        self.crashes = crashes
        self.harness.apply({"op": "start", "round": round_})

    # Progress rules first: Hypothesis leans towards earlier rules when it simplifies.
    @precondition(lambda self: self.harness.net)
    @rule(n=st.integers(1, 20), i=st.integers(0, 40))
    def pump(self, n: int, i: int) -> None:
        """n messages arrive, from any point of the queue (delay and reordering)."""
        for _ in range(min(n, len(self.harness.net))):
            self.harness.apply({"op": "deliver", "i": i, "fault": "ok"})

    @precondition(lambda self: self.harness.leading())
    @rule(p=st.integers(0, 2), n=st.integers(1, 3), anyone=st.booleans())
    def append(self, p: int, n: int, anyone: bool) -> None:
        # `anyone`: a writer that is not leading any more is asked too (a fenced one refuses).
        for _ in range(n):
            self.harness.apply({"op": "append", "p": p, "leading": not anyone})

    @precondition(lambda self: self.harness.proposers)
    @rule(p=st.integers(0, 2))
    def tick(self, p: int) -> None:
        self.harness.apply({"op": "tick", "p": p})

    @precondition(lambda self: self.harness.proposers)
    @rule(p=st.integers(0, 2), deliver=st.booleans())
    def flush(self, p: int, deliver: bool) -> None:
        self.harness.apply({"op": "flush", "p": p, "deliver": deliver})

    @precondition(lambda self: len(self.harness.proposers) < 3)
    @rule(round_=st.integers(1, 6))
    def start(self, round_: int) -> None:
        self.harness.apply({"op": "start", "round": round_})

    @precondition(lambda self: self.harness.net and self.net_faults)
    @rule(i=st.integers(0, 40), fault=delivery_fault)
    def deliver(self, i: int, fault: str) -> None:
        self.harness.apply({"op": "deliver", "i": i, "fault": fault})

    # One rule for crashes and restarts, so that they stay rarer than progress.
    @precondition(lambda self: self.crashes)
    @rule(kind=st.sampled_from(fault_kinds), which=st.integers(0, 5))
    def fault(self, kind: str, which: int) -> None:
        _fault(self.harness, kind, which)

    def teardown(self) -> None:
        try:
            self.harness.apply({"op": "settle"})
        finally:
            # Only Hypothesis's final (shrunk, failing) run is marked final: keep it as a trace.
            if current_build_context().is_final:
                _save_new_trace(self.harness.inputs)


def _save_new_trace(inputs: list[dict[str, Any]]) -> None:
    digest = hashlib.sha256(json.dumps(inputs, sort_keys=True).encode()).hexdigest()[:12]
    path = write_trace(NEW_TRACES_DIR / f"quorum-{digest}.ndjson", trace_header(SPEC), inputs)
    print(
        f"quorum model trace written to {path}; move it to tests/model/traces/quorum/ with the fix"
    )


TestQuorumMachine = QuorumMachine.TestCase
TestQuorumMachine.settings = settings(
    max_examples=EXAMPLES,
    stateful_step_count=STEPS,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)


# --- seeded swarm walks: deep, reproducible schedules beside Hypothesis's ------------------------

SEEDS = int(os.environ.get("ICEGRES_QUORUM_SEEDS", "200"))
WALK_STEPS = 150


def walk(seed: int, steps: int = WALK_STEPS) -> QuorumHarness:
    """One random schedule; the seed draws which faults are on (swarm testing) and every input.

    Each input goes through the harness, so a failing walk is saved as a trace like any other.
    """
    rng = random.Random(seed)
    net_faults, crashes, writers_max = rng.random() < 0.6, rng.random() < 0.6, rng.choice((2, 3))
    kinds = fault_kinds if rng.random() < 0.3 else tuple(k for k in fault_kinds if "disk" not in k)
    harness = QuorumHarness(SPEC, ACCEPTOR_SPEC)
    try:
        harness.apply({"op": "start", "round": rng.randint(1, 3)})
        for _ in range(steps):
            ops = ["pump", "tick", "flush"]
            ops += ["append"] * 2 if harness.leading() else []
            ops += ["start"] if len(harness.proposers) < writers_max else []
            ops += ["deliver"] * 2 if net_faults else []
            ops += ["fault"] if crashes else []
            op = rng.choice(ops)
            if op == "pump":
                for _ in range(min(len(harness.net), rng.randint(1, 12))):
                    harness.apply({"op": "deliver", "i": rng.randrange(64), "fault": "ok"})
            elif op == "append":
                leading = rng.random() < 0.8
                harness.apply({"op": "append", "p": rng.randrange(3), "leading": leading})
            elif op == "tick":
                harness.apply({"op": "tick", "p": rng.randrange(3)})
            elif op == "flush":
                harness.apply({"op": "flush", "p": rng.randrange(3), "deliver": rng.random() < 0.8})
            elif op == "start":
                harness.apply({"op": "start", "round": rng.randint(1, 6)})
            elif op == "deliver":
                fault = rng.choice(("drop", "duplicate"))
                harness.apply({"op": "deliver", "i": rng.randrange(64), "fault": fault})
            else:
                _fault(harness, rng.choice(kinds), rng.randrange(6))
        harness.apply({"op": "settle"})
    except Exception:
        _save_new_trace(harness.inputs)
        raise
    return harness


def test_seeded_swarm_walks() -> None:
    acked_runs = 0
    for seed in range(SEEDS):
        try:
            harness = walk(seed)
        except Exception as exc:
            raise AssertionError(f"reproduce with walk(seed={seed}): {exc!r}") from exc
        acked_runs += bool(harness.acked)
    # Not vacuous: most walks must get records acknowledged through the faults.
    assert acked_runs > SEEDS // 2, acked_runs


# --- traces --------------------------------------------------------------------------------------


def replay(path: Path) -> QuorumHarness:
    header, inputs = read_trace(path)
    assert header["machine"] == "quorum", header
    harness = QuorumHarness(SPEC, ACCEPTOR_SPEC)
    for inp in inputs:
        harness.apply(inp)
    return harness


@pytest.mark.parametrize("path", traces_for("quorum"), ids=lambda p: p.stem)
def test_replay_trace(path: Path) -> None:
    replay(path)


def test_there_are_traces_to_replay() -> None:
    names = {p.stem for p in traces_for("quorum")}
    assert {
        "second-writer-fences-first",
        "keeper-disk-loss-acked-survives",
        "rejoined-keeper-stale-promise-not-counted",
        "two-keepers-replaced-in-turn-acked-survives",
    } <= names, names


def test_trace_roundtrip(tmp_path: Path) -> None:
    harness = QuorumHarness(SPEC, ACCEPTOR_SPEC)
    harness.apply({"op": "start", "round": 1})
    while harness.net:
        harness.apply({"op": "deliver", "i": 0, "fault": "ok"})
    for _ in range(3):
        harness.apply({"op": "append", "p": 0})
    while harness.net:
        harness.apply({"op": "deliver", "i": 5, "fault": "ok"})
    harness.apply({"op": "settle"})
    assert sorted(harness.acked) == [1, 2, 3] and sorted(harness.lake.records) == [1, 2, 3]
    path = write_trace(tmp_path / "t.ndjson", trace_header(SPEC), harness.inputs)
    header, inputs = read_trace(path)
    assert header["spec_sha256"] == SPEC.sha256 and inputs == harness.inputs
    assert replay(path).steps == harness.steps


# --- the checkers are live -----------------------------------------------------------------------


def _leading_harness() -> QuorumHarness:
    harness = QuorumHarness(SPEC, ACCEPTOR_SPEC)
    harness.apply({"op": "start", "round": 1})
    while harness.net:
        harness.apply({"op": "deliver", "i": 0, "fault": "ok"})
    return harness


def test_harness_catches_an_ack_without_a_majority() -> None:
    harness = _leading_harness()
    harness.apply({"op": "append", "p": 0})
    (proposer,) = harness.live()
    harness._on_ack(proposer, 1, b"r1")  # nobody has accepted it yet
    with pytest.raises(AssertionError, match="without a majority"):
        check_step_invariants(harness)


def test_harness_catches_a_lost_chosen_record() -> None:
    harness = _leading_harness()
    harness.apply({"op": "append", "p": 0})
    while harness.net:
        harness.apply({"op": "deliver", "i": 0, "fault": "ok"})
    assert harness.acked == {1: b"r1"}
    for acceptor in harness.acceptors[:2]:
        acceptor.disk = []  # two disks forget an acked record behind the harness's back
    with pytest.raises(AssertionError, match="could miss it"):
        check_step_invariants(harness)


def test_harness_catches_two_values_chosen() -> None:
    harness = _leading_harness()
    from icegres.machines.quorum import Entry, Persist, Term

    t1, t2 = Term(1, "x"), Term(2, "y")
    for index in (0, 1):
        harness._persist(index, Persist(t1, 0, (Entry(9, t1, b"a"),)))
    for index in (1, 2):
        harness._persist(index, Persist(t2, 0, (Entry(9, t2, b"b"),)))
    with pytest.raises(AssertionError, match="one_value_per_slot"):
        check_step_invariants(harness)


# --- spec bookkeeping ----------------------------------------------------------------------------


def test_every_invariant_in_the_spec_has_a_checker_and_vice_versa() -> None:
    assert_checkers_match(SPEC, STEP_CHECKERS, RUN_CHECKERS)


def test_spec_names_match_the_code() -> None:
    from icegres.machines import quorum

    assert SPEC.states == {p.value for p in quorum.Phase}
    assert SPEC.initial == quorum.Phase.STARTING.value
    message_events = {t.__name__ for t in quorum.AcceptorMessage.__args__}
    direct = {t.__name__ for t in quorum.Event.__args__} - {"FromAcceptor"}
    assert SPEC.events == message_events | direct
    assert SPEC.effects == {t.__name__ for t in quorum.Effect.__args__}
    assert_transitions_match(SPEC, quorum._HANDLERS)
    assert ACCEPTOR_SPEC.states == {p.value for p in quorum.AcceptorPhase}
    assert ACCEPTOR_SPEC.events == {t.__name__ for t in quorum.AcceptorEvent.__args__}
    assert ACCEPTOR_SPEC.effects == {t.__name__ for t in quorum.AcceptorEffect.__args__}
    assert_transitions_match(ACCEPTOR_SPEC, quorum._ACCEPTOR_HANDLERS)
    from icegres.machines import quorum_rejoin

    assert REJOIN_SPEC.states == {p.value for p in quorum_rejoin.RejoinPhase}
    assert REJOIN_SPEC.initial == quorum_rejoin.RejoinPhase.ASKING.value
    assert REJOIN_SPEC.events == {t.__name__ for t in quorum_rejoin.RejoinEvent.__args__}
    assert REJOIN_SPEC.effects == {t.__name__ for t in quorum_rejoin.RejoinEffect.__args__}
    assert_transitions_match(REJOIN_SPEC, quorum_rejoin._HANDLERS)


# --- run-scope invariant: keep last in this module -----------------------------------------------


def test_every_spec_transition_exercised() -> None:
    """Across this module's runs (and the saved traces, replayed again so `-k` works alone)."""
    for path in traces_for("quorum"):
        replay(path)
    RUN_CHECKERS["every_transition_exercised"]((SPEC, ACCEPTOR_SPEC), EXERCISED)
