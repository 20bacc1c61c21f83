"""What one transaction has read and staged: pinned snapshots, staged writes, savepoints.

Snapshot isolation needs two things from the engine: a transaction keeps reading the snapshot it
first saw of each table (its pins), and it sees its own staged writes on top of them. Both are
plain values here; the query context turns them into DataFusion relations and the commit machine
turns the staged writes into one atomic commit. Nothing in this module does I/O.
"""

from __future__ import annotations

import itertools
import threading
import weakref
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any

from icegres.engine.mounts import FileRead, ReadPlan
from icegres.machines.catalog_commit import Move
from icegres.pg.errors import FEATURE_NOT_SUPPORTED, PgError

Key = tuple[str, str]

_EMPTY: MappingProxyType[str, Any] = MappingProxyType({})


def table_key(key: Key, plan: ReadPlan) -> Key:
    """The lake table a pinned key is: itself, or the table a branch key (schema, "t@b") is a
    branch of (`ReadPlan.ref`, branch_writes.py)."""
    if plan.ref is None:
        return key
    return key[0], key[1][: -len(plan.ref) - 1]


@dataclass(frozen=True)
class StagedWrite:
    """A table's pending change: base files it removes and new files it adds (copy-on-write),
    and rows of base files it deletes by position (merge-on-read, dml/merge_on_read.py)."""

    key: Key
    base: ReadPlan
    removed: MappingProxyType[str, Any] = field(default_factory=lambda: _EMPTY)  # path -> base DataFile
    added: MappingProxyType[str, Any] = field(default_factory=lambda: _EMPTY)  # path -> DataFile we wrote
    # Merge-on-read: base data file path -> the sorted positions of its rows this transaction
    # deleted, and the position-delete files (path -> DataFile) that say so, written anew by each
    # statement that adds positions (so they always hold exactly `deleted`; one per partition).
    deleted: MappingProxyType[str, Any] = field(default_factory=lambda: _EMPTY, compare=False)
    delete_files: MappingProxyType[str, Any] = field(default_factory=lambda: _EMPTY)
    rows_added: int = 0
    # A statement that staged into this write read the table's rows (a source selecting from
    # it, ON CONFLICT, UPDATE/DELETE): a rebase would change what it read, so the commit machine
    # charges its rebases (a primary-key table counts as read too: `TableWrite.reads_table`).
    read_rows: bool = False
    # Schema or property changes (ALTER TABLE, CREATE INDEX): applied, in order, to the pyiceberg
    # Transaction the commit machine publishes, before this write's files, in the same commit.
    metadata_change: Any = field(default=None, compare=False)
    # The table as those changes leave it (its new schema), for the block's later statements; the
    # base stays what the catalog has, which the commit asserts.
    shape: ReadPlan | None = field(default=None, compare=False)
    # Files this write added before such a change, as the new shape reads them (by field id).
    remapped: MappingProxyType[str, FileRead] = field(default_factory=lambda: _EMPTY, compare=False)
    # The added files hold exactly the rows of the removed ones (compaction): the snapshot is a
    # `replace`, which readers and incremental consumers know to skip (engine/maintenance/compact.py).
    replaces: bool = False
    # Rows a block's INSERTs added that are not in a file yet (conformed to `target`'s write
    # schema): an executemany in a block wrote a Parquet file per row (~10 ms each).
    # `TxnState.settle` writes them as one file before anything reads the table's files, and
    # COMMIT writes them with the block's other small files (dml/copy_on_write.py `compact`).
    # A chain, newest first, each `(rows, older)`: adding one copies nothing (`pending_rows`).
    pending: tuple[Any, ...] = field(default=(), compare=False)
    pending_bytes: int = field(default=0, compare=False)

    @property
    def is_append(self) -> bool:
        """Only adds files: it cannot conflict with concurrent appends."""
        return not self.removed and not self.deleted

    @property
    def changes_rows(self) -> bool:
        """It adds or removes data files, or deletes rows by position: it makes a snapshot."""
        return bool(self.added or self.removed or self.delete_files or self.pending)

    def deferred(self, rows: Any) -> StagedWrite:
        """This write with `rows` added to its pending rows (`pending`)."""
        return replace(self, pending=(rows, self.pending), pending_bytes=self.pending_bytes + rows.nbytes,
                       rows_added=self.rows_added + rows.num_rows)

    def pending_rows(self) -> list[Any]:
        """The pending rows' tables, oldest first."""
        out = []
        node = self.pending
        while node:
            out.append(node[0])
            node = node[1]
        out.reverse()
        return out

    def written(self, new_files: dict[str, Any]) -> StagedWrite:
        """This write with its pending rows now in `new_files`."""
        return replace(self, pending=(), pending_bytes=0, added=MappingProxyType({**self.added, **new_files}))

    def _settled(self) -> None:
        # Whatever reads or rewrites the table's files must see every row: `TxnState.settle` first.
        assert not self.pending, f"{self.table_name}: pending rows not written before its files were read"

    @property
    def changed_files(self) -> frozenset[str]:
        """The base files whose rows it removes: whole (copy-on-write) or some (merge-on-read).
        Each must be in the head, as the base read it, when the write lands (first committer wins)."""
        return frozenset(self.removed) | frozenset(self.deleted)

    @property
    def is_blind_append(self) -> bool:
        """Adds files and read nothing of the table: any head of its table and schema takes it
        as it is, so the commit machine rebases it for free and appends of several statements
        can share one commit (`engine/group_commit.py`)."""
        return (self.is_append and not self.read_rows and not self.base.primary_key
                and self.metadata_change is None)

    @property
    def target(self) -> ReadPlan:
        """What new files are written as: the table's shape after the block's ALTERs."""
        return self.shape or self.base

    def rekeyed(self, key: Key) -> StagedWrite:
        """The same write under the name a RENAME in the block gave its table."""
        return replace(self, key=key)

    @property
    def table_name(self) -> str:
        return f"{self.key[0]}.{self.key[1]}"

    def view(self) -> ReadPlan:
        """The table as this transaction sees it: base files minus removed, plus added."""
        self._settled()
        shape = self.shape or self.base
        identity = tuple((f.name, f.name) for f in shape.schema)
        files = tuple(self._with_deletes(f) for f in shape.files if f.path not in self.removed)
        files += tuple(self.remapped.get(path) or FileRead(path, identity) for path in self.added)
        return replace(shape, files=files, data_files=self.base.data_files)

    def _with_deletes(self, f: FileRead) -> FileRead:
        """A base file as this write sees it: its staged deleted positions applied too."""
        staged = self.deleted.get(f.path)
        if staged is None:
            return f
        import numpy as np

        deleted = staged if f.deleted is None else np.union1d(f.deleted, staged)
        # (the delete file paths name the positions: scans are cached by them)
        return replace(f, deletes=(*f.deletes, *sorted(self.delete_files)), deleted=deleted)

    def deleted_rows(self, positions: dict[str, Any], delete_files: dict[str, Any], new_files: dict[str, Any],
                     rows: int) -> tuple[StagedWrite, list[str]]:
        """Merge-on-read: delete the rows at `positions` (base file path -> sorted positions, none
        deleted before) and add `new_files` (the updated rows' new versions, inserted rows);
        `delete_files` replace this write's delete files and say every position deleted so far.

        Returns the new write and the staged delete files that became unreferenced."""
        import numpy as np

        self._settled()

        deleted = dict(self.deleted)
        for path, pos in positions.items():
            assert path in self.base.data_files and path not in self.removed and path not in self.added, path
            deleted[path] = pos if path not in deleted else np.union1d(deleted[path], pos)
        orphans = [p for p in self.delete_files if p not in delete_files]
        write = replace(self, deleted=MappingProxyType(deleted), delete_files=MappingProxyType(dict(delete_files)),
                        added=MappingProxyType({**self.added, **new_files}), rows_added=self.rows_added + rows,
                        read_rows=True)
        return write, orphans

    def altered(self, change: Any, shape: ReadPlan, remap: Any) -> StagedWrite:
        """This write with one more metadata change after those it has; `shape` is the table
        after it, and `remap(path, shape)` the FileRead of an added file under that shape."""
        self._settled()
        earlier = self.metadata_change

        def changes(tx: Any) -> None:
            if earlier is not None:
                earlier(tx)
            change(tx)

        remapped = {path: remap(path, shape) for path in self.added}
        return replace(self, metadata_change=changes, shape=shape, remapped=MappingProxyType(remapped))

    def rewrite(self, gone: set[str], new_files: dict[str, Any], rows: int, *,
                read: bool = False) -> tuple[StagedWrite, list[str]]:
        """Remove `gone` files (base or earlier staged ones) and add `new_files`; `read`: the
        statement read the table's rows to compute them.

        Returns the new write and the staged files that became unreferenced (to delete later).
        """
        self._settled()
        removed = dict(self.removed)
        added = dict(self.added)
        deleted = dict(self.deleted)
        orphans = []
        for path in gone:
            if path in added:
                del added[path]
                orphans.append(path)
            else:
                removed[path] = self.base.data_files[path]
                # Rewritten from the rows this transaction sees: its staged deletes of the file
                # are in the rewrite (the delete files still name the file's positions; a
                # position of a removed file deletes nothing, and the next statement that
                # deletes by position writes them without it).
                deleted.pop(path, None)
        added.update(new_files)
        write = replace(self, removed=MappingProxyType(removed), added=MappingProxyType(added),
                        deleted=MappingProxyType(deleted),
                        rows_added=self.rows_added + rows, read_rows=self.read_rows or read)
        return write, orphans


@dataclass
class BlockCatalog:
    """A block's catalog changes so far, published at COMMIT by the catalog commit machine
    (`machines/catalog_commit.py`): the moves in the block's order, the hidden tables made for
    its CREATEs, and where its DROPs move tables aside."""

    token: str
    moves: list[Move] = field(default_factory=list)
    created: list[Key] = field(default_factory=list)  # never shrinks: every one is purged unless placed
    graveyard: list[Key] = field(default_factory=list)

    def copy(self) -> BlockCatalog:
        return BlockCatalog(self.token, list(self.moves), list(self.created), list(self.graveyard))


_txn_ids = itertools.count(1)
# Every transaction of this process still referenced (its session's block, a statement running):
# snapshot expiry keeps the snapshots they pinned (`pinned_snapshots`).
_live: weakref.WeakValueDictionary[int, TxnState] = weakref.WeakValueDictionary()
_live_lock = threading.Lock()


@dataclass
class TxnState:
    """One transaction's pins and staged writes. `version` changes whenever its view changes."""

    serializable: bool = False
    # One statement outside a transaction block: it reads the shared, fresh catalog directly
    # (its pins are what the catalog is now) and needs no private copy of it.
    autocommit: bool = False
    pins: dict[Key, ReadPlan] = field(default_factory=dict)
    pinned_all: bool = False
    # With `pinned_all`: the listed metadata location of each table not mounted when the block
    # pinned the catalog, pinned at that location when the block first names it (lazy mounting).
    listed: dict[Key, str] = field(default_factory=dict)
    writes: dict[Key, StagedWrite] = field(default_factory=dict)
    read_keys: set[Key] = field(default_factory=set)
    orphans: list[str] = field(default_factory=list)  # staged files no longer referenced
    marks: list[tuple[str, Any]] = field(default_factory=list)
    version: int = 0
    ident: int = field(default_factory=lambda: next(_txn_ids))
    # Extra snapshot-summary properties for every snapshot the commit makes (the write buffer's
    # tail watermark: `icegres.tail-id`, `icegres.tail-lsn`), published in the same atomic commit.
    snapshot_properties: dict[str, str] = field(default_factory=dict)
    # DDL inside the block: its catalog changes (None: none yet), and the names it dropped or
    # renamed away, which the catalog still holds until COMMIT but the block no longer sees.
    catalog: BlockCatalog | None = None
    hidden: set[Key] = field(default_factory=set)
    # Temporary tables the block created (temp_tables.py): dropped again if it rolls back.
    temp_created: list[str] = field(default_factory=list)
    # Views as the block's DDL left them (a ViewDef, or None: dropped or renamed away); names
    # not here are the catalog's.
    view_overlay: dict[Key, Any] = field(default_factory=dict)
    # Role and privilege changes of the block (folds of pg/acl.py), in order: its statements see
    # them (authz.BlockAuthorization), COMMIT applies them to the shared state, ROLLBACK drops them.
    acl_folds: list[Any] = field(default_factory=list)
    acl_overlay: Any = None  # (that view, kept while the block lives)
    # The durable record of the data files this transaction writes (engine/staging.py), made on
    # its first file.
    stager: Any = None
    # Writes a write's pending rows as files (dml/copy_on_write.py `write_pending`): given by the
    # first statement that defers rows, used by `settle` (in the thread running the statement).
    writer: Any = None

    def __post_init__(self) -> None:
        with _live_lock:
            _live[self.ident] = self

    def pin(self, key: Key, plan: ReadPlan | None) -> None:
        if key in self.pins or key in self.hidden:
            return
        if plan is not None:
            self.pins[key] = plan
            self.version += 1

    def pin_all(self, plans: dict[Key, ReadPlan], listed: dict[Key, str] | None = None) -> None:
        for key, plan in plans.items():
            if key not in self.hidden:
                self.pins.setdefault(key, plan)
        self.listed = {k: v for k, v in (listed or {}).items() if k not in self.pins}
        self.pinned_all = True
        self.version += 1

    def repin(self, key: Key, plan: ReadPlan | None) -> None:
        """After DDL applied at once (views, schemas): the table's new shape replaces its pin."""
        if plan is None:
            self.pins.pop(key, None)
        else:
            self.pins[key] = plan
        self.version += 1

    def plan(self, key: Key) -> ReadPlan | None:
        write = self.writes.get(key)
        if write is None:
            return self.pins.get(key)
        return self.settle(key).view()

    def shape(self, key: Key) -> ReadPlan | None:
        """The table as this transaction's statements write it (columns, defaults, constraints,
        its Iceberg table), without its files: what an INSERT that reads nothing of the table
        needs, and it leaves the rows it adds pending (`StagedWrite.pending`)."""
        write = self.writes.get(key)
        return write.target if write is not None else self.pins.get(key)

    def views(self) -> dict[Key, ReadPlan]:
        out = dict(self.pins)
        for key in list(self.writes):
            out[key] = self.settle(key).view()
        return out

    def defer(self, key: Key, rows: Any, writer: Any) -> None:
        """Add `rows` to the table's pending rows; `writer` writes them when they are read."""
        self.writer = writer
        self.stage(self.write_for(key).deferred(rows))

    def settle(self, key: Key) -> StagedWrite:
        """The table's write with its pending rows written as a file (blocking I/O: a worker
        thread's, as every statement's work is)."""
        write = self.writes[key]
        if write.pending:
            write = self.writer(write)
            self.writes[key] = write  # (the view is the same rows: `version` stays)
        return write

    def stage(self, write: StagedWrite, orphans: list[str] = ()) -> None:  # type: ignore[assignment]
        self.writes[write.key] = write
        self.orphans.extend(orphans)
        self.version += 1

    def write_for(self, key: Key) -> StagedWrite:
        write = self.writes.get(key)
        if write is not None:
            return write
        base = self.pins[key]
        self._check_one_ref(key, base)
        return StagedWrite(key, base)

    def _check_one_ref(self, key: Key, plan: ReadPlan) -> None:
        """0A000 if this transaction already writes another ref of the table `key` is a ref of:
        one commit makes one metadata update per table (branch_writes.py)."""
        table = table_key(key, plan)
        for other in self.writes.values():
            if other.key != key and table_key(other.key, other.base) == table:
                theirs, ours = other.base.ref or "main", plan.ref or "main"
                raise PgError(FEATURE_NOT_SUPPORTED,
                              f'a transaction cannot write both branch "{theirs}" and branch "{ours}" '
                              f'of table "{table[0]}.{table[1]}"',
                              hint="Write each branch in a transaction of its own.")

    @property
    def writes_refs(self) -> bool:
        """It has pinned a branch to write (`branch_writes.py`): its statements plan on its own
        view of the tables, as a block's do, even in autocommit."""
        return any(p.ref is not None for p in self.pins.values())

    @property
    def has_writes(self) -> bool:
        return any(w.changes_rows for w in self.writes.values())

    def all_added(self) -> list[str]:
        """Every file the transaction's writes staged (data and delete files)."""
        return [p for w in self.writes.values() for p in (*w.added, *w.delete_files)]

    # --- DDL in the block ---------------------------------------------------------------------

    def block_catalog(self, token: str) -> BlockCatalog:
        if self.catalog is None:
            self.catalog = BlockCatalog(token)
        return self.catalog

    def created_table(self, key: Key, hidden: Key, plan: ReadPlan) -> None:
        """CREATE TABLE `key`: made in the catalog as `hidden`, placed under its name at COMMIT."""
        catalog = self._catalog()
        catalog.created.append(hidden)
        catalog.moves.append(Move(key[0], hidden[1], key[1], plan.table_uuid))
        self.hidden.discard(key)
        self.pins[key] = plan
        self.version += 1

    def renamed_table(self, key: Key, new: Key) -> None:
        """ALTER TABLE `key` RENAME: the block sees it (pin, staged write, reads) as `new` now."""
        plan = self.shape(key)
        assert plan is not None
        self._catalog().moves.append(Move(key[0], key[1], new[1], plan.table_uuid))
        self.pins[new] = self.pins.pop(key)
        if key in self.writes:
            self.writes[new] = self.writes.pop(key).rekeyed(new)
        if key in self.read_keys:
            self.read_keys.discard(key)
            self.read_keys.add(new)
        self.hidden.add(key)
        self.hidden.discard(new)
        self.version += 1

    def dropped_table(self, key: Key, graveyard: Key) -> None:
        """DROP TABLE `key`: moved aside to `graveyard` at COMMIT, purged once committed; what
        the block staged into it is unreferenced now."""
        plan = self.shape(key)
        assert plan is not None
        catalog = self._catalog()
        catalog.moves.append(Move(key[0], key[1], graveyard[1], plan.table_uuid))
        catalog.graveyard.append(graveyard)
        self.pins.pop(key, None)
        write = self.writes.pop(key, None)
        if write is not None:
            self.orphans.extend((*write.added, *write.delete_files))
        self.read_keys.discard(key)
        self.hidden.add(key)
        self.version += 1

    def altered_table(self, key: Key, write: StagedWrite) -> None:
        """ALTER TABLE `key` (columns, properties): `write` carries the change to the commit."""
        self.writes[key] = write
        self.version += 1

    def created_view(self, key: Key, hidden: Key, view: Any, replaced: Any | None, graveyard: Key | None) -> None:
        """CREATE [OR REPLACE] VIEW `key`: made in the catalog as `hidden` (`view` its definition,
        under `key`); a view it replaces goes to `graveyard` at COMMIT."""
        catalog = self._catalog()
        if replaced is not None and graveyard is not None:
            catalog.moves.append(Move(key[0], key[1], graveyard[1], replaced.metadata_location, "view"))
            catalog.graveyard.append(graveyard)
        catalog.created.append(hidden)
        catalog.moves.append(Move(key[0], hidden[1], key[1], view.metadata_location, "view"))
        self.view_overlay[key] = view
        self.hidden.discard(key)
        self.version += 1

    def dropped_view(self, key: Key, view: Any, graveyard: Key) -> None:
        catalog = self._catalog()
        catalog.moves.append(Move(key[0], key[1], graveyard[1], view.metadata_location, "view"))
        catalog.graveyard.append(graveyard)
        self.view_overlay[key] = None
        self.hidden.add(key)
        self.version += 1

    def renamed_view(self, key: Key, new: Key, view: Any) -> None:
        from dataclasses import replace as changed

        self._catalog().moves.append(Move(key[0], key[1], new[1], view.metadata_location, "view"))
        self.view_overlay[key] = None
        self.view_overlay[new] = changed(view, name=new[1])
        self.hidden.add(key)
        self.hidden.discard(new)
        self.version += 1

    def view(self, key: Key, catalog_view: Any) -> Any:
        """The view `key` as the block sees it (`catalog_view`: the catalog's, looked up by
        the caller)."""
        if key in self.view_overlay:
            return self.view_overlay[key]
        return None if key in self.hidden else catalog_view

    def _catalog(self) -> BlockCatalog:
        assert self.catalog is not None, "block_catalog(token) comes first"
        return self.catalog

    # --- savepoints --------------------------------------------------------------------------

    def mark(self, name: str) -> None:
        saved = (dict(self.writes), dict(self.pins), set(self.hidden), set(self.read_keys),
                 self.catalog.copy() if self.catalog is not None else None, dict(self.view_overlay),
                 list(self.acl_folds))
        self.marks.append((name, saved))

    def release(self, index: int) -> None:
        del self.marks[index:]

    def rollback_to(self, index: int) -> None:
        """Restore the writes as of savepoint `index` (kept); files staged since become orphans."""
        _, (writes, pins, hidden, read_keys, catalog, view_overlay, acl_folds) = self.marks[index]
        del self.marks[index + 1 :]
        still = {p for w in writes.values() for p in (*w.added, *w.delete_files)}
        # A file the savepoint's writes reference is referenced again, though a statement since
        # replaced it (a rewrite of a staged file, a delete file written anew): not an orphan.
        self.orphans = [p for p in self.orphans if p not in still]
        self.orphans.extend(p for p in self.all_added() if p not in still)
        self.writes = dict(writes)
        # Tables first read since the savepoint keep their pins (snapshot isolation); names the
        # block's DDL made since are gone again, and what that DDL moved comes back.
        since = self.catalog.moves[len(catalog.moves) if catalog is not None else 0:] if self.catalog else []
        made = {(m.namespace, m.dst) for m in since}
        self.pins = {k: v for k, v in self.pins.items() if k not in made} | pins
        self.hidden = set(hidden)
        self.view_overlay = dict(view_overlay)
        self.acl_folds = list(acl_folds)
        self.read_keys = set(read_keys)
        if self.catalog is not None:
            # Tables created since the savepoint stay listed as created: purged unless placed.
            created = self.catalog.created
            self.catalog = catalog.copy() if catalog is not None else BlockCatalog(self.catalog.token)
            self.catalog.created = list(created)
        self.version += 1


def new_transaction(default_isolation: str | None, isolation: str | None, *, autocommit: bool = False) -> TxnState:
    """A transaction at `isolation`, else the session's default_transaction_isolation."""
    level = (isolation or default_isolation or "").lower()
    return TxnState(serializable=level == "serializable", autocommit=autocommit)


def pinned_snapshots(table_uuid: str) -> set[int]:
    """The snapshots of the table `table_uuid` that live transactions of this process pinned."""
    with _live_lock:
        txns = list(_live.values())
    return {plan.snapshot_id for txn in txns for plan in list(txn.pins.values())
            if plan.table_uuid == table_uuid and plan.snapshot_id is not None}
