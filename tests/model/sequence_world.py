"""A simulated catalog for the sequence machine: one sequence's head under compare-and-swap, three
servers reserving blocks of it at once, faults at every effect, swaps that arrive late, crashes;
and the checkers of `specs/sequence.toml`.

Each server runs at most one reservation at a time (the machine's run); an `answer` input
chooses how the catalog answers that server's outstanding effect. A swap may be lost after it
landed, time out without landing, or be held in flight and delivered by a later `deliver` input
(when it lands only if the head is still the version it asserts — as a real catalog's
compare-and-swap does). A `crash` throws a server's run away; its swaps in flight stay in flight.
Every value a Grant hands out is recorded per server, for the checkers.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from icegres.machines.sequence import (
    Advance,
    Advanced,
    AdvanceFailed,
    AdvanceOutcomeUnknown,
    AdvanceRejected,
    Config,
    Definition,
    Effect,
    Event,
    Fail,
    Grant,
    Head,
    HeadRead,
    ReadFailed,
    ReadHead,
    Request,
    Requested,
    SequenceMissing,
    State,
    Wait,
    WaitElapsed,
    initial_state,
    step,
)
from tests.model.scaffold import Exercised, check_every_transition_exercised
from tests.model.trace import Spec

SERVERS = 3
EXERCISED: Exercised = set()

# How the catalog answers an effect: each effect takes the ones that apply to it, else "ok".
OUTCOMES = ("ok", "fail", "failed", "lost", "timeout", "late")
# The sequences a run may define: up, up by 3 with a block of 4, down, and a short one to exhaust.
DEFINITIONS = {
    "up": Definition("up", increment=1, min_value=1, max_value=10**6, start=1, cache=1),
    "block": Definition("block", increment=3, min_value=1, max_value=10**6, start=10, cache=4),
    "down": Definition("down", increment=-1, min_value=-(10**6), max_value=-1, start=-1, cache=2),
    "short": Definition("short", increment=2, min_value=1, max_value=40, start=1, cache=3),
}
CONFIG = Config(max_attempts=4, max_conflicts=6)


@dataclass
class Run:
    state: State
    pending: Effect | None = None
    blind: bool = False  # a swap's outcome is unknown and no read has come since


@dataclass
class SequenceHarness:
    spec: Spec
    kind: str = "up"
    inputs: list[dict[str, Any]] = field(default_factory=list)
    steps: list[tuple[Any, ...]] = field(default_factory=list)
    head: Head | None = None
    dropped: bool = False
    version: int = 1
    runs: dict[int, Run] = field(default_factory=dict)
    in_flight: list[tuple[int, Head]] = field(default_factory=list)  # late swaps: (expected version, head)
    granted: dict[int, list[int]] = field(default_factory=dict)  # server -> values handed out
    grants: int = 0
    failures: list[str] = field(default_factory=list)
    serial: int = 0

    def __post_init__(self) -> None:
        self._create(self.kind)

    @property
    def definition(self) -> Definition:
        return DEFINITIONS[self.kind]

    # --- the one entry point ----------------------------------------------------------------

    def apply(self, inp: dict[str, Any]) -> None:
        self.inputs.append(inp)
        op = inp["op"]
        if op == "create":
            if not self._busy():
                self._create(inp["kind"])
        elif op == "request":
            self._request(inp["server"], inp["count"])
        elif op == "answer":
            self._answer(inp["server"], inp["outcome"])
        elif op == "deliver":
            if self.in_flight:
                self._land(*self.in_flight.pop(inp["index"] % len(self.in_flight)))
        elif op == "crash":
            self.runs.pop(inp["server"], None)
        elif op == "drop":
            self.dropped = True
        else:
            raise ValueError(f"unknown input {inp}")
        check_step_invariants(self)

    def _busy(self) -> bool:
        return bool(self.runs) or bool(self.in_flight)

    def _create(self, kind: str) -> None:
        """CREATE SEQUENCE (again): a fresh head, nothing granted of it yet."""
        self.kind = kind
        self.version += 1
        self.head = Head(self.version, self.definition.start, False)
        self.dropped = False
        self.granted = {}

    def _request(self, server: int, count: int) -> None:
        if server in self.runs:
            return
        self.serial += 1
        request = Request(self.definition, count, f"s{server}-{self.serial}")
        self.runs[server] = Run(initial_state(CONFIG))
        self._step(server, Requested(request))

    # --- effects ----------------------------------------------------------------------------

    def _answer(self, server: int, outcome: str) -> None:
        run = self.runs.get(server)
        if run is None or run.pending is None:
            return
        effect, run.pending = run.pending, None
        event: Event
        match effect:
            case ReadHead():
                run.blind = False
                if outcome == "fail":
                    event = ReadFailed("catalog down")
                elif self.dropped:
                    event = SequenceMissing()
                else:
                    assert self.head is not None
                    event = HeadRead(self.head)
            case Advance(expected=expected, head=new):
                if outcome == "failed":
                    event = AdvanceFailed("refused before sending")
                elif outcome == "timeout":
                    event = AdvanceOutcomeUnknown("timeout, not applied")
                elif outcome == "late":
                    self.in_flight.append((expected, new))
                    event = AdvanceOutcomeUnknown("timeout, still in flight")
                elif self.dropped:
                    event = SequenceMissing()
                else:
                    landed = self._land(expected, new)
                    if outcome == "lost":
                        event = AdvanceOutcomeUnknown("connection dropped after sending")
                    else:
                        event = Advanced() if landed else AdvanceRejected()
                if isinstance(event, AdvanceOutcomeUnknown):
                    run.blind = True
            case Wait():
                event = WaitElapsed()
            case _:
                raise AssertionError(f"unanswerable {effect}")
        self._step(server, event)

    def _land(self, expected: int, new: Head) -> bool:
        """The catalog's compare-and-swap."""
        if self.dropped or self.head is None or self.head.version != expected:
            return False
        self.version += 1
        self.head = Head(self.version, new.last_value, new.is_called, new.first, new.token)
        return True

    # --- stepping ---------------------------------------------------------------------------

    def _step(self, server: int, event: Event) -> None:
        run = self.runs[server]
        before = run.state
        after, effects = step(before, event)
        t = self.spec.check_step(before.phase.value, type(event).__name__, after.phase.value,
                                 tuple(type(e).__name__ for e in effects))
        EXERCISED.add(("top", t))
        self.steps.append(("top", server, t.source, t.event, t.target, t.effects))
        run.state = after
        for effect in effects:
            if isinstance(effect, Advance):
                assert not run.blind, "a swap after an unknown outcome, with no read since"
            if isinstance(effect, Grant):
                self._grant(server, effect)
            elif isinstance(effect, Fail):
                self.failures.append(effect.sqlstate)
            else:
                assert run.pending is None, "one answered effect at a time"
                run.pending = effect
        if after.phase.terminal:
            del self.runs[server]

    def _grant(self, server: int, grant: Grant) -> None:
        values = list(range(grant.first, grant.last + (1 if grant.increment > 0 else -1), grant.increment))
        assert values, grant
        check_granted_is_reserved(self, values)
        self.granted.setdefault(server, []).extend(values)
        self.grants += 1


# --- checkers ------------------------------------------------------------------------------------


def _all_granted(h: SequenceHarness) -> list[int]:
    return [v for values in h.granted.values() for v in values]


def check_never_granted_twice(h: SequenceHarness) -> None:
    values = _all_granted(h)
    assert len(values) == len(set(values)), sorted(v for v in set(values) if values.count(v) > 1)


def check_granted_is_reserved(h: SequenceHarness, new: list[int] | None = None) -> None:
    """Every value granted (and any about to be) is covered by the head's last value."""
    if h.head is None or h.dropped:
        return
    values = _all_granted(h) + (new or [])
    if not values:
        return
    if h.definition.increment > 0:
        assert max(values) <= h.head.last_value, (max(values), h.head)
    else:
        assert min(values) >= h.head.last_value, (min(values), h.head)


def check_grants_within_bounds(h: SequenceHarness) -> None:
    d = h.definition
    for v in _all_granted(h):
        assert d.min_value <= v <= d.max_value, (v, d)
        assert (v - d.start) % abs(d.increment) == 0, (v, d)


def check_no_blind_swap(h: SequenceHarness) -> None:
    """(Checked as each Advance is emitted, in `_step`; here: a blind run has no swap pending.)"""
    for run in h.runs.values():
        if run.blind:
            assert not isinstance(run.pending, Advance), run


def check_retries_bounded(h: SequenceHarness) -> None:
    for run in h.runs.values():
        assert run.state.attempts <= CONFIG.max_attempts, run.state
        assert run.state.conflicts <= CONFIG.max_conflicts + 1, run.state


def check_spec_transitions_only(h: SequenceHarness) -> None:
    """(Checked at every step by `spec.check_step` in `_step`.)"""


STEP_CHECKERS = {
    "never_granted_twice": check_never_granted_twice,
    "granted_is_reserved": check_granted_is_reserved,
    "grants_within_bounds": check_grants_within_bounds,
    "no_blind_swap": check_no_blind_swap,
    "retries_bounded": check_retries_bounded,
    "spec_transitions_only": check_spec_transitions_only,
}
RUN_CHECKERS = {"every_transition_exercised": check_every_transition_exercised}


def check_step_invariants(h: SequenceHarness) -> None:
    for check in STEP_CHECKERS.values():
        check(h)
