"""Model tests of the sequence machine: three servers reserving blocks of one sequence against a
simulated catalog, with failed reads, swaps refused, lost, timed out or delivered late, crashes
and drops; traces, walks, spec bookkeeping."""

from __future__ import annotations

import random
from typing import Any

import pytest
from hypothesis import strategies as st
from hypothesis.stateful import rule

from icegres.machines import sequence
from icegres.machines.sequence import Definition, Head, next_block
from tests.model.scaffold import (
    Binding,
    MachineModel,
    ModelMachine,
    ModelTests,
    register,
    type_names,
)
from tests.model.sequence_world import (
    DEFINITIONS,
    EXERCISED,
    OUTCOMES,
    RUN_CHECKERS,
    SERVERS,
    STEP_CHECKERS,
    SequenceHarness,
    check_step_invariants,
)
from tests.model.trace import load_spec

SPEC = load_spec("sequence")

pytestmark = pytest.mark.model

SERVER = st.integers(0, SERVERS - 1)
# Mostly clean answers, so that blocks get reserved; every fault often enough to matter.
OUTCOME = st.sampled_from(("ok",) * 6 + OUTCOMES[1:])


class SequenceMachine(ModelMachine):
    model = None  # set below, once MODEL is registered

    @rule(server=SERVER, count=st.integers(1, 6))
    def request(self, server: int, count: int) -> None:
        self.harness.apply({"op": "request", "server": server, "count": count})

    @rule(server=SERVER, outcome=OUTCOME)
    def answer(self, server: int, outcome: str) -> None:
        self.harness.apply({"op": "answer", "server": server, "outcome": outcome})

    @rule(index=st.integers(0, 5))
    def deliver(self, index: int) -> None:
        self.harness.apply({"op": "deliver", "index": index})

    @rule(server=SERVER)
    def crash(self, server: int) -> None:
        self.harness.apply({"op": "crash", "server": server})

    @rule(kind=st.sampled_from(sorted(DEFINITIONS)))
    def create(self, kind: str) -> None:
        self.harness.apply({"op": "create", "kind": kind})

    @rule()
    def drop(self) -> None:
        self.harness.apply({"op": "drop"})


def drive(rng: random.Random, harness: SequenceHarness, steps: int) -> None:
    """A seed's swarm: which sequence, how often faults, late swaps, crashes and drops come."""
    harness.apply({"op": "create", "kind": rng.choice(sorted(DEFINITIONS))})
    fault_rate = rng.choice((0.0, 0.1, 0.3, 0.6))
    faults = rng.sample(OUTCOMES[1:], rng.randint(1, len(OUTCOMES) - 1))
    crash_rate = rng.choice((0.0, 0.02, 0.06))
    deliver_rate = rng.choice((0.05, 0.2))
    drop_rate = rng.choice((0.0, 0.0, 0.01))
    for _ in range(steps):
        roll = rng.random()
        server = rng.randrange(SERVERS)
        if roll < crash_rate:
            inp: dict[str, Any] = {"op": "crash", "server": server}
        elif roll < crash_rate + drop_rate:
            inp = {"op": "drop"}
        elif roll < crash_rate + drop_rate + deliver_rate and harness.in_flight:
            inp = {"op": "deliver", "index": rng.randrange(6)}
        elif server in harness.runs:
            outcome = rng.choice(faults) if rng.random() < fault_rate else "ok"
            inp = {"op": "answer", "server": server, "outcome": outcome}
        elif harness.dropped and not harness.runs and rng.random() < 0.5:
            inp = {"op": "create", "kind": rng.choice(sorted(DEFINITIONS))}
        else:
            inp = {"op": "request", "server": server, "count": rng.randint(1, 6)}
        harness.apply(inp)


def settle(harness: SequenceHarness) -> None:
    """Liveness: with clean answers every run ends (granted or failed), and late swaps land or
    are refused, leaving the invariants intact."""
    for _ in range(500):
        if not harness.runs and not harness.in_flight:
            break
        for server in sorted(harness.runs):
            harness.apply({"op": "answer", "server": server, "outcome": "ok"})
        if harness.in_flight:
            harness.apply({"op": "deliver", "index": 0})
    assert not harness.runs and not harness.in_flight, (harness.runs, harness.in_flight)


def granted_something(harness: SequenceHarness) -> bool:
    return harness.grants > 0


MODEL = register(
    MachineModel(
        name="sequence",
        spec=SPEC,
        harness=lambda: SequenceHarness(SPEC),
        step_checkers=STEP_CHECKERS,
        run_checkers=RUN_CHECKERS,
        levels={"top": SPEC},
        exercised=EXERCISED,
        bindings=(
            Binding(
                SPEC,
                sequence.Phase,
                initial=sequence.initial_state().phase,
                terminal=True,
                module=sequence,
                events=type_names(sequence.Event),
                effects=type_names(sequence.Effect),
                handlers=sequence._HANDLERS,
            ),
        ),
        drive=drive,
        settle=settle,
        progress=granted_something,
        walk_steps=150,
        walks_ci=200,
        examples_ci=200,
        example_steps=50,
        required_traces=frozenset({"lost-reply-then-overtaken", "late-swap-lands-after-retry", "conflicts-exhausted"}),
    )
)
walk = MODEL.walk
SequenceMachine.model = MODEL
TestSequenceMachine = SequenceMachine.TestCase
TestSequenceMachine.settings = MODEL.hypothesis_settings()


def test_two_servers_racing_for_one_head_get_disjoint_blocks() -> None:
    h = SequenceHarness(SPEC, kind="block")
    h.apply({"op": "request", "server": 0, "count": 1})
    h.apply({"op": "request", "server": 1, "count": 1})
    for server in (0, 1):
        h.apply({"op": "answer", "server": server, "outcome": "ok"})  # both read the same head
    h.apply({"op": "answer", "server": 0, "outcome": "ok"})  # 0's swap lands
    h.apply({"op": "answer", "server": 1, "outcome": "ok"})  # 1's is refused: it reads again
    for _ in range(2):
        h.apply({"op": "answer", "server": 1, "outcome": "ok"})
    assert h.granted == {0: [10, 13, 16, 19], 1: [22, 25, 28, 31]}


def test_a_lost_reply_whose_block_landed_is_used_and_one_overtaken_is_skipped() -> None:
    h = SequenceHarness(SPEC)
    h.apply({"op": "request", "server": 0, "count": 2})
    h.apply({"op": "answer", "server": 0, "outcome": "ok"})  # read
    h.apply({"op": "answer", "server": 0, "outcome": "lost"})  # landed, answer lost
    h.apply({"op": "answer", "server": 0, "outcome": "ok"})  # the head is its own: granted
    assert h.granted == {0: [1, 2]}
    h.apply({"op": "request", "server": 1, "count": 2})
    h.apply({"op": "answer", "server": 1, "outcome": "ok"})
    h.apply({"op": "answer", "server": 1, "outcome": "lost"})  # landed: [3, 4], answer lost
    h.apply({"op": "request", "server": 2, "count": 2})
    h.apply({"op": "answer", "server": 2, "outcome": "ok"})
    h.apply({"op": "answer", "server": 2, "outcome": "ok"})  # overtakes it: [5, 6]
    h.apply({"op": "answer", "server": 1, "outcome": "ok"})  # not its head: reserve anew
    h.apply({"op": "answer", "server": 1, "outcome": "ok"})
    assert h.granted == {0: [1, 2], 2: [5, 6], 1: [7, 8]}  # 3 and 4 are a gap


def test_the_checkers_catch_a_machine_that_trusts_an_unknown_outcome() -> None:
    """The checkers are live: granting the block of a swap that timed out without landing gives
    a value twice."""
    original = sequence._HANDLERS[(sequence.Phase.ADVANCING, sequence.AdvanceOutcomeUnknown)]
    sequence._HANDLERS[(sequence.Phase.ADVANCING, sequence.AdvanceOutcomeUnknown)] = \
        lambda state, event: sequence._granted(state, state.sent.first, state.sent.last_value)
    try:
        h = SequenceHarness(SPEC)
        h.apply({"op": "request", "server": 0, "count": 1})
        h.apply({"op": "answer", "server": 0, "outcome": "ok"})
        with pytest.raises(AssertionError):
            h.apply({"op": "answer", "server": 0, "outcome": "timeout"})  # trusted: 1, not reserved
            h.apply({"op": "request", "server": 1, "count": 1})
            h.apply({"op": "answer", "server": 1, "outcome": "ok"})
            h.apply({"op": "answer", "server": 1, "outcome": "ok"})  # 1 again
            check_step_invariants(h)
    finally:
        sequence._HANDLERS[(sequence.Phase.ADVANCING, sequence.AdvanceOutcomeUnknown)] = original


@pytest.mark.parametrize("head,definition,count,block", [
    (Head(1, 1, False), Definition("s"), 1, (1, 1)),
    (Head(1, 1, True), Definition("s", cache=20), 3, (2, 21)),
    (Head(1, 5, True), Definition("s", increment=-2, min_value=-10, max_value=10, start=10), 3, (3, -1)),
    (Head(1, 38, True), Definition("s", increment=1, max_value=40, cache=10), 1, (39, 40)),
    (Head(1, 40, True), Definition("s", increment=1, max_value=40), 1, None),
    (Head(1, 40, True), Definition("s", increment=1, max_value=40, cycle=True, cache=3), 1, (1, 3)),
    (Head(1, -10, True), Definition("s", increment=-1, min_value=-10, max_value=-1, cycle=True), 1, (-1, -1)),
    (Head(1, 2**63 - 2, True), Definition("s", cache=5), 1, (2**63 - 1, 2**63 - 1)),
])
def test_next_block(head: Head, definition: Definition, count: int, block: tuple[int, int] | None) -> None:
    assert next_block(head, definition, count) == block


class TestSequenceModel(ModelTests):
    model = MODEL
