"""A sequence in the Iceberg catalog: the world of the sequence machine (machines/sequence.py).

A sequence is an Iceberg table of the sequence's name (one namespace with the tables, as in
PostgreSQL) marked by the property `icegres.kind = sequence`, its options in properties, and its
head — the last value reserved — in the summary of the table's current snapshot. Reserving a
block commits a new snapshot (no data files) whose summary names the block, with the catalog
requirement that `main` still points at the snapshot read (AssertRefSnapshotId): the one
compare-and-swap every Iceberg catalog enforces, the SQL catalog by the metadata location it
updates and a REST catalog by the commit's requirements. So two servers on one catalog cannot
both reserve a block after the same head, and a head once written names values no later block
can include. Old snapshots are removed from the metadata in the same commit (only the last few
are kept), so a busy sequence's metadata stays small.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from icegres.machines.drivers.sequence import (
    SequenceGone,
    SwapNotApplied,
    SwapRejected,
    SwapUnknown,
)
from icegres.machines.sequence import Definition, Head

if TYPE_CHECKING:
    from pyiceberg.table import Table

    from icegres.engine.catalog import Lakehouse

log = logging.getLogger(__name__)

KIND_PROPERTY = "icegres.kind"
SEQUENCE_KIND = "sequence"
_PREFIX = "icegres.sequence."
# The head, in the current snapshot's summary.
_LAST, _CALLED, _FIRST, _TOKEN = (f"{_PREFIX}last-value", f"{_PREFIX}is-called", f"{_PREFIX}first",
                                  f"{_PREFIX}token")
OWNED_BY_PROPERTY = f"{_PREFIX}owned-by"  # "schema.table.column" of a serial or identity column
IDENTITY_PROPERTY = f"{_PREFIX}identity"  # "true": an identity column's (PostgreSQL's internal dependency)
_KEPT_SNAPSHOTS = 4
NO_SNAPSHOT = -1  # the version of a sequence never advanced


def is_sequence(properties: dict[str, str]) -> bool:
    return properties.get(KIND_PROPERTY) == SEQUENCE_KIND


def definition_properties(d: Definition) -> dict[str, str]:
    return {KIND_PROPERTY: SEQUENCE_KIND, f"{_PREFIX}increment": str(d.increment),
            f"{_PREFIX}min-value": str(d.min_value), f"{_PREFIX}max-value": str(d.max_value),
            f"{_PREFIX}start": str(d.start), f"{_PREFIX}cache": str(d.cache),
            f"{_PREFIX}cycle": "true" if d.cycle else "false"}


def definition_of(name: str, properties: dict[str, str]) -> Definition | None:
    """The sequence a table's properties define (None: not a sequence)."""
    if not is_sequence(properties):
        return None

    def number(key: str, default: int) -> int:
        return int(properties.get(f"{_PREFIX}{key}", default))

    return Definition(name, increment=number("increment", 1), min_value=number("min-value", 1),
                      max_value=number("max-value", 2**63 - 1), start=number("start", 1),
                      cycle=properties.get(f"{_PREFIX}cycle") == "true", cache=number("cache", 1))


def head_of(table: Table, definition: Definition) -> Head:
    """The head as `table` (loaded) has it."""
    snapshot = table.current_snapshot()
    if snapshot is None or snapshot.summary is None or _LAST not in snapshot.summary.additional_properties:
        version = snapshot.snapshot_id if snapshot is not None else NO_SNAPSHOT
        return Head(version, definition.start, False)
    props = snapshot.summary.additional_properties
    return Head(snapshot.snapshot_id, int(props[_LAST]), props.get(_CALLED) == "true",
                int(props.get(_FIRST, props[_LAST])), props.get(_TOKEN, ""))


def sequence_schema() -> Any:
    """PostgreSQL's sequence relation's columns (SELECT * FROM a sequence reads them)."""
    from pyiceberg.schema import Schema
    from pyiceberg.types import BooleanType, LongType, NestedField

    return Schema(NestedField(1, "last_value", LongType(), required=False),
                  NestedField(2, "log_cnt", LongType(), required=False),
                  NestedField(3, "is_called", BooleanType(), required=False))


class IcebergSequence:
    """machines.drivers.sequence.SequenceWorld over one sequence table."""

    def __init__(self, lakehouse: Lakehouse, key: tuple[str, str]) -> None:
        self.lakehouse = lakehouse
        self.key = key
        self._table: Table | None = None

    def load(self) -> tuple[Table, Definition]:
        from pyiceberg.exceptions import NoSuchTableError

        try:
            table = self.lakehouse.load_table(*self.key)
        except NoSuchTableError:
            raise SequenceGone(f"{self.key[0]}.{self.key[1]}") from None
        return self.adopt(table)

    def adopt(self, table: Table) -> tuple[Table, Definition]:
        """The sequence as `table` (just loaded) has it; the next swap builds on it."""
        definition = definition_of(self.key[1], table.properties)
        if definition is None:
            raise SequenceGone(f"{self.key[0]}.{self.key[1]} is not a sequence")
        self._table = table
        return table, definition

    def read_head(self) -> Head:
        table, definition = self.load()
        return head_of(table, definition)

    def advance(self, expected: int, head: Head) -> None:
        from pyiceberg.table.update import AssertTableUUID, RemoveSnapshotsUpdate

        from icegres.engine import lean_transaction
        from icegres.engine.catalog import (
            CommitNotApplied,
            CommitRejected,
            CommitUnknown,
            TableChange,
            commit_tables,
        )

        table = self._table
        if table is None or _version(table) != expected:
            table, _ = self.load()
            if _version(table) != expected:
                raise SwapRejected("the head moved")
        tx = lean_transaction.transaction(table)
        summary = {_LAST: str(head.last_value), _CALLED: "true" if head.is_called else "false",
                   _FIRST: str(head.first), _TOKEN: head.token}
        with tx.update_snapshot(snapshot_properties=summary).fast_append():
            pass  # no data: the snapshot is the head
        old = sorted(s.snapshot_id for s in table.metadata.snapshots)[:-(_KEPT_SNAPSHOTS - 1) or None]
        updates = (*tx._updates, RemoveSnapshotsUpdate(snapshot_ids=old)) if old else tx._updates
        requirements = (AssertTableUUID(uuid=table.metadata.table_uuid), *tx._requirements)
        self._table = None
        try:
            commit_tables(self.lakehouse, [TableChange(*self.key, requirements, updates, base=table)])
        except CommitRejected as exc:
            raise SwapRejected(str(exc)) from None
        except CommitNotApplied as exc:
            raise SwapNotApplied(str(exc)) from None
        except CommitUnknown as exc:
            raise SwapUnknown(str(exc)) from None


def _version(table: Table) -> int:
    snapshot = table.current_snapshot()
    return snapshot.snapshot_id if snapshot is not None else NO_SNAPSHOT


def set_head(lakehouse: Lakehouse, key: tuple[str, str], last_value: int, is_called: bool) -> None:
    """setval / ALTER SEQUENCE RESTART: the head replaced, whatever it was (read and swap until
    the swap lands; another server's block in between only moves the version)."""
    world = IcebergSequence(lakehouse, key)
    for _ in range(100):
        head = world.read_head()
        try:
            world.advance(head.version, Head(0, last_value, is_called, last_value, ""))
            return
        except SwapRejected:
            continue
    raise SwapNotApplied(f"could not set sequence {key[0]}.{key[1]}: it kept moving")
