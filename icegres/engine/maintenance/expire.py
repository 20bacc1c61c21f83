"""Snapshot expiry: remove old snapshots from a table's metadata, then delete the files no
remaining snapshot references (docs/maintenance.md).

What is kept, whatever the policy asks: the head of every branch and tag, the `retain_last`
newest snapshots of every branch's ancestry (or the branch's own `min-snapshots-to-keep` when
larger), snapshots younger than a branch's own `max-snapshot-age-ms`, and the snapshots the
running transactions of this process pinned (`pinned`). The write tails' exactly-once watermark
survives the history it lived in: the same commit carries it onto the roots it leaves
(watermarks.py).

The commit must never land when a ref was moved onto a snapshot it removes (a rollback, a branch
created as of an old snapshot, concurrently): removing a ref's snapshot drops the ref. On a SQL
catalog, whose requirements are checked by pyiceberg in this process, the commit asserts exactly
that (`_refs_outside`), so writers that only move refs forward never make it fail. A REST catalog
checks only the spec's requirements: there it asserts every ref as read, and a concurrent commit
fails it (the user's write wins). Either way it is re-planned and retried on a conflict. Files are
deleted only after it landed and only those that the snapshots it removed referenced and none of
the snapshots still in the committed metadata does; both sets are read from the metadata (before
and after the commit), and a file that cannot be read deletes nothing (`Unreadable`).
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from icegres.engine.maintenance import reachable, watermarks
from icegres.engine.maintenance.reachable import Files, Unreadable
from icegres.pg.errors import INVALID_PARAMETER_VALUE, PgError

log = logging.getLogger("icegres.maintenance")

SERIALIZATION_FAILURE = "40001"

DAY_MS = 86_400_000
DEFAULT_RETENTION_MS = 7 * DAY_MS  # like Trino's minimum retention
COMMIT_ATTEMPTS_MAX = 20
# Iceberg's table properties for expiry defaults (what Spark and Trino honour too).
MAX_SNAPSHOT_AGE_PROPERTY = "history.expire.max-snapshot-age-ms"
MIN_SNAPSHOTS_PROPERTY = "history.expire.min-snapshots-to-keep"


@dataclass(frozen=True)
class Policy:
    """What to expire: snapshots older than `older_than_ms` (ms since the epoch), keeping each
    branch's `retain_last` newest. None: the table's properties, else 7 days and 1."""

    older_than_ms: int | None = None
    retain_last: int | None = None

    def resolved(self, properties: dict[str, str], now_ms: int) -> tuple[int, int]:
        older_than = self.older_than_ms
        if older_than is None:
            older_than = now_ms - int(properties.get(MAX_SNAPSHOT_AGE_PROPERTY, DEFAULT_RETENTION_MS))
        retain = self.retain_last if self.retain_last is not None else int(properties.get(MIN_SNAPSHOTS_PROPERTY, 1))
        if retain < 1:
            raise PgError(INVALID_PARAMETER_VALUE, f"retain_last must be at least 1, not {retain}")
        return older_than, retain


@dataclass
class Report:
    """What an expiry did (or, dry, would do): Spark's result columns, and what icegres adds."""

    table: str
    dry_run: bool
    older_than_ms: int = 0
    retain_last: int = 1
    expired_snapshots: list[int] = field(default_factory=list)
    deleted: Files = field(default_factory=Files)
    deleted_bytes: int = 0
    kept_files: bool = False  # expired, but the files were left (metadata unreadable after the commit)
    attempts: int = 0

    def count(self, kind: str) -> int:
        return sum(1 for k in self.deleted.kinds.values() if k == kind)

    def spark_row(self) -> dict[str, int]:
        """Spark's expire_snapshots result row."""
        return {
            "deleted_data_files_count": self.count(reachable.DATA),
            "deleted_position_delete_files_count": self.count(reachable.POSITION_DELETES),
            "deleted_equality_delete_files_count": self.count(reachable.EQUALITY_DELETES),
            "deleted_manifest_files_count": self.count(reachable.MANIFEST),
            "deleted_manifest_lists_count": self.count(reachable.MANIFEST_LIST),
            "deleted_statistics_files_count": self.count(reachable.STATISTICS),
        }

    def as_json(self) -> dict[str, Any]:
        return {"table": self.table, "dry_run": self.dry_run, "older_than_ms": self.older_than_ms,
                "retain_last": self.retain_last, "expired_snapshots": self.expired_snapshots,
                "expired_snapshots_count": len(self.expired_snapshots), **self.spark_row(),
                "deleted_bytes": self.deleted_bytes, "files_kept_unreadable_metadata": self.kept_files,
                "deleted_files": sorted(self.deleted.kinds)}


def select(metadata: Any, older_than_ms: int, retain_last: int, pinned: Iterable[int] = (),
           now_ms: int | None = None) -> list[int]:
    """The snapshots to expire: older than `older_than_ms` and kept by nothing (module docstring)."""
    from pyiceberg.table.refs import SnapshotRefType
    from pyiceberg.table.snapshots import ancestors_of

    now_ms = now_ms if now_ms is not None else int(time.time() * 1000)
    keep = set(pinned)
    for ref in metadata.refs.values():
        keep.add(ref.snapshot_id)
        if ref.snapshot_ref_type != SnapshotRefType.BRANCH:
            continue
        count = max(retain_last, ref.min_snapshots_to_keep or 0)
        age_floor = now_ms - ref.max_snapshot_age_ms if ref.max_snapshot_age_ms else None
        for i, snapshot in enumerate(ancestors_of(metadata.snapshot_by_id(ref.snapshot_id), metadata)):
            if i < count or (age_floor is not None and snapshot.timestamp_ms >= age_floor):
                keep.add(snapshot.snapshot_id)
    return sorted(s.snapshot_id for s in metadata.snapshots
                  if s.snapshot_id not in keep and s.timestamp_ms < older_than_ms)


def expire(load: Callable[[], Any], display: str, policy: Policy, *, dry_run: bool = False,
           pinned: Callable[[Any], set[int]] = lambda table: set(), local_requirements: bool = False,
           delete: Callable[[Any, str], None] | None = None,
           before_commit: Callable[[], None] | None = None,
           deleted: Callable[[int, int], None] | None = None) -> Report:
    """Expire by `policy` on the table `load()` returns fresh (module docstring). `pinned(table)`:
    the snapshots running transactions hold; `local_requirements`: the catalog checks commit
    requirements in this process (pyiceberg's SQL catalog). Blocking: run it in a worker thread.
    Raises PgError (22023 bad policy, 40001 after COMMIT_ATTEMPTS_MAX conflicts, 58030 unreadable).
    `before_commit` is called before each commit attempt; what it raises stops the expiry there,
    nothing expired (automatic maintenance's lease check)."""
    from pyiceberg.exceptions import CommitFailedException

    cache: dict[str, list[Any]] = {}  # manifest path -> entries, across attempts: manifests never change
    for attempt in range(1, COMMIT_ATTEMPTS_MAX + 1):
        table = load()
        metadata = table.metadata
        now_ms = int(time.time() * 1000)
        older_than, retain = policy.resolved(metadata.properties, now_ms)
        report = Report(display, dry_run, older_than, retain, attempts=attempt)
        report.expired_snapshots = select(metadata, older_than, retain, pinned(table), now_ms)
        if not report.expired_snapshots:
            return report
        gone = set(report.expired_snapshots)
        expired = [s for s in metadata.snapshots if s.snapshot_id in gone]
        kept = [s for s in metadata.snapshots if s.snapshot_id not in gone]
        # Read before committing: an unreadable table is refused whole, nothing expired.
        candidates = reachable.referenced(table.io, metadata, expired, live_only=False, seen=cache)
        still = reachable.referenced(table.io, metadata, kept, live_only=True, seen=cache)
        if dry_run:
            _account(table, report, candidates.minus(still))
            return report
        if before_commit is not None:
            before_commit()
        try:
            committed = _commit(table, metadata, report.expired_snapshots, local_requirements)
        except CommitFailedException as exc:
            log.info("expire %s: attempt %d lost a race (%s); re-planning", display, attempt, exc)
            time.sleep(min(0.01 * attempt, 0.2))
            continue
        after = committed.metadata
        try:
            live = reachable.referenced(committed.io, after, after.snapshots, live_only=True, seen=cache)
        except Unreadable as exc:
            log.error("expire %s: expired %d snapshots; deleted no file: %s", display, len(gone), exc.message)
            report.kept_files = True
            return report
        doomed = candidates.minus(live)
        _account(committed, report, doomed)
        remove = delete or _delete
        for done, path in enumerate(doomed.kinds, 1):
            remove(committed.io, path)
            if deleted is not None:
                deleted(done, len(doomed.kinds))  # (progress: files deleted of those doomed)
        return report
    raise PgError(SERIALIZATION_FAILURE, f'could not expire snapshots of table "{display}": '
                  f"{COMMIT_ATTEMPTS_MAX} attempts lost a race with concurrent commits")


def _commit(table: Any, metadata: Any, expired: list[int], local_requirements: bool) -> Any:
    """One commit: remove the snapshots, carry the tails' marks past them, and assert that no ref
    names one of them (`local_requirements`), else that every ref is where it was read."""
    from pyiceberg.table.update import (
        AssertRefSnapshotId,
        RemovePropertiesUpdate,
        RemoveSnapshotsUpdate,
        SetPropertiesUpdate,
    )

    carried, dropped = watermarks.carry(metadata, expired)
    updates: list[Any] = [RemoveSnapshotsUpdate(snapshot_ids=expired)]
    if carried:
        updates.append(SetPropertiesUpdate(updates=carried))
    if dropped:
        updates.append(RemovePropertiesUpdate(removals=list(dropped)))
    if local_requirements:
        requirements: tuple[Any, ...] = (_refs_outside()(snapshot_ids=expired),)
    else:
        requirements = tuple(AssertRefSnapshotId(ref=name, snapshot_id=ref.snapshot_id)
                             for name, ref in metadata.refs.items())
    txn = table.transaction()
    txn._apply(tuple(updates), requirements)
    return txn.commit_transaction()


@functools.cache
def _refs_outside() -> type:
    """A commit requirement that no branch or tag names one of `snapshot_ids` (checked against the
    catalog's current metadata at commit, under its compare-and-swap). Not in the REST spec: only
    for catalogs that validate requirements in this process."""
    from typing import Literal

    from pydantic import Field
    from pyiceberg.exceptions import CommitFailedException
    from pyiceberg.table.update import ValidatableTableRequirement

    class AssertRefsOutside(ValidatableTableRequirement):
        type: Literal["icegres-assert-refs-outside"] = Field(default="icegres-assert-refs-outside")
        snapshot_ids: list[int] = Field(default_factory=list)

        def validate(self, base_metadata: Any) -> None:
            gone = set(self.snapshot_ids)
            moved = sorted(name for name, ref in (base_metadata.refs if base_metadata else {}).items()
                           if ref.snapshot_id in gone)
            if base_metadata is None or moved:
                raise CommitFailedException(f"Requirement failed: refs {moved} now name snapshots being expired")

    return AssertRefsOutside


def _account(table: Any, report: Report, doomed: Files) -> None:
    """Fill in the sizes the metadata does not give (manifest lists) and the byte total."""
    report.deleted = doomed
    total = 0
    for path, size in doomed.sizes.items():
        if size is None:
            size = _size(table.io, path)
            doomed.sizes[path] = size
        total += size or 0
    report.deleted_bytes = total


def _size(io: Any, path: str) -> int | None:
    try:
        return len(io.new_input(path))
    except Exception:
        return None  # already gone: nothing to count


def _delete(io: Any, path: str) -> None:
    try:
        io.delete(path)
    except FileNotFoundError:
        pass  # deleted already (an earlier run that crashed after the commit)
