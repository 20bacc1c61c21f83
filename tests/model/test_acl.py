"""Model tests of the shared-document machine (the store of roles, grants and policies): three
servers changing one record against a simulated catalog, with failed reads, swaps refused, lost,
timed out, duplicated or delivered late, refusals and crashes; traces, walks, spec bookkeeping;
and the trio driver (through AclStore) on an in-memory world."""

from __future__ import annotations

import json
import random
import threading
from typing import Any

import pytest
import trio
import trio.testing
from hypothesis import strategies as st
from hypothesis.stateful import rule

from icegres.engine.acl_store import AclStore
from icegres.machines import acl
from icegres.machines.acl import EMPTY, Config, Record
from icegres.machines.drivers.acl import SwapNotApplied, SwapRejectedError, SwapUnknownError
from icegres.pg.errors import PgError
from tests.model.acl_world import (
    EXERCISED,
    KINDS,
    OUTCOMES,
    RUN_CHECKERS,
    SERVERS,
    STEP_CHECKERS,
    AclHarness,
    Refusal,
    apply_of,
    check_step_invariants,
    ids_of,
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

SPEC = load_spec("acl")

pytestmark = pytest.mark.model

SERVER = st.integers(0, SERVERS - 1)
# Mostly clean answers, so that changes land; every fault often enough to matter.
OUTCOME = st.sampled_from(("ok",) * 6 + OUTCOMES[1:])
KIND = st.sampled_from(("append",) * 4 + KINDS[1:])


class AclMachine(ModelMachine):
    model = None  # set below, once MODEL is registered

    @rule(server=SERVER, kind=KIND)
    def request(self, server: int, kind: str) -> None:
        self.harness.apply({"op": "request", "server": server, "kind": kind})

    @rule(server=SERVER, outcome=OUTCOME)
    def answer(self, server: int, outcome: str) -> None:
        self.harness.apply({"op": "answer", "server": server, "outcome": outcome})

    @rule(index=st.integers(0, 5))
    def deliver(self, index: int) -> None:
        self.harness.apply({"op": "deliver", "index": index})

    @rule(server=SERVER)
    def crash(self, server: int) -> None:
        self.harness.apply({"op": "crash", "server": server})


def drive(rng: random.Random, harness: AclHarness, steps: int) -> None:
    """A seed's swarm: which faults, how often, how many refusals, late swaps and crashes."""
    fault_rate = rng.choice((0.0, 0.1, 0.3, 0.6))
    faults = rng.sample(OUTCOMES[1:], rng.randint(1, len(OUTCOMES) - 1))
    crash_rate = rng.choice((0.0, 0.02, 0.06))
    deliver_rate = rng.choice((0.05, 0.2))
    kinds = ("append",) * rng.choice((1, 3, 8)) + KINDS[1:]
    for _ in range(steps):
        roll = rng.random()
        server = rng.randrange(SERVERS)
        if roll < crash_rate:
            inp: dict[str, Any] = {"op": "crash", "server": server}
        elif roll < crash_rate + deliver_rate and harness.in_flight:
            inp = {"op": "deliver", "index": rng.randrange(6)}
        elif server in harness.runs:
            outcome = rng.choice(faults) if rng.random() < fault_rate else "ok"
            inp = {"op": "answer", "server": server, "outcome": outcome}
        else:
            inp = {"op": "request", "server": server, "kind": rng.choice(kinds)}
        harness.apply(inp)


def settle(harness: AclHarness) -> None:
    """Liveness: with clean answers every run ends (done, refused or failed), and late swaps land
    or are refused, leaving the invariants intact."""
    for _ in range(500):
        if not harness.runs and not harness.in_flight:
            break
        for server in sorted(harness.runs):
            harness.apply({"op": "answer", "server": server, "outcome": "ok"})
        if harness.in_flight:
            harness.apply({"op": "deliver", "index": 0})
    assert not harness.runs and not harness.in_flight, (harness.runs, harness.in_flight)


def changed_something(harness: AclHarness) -> bool:
    return any(what == "done" for what, _ in harness.outcomes.values()) and bool(harness.landed)


MODEL = register(
    MachineModel(
        name="acl",
        spec=SPEC,
        harness=lambda: AclHarness(SPEC),
        step_checkers=STEP_CHECKERS,
        run_checkers=RUN_CHECKERS,
        levels={"top": SPEC},
        exercised=EXERCISED,
        bindings=(
            Binding(
                SPEC,
                acl.Phase,
                initial=acl.initial_state().phase,
                terminal=True,
                module=acl,
                events=type_names(acl.Event),
                effects=type_names(acl.Effect),
                handlers=acl._HANDLERS,
            ),
        ),
        drive=drive,
        settle=settle,
        progress=changed_something,
        walk_steps=150,
        walks_ci=200,
        examples_ci=200,
        example_steps=50,
        required_traces=frozenset({
            "lost-reply-then-found-by-its-id",
            "late-swap-lands-after-a-retry-on-the-same-version",
            "duplicated-request-refused-after-its-first-copy-landed",
            "unknown-outcome-whose-id-was-dropped-fails-08007",
            "refusal-depends-on-the-document-read",
            "conflicts-exhausted",
        }),
    )
)
walk = MODEL.walk
AclMachine.model = MODEL
TestAclMachine = AclMachine.TestCase
TestAclMachine.settings = MODEL.hypothesis_settings()


def _ok(h: AclHarness, server: int, times: int = 1) -> None:
    for _ in range(times):
        h.apply({"op": "answer", "server": server, "outcome": "ok"})


def test_two_servers_racing_for_one_version_both_land_in_some_order() -> None:
    h = AclHarness(SPEC)
    h.apply({"op": "request", "server": 0, "kind": "append"})
    h.apply({"op": "request", "server": 1, "kind": "append"})
    _ok(h, 0)
    _ok(h, 1)  # both read the empty store
    _ok(h, 0)  # 0's swap lands (and creates the store)
    _ok(h, 1)  # 1's is refused: it reads again, applies to 0's document
    _ok(h, 1, 2)
    assert ids_of(h.record.document) == ["c1", "c2"]
    assert h.outcomes == {"c1": ("done", '["c1"]'), "c2": ("done", '["c1", "c2"]')}


def test_a_refusal_writes_nothing_and_a_noop_needs_no_swap() -> None:
    h = AclHarness(SPEC)
    h.apply({"op": "request", "server": 0, "kind": "refuse"})
    _ok(h, 0)
    h.apply({"op": "request", "server": 0, "kind": "noop"})
    _ok(h, 0)
    assert h.outcomes == {"c1": ("refused", ""), "c2": ("done", "")} and h.record == EMPTY


def test_the_checkers_catch_a_machine_that_trusts_a_refused_swap() -> None:
    """The checkers are live: a machine that re-applies after a refusal without looking for its id
    applies a change twice when the refusal answered a retried copy of a request that landed."""
    key = (acl.Phase.READING, acl.RecordRead)
    original = acl._HANDLERS[key]

    def forgetful(state: acl.State, event: acl.RecordRead) -> Any:
        return original(state.__class__(**{**state.__dict__, "pending": None}), event)

    acl._HANDLERS[key] = forgetful
    try:
        h = AclHarness(SPEC)
        h.apply({"op": "request", "server": 0, "kind": "append"})
        _ok(h, 0)
        h.apply({"op": "answer", "server": 0, "outcome": "dup"})  # landed; the retry was refused
        with pytest.raises(AssertionError):
            _ok(h, 0, 2)  # reads its own document, appends again: landed twice
            check_step_invariants(h)
    finally:
        acl._HANDLERS[key] = original


def test_the_checkers_catch_a_machine_that_trusts_an_unknown_outcome() -> None:
    key = (acl.Phase.SWAPPING, acl.SwapOutcomeUnknown)
    original = acl._HANDLERS[key]
    acl._HANDLERS[key] = lambda state, event: acl._done(state, state.sent.document)
    try:
        h = AclHarness(SPEC)
        h.apply({"op": "request", "server": 0, "kind": "append"})
        _ok(h, 0)
        with pytest.raises(AssertionError):
            h.apply({"op": "answer", "server": 0, "outcome": "timeout"})  # acknowledged, never applied
    finally:
        acl._HANDLERS[key] = original


# --- the driver, through AclStore, on an in-memory world -----------------------------------------


class MemoryWorld:
    """One record under compare-and-swap behind the driver's blocking AclWorld, with scripted swap
    faults (one per swap, "ok" when exhausted): "rejected", "failed", "timeout" (not applied),
    "lost" (applied, no answer); `overtake` lands another server's increment before each of the
    next swaps."""

    def __init__(self, faults: tuple[str, ...] = (), overtake: int = 0) -> None:
        self.record = EMPTY
        self.version = 0
        self.faults = list(faults)
        self.overtake = overtake
        self.swaps = 0
        self.lock = threading.Lock()

    def read(self) -> Record:
        with self.lock:
            return self.record

    def _land(self, record: Record) -> bool:
        if record.version != self.record.version:
            return False
        self.version += 1
        self.record = Record(self.version, record.document, record.applied, record.count)
        return True

    def swap(self, record: Record) -> None:
        with self.lock:
            self.swaps += 1
            if self.overtake > 0:
                self.overtake -= 1
                current = self.record
                self._land(acl.next_record(current, f"other{self.version}", _increment(current.document), 64))
            fault = self.faults.pop(0) if self.faults else "ok"
            if fault == "failed":
                raise SwapNotApplied("refused before sending")
            if fault == "timeout":
                raise SwapUnknownError("timed out")
            landed = self._land(record)
            if fault == "lost":
                raise TimeoutError("reply lost")
            if not landed:
                raise SwapRejectedError("the record moved")


def _increment(document: str) -> str:
    return json.dumps({"n": (json.loads(document)["n"] if document else 0) + 1})


def _store(world: MemoryWorld, config: Config | None = None) -> AclStore:
    store = AclStore.__new__(AclStore)
    store.world = world  # type: ignore[assignment]
    store.config = config or Config()
    store._lock = trio.Lock()
    return store


@pytest.fixture
def mock_clock() -> trio.testing.MockClock:
    return trio.testing.MockClock(autojump_threshold=0)


async def test_the_store_applies_concurrent_changes_once_each(mock_clock: Any) -> None:
    world = MemoryWorld(faults=("lost", "timeout", "failed", "rejected"), overtake=3)
    store = _store(world)
    async with trio.open_nursery() as nursery:
        for n in range(20):
            nursery.start_soon(store.change, f"mine{n}", _increment)
    assert json.loads(world.record.document) == {"n": 23}  # 20 of ours, 3 of the other server's
    assert world.record.count == 23


async def test_a_lost_reply_is_found_by_its_id_and_returns_what_it_wrote(mock_clock: Any) -> None:
    world = MemoryWorld(faults=("lost",))
    assert await _store(world).change("a", _increment) == '{"n": 1}'
    assert world.swaps == 1 and world.record.applied == ("a",)


async def test_the_store_reraises_a_refusal_and_writes_nothing(mock_clock: Any) -> None:
    world = MemoryWorld()
    with pytest.raises(Refusal):
        await _store(world).change("r", apply_of("refuse", "r"))
    assert world.record == EMPTY and world.swaps == 0


async def test_the_store_fails_40001_after_losing_every_race(mock_clock: Any) -> None:
    world = MemoryWorld(overtake=100)
    with pytest.raises(PgError) as info:
        await _store(world, Config(max_conflicts=3)).change("x", _increment)
    assert info.value.sqlstate == "40001" and world.swaps == 4
    assert "x" not in world.record.applied and json.loads(world.record.document) == {"n": 4}


async def test_the_store_fails_08007_when_the_catalog_fails_after_an_unknown_outcome(mock_clock: Any) -> None:
    world = MemoryWorld(faults=("timeout",) * 10)
    with pytest.raises(PgError) as info:
        await _store(world, Config(max_attempts=3)).change("x", _increment)
    assert info.value.sqlstate == "08007" and world.record == EMPTY


async def test_the_store_fails_58030_when_swaps_never_leave(mock_clock: Any) -> None:
    world = MemoryWorld(faults=("failed",) * 10)
    start = trio.current_time()
    with pytest.raises(PgError) as info:
        await _store(world, Config(max_attempts=3, backoff_s=1.0)).change("x", _increment)
    assert info.value.sqlstate == "58030" and world.record == EMPTY
    assert trio.current_time() - start == pytest.approx(1.0 + 2.0)  # backed off in virtual time


async def test_a_change_finishes_when_its_caller_is_cancelled(mock_clock: Any) -> None:
    world = MemoryWorld(faults=("failed",))
    store = _store(world)
    with trio.move_on_after(0.01):
        await store.change("c", _increment)
    assert world.record.applied == ("c",)


class TestAclModel(ModelTests):
    model = MODEL
