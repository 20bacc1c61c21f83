"""Temporary tables: one session's, in `pg_temp`, never in the lake's catalog.

A temporary table is an Iceberg table whose metadata lives only in the session's memory and whose
files (data, manifests) live in a directory of the session's own, deleted when the session ends.
So everything a lake table has works on it unchanged — the same scans (`mounts.plan_read`), the
same copy-on-write DML staging into the transaction (`TxnState` keyed `("pg_temp", name)`) — and
only the last step differs: where a lake table's staged write goes to the commit machine, a
temporary table's is applied here, to the in-memory metadata, once the rest of the transaction
has committed (`writes.publish`). Nothing about it reaches the catalog, so no other session, and
no other server, can see it.

PostgreSQL's rules kept: an unqualified name finds a temporary table before any schema of the
search_path (unless `pg_temp` is listed explicitly), `pg_temp.t` names it explicitly, and the
table is dropped at disconnect. Blocking (file I/O): call from worker threads.
"""

from __future__ import annotations

import shutil
import tempfile
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from icegres.engine.mounts import ReadPlan
    from icegres.engine.txn import StagedWrite

TEMP_SCHEMA = "pg_temp"


class TempTables:
    """The temporary tables of one session (its `SessionEnv.temp`)."""

    def __init__(self, root: Path | None = None) -> None:
        if root is not None:
            root.mkdir(parents=True, exist_ok=True)
        self._dir = Path(tempfile.mkdtemp(prefix="icegres-temp-", dir=root))
        self._tables: dict[str, Any] = {}  # name -> pyiceberg Table with in-memory metadata
        self._plans: dict[str, ReadPlan] = {}
        self._lock = threading.Lock()
        self.version = 0  # changes with every table made, dropped or written

    def __bool__(self) -> bool:
        return bool(self._tables)

    def names(self) -> list[str]:
        return sorted(self._tables)

    def has(self, name: str) -> bool:
        return name in self._tables

    def create(self, name: str, schema: Any, spec: Any, properties: dict[str, str], plan_of: Any) -> ReadPlan:
        """A new empty table `name` (schema and partition spec as for a lake table)."""
        from pyiceberg.io import load_file_io
        from pyiceberg.table import Table
        from pyiceberg.table.metadata import new_table_metadata
        from pyiceberg.table.sorting import UNSORTED_SORT_ORDER

        location = (self._dir / f"{name}-{self.version}").as_uri()
        metadata = new_table_metadata(schema, spec, UNSORTED_SORT_ORDER, location, properties)
        io = load_file_io({}, location)
        table = Table((TEMP_SCHEMA, name), metadata, f"{location}/metadata/v0.metadata.json", io, None)
        return self._keep(name, table, plan_of)

    def drop(self, name: str) -> None:
        with self._lock:
            table = self._tables.pop(name, None)
            self._plans.pop(name, None)
            self.version += 1
        if table is not None:
            shutil.rmtree(Path(table.location().removeprefix("file://")), ignore_errors=True)

    def plans(self) -> dict[tuple[str, str], ReadPlan]:
        with self._lock:
            return {(TEMP_SCHEMA, name): plan for name, plan in self._plans.items()}

    def apply(self, write: StagedWrite, plan_of: Any) -> None:
        """A committed transaction's write of one temporary table: its new snapshot, in memory."""
        from pyiceberg.table import Table

        from icegres.engine import lean_transaction

        name = write.key[1]
        table: Any = self._tables.get(name)
        if table is None:
            return  # dropped by the same transaction
        tx = lean_transaction.transaction(table)
        if write.metadata_change is not None:
            write.metadata_change(tx)
        if write.added or write.removed:
            lean_transaction.add_snapshot(tx, write)
        updated = Table(table.name(), tx.table_metadata, table.metadata_location, table.io, None)
        self._keep(name, updated, plan_of)

    def close(self) -> None:
        """The session ended: every temporary table goes, files and all."""
        with self._lock:
            self._tables.clear()
            self._plans.clear()
        shutil.rmtree(self._dir, ignore_errors=True)

    def _keep(self, name: str, table: Any, plan_of: Any) -> ReadPlan:
        plan = plan_of(table)
        with self._lock:
            self._tables[name] = table
            self._plans[name] = plan
            self.version += 1
        return plan
