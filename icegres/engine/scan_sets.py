"""One Parquet scan over exactly a snapshot's local files: a private directory of links to them.

DataFusion's Python bindings scan either one path or one directory. A table was therefore
mounted as a union of one scan per data file, and every statement paid for each branch: the
optimizer rules walk it, the physical planner builds a scan per file, execution opens a stream
per file. On the 4-file demo table (DataFusion alone, interleaved): point lookup 3.61 -> 2.59 ms,
selective filter 4.52 -> 2.96 ms with one scan over a directory holding the same files.

A table's data directory cannot be that directory: it also holds files of other snapshots and
files of commits still in flight. So each mounted snapshot gets a set of its own under a
per-process root (`ScanSet`): one directory of links to its files, or, from SEGMENTED_FROM
files on, a few directories (`Segment`s), each holding the links to a run of its files and
scanned as a union. A directory never changes after it is made, which is also what makes
DataFusion's listing cache correct for it. Files on object stores keep the union (nothing to
link there).

A link is a hard link where the filesystem allows one, else a symbolic link. Every commit of a
table mounts a new set; with one directory per set a table of many small files paid a link per
file per commit on the commit's path, and as much again to remove the set before it (2,000
files: ~33 ms a commit, the cost bench `history` saw grow with the file count, issue 30). A
segment is shared by every set whose file list holds its run, so a commit links only the runs
it changed (`segments_for`: ~10 links an append, at most ~log2(n) segments). A symbolic link to
a lake path (over 60 bytes) costs an inode and a data block each, and a set of 2,000 files took
~20x longer to make and to remove with them than with hard links (bench `scan_links`, same run).
A hard link also keeps a file readable after expiry deletes it from the lake, which only helps
the statements the set's holds protect; the space comes back when the set goes.

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
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["Hold", "Retirements", "ScanSet", "ScanSets", "Segment", "segments_for"]

_ROOT_PREFIX = "icegres-scan-"


# A set of this many files or more is made of segments (see `segments_for`); a smaller one is one
# directory, as a union of scans costs each statement a little per branch.
SEGMENTED_FROM = 64
_MAX_SEGMENTS = 32


class Segment:
    """A directory of links to a run of files, in order; removed when garbage. Shared by every
    set whose file list holds the same run."""

    def __init__(self, path: Path, files: tuple[str, ...]) -> None:
        self.path = path
        self.files = files
        weakref.finalize(self, _doomed.put, str(path))

    @property
    def url(self) -> str:
        return str(self.path) + "/"


class ScanSet:
    """A snapshot's local Parquet files as the directories (segments) that hold links to them, in
    the snapshot's file order."""

    def __init__(self, files: tuple[str, ...], segments: tuple[Segment, ...]) -> None:
        self.files = files
        self.segments = segments

    @property
    def urls(self) -> list[str]:
        return [segment.url for segment in self.segments]


def segments_for(files: tuple[str, ...], live: Callable[[str], Iterable[tuple[str, ...]]]) -> list[tuple[str, ...]]:
    """The runs of `files` a set is made of: runs that live segments already hold (`live(f)`:
    the file lists of live segments starting with file f) where they fit, new runs between them,
    and then adjacent runs of sizes within a factor of two merged, as a binary counter carries.

    Why: each commit of a table mounts a new set, and one directory per set linked every file of
    the table per commit (2,000 one-row commits: 20 ms of links plus 13 ms to remove the old
    set's, a commit's cost growing with the file count). With segments an append links ~10 files
    on average (each file is linked again about log2(n) times over n appends) and a set has at
    most ~log2(n) segments; a rewrite relinks only the segments holding its files."""
    if len(files) < SEGMENTED_FROM:
        return [files]
    runs: list[tuple[str, ...]] = []
    start, i = None, 0
    while i < len(files):
        fits = [seg for seg in live(files[i]) if files[i:i + len(seg)] == seg]
        if fits:
            if start is not None:
                runs.append(files[start:i])
                start = None
            best = max(fits, key=len)
            runs.append(best)
            i += len(best)
        else:
            start = i if start is None else start
            i += 1
    if start is not None:
        runs.append(files[start:])
    merged = True
    while merged:
        merged = False
        for k in range(len(runs) - 1):
            a, b = len(runs[k]), len(runs[k + 1])
            if 2 * min(a, b) > max(a, b):
                runs[k:k + 2] = [runs[k] + runs[k + 1]]
                merged = True
                break
    while len(runs) > _MAX_SEGMENTS:  # (rewrites can leave runs of any sizes)
        k = min(range(len(runs) - 1), key=lambda j: len(runs[j]) + len(runs[j + 1]))
        runs[k:k + 2] = [runs[k] + runs[k + 1]]
    return runs


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
        self._segments: weakref.WeakValueDictionary[tuple[str, ...], Segment] = weakref.WeakValueDictionary()
        self._starting: dict[str, set[tuple[str, ...]]] = {}  # first file -> live segments' file lists
        _start_remover()

    def acquire(self, snapshot: str, files: Sequence[str]) -> ScanSet:
        """The set over `files` (absolute local paths, in scan order) of the snapshot named by
        `snapshot`: the live one if any holder still has it, else one made of the live segments
        that fit and new ones (`segments_for`)."""
        key = (snapshot, tuple(files))
        with self._lock:
            found = self._live.get(key)
            if found is not None:
                return found
            runs = segments_for(key[1], self._live_starting)
            reused = {run: self._segments.get(run) for run in runs}  # (strong references from here)
            fresh = {run: self._new_dir() for run in runs if reused[run] is None}
        made: dict[tuple[str, ...], Segment] = {}
        try:
            for run, path in fresh.items():
                made[run] = Segment(path, run)
                _link_all(path, run)
        except OSError:
            for segment in made.values():
                shutil.rmtree(segment.path, ignore_errors=True)
            raise
        with self._lock:
            for run, segment in made.items():
                reused[run] = self._segments.setdefault(run, segment)
                if reused[run] is segment:
                    self._starting.setdefault(run[0], set()).add(run)
                    weakref.finalize(segment, self._forget, run)
            return self._live.setdefault(key, ScanSet(key[1], tuple(reused[run] for run in runs)))  # type: ignore[misc]

    def _live_starting(self, first: str) -> list[tuple[str, ...]]:
        """The file lists of live segments whose first file is `first` (under the lock)."""
        return [run for run in self._starting.get(first, ()) if run in self._segments]

    def _forget(self, run: tuple[str, ...]) -> None:
        """A segment went: its run leaves the index (unless a new segment holds it again)."""
        with self._lock:
            runs = self._starting.get(run[0])
            if runs is not None and run not in self._segments:
                runs.discard(run)
                if not runs:
                    del self._starting[run[0]]

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


def _link_all(path: Path, files: tuple[str, ...]) -> None:
    link = os.link
    for i, file in enumerate(files):
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
