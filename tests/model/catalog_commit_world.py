"""A simulated catalog for the catalog commit machine: names -> table uuids, intent records,
data tokens, faults and crashes; and the checkers of `specs/catalog_commit.toml`.

One namespace. A block is staged as ddl_block.py stages it: each CREATE makes a hidden table
(its intent recorded first), each DROP moves a table to a graveyard name, each RENAME moves it;
the block's expected new state is computed independently, by applying its statements to the
names it saw. The harness then drives the core one effect at a time, each effect's outcome
chosen by an input (ok, refused, failed before or after applying, unknown, ...), and a `crash`
input throws the machine away and recovers from the intent records and the catalog as they are.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from icegres.machines.catalog_commit import (
    Abort,
    Acknowledge,
    ApplyMove,
    CatalogPlan,
    CheckPlan,
    CommitData,
    DataAborted,
    DataCommitted,
    DataUnknown,
    DecisionFailed,
    DecisionRecorded,
    Effect,
    Event,
    ForgetIntent,
    IntentFailed,
    IntentForgotten,
    IntentRecorded,
    Move,
    MoveApplied,
    MoveFailed,
    MoveRefused,
    Phase,
    PlanChecked,
    PlanCheckFailed,
    PlanRefused,
    Purge,
    Purged,
    RecordDecision,
    RecordIntent,
    ReportStranded,
    Requested,
    State,
    UndoApplied,
    UndoFailed,
    UndoMove,
    initial_state,
    recover,
    step,
)
from tests.model.scaffold import Exercised, check_every_transition_exercised
from tests.model.trace import Spec

NS = "ns"
NAMES = ("a", "b", "c", "d")
HIDDEN = "icegres__block_"

EXERCISED: Exercised = set()

# Outcomes an `answer` input may choose; each effect takes those that apply to it, else "ok".
OUTCOMES = ("ok", "refused", "failed", "failed_applied", "unknown", "unknown_landed", "aborted")


@dataclass
class Block:
    plan: CatalogPlan
    old: dict[str, str] | None  # the catalog's visible names when the COMMIT began (None: not yet)
    view: dict[str, str]  # the names as the block's statements left them (computed while staging)
    token: str
    new: dict[str, str] | None = None  # what they must be if it commits; None: it must not
    interfered: bool = False


@dataclass
class CatalogCommitHarness:
    spec: Spec
    inputs: list[dict[str, Any]] = field(default_factory=list)
    steps: list[tuple[Any, ...]] = field(default_factory=list)
    catalog: dict[str, str] = field(default_factory=lambda: {n: f"u-{n}" for n in NAMES[:2]})
    intents: dict[str, tuple[CatalogPlan, bool]] = field(default_factory=dict)
    landed: set[str] = field(default_factory=set)  # tokens whose data commit is in the catalog
    state: State | None = None
    pending: Effect | None = None
    block: Block | None = None
    staged: tuple[list[Any], dict[str, str]] | None = None  # a block being built: its ops and view
    verdicts: list[str] = field(default_factory=list)
    serial: int = 0

    # --- the one entry point ----------------------------------------------------------------

    def apply(self, inp: dict[str, Any]) -> None:
        self.inputs.append(inp)
        op = inp["op"]
        if op == "block":
            self._block(inp["ddl"], inp["data"])
        elif op == "interfere":
            self._interfere(inp["src"], inp["dst"])
        elif op == "commit":
            self._commit()
        elif op == "answer":
            self._answer(inp["outcome"])
        elif op == "crash":
            self._crash()
        else:
            raise ValueError(f"unknown input {inp}")
        check_step_invariants(self)

    # --- blocks -----------------------------------------------------------------------------

    def _busy(self) -> bool:
        return self.state is not None and not self.state.phase.terminal

    def _block(self, ddl: list[list[str]], data: bool) -> None:
        """Stage a block's DDL (ignored while a COMMIT or an unresolved crash is in flight)."""
        if self._busy() or self.block is not None or self.intents:
            return
        self.serial += 1
        token = f"t{self.serial}"
        view = dict(self.catalog)
        moves: list[Move] = []
        created: list[tuple[str, str]] = []
        graveyard: list[tuple[str, str]] = []
        for kind, *names in ddl:
            if kind == "create" and names[0] not in view:
                hidden = f"{HIDDEN}new_{token}_{len(created)}"
                uid = f"u-{token}-{len(created)}"
                created.append((NS, hidden))
                # As ddl_block records it while staging: the hidden tables, no moves.
                self.intents[token] = (CatalogPlan(token, (), tuple(created), tuple(graveyard)), False)
                self.catalog[hidden] = uid  # made at once, hidden
                moves.append(Move(NS, hidden, names[0], uid))
                view[names[0]] = uid
            elif kind == "drop" and names[0] in view:
                grave = f"{HIDDEN}dropped_{token}_{len(graveyard)}"
                graveyard.append((NS, grave))
                moves.append(Move(NS, names[0], grave, view.pop(names[0])))
            elif kind == "rename" and names[0] in view and names[1] not in view:
                moves.append(Move(NS, names[0], names[1], view[names[0]]))
                view[names[1]] = view.pop(names[0])
        written = tuple((NS, n) for n in sorted(view)[:1]) if data and view else ()
        plan = CatalogPlan(token, tuple(moves), tuple(created), tuple(graveyard), bool(written), written)
        self.block = Block(plan, old=None, view=view, token=token)

    def _interfere(self, src: str, dst: str) -> None:
        """Another session's DDL lands now: a rename (dst a new name) or a drop (dst '')."""
        if src not in self.catalog or src.startswith(HIDDEN):
            return
        if self.state is not None:
            return  # only before a COMMIT: one in flight (or left to recovery) holds its names
        uid = self.catalog.pop(src)
        if dst and dst not in self.catalog:
            self.catalog[dst] = uid
        if self.block is not None:
            self.block.interfered = True

    def _commit(self) -> None:
        if self.block is None or self.state is not None:
            return
        block = self.block
        block.old = _visible(self.catalog)
        # What committing must leave: the plan's moves on the catalog as it is now, if every one
        # still finds its table and a free name; otherwise the block must not commit.
        sim = dict(self.catalog)
        for m in block.plan.moves:
            if sim.get(m.src) != m.table_uuid or m.dst in sim:
                break
            sim[m.dst] = sim.pop(m.src)
        else:
            for _, name in block.plan.purged_when_decided:
                sim.pop(name, None)
            block.new = _visible(sim)
            if not block.interfered:
                assert block.new == block.view, (block.new, block.view)  # the plan is the statements
        self._step(initial_state(), Requested(block.plan))

    # --- effects ----------------------------------------------------------------------------

    def _answer(self, outcome: str) -> None:
        effect = self.pending
        if effect is None:
            return
        self.pending = None
        assert self.state is not None and self.block is not None
        plan = self.block.plan
        event: Event
        match effect:
            case CheckPlan():
                event = self._check(plan) if outcome != "failed" else PlanCheckFailed("catalog down")
            case RecordIntent(plan=recorded):
                if outcome == "failed":
                    event = IntentFailed("disk full")
                else:
                    self.intents[plan.token] = (recorded, False)
                    event = IntentRecorded()
            case ApplyMove(index=index):
                event = self._move(plan.moves[index], outcome)
            case UndoMove(index=index):
                if outcome == "failed":
                    event = UndoFailed("catalog down")
                else:
                    self._undo(plan.moves[index])
                    event = UndoApplied()
            case CommitData():
                if outcome in ("aborted", "refused"):
                    event = DataAborted("40001", "could not serialize access")
                elif outcome in ("unknown", "unknown_landed"):
                    if outcome == "unknown_landed":
                        self.landed.add(plan.token)
                    event = DataUnknown("timeout")
                else:
                    self.landed.add(plan.token)
                    event = DataCommitted()
            case RecordDecision():
                if outcome == "failed":
                    event = DecisionFailed("disk full")
                else:
                    self.intents[plan.token] = (plan, True)
                    event = DecisionRecorded()
            case Purge(tables=tables):
                for _, name in tables if outcome != "failed" else tables[:-1]:
                    self.catalog.pop(name, None)
                event = Purged(outcome != "failed" or not tables)
            case ForgetIntent():
                self.intents.pop(plan.token, None)
                event = IntentForgotten()
            case _:
                raise AssertionError(f"unanswerable {effect}")
        self._step(self.state, event)

    def _check(self, plan: CatalogPlan) -> PlanChecked | PlanRefused:
        sim = dict(self.catalog)
        for m in plan.moves:
            if sim.get(m.src) != m.table_uuid or m.dst in sim:
                return PlanRefused("another session's DDL")
            sim[m.dst] = sim.pop(m.src)
        return PlanChecked()

    def _move(self, move: Move, outcome: str) -> MoveApplied | MoveRefused | MoveFailed:
        if self.catalog.get(move.src) != move.table_uuid or move.dst in self.catalog:
            return MoveRefused("another session's DDL")
        if outcome == "refused":
            # The catalog refused the rename itself: another server's DDL came and went between
            # the plan's check and this move (apply_move's NoSuchTable / AlreadyExists).
            return MoveRefused("the catalog refused the rename")
        if outcome == "failed":
            return MoveFailed("timeout, not applied")
        self.catalog[move.dst] = self.catalog.pop(move.src)
        if outcome == "failed_applied":
            return MoveFailed("timeout after applying")
        return MoveApplied()

    def _undo(self, move: Move) -> None:
        if self.catalog.get(move.dst) == move.table_uuid and move.src not in self.catalog:
            self.catalog[move.src] = self.catalog.pop(move.dst)

    # --- crash and recovery -----------------------------------------------------------------

    def _crash(self) -> None:
        """The process dies (a machine in flight is lost) and restarts: every intent recovered."""
        self.pending = None
        self.state = None
        if self.block is not None and self.block.token not in self.intents:
            self.block = None  # staged only in the lost process: nothing of it is in the catalog
        for token, (plan, decided) in sorted(self.intents.items()):
            if self.block is None:
                # Decided or aborted already, its purge failed: the record stayed to purge at the
                # next start, which must change no visible name.
                now = _visible(self.catalog)
                self.block = Block(plan, old=now, view=now, token=token, new=now)
            assert self.block.token == token, "one block at a time"
            if self.block.old is None:  # staged, never committed: the catalog as it stands is the old
                self.block.old = _visible(self.catalog)
            decided = decided or (plan.has_data and token in self.landed)
            state, effects = recover(plan, decided)
            self._record(initial_state(), "Recovered", state, effects)
            self.state = state
            self._absorb(effects)
            while self.pending is not None:
                self._answer("ok")  # (its terminal step checks the verdict)

    # --- stepping ---------------------------------------------------------------------------

    def _step(self, before: State, event: Event) -> None:
        after, effects = step(before, event)
        self._record(before, type(event).__name__, after, effects)
        self.state = after
        self._absorb(effects)
        if after.phase.terminal and after.phase is not Phase.STRANDED:
            self._done()

    def _record(self, before: State, event: str, after: State, effects: list[Effect]) -> None:
        t = self.spec.check_step(before.phase.value, event, after.phase.value,
                                 tuple(type(e).__name__ for e in effects))
        EXERCISED.add(("top", t))
        self.steps.append(("top", t.source, t.event, t.target, t.effects))

    def _absorb(self, effects: list[Effect]) -> None:
        for effect in effects:
            if isinstance(effect, Acknowledge | Abort | ReportStranded):
                self.verdicts.append(type(effect).__name__)
                self.last_verdict = effect
            else:
                assert self.pending is None, "one answered effect at a time"
                self.pending = effect

    def _done(self) -> None:
        """A block reached its verdict: check it, then the next block may start."""
        assert self.state is not None and self.block is not None
        check_verdict(self)
        self.block = None
        self.state = None

    last_verdict: Any = None


def _visible(catalog: dict[str, str]) -> dict[str, str]:
    return {n: u for n, u in catalog.items() if not n.startswith(HIDDEN)}


# --- checkers ------------------------------------------------------------------------------------


def check_verdict(h: CatalogCommitHarness) -> None:
    """At a block's verdict: the whole new state (committed) or the whole old one (aborted)."""
    assert h.state is not None and h.block is not None
    visible = _visible(h.catalog)
    if h.state.phase is Phase.COMMITTED:
        check_acknowledged_means_new(h, visible)
    else:
        check_aborted_means_old(h, visible)


def check_acknowledged_means_new(h: CatalogCommitHarness, visible: dict[str, str] | None = None) -> None:
    if h.state is None or h.state.phase is not Phase.COMMITTED or h.block is None:
        return
    visible = _visible(h.catalog) if visible is None else visible
    assert h.block.new is not None, "a block whose names another session took must not commit"
    assert visible == h.block.new, (visible, h.block.new)
    if h.block.plan.has_data:
        assert h.block.token in h.landed


def check_aborted_means_old(h: CatalogCommitHarness, visible: dict[str, str] | None = None) -> None:
    if h.state is None or h.state.phase is not Phase.ABORTED or h.block is None:
        return
    visible = _visible(h.catalog) if visible is None else visible
    assert visible == h.block.old, (visible, h.block.old)
    assert h.block.token not in h.landed
    if h.block.token not in h.intents:  # a failed purge keeps the record, to purge at the next start
        assert not [n for n in h.catalog if n.startswith(HIDDEN)], h.catalog


def check_whole_old_or_whole_new(h: CatalogCommitHarness) -> None:
    """Outside a COMMIT in flight (and outside a crash not yet recovered) the visible catalog is
    one of the two states."""
    if h.block is None or h.block.old is None or h._busy() or h.intents:
        return
    visible = _visible(h.catalog)
    assert visible == h.block.old or visible == h.block.new, (visible, h.block.old, h.block.new)


def check_nothing_lost_before_the_decision(h: CatalogCommitHarness) -> None:
    if h.block is None or h.block.old is None or h.state is None or h.state.decided:
        return
    present = set(h.catalog.values())
    assert set(h.block.old.values()) <= present, (h.block.old, h.catalog)


def check_intent_outlives_the_work(h: CatalogCommitHarness) -> None:
    hidden = [n for n in h.catalog if n.startswith(HIDDEN)]
    if hidden:
        assert h.intents, f"hidden tables {hidden} with no intent to clean them up"
    if h.block is not None and h.block.old is not None and not h.intents:
        visible = _visible(h.catalog)
        assert visible == h.block.old or visible == h.block.new, "a half-applied block with no intent record"


STEP_CHECKERS = {
    "whole_old_or_whole_new": check_whole_old_or_whole_new,
    "acknowledged_means_new": check_acknowledged_means_new,
    "aborted_means_old": check_aborted_means_old,
    "nothing_lost_before_the_decision": check_nothing_lost_before_the_decision,
    "intent_outlives_the_work": check_intent_outlives_the_work,
}
RUN_CHECKERS = {"every_transition_exercised": check_every_transition_exercised}


def check_step_invariants(h: CatalogCommitHarness) -> None:
    for check in STEP_CHECKERS.values():
        check(h)
