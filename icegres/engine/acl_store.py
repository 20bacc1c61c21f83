"""The authorization document in the Iceberg catalog: the world of the shared-document machine
(machines/acl.py), and `AclStore`, the engine's one way to read and change it.

Where the document lives, and why there: roles, grants and policies must be shared by every icegres
server of one catalog and survive them all, and the catalog is the one thing they all share (a
PostgreSQL database named by a flag would be a second system to run, back up and keep consistent
with the first). So the store is a small Iceberg table, `icegres_auth.acl` (marked
`icegres.kind = acl`, in a namespace the engine never mounts or lists: engine/internal.py), and the
record — the document, the ids of the last changes applied and their count — is the summary of
that table's current snapshot, exactly as a sequence's head is (engine/sequence_store.py). A swap
commits a snapshot with no data files whose summary is the new record, with the requirement that
`main` still points at the snapshot read (AssertRefSnapshotId): the one compare-and-swap that SQL
and REST catalogs both enforce. The version is that snapshot's id: ids are never reused, which is
what lets a read decide an unanswered swap (machines/acl.py).

Why the summary and not a data file: a read is then one loadTable (the metadata file, which the
catalog hands back whole) and a swap one commit, with no data file to write, read or collect. The
summary is a string map in the metadata JSON, so nothing in the catalogs bounds its size: a
document of 200 KB (thousands of grants) reads and swaps on the SQLite and PostgreSQL SQL catalogs
and on SeaweedFS's REST catalog (tests/e2e/test_acl_store.py). Its cost is in the metadata file:
every swap rewrites it, with the document of each snapshot kept, so only the current snapshot and
its parent are kept (older ones are removed in the same commit) and the metadata log is as short,
and the files a swap leaves unreferenced are deleted after it (`_collect`).

The table is created on first use, by the first swap of a store never written: created empty, then
the swap is answered "rejected" so that the machine reads again and swaps onto whichever table won
(`IcebergAcl._create` says why not in one commit: SeaweedFS's REST catalog does not make creates
exclusive). Two servers creating it at once both end up on one table.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import trio

from icegres.engine.internal import AUTH_NAMESPACE
from icegres.machines.acl import EMPTY, NO_VERSION, Change, Config, Phase, Record
from icegres.machines.drivers.acl import (
    SwapNotApplied,
    SwapRejectedError,
    SwapUnknownError,
    run_change,
)
from icegres.pg.errors import PgError

if TYPE_CHECKING:
    from pyiceberg.table import Table

    from icegres.engine.catalog import Lakehouse

__all__ = ["ACL_KIND", "ACL_TABLE", "AclStore", "IcebergAcl", "new_change_id", "record_of"]

ACL_TABLE = "acl"
KIND_PROPERTY = "icegres.kind"
ACL_KIND = "acl"
_PREFIX = "icegres.acl."
_DOCUMENT, _APPLIED, _COUNT = (f"{_PREFIX}{k}" for k in ("document", "applied", "count"))
_KEPT_SNAPSHOTS = 2  # the current record and its parent: each carries a whole document
_LOAD_ATTEMPTS = 5
# How long a create on a REST catalog waits for a concurrent create of the same table to finish
# (`IcebergAcl._create`): a create is one request the catalog serves in milliseconds.
_CREATE_SETTLE_S = 1.0
log = logging.getLogger(__name__)


def record_of(table: Table) -> Record:
    """The record as the store's table (loaded) has it."""
    snapshot = table.current_snapshot()
    if snapshot is None or snapshot.summary is None or _COUNT not in snapshot.summary.additional_properties:
        return Record(snapshot.snapshot_id) if snapshot is not None else EMPTY
    props = snapshot.summary.additional_properties
    return Record(snapshot.snapshot_id, props.get(_DOCUMENT, ""), tuple(json.loads(props.get(_APPLIED, "[]"))),
                  int(props[_COUNT]))


class IcebergAcl:
    """machines.drivers.acl.AclWorld over the store's table. Blocking: run it in worker threads."""

    def __init__(self, lakehouse: Lakehouse, table: str = ACL_TABLE) -> None:
        self.lakehouse = lakehouse
        self.key = (AUTH_NAMESPACE, table)
        self._table: Table | None = None  # as the last read loaded it: the next swap builds on it

    def _load(self) -> Table | None:
        from pyiceberg.exceptions import NoSuchNamespaceError, NoSuchTableError

        for attempt in range(_LOAD_ATTEMPTS):
            try:
                self._table = self.lakehouse.load_table(*self.key)
                break
            except (NoSuchTableError, NoSuchNamespaceError):
                self._table = None
                break
            except FileNotFoundError:
                # The metadata file the catalog named was collected after later swaps (`_collect`):
                # the record moved on meanwhile, so the catalog names a newer one now.
                if attempt == _LOAD_ATTEMPTS - 1:
                    raise
        return self._table

    def read(self) -> Record:
        table = self._load()
        return EMPTY if table is None else record_of(table)

    def swap(self, record: Record) -> None:
        from pyiceberg.table.update import AddSnapshotUpdate, AssertTableUUID, RemoveSnapshotsUpdate

        from icegres.engine import lean_transaction
        from icegres.engine.catalog import (
            CommitNotApplied,
            CommitRejected,
            CommitUnknown,
            TableChange,
            commit_tables,
        )

        expected = record.version
        summary = {_DOCUMENT: record.document, _APPLIED: json.dumps(list(record.applied)), _COUNT: str(record.count)}
        table = self._table if self._table is not None and _version(self._table) == expected else self._load()
        if table is None:
            if expected != NO_VERSION:
                raise SwapRejectedError("the store's table is gone")
            self._create()
        if _version(table) != expected:
            raise SwapRejectedError("the record moved")
        tx = lean_transaction.transaction(table)
        with tx.update_snapshot(snapshot_properties=summary).fast_append():
            pass  # no data: the snapshot is the record
        [manifest_list] = [u.snapshot.manifest_list for u in tx._updates if isinstance(u, AddSnapshotUpdate)]
        # Every snapshot but the current one (the new one's parent) goes in the same commit.
        old = [s.snapshot_id for s in table.metadata.snapshots if s.snapshot_id != expected]
        updates: tuple[Any, ...] = (*tx._updates, RemoveSnapshotsUpdate(snapshot_ids=old)) if old else tx._updates
        requirements = (AssertTableUUID(uuid=table.metadata.table_uuid), *tx._requirements)
        self._table = None
        try:
            landed = commit_tables(self.lakehouse, [TableChange(*self.key, requirements, updates, base=table)])
        except CommitRejected as exc:
            _delete(table, [manifest_list])  # not applied, never will be: nothing refers to it
            raise SwapRejectedError(str(exc)) from None
        except CommitNotApplied as exc:
            _delete(table, [manifest_list])
            raise SwapNotApplied(str(exc)) from None
        except CommitUnknown as exc:
            raise SwapUnknownError(str(exc)) from None
        if self.key in landed:
            _collect(table, old, *landed[self.key])


    def _create(self) -> None:
        """Create the store's table, empty, then answer "rejected": the machine reads again and
        swaps its first record onto whichever table won (AssertTableUUID, and `main` must not
        exist yet). Not the table and its first record in one commit: SeaweedFS's REST catalog
        lets two creates of one name both succeed (with or without AssertCreate), the later
        overwriting the earlier, which would drop a record already on the earlier. Creating empty,
        an overwrite loses nothing; so that it is over before any record is swapped on, a REST
        catalog's create is followed by `_CREATE_SETTLE_S` (SQL catalogs refuse the second
        create: a primary key)."""
        from pyiceberg.exceptions import TableAlreadyExistsError
        from pyiceberg.schema import Schema
        from pyiceberg.types import NestedField, StringType

        self.lakehouse.create_namespace_if_missing(AUTH_NAMESPACE)
        try:
            self.lakehouse.create_table(
                *self.key, Schema(NestedField(1, "document", StringType(), required=False)),
                {KIND_PROPERTY: ACL_KIND,
                 # Each swap writes a metadata file: keep the log as short as the snapshots (`_collect`).
                 "write.metadata.previous-versions-max": str(_KEPT_SNAPSHOTS)})
        except TableAlreadyExistsError:
            pass  # another server's: the same empty table for what follows
        if self.lakehouse.kind == "rest":
            time.sleep(_CREATE_SETTLE_S)
        raise SwapRejectedError("created the store's table: read it again")


def _collect(base: Table, removed: list[int], location: str, metadata: Any) -> None:
    """Delete what a landed swap left unreferenced: the metadata files that fell off the log and the
    manifest lists of the snapshots it removed. Iceberg's `write.metadata.delete-after-commit`, done
    here because the commit is ours (catalog.commit_tables), and needed here because every swap
    writes a metadata file holding whole documents, and no maintenance reaches this table. A reader
    that was handed a file collected meanwhile loads again (`_load`); nothing reads the manifest
    lists (the record is in the metadata). Best effort: a file left behind is only garbage."""
    kept = {location, *(entry.metadata_file for entry in metadata.metadata_log)}
    files = {base.metadata_location, *(entry.metadata_file for entry in base.metadata.metadata_log)} - kept
    files |= {s.manifest_list for s in base.metadata.snapshots if s.snapshot_id in removed and s.manifest_list}
    _delete(base, sorted(files))


def _delete(table: Table, paths: list[str]) -> None:
    for path in paths:
        try:
            table.io.delete(path)
        except Exception as exc:  # noqa: BLE001 - garbage left behind is harmless
            log.debug("could not delete %s: %s", path, exc)


def _version(table: Table) -> int:
    snapshot = table.current_snapshot()
    return snapshot.snapshot_id if snapshot is not None else NO_VERSION


class AclStore:
    """The shared authorization document of one catalog, for the engine.

    One change at a time per store (a trio lock): changes of one server racing each other would
    only refuse each other's swaps; across servers, the machine's compare-and-swap orders them.
    """

    def __init__(self, lakehouse: Lakehouse, *, table: str = ACL_TABLE, config: Config | None = None) -> None:
        self.world = IcebergAcl(lakehouse, table)
        self.config = config or Config()
        self._lock = trio.Lock()

    def read(self) -> tuple[int | None, str]:
        """(version, document) as the catalog has it now; (None, "") if the store was never written.
        Blocking: run it in a worker thread. The version changes with every change that lands."""
        record = IcebergAcl(self.world.lakehouse, self.world.key[1]).read()  # its own: reads may run in any thread
        return (None, "") if record.version == NO_VERSION else (record.version, record.document)

    async def change(self, change_id: str, apply: Callable[[str], str]) -> str:
        """Apply `apply` to the document and write the result, once, across every server; returns
        the document written. `apply` must be pure (it may be called again on the same document);
        whatever it raises is re-raised here, with nothing written. PgError 40001 when other
        servers' changes kept winning, 58030 when the catalog kept failing (not applied, either),
        08007 when whether it was applied cannot be known."""
        async with self._lock:
            outcome = await run_change(Change(change_id, apply), self.world, self.config)
        if outcome.phase is Phase.DONE:
            assert outcome.document is not None
            return outcome.document
        if outcome.phase is Phase.REFUSED:
            assert outcome.error is not None
            raise outcome.error
        assert outcome.sqlstate is not None and outcome.message is not None
        raise PgError(outcome.sqlstate, outcome.message)


def new_change_id() -> str:
    """A change id no other change of any server will have."""
    return uuid.uuid4().hex
