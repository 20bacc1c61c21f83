"""Model tests of the quorum tail: competing writers and keepers over a faulty network, traces."""

from __future__ import annotations

import random

import pytest
from hypothesis import strategies as st
from hypothesis.stateful import initialize, precondition, rule

from icegres.machines import quorum, quorum_rejoin
from tests.model.quorum_world import (
    EXERCISED,
    REJOIN_SPEC,
    RUN_CHECKERS,
    STEP_CHECKERS,
    QuorumHarness,
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

SPEC, ACCEPTOR_SPEC = load_specs()

pytestmark = pytest.mark.model

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


def drive(rng: random.Random, harness: QuorumHarness, steps: int) -> None:
    """A seeded walk: 2-3 writers and 3 keepers over a network that drops, duplicates, delays and
    reorders; the seed draws which faults are on (swarm testing) and every input."""
    net_faults, crashes, writers_max = rng.random() < 0.6, rng.random() < 0.6, rng.choice((2, 3))
    kinds = fault_kinds if rng.random() < 0.3 else tuple(k for k in fault_kinds if "disk" not in k)
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


def settle(harness: QuorumHarness) -> None:
    harness.apply({"op": "settle"})


def acknowledged(harness: QuorumHarness) -> bool:
    return bool(harness.acked)


MODEL = register(
    MachineModel(
        name="quorum",
        spec=SPEC,
        harness=lambda: QuorumHarness(SPEC, ACCEPTOR_SPEC),
        step_checkers=STEP_CHECKERS,
        run_checkers=RUN_CHECKERS,
        levels={"top": SPEC, "acceptor": ACCEPTOR_SPEC, "rejoin": REJOIN_SPEC},
        exercised=EXERCISED,
        bindings=(
            Binding(
                SPEC,
                quorum.Phase,
                initial=quorum.Phase.STARTING,
                # The acceptors' answers arrive wrapped in FromAcceptor; the spec names each.
                events=type_names(quorum.AcceptorMessage)
                | (type_names(quorum.Event) - {"FromAcceptor"}),
                effects=type_names(quorum.Effect),
                handlers=quorum._HANDLERS,
            ),
            Binding(
                ACCEPTOR_SPEC,
                quorum.AcceptorPhase,
                events=type_names(quorum.AcceptorEvent),
                effects=type_names(quorum.AcceptorEffect),
                handlers=quorum._ACCEPTOR_HANDLERS,
            ),
            Binding(
                REJOIN_SPEC,
                quorum_rejoin.RejoinPhase,
                initial=quorum_rejoin.RejoinPhase.ASKING,
                events=type_names(quorum_rejoin.RejoinEvent),
                effects=type_names(quorum_rejoin.RejoinEffect),
                handlers=quorum_rejoin._HANDLERS,
            ),
        ),
        drive=drive,
        settle=settle,
        progress=acknowledged,
        walk_steps=150,
        walks_ci=200,
        examples_ci=600,
        example_steps=60,
        required_traces=frozenset(
            {
                "second-writer-fences-first",
                "keeper-disk-loss-acked-survives",
                "rejoined-keeper-stale-promise-not-counted",
                "two-keepers-replaced-in-turn-acked-survives",
            }
        ),
    )
)
walk = MODEL.walk

# "ok" first and most often: faults are the exception, and shrinking moves towards "ok".
delivery_fault = st.sampled_from(("ok",) * 4 + ("drop", "duplicate"))


class QuorumMachine(ModelMachine):
    """2-3 competing writers, 3 keepers, a network that drops, duplicates, delays and reorders."""

    model = MODEL

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


TestQuorumMachine = QuorumMachine.TestCase
TestQuorumMachine.settings = MODEL.hypothesis_settings()


# --- the checkers are live -----------------------------------------------------------------------


def test_a_clean_run_acks_and_flushes_every_record() -> None:
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


# --- the shared tests (tests/model/scaffold.py): last, so that coverage counts every run above ---


class TestQuorumModel(ModelTests):
    model = MODEL
