"""The catch-up of a keeper that lost its disk (`icegres keeper --rejoin`): a pure core, no I/O.

A wiped acceptor has forgotten the terms it promised and the records it accepted. Coming back
empty is unsafe twice over (docs/quorum-protocol.md, "Replacing a keeper that lost its disk"): it
could accept below a term it promised, and a record chosen by {it, X} would be held by X alone.
So it serves nothing (`AcceptorPhase.CATCHING_UP`, every request `Refused`) until this core has
merged the state of enough of the other members and the keeper has made the merge durable.

How many: `peers_needed(members) = members - majority(members) + 1` of the other members. Every
majority that counted the wiped acceptor holds `majority - 1` others; a set of others of this size
meets every such set, so it meets every quorum the old incarnation voted in. For 3 keepers: both
others. For 5: three of the four others.

Two rounds, because the snapshot and the raise of each peer's rejoin count must be one step on
that peer (see `quorum._acceptor_catch_up`) and the count to raise to must exceed every count the
old incarnation could have promised with:

1. ASKING: `CatchUp(0)` to every peer; the answers' `rejoins` give the counts in use. Their
   maximum is at least the old incarnation's count (every raise of a count reaches at least
   `peers_needed` members besides the rejoiner, so a wiped keeper's count survives on another).
2. FETCHING: `CatchUp(target)` with `target = max + 1`. Each peer raises its count to the target
   durably and answers with its snapshot. Answers below the target (round one's, delayed) are
   ignored.
3. Once `peers_needed` snapshots at the target are in: `Install(merge(...))`. The merge takes the
   highest promise, trim point and count, and per slot above the trim point the entry of the
   highest term. The keeper persists it (fsync) and only then serves.

Why that is enough: a writer counts only promises of one rejoin count (`quorum._on_promised`).
A promise the old incarnation made with count k can only complete a majority with promises of
count k from the others; a peer that answered round two promises with count >= target > k after
its snapshot, so a matching promise was made before its snapshot, and the merge adopts it. Votes
likewise (`quorum._on_accepted`): an Accepted of the old incarnation only pairs with a peer's vote
made before its snapshot, so the merge holds that record. Records:
a chosen record is held, in a term at or above the one it was chosen in, by some member of every
set of `peers_needed` others, and the highest-term entry per slot is the chosen value (Paxos: every
accepted entry at a term at or above the chosen one carries the chosen value).

Time enters as `Tick`: every `retry_ticks` ticks unanswered peers are asked again (the driver
reconnects dropped links; asking twice is harmless, the raise is idempotent).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from enum import Enum
from typing import Any

from icegres.machines.quorum import (
    ZERO_TERM,
    AcceptorPhase,
    AcceptorState,
    CatchUp,
    Entry,
    QuorumProtocolError,
    Snapshot,
    Tick,
)

__all__ = [
    "AskPeer",
    "Install",
    "RejoinConfig",
    "RejoinEffect",
    "RejoinEvent",
    "RejoinPhase",
    "RejoinState",
    "SnapshotReceived",
    "merge",
    "peers_needed",
    "rejoin_step",
    "start_rejoin",
]


def peers_needed(members: int) -> int:
    """How many of the other members a rejoining one must hear from: members - majority + 1."""
    if members < 2:
        raise ValueError("a keeper can only rejoin a quorum of at least 2 members")
    return members - (members // 2 + 1) + 1


@dataclass(frozen=True)
class RejoinConfig:
    peers: int  # the other members, numbered 0..peers-1 (the order of --rejoin)
    retry_ticks: int = 2

    def __post_init__(self) -> None:
        if self.peers < 1 or self.retry_ticks < 1:
            raise ValueError("a rejoin needs at least one peer and retry_ticks >= 1")

    @property
    def members(self) -> int:
        return self.peers + 1

    @property
    def needed(self) -> int:
        return peers_needed(self.members)


class RejoinPhase(Enum):
    ASKING = "asking"  # round one: learning the peers' rejoin counts
    FETCHING = "fetching"  # round two: raising them to the target, collecting snapshots
    DONE = "done"  # the merge was handed out for installing; the catch-up is over


@dataclass(frozen=True)
class RejoinState:
    config: RejoinConfig
    phase: RejoinPhase = RejoinPhase.ASKING
    target: int = 0  # the rejoin count asked for (0 in round one: only asks)
    answers: Mapping[int, Snapshot] = field(default_factory=dict)  # this round's, by peer
    ticks: int = 0


@dataclass(frozen=True)
class SnapshotReceived:
    peer: int
    snapshot: Snapshot


RejoinEvent = SnapshotReceived | Tick


@dataclass(frozen=True)
class AskPeer:
    """Send `message` to peer number `peer` (best effort: unanswered peers are asked again)."""

    peer: int
    message: CatchUp


@dataclass(frozen=True)
class Install:
    """Make `state` durable (fsync) and only then answer proposers from it."""

    state: AcceptorState
    peers: tuple[int, ...]  # whose snapshots it merges (for the log and the model's checks)


RejoinEffect = AskPeer | Install


def start_rejoin(config: RejoinConfig) -> tuple[RejoinState, list[RejoinEffect]]:
    """Round one: ask every peer for its rejoin count (and state; only the counts are used)."""
    state = RejoinState(config=config)
    return state, [AskPeer(p, CatchUp(0)) for p in range(config.peers)]


def merge(snapshots: Iterable[Snapshot]) -> AcceptorState:
    """One acceptor state holding everything the snapshots hold: the highest promise, trim point
    and rejoin count; per slot above the trim point, the entry of the highest term."""
    promised, trimmed, rejoins = ZERO_TERM, 0, 0
    best: dict[int, Entry] = {}
    for snap in snapshots:
        promised = max(promised, snap.promised)
        trimmed = max(trimmed, snap.trimmed)
        rejoins = max(rejoins, snap.rejoins)
        for entry in snap.entries:
            held = best.get(entry.slot)
            if held is None or entry.term > held.term:
                best[entry.slot] = entry
            elif entry.term == held.term and entry.payload != held.payload:
                # A term proposes one value per slot: two acceptors disagreeing is damage.
                raise QuorumProtocolError(
                    f"slot {entry.slot} holds two values in term {entry.term} across peers"
                )
    accepted = {s: e for s, e in best.items() if s > trimmed}
    return AcceptorState(
        promised=promised,
        trimmed=trimmed,
        accepted=accepted,
        phase=AcceptorPhase.CATCHING_UP,
        rejoins=rejoins,
    )


def rejoin_step(state: RejoinState, event: RejoinEvent) -> tuple[RejoinState, list[RejoinEffect]]:
    """The only producer of a new RejoinState. Raises QuorumProtocolError for an event the state
    does not accept (a driver bug) or a peer number out of range."""
    handler = _HANDLERS.get((state.phase, type(event)))
    if handler is None:
        raise QuorumProtocolError(f"{type(event).__name__} is not accepted in {state.phase.value}")
    if isinstance(event, SnapshotReceived) and not 0 <= event.peer < state.config.peers:
        raise QuorumProtocolError(f"no peer {event.peer}")
    return handler(state, event)


def _on_snapshot(state: RejoinState, event: SnapshotReceived) -> tuple[RejoinState, list[Any]]:
    if event.snapshot.rejoins < state.target:
        return state, []  # round one's answer, late: its peer may promise again at its old count
    answers = {**state.answers, event.peer: event.snapshot}
    state = replace(state, answers=answers)
    if len(answers) < state.config.needed:
        return state, []
    if state.phase is RejoinPhase.ASKING:
        target = max(s.rejoins for s in answers.values()) + 1
        state = replace(state, phase=RejoinPhase.FETCHING, target=target, answers={})
        return state, [AskPeer(p, CatchUp(target)) for p in range(state.config.peers)]
    merged = merge(answers.values())
    return replace(state, phase=RejoinPhase.DONE), [Install(merged, tuple(sorted(answers)))]


def _on_tick(state: RejoinState, event: Tick) -> tuple[RejoinState, list[Any]]:
    state = replace(state, ticks=state.ticks + 1)
    if state.ticks % state.config.retry_ticks:
        return state, []
    message = CatchUp(state.target)
    return state, [AskPeer(p, message) for p in range(state.config.peers) if p not in state.answers]


_Handler = Callable[[Any, Any], tuple[Any, list[Any]]]

_HANDLERS: dict[tuple[RejoinPhase, type], _Handler] = {
    (RejoinPhase.ASKING, SnapshotReceived): _on_snapshot,
    (RejoinPhase.FETCHING, SnapshotReceived): _on_snapshot,
    (RejoinPhase.ASKING, Tick): _on_tick,
    (RejoinPhase.FETCHING, Tick): _on_tick,
    # Nothing in DONE: the driver stops its links and ticker once it has the Install.
}
