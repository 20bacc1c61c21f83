"""Orphan-file GC: files under a table's location that no snapshot and no metadata file of the
table references, older than a grace period (docs/maintenance.md).

Referenced: every manifest list, manifest and content file of every snapshot in the table's
metadata (any branch, tag or none; a DELETED manifest entry counts too: expiry deletes those
files when their snapshot goes), statistics files, the current metadata file and the previous
ones its log lists. Listing goes through pyiceberg's FileIO file systems (local disk, S3), as
file_presence.py does. Fail-closed: a metadata file that cannot be read raises `Unreadable`
before anything is listed or deleted. The grace period (default 3 days) is what keeps the files a
commit in flight has written but not yet published (a running statement's, another engine's).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from icegres.engine import long_texts
from icegres.engine.maintenance import reachable
from icegres.pg.errors import OBJECT_NOT_IN_PREREQUISITE_STATE, PgError

DAY_MS = 86_400_000
DEFAULT_GRACE_MS = 3 * DAY_MS


@dataclass(frozen=True)
class Orphan:
    path: str  # as the table's file system names it (a URI for object stores: s3://bucket/key)
    size_bytes: int
    modified_ms: int


@dataclass
class Report:
    table: str
    dry_run: bool
    older_than_ms: int
    location: str
    orphans: list[Orphan] = field(default_factory=list)
    scanned_files: int = 0
    referenced_files: int = 0

    @property
    def orphan_bytes(self) -> int:
        return sum(o.size_bytes for o in self.orphans)

    def as_json(self) -> dict[str, Any]:
        return {"table": self.table, "dry_run": self.dry_run, "older_than_ms": self.older_than_ms,
                "location": self.location, "scanned_files": self.scanned_files,
                "referenced_files": self.referenced_files, "orphan_files_count": len(self.orphans),
                "orphan_bytes": self.orphan_bytes,
                "orphan_files": [{"path": o.path, "size_bytes": o.size_bytes, "modified_ms": o.modified_ms}
                                 for o in self.orphans]}


def remove_orphans(table: Any, display: str, *, older_than_ms: int | None = None, dry_run: bool = True,
                   location: str | None = None, now_ms: int | None = None,
                   neighbours: Iterable[tuple[str, str]] = (),
                   deleted: Callable[[int, int], None] | None = None) -> Report:
    """Find (and unless `dry_run`, delete) the orphan files under `location` (default: the
    table's). `neighbours`: (name, metadata location) of the catalog's other tables; one whose
    metadata lies under `location` shares it (a renamed table and a new one of its old name do),
    and its files would look orphaned here: refused (55000). Blocking: run it in a worker thread.
    Raises Unreadable (58030), deleting nothing."""
    from pyarrow import fs

    now_ms = now_ms if now_ms is not None else int(time.time() * 1000)
    if older_than_ms is None:
        older_than_ms = now_ms - DEFAULT_GRACE_MS
    metadata = table.metadata
    root = (location or metadata.location).rstrip("/")
    sharing = sorted(name for name, where in neighbours if where.startswith(root + "/"))
    if sharing:
        raise PgError(OBJECT_NOT_IN_PREREQUISITE_STATE,
                      f'table "{display}" shares its location {root} with {", ".join(sharing)}: nothing was deleted',
                      detail="Their files would look orphaned to this table. Collect orphans by hand there.")
    io = table.io
    used = reachable.referenced(io, metadata, metadata.snapshots, live_only=False)
    known = (set(used.kinds) | reachable.metadata_files(metadata, table.metadata_location)
             | long_texts.referenced(metadata.properties, (f.doc for s in metadata.schemas for f in s.fields)))
    scheme, netloc, base = io.parse_location(root)
    filesystem = io.fs_by_scheme(scheme, netloc)
    referenced = {_key(io, path) for path in known}
    report = Report(display, dry_run, older_than_ms, root, referenced_files=len(referenced))
    listed = filesystem.get_file_info(fs.FileSelector(base, recursive=True, allow_not_found=True))
    prefix = _uri_prefix(scheme, netloc)
    for info in listed:
        if info.type != fs.FileType.File:
            continue
        report.scanned_files += 1
        if info.path in referenced:
            continue
        modified_ms = int(info.mtime.timestamp() * 1000) if info.mtime is not None else now_ms
        if modified_ms >= older_than_ms:
            continue  # inside the grace period: maybe a commit in flight
        report.orphans.append(Orphan(prefix + info.path, int(info.size or 0), modified_ms))
    report.orphans.sort(key=lambda o: o.path)
    if not dry_run:
        _delete_all(filesystem, [o.path[len(prefix):] for o in report.orphans], deleted=deleted)
    return report


def _key(io: Any, path: str) -> str:
    """A referenced path as the file system lists it (no scheme; bucket/key for object stores)."""
    return io.parse_location(path)[2]


def _uri_prefix(scheme: str, netloc: str) -> str:
    if scheme in ("", "file"):
        return ""
    return f"{scheme}://"


def _delete_all(filesystem: Any, paths: list[str], delete: Callable[[str], None] | None = None,
                deleted: Callable[[int, int], None] | None = None) -> None:
    remove = delete or filesystem.delete_file
    for done, path in enumerate(paths, 1):
        try:
            remove(path)
        except FileNotFoundError:
            pass
        if deleted is not None:
            deleted(done, len(paths))  # (progress)
