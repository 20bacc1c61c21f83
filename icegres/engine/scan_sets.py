"""One Parquet scan over exactly a snapshot's local files: a private directory of links to them.

DataFusion's Python bindings scan either one path or one directory. A table was therefore
mounted as a union of one scan per data file, and every statement paid for each branch: the
optimizer rules walk it, the physical planner builds a scan per file, execution opens a stream
per file. On the 4-file demo table (DataFusion alone, interleaved): point lookup 3.61 -> 2.59 ms,
selective filter 4.52 -> 2.96 ms with one scan over a directory holding the same files.

A table's data directory cannot be that directory: it also holds files of other snapshots and
files of commits still in flight. So each mounted snapshot gets a directory of its own under a
per-process root, holding one link per data file (`ScanSet`). It never changes after it is made,
which is also what makes DataFusion's listing cache correct for it. Files on object stores keep
the union (nothing to link there).

A link is a hard link where the filesystem allows one, else a symbolic link. Every commit of a
table builds its set anew, so a table of many small files pays a link per file per commit, on the
commit's path (bench `history`, issue 30): a symbolic link to a lake path (over 60 bytes) costs
an inode and a data block each, and a set of 2,000 files took ~20x longer to make and to remove
with them than with hard links (bench `scan_links`, same run). A hard link also keeps a file
readable after expiry deletes it from the lake, which only helps the statements the set's holds
protect; the space comes back when the set goes.

A ScanSet's directory goes when the last reference to it does. The engine holds the current
one of each table; a re-mount retires it, and `ScanSets` keeps a retired set until every
statement that began before the retirement has let go of its `Hold` (a statement planned then
may still open files through it), so no scan ever finds its directory gone. Transaction
contexts hold the sets of their pinned snapshots themselves.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import queue
import shutil
import tempfile
import threading
import weakref
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["Hold", "Retirements", "ScanSet", "ScanSets"]

_ROOT_PREFIX = "icegres-scan-"


class ScanSet:
    """A directory of links to a fixed list of local Parquet files; removed when garbage."""

    def __init__(self, path: Path, files: tuple[str, ...]) -> None:
        self.path = path
        self.files = files
        weakref.finalize(self, _doomed.put, str(path))

    @property
    def url(self) -> str:
        return str(self.path) + "/"


@dataclass
class Retirements:
    """Which retired sets may still be read: pure bookkeeping of statement holds.

    A statement takes a hold (the current epoch) before it plans; retiring a set starts a new
    epoch. A set retired at epoch e may be read by any statement whose hold began at an epoch
    before e, and by no statement that began later (it planned over the set's successor)."""

    epoch: int = 0
    holds: dict[int, int] = field(default_factory=dict)  # hold id -> epoch it began in
    retired: list[tuple[int, object]] = field(default_factory=list)  # (epoch retired at, set)

    def begin(self, hold_id: int) -> None:
        self.holds[hold_id] = self.epoch

    def end(self, hold_id: int) -> list[object]:
        self.holds.pop(hold_id, None)
        return self._release()

    def retire(self, item: object) -> list[object]:
        self.epoch += 1
        self.retired.append((self.epoch, item))
        return self._release()

    def _release(self) -> list[object]:
        """The retired sets no held statement can still read (the caller drops them)."""
        oldest = min(self.holds.values(), default=self.epoch)
        free = [item for at, item in self.retired if at <= oldest]
        if free:
            self.retired = [(at, item) for at, item in self.retired if at > oldest]
        return free


class Hold:
    """A statement's claim on every set current when it began; ends when it is garbage."""

    __slots__ = ("__weakref__",)


class ScanSets:
    """The per-process root of scan directories, and the holds that decide when they may go."""

    def __init__(self) -> None:
        # Re-entrant: a hold or a set found by the cycle collector is finalized inside whatever
        # code runs then, which may be this object's own locked section. Every interleaving that
        # allows is conservative (Retirements only ever keeps a set longer).
        self._lock = threading.RLock()
        self._root: Path | None = None
        self._names = itertools.count()
        self._ids = itertools.count()
        self._books = Retirements()
        self._live: weakref.WeakValueDictionary[tuple[str, tuple[str, ...]], ScanSet] = weakref.WeakValueDictionary()
        _start_remover()

    def acquire(self, snapshot: str, files: Sequence[str]) -> ScanSet:
        """The set over `files` (absolute local paths, in scan order) of the snapshot named by
        `snapshot`: the live one if any holder still has it, else a new directory."""
        key = (snapshot, tuple(files))
        with self._lock:
            found = self._live.get(key)
            if found is not None:
                return found
            path = self._new_dir()
        try:
            link = os.link
            for i, file in enumerate(key[1]):
                # Numbered so the listing (sorted by name) scans in the snapshot's file order.
                name = path / f"{i:06d}-{os.path.basename(file)}"
                try:
                    link(file, name)
                except OSError:
                    if link is os.symlink:
                        raise
                    # Another filesystem than the root's, or hard links refused (protected_hardlinks).
                    link = os.symlink
                    link(file, name)
        except OSError:
            shutil.rmtree(path, ignore_errors=True)
            raise
        made = ScanSet(path, key[1])
        with self._lock:
            return self._live.setdefault(key, made)

    def live_files(self) -> set[str]:
        """The files of every set some holder still has (current or retired, not yet released)."""
        with self._lock:
            return {f for s in self._live.values() for f in s.files}

    def hold(self) -> Hold:
        """Take before planning a statement; keep for as long as its plan may open files."""
        hold = Hold()
        hold_id = next(self._ids)
        with self._lock:
            self._books.begin(hold_id)
        weakref.finalize(hold, self._end, hold_id)
        return hold

    def retire(self, item: object) -> None:
        """The engine stopped mounting `item` (a set, or anything holding sets): keep it until
        the statements that may read it are done."""
        with self._lock:
            free = self._books.retire(item)
        del free  # dropped outside the lock: a set's finalizer queues its directory's removal

    def _end(self, hold_id: int) -> None:
        with self._lock:
            free = self._books.end(hold_id)
        del free

    def _new_dir(self) -> Path:
        if self._root is None:
            _remove_orphans()
            self._root = Path(tempfile.mkdtemp(prefix=f"{_ROOT_PREFIX}{os.getpid()}-"))
            weakref.finalize(self, shutil.rmtree, str(self._root), True)
        path = self._root / str(next(self._names))
        path.mkdir()
        return path


# Directories are removed on a thread of their own: the last reference to a set may go on the
# trio loop (a finished statement's stream), and a table of many files has many links. The
# finalizer only queues (SimpleQueue.put is safe anywhere, even inside another lock).
_doomed: queue.SimpleQueue[str] = queue.SimpleQueue()
_remover: threading.Thread | None = None
_remover_lock = threading.Lock()


def _start_remover() -> None:
    global _remover
    with _remover_lock:
        if _remover is None:
            _remover = threading.Thread(target=_remove_forever, name="icegres-scan-sets", daemon=True)
            _remover.start()


def _remove_forever() -> None:
    while True:
        shutil.rmtree(_doomed.get(), ignore_errors=True)


def _remove_orphans() -> None:
    """Roots left by processes that died without cleaning up (their pid is in the name)."""
    base = Path(tempfile.gettempdir())
    with contextlib.suppress(OSError):
        for entry in base.iterdir():
            if not entry.name.startswith(_ROOT_PREFIX):
                continue
            pid = entry.name.removeprefix(_ROOT_PREFIX).split("-", 1)[0]
            if pid.isdigit() and not process_alive(int(pid)):
                shutil.rmtree(entry, ignore_errors=True)


def process_alive(pid: int) -> bool:
    """Whether a process with this id exists (one of another user's counts)."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
