"""The trio driver of the WAL tail machine: performs effects on a segment store, feeds back events.

`open_wal_tail(path, ...)` recovers a tail directory (cutting a torn final record, refusing a
poisoned one), makes what it found durable, and yields a `WalTail` whose `append(payload)` returns
the record's LSN once an fsync covers it. All file I/O runs in worker threads (`DirectoryStore`);
the group window is a trio sleep, so `trio.testing.MockClock` makes timing deterministic. The
driver decides nothing: the core is stepped synchronously from whichever task has news (trio
switches tasks only at awaits, so steps never interleave), and each effect is performed in the
driver's own nursery.
"""

from __future__ import annotations

import errno
import fcntl
import logging
import os
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path
from typing import Any, Protocol

import outcome
import trio

from icegres.machines.drivers.serial_thread import SerialThread

# AppendFailed is every tail's: re-exported here, where the WAL's callers have always found it.
from icegres.machines.drivers.tail import AppendFailed, SteppedTail, TailUnavailable, drain
from icegres.machines.wal import (
    Config,
    CreateSegment,
    DeleteSegments,
    DirectorySynced,
    Effect,
    Event,
    Fsync,
    FsyncDone,
    FsyncFailed,
    Health,
    IoFailed,
    Phase,
    Recovery,
    SegmentCreated,
    SegmentSynced,
    State,
    SyncDirectory,
    SyncSegment,
    Write,
    WriteDone,
    health,
    recover,
    step,
)
from icegres.machines.wal_format import Record, parse_segment_name, segment_name

__all__ = [
    "AppendFailed",
    "DirectoryStore",
    "SegmentStore",
    "WalTail",
    "open_wal_tail",
    "read_tail",
]

log = logging.getLogger(__name__)


class SegmentStore(Protocol):
    """Where segment files live. Every method may raise OSError; names are segment file names.

    A store may also offer `write_then_fsync(name, offset, data) -> OSError | None` (see
    DirectoryStore): the driver then writes and fsyncs a batch in one call; and
    `submit_write_then_fsync(name, offset, data, done)`, the same call answered through a
    callback on the trio thread, which the driver then prefers, with `async drained()` to wait
    for every such call."""

    async def read_all(self) -> dict[str, bytes]: ...

    async def create(self, name: str) -> None:
        """Create the empty file exclusively; fsync it and the directory."""
        ...

    async def write(self, name: str, offset: int, data: bytes) -> None: ...

    async def fsync(self, name: str) -> None: ...

    async def truncate_and_fsync(self, name: str, length: int) -> None: ...

    async def sync_directory(self) -> None: ...

    async def delete(self, names: list[str]) -> None:
        """Unlink the files, then fsync the directory."""
        ...

    def close(self) -> None: ...


class DirectoryStore:
    """Segment files in one local directory. The calls on the append path run on the store's own
    thread (`SerialThread`: one hop cheaper than a pooled worker thread); recovery's read and the
    deletion of trimmed segments run in worker threads, off that path."""

    LOCK_NAME = "LOCK"  # not a segment name: recovery never reads it

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self._fds: dict[str, int] = {}
        self._lock_fd: int | None = None
        self._thread = SerialThread(f"wal-io {self.path.name}")

    def claim(self) -> None:
        """Hold the directory for this process (an exclusive flock, released by the kernel when
        the process dies, SIGKILL included), or raise TailUnavailable naming the holder.

        A WAL directory has exactly one writer: a second server appending to it would write
        segments the first one trims, and its acknowledged records would be lost (found by
        `icegres verify`: two servers on one --tail-dir both started and acknowledged writes)."""
        self.path.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path / self.LOCK_NAME, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 64, 0).decode(errors="replace").strip() or "another process"
            os.close(fd)
            raise TailUnavailable(f"the WAL directory {self.path} is in use by {holder}: one server per --tail-dir "
                                  "(stop it first, or give this server a directory of its own)") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"pid {os.getpid()}\n".encode(), 0)
        self._lock_fd = fd

    async def read_all(self) -> dict[str, bytes]:
        return await trio.to_thread.run_sync(self._read_all)

    def _read_all(self) -> dict[str, bytes]:
        self.path.mkdir(parents=True, exist_ok=True)
        return {
            p.name: p.read_bytes()
            for p in self.path.iterdir()
            if p.is_file() and parse_segment_name(p.name) is not None
        }

    async def create(self, name: str) -> None:
        await self._thread.run(self._create, name)

    def _create(self, name: str) -> None:
        fd = os.open(self.path / name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
        self._fds[name] = fd
        os.fsync(fd)
        self._sync_directory()

    async def write(self, name: str, offset: int, data: bytes) -> None:
        await self._thread.run(self._write, name, offset, data)

    def _write(self, name: str, offset: int, data: bytes) -> None:
        fd = self._fd(name)
        view = memoryview(data)
        while view:
            written = os.pwrite(fd, view, offset)
            if written <= 0:
                raise OSError(errno.EIO, f"short write to {name}")
            view, offset = view[written:], offset + written

    async def fsync(self, name: str) -> None:
        await self._thread.run(lambda: os.fsync(self._fd(name)))

    async def write_then_fsync(self, name: str, offset: int, data: bytes) -> OSError | None:
        """Write, then fsync the file, in one worker-thread call (one thread hop, not two).

        Raises the write's OSError; returns the fsync's (the bytes are written but may not be
        durable), or None once they are."""
        return await self._thread.run(self._write_then_fsync, name, offset, data)

    def submit_write_then_fsync(self, name: str, offset: int, data: bytes,
                                done: Callable[[outcome.Outcome[OSError | None]], object]) -> None:
        """`write_then_fsync` without a waiting task: `done(outcome)` is called on the trio thread
        when the call ends (`SerialThread.submit`); `drained` waits for every such call."""
        self._thread.submit(self._write_then_fsync, name, offset, data, done=done)

    async def drained(self) -> None:
        await self._thread.drained()

    def _write_then_fsync(self, name: str, offset: int, data: bytes) -> OSError | None:
        self._write(name, offset, data)
        try:
            os.fsync(self._fd(name))
        except OSError as exc:
            return exc
        return None

    async def truncate_and_fsync(self, name: str, length: int) -> None:
        await self._thread.run(self._truncate_and_fsync, name, length)

    def _truncate_and_fsync(self, name: str, length: int) -> None:
        fd = self._fd(name)
        if os.fstat(fd).st_size != length:
            os.ftruncate(fd, length)
        os.fsync(fd)

    async def sync_directory(self) -> None:
        await self._thread.run(self._sync_directory)

    def _sync_directory(self) -> None:
        fd = os.open(self.path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    async def delete(self, names: list[str]) -> None:
        await trio.to_thread.run_sync(self._delete, names)

    def _delete(self, names: list[str]) -> None:
        for name in names:
            fd = self._fds.pop(name, None)
            if fd is not None:
                os.close(fd)
            try:
                os.unlink(self.path / name)
            except FileNotFoundError:
                pass
        self._sync_directory()

    def _fd(self, name: str) -> int:
        fd = self._fds.get(name)
        if fd is None:
            fd = os.open(self.path / name, os.O_WRONLY | os.O_CLOEXEC)
            self._fds[name] = fd
        return fd

    def close(self) -> None:
        self._thread.close()
        fds, self._fds = self._fds, {}
        for fd in fds.values():
            os.close(fd)
        if self._lock_fd is not None:
            os.close(self._lock_fd)  # releases the flock
            self._lock_fd = None


class WalTail(SteppedTail):
    """One open tail. Create it with `open_wal_tail`; use it only from that trio run. Appends,
    the watermark and timers are `SteppedTail`'s; this class performs the file I/O."""

    kind = "wal"
    name = "WAL"
    _opening = frozenset({Phase.STARTING, Phase.OPENING})
    _core_step = staticmethod(step)
    _state: State
    replay: tuple[Record, ...]
    recovery: Recovery

    def __init__(self, store: SegmentStore, recovery: Recovery, nursery: trio.Nursery) -> None:
        # Segment -> outcome of the fsync a Write already did (None: durable), for the Fsync the
        # core always asks for next: the core waits for WriteDone before it asks, so a store
        # that can write and fsync in one call saves the second thread hop of every batch.
        self._presynced: dict[str, OSError | None] = {}
        self._store = store
        # A batch's Write handed straight to the store's thread (no task, no scheduler pass
        # before it starts or after it ends); its answer steps the core from a callback.
        self._submit = getattr(store, "submit_write_then_fsync", None)
        super().__init__(recovery, nursery)

    def health(self) -> Health:
        return health(self._state)

    def stats(self) -> dict[str, Any]:
        shown = self.health()
        return {"trimmed_lsn": shown.watermark_lsn, "wal_segments": shown.segments, "wal_ok": shown.ok}

    def _perform_own(self, effect: Effect) -> None:
        match effect:
            case DeleteSegments(segments=segments):
                names = [segment_name(self.tail_id, s) for s in segments]
                self._nursery.start_soon(self._delete, names)
            case Write(segment=segment, offset=offset, data=data) if self._submit is not None:
                name = segment_name(self.tail_id, segment)
                self._submit(name, offset, data, partial(self._written, name))
            case Fsync(segment=segment) if segment_name(self.tail_id, segment) in self._presynced:
                # The Write already fsynced: answer now, without a task or a thread hop.
                failure = self._presynced.pop(segment_name(self.tail_id, segment))
                self._step(FsyncDone() if failure is None else FsyncFailed(_failure(failure)))
            case Write() | Fsync() | CreateSegment() | SyncSegment() | SyncDirectory():
                self._nursery.start_soon(self._io, effect)
            case _:
                raise AssertionError(f"unknown effect {effect!r}")

    def _written(self, name: str, result: outcome.Outcome[OSError | None]) -> None:
        """A submitted Write's answer, on the trio thread. As in `_io`: the write's OSError fails
        the Write; the fsync's is the answer to the Fsync the core asks for next."""
        event: Event
        try:
            self._presynced[name] = result.unwrap()
            event = WriteDone()
        except OSError as exc:
            event = IoFailed(_failure(exc))
        except Exception as exc:  # a bug in the store: poison the tail (never ack), don't crash trio
            log.exception("the WAL store's write raised")
            event = IoFailed(f"{type(exc).__name__}: {exc}")
        self._step(event)

    async def _delete(self, names: list[str]) -> None:
        try:
            await self._store.delete(names)
        except OSError:
            # The segments are in the lake; a leftover is deleted again at the next recovery.
            log.warning("could not delete WAL segments %s", names, exc_info=True)

    async def _io(self, effect: Effect) -> None:
        event: Event
        # The store call must finish even if the tail is being closed: an abandoned write could
        # land after we believed it had not.
        with trio.CancelScope(shield=True):
            try:
                event = await self._io_call(effect)
            except OSError as exc:
                fsyncing = isinstance(effect, Fsync | SyncDirectory)
                event = FsyncFailed(_failure(exc)) if fsyncing else IoFailed(_failure(exc))
        self._step(event)

    async def _io_call(self, effect: Effect) -> Event:
        name = segment_name
        match effect:
            case Write(segment=segment, offset=offset, data=data):
                fused = getattr(self._store, "write_then_fsync", None)
                if fused is None:
                    await self._store.write(name(self.tail_id, segment), offset, data)
                else:
                    # A failed fsync is not this Write's failure: it is reported as the answer
                    # to the Fsync that follows (poisoning the tail), never retried or forgotten.
                    self._presynced[name(self.tail_id, segment)] = await fused(
                        name(self.tail_id, segment), offset, data
                    )
                return WriteDone()
            case Fsync(segment=segment):
                await self._store.fsync(name(self.tail_id, segment))
                return FsyncDone()
            case CreateSegment(first_lsn=first):
                await self._store.create(name(self.tail_id, first))
                return SegmentCreated(first)
            case SyncSegment(segment=segment, length=length):
                await self._store.truncate_and_fsync(name(self.tail_id, segment), length)
                return SegmentSynced(segment)
            case SyncDirectory():
                await self._store.sync_directory()
                return DirectorySynced()
        raise AssertionError(f"not an I/O effect: {effect!r}")


WatermarkOf = Callable[[str], int]


async def read_tail(
    store: SegmentStore | str | os.PathLike[str],
    config: Config | None = None,
    *,
    watermark_lsn: int | WatermarkOf = 0,
    new_tail_id: str | None = None,
) -> Recovery:
    """Read a tail directory and plan its recovery without changing anything on disk.

    `watermark_lsn` is the lake's committed LSN, or a function from the tail id found on disk to
    it. Raises icegres.machines.wal.PoisonedTail when the tail must not be started.
    """
    if not hasattr(store, "read_all"):
        store = DirectoryStore(store)  # type: ignore[arg-type]
    files = await store.read_all()  # type: ignore[union-attr]
    watermark = watermark_lsn
    if callable(watermark):
        tail_ids = {parsed[1] for n in files if (parsed := parse_segment_name(n)) is not None}
        watermark = watermark(next(iter(tail_ids))) if len(tail_ids) == 1 else 0
    return recover(
        files, config or Config(), watermark_lsn=watermark, new_tail_id=new_tail_id or _new_id()
    )


@asynccontextmanager
async def open_wal_tail(
    path: str | os.PathLike[str] | SegmentStore,
    config: Config | None = None,
    *,
    watermark_lsn: int | WatermarkOf = 0,
    new_tail_id: str | None = None,
) -> AsyncIterator[WalTail]:
    """Recover the tail at `path` and keep it open for the block.

    On entry the recovered records are durable and `tail.replay` holds those above the
    watermark, to be replayed into the lake before serving. Raises PoisonedTail (refuse to
    start) and AppendFailed if recovery's own syncs fail. On exit, appends still in flight are
    finished (their waiters answered) before the files are closed.
    """
    store: SegmentStore = path if hasattr(path, "read_all") else DirectoryStore(path)  # type: ignore[arg-type,assignment]
    if isinstance(store, DirectoryStore):
        await trio.to_thread.run_sync(store.claim)
    try:
        recovery = await read_tail(store, config, watermark_lsn=watermark_lsn, new_tail_id=new_tail_id)
    except BaseException:
        store.close()
        raise
    try:
        async with trio.open_nursery() as nursery:
            tail = WalTail(store, recovery, nursery)
            await tail.wait_opened()
            if tail.state.phase is Phase.POISONED:
                raise AppendFailed(
                    f"could not open the WAL tail: {tail.state.poison_reason}",
                    outcome_unknown=False,
                )
            # Segments recovery found wholly in the lake go now.
            tail.advance_watermark(recovery.state.watermark_lsn)
            try:
                yield tail
            finally:
                await drain(store)  # the submitted Writes, before the files close
            nursery.cancel_scope.cancel()
    finally:
        store.close()


def _failure(exc: OSError) -> str:
    return f"{type(exc).__name__}: {exc}"


def _new_id() -> str:
    return os.urandom(8).hex()
