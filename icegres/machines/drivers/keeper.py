"""`icegres keeper`: one acceptor of the quorum tail, a trio TCP server over a durable log.

The acceptor core (`icegres.machines.quorum.acceptor_step`) decides; this module acts. Requests
arrive as frames (`icegres.machines.quorum_format`, documented in docs/quorum-protocol.md), are
stepped one at a time in the event loop, and every `Persist` they produce is appended to
`<data-dir>/keeper.log` and fsynced (in a worker thread) before the `Reply` of that step, or of any
later step, leaves the process. Persists of concurrent requests share one write and one fsync.

The log is a run of checksummed Persist frames; folding them gives the acceptor's state. At start
a torn or corrupt final frame (a write a crash interrupted) is cut; damage followed by a valid
frame refuses to start. A log grown past `compact_bytes` is rewritten as one snapshot frame (temp
file, fsync, rename, directory fsync). A failed write or fsync stops the keeper: after a failed
fsync the kernel may have dropped the pages (fsyncgate), and a keeper that answers from state it
cannot vouch for breaks the quorum.

An empty data directory is a new member only with `--init` (and `--init` refuses a directory that
already holds a log): a keeper that lost its disk must not rejoin as if it had promised nothing.
It rejoins with `--rejoin host:port,...` (the other members): it listens at once but refuses every
request (`Refused`) while the rejoin core (`icegres.machines.quorum_rejoin`) collects snapshots
from enough peers; the merge becomes `keeper.log` atomically (temp file, fsync, rename, directory
fsync), and only then does the keeper answer. A crash before that leaves no `keeper.log`, so the
next start must be `--rejoin` again: a half-done catch-up can never pass for a member's state.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from functools import partial
from pathlib import Path

import outcome
import trio

from icegres.listeners import BoundPort, bind_port
from icegres.machines.drivers.quorum import received_frames, sent_frames
from icegres.machines.drivers.serial_thread import SerialThread
from icegres.machines.quorum import (
    AcceptorPhase,
    AcceptorState,
    CatchUp,
    CaughtUp,
    Persist,
    Refused,
    Reply,
    Snapshot,
    Tick,
    acceptor_step,
    recover_acceptor,
    rejoining_acceptor,
)
from icegres.machines.quorum_format import (
    CorruptFrame,
    QuorumFormatError,
    encode_frame,
    scan_log,
)
from icegres.machines.quorum_rejoin import (
    AskPeer,
    Install,
    RejoinConfig,
    RejoinState,
    SnapshotReceived,
    rejoin_step,
    start_rejoin,
)

__all__ = [
    "KeeperLog",
    "KeeperRefused",
    "KeeperServer",
    "LOG_NAME",
    "create_rejoined_log",
    "open_keeper_log",
    "run_keeper",
]

# The name it has always logged under (operators filter on it), wherever the module lives.
log = logging.getLogger("icegres.keeper")

LOG_NAME = "keeper.log"
# A request frame larger than this closes the connection (a writer's batch is far smaller).
FRAME_BYTES_MAX = 128 * 1024 * 1024


class KeeperRefused(Exception):
    """The keeper must not start (or must stop): the message says why and what to do."""


class KeeperLog:
    """The keeper's append-only log file. Blocking methods: call them in a worker thread."""

    def __init__(
        self, path: Path, fd: int, size: int, state: AcceptorState, cut_bytes: int = 0
    ) -> None:
        self.path = path
        self.fd = fd
        self.size = size
        self.cut_bytes = cut_bytes
        # The state the durable log folds to, kept mutable here (the log may hold many records):
        # `state` hands out a frozen copy.
        self._promised = state.promised
        self._trimmed = state.trimmed
        self._accepted = dict(state.accepted)
        self._rejoins = state.rejoins

    @property
    def state(self) -> AcceptorState:
        return AcceptorState(
            self._promised, self._trimmed, dict(self._accepted), rejoins=self._rejoins
        )

    def append_and_fsync(self, records: list[Persist]) -> None:
        data = b"".join(encode_frame(r) for r in records)
        view = memoryview(data)
        while view:
            written = os.write(self.fd, view)
            view = view[written:]
        os.fsync(self.fd)
        self.size += len(data)
        self._fold(records)

    def _fold(self, records: list[Persist]) -> None:
        """What `recover_acceptor` does, incrementally."""
        trimmed_before = self._trimmed
        for record in records:
            self._promised = max(self._promised, record.promised)
            self._trimmed = max(self._trimmed, record.trimmed)
            self._rejoins = max(self._rejoins, record.rejoins)
            for entry in record.entries:
                self._accepted[entry.slot] = entry
        if self._trimmed > trimmed_before:
            for slot in [s for s in self._accepted if s <= self._trimmed]:
                del self._accepted[slot]
        else:
            for record in records:
                for entry in record.entries:
                    if entry.slot <= self._trimmed:
                        self._accepted.pop(entry.slot, None)

    def compact(self) -> None:
        """Rewrite the log as one snapshot frame of its state (crash-safe: rename is atomic)."""
        data = encode_frame(_snapshot(self.state))
        _write_whole(self.path, data)
        os.close(self.fd)
        self.fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CLOEXEC)
        self.size = len(data)

    def close(self) -> None:
        os.close(self.fd)


def _snapshot(state: AcceptorState) -> Persist:
    entries = tuple(state.accepted[s] for s in sorted(state.accepted))
    return Persist(state.promised, state.trimmed, entries, state.rejoins)


def create_rejoined_log(data_dir: str | os.PathLike[str], record: Persist) -> KeeperLog:
    """Write a caught-up keeper's first log, atomically; blocking. Raises KeeperRefused.

    The log appears whole or not at all (temp file, fsync, rename, directory fsync): a keeper
    that dies mid catch-up leaves no `keeper.log` and must rejoin again, never start from half.
    """
    directory = Path(data_dir)
    path = directory / LOG_NAME
    if path.exists():
        raise KeeperRefused(
            f"{path} appeared during the catch-up: another keeper uses {directory}?"
        )
    data = encode_frame(record)
    _write_whole(path, data)
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CLOEXEC)
    return KeeperLog(path, fd, len(data), recover_acceptor([record]))


def _prepare_rejoin_dir(data_dir: str | os.PathLike[str]) -> None:
    directory = Path(data_dir)
    path = directory / LOG_NAME
    if path.exists():
        raise KeeperRefused(
            f"{path} exists: --rejoin is for a keeper that lost its disk (an empty data dir); "
            "this one still holds its log, restart it without --rejoin"
        )
    directory.mkdir(parents=True, exist_ok=True)
    path.with_suffix(".tmp").unlink(missing_ok=True)  # a catch-up that died mid-write


def _write_whole(path: Path, data: bytes) -> None:
    """Replace `path` with `data` so that it is whole or absent after a crash: a temp file,
    fsynced, renamed over it, then the directory fsynced."""
    tmp = path.with_suffix(".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    _fsync_dir(path.parent)


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def open_keeper_log(data_dir: str | os.PathLike[str], *, init: bool = False) -> KeeperLog:
    """Open (or with `init`, create) the log in `data_dir`; blocking. Raises KeeperRefused."""
    directory = Path(data_dir)
    path = directory / LOG_NAME
    if init:
        if path.exists():
            raise KeeperRefused(
                f"{path} already exists: --init creates a new member; restart this keeper "
                "without --init"
            )
        directory.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND | os.O_CLOEXEC, 0o644)
        os.fsync(fd)
        _fsync_dir(directory)
        return KeeperLog(path, fd, 0, AcceptorState())
    if not path.exists():
        raise KeeperRefused(
            f"{directory} holds no keeper log ({LOG_NAME}). If this keeper lost its disk (or died "
            "during a catch-up), start it with --rejoin host:port,... naming the other keepers: "
            "it catches up from them before it answers (docs/quorum-protocol.md, 'Replacing a "
            "keeper that lost its disk'). --init is only for the keepers of a brand-new quorum"
        )
    data = path.read_bytes()
    try:
        scan = scan_log(data)
    except QuorumFormatError as exc:
        raise KeeperRefused(f"{path} is damaged, refusing to start: {exc}") from None
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CLOEXEC)
    if scan.torn_bytes:
        log.warning(
            "cutting %d torn bytes at the end of %s (%s)", scan.torn_bytes, path, scan.torn_reason
        )
        os.ftruncate(fd, scan.valid_bytes)
    # Fsync what was read before answering from it: after a crash the page cache may hold bytes
    # that never reached the disk.
    os.fsync(fd)
    return KeeperLog(
        path, fd, scan.valid_bytes, recover_acceptor(scan.records), cut_bytes=scan.torn_bytes
    )


class KeeperServer:
    """Serves one keeper log. `serve` runs until cancelled; `port` is known once it started."""

    def __init__(
        self,
        keeper_log: KeeperLog | None,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        compact_bytes: int = 64 * 1024 * 1024,
        bound: BoundPort | None = None,
    ) -> None:
        """`bound`: the listen sockets, bound before the log was opened (`run_keeper`); without
        it `serve` binds `host`:`port` itself."""
        # None: a rejoining keeper before its catch-up is durable (it refuses every request, so
        # nothing is persisted until `install` creates the log).
        self.log = keeper_log
        self.host = host
        self.port = bound.port if bound is not None else port
        self.bound = bound
        self.compact_bytes = compact_bytes
        self.state: AcceptorState = (
            keeper_log.state if keeper_log is not None else rejoining_acceptor()
        )  # a copy: the log folds its own
        self._queued: list[Persist] = []
        self._queued_seq = 0  # Persists produced so far
        self._durable_seq = 0  # Persists fsynced so far
        self._durable_changed = trio.Event()
        # One batch at a time goes to the log's own thread, handed over straight from the request
        # that queued it; its answer (a run_sync_soon callback) starts the next. No task waits in
        # between: each would cost scheduler passes on every acknowledgement.
        self._thread = SerialThread("keeper-log")
        self._writing = False
        self._serving: trio.CancelScope | None = None
        self.failure: str | None = None

    async def serve(self, *, task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED) -> None:
        if self.bound is not None:
            listeners = [trio.SocketListener(trio.socket.from_stdlib_socket(s)) for s in self.bound.listen()]
        else:
            listeners = await trio.open_tcp_listeners(self.port, host=self.host)
            self.port = listeners[0].socket.getsockname()[1]
        try:
            async with trio.open_nursery() as nursery:
                self._serving = nursery.cancel_scope
                await nursery.start(trio.serve_listeners, self._connection, listeners)
                task_status.started(self.port)
        finally:
            # A write that has started must finish before the keeper is gone (the writer task
            # this replaced was shielded for the same reason).
            with trio.CancelScope(shield=True):
                await self._thread.drained()
            self._thread.close()

    def _persist_soon(self) -> None:
        """Hand every queued Persist to the log's thread as one batch, unless one is in flight
        (its answer sends the next) or the keeper has failed."""
        if self._writing or not self._queued or self.failure is not None:
            return
        batch, self._queued = self._queued, []
        self._writing = True
        self._thread.submit(self._write_batch, batch, done=partial(self._batch_written, len(batch)))

    def _write_batch(self, batch: list[Persist]) -> None:
        assert self.log is not None, "a catching-up keeper persists nothing"
        self.log.append_and_fsync(batch)
        if self.log.size > self.compact_bytes:
            self.log.compact()

    def _batch_written(self, count: int, result: outcome.Outcome[None]) -> None:
        self._writing = False
        try:
            result.unwrap()
        except Exception as exc:  # OSError, or a bug: either way this keeper cannot vouch for its log
            path = self.log.path if self.log is not None else "the keeper log"
            self.failure = f"writing {path} failed: {exc}; the keeper stops"
            log.error("%s", self.failure, exc_info=not isinstance(exc, OSError))
            if self._serving is not None:
                self._serving.cancel()
            return
        self._durable_seq += count
        self._durable_changed.set()
        self._durable_changed = trio.Event()
        self._persist_soon()

    async def install(self, data_dir: str | os.PathLike[str], installed: Install) -> None:
        """Make a catch-up's merge durable as the first log, then answer from it (not before)."""
        state, effects = acceptor_step(self.state, CaughtUp(installed.state))
        (record,) = [e for e in effects if isinstance(e, Persist)]
        with trio.CancelScope(shield=True):
            self.log = await trio.to_thread.run_sync(create_rejoined_log, data_dir, record)
        # Requests that arrived during the write were refused from the old state: only now, with
        # the merge on disk, does the keeper answer from it.
        self.state = state

    async def _durable(self, seq: int) -> None:
        while self._durable_seq < seq:
            await self._durable_changed.wait()

    async def _connection(self, stream: trio.SocketStream) -> None:
        peer = _peer(stream)
        send, receive = trio.open_memory_channel[tuple[int, bytes]](1024)
        # A writer going away is routine (it resends what it did not hear back): both halves
        # catch their own errors and end the connection, so nothing escapes to the listener.
        async with stream, trio.open_nursery() as nursery:
            nursery.start_soon(self._replies, stream, receive, nursery.cancel_scope)
            try:
                await self._requests(stream, send, peer)
            except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                pass
            nursery.cancel_scope.cancel()

    async def _requests(
        self,
        stream: trio.SocketStream,
        send: trio.MemorySendChannel[tuple[int, bytes]],
        peer: str,
    ) -> None:
        try:
            async for message in received_frames(stream, body_bytes_max=FRAME_BYTES_MAX):
                try:
                    state, effects = acceptor_step(self.state, message)  # type: ignore[arg-type]
                except Exception as exc:  # a frame that is not a request
                    log.warning("closing the connection from %s: %s", peer, exc)
                    return
                self.state = state
                replies: list[tuple[int, bytes]] = []
                for effect in effects:
                    if isinstance(effect, Persist):
                        self._queued.append(effect)
                        self._queued_seq += 1
                    elif isinstance(effect, Reply):
                        # Sent once every Persist produced so far is durable.
                        replies.append((self._queued_seq, encode_frame(effect.message)))
                self._persist_soon()
                for reply in replies:
                    await send.send(reply)
        except CorruptFrame as exc:
            log.warning("closing the connection from %s: %s", peer, exc)

    async def _replies(
        self,
        stream: trio.SocketStream,
        receive: trio.MemoryReceiveChannel[tuple[int, bytes]],
        connection: trio.CancelScope,
    ) -> None:
        try:
            async for seq, frame in receive:
                await self._durable(seq)
                frames = [frame]
                # Coalesce what is already durable into one write.
                while True:
                    try:
                        seq, frame = receive.receive_nowait()
                    except trio.WouldBlock:
                        break
                    await self._durable(seq)
                    frames.append(frame)
                await stream.send_all(b"".join(frames))
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            pass
        connection.cancel()


def _peer(stream: trio.SocketStream) -> str:
    try:
        host, port = stream.socket.getpeername()[:2]
        return f"{host}:{port}"
    except OSError:
        return "?"


class _PeerLink:
    """The connection to one peer during a catch-up: an outbox while connected, nothing while not
    (the core asks unanswered peers again every few ticks)."""

    def __init__(self, index: int, address: tuple[str, int]) -> None:
        self.index = index
        self.address = address
        self.outbox: trio.MemorySendChannel[bytes] | None = None
        self.refused: str | None = None

    def send(self, frame: bytes) -> None:
        if self.outbox is not None:
            try:
                self.outbox.send_nowait(frame)
            except (trio.WouldBlock, trio.BrokenResourceError, trio.ClosedResourceError):
                pass


class Rejoin:
    """The I/O of a catch-up: links to the peers, a ticker, and the rejoin core stepped in order.

    `run` returns the core's `Install` once enough peers answered; the caller makes it durable.
    """

    TICK_SECONDS = 0.05
    CONNECT_TIMEOUT_SECONDS = 1.0
    RECONNECT_SECONDS = 0.2
    PROGRESS_LOG_SECONDS = 5.0

    def __init__(self, peers: Sequence[tuple[str, int]]) -> None:
        self.links = [_PeerLink(i, a) for i, a in enumerate(peers)]
        self.state, effects = start_rejoin(RejoinConfig(peers=len(self.links)))
        self._pending = effects
        self._done = trio.Event()
        self.installed: Install | None = None

    async def run(self) -> Install:
        async with trio.open_nursery() as nursery:
            for link in self.links:
                nursery.start_soon(self._run_link, link)
            nursery.start_soon(self._ticker)
            self._perform(self._pending)
            await self._done.wait()
            nursery.cancel_scope.cancel()
        assert self.installed is not None
        return self.installed

    def _step(self, event: SnapshotReceived | Tick) -> None:
        if self.installed is not None:
            # Over: a duplicate answer or a tick can still arrive before `run` cancels the tasks.
            return
        self.state, effects = rejoin_step(self.state, event)
        self._perform(effects)

    def _perform(self, effects: list[AskPeer | Install]) -> None:
        for effect in effects:
            if isinstance(effect, AskPeer):
                self.links[effect.peer].send(encode_frame(effect.message))
            else:
                self.installed = effect
                self._done.set()

    async def _ticker(self) -> None:
        waited = 0.0
        while True:
            await trio.sleep(self.TICK_SECONDS)
            self._step(Tick())
            waited += self.TICK_SECONDS
            if waited >= self.PROGRESS_LOG_SECONDS:
                waited = 0.0
                state: RejoinState = self.state
                missing = [
                    f"{link.address[0]}:{link.address[1]}"
                    + (f" ({link.refused})" if link.refused else "")
                    for link in self.links
                    if link.index not in state.answers
                ]
                log.warning(
                    "catch-up %s: %d of the %d peers needed answered; waiting for %s",
                    state.phase.value,
                    len(state.answers),
                    state.config.needed,
                    ", ".join(missing),
                )

    async def _run_link(self, link: _PeerLink) -> None:
        host, port = link.address
        while True:
            stream = None
            with trio.move_on_after(self.CONNECT_TIMEOUT_SECONDS):
                try:
                    stream = await trio.open_tcp_stream(host, port)
                except OSError:
                    pass
            if stream is not None:
                send, receive = trio.open_memory_channel[bytes](64)
                # A peer going away is routine: both halves catch their own errors and end the
                # connection, so nothing escapes the nursery and the link simply reconnects.
                try:
                    async with stream, trio.open_nursery() as nursery:
                        link.outbox = send
                        nursery.start_soon(sent_frames, stream, receive, nursery.cancel_scope)
                        # Ask at once: a peer that connects late need not wait for a retry tick.
                        link.send(encode_frame(_catch_up_message(self.state)))
                        await self._read_link(link, stream)
                        nursery.cancel_scope.cancel()
                finally:
                    link.outbox = None
                    send.close()
            await trio.sleep(self.RECONNECT_SECONDS)

    async def _read_link(self, link: _PeerLink, stream: trio.SocketStream) -> None:
        try:
            async for message in received_frames(stream, body_bytes_max=FRAME_BYTES_MAX):
                if isinstance(message, Snapshot):
                    link.refused = None
                    self._step(SnapshotReceived(link.index, message))
                elif isinstance(message, Refused):
                    # The peer is catching up itself: it cannot vouch for anything yet.
                    link.refused = message.reason
                else:
                    log.warning("peer %s:%d answered a catch-up with %r", *link.address, message)
                    return
        except CorruptFrame as exc:
            log.warning("peer %s:%d sent a corrupt frame: %s", *link.address, exc)


def _catch_up_message(state: RejoinState) -> CatchUp:
    return CatchUp(state.target)


async def run_keeper(
    data_dir: str | os.PathLike[str],
    host: str,
    port: int,
    *,
    init: bool = False,
    rejoin: Sequence[tuple[str, int]] = (),
    bound: BoundPort | None = None,
) -> None:
    """Open the log (or, with `rejoin`, catch up from those peers first) and serve until
    cancelled. Raises KeeperRefused (refusing to start, or a write failure that stopped it) and
    CannotListen (the port is taken: then no directory was created or changed).

    `bound`: the listen sockets, bound by the caller; otherwise `host`:`port` is bound here, before
    the data directory is touched."""
    if init and rejoin:
        raise KeeperRefused("--init and --rejoin exclude each other")
    if (host, port) in rejoin:
        raise KeeperRefused(f"--rejoin names this keeper ({host}:{port}): list the other keepers")
    if bound is None:
        bound = bind_port(host, port)
    try:
        if rejoin:
            await trio.to_thread.run_sync(_prepare_rejoin_dir, data_dir)
            keeper_log = None
        else:
            keeper_log = await trio.to_thread.run_sync(lambda: open_keeper_log(data_dir, init=init))
    except BaseException:
        bound.close()
        raise
    server = KeeperServer(keeper_log, host, bound=bound)
    try:
        async with trio.open_nursery() as nursery:
            listening = await nursery.start(server.serve)
            if rejoin:
                log.info(
                    "keeper listening on %s:%d, catching up from %s before answering anyone",
                    host,
                    listening,
                    ", ".join(f"{h}:{p}" for h, p in rejoin),
                )
                installed = await Rejoin(rejoin).run()
                await server.install(data_dir, installed)
            state = server.state
            assert state.phase is AcceptorPhase.SERVING
            log.info(
                "keeper %s on %s:%d (data dir %s, promised term %s, %d records held above "
                "trim point %d, rejoin count %d)",
                "caught up and serving" if rejoin else "listening",
                host,
                listening,
                data_dir,
                state.promised,
                len(state.accepted),
                state.trimmed,
                state.rejoins,
            )
    finally:
        if server.log is not None:
            server.log.close()
    if server.failure:
        raise KeeperRefused(server.failure)
