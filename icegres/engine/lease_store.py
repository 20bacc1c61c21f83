"""A table's maintenance lease in the Iceberg catalog: the world of the lease machine (machines/lease.py).

Where the record lives, and why there: each maintained table has its own small Iceberg table,
`icegres_maintenance.lease_<table uuid>` (marked `icegres.kind = lease`, naming the table it
guards in `icegres.lease.table`), and the record is the summary of that table's current snapshot,
exactly as a sequence's head is (engine/sequence_store.py). A swap commits a snapshot with no data
files whose summary is the new record, with the requirement that `main` still points at the
snapshot read (AssertRefSnapshotId): the one compare-and-swap that SQL and REST catalogs both
enforce. The version a swap asserts is that snapshot's id, which the swap chooses itself, so an
answered swap knows its new version without reading.

The alternatives, and why not:
- the maintained table's own refs (a `icegres-lease` branch): every renewal would be a commit to
  the user's table, racing its writers (a SQL catalog's metadata-location swap turns each renewal
  into a rebase of a concurrent INSERT), showing up in its history, refs and metadata log, and
  meeting the very expiry the lease guards;
- one shared table holding every table's record: every renewal of any table would move the one
  version, so unrelated leases would refuse each other's swaps, and an observer could never see a
  version stay unchanged for a ttl while any other table is being maintained.
Keyed by the table's UUID, the lease follows a renamed table, and a table dropped and created
again under its name starts with a free lease. Old snapshots are removed in each swap (the last few
are kept), so the lease table's metadata stays small however long it is renewed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from icegres.engine.internal import MAINTENANCE_NAMESPACE
from icegres.machines.drivers.lease import SwapNotApplied, SwapRejectedError, SwapUnknownError
from icegres.machines.lease import FREE, NO_VERSION, Lease

if TYPE_CHECKING:
    from pyiceberg.table import Table

    from icegres.engine.catalog import Lakehouse

NAMESPACE = MAINTENANCE_NAMESPACE
KIND_PROPERTY = "icegres.kind"
LEASE_KIND = "lease"
TABLE_PROPERTY = "icegres.lease.table"  # "namespace.name" of the table it guards, when created
_PREFIX = "icegres.lease."
_HOLDER, _TOKEN, _EPOCH, _TTL, _RELEASED = (f"{_PREFIX}{k}" for k in ("holder", "token", "epoch", "ttl-s", "released"))
_KEPT_SNAPSHOTS = 4


def lease_table_name(table_uuid: str) -> str:
    return f"lease_{table_uuid.replace('-', '').lower()}"


def lease_of(table: Table) -> Lease:
    """The record as the lease table (loaded) has it."""
    snapshot = table.current_snapshot()
    if snapshot is None or snapshot.summary is None or _TOKEN not in snapshot.summary.additional_properties:
        return FREE
    props = snapshot.summary.additional_properties
    return Lease(snapshot.snapshot_id, props.get(_HOLDER, ""), props[_TOKEN], int(props[_EPOCH]),
                 float(props[_TTL]), props.get(_RELEASED) == "true")


class IcebergLease:
    """machines.drivers.lease.LeaseWorld over one table's lease table."""

    def __init__(self, lakehouse: Lakehouse, table_uuid: str, guards: str = "") -> None:
        self.lakehouse = lakehouse
        self.key = (NAMESPACE, lease_table_name(table_uuid))
        self.guards = guards
        self._table: Table | None = None

    @classmethod
    def for_table(cls, lakehouse: Lakehouse, namespace: str, name: str) -> IcebergLease:
        """The lease of the table `namespace.name` (loaded once, for its UUID)."""
        table = lakehouse.load_table(namespace, name)
        return cls(lakehouse, str(table.metadata.table_uuid), f"{namespace}.{name}")

    def _load(self) -> Table | None:
        from pyiceberg.exceptions import NoSuchTableError

        try:
            self._table = self.lakehouse.load_table(*self.key)
        except NoSuchTableError:
            self._table = None
        return self._table

    def _create(self) -> Table:
        from pyiceberg.exceptions import TableAlreadyExistsError
        from pyiceberg.schema import Schema
        from pyiceberg.types import NestedField, StringType

        self.lakehouse.create_namespace_if_missing(NAMESPACE)
        try:
            return self.lakehouse.create_table(
                *self.key, Schema(NestedField(1, "holder", StringType(), required=False)),
                {KIND_PROPERTY: LEASE_KIND, TABLE_PROPERTY: self.guards,
                 # Each swap writes a metadata file and an (empty) manifest list: keep the log as
                 # short as the snapshots, so the files of older swaps are orphans a sweep removes.
                 "write.metadata.previous-versions-max": str(_KEPT_SNAPSHOTS)})
        except TableAlreadyExistsError:
            table = self._load()  # another server made it first: its record (if any) decides
            assert table is not None
            return table

    def read(self) -> Lease:
        table = self._load()
        return FREE if table is None else lease_of(table)

    def swap(self, expected: int, lease: Lease) -> int:
        from pyiceberg.table.update import AddSnapshotUpdate, AssertTableUUID, RemoveSnapshotsUpdate

        from icegres.engine import lean_transaction
        from icegres.engine.catalog import (
            CommitNotApplied,
            CommitRejected,
            CommitUnknown,
            TableChange,
            commit_tables,
        )

        table = self._table if self._table is not None and _version(self._table) == expected else self._load()
        if table is None:
            if expected != NO_VERSION:
                raise SwapRejectedError("the lease table is gone")
            table = self._create()
        if _version(table) != expected:
            raise SwapRejectedError("the record moved")
        tx = lean_transaction.transaction(table)
        summary = {_HOLDER: lease.holder, _TOKEN: lease.token, _EPOCH: str(lease.epoch), _TTL: repr(lease.ttl_s),
                   _RELEASED: "true" if lease.released else "false"}
        with tx.update_snapshot(snapshot_properties=summary).fast_append():
            pass  # no data: the snapshot is the record
        [version] = [u.snapshot.snapshot_id for u in tx._updates if isinstance(u, AddSnapshotUpdate)]
        old = sorted(s.snapshot_id for s in table.metadata.snapshots)[:-(_KEPT_SNAPSHOTS - 1) or None]
        updates: tuple[Any, ...] = (*tx._updates, RemoveSnapshotsUpdate(snapshot_ids=old)) if old else tx._updates
        requirements = (AssertTableUUID(uuid=table.metadata.table_uuid), *tx._requirements)
        self._table = None
        try:
            commit_tables(self.lakehouse, [TableChange(*self.key, requirements, updates, base=table)])
        except CommitRejected as exc:
            raise SwapRejectedError(str(exc)) from None
        except CommitNotApplied as exc:
            raise SwapNotApplied(str(exc)) from None
        except CommitUnknown as exc:
            raise SwapUnknownError(str(exc)) from None
        return version


def _version(table: Table) -> int:
    snapshot = table.current_snapshot()
    return snapshot.snapshot_id if snapshot is not None else NO_VERSION
