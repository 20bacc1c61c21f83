"""What one transaction has read and staged: pinned snapshots, staged writes, savepoints.

Snapshot isolation needs two things from the engine: a transaction keeps reading the snapshot it
first saw of each table (its pins), and it sees its own staged writes on top of them. Both are
plain values here; the query context turns them into DataFusion relations and the commit machine
turns the staged writes into one atomic commit. Nothing in this module does I/O.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any

from icegres.engine.mounts import FileRead, ReadPlan

Key = tuple[str, str]

_EMPTY: MappingProxyType[str, Any] = MappingProxyType({})


@dataclass(frozen=True)
class StagedWrite:
    """A table's pending change: base files it removes and new files it adds (copy-on-write)."""

    key: Key
    base: ReadPlan
    removed: MappingProxyType[str, Any] = field(default_factory=lambda: _EMPTY)  # path -> base DataFile
    added: MappingProxyType[str, Any] = field(default_factory=lambda: _EMPTY)  # path -> DataFile we wrote
    rows_added: int = 0
    # A statement that staged into this write read the table's rows (a source selecting from
    # it, ON CONFLICT, UPDATE/DELETE): a rebase would change what it read, so the commit machine
    # charges its rebases (a primary-key table counts as read too: `TableWrite.reads_table`).
    read_rows: bool = False
    # A metadata-only change (ALTER TABLE): applied to a pyiceberg Transaction on whatever head the
    # commit machine publishes against.
    metadata_change: Any = field(default=None, compare=False)

    @property
    def is_append(self) -> bool:
        """Only adds files: it cannot conflict with concurrent appends."""
        return not self.removed

    @property
    def is_blind_append(self) -> bool:
        """Adds files and read nothing of the table: any head of its table and schema takes it
        as it is, so the commit machine rebases it for free and appends of several statements
        can share one commit (`engine/group_commit.py`)."""
        return (self.is_append and not self.read_rows and not self.base.primary_key
                and self.metadata_change is None)

    @property
    def table_name(self) -> str:
        return f"{self.key[0]}.{self.key[1]}"

    def view(self) -> ReadPlan:
        """The table as this transaction sees it: base files minus removed, plus added."""
        identity = tuple((f.name, f.name) for f in self.base.schema)
        files = tuple(f for f in self.base.files if f.path not in self.removed)
        files += tuple(FileRead(path, identity) for path in self.added)
        return replace(self.base, files=files)

    def rewrite(self, gone: set[str], new_files: dict[str, Any], rows: int, *,
                read: bool = False) -> tuple[StagedWrite, list[str]]:
        """Remove `gone` files (base or earlier staged ones) and add `new_files`; `read`: the
        statement read the table's rows to compute them.

        Returns the new write and the staged files that became unreferenced (to delete later).
        """
        removed = dict(self.removed)
        added = dict(self.added)
        orphans = []
        for path in gone:
            if path in added:
                del added[path]
                orphans.append(path)
            else:
                removed[path] = self.base.data_files[path]
        added.update(new_files)
        write = replace(self, removed=MappingProxyType(removed), added=MappingProxyType(added),
                        rows_added=self.rows_added + rows, read_rows=self.read_rows or read)
        return write, orphans


_txn_ids = itertools.count(1)


@dataclass
class TxnState:
    """One transaction's pins and staged writes. `version` changes whenever its view changes."""

    serializable: bool = False
    # One statement outside a transaction block: it reads the shared, fresh catalog directly
    # (its pins are what the catalog is now) and needs no private copy of it.
    autocommit: bool = False
    pins: dict[Key, ReadPlan] = field(default_factory=dict)
    pinned_all: bool = False
    writes: dict[Key, StagedWrite] = field(default_factory=dict)
    read_keys: set[Key] = field(default_factory=set)
    orphans: list[str] = field(default_factory=list)  # staged files no longer referenced
    marks: list[tuple[str, dict[Key, StagedWrite]]] = field(default_factory=list)
    version: int = 0
    ident: int = field(default_factory=lambda: next(_txn_ids))
    # Extra snapshot-summary properties for every snapshot the commit makes (the write buffer's
    # tail watermark: `icegres.tail-id`, `icegres.tail-lsn`), published in the same atomic commit.
    snapshot_properties: dict[str, str] = field(default_factory=dict)

    def pin(self, key: Key, plan: ReadPlan | None) -> None:
        if key in self.pins:
            return
        if plan is not None:
            self.pins[key] = plan
            self.version += 1

    def pin_all(self, plans: dict[Key, ReadPlan]) -> None:
        for key, plan in plans.items():
            self.pins.setdefault(key, plan)
        self.pinned_all = True
        self.version += 1

    def refuse_ddl_after_writes(self, keys: set[Key]) -> None:
        """0A000 for DDL on a table this transaction wrote to, asked before the DDL is applied:
        staged rows were written against the old schema (PostgreSQL would have locked the table
        instead), and a refusal after the catalog changed would leave the change behind."""
        for key in sorted(keys):
            if key in self.writes:
                from icegres.pg.errors import PgError

                raise PgError("0A000", f"cannot alter table {key[0]}.{key[1]} after writing to it in the same transaction")

    def repin(self, key: Key, plan: ReadPlan | None) -> None:
        """After DDL inside the transaction: the table's new shape replaces its pin."""
        self.refuse_ddl_after_writes({key})
        if plan is None:
            self.pins.pop(key, None)
        else:
            self.pins[key] = plan
        self.version += 1

    def plan(self, key: Key) -> ReadPlan | None:
        write = self.writes.get(key)
        return write.view() if write is not None else self.pins.get(key)

    def views(self) -> dict[Key, ReadPlan]:
        out = dict(self.pins)
        for key, write in self.writes.items():
            out[key] = write.view()
        return out

    def stage(self, write: StagedWrite, orphans: list[str] = ()) -> None:  # type: ignore[assignment]
        self.writes[write.key] = write
        self.orphans.extend(orphans)
        self.version += 1

    def write_for(self, key: Key) -> StagedWrite:
        write = self.writes.get(key)
        if write is not None:
            return write
        base = self.pins[key]
        return StagedWrite(key, base)

    @property
    def has_writes(self) -> bool:
        return any(w.added or w.removed for w in self.writes.values())

    def all_added(self) -> list[str]:
        return [p for w in self.writes.values() for p in w.added]

    # --- savepoints --------------------------------------------------------------------------

    def mark(self, name: str) -> None:
        self.marks.append((name, dict(self.writes)))

    def release(self, index: int) -> None:
        del self.marks[index:]

    def rollback_to(self, index: int) -> None:
        """Restore the writes as of savepoint `index` (kept); files staged since become orphans."""
        _, saved = self.marks[index]
        del self.marks[index + 1 :]
        still = {p for w in saved.values() for p in w.added}
        self.orphans.extend(p for p in self.all_added() if p not in still)
        self.writes = dict(saved)
        self.version += 1


def new_transaction(default_isolation: str | None, isolation: str | None, *, autocommit: bool = False) -> TxnState:
    """A transaction at `isolation`, else the session's default_transaction_isolation."""
    level = (isolation or default_isolation or "").lower()
    return TxnState(serializable=level == "serializable", autocommit=autocommit)
