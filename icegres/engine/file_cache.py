"""Local copies of object-store data files, so that mounted tables read them as local files.

Every statement over a table on S3 read its Parquet files through the object store: a HEAD per
file and ranged GETs per column chunk, served by the store's own process on the same two cores.
On SeaweedFS that made TPC-H 2.1-2.8x DuckDB's time and a point lookup ~2x the embedded lake's
(bench/SCORECARD.md, read_seaweedfs), while DuckDB keeps the files it read in memory. An Iceberg
data file never changes once written (a commit adds new files; it never rewrites one), so a copy
is valid for as long as the file is: copies are keyed by the file's URI, checked against the size
its manifest records, and need no invalidation.

A table is mounted on its remote files first; the copies are fetched in the background, and once
all of a snapshot's files are here the engine mounts it again on the copies (engine.py). Copies
are kept up to `capacity` bytes; to make room, the least recently used copies that no mounted
snapshot reads (and none read for `grace_s`, for statements still running on an older mount) are
deleted. With no room, a file stays remote. The directory belongs to one server (it is under its
data dir): eviction does not know what another process reads.
"""

from __future__ import annotations

import hashlib
import logging
import os
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from icegres.engine.scan_sets import process_alive

log = logging.getLogger(__name__)

_SUFFIX = ".parquet"
_PARTIAL = ".partial"
_CHUNK_BYTES = 1 << 20  # a shutdown waits for at most one chunk of a copy in progress


@dataclass
class _Copy:
    path: Path
    size: int
    used: float  # time.monotonic() of the last lookup


@dataclass(frozen=True)
class Wanted:
    """A remote file to copy: its URI and the size its manifest records."""

    uri: str
    size: int


class FileCache:
    """A directory of copies of immutable remote files, at most `capacity` bytes."""

    def __init__(self, root: Path, capacity: int, grace_s: float = 600.0, workers: int = 2) -> None:
        self.root = root
        self.capacity = capacity
        self.grace_s = grace_s
        self._lock = threading.Lock()
        self._copies: dict[str, _Copy] = {}  # by file name (a digest of the URI)
        self._fetching: set[str] = set()
        self._reserved = 0  # bytes of copies being made
        self._failed: dict[str, float] = {}  # name -> when; not retried for a while
        self._waiting: list[tuple[set[str], Callable[[], None]]] = []  # (files, done) of requests
        self._pinned: Callable[[], set[str]] = set
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="icegres-fetch")
        self._closed = threading.Event()
        root.mkdir(parents=True, exist_ok=True, mode=0o700)
        now = time.monotonic()
        for entry in root.iterdir():
            if entry.name.endswith(_PARTIAL):
                if not process_alive(_writer_pid(entry.name)):
                    entry.unlink(missing_ok=True)  # a copy its process did not finish
            elif entry.name.endswith(_SUFFIX):
                self._copies[entry.name] = _Copy(entry, entry.stat().st_size, now)

    @property
    def used_bytes(self) -> int:
        with self._lock:
            return sum(c.size for c in self._copies.values())

    def pin_with(self, pinned: Callable[[], set[str]]) -> None:
        """`pinned()` names the local paths some mounted snapshot reads: never evicted."""
        self._pinned = pinned

    def lookup(self, uri: str) -> str | None:
        """The local copy of `uri`, if there is one."""
        name = _name(uri)
        with self._lock:
            copy = self._copies.get(name)
            if copy is None:
                return None
            copy.used = time.monotonic()
            return str(copy.path)

    def fetch(self, wanted: Iterable[Wanted], open_input: Callable[[str], BinaryIO],
              done: Callable[[], None]) -> bool:
        """Copy the files not here yet, in the background; call `done()` once all of them are
        (whichever request copies them: another mount may be copying some already).

        Returns False (and copies nothing) when they cannot all be kept: no room for them even
        after evicting what may go, or a file whose copy failed recently. `open_input(uri)`
        opens a remote file for reading (the table's FileIO, with its credentials)."""
        wanted = [w for w in wanted if self.lookup(w.uri) is None]
        if not wanted:
            done()
            return True
        now = time.monotonic()
        with self._lock:
            if any(now - self._failed.get(_name(w.uri), -1e9) < self.grace_s for w in wanted):
                return False
            new = [w for w in wanted if _name(w.uri) not in self._fetching]
        if not self._make_room(sum(w.size for w in new)):
            return False
        with self._lock:
            self._fetching.update(_name(w.uri) for w in new)
            self._waiting.append(({_name(w.uri) for w in wanted}, done))
        for w in new:
            self._pool.submit(self._copy, w, open_input)
        return True

    def _answer_waiting(self) -> None:
        """Call the `done` of every request whose files are all copied now; forget those with a
        file whose copy failed (their tables stay remote)."""
        ready: list[Callable[[], None]] = []
        with self._lock:
            waiting = []
            for names, done in self._waiting:
                if names <= self._copies.keys():
                    ready.append(done)
                elif not any(n in self._failed and n not in self._fetching for n in names):
                    waiting.append((names, done))
            self._waiting = waiting
        for done in ready:
            done()

    def _copy(self, w: Wanted, open_input: Callable[[str], BinaryIO]) -> bool:
        """Copy one file whose room `fetch` reserved; the reservation ends here either way."""
        name = _name(w.uri)
        final = self.root / name
        partial = self.root / f"{name}.{os.getpid()}-{threading.get_ident()}{_PARTIAL}"
        try:
            with open_input(w.uri) as src, open(partial, "wb") as dst:
                while chunk := src.read(_CHUNK_BYTES):
                    if self._closed.is_set():
                        partial.unlink(missing_ok=True)
                        return False  # shutting down: not a failure, copied again next start
                    dst.write(chunk)
            size = partial.stat().st_size
            if size != w.size:
                raise OSError(f"copied {size} bytes, the manifest says {w.size}")
            os.chmod(partial, 0o600)
            os.replace(partial, final)
            with self._lock:
                self._copies[name] = _Copy(final, size, time.monotonic())
                self._failed.pop(name, None)
            return True
        except Exception as exc:  # a store error is this copy's failure, never a statement's
            log.warning("could not copy %s to the file cache: %s", w.uri, exc)
            partial.unlink(missing_ok=True)
            with self._lock:
                self._failed[name] = time.monotonic()
            return False
        finally:
            with self._lock:
                self._fetching.discard(name)
                self._reserved -= w.size
            self._answer_waiting()

    def _make_room(self, size: int) -> bool:
        """Reserve `size` bytes, evicting unpinned copies (least recently used first) as needed."""
        pinned = self._pinned()
        now = time.monotonic()
        with self._lock:
            used = sum(c.size for c in self._copies.values()) + self._reserved
            victims: list[_Copy] = []
            for copy in sorted(self._copies.values(), key=lambda c: c.used):
                if used + size <= self.capacity:
                    break
                if str(copy.path) in pinned or now - copy.used < self.grace_s:
                    continue
                victims.append(copy)
                used -= copy.size
            if used + size > self.capacity:
                return False  # no room even so: evict nothing
            for copy in victims:
                del self._copies[copy.path.name]
            self._reserved += size
        for copy in victims:
            copy.path.unlink(missing_ok=True)
        return True

    def wait_idle(self, timeout_s: float) -> bool:
        """Wait until no copy is being made (a warm-up's end); False if `timeout_s` passed first."""
        deadline = time.monotonic() + timeout_s
        while True:
            with self._lock:
                if not self._fetching:
                    return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.05)

    def close(self) -> None:
        """Stop copying: queued copies are dropped, one in progress stops at its next chunk (the
        interpreter waits for the pool's threads at exit, and a copy may be hundreds of MB)."""
        self._closed.set()
        self._pool.shutdown(wait=False, cancel_futures=True)


def _name(uri: str) -> str:
    return hashlib.sha256(uri.encode()).hexdigest()[:40] + _SUFFIX


def _writer_pid(partial_name: str) -> int:
    try:
        return int(partial_name.rsplit(".", 2)[-2].split("-", 1)[0])
    except (IndexError, ValueError):
        return -1

