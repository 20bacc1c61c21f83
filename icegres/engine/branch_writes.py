"""Writing to a branch: `INSERT INTO "t@b"`, `UPDATE "t@b"`, `DELETE FROM "t@b"`, and the tables
a session's `icegres.branch` sends its statements to.

A branch a statement writes becomes a table of the transaction's own: its key is
(schema, "t@b"), pinned at the branch's head (`ReadPlan.ref` = b; the table's current schema over
the branch snapshot's files, as Iceberg reads a branch). The DML path works on it as on any pinned
table, and the commit machine sees a table named "schema.t@b" whose head is the branch's
snapshot: `LakeWorld` publishes a snapshot on branch b of table t, asserting b's head
(`assert-ref-snapshot-id`), so first-committer-wins and the 40001 rules hold per ref. Nothing is
copied: the branch's new snapshot lists its parent's files and the statement's new ones.

What is refused, and why: a tag or a snapshot id cannot be written (Iceberg moves only branches);
one transaction writes one ref of a table (its commit is one metadata update per table:
`TxnState.write_for`).
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

from icegres.pg.errors import UNDEFINED_OBJECT, UNDEFINED_TABLE, WRONG_OBJECT_TYPE, PgError

if TYPE_CHECKING:
    from pyiceberg.table import Table

    from icegres.engine.lake import Engine
    from icegres.engine.mounts import ReadPlan
    from icegres.engine.txn import Key, TxnState

MAIN = "main"


def ref_key(key: Key, ref: str) -> Key:
    """The key a transaction holds branch `ref` of table `key` under."""
    return key[0], f"{key[1]}@{ref}"


def head_of(metadata: Any, ref: str | None) -> int | None:
    """The snapshot a ref points at (None: no such ref, or main of a table with no snapshot)."""
    if ref is None or ref == MAIN:
        return metadata.current_snapshot_id
    found = metadata.refs.get(ref)
    return found.snapshot_id if found is not None else None


def at_head(table: Table, ref: str | None) -> Table:
    """`table` with `ref`'s head as its current snapshot and its current schema kept (a branch
    is read with the table's schema): what a scan or a plan of the branch reads."""
    if ref is None or ref == MAIN:
        return table
    from pyiceberg.table import Table as IcebergTable

    metadata = table.metadata.model_copy(update={"current_snapshot_id": head_of(table.metadata, ref)})
    return IcebergTable(table.name(), metadata=metadata, metadata_location=table.metadata_location, io=table.io,
                        catalog=table.catalog)


def pin(engine: Engine, txn: TxnState, key: Key, ref: str) -> Key:
    """Pin branch `ref` of the lake table `key` in `txn` (once: a block keeps reading and writing
    the head it first saw); the key it goes by."""
    branch = ref_key(key, ref)
    if branch not in txn.pins:
        txn.pin(branch, branch_plan(engine, key, ref))
    return branch


def branch_plan(engine: Engine, key: Key, ref: str) -> ReadPlan:
    """Branch `ref` (not main: "t@main" is t itself) of table `key` as it is in the catalog now:
    42704 if the table has no such branch, 42809 if it is a tag."""
    from pyiceberg.table.refs import SnapshotRefType

    shown = f"{key[0]}.{key[1]}"
    engine.refresh({key})
    mounted = engine.read_plan(*key)
    if mounted is None or mounted.table is None:
        refused = engine.refusal(key)
        raise refused if refused is not None else PgError(UNDEFINED_TABLE, f'relation "{shown}" does not exist')
    table: Any = mounted.table
    found = table.metadata.refs.get(ref)
    if found is None:
        known = ", ".join(sorted(table.metadata.refs)) or "none"
        raise PgError(UNDEFINED_OBJECT, f'branch "{ref}" of table "{shown}" does not exist',
                      detail=f"Its branches and tags: {known}.",
                      hint=f"ALTER TABLE {shown} CREATE BRANCH {ref}")
    if found.snapshot_ref_type != SnapshotRefType.BRANCH:
        raise PgError(WRONG_OBJECT_TYPE, f'"{ref}" is a tag of table "{shown}": only a branch can be written',
                      hint=f"Write to a branch: ALTER TABLE {shown} CREATE BRANCH b AS OF VERSION {found.snapshot_id}")
    plan = engine.plan_table(at_head(table, ref))
    # Its own identity (scan sets and per-file scans key on the metadata location): one per head.
    return replace(plan, table=table, ref=ref, snapshot_id=found.snapshot_id,
                   metadata_location=f"{table.metadata_location}#branch-{ref}-{found.snapshot_id}")
