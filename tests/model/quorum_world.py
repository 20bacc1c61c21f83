"""A simulated network of writers and keepers, and the input-driven harness of the quorum model test.

Three acceptors (keepers) and up to three concurrent proposers (writers) exchange messages over a
network that is a bag: any in-flight message may be delivered next (reordering, delay), dropped or
duplicated. Faults arrive as harness inputs, so a recorded input list replays a run exactly:

- an acceptor may crash while it handles a request: before its Persist is durable (nothing of the
  step survives, no reply) or after (durable, no reply); it may crash between requests, keeping
  its disk, and restart from it (`recover_acceptor` over its durable Persist records);
- an acceptor may lose its disk. It then counts as a failed member until it rejoins through a
  catch-up (`icegres keeper --rejoin`: the rejoin core of `icegres.machines.quorum_rejoin`, its
  CatchUp/Snapshot messages crossing the same faulty network, refusing every request until it
  installed the merge); it may crash again mid catch-up and start over. At most a minority of the
  acceptors is lost (or catching up) at a time;
- a proposer may crash at any time (it holds nothing durable) and new ones start at any round;
- the lake is a model of the flush commit: it records the highest writer term that flushed and
  refuses a flush of a lower term (the requirement phase 4 puts in every flush commit), and a
  flush adds the writer's records above the lake's watermark up to the writer's acknowledged slot.

`QuorumHarness.apply(input)` is the single entry point for hypothesis rules and trace replay
alike. Ghost state (every durable acceptance, every acknowledgement) lets the checkers state the
safety properties directly.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from icegres.machines.quorum import (
    NOOP,
    Accept,
    AcceptorMessage,
    AcceptorPhase,
    AcceptorState,
    Acknowledge,
    AppendRequested,
    CatchUp,
    CaughtUp,
    Config,
    Effect,
    Event,
    FromAcceptor,
    Persist,
    Phase,
    Promised,
    ProposerMessage,
    RefuseAppend,
    Refused,
    Replay,
    Reply,
    Send,
    Snapshot,
    State,
    StepDown,
    Term,
    Tick,
    WatermarkAdvanced,
    acceptor_step,
    recover,
    recover_acceptor,
    rejoining_acceptor,
    step,
)
from icegres.machines.quorum_format import decode_frame, encode_frame
from icegres.machines.quorum_rejoin import (
    AskPeer,
    Install,
    RejoinConfig,
    RejoinEffect,
    RejoinEvent,
    RejoinState,
    SnapshotReceived,
    rejoin_step,
    start_rejoin,
)
from tests.model.scaffold import Exercised, check_every_transition_exercised
from tests.model.trace import Spec, load_spec, load_spec_section

ACCEPTORS = 3
MAJORITY = ACCEPTORS // 2 + 1
PROPOSERS_MAX = 3
DISK_LOSSES_MAX = ACCEPTORS - MAJORITY  # a minority
SETTLE_STEPS_MAX = 600
MODEL_CONFIG = Config(
    acceptors=ACCEPTORS, retry_ticks=2, election_attempts_max=3, batch_records_max=3
)

# Every spec transition any harness took in this process, by level ("top" or "acceptor").
EXERCISED: Exercised = set()


def load_specs() -> tuple[Spec, Spec]:
    """specs/quorum.toml: the writer's phases and its [acceptor] section (same file, same hash)."""
    top = load_spec("quorum")
    return top, load_spec_section(top, "acceptor")


REJOIN_SPEC = load_spec_section(load_spec("quorum"), "rejoin")
REJOIN_CONFIG = RejoinConfig(peers=ACCEPTORS - 1, retry_ticks=2)


def peers_of(index: int) -> list[int]:
    """The acceptor indices a rejoining acceptor numbers 0.. as its peers (--rejoin's order)."""
    return [i for i in range(ACCEPTORS) if i != index]


def collapse(names: tuple[str, ...]) -> tuple[str, ...]:
    """The spec writes a run of the same effect once: ("Send", "Send", "Send") -> ("Send",)."""
    out: list[str] = []
    for name in names:
        if not out or out[-1] != name:
            out.append(name)
    return tuple(out)


# --- the world -----------------------------------------------------------------------------------


@dataclass
class SimAcceptor:
    state: AcceptorState | None = field(default_factory=AcceptorState)  # None: down
    disk: list[Persist] = field(default_factory=list)  # durable, in order
    lost: bool = False  # lost its disk: a failed member until a catch-up installed
    incarnation: int = 0  # ghost: disks lost so far (a new one after each)
    rejoin: RejoinState | None = None  # the catch-up in progress
    # Ghost: the snapshots the catch-up's second round used, by peer index.
    snapshots: dict[int, Snapshot] = field(default_factory=dict)


@dataclass
class SimProposer:
    pid: int
    state: State
    # The records this writer may flush: what it replayed plus what it acknowledged (the write
    # buffer of icegres). Dropped once in the lake.
    buffer: dict[int, bytes] = field(default_factory=dict)
    recovery: dict[int, bytes] | None = None  # what it re-proposed on winning (ghost)
    recovery_term: Term = Term(0, "")  # the term that won it
    start: int = 0  # recovery began above this slot
    # The highest slot it replayed or acknowledged: what it may flush up to (never a slot its
    # recovery settled before it served: it has no records for them).
    flushable: int = 0
    stepped_down: bool = False
    # Ghost: acceptor -> (term, incarnation) of the promise it sent for that term.
    promise_from: dict[int, tuple[Term, int]] = field(default_factory=dict)


@dataclass(frozen=True)
class Wire:
    """A message in flight: to an acceptor (a request) or back to a proposer (an answer)."""

    pid: int  # a writer; negative: the catch-up of acceptor -pid - 1
    acceptor: int
    to_acceptor: bool
    frame: bytes  # every message crosses the wire encoded: the codec is exercised too
    incarnation: int = 0  # ghost: of the acceptor that sent an answer


@dataclass
class Lake:
    watermark: int = 0
    term: Term = Term(0, "")
    records: dict[int, bytes] = field(default_factory=dict)
    watermarks: list[int] = field(default_factory=list)


class QuorumHarness:
    def __init__(self, spec: Spec, acceptor_spec: Spec) -> None:
        self.spec = spec
        self.acceptor_spec = acceptor_spec
        self.inputs: list[dict[str, Any]] = []
        self.steps: list[tuple[str, str, str, str, tuple[str, ...]]] = []  # level first
        self.acceptors = [SimAcceptor() for _ in range(ACCEPTORS)]
        self.proposers: dict[int, SimProposer] = {}
        self.next_pid = 1
        self.net: list[Wire] = []
        self.lake = Lake()
        self.payloads = 0
        self.appended: set[bytes] = set()
        # Ghosts: (slot, term) -> (value, acceptors whose current incarnation durably accepted it,
        # acceptors any incarnation of which did). A disk loss takes the acceptor out of the first
        # set: its votes are gone, and only the first set can make a value chosen from then on.
        self.votes: dict[tuple[int, Term], tuple[bytes, set[int], set[int]]] = {}
        self.chosen: dict[int, tuple[bytes, Term]] = {}  # slot -> (value, lowest term chosen in)
        self.acked: dict[int, bytes] = {}
        self.acked_terms: dict[int, Term] = {}  # slot -> the lowest term that acknowledged it
        self.flushed_terms: list[Term] = []
        # Ghost: acceptor -> terms that won with a promise of an incarnation since wiped, while
        # that acceptor had not rejoined yet (its catch-up must adopt at least each).
        self.stale_wins: dict[int, list[Term]] = {}
        self.rejoins_installed = 0
        self._event: Event | None = None
        self.settled = False
        self.violations: dict[str, list[str]] = {}

    # The one entry point.

    def apply(self, inp: dict[str, Any]) -> None:
        self.inputs.append(inp)
        handler = getattr(self, f"_op_{inp['op']}", None)
        if handler is None:
            raise ValueError(f"unknown input op {inp['op']!r}")
        handler(inp)
        check_step_invariants(self)

    def _violate(self, name: str, message: str) -> None:
        self.violations.setdefault(name, []).append(message)

    # Queries hypothesis rules use to build valid inputs.

    def live(self) -> list[SimProposer]:
        return [self.proposers[pid] for pid in sorted(self.proposers)]

    def leading(self) -> list[SimProposer]:
        return [p for p in self.live() if p.state.phase is Phase.LEADING]

    def _pick(self, pool: list[SimProposer], which: int) -> SimProposer | None:
        return pool[which % len(pool)] if pool else None

    # Inputs: writers.

    def _op_start(self, inp: dict[str, Any]) -> None:
        if len(self.proposers) >= PROPOSERS_MAX:
            return
        pid = self.next_pid
        self.next_pid += 1
        state, effects = recover(
            MODEL_CONFIG, f"w{pid}", round=inp.get("round", 1), watermark=self.lake.watermark
        )
        proposer = SimProposer(pid, state)
        self.proposers[pid] = proposer
        self._record_top(State(config=MODEL_CONFIG, writer=f"w{pid}"), "Started", state, effects)
        self._perform(proposer, State(config=MODEL_CONFIG), effects)

    def _op_append(self, inp: dict[str, Any]) -> None:
        pool = self.leading() if inp.get("leading", True) else self.live()
        proposer = self._pick(pool, inp.get("p", 0))
        if proposer is None:
            return
        if proposer.state.phase not in (Phase.LEADING, Phase.FENCED):
            return  # the driver waits for the election before appending
        self.payloads += 1
        payload = f"r{self.payloads}".encode()
        self.appended.add(payload)
        self._step(proposer, AppendRequested(payload))

    def _op_tick(self, inp: dict[str, Any]) -> None:
        proposer = self._pick(self.live(), inp.get("p", 0))
        if proposer is not None and proposer.state.phase is not Phase.STARTING:
            self._step(proposer, Tick())
        for index, acceptor in enumerate(self.acceptors):
            if acceptor.rejoin is not None:
                self._rejoin_step(index, Tick())

    def _op_crash_proposer(self, inp: dict[str, Any]) -> None:
        proposer = self._pick(self.live(), inp.get("p", 0))
        if proposer is not None:
            del self.proposers[proposer.pid]

    def _op_flush(self, inp: dict[str, Any]) -> None:
        """A writer commits its buffered records to the lake (one atomic, fenced commit)."""
        pool = [p for p in self.live() if p.state.phase in (Phase.LEADING, Phase.FENCED)]
        proposer = self._pick(pool, inp.get("p", 0))
        if proposer is not None:
            self._flush(proposer, deliver=inp.get("deliver", True))

    def _flush(self, proposer: SimProposer, *, deliver: bool) -> bool:
        lake = self.lake
        term = proposer.state.term
        if term < lake.term:
            return False  # the commit's requirement: no lower term after a higher one flushed
        top = proposer.flushable
        if top > lake.watermark:
            for slot in range(lake.watermark + 1, top + 1):
                if slot in proposer.buffer:
                    if slot in lake.records:
                        self._violate("lake_exactly_once", f"slot {slot} committed twice")
                    lake.records[slot] = proposer.buffer[slot]
            lake.watermark = top
            lake.watermarks.append(top)
        self.flushed_terms.append(term)
        lake.term = term
        proposer.buffer = {s: p for s, p in proposer.buffer.items() if s > lake.watermark}
        if deliver:
            self._step(proposer, WatermarkAdvanced(min(lake.watermark, proposer.flushable)))
        return True

    # Inputs: the network.

    def _op_deliver(self, inp: dict[str, Any]) -> None:
        if not self.net:
            return
        wire = self.net[inp.get("i", 0) % len(self.net)]
        fault = inp.get("fault", "ok")
        if fault == "drop":
            self.net.remove(wire)
            return
        if fault != "duplicate":
            self.net.remove(wire)
        self._deliver(wire, fault)

    def _deliver(self, wire: Wire, fault: str) -> None:
        message, end = decode_frame(wire.frame)
        assert end == len(wire.frame)
        if not wire.to_acceptor:
            if wire.pid < 0:
                self._deliver_to_rejoiner(-wire.pid - 1, wire.acceptor, message)
                return
            proposer = self.proposers.get(wire.pid)
            if isinstance(message, Refused):
                return  # the driver logs it: no vote, no promise, no fence
            if proposer is not None:
                if isinstance(message, Promised) and message.term == proposer.state.term:
                    proposer.promise_from[wire.acceptor] = (message.term, wire.incarnation)
                self._step(proposer, FromAcceptor(wire.acceptor, message))  # type: ignore[arg-type]
            return
        acceptor = self.acceptors[wire.acceptor]
        if acceptor.state is None:
            return  # down: the message is lost
        before = acceptor.state
        after, effects = acceptor_step(before, message)  # type: ignore[arg-type]
        self._record_acceptor(before, type(message).__name__, after, effects)
        if before.phase is AcceptorPhase.CATCHING_UP:
            replies = [e.message for e in effects if isinstance(e, Reply)]
            if any(not isinstance(r, Refused) for r in replies) or after != before:
                self._violate(
                    "rejoin_catches_up_first",
                    f"acceptor {wire.acceptor} answered {replies} while catching up",
                )
        persists = [e for e in effects if isinstance(e, Persist)]
        if fault == "crash_before_persist" and persists:
            acceptor.state = None  # the step's changes never reached the disk
            acceptor.rejoin = None
            return
        acceptor.state = after
        for persist in persists:
            self._persist(wire.acceptor, persist)
        if fault == "crash_after_persist":
            acceptor.state = None
            acceptor.rejoin = None
            return
        if isinstance(message, Accept) and after.promised == message.term:
            # Accepted: the reply vouches for every slot it holds in that term, a duplicate it held
            # already included. A catch-up's copy answers such a duplicate too (its promise is
            # that term, so it holds exactly what accepting would have written): a vote, as the
            # writer counts it.
            for slot in range(message.first_slot, message.last_slot + 1):
                entry = after.accepted.get(slot)
                if entry is not None and entry.term == message.term:
                    self._vote(wire.acceptor, entry)
        for effect in effects:
            if isinstance(effect, Reply):
                frame = encode_frame(effect.message)
                self._send(Wire(wire.pid, wire.acceptor, False, frame, acceptor.incarnation))

    def _persist(self, index: int, persist: Persist, *, vote: bool = True) -> None:
        self.acceptors[index].disk.append(persist)
        if not vote:
            return  # a catch-up's copies: held, but never an acceptance (no Accepted is sent)
        for entry in persist.entries:
            self._vote(index, entry)

    def _vote(self, index: int, entry: Any) -> None:
        """Acceptor `index` durably holds `entry` and has said so (or is about to)."""
        key = (entry.slot, entry.term)
        value, who, ever = self.votes.setdefault(key, (entry.payload, set(), set()))
        if value != entry.payload:
            self._violate(
                "one_value_per_slot", f"term {entry.term} proposed two values for {entry.slot}"
            )
        who.add(index)
        ever.add(index)
        if len(who) >= MAJORITY:
            self._choose(entry.slot, value, entry.term)

    def _choose(self, slot: int, value: bytes, term: Term) -> None:
        chosen = self.chosen.get(slot)
        if chosen is not None and chosen[0] != value:
            self._violate(
                "one_value_per_slot",
                f"slot {slot}: {value!r} chosen in {term} after {chosen[0]!r} in {chosen[1]}",
            )
        if chosen is None or term < chosen[1]:
            self.chosen[slot] = (value, term)

    def _send(self, wire: Wire) -> None:
        self.net.append(wire)

    # Inputs: acceptors.

    def _op_crash_acceptor(self, inp: dict[str, Any]) -> None:
        acceptor = self.acceptors[inp.get("a", 0) % ACCEPTORS]
        acceptor.state = None
        acceptor.rejoin = None  # a catch-up dies with its process (nothing of it was durable)
        lost = sum(a.lost for a in self.acceptors)
        if inp.get("disk") and not acceptor.lost and lost < DISK_LOSSES_MAX:
            acceptor.lost = True
            acceptor.disk = []
            acceptor.incarnation += 1
            index = inp.get("a", 0) % ACCEPTORS
            for _, who, _ in self.votes.values():
                who.discard(index)  # what was chosen stays chosen; its other votes are gone

    def _op_rejoin_acceptor(self, inp: dict[str, Any]) -> None:
        """`icegres keeper --rejoin`: a lost acceptor starts catching up from the others."""
        index = inp.get("a", 0) % ACCEPTORS
        acceptor = self.acceptors[index]
        if not acceptor.lost or acceptor.state is not None:
            return  # a member with its disk restarts normally; a running catch-up goes on
        acceptor.state = rejoining_acceptor()
        acceptor.snapshots = {}
        state, effects = start_rejoin(REJOIN_CONFIG)
        acceptor.rejoin = state
        self._record_rejoin(None, "Started", state, effects)
        self._perform_rejoin(index, effects)

    def _rejoin_step(self, index: int, event: RejoinEvent) -> None:
        acceptor = self.acceptors[index]
        before = acceptor.rejoin
        assert before is not None
        after, effects = rejoin_step(before, event)
        acceptor.rejoin = after
        self._record_rejoin(before, type(event).__name__, after, effects)
        fetching = before.phase.value == "fetching"
        if (
            fetching
            and isinstance(event, SnapshotReceived)
            and event.snapshot.rejoins >= before.target
        ):
            acceptor.snapshots[event.peer] = event.snapshot
        self._perform_rejoin(index, effects)

    def _deliver_to_rejoiner(self, index: int, sender: int, message: Any) -> None:
        acceptor = self.acceptors[index]
        if acceptor.rejoin is None or not isinstance(message, Snapshot):
            return  # the catch-up died or finished; a Refused from a peer catching up itself
        self._rejoin_step(index, SnapshotReceived(peers_of(index).index(sender), message))

    def _perform_rejoin(self, index: int, effects: list[RejoinEffect]) -> None:
        for effect in effects:
            if isinstance(effect, AskPeer):
                peer = peers_of(index)[effect.peer]
                self._send(Wire(-index - 1, peer, True, encode_frame(effect.message)))
            else:
                self._install(index, effect)

    def _install(self, index: int, install: Install) -> None:
        acceptor = self.acceptors[index]
        before = acceptor.state
        assert before is not None and before.phase is AcceptorPhase.CATCHING_UP
        after, effects = acceptor_step(before, CaughtUp(install.state))
        self._record_acceptor(before, "CaughtUp", after, effects)
        self._check_install(index, install, after)
        # The keeper writes the merge as its first log, atomically, before it answers anyone.
        for effect in effects:
            if isinstance(effect, Persist):
                self._persist(index, effect, vote=False)
        acceptor.state = after
        acceptor.lost = False
        acceptor.rejoin = None
        self.rejoins_installed += 1

    def _check_install(self, index: int, install: Install, after: AcceptorState) -> None:
        """rejoin_catches_up_first and rejoin_keeps_promises, at the moment it would serve."""
        name = "rejoin_catches_up_first"
        acceptor = self.acceptors[index]
        target = acceptor.rejoin.target if acceptor.rejoin is not None else 0
        used = {p: acceptor.snapshots[p] for p in install.peers}
        if len(used) < REJOIN_CONFIG.needed or target < 1:
            self._violate(name, f"acceptor {index} installed from {sorted(used)} at {target}")
        if any(s.rejoins < target for s in used.values()):
            self._violate(name, f"acceptor {index} merged a snapshot below the target {target}")
        # The merge, computed here independently of quorum_rejoin.merge.
        promised = max(s.promised for s in used.values())
        trimmed = max(s.trimmed for s in used.values())
        best: dict[int, Any] = {}
        for snap in used.values():
            for e in snap.entries:
                if e.slot > trimmed and (e.slot not in best or e.term > best[e.slot].term):
                    best[e.slot] = e
        if (after.promised, after.trimmed, dict(after.accepted)) != (promised, trimmed, best):
            self._violate(name, f"acceptor {index} installed something else than the merge")
        if after.rejoins < target:
            self._violate(name, f"acceptor {index} installed count {after.rejoins} < {target}")
        stale = self.stale_wins.pop(index, [])
        if stale and after.promised < max(stale):
            self._violate(
                "rejoin_keeps_promises",
                f"acceptor {index} rejoined with promise {after.promised} below term "
                f"{max(stale)}, which won with its lost incarnation's promise",
            )

    def _op_restart_acceptor(self, inp: dict[str, Any]) -> None:
        acceptor = self.acceptors[inp.get("a", 0) % ACCEPTORS]
        if acceptor.state is None and not acceptor.lost:
            acceptor.state = recover_acceptor(acceptor.disk)

    # Liveness, then the end-to-end check.

    def _op_settle(self, inp: dict[str, Any]) -> None:
        """No more faults: every writer dies, the keepers come back, a fresh writer is elected,
        recovers, replays into the lake; the lake must then hold every acknowledged record once."""
        self.proposers.clear()
        for index in range(ACCEPTORS):
            self._op_restart_acceptor({"a": index})
        # What the dead writers left in flight still arrives; answers to them go nowhere. A
        # catch-up under way finishes (its peers are up now; it asks again on its ticks). The
        # bound is the catch-up's, after the backlog: each message in flight is delivered and
        # answered at most once here (hundreds of resent Accepts queue up in a long run).
        for _ in range(2 * len(self.net) + SETTLE_STEPS_MAX):
            if self.net:
                self._deliver(self.net.pop(0), "ok")
            elif any(a.rejoin is not None for a in self.acceptors):
                for index, acceptor in enumerate(self.acceptors):
                    if acceptor.rejoin is not None:
                        self._rejoin_step(index, Tick())
            else:
                break
        if any(a.rejoin is not None for a in self.acceptors):
            raise AssertionError("a catch-up did not finish with every other keeper up")
        # A replacement writer may still be fenced by a promise a dead writer left behind on an
        # acceptor it had not heard from when it started serving; the failover supervisor then
        # starts another above the term that fenced it (its StepDown names it). Alone, each one
        # outbids at least one more acceptor's promise.
        config = replace(MODEL_CONFIG, election_attempts_max=ACCEPTORS + 1)
        round_ = 1
        for _ in range(ACCEPTORS + 1):
            fresh = self._start_settling_writer(config, round_)
            if fresh.state.phase is Phase.LEADING:
                break
            round_ = fresh.state.highest_seen.round + 1
            del self.proposers[fresh.pid]
        if fresh.state.phase is not Phase.LEADING:
            raise AssertionError(f"a lone writer did not get elected: {fresh.state.phase}")
        if not self._flush(fresh, deliver=True):
            raise AssertionError("the lake refused the only live writer's flush")
        self.settled = True
        name = "lake_exactly_once"
        for slot, payload in self.acked.items():
            if self.lake.records.get(slot) != payload:
                self._violate(
                    name, f"acked slot {slot} is {self.lake.records.get(slot)!r} in the lake"
                )
        if len(set(self.lake.records.values())) != len(self.lake.records):
            self._violate(name, "a record is in the lake twice")

    def _start_settling_writer(self, config: Config, round_: int) -> SimProposer:
        pid = self.next_pid
        self.next_pid += 1
        state, effects = recover(config, f"w{pid}", round=round_, watermark=self.lake.watermark)
        fresh = SimProposer(pid, state)
        self.proposers[pid] = fresh
        self._record_top(State(config=config), "Started", state, effects)
        self._perform(fresh, State(config=config), effects)
        for _ in range(SETTLE_STEPS_MAX):
            if fresh.state.phase in (Phase.LEADING, Phase.FENCED) and not self.net:
                break
            if self.net:
                self._deliver(self.net.pop(0), "ok")
            else:
                self._step(fresh, Tick())
        return fresh

    def _op_expect(self, inp: dict[str, Any]) -> None:
        """An assertion written into hand-made traces."""
        if "phases" in inp:
            got = [p.state.phase.value for p in self.live()]
            assert got == inp["phases"], (got, inp)
        if "acked" in inp:
            assert sorted(self.acked) == inp["acked"], sorted(self.acked)
        if "lake" in inp:
            assert sorted(self.lake.records) == inp["lake"], sorted(self.lake.records)

    # Stepping the cores, checked against the spec.

    def _step(self, proposer: SimProposer, event: Event) -> None:
        before = proposer.state
        self._event = event
        after, effects = step(before, event)
        name = (
            type(event.message).__name__
            if isinstance(event, FromAcceptor)
            else type(event).__name__
        )
        self._record_top(before, name, after, effects)
        proposer.state = after
        self._perform(proposer, before, effects)

    def _record_top(self, before: State, event: str, after: State, effects: list[Effect]) -> None:
        names = collapse(tuple(type(e).__name__ for e in effects))
        t = self.spec.check_step(before.phase.value, event, after.phase.value, names)
        EXERCISED.add(("top", t))
        self.steps.append(("top", before.phase.value, event, after.phase.value, names))

    def _record_acceptor(
        self, before: AcceptorState, event: str, after: AcceptorState, effects: list[Any]
    ) -> None:
        names = tuple(type(e).__name__ for e in effects)
        source, target = before.phase.value, after.phase.value
        t = self.acceptor_spec.check_step(source, event, target, names)
        EXERCISED.add(("acceptor", t))
        self.steps.append(("acceptor", source, event, target, names))

    def _record_rejoin(
        self, before: RejoinState | None, event: str, after: RejoinState, effects: list[Any]
    ) -> None:
        names = collapse(tuple(type(e).__name__ for e in effects))
        if before is None:  # start_rejoin: the initial state, asking every peer
            assert after.phase.value == REJOIN_SPEC.initial and names == ("AskPeer",), names
            return
        t = REJOIN_SPEC.check_step(before.phase.value, event, after.phase.value, names)
        EXERCISED.add(("rejoin", t))
        self.steps.append(("rejoin", before.phase.value, event, after.phase.value, names))

    def _perform(self, proposer: SimProposer, before: State, effects: list[Effect]) -> None:
        state = proposer.state
        if before.phase is Phase.ELECTING and state.phase in (Phase.RECOVERING, Phase.LEADING):
            self._on_won(proposer, state, before)
        for effect in effects:
            match effect:
                case Send(acceptor=acceptor, message=message):
                    self._send(Wire(proposer.pid, acceptor, True, encode_frame(message)))
                case Acknowledge(first_slot=first, last_slot=last):
                    for slot in range(first, last + 1):
                        self._on_ack(proposer, slot, before.inflight[slot])
                case Replay(records=records, through=through):
                    # Recovery re-proposed them and counted a majority in this term, like an
                    # acknowledgement: they are chosen (possibly with a vote of an incarnation
                    # that has lost its disk since, which chosen_never_lost then watches).
                    for slot, payload in records:
                        if slot <= self.lake.watermark:
                            continue  # a keeper that trimmed it answered for the lake, no vote
                        vote = self.votes.get((slot, state.term))
                        if vote is None or vote[0] != payload or len(vote[2]) < MAJORITY:
                            self._violate(
                                "lake_exactly_once", f"{state.term} replays {slot} unchosen"
                            )
                        else:
                            self._choose(slot, payload, state.term)
                    proposer.buffer.update(records)
                    proposer.flushable = through
                case StepDown():
                    proposer.stepped_down = True
                case RefuseAppend():
                    pass
                case _:
                    raise AssertionError(f"unknown effect {effect!r}")

    def _on_won(self, proposer: SimProposer, state: State, before: State) -> None:
        # rejoin_keeps_promises: the promises it won with, and which incarnation made each.
        quorum = set(before.promises)
        if isinstance(self._event, FromAcceptor):
            quorum.add(self._event.acceptor)
        for index in quorum:
            term, incarnation = proposer.promise_from.get(index, (None, 0))
            acceptor = self.acceptors[index]
            if term != state.term or incarnation == acceptor.incarnation:
                continue
            if acceptor.lost:  # not rejoined yet: its catch-up must adopt at least this term
                self.stale_wins.setdefault(index, []).append(state.term)
            elif recover_acceptor(acceptor.disk).promised < state.term:
                self._violate(
                    "rejoin_keeps_promises",
                    f"writer {state.term} won with a promise of acceptor {index}'s lost "
                    "incarnation, which its rejoined state does not hold",
                )
        proposer.start = state.watermark
        proposer.recovery = dict(state.inflight)
        proposer.recovery_term = state.term
        # Paxos promises this for values chosen in lower terms only: a higher term may be choosing
        # values while this one collects promises, and will reject this one's accepts.
        for slot, payload in self.acked.items():
            if self.acked_terms[slot] > state.term:
                continue
            if slot > proposer.start and proposer.recovery.get(slot) != payload:
                self._violate(
                    "new_term_recovers_acked",
                    f"writer {state.term} won without acked slot {slot} ({payload!r}): it "
                    f"recovered {proposer.recovery.get(slot)!r}",
                )
        for slot, (value, chosen_in) in self.chosen.items():
            if (
                chosen_in < state.term
                and slot > proposer.start
                and proposer.recovery.get(slot) != value
            ):
                self._violate(
                    "chosen_never_lost", f"writer {state.term} did not recover chosen slot {slot}"
                )

    def _on_ack(self, proposer: SimProposer, slot: int, payload: bytes) -> None:
        term = proposer.state.term
        if proposer.stepped_down:
            self._violate("fenced_writer_acks_nothing", f"{term} acked {slot} after stepping down")
        if payload == NOOP:
            self._violate("acked_only_when_chosen", f"a no-op acknowledged at {slot}")
        # Every Accepted the writer counted came from a durable vote of some incarnation; whether
        # the record survives the incarnations that since lost their disks is chosen_never_lost's
        # to check, from the moment of the acknowledgement (which makes it chosen).
        vote = self.votes.get((slot, term))
        if vote is None or vote[0] != payload or len(vote[2]) < MAJORITY:
            self._violate("acked_only_when_chosen", f"{term} acked {slot} without a majority")
        else:
            self._choose(slot, payload, term)
        if self.acked.get(slot, payload) != payload:
            self._violate("acked_only_when_chosen", f"slot {slot} acked with two records")
        self.acked[slot] = payload
        self.acked_terms[slot] = min(term, self.acked_terms.get(slot, term))
        proposer.buffer[slot] = payload
        proposer.flushable = max(proposer.flushable, slot)
        for other in self.proposers.values():
            if other.recovery is None or other.recovery_term <= term:
                continue
            if slot > other.start and other.recovery.get(slot) != payload:
                self._violate(
                    "fenced_writer_acks_nothing",
                    f"{term} acked slot {slot} that the higher term {other.recovery_term} did not "
                    "recover",
                )

    def message_of(self, wire: Wire) -> ProposerMessage | AcceptorMessage:
        return decode_frame(wire.frame)[0]  # type: ignore[return-value]


# --- invariants ----------------------------------------------------------------------------------


def _no_violations(name: str) -> Callable[[QuorumHarness], None]:
    def check(h: QuorumHarness) -> None:
        assert not h.violations.get(name), f"{name}: {h.violations[name]}"

    return check


def check_chosen_never_lost(h: QuorumHarness) -> None:
    _no_violations("chosen_never_lost")(h)
    can_answer = [i for i, a in enumerate(h.acceptors) if not a.lost]
    durables = {i: recover_acceptor(h.acceptors[i].disk) for i in can_answer}
    for slot, (value, term) in h.chosen.items():
        holders = set()
        for i in can_answer:
            durable = durables[i]
            entry = durable.accepted.get(slot)
            if entry is not None and entry.term >= term:
                assert entry.payload == value, (
                    f"acceptor {i} holds {entry.payload!r} at chosen slot {slot} ({value!r}) "
                    f"in term {entry.term} >= {term}"
                )
                holders.add(i)
            elif durable.trimmed >= slot:
                assert slot <= h.lake.watermark, f"slot {slot} trimmed above the lake watermark"
                holders.add(i)
        # Every majority of the acceptors that can still answer must meet a holder.
        assert len(holders) > len(can_answer) - MAJORITY, (
            f"chosen slot {slot} ({value!r}) is held by {sorted(holders)} only: a majority of "
            f"{can_answer} could miss it"
        )


def check_acked_only_when_chosen(h: QuorumHarness) -> None:
    _no_violations("acked_only_when_chosen")(h)
    for slot, payload in h.acked.items():
        assert h.chosen.get(slot, (None,))[0] == payload, f"acked slot {slot} is not chosen"


def check_fenced_writer_acks_nothing(h: QuorumHarness) -> None:
    _no_violations("fenced_writer_acks_nothing")(h)
    terms = h.flushed_terms
    assert all(a <= b for a, b in zip(terms, terms[1:], strict=False)), (
        f"the lake took a flush of a lower term after a higher one: {terms}"
    )


def check_lake_exactly_once(h: QuorumHarness) -> None:
    _no_violations("lake_exactly_once")(h)
    marks = h.lake.watermarks
    assert all(a < b for a, b in zip(marks, marks[1:], strict=False)), marks
    for slot, payload in h.lake.records.items():
        assert slot <= h.lake.watermark
        assert payload in h.appended, f"lake slot {slot} holds a record nobody appended"
        assert h.chosen.get(slot, (None,))[0] == payload, f"lake slot {slot} is not chosen"
    assert len(set(h.lake.records.values())) == len(h.lake.records), "a record twice in the lake"


def check_rejoin_catches_up_first(h: QuorumHarness) -> None:
    _no_violations("rejoin_catches_up_first")(h)
    for index, acceptor in enumerate(h.acceptors):
        catching_up = (
            acceptor.state is not None and acceptor.state.phase is AcceptorPhase.CATCHING_UP
        )
        assert catching_up == (acceptor.rejoin is not None), f"acceptor {index}: {acceptor}"
        if acceptor.lost:
            assert not acceptor.disk, f"acceptor {index} wrote its log before its catch-up ended"


def check_spec_transitions_only(h: QuorumHarness) -> None:
    specs = {"top": h.spec, "acceptor": h.acceptor_spec, "rejoin": REJOIN_SPEC}
    allowed = {
        level: {(t.source, t.event, t.target, t.effects) for t in spec.transitions}
        for level, spec in specs.items()
    }
    stray = [s for s in h.steps if s[1:] not in allowed[s[0]]]
    assert not stray, f"steps outside the spec: {stray}"


STEP_CHECKERS: dict[str, Callable[[QuorumHarness], None]] = {
    "one_value_per_slot": _no_violations("one_value_per_slot"),
    "chosen_never_lost": check_chosen_never_lost,
    "acked_only_when_chosen": check_acked_only_when_chosen,
    "new_term_recovers_acked": _no_violations("new_term_recovers_acked"),
    "fenced_writer_acks_nothing": check_fenced_writer_acks_nothing,
    "lake_exactly_once": check_lake_exactly_once,
    "rejoin_catches_up_first": check_rejoin_catches_up_first,
    "rejoin_keeps_promises": _no_violations("rejoin_keeps_promises"),
    "spec_transitions_only": check_spec_transitions_only,
}
RUN_CHECKERS: dict[str, Callable[..., None]] = {
    "every_transition_exercised": check_every_transition_exercised,
}


def check_step_invariants(h: QuorumHarness) -> None:
    for check in STEP_CHECKERS.values():
        check(h)


__all__ = [
    "EXERCISED",
    "REJOIN_SPEC",
    "RUN_CHECKERS",
    "STEP_CHECKERS",
    "QuorumHarness",
    "check_step_invariants",
    "collapse",
    "load_specs",
]

_ = (Accept, CatchUp)  # re-exported for hand-written tests
