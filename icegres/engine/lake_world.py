"""The commit machine's world on a real lakehouse: pyiceberg snapshots, one atomic catalog commit.

`LakeWorld` implements `icegres.machines.drivers.commit.CommitWorld` for one transaction's staged
writes. Publishing builds each table's new snapshot with pyiceberg's own snapshot producers (fast
append, or overwrite for copy-on-write UPDATE/DELETE) on the base the machine names, tags every
snapshot summary with the commit token, and hands all tables to `catalog.commit_tables`, which
publishes them in one SQL transaction or one REST `transactions/commit` call. Every method blocks.
"""

from __future__ import annotations

import logging
import uuid
from typing import Any

from icegres import faults
from icegres.engine import lean_transaction
from icegres.engine.branch_writes import at_head, head_of
from icegres.engine.catalog import (
    CommitNotApplied,
    CommitRejected,
    CommitUnknown,
    Lakehouse,
    TableChange,
    commit_tables,
)
from icegres.engine.txn import StagedWrite, TxnState, table_key
from icegres.machines.commit import (
    CommitRequest,
    Publish,
    PublishFailed,
    PublishOutcomeUnknown,
    PublishRejected,
    PublishSucceeded,
    ReadAssertion,
    TableHead,
    TableWrite,
    WriteKind,
)

log = logging.getLogger("icegres.commit")

TOKEN_PROPERTY = "icegres.commit-token"


def commit_request(txn: TxnState, token: str | None = None) -> CommitRequest | None:
    """The machine's request for a transaction's staged writes, or None if it changed nothing.

    A write reads its table (so it is no blind append, and the machine charges its rebases) when
    a statement read the table's rows to compute it, when the table has a primary key (the key
    check read it), or when a SERIALIZABLE transaction read the table."""
    writes = tuple(
        TableWrite(
            table=w.table_name,
            table_uuid=w.base.table_uuid,
            base_snapshot=w.base.snapshot_id,
            base_schema_id=w.base.schema_id,
            kind=WriteKind.APPEND if w.is_append else WriteKind.OVERWRITE,
            # (merge-on-read: the files it deletes rows of count as removed, for the conflict
            # check, and its delete files as added, deleted if the commit aborts)
            removed_files=w.changed_files,
            added_files=frozenset(w.added) | frozenset(w.delete_files),
            reads_table=(w.read_rows or bool(w.base.primary_key)
                         or (txn.serializable and w.key in txn.read_keys)),
            serializable_read=txn.serializable and w.key in txn.read_keys,
        )
        for w in sorted(txn.writes.values(), key=lambda w: w.key)
        if w.changes_rows or w.metadata_change is not None
    )
    if not writes:
        return None
    reads: tuple[ReadAssertion, ...] = ()
    if txn.serializable:
        # (one metadata update per table: a table written on one ref is not asserted on another)
        written = {table_key(w.key, w.base) for w in txn.writes.values()}
        reads = tuple(
            ReadAssertion(f"{k[0]}.{k[1]}", txn.pins[k].table_uuid, txn.pins[k].snapshot_id)
            for k in sorted(txn.read_keys)
            if k in txn.pins and table_key(k, txn.pins[k]) not in written
        )
    return CommitRequest(token=token or uuid.uuid4().hex, writes=writes, reads=reads)


class LakeWorld:
    def __init__(self, lakehouse: Lakehouse, txn: TxnState) -> None:
        self.lakehouse = lakehouse
        self._writes: dict[str, StagedWrite] = {w.table_name: w for w in txn.writes.values()}
        # The machine's table names that are a branch of a table (branch_writes.py): the lake
        # table and the ref. Every other name is a table's main.
        self._refs: dict[str, tuple[tuple[str, str], str]] = {
            f"{k[0]}.{k[1]}": (table_key(k, p), p.ref) for k, p in txn.pins.items() if p.ref is not None}
        self._properties = dict(txn.snapshot_properties)
        self._landed: dict[tuple[str, str], tuple[str, Any]] = {}
        self._exact = False  # the commit landed on exactly the bases the writes were built on
        self._token = ""
        self._attempts = 0

    def adopt(self, engine: Any) -> None:
        """Hand the engine the snapshots this commit produced, so the next statement needs no
        reload: each new head is exactly its base plus this commit's file changes."""
        from dataclasses import replace

        from pyiceberg.table import Table

        for write in self._writes.values():
            if write.metadata_change is not None or write.base.ref is not None:
                # A new schema or properties, or a branch's snapshot (never mounted): the next
                # statement plans the table afresh.
                continue
            landed = self._landed.get(write.key)
            base: Any = write.base.table
            if landed is None and self._exact and self.lakehouse.kind == "rest":
                landed = self._landed_on_rest(write)
            if landed is None or base is None:
                continue
            location, metadata = landed
            view = write.view()
            data_files = {p: f for p, f in write.base.data_files.items() if p not in write.removed}
            data_files.update(write.added)
            table = Table(base.name(), metadata, location, base.io, base.catalog)
            plan = replace(view, metadata_location=location, snapshot_id=metadata.current_snapshot_id,
                           data_files=data_files, table=table)
            engine.adopt(write.key, write.base.metadata_location, plan)

    def _landed_on_rest(self, write: StagedWrite) -> tuple[str, Any] | None:
        """REST's transactions/commit answers without metadata: one loadTable finds the new
        location. Adopted only if the head is exactly our snapshot on top of our base (nobody
        committed in between), so the file list we know is the head's — no manifest reads."""
        if write.metadata_change is not None:
            return None
        table: Any = self.lakehouse.load_table(*write.key)
        snapshot = table.metadata.current_snapshot()
        if snapshot is None or snapshot.summary is None or snapshot.summary.get(TOKEN_PROPERTY) != self._token:
            return None
        if snapshot.parent_snapshot_id != write.base.snapshot_id:
            return None
        return table.metadata_location, table.metadata

    # --- CommitWorld ------------------------------------------------------------------------

    def publish(self, request: CommitRequest, publish: Publish) -> Any:
        self._attempts += 1
        try:
            changes = [self._change(request.token, table, base) for table, base in publish.bases]
            changes += [self._guard(g) for g in publish.guards]
        except CommitRejected as exc:
            return PublishRejected(str(exc))
        except Exception as exc:  # nothing was sent: building failed (storage down, bad metadata)
            if type(exc).__name__ == "ValidationException":  # a file to remove is already gone
                return PublishRejected(str(exc))
            return PublishFailed(f"{type(exc).__name__}: {exc}")
        faults.point("before-publish")
        try:
            landed = commit_tables(self.lakehouse, changes)
        except CommitRejected as exc:
            return PublishRejected(str(exc))
        except CommitNotApplied as exc:
            return PublishFailed(str(exc))
        except CommitUnknown as exc:
            return PublishOutcomeUnknown(str(exc))
        if all(self._writes[t].base.snapshot_id == b for t, b in publish.bases):
            self._landed = landed  # built on exactly our bases: the new heads are base + our files
            self._exact = True
            self._token = request.token
        return PublishSucceeded()

    def inspect(self, request: CommitRequest, tables: tuple[str, ...]) -> tuple[TableHead, ...]:
        from pyiceberg.exceptions import NoSuchTableError

        heads = []
        for name in tables:
            (ns, table_name), ref = self._table_of(name)
            try:
                table = self.lakehouse.load_table(ns, table_name)
            except NoSuchTableError:
                heads.append(TableHead(name, False, None, None, None))
                continue
            meta = table.metadata
            head = head_of(meta, ref)
            if ref is not None and head is None:  # the branch was dropped
                heads.append(TableHead(name, False, None, None, None))
                continue
            table = at_head(table, ref)
            write = self._writes.get(name)
            live: frozenset[str] = frozenset()
            if write is not None and write.changed_files and faults.broken("first-committer-wins"):
                live = write.changed_files  # on purpose: no write is ever in another's way
            elif write is not None and write.changed_files:
                live = _live_as_read(write, table.scan().plan_files() if head is not None else ())
            has_token = carries_token(meta, request.token)
            key_conflict = False
            if (write is not None and write.base.primary_key and write.added and not has_token
                    and str(meta.table_uuid) == write.base.table_uuid
                    and head != write.base.snapshot_id):
                key_conflict = _key_clash(write, table) is not None
            heads.append(TableHead(name, True, str(meta.table_uuid), head,
                                   meta.current_schema_id, live, has_token, key_conflict))
        return tuple(heads)

    def _table_of(self, name: str) -> tuple[tuple[str, str], str | None]:
        """The lake table (namespace, name) a machine's table name is, and its ref (None: main)."""
        if name in self._refs:
            return self._refs[name]
        ns, _, table_name = name.rpartition(".")
        return (ns, table_name), None

    def delete_files(self, files: frozenset[str]) -> None:
        delete_files(self._writes.values(), files)

    # --- building ---------------------------------------------------------------------------

    def _change(self, token: str, name: str, base: int | None) -> TableChange:
        from pyiceberg.table.update import AssertCurrentSchemaId, AssertTableUUID

        write = self._writes[name]
        lake_key, ref = self._table_of(name)
        table: Any = write.base.table
        if head_of(table.metadata, ref) != base or self._attempts > 1:
            # A rebase, or a retry: build on the table as the catalog has it now (a commit to
            # another ref, or of properties, moves its metadata without moving this head).
            table = self.lakehouse.load_table(*lake_key)
            if head_of(table.metadata, ref) != base:
                raise CommitRejected(f"table {name} moved again while rebasing")
            if write.base.primary_key and write.added:
                _recheck_primary_key(write, at_head(table, ref))
            if faults.broken("first-committer-wins"):
                write = _as_if_alone(write, at_head(table, ref))
        tx = lean_transaction.transaction(table)
        if write.metadata_change is not None:
            write.metadata_change(tx)
            if not write.changes_rows:
                # A schema or property change makes no snapshot: the token rides in a property.
                tx.set_properties({TOKEN_PROPERTY: token})
                requirements = (AssertTableUUID(uuid=table.metadata.table_uuid),
                                AssertCurrentSchemaId(current_schema_id=write.base.schema_id), *tx._requirements)
                return TableChange(*lake_key, requirements, tx._updates, base=table)
        lean_transaction.add_snapshot(tx, write, {**self._properties, TOKEN_PROPERTY: token}, branch=ref)
        requirements = (
            AssertTableUUID(uuid=table.metadata.table_uuid),
            AssertCurrentSchemaId(current_schema_id=write.base.schema_id),
            *tx._requirements,  # assert-ref-snapshot-id(main, or the branch) = base, from the snapshot producer
        )
        return TableChange(*lake_key, requirements, tx._updates, base=table)

    def _guard(self, read: ReadAssertion) -> TableChange:
        """SERIALIZABLE: a read table joins the commit with requirements and no updates."""
        from uuid import UUID

        from pyiceberg.table.update import AssertRefSnapshotId, AssertTableUUID

        (ns, name), ref = self._table_of(read.table)
        requirements = (
            AssertTableUUID(uuid=UUID(read.table_uuid)),
            AssertRefSnapshotId(ref=ref or "main", snapshot_id=read.snapshot),
        )
        return TableChange(ns, name, requirements, ())


def carries_token(meta: Any, token: str) -> bool:
    """Whether a commit with `token` is in the table: a snapshot's summary, or (a metadata-only
    change, which makes no snapshot) the table's properties."""
    return meta.properties.get(TOKEN_PROPERTY) == token or any(
        s.summary is not None and s.summary.get(TOKEN_PROPERTY) == token for s in meta.snapshots)


def commit_metadata_change(lakehouse: Lakehouse, key: tuple[str, str], table: Any, change: Any) -> None:
    """Commit a metadata-only change (ALTER TABLE) through the commit machine, from a worker thread.

    `change(tx)` applies the change to a pyiceberg Transaction; it runs again on the new head if
    a concurrent data commit moved the table (a concurrent schema change is a 40001)."""
    commit_metadata_changes(lakehouse, {key: (table, change)})


def commit_metadata_changes(lakehouse: Lakehouse, changes: dict[tuple[str, str], tuple[Any, Any]]) -> None:
    """`commit_metadata_change` of several tables (key -> (table, change)) in ONE atomic commit:
    all land or none does (ref moves of many tables: lake_refs.py)."""
    import pyarrow as pa
    import trio

    from icegres.engine.mounts import ReadPlan
    from icegres.machines.commit import Config
    from icegres.machines.drivers.commit import run_commit
    from icegres.pg.errors import PgError

    txn = TxnState()
    writes = []
    for key, (table, change) in sorted(changes.items()):
        meta = table.metadata
        base = ReadPlan(metadata_location=table.metadata_location, schema=pa.schema([]), field_ids=(), files=(),
                        snapshot_id=meta.current_snapshot_id, table_uuid=str(meta.table_uuid),
                        schema_id=meta.current_schema_id, table=table)
        txn.writes[key] = StagedWrite(key, base, metadata_change=change)
        writes.append(TableWrite(table=f"{key[0]}.{key[1]}", table_uuid=base.table_uuid,
                                 base_snapshot=base.snapshot_id, base_schema_id=base.schema_id,
                                 kind=WriteKind.APPEND))
    request = CommitRequest(token=uuid.uuid4().hex, writes=tuple(writes))
    # Called from a worker thread that runs no trio loop of its own: one short-lived loop drives it.
    outcome = trio.run(run_commit, request, LakeWorld(lakehouse, txn), Config())
    if not outcome.committed:
        raise PgError(outcome.sqlstate or "XX000", outcome.message or "commit failed", detail=outcome.detail or None)


def _as_if_alone(write: StagedWrite, head: Any) -> StagedWrite:
    """ICEGRES_FAULTS=first-committer-wins=break: `write` rebased onto `head` so that the table
    becomes what it would be had nobody committed since the write's base (base - removed +
    added): the files others added since are removed and the files they removed come back."""
    from dataclasses import replace
    from types import MappingProxyType

    live = {t.file.file_path: t.file for t in head.scan().plan_files()} if head.metadata.current_snapshot_id else {}
    keep = {p: f for p, f in write.base.data_files.items() if p not in write.removed}
    removed = {p: f for p, f in live.items() if p not in keep}
    added = {**{p: f for p, f in keep.items() if p not in live}, **write.added}
    return replace(write, removed=MappingProxyType(removed), added=MappingProxyType(added))


def _recheck_primary_key(write: StagedWrite, head: Any) -> None:
    """Before rebasing a write to a primary-key table onto a newer head: refuse if rows committed
    since our base repeat one of our keys (the inspection that follows reports the key conflict,
    and the machine aborts with 40001)."""
    clash = _key_clash(write, head)
    if clash is not None:
        raise CommitRejected(f"a concurrent commit to {write.table_name} inserted key {clash}")


def _live_as_read(write: StagedWrite, tasks: Any) -> frozenset[str]:
    """The files our write removes, or deletes rows of, that the head still has exactly as our
    base read them: with no merge-on-read delete file our base did not apply. A delete file
    another engine (or another icegres session) added since to a file we rewrite deletes rows
    our rewrite still holds, and to a file we delete rows of may delete the very rows we update
    (both versions of the row would then live), so that file counts as changed under us (first
    committer wins), as a file removed under us does."""
    read = {f.path: f.deletes for f in write.base.files}
    changed = write.changed_files
    return frozenset(t.file.file_path for t in tasks if t.file.file_path in changed
                     and {d.file_path for d in t.delete_files} <= set(read.get(t.file.file_path, ())))


def _key_clash(write: StagedWrite, head: Any) -> tuple[Any, ...] | None:
    """A primary key our added rows share with rows the head holds in files our base did not
    have (committed by others since), or None."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    pk = list(write.base.primary_key)
    ours_known = {f.path for f in write.base.files} | set(write.added)
    theirs = [t.file.file_path for t in head.scan().plan_files() if t.file.file_path not in ours_known]
    if not theirs:
        return None

    def keys(paths: Any) -> set[tuple[Any, ...]]:
        out: set[tuple[Any, ...]] = set()
        for path in paths:
            with head.io.new_input(path).open() as f:
                t: pa.Table = pq.read_table(f, columns=pk)
            out.update(zip(*(t.column(c).to_pylist() for c in pk), strict=True))
        return out

    clash = keys(write.added) & keys(theirs)
    return sorted(clash, key=repr)[0] if clash else None


def delete_files(writes: Any, paths: Any) -> None:
    """Delete staged data files (best effort) through the owning table's FileIO."""
    ios = [w.base.table.io for w in writes if w.base.table is not None]
    if not ios:
        return
    io = ios[0]
    for path in paths:
        try:
            io.delete(path)
        except Exception:
            log.warning("could not delete staged file %s", path, exc_info=True)
