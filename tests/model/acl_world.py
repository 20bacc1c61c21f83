"""A simulated catalog for the shared-document machine: one record under compare-and-swap, three
servers changing it at once, faults at every effect, swaps that arrive late or twice, crashes;
and the checkers of `specs/acl.toml`.

The document is a JSON list of change ids, so that it shows by itself which changes were applied
and in what order. A change's kind says what its `apply` does: `append` appends its id, `refuse`
always refuses, `odd` refuses when the list has an odd length (a refusal that depends on what
the document says, as "role already exists" does) and appends otherwise, `noop` returns the
document as it is. Each server runs at most one change at a time (as AclStore does); an `answer`
input chooses how the catalog answers that server's outstanding effect: `fail` a read; a swap
`failed` (refused before sending), `timeout` (unanswered, not applied), `lost` (applied, reply
lost), `late` (held in flight until a `deliver` lands it, if its version still holds), `dup`
(applied, and the reply is the refusal a retried copy of the request got). `crash` throws a
server's run away; its swaps in flight stay in flight.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from icegres.machines.acl import (
    EMPTY,
    Change,
    Config,
    Done,
    Effect,
    Event,
    Fail,
    ReadFailed,
    ReadRecord,
    Record,
    RecordRead,
    Refuse,
    Requested,
    State,
    Swap,
    SwapFailed,
    SwapOutcomeUnknown,
    Swapped,
    SwapRejected,
    Wait,
    WaitElapsed,
    initial_state,
    recover,
    step,
)
from tests.model.scaffold import Exercised, check_every_transition_exercised
from tests.model.trace import Spec

SERVERS = 3
EXERCISED: Exercised = set()

OUTCOMES = ("ok", "fail", "failed", "lost", "timeout", "late", "dup")
KINDS = ("append", "refuse", "odd", "noop")
# Few kept ids, so that walks reach an unknown outcome whose id was dropped from the record.
CONFIG = Config(kept_ids=4, max_attempts=4, max_conflicts=5)


class Refusal(Exception):
    """What a refusing `apply` raises (the caller's error, e.g. "role already exists")."""


def ids_of(document: str) -> list[str]:
    return json.loads(document) if document else []


def apply_of(kind: str, change_id: str) -> Callable[[str], str]:
    """The pure `apply` of a change of `kind`."""
    def apply(document: str) -> str:
        ids = ids_of(document)
        if kind == "refuse" or (kind == "odd" and len(ids) % 2 == 1):
            raise Refusal(f"{change_id} refused at {len(ids)}")
        if kind == "noop":
            return document
        return json.dumps([*ids, change_id])
    return apply


@dataclass
class Run:
    change_id: str
    state: State
    pending: Effect | None = None
    blind: bool = False  # a swap's outcome is open and no read has come since


@dataclass
class AclHarness:
    spec: Spec
    inputs: list[dict[str, Any]] = field(default_factory=list)
    steps: list[tuple[Any, ...]] = field(default_factory=list)
    record: Record = EMPTY
    version: int = 0
    runs: dict[int, Run] = field(default_factory=dict)
    in_flight: list[Record] = field(default_factory=list)  # late swaps
    kinds: dict[str, str] = field(default_factory=dict)  # change id -> kind
    # change id -> ("done", document) | ("refused", "") | ("failed", sqlstate)
    outcomes: dict[str, tuple[str, str]] = field(default_factory=dict)
    landed: dict[str, str] = field(default_factory=dict)  # change id -> the document its swap wrote
    documents: set[str] = field(default_factory=lambda: {""})  # every document the catalog held
    serial: int = 0

    # --- the one entry point ----------------------------------------------------------------

    def apply(self, inp: dict[str, Any]) -> None:
        self.inputs.append(inp)
        op = inp["op"]
        if op == "request":
            self._request(inp["server"], inp["kind"])
        elif op == "answer":
            self._answer(inp["server"], inp["outcome"])
        elif op == "deliver":
            if self.in_flight:
                self._land(self.in_flight.pop(inp["index"] % len(self.in_flight)))
        elif op == "crash":
            if self.runs.pop(inp["server"], None) is not None:
                assert recover(CONFIG) == initial_state(CONFIG)  # nothing to recover: the record decides
        else:
            raise ValueError(f"unknown input {inp}")
        check_step_invariants(self)

    def _request(self, server: int, kind: str) -> None:
        if server in self.runs:
            return
        self.serial += 1
        change_id = f"c{self.serial}"
        self.kinds[change_id] = kind
        self.runs[server] = Run(change_id, initial_state(CONFIG))
        self._step(server, Requested(Change(change_id, apply_of(kind, change_id))))

    # --- effects ----------------------------------------------------------------------------

    def _answer(self, server: int, outcome: str) -> None:
        run = self.runs.get(server)
        if run is None or run.pending is None:
            return
        effect, run.pending = run.pending, None
        event: Event
        match effect:
            case ReadRecord():
                run.blind = False
                event = ReadFailed("catalog down") if outcome == "fail" else RecordRead(self.record)
            case Swap(record=record):
                if outcome == "failed":
                    event = SwapFailed("refused before sending")
                elif outcome == "timeout":
                    event = SwapOutcomeUnknown("timeout, not applied")
                elif outcome == "late":
                    self.in_flight.append(record)
                    event = SwapOutcomeUnknown("timeout, still in flight")
                else:
                    landed = self._land(record)
                    if outcome == "lost":
                        event = SwapOutcomeUnknown("connection dropped after sending")
                    elif outcome == "dup":
                        event = SwapRejected()  # the retried copy's answer, whether the first landed or not
                    else:
                        event = Swapped() if landed else SwapRejected()
                if not isinstance(event, Swapped | SwapFailed):
                    run.blind = True
            case Wait():
                event = WaitElapsed()
            case _:
                raise AssertionError(f"unanswerable {effect}")
        self._step(server, event)

    def _land(self, record: Record) -> bool:
        """The catalog's compare-and-swap; a landed document is checked to be the change's apply of
        the document it replaces (document_is_a_serial_order)."""
        if record.version != self.record.version:
            return False
        change_id = record.applied[-1]
        assert change_id not in self.landed, f"{change_id} landed twice"
        expected = apply_of(self.kinds[change_id], change_id)(self.record.document)
        assert record.document == expected, (change_id, self.record.document, record.document)
        assert record.count == self.record.count + 1, (record, self.record)
        self.version += 1
        self.record = replace(record, version=self.version)
        self.landed[change_id] = record.document
        self.documents.add(record.document)
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
            match effect:
                case Done(document=document):
                    check_done_returns_what_was_written(self, run.change_id, document)
                    self.outcomes[run.change_id] = ("done", document)
                case Refuse(error=error):
                    assert isinstance(error, Refusal), error
                    self.outcomes[run.change_id] = ("refused", "")
                case Fail(sqlstate=sqlstate):
                    self.outcomes[run.change_id] = ("failed", sqlstate)
                case _:
                    if isinstance(effect, Swap):
                        assert not run.blind, "a swap after an open outcome, with no read since"
                    assert run.pending is None, "one answered effect at a time"
                    run.pending = effect
        if after.phase.terminal:
            del self.runs[server]


# --- checkers ------------------------------------------------------------------------------------


def _count(h: AclHarness, change_id: str) -> int:
    return ids_of(h.record.document).count(change_id)


def check_acknowledged_exactly_once(h: AclHarness) -> None:
    for change_id, (what, _) in h.outcomes.items():
        if what == "done":
            wanted = 0 if h.kinds[change_id] == "noop" else 1
            assert _count(h, change_id) == wanted, (change_id, h.record)


def check_refused_or_failed_never_applied(h: AclHarness) -> None:
    for change_id, (what, sqlstate) in h.outcomes.items():
        if what == "refused" or (what == "failed" and sqlstate in ("40001", "58030")):
            assert _count(h, change_id) == 0, (change_id, what, sqlstate, h.record)
            assert change_id not in h.landed, (change_id, what, sqlstate)
        elif what == "failed":
            assert sqlstate == "08007", sqlstate
            assert _count(h, change_id) <= 1, (change_id, h.record)


def check_document_is_a_serial_order(h: AclHarness) -> None:
    """(Each landing is checked against the change's apply of the document it replaced, in
    `_land`; here: no change twice, and the record's recent ids end with the document's.)"""
    ids = ids_of(h.record.document)
    assert len(ids) == len(set(ids)), ids
    assert h.record.count == len(h.landed), (h.record, len(h.landed))
    applied = list(h.record.applied)
    assert applied == ids[len(ids) - len(applied):], (applied, ids)


def check_done_returns_what_was_written(h: AclHarness, change_id: str | None = None, document: str | None = None) -> None:
    if change_id is None or document is None:
        return  # (checked as each Done is emitted, in `_step`)
    if change_id in h.landed:
        assert document == h.landed[change_id], (change_id, document, h.landed[change_id])
    else:
        assert h.kinds[change_id] == "noop" and document in h.documents, (change_id, document)


def check_no_blind_swap(h: AclHarness) -> None:
    """(Checked as each Swap is emitted, in `_step`; here: a blind run has no swap pending.)"""
    for run in h.runs.values():
        if run.blind:
            assert not isinstance(run.pending, Swap), run


def check_retries_bounded(h: AclHarness) -> None:
    for run in h.runs.values():
        assert run.state.attempts <= CONFIG.max_attempts, run.state
        assert run.state.conflicts <= CONFIG.max_conflicts + 1, run.state


def check_spec_transitions_only(h: AclHarness) -> None:
    """(Checked at every step by `spec.check_step` in `_step`.)"""


STEP_CHECKERS = {
    "acknowledged_exactly_once": check_acknowledged_exactly_once,
    "refused_or_failed_never_applied": check_refused_or_failed_never_applied,
    "document_is_a_serial_order": check_document_is_a_serial_order,
    "done_returns_what_was_written": check_done_returns_what_was_written,
    "no_blind_swap": check_no_blind_swap,
    "retries_bounded": check_retries_bounded,
    "spec_transitions_only": check_spec_transitions_only,
}
RUN_CHECKERS = {"every_transition_exercised": check_every_transition_exercised}


def check_step_invariants(h: AclHarness) -> None:
    for check in STEP_CHECKERS.values():
        check(h)

