"""The quorum tail: acceptor (keeper) and proposer (writer) cores of a Multi-Paxos log.

The top rung of the durable write ladder (issue 8). N acceptors (`icegres keeper`, usually 3) keep
a log of opaque records; one writer at a time owns a *term* and appends to it. A record is
acknowledged once a majority of acceptors has durably accepted it in the writer's term, so it
survives any minority of acceptor failures and any number of writer crashes. `specs/quorum.toml`
is the independent statement of both machines; the wire and disk codec is
`icegres.machines.quorum_format`; `docs/quorum-protocol.md` describes the protocol.

Why it is shaped this way:

- Terms are `(round, writer)` pairs ordered lexicographically. A writer id is random per process
  start, so two writers can never hold the same term even when they pick the same round: Paxos
  ballots must be unique.
- The acceptor is raft's `Ready` in miniature: `step` changes the state in memory and returns
  `Persist` (what must be fsynced) followed by `Reply`. The caller performs them in order and
  never sends a reply before every `Persist` emitted before it is durable. A reply that changes
  nothing (a duplicate, a rejection) comes without a `Persist` but still waits behind earlier ones.
- The proposer is elected by prepare/promise with a term higher than any it has seen (it starts at
  the round it is given, and each rejection tells it the acceptor's promise, which it outbids up to
  `election_attempts_max` times, while electing or recovering: until it serves). On a majority of promises it recovers every slot above the
  highest trim point among them, choosing per slot the value accepted in the highest term (Paxos's
  rule), fills holes with no-op records (`NOOP`, an empty payload), and re-proposes them all in
  its own term. Only when a majority has accepted every one of them does it serve: `Replay` hands
  the recovered records (without no-ops) to the caller, which puts them in the lake before it
  acknowledges new writes.
- Appends are pipelined: each gets the next slot and one `Accept` per acceptor. Acknowledgements go
  out in slot order, once every slot up to them has a majority in this term.
- A rejection carrying a higher promise means another writer has outbid this one: the proposer is
  FENCED at once. It acknowledges nothing more, and every slot it had not acknowledged has an
  unknown outcome (the new writer may have recovered it and will replay it). A fenced proposer
  never comes back; the process must start again as a new writer.
- `WatermarkAdvanced` (the lake committed every record up to a slot) sends `Trim`: acceptors drop
  the records at or below it, and promises carry each acceptor's trim point so a new writer never
  recovers records the lake already holds.
- Time enters only as `Tick`. Every `retry_ticks` ticks a proposer resends what has not been
  answered (prepares, accepts), so dropped messages are retried without a clock read.
- An acceptor that lost its disk must not come back as if it had promised nothing: it could accept
  in a term lower than one it promised before, and two values could be chosen for one slot. It
  comes back only through a catch-up (`icegres keeper --rejoin`, `icegres.machines.quorum_rejoin`):
  it starts CATCHING_UP, refuses every proposer message (`Refused`, which no proposer treats as a
  vote or a promise), asks enough other acceptors for a `Snapshot` of their state and installs the
  merge (`CaughtUp`) before it serves. Every acceptor counts the catch-ups it took part in
  (`rejoins`) and every promise and vote (`Promised`, `Accepted`) carries that count: a writer
  never combines one of a lower count with one of a higher count, because the lower one may come
  from an incarnation that was wiped since (docs/quorum-protocol.md, "Replacing a keeper that
  lost its disk").
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from enum import Enum
from typing import Any

__all__ = [
    "NOOP",
    "ZERO_TERM",
    "Accept",
    "AcceptorEffect",
    "AcceptorEvent",
    "AcceptorMessage",
    "AcceptorPhase",
    "AcceptorState",
    "Accepted",
    "AppendRequested",
    "Acknowledge",
    "CatchUp",
    "CaughtUp",
    "Config",
    "Effect",
    "Entry",
    "Event",
    "FromAcceptor",
    "Health",
    "Persist",
    "Phase",
    "Prepare",
    "Promised",
    "ProposerMessage",
    "QuorumProtocolError",
    "RefuseAppend",
    "Refused",
    "Rejected",
    "Replay",
    "Reply",
    "Send",
    "Snapshot",
    "Started",
    "State",
    "StepDown",
    "Term",
    "Tick",
    "Trim",
    "Trimmed",
    "WatermarkAdvanced",
    "acceptor_step",
    "health",
    "rejoining_acceptor",
    "recover",
    "recover_acceptor",
    "step",
]

# The value a new writer proposes for a slot no promise reported: a hole left by a writer that
# crashed between pipelined accepts. Never a record of a writer (appends must be non-empty).
NOOP = b""


@dataclass(frozen=True, order=True)
class Term:
    round: int
    writer: str  # unique per writer process: makes every term unique

    def __post_init__(self) -> None:
        if self.round < 0:
            raise ValueError("a term's round must be >= 0")

    def __str__(self) -> str:
        return f"{self.round}/{self.writer or '-'}"

    @classmethod
    def parse(cls, text: str) -> Term:
        """The inverse of str(): "7/ab12" -> Term(7, "ab12"). ValueError if malformed."""
        round_, sep, writer = text.partition("/")
        if not sep or not round_.isdigit():
            raise ValueError(f"not a writer term: {text!r}")
        return cls(int(round_), "" if writer == "-" else writer)


ZERO_TERM = Term(0, "")


@dataclass(frozen=True)
class Entry:
    """A record as an acceptor holds it: the slot, the term that accepted it, the payload."""

    slot: int
    term: Term
    payload: bytes = field(repr=False)


# --- messages: proposer -> acceptor (requests, imperative) ---------------------------------------


@dataclass(frozen=True)
class Prepare:
    """Promise to accept nothing below `term`, and tell me what you accepted.

    `rejoins` is the highest rejoin count the writer has seen: an acceptor below it raises its
    own before promising, so that acceptors a catch-up left at different counts (it died half
    way) can again make a majority together. Raising a count is always safe: only a count lower
    than the one a catch-up raised its peers to marks a promise as possibly stale."""

    term: Term
    rejoins: int = 0


@dataclass(frozen=True)
class Accept:
    """Accept `payloads` at slots first_slot, first_slot + 1, ... in `term`.

    `rejoins` as in Prepare: a leader's votes count only at one rejoin count, so keepers a
    catch-up left at different counts are levelled by the accepts too, not only by elections."""

    term: Term
    first_slot: int
    payloads: tuple[bytes, ...] = field(repr=False)
    rejoins: int = 0

    @property
    def last_slot(self) -> int:
        return self.first_slot + len(self.payloads) - 1


@dataclass(frozen=True)
class Trim:
    """The lake holds every record at or below `watermark`: forget them."""

    term: Term
    watermark: int


ProposerMessage = Prepare | Accept | Trim


# --- messages: acceptor -> proposer (answers, past tense) ----------------------------------------


@dataclass(frozen=True)
class Promised:
    term: Term
    trimmed: int  # the acceptor's trim point: records at or below it are in the lake
    entries: tuple[Entry, ...]  # every record it holds above `trimmed`, in slot order
    # How many catch-ups (keeper replacements) this acceptor took part in or came from when it
    # promised. A writer counts only promises of the highest count it has seen in an election: a
    # lower one may come from an incarnation whose disk was lost since (see `_on_promised`).
    rejoins: int = 0


@dataclass(frozen=True)
class Accepted:
    term: Term
    first_slot: int
    last_slot: int
    # As in Promised: a writer counts a slot's votes of one rejoin count only. An Accepted of the
    # wiped incarnation (in flight when its disk was lost) carries its old count; a peer's vote
    # made after a catch-up's snapshot carries the raised one, so the two never make a majority
    # together (the rejoined keeper may not hold that record: it was not in the snapshots).
    rejoins: int = 0


@dataclass(frozen=True)
class Rejected:
    """`term` (the request's) is below the acceptor's promise `promised`."""

    term: Term
    promised: Term


@dataclass(frozen=True)
class Trimmed:
    term: Term
    watermark: int


AcceptorMessage = Promised | Accepted | Rejected | Trimmed


# --- messages: catch-up of an acceptor that lost its disk (keeper -> keeper) --------------------


@dataclass(frozen=True)
class CatchUp:
    """From a rejoining acceptor: raise your rejoin count to at least `rejoins` (durably), then
    tell me your whole state. `rejoins` = 0 only asks (the first round learns the counts)."""

    rejoins: int


@dataclass(frozen=True)
class Snapshot:
    """An acceptor's durable state when it answered a CatchUp (its count already raised)."""

    promised: Term
    trimmed: int
    rejoins: int
    entries: tuple[Entry, ...]  # every record held above `trimmed`, in slot order


@dataclass(frozen=True)
class Refused:
    """A catching-up acceptor's answer to any request: it holds nothing it may vouch for yet.

    Not an AcceptorMessage: a proposer's driver logs it and drops it (no vote, no promise, and
    never a fence: the acceptor knows no term to compare with)."""

    reason: str


# --- the acceptor --------------------------------------------------------------------------------


class AcceptorPhase(Enum):
    SERVING = "serving"  # every request is answered from durable state
    # A keeper that lost its disk, before its catch-up is durable: it refuses every request.
    # Never reached from SERVING: a rejoining keeper starts here (`rejoining_acceptor`).
    CATCHING_UP = "catching_up"


@dataclass(frozen=True)
class AcceptorState:
    promised: Term = ZERO_TERM
    trimmed: int = 0
    accepted: Mapping[int, Entry] = field(default_factory=dict)  # slot -> latest accepted
    phase: AcceptorPhase = AcceptorPhase.SERVING
    rejoins: int = 0  # catch-ups taken part in (see Promised.rejoins); never decreases


def rejoining_acceptor() -> AcceptorState:
    """The state of a keeper started with `--rejoin`: nothing held, every request refused."""
    return AcceptorState(phase=AcceptorPhase.CATCHING_UP)


@dataclass(frozen=True)
class CaughtUp:
    """The rejoin core merged enough peers' snapshots (`quorum_rejoin.merge`): install it."""

    state: AcceptorState


@dataclass(frozen=True)
class Persist:
    """Make these changes durable (fsync) before any later Reply is sent.

    Folding every Persist of an acceptor's life in order (`recover_acceptor`) gives its state.
    `promised`, `trimmed` and `rejoins` are the new values (they never decrease); `entries`
    replace what the acceptor held at their slots.
    """

    promised: Term
    trimmed: int
    entries: tuple[Entry, ...] = ()
    rejoins: int = 0


@dataclass(frozen=True)
class Reply:
    """Send `message` to whoever sent the request this step answered."""

    message: AcceptorMessage | Snapshot | Refused


AcceptorEvent = Prepare | Accept | Trim | CatchUp | CaughtUp
AcceptorEffect = Persist | Reply


def recover_acceptor(persisted: Iterable[Persist]) -> AcceptorState:
    """An acceptor's state from its durable Persist records, oldest first (none: a new member)."""
    promised, trimmed, rejoins = ZERO_TERM, 0, 0
    accepted: dict[int, Entry] = {}
    for record in persisted:
        promised = max(promised, record.promised)
        trimmed = max(trimmed, record.trimmed)
        rejoins = max(rejoins, record.rejoins)
        for entry in record.entries:
            accepted[entry.slot] = entry
    accepted = {s: e for s, e in accepted.items() if s > trimmed}
    return AcceptorState(promised=promised, trimmed=trimmed, accepted=accepted, rejoins=rejoins)


def acceptor_step(
    state: AcceptorState, event: AcceptorEvent
) -> tuple[AcceptorState, list[AcceptorEffect]]:
    """Answer one request. Effects: an optional Persist, then exactly one Reply."""
    handler = _ACCEPTOR_HANDLERS.get((state.phase, type(event)))
    if handler is None:
        raise QuorumProtocolError(f"{type(event).__name__} is not accepted by an acceptor")
    return handler(state, event)


def _acceptor_prepare(
    state: AcceptorState, event: Prepare
) -> tuple[AcceptorState, list[AcceptorEffect]]:
    if event.term < state.promised:
        return state, [Reply(Rejected(event.term, state.promised))]
    effects: list[AcceptorEffect] = []
    if event.term > state.promised or event.rejoins > state.rejoins:
        state = replace(state, promised=event.term, rejoins=max(state.rejoins, event.rejoins))
        effects.append(Persist(state.promised, state.trimmed, rejoins=state.rejoins))
    # A repeated Prepare of the promised term is answered again: its first answer may be lost.
    entries = tuple(state.accepted[s] for s in sorted(state.accepted))
    effects.append(Reply(Promised(event.term, state.trimmed, entries, state.rejoins)))
    return state, effects


def _acceptor_accept(
    state: AcceptorState, event: Accept
) -> tuple[AcceptorState, list[AcceptorEffect]]:
    if event.term < state.promised:
        return state, [Reply(Rejected(event.term, state.promised))]
    fresh = tuple(
        Entry(slot, event.term, payload)
        for slot, payload in enumerate(event.payloads, start=event.first_slot)
        if slot > state.trimmed and state.accepted.get(slot) != Entry(slot, event.term, payload)
    )
    rejoins = max(state.rejoins, event.rejoins)
    reply = Reply(Accepted(event.term, event.first_slot, event.last_slot, rejoins))
    if not fresh and event.term == state.promised and rejoins == state.rejoins:
        return state, [reply]  # a duplicate (or wholly trimmed): already durable
    accepted = dict(state.accepted)
    for entry in fresh:
        accepted[entry.slot] = entry
    state = replace(state, promised=event.term, accepted=accepted, rejoins=rejoins)
    return state, [Persist(state.promised, state.trimmed, fresh, state.rejoins), reply]


def _acceptor_trim(state: AcceptorState, event: Trim) -> tuple[AcceptorState, list[AcceptorEffect]]:
    if event.term < state.promised:
        return state, [Reply(Rejected(event.term, state.promised))]
    reply = Reply(Trimmed(event.term, event.watermark))
    if event.watermark <= state.trimmed and event.term == state.promised:
        return state, [reply]
    trimmed = max(state.trimmed, event.watermark)
    accepted = {s: e for s, e in state.accepted.items() if s > trimmed}
    state = replace(state, promised=event.term, trimmed=trimmed, accepted=accepted)
    return state, [Persist(state.promised, state.trimmed, rejoins=state.rejoins), reply]


def _acceptor_catch_up(
    state: AcceptorState, event: CatchUp
) -> tuple[AcceptorState, list[AcceptorEffect]]:
    # The count is raised and made durable before the snapshot leaves, in one step: every promise
    # this acceptor makes after the snapshot carries the new count, and every promise it made
    # before is in the snapshot's `promised`. That split is what the rejoin's safety rests on.
    effects: list[AcceptorEffect] = []
    if event.rejoins > state.rejoins:
        state = replace(state, rejoins=event.rejoins)
        effects.append(Persist(state.promised, state.trimmed, rejoins=state.rejoins))
    entries = tuple(state.accepted[s] for s in sorted(state.accepted))
    effects.append(Reply(Snapshot(state.promised, state.trimmed, state.rejoins, entries)))
    return state, effects


def _acceptor_refuse(
    state: AcceptorState, event: AcceptorEvent
) -> tuple[AcceptorState, list[AcceptorEffect]]:
    # No Rejected: that would fence a writer with a promise this acceptor does not hold.
    reason = (
        f"this keeper is catching up after losing its disk: it answers no "
        f"{type(event).__name__} until it holds what the other keepers hold"
    )
    return state, [Reply(Refused(reason))]


def _acceptor_caught_up(
    state: AcceptorState, event: CaughtUp
) -> tuple[AcceptorState, list[AcceptorEffect]]:
    merged = replace(event.state, phase=AcceptorPhase.SERVING)
    entries = tuple(merged.accepted[s] for s in sorted(merged.accepted))
    return merged, [Persist(merged.promised, merged.trimmed, entries, merged.rejoins)]


# --- the proposer: configuration, events, effects ------------------------------------------------


@dataclass(frozen=True)
class Config:
    acceptors: int = 3
    # Resend unanswered prepares and accepts every this many ticks.
    retry_ticks: int = 2
    # How many times an election outbids a higher promise before it gives up (FENCED).
    election_attempts_max: int = 8
    # One Accept carries at most this many records (recovery re-proposes in batches).
    batch_records_max: int = 256
    payload_bytes_max: int = 64 * 1024 * 1024

    def __post_init__(self) -> None:
        if self.acceptors < 1 or self.retry_ticks < 1 or self.batch_records_max < 1:
            raise ValueError("acceptors, retry_ticks and batch_records_max must be at least 1")
        if self.election_attempts_max < 1:
            raise ValueError("election_attempts_max must be at least 1")

    @property
    def majority(self) -> int:
        return self.acceptors // 2 + 1


@dataclass(frozen=True)
class Started:
    """Begin the election at `round` (at least 1); the lake holds every record up to `watermark`."""

    round: int
    watermark: int = 0


@dataclass(frozen=True)
class FromAcceptor:
    """Acceptor number `acceptor` answered. The spec names this event by its message's class."""

    acceptor: int
    message: AcceptorMessage


@dataclass(frozen=True)
class AppendRequested:
    payload: bytes = field(repr=False)


@dataclass(frozen=True)
class Tick:
    pass


@dataclass(frozen=True)
class WatermarkAdvanced:
    """The lake committed every record up to `slot` (a flush's snapshot summary carries it)."""

    slot: int


Event = Started | FromAcceptor | AppendRequested | Tick | WatermarkAdvanced


@dataclass(frozen=True)
class Send:
    """Send `message` to acceptor number `acceptor` (best effort: lost messages are resent)."""

    acceptor: int
    message: ProposerMessage


@dataclass(frozen=True)
class Acknowledge:
    """Slots first_slot..last_slot are chosen (a majority durably accepted them): tell writers."""

    first_slot: int
    last_slot: int


@dataclass(frozen=True)
class Replay:
    """Elected and recovered: put these records in the lake (exactly once), then serve.

    `through` is the last slot recovery settled (records and no-ops); the first new append gets
    the slot after it.
    """

    records: tuple[tuple[int, bytes], ...]
    through: int


@dataclass(frozen=True)
class StepDown:
    """Fenced: another writer holds a higher term. Slots in `unknown` were sent but not
    acknowledged: they may have been chosen (and will then be replayed by the new writer)."""

    reason: str
    unknown: range


@dataclass(frozen=True)
class RefuseAppend:
    """An append reached a fenced writer: it gets no slot and is sent nowhere."""

    reason: str


Effect = Send | Acknowledge | Replay | StepDown | RefuseAppend


# --- the proposer: state -------------------------------------------------------------------------


class Phase(Enum):
    STARTING = "starting"  # before Started
    ELECTING = "electing"  # prepares out, collecting promises
    RECOVERING = "recovering"  # won: re-proposing the recovered slots in its own term
    LEADING = "leading"  # serving appends
    FENCED = "fenced"  # outbid: acknowledges nothing more, ever


@dataclass(frozen=True)
class State:
    config: Config
    writer: str = ""
    phase: Phase = Phase.STARTING
    term: Term = ZERO_TERM
    highest_seen: Term = ZERO_TERM  # the highest promise any acceptor reported
    rejoins_seen: int = 0  # the highest rejoin count any promise or vote carried
    attempts: int = 0  # elections started
    promises: Mapping[int, Promised] = field(default_factory=dict)  # this term's, by acceptor
    watermark: int = 0  # the lake holds every record up to here
    acked: int = 0  # every slot up to here is chosen and acknowledged (or in the lake)
    next_slot: int = 1
    inflight: Mapping[int, bytes] = field(default_factory=dict, repr=False)  # sent, not acked
    # slot -> {acceptor: the rejoin count its Accepted carried}; only the highest count counts.
    votes: Mapping[int, Mapping[int, int]] = field(default_factory=dict)
    recovering_through: int = 0
    recovered: tuple[tuple[int, bytes], ...] = field(default=(), repr=False)
    ticks: int = 0
    reason: str | None = None


class QuorumProtocolError(Exception):
    """An event the current state does not accept (a driver bug), or a malformed one."""


@dataclass(frozen=True)
class Health:
    ok: bool
    phase: str
    term: str
    reason: str | None
    acked: int
    unacked: int
    watermark: int


def health(state: State) -> Health:
    """What /health reports: `ok` only while leading (a fenced writer stays not ok)."""
    return Health(
        ok=state.phase is Phase.LEADING,
        phase=state.phase.value,
        term=str(state.term),
        reason=state.reason,
        acked=state.acked,
        unacked=len(state.inflight),
        watermark=state.watermark,
    )


def recover(
    config: Config, writer: str, *, round: int = 1, watermark: int = 0
) -> tuple[State, list[Effect]]:
    """A writer (re)starting: it holds nothing durable, so it begins an election."""
    if not writer:
        raise ValueError("a writer needs a non-empty id")
    return step(State(config=config, writer=writer), Started(round, watermark))


# --- the proposer: transitions -------------------------------------------------------------------


def step(state: State, event: Event) -> tuple[State, list[Effect]]:
    """The only producer of a new proposer State: apply `event`, return it and its effects.

    Effects are in the order they must be performed. Raises QuorumProtocolError for an event the
    state does not accept.
    """
    key = type(event.message) if isinstance(event, FromAcceptor) else type(event)
    handler = _HANDLERS.get((state.phase, key))
    if handler is None:
        raise QuorumProtocolError(f"{key.__name__} is not accepted in {state.phase.value}")
    if isinstance(event, FromAcceptor) and not 0 <= event.acceptor < state.config.acceptors:
        raise QuorumProtocolError(f"no acceptor {event.acceptor}")
    return handler(state, event)


def _on_started(state: State, event: Started) -> tuple[State, list[Effect]]:
    if event.round < 1 or event.watermark < 0:
        raise QuorumProtocolError(f"bad start {event!r}")
    state = replace(
        state,
        watermark=event.watermark,
        acked=event.watermark,
        next_slot=event.watermark + 1,
    )
    return _elect(state, event.round)


def _elect(state: State, round_: int) -> tuple[State, list[Effect]]:
    term = Term(round_, state.writer)
    state = replace(
        state,
        phase=Phase.ELECTING,
        term=term,
        attempts=state.attempts + 1,
        promises={},
        acked=state.watermark,
        next_slot=state.watermark + 1,
        inflight={},
        votes={},
        recovering_through=0,
        recovered=(),
    )
    return state, _broadcast(state, Prepare(term, state.rejoins_seen))


def _on_promised(state: State, event: FromAcceptor) -> tuple[State, list[Effect]]:
    msg = event.message
    assert isinstance(msg, Promised)
    if msg.term != state.term:
        return state, []  # an answer to an earlier round of ours
    # Promises of different rejoin counts never make a majority together. An acceptor raises its
    # count (durably) when it answers a catch-up, so a promise of the higher count was made after
    # that catch-up's snapshot; a promise of a lower count from another acceptor may have been
    # made by an incarnation that lost its disk before that catch-up and that the rejoined one
    # does not honour (its promise came from snapshots taken before this term was promised).
    # Keep the highest count: the acceptors dropped are asked again on the next retry tick, with
    # a Prepare carrying that count (they raise theirs and promise again).
    if msg.rejoins < state.rejoins_seen:
        return state, []
    promises = {a: p for a, p in state.promises.items() if p.rejoins == msg.rejoins}
    promises[event.acceptor] = msg
    state = replace(state, rejoins_seen=msg.rejoins)
    state = replace(state, promises=promises)
    if len(promises) < state.config.majority:
        return state, []
    return _won(state)


def _won(state: State) -> tuple[State, list[Effect]]:
    """Paxos phase 2 for every slot a promise reported: the highest-term value wins."""
    start = max([state.watermark, *(p.trimmed for p in state.promises.values())])
    best: dict[int, Entry] = {}
    for promise in state.promises.values():
        for entry in promise.entries:
            if entry.slot > start and (
                entry.slot not in best or entry.term > best[entry.slot].term
            ):
                best[entry.slot] = entry
    last = max(best, default=start)
    values = {
        slot: best[slot].payload if slot in best else NOOP for slot in range(start + 1, last + 1)
    }
    recovered = tuple((slot, p) for slot, p in values.items() if p != NOOP)
    state = replace(
        state,
        promises={},
        watermark=start,
        acked=start,
        next_slot=last + 1,
        inflight=values,
        votes={slot: {} for slot in values},
        recovering_through=last,
        recovered=recovered,
    )
    if not values:
        return _lead(state)
    state = replace(state, phase=Phase.RECOVERING)
    effects: list[Effect] = []
    for acceptor in range(state.config.acceptors):
        effects += _accepts_for(state, acceptor, sorted(values))
    return state, effects


def _lead(state: State) -> tuple[State, list[Effect]]:
    replay = Replay(state.recovered, state.recovering_through)
    return replace(state, phase=Phase.LEADING, recovered=()), [replay]


def _on_accepted(state: State, event: FromAcceptor) -> tuple[State, list[Effect]]:
    msg = event.message
    assert isinstance(msg, Accepted)
    if msg.term != state.term:
        return state, []
    votes = dict(state.votes)
    state = replace(state, rejoins_seen=max(state.rejoins_seen, msg.rejoins))
    for slot in range(max(msg.first_slot, state.acked + 1), msg.last_slot + 1):
        held = votes.get(slot)
        if held is None or msg.rejoins < max(held.values(), default=0):
            continue  # not in flight, or a vote of a lower count: asked again on a retry tick
        votes[slot] = {
            **{a: c for a, c in held.items() if c == msg.rejoins},
            event.acceptor: msg.rejoins,
        }
    acked = state.acked
    inflight = state.inflight
    while acked + 1 in votes and len(votes[acked + 1]) >= state.config.majority:
        acked += 1
    if acked > state.acked:
        inflight = {s: p for s, p in inflight.items() if s > acked}
        votes = {s: v for s, v in votes.items() if s > acked}
    first = state.acked + 1
    state = replace(state, votes=votes, acked=acked, inflight=inflight)
    if state.phase is Phase.RECOVERING:
        return _lead(state) if acked >= state.recovering_through else (state, [])
    return state, ([Acknowledge(first, acked)] if acked >= first else [])


def _on_rejected(state: State, event: FromAcceptor) -> tuple[State, list[Effect]]:
    msg = event.message
    assert isinstance(msg, Rejected)
    state = replace(state, highest_seen=max(state.highest_seen, msg.promised))
    if msg.term != state.term or msg.promised <= state.term:
        return state, []  # a rejection of an earlier round of ours
    if state.phase is not Phase.LEADING and state.attempts < state.config.election_attempts_max:
        # Nothing was acknowledged in this term yet: outbid the promise and elect again (a dead
        # writer's late prepare must not stop a lone live one). Recovery restarts from scratch.
        return _elect(state, state.highest_seen.round + 1)
    doing = state.phase.value
    reason = (
        f"writer term {state.term} was outbid by term {msg.promised} (acceptor {event.acceptor}) "
        f"while {doing}"
    )
    return _step_down(state, reason)


def _step_down(state: State, reason: str) -> tuple[State, list[Effect]]:
    leading = state.phase is Phase.LEADING
    unknown = range(state.acked + 1, state.next_slot) if leading else range(0)
    fenced = replace(
        state,
        phase=Phase.FENCED,
        # Before serving nothing was acknowledged: slots recovery settled so far are not this
        # writer's to flush.
        acked=state.acked if leading else state.watermark,
        inflight={},
        votes={},
        promises={},
        recovered=(),
        reason=reason,
    )
    return fenced, [StepDown(reason, unknown)]


def _on_ignored(state: State, event: Any) -> tuple[State, list[Effect]]:
    return state, []


def _on_append(state: State, event: AppendRequested) -> tuple[State, list[Effect]]:
    if event.payload == NOOP:
        raise QuorumProtocolError("an empty payload is reserved for no-op records")
    if len(event.payload) > state.config.payload_bytes_max:
        raise QuorumProtocolError(f"payload of {len(event.payload)} bytes is too large")
    slot = state.next_slot
    state = replace(
        state,
        next_slot=slot + 1,
        inflight={**state.inflight, slot: event.payload},
        votes={**state.votes, slot: {}},
    )
    return state, _broadcast(state, Accept(state.term, slot, (event.payload,), state.rejoins_seen))


def _on_append_fenced(state: State, event: AppendRequested) -> tuple[State, list[Effect]]:
    return state, [RefuseAppend(f"this writer is fenced: {state.reason}")]


def _on_tick(state: State, event: Tick) -> tuple[State, list[Effect]]:
    state = replace(state, ticks=state.ticks + 1)
    if state.ticks % state.config.retry_ticks:
        return state, []
    effects: list[Effect] = []
    if state.phase is Phase.ELECTING:
        for acceptor in range(state.config.acceptors):
            if acceptor not in state.promises:
                effects.append(Send(acceptor, Prepare(state.term, state.rejoins_seen)))
        return state, effects
    for acceptor in range(state.config.acceptors):
        missing = [s for s in sorted(state.votes) if acceptor not in state.votes[s]]
        effects += _accepts_for(state, acceptor, missing)
    return state, effects


def _on_watermark(state: State, event: WatermarkAdvanced) -> tuple[State, list[Effect]]:
    if event.slot > state.acked:
        raise QuorumProtocolError(
            f"watermark {event.slot} is beyond the acknowledged slot {state.acked}: the lake "
            "cannot hold records that were never chosen"
        )
    if event.slot <= state.watermark:
        return state, []
    state = replace(state, watermark=event.slot)
    return state, _broadcast(state, Trim(state.term, event.slot))


def _on_watermark_fenced(state: State, event: WatermarkAdvanced) -> tuple[State, list[Effect]]:
    return replace(state, watermark=max(state.watermark, event.slot)), []


def _broadcast(state: State, message: ProposerMessage) -> list[Effect]:
    return [Send(a, message) for a in range(state.config.acceptors)]


def _accepts_for(state: State, acceptor: int, slots: list[int]) -> list[Effect]:
    """Accepts carrying `slots` (ascending) to one acceptor: one per contiguous run and batch."""
    effects: list[Effect] = []
    run: list[int] = []
    for slot in [*slots, None]:
        if run and (
            slot is None or slot != run[-1] + 1 or len(run) >= state.config.batch_records_max
        ):
            payloads = tuple(state.inflight[s] for s in run)
            effects.append(Send(acceptor, Accept(state.term, run[0], payloads, state.rejoins_seen)))
            run = []
        if slot is not None:
            run.append(slot)
    return effects


_Handler = Callable[[Any, Any], tuple[Any, list[Any]]]

_LIVE = (Phase.ELECTING, Phase.RECOVERING, Phase.LEADING)

_HANDLERS: dict[tuple[Phase, type], _Handler] = {
    (Phase.STARTING, Started): _on_started,
    (Phase.ELECTING, Promised): _on_promised,
    (Phase.ELECTING, Accepted): _on_ignored,  # of a recovery this writer abandoned
    (Phase.RECOVERING, Promised): _on_ignored,
    (Phase.LEADING, Promised): _on_ignored,
    (Phase.RECOVERING, Accepted): _on_accepted,
    (Phase.LEADING, Accepted): _on_accepted,
    **{(phase, Rejected): _on_rejected for phase in _LIVE},
    # Trims are sent only while leading, which never goes back: no Trimmed reaches an electing
    # or recovering writer.
    (Phase.LEADING, Trimmed): _on_ignored,
    **{(phase, Tick): _on_tick for phase in _LIVE},
    (Phase.LEADING, AppendRequested): _on_append,
    (Phase.LEADING, WatermarkAdvanced): _on_watermark,
    # A fenced writer answers everything and does nothing.
    (Phase.FENCED, AppendRequested): _on_append_fenced,
    (Phase.FENCED, WatermarkAdvanced): _on_watermark_fenced,
    **{(Phase.FENCED, t): _on_ignored for t in (Promised, Accepted, Rejected, Trimmed, Tick)},
}

_ACCEPTOR_HANDLERS: dict[tuple[AcceptorPhase, type], _Handler] = {
    (AcceptorPhase.SERVING, Prepare): _acceptor_prepare,
    (AcceptorPhase.SERVING, Accept): _acceptor_accept,
    (AcceptorPhase.SERVING, Trim): _acceptor_trim,
    (AcceptorPhase.SERVING, CatchUp): _acceptor_catch_up,
    # A keeper that is itself catching up must not feed another's catch-up: it holds nothing yet.
    **{(AcceptorPhase.CATCHING_UP, t): _acceptor_refuse for t in (Prepare, Accept, Trim, CatchUp)},
    (AcceptorPhase.CATCHING_UP, CaughtUp): _acceptor_caught_up,
}
