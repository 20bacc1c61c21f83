"""The trio driver of a quorum-tail writer: the proposer core talking to N keepers over TCP.

`open_quorum_tail(["host:port", ...])` starts one link task per keeper and a ticker, runs the
election (and recovery) and yields a `QuorumTail` once it leads: `tail.replay` holds the recovered
records to put in the lake before serving, `await tail.append(payload)` returns the record's slot
once a majority of keepers fsynced it. The driver decides nothing: the core is stepped
synchronously from whichever task has news (trio switches tasks only at awaits, so steps never
interleave), and every effect is performed without blocking that step.

Why a slow or dead keeper never stalls acknowledgements: each keeper has its own link (connect
with a timeout, reconnect after a pause, a bounded outbox). A message for a keeper that is not
connected, or whose outbox is full, is dropped: the core resends whatever has not been answered
every `retry_ticks` ticks. Time enters the core only as `Tick`, one every `tick_seconds`.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, fields
from functools import partial
from typing import Any

import trio

from icegres import faults
from icegres.machines.drivers.tail import QUORUM_TERM_PROPERTY, AppendFailed, Waiters
from icegres.machines.quorum import (
    Accepted,
    Acknowledge,
    AppendRequested,
    Config,
    Effect,
    Event,
    FromAcceptor,
    Health,
    Phase,
    Promised,
    ProposerMessage,
    RefuseAppend,
    Refused,
    Rejected,
    Replay,
    Send,
    State,
    StepDown,
    Term,
    Tick,
    Trimmed,
    WatermarkAdvanced,
    health,
    recover,
    step,
)
from icegres.machines.quorum_format import (
    CorruptFrame,
    IncompleteFrame,
    Message,
    decode_frame,
    encode_frame,
)

__all__ = [
    "LadderHealth",
    "QuorumAppendFailed",
    "QuorumLadderTail",
    "QuorumTail",
    "QuorumUnavailable",
    "Timing",
    "WriterFenced",
    "open_ladder_quorum_tail",
    "open_quorum_tail",
    "parse_addresses",
    "received_frames",
]

log = logging.getLogger(__name__)

READ_BYTES = 256 * 1024
OUTBOX_MESSAGES_MAX = 4096


async def received_frames(
    stream: trio.abc.ReceiveStream, *, body_bytes_max: int | None = None
) -> AsyncIterator[Message]:
    """The messages framed on `stream`, in order, until the peer closes or the connection
    breaks (both end the iteration: a peer going away is routine). A corrupt frame raises
    CorruptFrame: nothing after it can be trusted, so the caller drops the connection."""
    limit = {} if body_bytes_max is None else {"body_bytes_max": body_bytes_max}
    buffer = bytearray()
    while True:
        try:
            chunk = await stream.receive_some(READ_BYTES)
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            return
        if not chunk:
            return
        buffer += chunk
        offset = 0
        while offset < len(buffer):
            try:
                message, offset = decode_frame(buffer, offset, **limit)
            except IncompleteFrame:
                break
            yield message
        del buffer[:offset]


async def sent_frames(
    stream: trio.abc.SendStream,
    receive: trio.MemoryReceiveChannel[bytes],
    connection: trio.CancelScope,
) -> None:
    """Write the encoded frames from `receive` to `stream`, those already queued in one write,
    until the channel closes or the connection breaks; then cancel `connection`. Errors end the
    connection here, never escape: a peer going away is routine."""
    try:
        async for frame in receive:
            frames = [frame]
            while True:
                try:
                    frames.append(receive.receive_nowait())
                except trio.WouldBlock:
                    break
            await stream.send_all(b"".join(frames))
    except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
        pass
    connection.cancel()


class QuorumAppendFailed(Exception):
    """An append was not acknowledged. When `outcome_unknown`, its record was sent: it may still
    be chosen, and is then replayed by whichever writer recovers it."""

    def __init__(self, message: str, *, outcome_unknown: bool) -> None:
        super().__init__(message)
        self.outcome_unknown = outcome_unknown


class QuorumUnavailable(QuorumAppendFailed):
    """No majority of keepers answered in time: nothing is acknowledged without one."""


class WriterFenced(QuorumAppendFailed):
    """Another writer holds a higher term: this one acknowledges nothing more, ever."""


@dataclass(frozen=True)
class Timing:
    tick_seconds: float = 0.05
    connect_timeout_seconds: float = 1.0
    reconnect_seconds: float = 0.1
    append_timeout_seconds: float = 5.0
    election_timeout_seconds: float = 10.0


def parse_addresses(spec: str | Sequence[str]) -> list[tuple[str, int]]:
    """`host:port,host:port,...` (or a list of `host:port`) as (host, port) pairs."""
    items = spec.split(",") if isinstance(spec, str) else list(spec)
    out: list[tuple[str, int]] = []
    for item in items:
        host, sep, port = item.strip().rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"a keeper address must be host:port, not {item.strip()!r}")
        out.append((host.strip("[]"), int(port)))
    if not out:
        raise ValueError("at least one keeper address is needed")
    if len(set(out)) != len(out):
        raise ValueError("the keeper addresses must be distinct")
    return out


class _Link:
    """The connection to one keeper: an outbox while connected, nothing while not."""

    def __init__(self, index: int, address: tuple[str, int]) -> None:
        self.index = index
        self.address = address
        self.outbox: trio.MemorySendChannel[bytes] | None = None
        self.connects = 0
        self.refused: str | None = None  # the keeper is catching up (logged once per spell)

    def send(self, message: ProposerMessage) -> None:
        if self.outbox is None:
            return  # not connected: the core resends after reconnection
        try:
            self.outbox.send_nowait(encode_frame(message))
        except (trio.WouldBlock, trio.BrokenResourceError, trio.ClosedResourceError):
            pass  # a slow keeper: dropped, resent later


class QuorumTail:
    """One writer's seat at the quorum. Create it with `open_quorum_tail`."""

    def __init__(
        self,
        addresses: list[tuple[str, int]],
        config: Config,
        writer: str,
        timing: Timing,
        nursery: trio.Nursery,
    ) -> None:
        self.addresses = addresses
        self.config = config
        self.writer = writer
        self.timing = timing
        self._nursery = nursery
        self._links = [_Link(i, a) for i, a in enumerate(addresses)]
        self._state = State(config=config, writer=writer)
        self._waiters = Waiters()
        self._settled = trio.Event()  # leading or fenced
        self.replay: tuple[tuple[int, bytes], ...] = ()
        self.replayed_through = 0

    @property
    def state(self) -> State:
        return self._state

    @property
    def term(self) -> str:
        return str(self._state.term)

    def health(self) -> Health:
        return health(self._state)

    def connected(self) -> int:
        return sum(link.outbox is not None for link in self._links)

    def start(self, round_: int, watermark: int) -> None:
        for link in self._links:
            self._nursery.start_soon(self._run_link, link)
        self._nursery.start_soon(self._ticker)
        state, effects = recover(self.config, self.writer, round=round_, watermark=watermark)
        self._state = state
        self._perform_all(effects)

    async def wait_leading(self) -> None:
        with trio.move_on_after(self.timing.election_timeout_seconds):
            await self._settled.wait()
        phase = self._state.phase
        if phase is Phase.FENCED:
            raise WriterFenced(
                f"could not win a writer term: {self._state.reason}", outcome_unknown=False
            )
        if phase is not Phase.LEADING:
            raise QuorumUnavailable(
                f"could not win a writer term from a majority of the {len(self._links)} keepers "
                f"within {self.timing.election_timeout_seconds} s ({self.connected()} connected, "
                f"{phase.value})",
                outcome_unknown=False,
            )

    async def append(self, payload: bytes) -> int:
        """Append one record; return its slot once a majority of keepers fsynced it.

        Raises WriterFenced once another writer won a higher term, QuorumUnavailable when no
        majority acknowledged within `append_timeout_seconds` (the record stays in flight and may
        still be chosen: outcome unknown). A cancelled caller leaves the record in flight too.
        """
        if self._state.phase is Phase.FENCED:
            raise WriterFenced(
                f"this writer is fenced: {self._state.reason}", outcome_unknown=False
            )
        if self._state.phase is not Phase.LEADING:
            raise QuorumUnavailable("the writer has not won its term yet", outcome_unknown=False)
        if not payload or len(payload) > self.config.payload_bytes_max:
            raise ValueError(
                f"a quorum tail record must hold 1..{self.config.payload_bytes_max} bytes"
            )
        slot = self._state.next_slot
        waiter = self._waiters.add(slot)
        self._step(AppendRequested(payload))
        with trio.move_on_after(self.timing.append_timeout_seconds):
            await self._waiters.wait(slot, waiter)
        if not waiter.done.is_set():
            raise QuorumUnavailable(
                f"slot {slot} was not acknowledged by a majority of the {len(self._links)} "
                f"keepers within {self.timing.append_timeout_seconds} s ({self.connected()} "
                "connected): nothing is acknowledged without a majority; the record's outcome "
                "is unknown",
                outcome_unknown=True,
            )
        return slot

    def advance_watermark(self, slot: int) -> None:
        """The lake committed every record up to `slot`: the keepers may trim them."""
        self._step(WatermarkAdvanced(slot))

    # Stepping and effects.

    def _step(self, event: Event) -> None:
        self._state, effects = step(self._state, event)
        self._perform_all(effects)

    def _perform_all(self, effects: list[Effect]) -> None:
        for effect in effects:
            match effect:
                case Send(acceptor=acceptor, message=message):
                    self._links[acceptor].send(message)
                case Acknowledge(first_slot=first, last_slot=last):
                    self._waiters.wake(range(first, last + 1))
                case Replay(records=records, through=through):
                    self.replay = records
                    self.replayed_through = through
                    self._settled.set()
                case StepDown(reason=reason, unknown=unknown):
                    log.error("quorum writer %s fenced: %s", self.writer, reason)
                    self._waiters.fail(unknown, partial(WriterFenced, reason, outcome_unknown=True))
                    self._settled.set()
                case RefuseAppend():
                    pass  # append() raised before stepping
                case _:
                    raise AssertionError(f"unknown effect {effect!r}")

    # Tasks.

    async def _ticker(self) -> None:
        while True:
            await trio.sleep(self.timing.tick_seconds)
            self._step(Tick())

    async def _run_link(self, link: _Link) -> None:
        host, port = link.address
        while True:
            stream = None
            with trio.move_on_after(self.timing.connect_timeout_seconds):
                try:
                    stream = await trio.open_tcp_stream(host, port)
                except OSError:
                    pass
            if stream is None:
                await trio.sleep(self.timing.reconnect_seconds)
                continue
            link.connects += 1
            send, receive = trio.open_memory_channel[bytes](OUTBOX_MESSAGES_MAX)
            try:
                async with stream, trio.open_nursery() as nursery:
                    link.outbox = send
                    nursery.start_soon(sent_frames, stream, receive, nursery.cancel_scope)
                    await self._read_link(link, stream)
                    nursery.cancel_scope.cancel()
            finally:
                link.outbox = None
                send.close()
            await trio.sleep(self.timing.reconnect_seconds)

    async def _read_link(self, link: _Link, stream: trio.SocketStream) -> None:
        try:
            async for message in received_frames(stream):
                if isinstance(message, Refused):
                    # A keeper catching up after a disk loss: no vote, no promise, no fence. The
                    # core resends to it on its retry ticks, so it counts again once caught up.
                    if link.refused is None:
                        log.warning("keeper %s:%d refuses: %s", *link.address, message.reason)
                    link.refused = message.reason
                    continue
                if not isinstance(message, Promised | Accepted | Rejected | Trimmed):
                    log.warning("keeper %s:%d sent a %s", *link.address, type(message).__name__)
                    return
                link.refused = None
                self._step(FromAcceptor(link.index, message))
        except CorruptFrame as exc:
            log.warning("keeper %s:%d sent a corrupt frame: %s", *link.address, exc)


@asynccontextmanager
async def open_quorum_tail(
    addresses: str | Sequence[str],
    *,
    config: Config | None = None,
    writer: str | None = None,
    round: int | None = None,
    watermark: int = 0,
    timing: Timing | None = None,
) -> AsyncIterator[QuorumTail]:
    """Win a writer term from a majority of the keepers, recover, and keep the seat for the block.

    `round` is the first election's round (default: the wall clock in seconds). On entry the
    writer leads: `tail.replay` holds the recovered records above `watermark` (the
    lake's), to be put in the lake before serving. Raises QuorumUnavailable when no majority
    answers within the election timeout, WriterFenced when it was outbid too often.
    """
    parsed = parse_addresses(addresses)
    if round is None:
        # Wall-clock seconds: a writer started later opens above the writers before it, so a
        # promise a dead writer left on a straggler keeper rarely fences a fresh one. Safety never
        # depends on it (terms are unique by writer id; rejections tell the real promises).
        round = max(1, int(time.time()))
    config = config or Config(acceptors=len(parsed))
    if faults.broken("quorum-majority"):
        config = _OneIsAMajority(**{f.name: getattr(config, f.name) for f in fields(config)})
    if config.acceptors != len(parsed):
        raise ValueError(f"config.acceptors is {config.acceptors} but {len(parsed)} keepers given")
    failure: QuorumAppendFailed | None = None
    async with trio.open_nursery() as nursery:
        tail = QuorumTail(
            parsed, config, writer or os.urandom(8).hex(), timing or Timing(), nursery
        )
        tail.start(round, watermark)
        try:
            await tail.wait_leading()
        except QuorumAppendFailed as exc:
            failure = exc  # raised bare, outside the nursery's exception group
        else:
            yield tail
        nursery.cancel_scope.cancel()
    if failure is not None:
        raise failure


class _OneIsAMajority(Config):
    """The `quorum-majority` guarantee broken on purpose (icegres.faults): one answer decides."""

    @property
    def majority(self) -> int:
        return 1


# --- the write ladder's view of a quorum tail -------------------------------------------------------


@dataclass(frozen=True)
class ReplayRecord:
    lsn: int
    payload: bytes


@dataclass(frozen=True)
class LadderHealth:
    ok: bool
    phase: str
    reason: str | None
    durable_lsn: int  # every slot up to here is acknowledged
    trimmed_lsn: int  # the keepers may forget every slot up to here
    watermark_lsn: int
    epoch: str  # the writer term


class QuorumLadderTail:
    """A quorum tail as the write ladder's `Tail` (`drivers/tail.py`): slots are LSNs. It is a
    `LakeFencedTail`: writers hold it in turn, so each flush asserts the writer's term at the lake.

    `tail_id` names the log in the lake's snapshot summaries; it must be the same for every
    writer of one quorum, so that a replacement finds its predecessor's watermark. `writer_term`
    is what each flush asserts at the lake (`fence` records a refusal there: nothing more is
    appended).
    """

    kind = "quorum"
    term_property = QUORUM_TERM_PROPERTY
    tail_id: str
    replay: tuple[ReplayRecord, ...]

    def __init__(self, tail: QuorumTail, tail_id: str) -> None:
        self._tail = tail
        self.tail_id = tail_id
        self.replay = tuple(ReplayRecord(slot, payload) for slot, payload in tail.replay)
        self._lake_fenced: str | None = None

    @property
    def writer_term(self) -> str:
        return self._tail.term

    @property
    def core(self) -> State:
        return self._tail.state

    @property
    def next_lsn(self) -> int:
        return self._tail.state.next_slot

    def outranked_by(self, published_term: str) -> bool:
        return Term.parse(published_term) > self._tail.state.term

    def fence(self, reason: str) -> None:
        """The lake refused a flush because a higher writer term published: stop appending."""
        if self._lake_fenced is None:
            log.error("quorum writer %s fenced at the lake: %s", self._tail.writer, reason)
        self._lake_fenced = reason

    async def append(self, payload: bytes) -> int:
        if self._lake_fenced is not None:
            raise AppendFailed(f"this writer is fenced: {self._lake_fenced}", outcome_unknown=False)
        try:
            return await self._tail.append(payload)
        except QuorumAppendFailed as exc:
            raise AppendFailed(str(exc), outcome_unknown=exc.outcome_unknown) from None

    def advance_watermark(self, lsn: int) -> None:
        if self._tail.state.phase is Phase.LEADING:
            lsn = min(lsn, self._tail.state.acked)
        self._tail.advance_watermark(lsn)

    def health(self) -> LadderHealth:
        state = self._tail.state
        reason = self._lake_fenced or state.reason
        return LadderHealth(
            ok=state.phase is Phase.LEADING and self._lake_fenced is None,
            phase="fenced" if self._lake_fenced else state.phase.value,
            reason=reason,
            durable_lsn=state.acked,
            trimmed_lsn=state.watermark,
            watermark_lsn=state.watermark,
            epoch=str(state.term),
        )

    def stats(self) -> dict[str, Any]:
        shown = self.health()
        return {"trimmed_lsn": shown.trimmed_lsn, "lake_lsn": shown.watermark_lsn, "writer_term": shown.epoch}


@asynccontextmanager
async def open_ladder_quorum_tail(
    addresses: str | Sequence[str], tail_id: str, *, timing: Timing | None = None
) -> AsyncIterator[QuorumLadderTail]:
    """Win a term and recover; `replay` holds every recovered record (the ladder filters them by
    each table's lake watermark)."""
    async with open_quorum_tail(addresses, timing=timing) as tail:
        yield QuorumLadderTail(tail, tail_id)
