"""A data file the snapshot lists and storage cannot give is an error, never an empty table.

DataFusion lists a scan's files when it runs: a Parquet path that no longer exists lists as
nothing, and a dangling link in a scan set (scan_sets.py) is skipped, so a table whose only file
was deleted answered `count(*) = 0` and a table missing one of several files answered short sums,
with no error. PostgreSQL says 58P01 ("could not open file ...") when a relation's file is gone.

Checking every file on every statement would cost a stat per file. A file removed from a
directory changes that directory's modification time, so each table remembers the directories
of the files it was last seen whole with and their times: a statement stats one directory per
table (typically one) and re-checks the files only after a directory changed, which every new
commit to the table also does.

Remote files are checked with one LIST of the table's data prefix per statement (a HEAD per file
would cost more than most reads): an object store gives no directory time to trust, and a scan of a
deleted object lists as nothing. A local copy (file_cache.py) is a local file, checked as above.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from icegres.engine.damage import UNDEFINED_FILE, missing_file

__all__ = ["UNDEFINED_FILE", "FilePresence", "missing_file", "verify_remote"]

Key = tuple[str, str]


@dataclass(frozen=True)
class _Seen:
    metadata_location: str
    directories: tuple[tuple[str, int], ...]  # (directory, st_mtime_ns) when all files were there


class FilePresence:
    """Which mounted snapshots were last seen with every local data file in place."""

    def __init__(self) -> None:
        self._seen: dict[Key, _Seen] = {}
        self._remote: dict[Key, tuple[str, bool]] = {}  # per table: (metadata location, any remote file)
        self._lock = threading.Lock()

    def has_remote(self, key: Key, plan: Any) -> bool:
        """Whether the snapshot lists a file outside the local file system (asked once per
        snapshot: a point lookup must not walk a table's file list)."""
        with self._lock:
            known = self._remote.get(key)
        if known is not None and known[0] == plan.metadata_location:
            return known[1]
        remote = any(not (f.path.startswith("/") or f.path.startswith("file://")) for f in plan.files)
        with self._lock:
            self._remote[key] = (plan.metadata_location, remote)
        return remote

    def unchanged(self, key: Key, metadata_location: str) -> bool:
        """Whether `key` was last seen whole at this snapshot and none of its directories changed
        since (one stat per directory)."""
        with self._lock:
            seen = self._seen.get(key)
        return seen is not None and seen.metadata_location == metadata_location and _unchanged(seen.directories)

    def verify(self, key: Key, metadata_location: str, paths: Iterable[str]) -> None:
        """Raise 58P01 naming the table and the file if one of `paths` is gone; else remember
        the snapshot as seen whole."""
        paths = list(paths)
        directories: dict[str, int] = {}
        for path in paths:
            directory = os.path.dirname(path)
            if directory not in directories:
                # before the files: a removal after this stat changes the time the next check sees
                directories[directory] = _mtime(directory)
        for path in paths:
            if not os.path.exists(path):
                raise missing_file(f"{key[0]}.{key[1]}", path)
        with self._lock:
            self._seen[key] = _Seen(metadata_location, tuple(directories.items()))


def verify_remote(key: Key, paths: list[str], io: object) -> None:
    """Raise 58P01 naming the table and the file if one of the object-store `paths` (URIs of
    one table) is not listed under their common prefix. One LIST (paginated) per call."""
    if not paths:
        return
    from pyarrow import fs

    scheme, netloc, _ = io.parse_location(paths[0])  # type: ignore[attr-defined]
    located = [io.parse_location(p)[2] for p in paths]  # type: ignore[attr-defined]
    prefix = os.path.commonpath([os.path.dirname(p) for p in located])
    filesystem = io.fs_by_scheme(scheme, netloc)  # type: ignore[attr-defined]
    listed = {info.path for info in filesystem.get_file_info(fs.FileSelector(prefix, recursive=True,
                                                                                allow_not_found=True))}
    for path, where in zip(paths, located, strict=True):
        if where not in listed:
            raise missing_file(f"{key[0]}.{key[1]}", path)


def _unchanged(directories: tuple[tuple[str, int], ...]) -> bool:
    return all(_mtime(directory) == mtime for directory, mtime in directories)


def _mtime(directory: str) -> int:
    try:
        return os.stat(directory).st_mtime_ns
    except OSError:
        return -1
