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
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

import trio

from icegres.machines.quorum import (
    AcceptorState,
    Persist,
    Reply,
    acceptor_step,
    recover_acceptor,
)
from icegres.machines.quorum_format import (
    CorruptFrame,
    IncompleteFrame,
    QuorumFormatError,
    decode_frame,
    encode_frame,
    scan_log,
)

__all__ = ["KeeperLog", "KeeperRefused", "KeeperServer", "LOG_NAME", "open_keeper_log"]

log = logging.getLogger(__name__)

LOG_NAME = "keeper.log"
READ_BYTES = 256 * 1024
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

    @property
    def state(self) -> AcceptorState:
        return AcceptorState(self._promised, self._trimmed, dict(self._accepted))

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
        tmp = self.path.with_suffix(".tmp")
        data = encode_frame(_snapshot(self.state))
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
        try:
            os.write(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, self.path)
        _fsync_dir(self.path.parent)
        os.close(self.fd)
        self.fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CLOEXEC)
        self.size = len(data)

    def close(self) -> None:
        os.close(self.fd)


def _snapshot(state: AcceptorState) -> Persist:
    entries = tuple(state.accepted[s] for s in sorted(state.accepted))
    return Persist(state.promised, state.trimmed, entries)


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
            f"{directory} holds no keeper log ({LOG_NAME}). If this is a new keeper, start it "
            "once with --init. If this keeper lost its disk, it must not rejoin under the same "
            "address: it would have forgotten its promises (docs/quorum-protocol.md, 'Disk loss')"
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
        keeper_log: KeeperLog,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        compact_bytes: int = 64 * 1024 * 1024,
    ) -> None:
        self.log = keeper_log
        self.host = host
        self.port = port
        self.compact_bytes = compact_bytes
        self.state: AcceptorState = keeper_log.state  # a copy: the log folds its own
        self._queued: list[Persist] = []
        self._queued_seq = 0  # Persists produced so far
        self._durable_seq = 0  # Persists fsynced so far
        self._wake_writer = trio.Event()
        self._durable_changed = trio.Event()
        self.failure: str | None = None

    async def serve(self, *, task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED) -> None:
        listeners = await trio.open_tcp_listeners(self.port, host=self.host)
        self.port = listeners[0].socket.getsockname()[1]
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._writer, nursery.cancel_scope)
            await nursery.start(trio.serve_listeners, self._connection, listeners)
            task_status.started(self.port)

    async def _writer(self, cancel_scope: trio.CancelScope) -> None:
        """The one task that writes the log: each batch is every Persist queued meanwhile."""
        while True:
            await self._wake_writer.wait()
            self._wake_writer = trio.Event()
            batch, self._queued = self._queued, []
            if not batch:
                continue
            try:
                # Shielded: a write that has started must finish before anyone is told otherwise.
                with trio.CancelScope(shield=True):
                    await trio.to_thread.run_sync(self.log.append_and_fsync, batch)
                    if self.log.size > self.compact_bytes:
                        await trio.to_thread.run_sync(self.log.compact)
            except OSError as exc:
                self.failure = f"writing {self.log.path} failed: {exc}; the keeper stops"
                log.error("%s", self.failure)
                cancel_scope.cancel()
                return
            self._durable_seq += len(batch)
            self._durable_changed.set()
            self._durable_changed = trio.Event()

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
        buffer = bytearray()
        while True:
            chunk = await stream.receive_some(READ_BYTES)
            if not chunk:
                return
            buffer += chunk
            offset = 0
            while offset < len(buffer):
                try:
                    message, end = decode_frame(buffer, offset, body_bytes_max=FRAME_BYTES_MAX)
                except IncompleteFrame:
                    break
                except CorruptFrame as exc:
                    log.warning("closing the connection from %s: %s", peer, exc)
                    return
                offset = end
                try:
                    state, effects = acceptor_step(self.state, message)  # type: ignore[arg-type]
                except Exception as exc:  # a frame that is not a request
                    log.warning("closing the connection from %s: %s", peer, exc)
                    return
                self.state = state
                for effect in effects:
                    if isinstance(effect, Persist):
                        self._queued.append(effect)
                        self._queued_seq += 1
                        self._wake_writer.set()
                    elif isinstance(effect, Reply):
                        # Sent once every Persist produced so far is durable.
                        await send.send((self._queued_seq, encode_frame(effect.message)))
            del buffer[:offset]

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


async def run_keeper(
    data_dir: str | os.PathLike[str], host: str, port: int, *, init: bool = False
) -> None:
    """Open the log and serve until cancelled. Raises KeeperRefused (refusing to start, or a
    write failure that stopped the keeper)."""
    keeper_log = await trio.to_thread.run_sync(lambda: open_keeper_log(data_dir, init=init))
    server = KeeperServer(keeper_log, host, port)
    try:
        async with trio.open_nursery() as nursery:
            bound = await nursery.start(server.serve)
            state = server.state
            log.info(
                "keeper listening on %s:%d (data dir %s, promised term %s, %d records held above "
                "trim point %d)",
                host,
                bound,
                data_dir,
                state.promised,
                len(state.accepted),
                state.trimmed,
            )
    finally:
        keeper_log.close()
    if server.failure:
        raise KeeperRefused(server.failure)
