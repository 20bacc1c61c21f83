"""What every machine's model test shares: the registry, replay, seeded walks, budgets, spec checks.

A machine's test module (`tests/model/test_<machine>.py`) keeps what only it knows — its harness,
its Hypothesis rules, its walk driver (the input vocabulary and the faults a seed turns on), its
hand-written "the harness catches ..." tests — and registers itself once:

    MODEL = register(MachineModel(name="wal", spec=SPEC, harness=lambda: WalHarness(SPEC), ...))

    class WalMachine(ModelMachine):     # Hypothesis: settles and saves its final run as a trace
        model = MODEL
        ...rules...

    class TestWalModel(ModelTests):     # replay, roundtrip, spec bookkeeping, walks, coverage
        model = MODEL

`python -m tests.model.replay PATH` dispatches on a trace header's `machine` through the same
registry, and `python -m tests.model.walk MACHINE SEEDS` runs seeded walks outside pytest.

Every harness offers one entry point, `apply(input)`, which records the input in `inputs`, steps
the core (checked against the spec) and checks every step invariant; `steps` is its list of spec
transitions taken. Hypothesis, seeded walks and replay all feed inputs through it, so any run's
`inputs` replays exactly.
"""

from __future__ import annotations

import hashlib
import importlib
import json
import os
import random
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any, ClassVar, Protocol

from hypothesis import HealthCheck, settings
from hypothesis.control import current_build_context
from hypothesis.stateful import RuleBasedStateMachine

from tests.model.trace import (
    NEW_TRACES_DIR,
    Spec,
    Transition,
    read_trace,
    trace_header,
    traces_for,
    write_trace,
)

MODEL_DIR = Path(__file__).resolve().parent

# Deep runs scale every machine's CI sizes (Hypothesis examples and seeded walks) by this factor;
# unset means 1, the CI sizes. `make model-deep` sets it. Fractions are allowed (a quick local run).
BUDGET_ENV = "ICEGRES_MODEL_BUDGET"
# The first seed of the seeded walks (0 unless set), so that deep runs can cover other seeds.
SEED_START_ENV = "ICEGRES_MODEL_SEED_START"


class Harness(Protocol):
    inputs: list[dict[str, Any]]
    steps: list[Any]

    def apply(self, inp: dict[str, Any]) -> None: ...


# --- budgets -------------------------------------------------------------------------------------


def budget() -> float:
    raw = os.environ.get(BUDGET_ENV, "1")
    value = float(raw)
    if value <= 0:
        raise ValueError(f"{BUDGET_ENV}={raw!r}: must be a positive number")
    return value


def scaled(ci_size: int) -> int:
    """A CI size scaled by the budget (at least 1)."""
    return max(1, round(ci_size * budget()))


def seed_start() -> int:
    return int(os.environ.get(SEED_START_ENV, "0"))


# --- spec and code, name for name ----------------------------------------------------------------


def type_names(union: Any) -> frozenset[str]:
    """The class names of a `A | B | C` type alias."""
    return frozenset(t.__name__ for t in union.__args__)


@dataclass(frozen=True)
class Binding:
    """Where one spec's (or spec section's) names live in the code.

    Every name given is compared with the spec both ways; None skips a comparison for a spec
    section whose code has no such table (the buffer's lanes have no handler table of their own).
    """

    spec: Spec
    phases: type[Enum]
    initial: Enum | None = None
    terminal: bool = False  # the phases carry a `terminal` property the spec's `terminal` mirrors
    events: Collection[str] | None = None
    events_within: Collection[str] | None = None  # the spec's events are a subset of these
    effects: Collection[str] | None = None
    handlers: Iterable[tuple[Any, type]] | None = None  # the core's (phase, event type) table
    module: Any = None  # every event and effect the spec names is defined in this module


def assert_names_match(binding: Binding) -> None:
    spec = binding.spec
    assert spec.states == {p.value for p in binding.phases}, spec.machine
    if binding.terminal:
        assert spec.terminal == {p.value for p in binding.phases if p.terminal}, spec.machine
    if binding.initial is not None:
        assert spec.initial == binding.initial.value, spec.machine
    if binding.module is not None:
        for name in spec.events | spec.effects:
            assert hasattr(binding.module, name), f"{spec.machine}: {name} not in the code"
    if binding.events is not None:
        assert spec.events == set(binding.events), spec.machine
    if binding.events_within is not None:
        assert spec.events <= set(binding.events_within), spec.machine
    if binding.effects is not None:
        assert spec.effects == set(binding.effects), spec.machine
    if binding.handlers is not None:
        assert_transitions_match(spec, binding.handlers)


def assert_transitions_match(spec: Spec, handlers: Iterable[tuple[Any, type]]) -> None:
    """The spec's transitions are exactly the core's handler table: (state, event type) pairs."""
    code = {(p.value, e.__name__) for p, e in handlers}
    spec_pairs = {(t.source, t.event) for t in spec.transitions}
    assert code == spec_pairs, (
        f"{spec.machine}: only in the code {sorted(code - spec_pairs)}, "
        f"only in the spec {sorted(spec_pairs - code)}"
    )


def assert_checkers_match(
    spec: Spec, step_checkers: Mapping[str, Any], run_checkers: Mapping[str, Any]
) -> None:
    """Every invariant the spec states has a checker of its scope, and every checker an invariant."""
    assert {n for n, i in spec.invariants.items() if i.scope == "step"} == set(step_checkers)
    assert {n for n, i in spec.invariants.items() if i.scope == "run"} == set(run_checkers)


# --- transition coverage -------------------------------------------------------------------------

# A machine's harnesses add ("level", Transition) to one set per machine for every step they take;
# the level names the spec section ("top" for the machine itself, "lane", "acceptor", ...).
Exercised = set[tuple[str, Transition]]


def check_every_transition_exercised(levels: Mapping[str, Spec], exercised: Exercised) -> None:
    """The run-scope invariant `every_transition_exercised`: every spec transition, every level."""
    missing = [
        (level, t) for level, spec in levels.items() for t in spec.transitions
        if (level, t) not in exercised
    ]
    assert not missing, "spec transitions never exercised:\n" + "\n".join(
        f"  {level}: {t.source} --{t.event}--> {t.target} {list(t.effects)}" for level, t in missing
    )


# --- the registry --------------------------------------------------------------------------------


class SpecChanged(Exception):
    """A trace was recorded against another version of its machine's spec."""


class UnknownMachine(Exception):
    """A trace names a machine no test module registered."""


class ReplayFailed(AssertionError):
    """An input of a replayed trace broke an invariant (or the harness)."""

    def __init__(self, path: Path, index: int, inp: dict[str, Any], cause: BaseException) -> None:
        self.path, self.index, self.input, self.cause = path, index, inp, cause
        super().__init__(
            f"{path}: input {index + 1} {json.dumps(inp, sort_keys=True)} failed: "
            f"{type(cause).__name__}: {cause}"
        )


class WalkFailed(AssertionError):
    """A seeded walk broke an invariant; its inputs were saved as a trace."""

    def __init__(self, machine: str, seed: int, trace: Path, cause: BaseException) -> None:
        self.machine, self.seed, self.trace, self.cause = machine, seed, trace, cause
        super().__init__(
            f"{machine} walk(seed={seed}) failed: {type(cause).__name__}: {cause}\n"
            f"  reproduce with: python -m tests.model.replay {_shown(trace)}"
            f"  (or python -m tests.model.walk {machine} {seed})"
        )


def _shown(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(Path.cwd()))
    except ValueError:
        return str(path)


@dataclass(frozen=True)
class MachineModel:
    """One machine as the shared model tests see it.

    `drive(rng, harness, steps)` is the machine's seeded walk without its end: it draws this
    seed's swarm (which faults are on, how often) from `rng`, then feeds `steps` inputs through
    `harness.apply`. `settle(harness)` is the liveness phase every walk and every Hypothesis
    example ends with (a no-op where the run ended otherwise, e.g. recovery refused a damaged
    WAL). `progress(harness)` says whether a walk got anything done (a record acknowledged): most
    walks must, or the walks test nothing.
    """

    name: str
    spec: Spec  # specs/<name>.toml: its hash is what traces are stamped with
    harness: Callable[[], Any]
    step_checkers: Mapping[str, Callable[..., None]]
    run_checkers: Mapping[str, Callable[..., None]]
    levels: Mapping[str, Spec]  # the spec sections whose transitions `exercised` counts
    exercised: Exercised
    bindings: tuple[Binding, ...]
    drive: Callable[[random.Random, Any, int], None]
    settle: Callable[[Any], None]
    progress: Callable[[Any], bool]
    walk_steps: int  # inputs per seeded walk, before its settle
    walks_ci: int  # seeded walks per CI run (times the budget)
    examples_ci: int  # Hypothesis examples per CI run (times the budget)
    example_steps: int  # Hypothesis's stateful_step_count
    required_traces: frozenset[str] = frozenset()  # saved traces that must stay
    header_extra: Mapping[str, Any] = field(default_factory=dict)

    # Traces.

    def header(self, **extra: Any) -> dict[str, Any]:
        return trace_header(self.spec, **self.header_extra, **extra)

    def save_new_trace(self, inputs: list[dict[str, Any]], **extra: Any) -> Path:
        """Write a failing run's inputs to traces/_new/ (move it beside its machine with the fix)."""
        digest = hashlib.sha256(json.dumps(inputs, sort_keys=True).encode()).hexdigest()[:12]
        walk = extra.get("walk")
        stem = f"{self.name}-seed{walk['seed']}-{digest}" if walk else f"{self.name}-{digest}"
        path = write_trace(NEW_TRACES_DIR / f"{stem}.ndjson", self.header(**extra), inputs)
        print(
            f"{self.name} model trace written to {_shown(path)}; replay it with "
            f"`python -m tests.model.replay {_shown(path)}`, move it to "
            f"tests/model/traces/{self.name}/ with the fix"
        )
        return path

    def check_spec_hash(self, header: Mapping[str, Any], path: Path) -> None:
        recorded = header.get("spec_sha256") or "(none)"
        if recorded != self.spec.sha256:
            raise SpecChanged(
                f"{path}: recorded against specs/{self.name}.toml sha256 {recorded[:12]}, "
                f"the spec is now {self.spec.sha256[:12]}. Check that the trace still means what "
                "it meant under the changed spec, then re-stamp it: "
                f"python -m tests.model.replay --accept-spec-change {_shown(path)}"
            )

    def replay_inputs(self, inputs: Iterable[dict[str, Any]], path: Path) -> Any:
        harness = self.harness()
        for index, inp in enumerate(inputs):
            try:
                harness.apply(inp)
            except Exception as exc:
                raise ReplayFailed(path, index, inp, exc) from exc
        return harness

    def replay(self, path: Path, *, accept_spec_change: bool = False) -> Any:
        header, inputs = read_trace(path)
        if header["machine"] != self.name:
            raise UnknownMachine(f"{path}: a {header['machine']} trace, not {self.name}")
        if not accept_spec_change:
            self.check_spec_hash(header, path)
        return self.replay_inputs(inputs, path)

    # Seeded walks.

    def walk(self, seed: int, steps: int | None = None) -> Any:
        """One deterministic run: `walk(seed=N)` feeds the same inputs every time.

        A failing walk's inputs are saved as a trace (header: the seed and steps) and WalkFailed
        names it.
        """
        steps = self.walk_steps if steps is None else steps
        rng = random.Random(seed)
        harness = self.harness()
        try:
            self.drive(rng, harness, steps)
            self.settle(harness)
        except Exception as exc:
            trace = self.save_new_trace(harness.inputs, walk={"seed": seed, "steps": steps})
            raise WalkFailed(self.name, seed, trace, exc) from exc
        return harness

    def walk_seeds(self) -> range:
        start = seed_start()
        return range(start, start + scaled(self.walks_ci))

    def hypothesis_settings(self) -> settings:
        return settings(
            max_examples=scaled(self.examples_ci),
            stateful_step_count=self.example_steps,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
        )


REGISTRY: dict[str, MachineModel] = {}


def register(model: MachineModel) -> MachineModel:
    if model.name in REGISTRY and REGISTRY[model.name].drive.__module__ != model.drive.__module__:
        raise ValueError(f"machine {model.name!r} registered twice")
    assert model.spec.machine == model.name, (model.spec.machine, model.name)
    REGISTRY[model.name] = model
    return model


def load_registry() -> dict[str, MachineModel]:
    """Import every tests/model/test_*.py, each of which registers its machine."""
    for path in sorted(MODEL_DIR.glob("test_*.py")):
        importlib.import_module(f"tests.model.{path.stem}")
    return REGISTRY


def model_of(machine: str) -> MachineModel:
    """The registered machine; its test module is imported on demand (test_<machine>.py first)."""
    if machine not in REGISTRY and (MODEL_DIR / f"test_{machine}.py").is_file():
        importlib.import_module(f"tests.model.test_{machine}")
    if machine not in REGISTRY:
        load_registry()
    if machine not in REGISTRY:
        raise UnknownMachine(
            f"no model test registers a machine {machine!r} (registered: {sorted(REGISTRY)})"
        )
    return REGISTRY[machine]


def replay(path: Path, *, accept_spec_change: bool = False) -> Any:
    """Replay a saved trace through the harness of the machine its header names.

    SpecChanged if the trace's spec hash is not the current spec's (unless accepted), ReplayFailed
    at the first input that breaks an invariant; the harness after the last input otherwise.
    """
    header, _ = read_trace(path)
    return model_of(header["machine"]).replay(path, accept_spec_change=accept_spec_change)


# --- the drivers every machine shares ------------------------------------------------------------


class ModelMachine(RuleBasedStateMachine):
    """A Hypothesis state machine over a registered machine's harness (`self.harness`).

    Every example ends with the machine's settle phase; only Hypothesis's final (shrunk, failing)
    run is marked final, and its inputs are kept as a trace in traces/_new/.
    """

    model: ClassVar[MachineModel]

    def __init__(self) -> None:
        super().__init__()
        self.harness = self.model.harness()

    def teardown(self) -> None:
        try:
            self.model.settle(self.harness)
        finally:
            if current_build_context().is_final:
                self.model.save_new_trace(self.harness.inputs)


class ModelTests:
    """The tests every registered machine gets: `class TestWalModel(ModelTests): model = MODEL`.

    The run-scope coverage test comes last, so that it counts what the other tests exercised.
    """

    model: ClassVar[MachineModel]
    roundtrip_seed: ClassVar[int] = 1

    def pytest_generate_tests(self, metafunc: Any) -> None:
        if "path" in metafunc.fixturenames:
            paths = traces_for(self.model.name)
            metafunc.parametrize("path", paths, ids=[p.stem for p in paths])

    def test_replay_trace(self, path: Path) -> None:
        self.model.replay(path)

    def test_there_are_traces_to_replay(self) -> None:
        names = {p.stem for p in traces_for(self.model.name)}
        assert names, f"no saved traces under tests/model/traces/{self.model.name}/"
        assert self.model.required_traces <= names, self.model.required_traces - names

    def test_trace_roundtrip(self, tmp_path: Path) -> None:
        harness = self.model.walk(self.roundtrip_seed)
        path = write_trace(tmp_path / "t.ndjson", self.model.header(), harness.inputs)
        header, inputs = read_trace(path)
        assert header["machine"] == self.model.name
        assert header["spec_sha256"] == self.model.spec.sha256 and inputs == harness.inputs
        assert self.model.replay(path).steps == harness.steps

    def test_every_invariant_in_the_spec_has_a_checker_and_vice_versa(self) -> None:
        assert_checkers_match(self.model.spec, self.model.step_checkers, self.model.run_checkers)

    def test_spec_names_match_the_code(self) -> None:
        assert self.model.bindings and self.model.bindings[0].spec is self.model.spec
        for binding in self.model.bindings:
            assert_names_match(binding)

    def test_walk_is_reproducible(self) -> None:
        first, again = self.model.walk(2), self.model.walk(2)
        assert first.inputs == again.inputs and first.steps == again.steps
        assert self.model.walk(3).inputs != first.inputs

    def test_seeded_walks(self) -> None:
        seeds = self.model.walk_seeds()
        progressed = sum(bool(self.model.progress(self.model.walk(seed))) for seed in seeds)
        # Not vacuous: most walks must get records acknowledged through their faults.
        assert progressed > len(seeds) // 2, (progressed, len(seeds))

    def test_every_spec_transition_exercised(self) -> None:
        """Across this module's runs (and the saved traces, replayed again so `-k` works alone)."""
        for path in traces_for(self.model.name):
            self.model.replay(path)
        self.model.run_checkers["every_transition_exercised"](
            self.model.levels, self.model.exercised
        )
