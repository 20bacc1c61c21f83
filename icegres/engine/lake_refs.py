"""Branches and tags across many tables at once: a consistent cut, one atomic commit, a diff.

`icegres branch` (icegres/branches.py) runs on these. Everything is metadata: no data file is
read or written.

- **A cut** (`cut`): the tables chosen, each loaded at the metadata file one listing named. On a
  SQL catalog one listing is one instant of the whole catalog; on REST each table is loaded on
  its own. Either way the commit that follows asserts every table's ref as the cut saw it, so what
  lands is a consistent cut at the commit's instant, or nothing.
- **Moves** (`commit_moves`): ref changes of many tables in ONE commit through the commit machine
  (`lake_world.commit_metadata_changes`: one SQL transaction or one REST transactions/commit;
  its token makes a lost reply decidable). Each move asserts the snapshot of the ref it moves and,
  where it follows another ref (a branch made at main's head, a merge), that ref's snapshot too:
  a racing commit to any table aborts the whole set with 40001.
- **A diff** (`diff`): per table, where refs A and B stand relative to their fork point, from
  snapshot lineage and summaries only.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import TYPE_CHECKING, Any

from icegres.engine.catalog import Lakehouse
from icegres.engine.mounts import table_at
from icegres.pg.errors import INVALID_SCHEMA_NAME, UNDEFINED_TABLE, PgError

if TYPE_CHECKING:
    from pyiceberg.table import Table

Key = tuple[str, str]
MAIN = "main"


def cut(lakehouse: Lakehouse, *, keys: list[Key] | None = None, namespace: str | None = None) -> dict[Key, Table]:
    """The chosen tables (`keys`, or every table of `namespace`, or of the lake) as one listing
    names them, loaded at those metadata files."""
    listing = lakehouse.listing()
    listed = {(t.namespace, t.name): t.metadata_location for t in listing.tables}
    if keys is not None:
        missing = [k for k in keys if k not in listed]
        if missing:
            raise PgError(UNDEFINED_TABLE, f'relation "{missing[0][0]}.{missing[0][1]}" does not exist')
        chosen = keys
    elif namespace is not None:
        if namespace not in listing.namespaces:
            raise PgError(INVALID_SCHEMA_NAME, f'schema "{namespace}" does not exist')
        chosen = sorted(k for k in listed if k[0] == namespace)
    else:
        chosen = sorted(listed)
    out = {}
    for key in chosen:
        table = lakehouse.load_table(*key)
        out[key] = table_at(table, listed[key]) if table.metadata_location != listed[key] else table
    return out


@dataclass(frozen=True)
class Move:
    """Set (or, `snapshot_id` None, remove) ref `ref` of one table."""

    key: Key
    ref: str
    snapshot_id: int | None
    tag: bool = False
    # refs whose snapshots the move depends on, asserted as the cut saw them (None: absent)
    asserts: tuple[tuple[str, int | None], ...] = ()
    retain_ms: int | None = None
    min_snapshots: int | None = None
    max_snapshot_age_ms: int | None = None
    # A rebase (`merge --rebase`): instead of pointing `ref` at a snapshot, commit on top of it
    # one append of the data files these snapshots (another branch's appends) added.
    rebase: tuple[int, ...] = ()


def commit_moves(lakehouse: Lakehouse, tables: dict[Key, Table], moves: list[Move]) -> None:
    """Every move in one atomic commit (PgError 40001 when a ref moved since the cut)."""
    from icegres.engine.lake_world import commit_metadata_changes

    by_table: dict[Key, list[Move]] = {}
    for move in moves:
        by_table.setdefault(move.key, []).append(move)
    changes = {key: (tables[key], _changer(key, ms)) for key, ms in by_table.items()}
    if changes:
        commit_metadata_changes(lakehouse, changes)


def _changer(key: Key, moves: list[Move]) -> Any:
    def change(tx: Any) -> None:
        from pyiceberg.table.refs import SnapshotRefType
        from pyiceberg.table.update import AssertRefSnapshotId, RemoveSnapshotRefUpdate

        from icegres.engine.catalog import CommitRejected

        refs = tx.table_metadata.refs
        asserted: dict[str, int | None] = {}
        for move in moves:
            for ref, expected in ((move.ref, _now(refs, move.ref)), *move.asserts):
                now = _now(refs, ref)
                if now != expected or asserted.get(ref, expected) != expected:
                    # The machine re-runs this on a newer head after a concurrent commit: the
                    # cut is stale, so nothing of the set may land.
                    raise CommitRejected(f"ref {ref} of {key[0]}.{key[1]} moved since the cut")
                asserted[ref] = expected
        updates: list[Any] = []
        for move in moves:
            if move.rebase:
                _append_files_of(tx, move)
                continue
            if move.snapshot_id is None:
                updates.append(RemoveSnapshotRefUpdate(ref_name=move.ref))
                continue
            kind = SnapshotRefType.TAG if move.tag else SnapshotRefType.BRANCH
            staged, _ = tx._set_ref_snapshot(
                snapshot_id=move.snapshot_id, ref_name=move.ref, type=kind, max_ref_age_ms=move.retain_ms,
                max_snapshot_age_ms=None if move.tag else move.max_snapshot_age_ms,
                min_snapshots_to_keep=None if move.tag else move.min_snapshots)
            updates.extend(staged)
        # pyiceberg's _stage keeps one requirement per type; a move asserts several refs.
        tx._updates += tuple(updates)
        tx._requirements += tuple(AssertRefSnapshotId(ref=ref, snapshot_id=sid) for ref, sid in asserted.items())

    return change


def _append_files_of(tx: Any, move: Move) -> None:
    """One snapshot on `move.ref` appending the data files `move.rebase`'s snapshots added (read
    from their manifests: metadata, no data file is opened or copied)."""
    table = tx._table
    files = added_files(table, move.rebase)
    properties = {REBASED_FROM: ",".join(str(s) for s in move.rebase)}
    with tx.update_snapshot(snapshot_properties=properties, branch=move.ref).fast_append() as append:
        for data_file in files:
            append.append_data_file(data_file)


REBASED_FROM = "icegres.rebased-from"


def added_files(table: Table, snapshot_ids: tuple[int, ...]) -> list[Any]:
    """The data files each of `snapshot_ids` added, in order."""
    from pyiceberg.manifest import ManifestEntryStatus

    io = table.io
    out = []
    for sid in snapshot_ids:
        snapshot = table.metadata.snapshot_by_id(sid)
        assert snapshot is not None
        for manifest in snapshot.manifests(io):
            if manifest.added_snapshot_id != sid:
                continue
            for entry in manifest.fetch_manifest_entry(io, discard_deleted=True):
                if entry.snapshot_id == sid and entry.status == ManifestEntryStatus.ADDED:
                    entry.data_file.spec_id = manifest.partition_spec_id
                    out.append(entry.data_file)
    return out


def appends_since(table: Table, snapshot_id: int | None, fork: int | None) -> tuple[int, ...] | None:
    """The snapshots after `fork` up to `snapshot_id`, oldest first, if every one is an append
    (a rebase re-applies them); None if any is not, or `fork` is no ancestor."""
    from pyiceberg.table.snapshots import Operation

    chain = lineage(table, snapshot_id)
    if fork not in chain:
        return None
    since = chain[: chain.index(fork)]
    for sid in since:
        snapshot = table.metadata.snapshot_by_id(sid)
        if snapshot is None or snapshot.summary is None or snapshot.summary.operation != Operation.APPEND:
            return None
    return tuple(reversed(since))


def _now(refs: Any, ref: str) -> int | None:
    return refs[ref].snapshot_id if ref in refs else None


# --- where two refs stand ---------------------------------------------------------------------


class State(Enum):
    SAME = "same"  # both name one snapshot
    ADVANCED = "advanced"  # B is A plus commits (A is B's ancestor): a fast-forward takes A to B
    BEHIND = "behind"  # A is B plus commits: B has nothing A lacks
    DIVERGED = "diverged"  # both have commits the other lacks
    CREATED = "created"  # only B exists
    DROPPED = "dropped"  # only A exists
    ABSENT = "absent"  # neither


@dataclass(frozen=True)
class TableDiff:
    table: str
    state: State
    a: int | None
    b: int | None
    fork: int | None  # their newest common ancestor
    rows_added: int = 0  # along B since the fork, from snapshot summaries
    rows_deleted: int = 0
    a_rows_added: int = 0  # along A since the fork (diverged)
    a_rows_deleted: int = 0
    columns_added: tuple[str, ...] = ()  # B's schema against the fork's
    columns_dropped: tuple[str, ...] = ()
    commits: int = 0  # B's snapshots since the fork
    a_commits: int = 0

    def as_json(self) -> dict[str, Any]:
        return {"table": self.table, "state": self.state.value, "a": self.a, "b": self.b, "fork": self.fork,
                "commits": self.commits, "rows_added": self.rows_added, "rows_deleted": self.rows_deleted,
                "a_commits": self.a_commits, "a_rows_added": self.a_rows_added,
                "a_rows_deleted": self.a_rows_deleted, "columns_added": list(self.columns_added),
                "columns_dropped": list(self.columns_dropped)}


def ref_snapshot(table: Table, ref: str) -> int | None:
    found = table.metadata.refs.get(ref)
    return None if found is None else found.snapshot_id


def lineage(table: Table, snapshot_id: int | None) -> list[int]:
    """`snapshot_id` and its ancestors, newest first."""
    from pyiceberg.table.snapshots import ancestors_of

    meta = table.metadata
    start = meta.snapshot_by_id(snapshot_id) if snapshot_id is not None else None
    return [s.snapshot_id for s in ancestors_of(start, meta)]


def diff(key: Key, table: Table, a: str, b: str) -> TableDiff:
    name = f"{key[0]}.{key[1]}"
    sa, sb = ref_snapshot(table, a), ref_snapshot(table, b)
    if sa is None and sb is None:
        return TableDiff(name, State.ABSENT, None, None, None)
    if sa is None:
        return TableDiff(name, State.CREATED, None, sb, None)
    if sb is None:
        return TableDiff(name, State.DROPPED, sa, None, None)
    la, lb = lineage(table, sa), lineage(table, sb)
    in_a = set(la)
    fork = next((s for s in lb if s in in_a), None)
    since_b = lb[: lb.index(fork)] if fork in lb else lb
    since_a = la[: la.index(fork)] if fork in la else la
    if sa == sb:
        state = State.SAME
    elif fork == sa:
        state = State.ADVANCED
    elif fork == sb:
        state = State.BEHIND
    else:
        state = State.DIVERGED
    added_b, deleted_b = _rows(table, since_b)
    added_a, deleted_a = _rows(table, since_a)
    fork_cols, b_cols = _columns(table, fork), _columns(table, sb)
    return TableDiff(name, state, sa, sb, fork, added_b, deleted_b, added_a, deleted_a,
                     tuple(c for c in b_cols if c not in fork_cols) if fork is not None else (),
                     tuple(c for c in fork_cols if c not in b_cols),
                     len(since_b), len(since_a))


def _rows(table: Table, snapshots: list[int]) -> tuple[int, int]:
    added = deleted = 0
    for sid in snapshots:
        snapshot = table.metadata.snapshot_by_id(sid)
        summary = snapshot.summary if snapshot is not None else None
        if summary is None:
            continue
        added += int(summary.get("added-records") or 0)
        deleted += int(summary.get("deleted-records") or 0)
    return added, deleted


def _columns(table: Table, snapshot_id: int | None) -> tuple[str, ...]:
    meta = table.metadata
    snapshot = meta.snapshot_by_id(snapshot_id) if snapshot_id is not None else None
    schema_id = snapshot.schema_id if snapshot is not None and snapshot.schema_id is not None else None
    schema = next((s for s in meta.schemas if s.schema_id == schema_id), None) if schema_id is not None else None
    return tuple(f.name for f in schema.fields) if schema is not None else ()


@dataclass
class Plan:
    """What a merge or reset would do: the moves, and the tables that refuse it."""

    moves: list[Move] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    conflicts: list[TableDiff] = field(default_factory=list)
