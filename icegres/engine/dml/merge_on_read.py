"""Merge-on-read DELETE, UPDATE and MERGE: the rows' positions deleted, no data file rewritten.

Opt-in per table and statement kind by Iceberg's own properties, `write.delete.mode`,
`write.update.mode` and `write.merge.mode` = `merge-on-read` (default copy-on-write, as
Iceberg's): every later read of the table pays for the deletes (each delete file read, each
data file's rows tested against its deleted positions) until the files are rewritten, so the
table's owner chooses, as in Spark.

The query that finds the matching rows also gives their positions: each per-file scan of the
target carries `file_row_index()` (POS_COLUMN), the Parquet reader's own row position, beside
its path (`target.with_file_column`). Only a scan straight over the file can: a table with a
file whose columns need mapping (written before a rename or ADD COLUMN), a branch, a temporary
table, or a transaction that altered the table falls back to copy-on-write for the whole
statement (`chosen`). The positions are staged (`StagedWrite.deleted`) and the transaction's view
applies them, so a later statement of the block sees the deletes; each statement writes the
transaction's position-delete files anew (one per partition) with every position deleted so far
(engine/delete_commit.py), so a COMMIT publishes one per table and partition. Rows of data files
the transaction wrote itself (not in the catalog, so no delete file can name them) are removed by
writing those files again.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from icegres.engine.dml.target import POS_COLUMN, write_files

if TYPE_CHECKING:
    from icegres.engine.mounts import ReadPlan
    from icegres.engine.txn import Key, TxnState

MERGE_ON_READ = "merge-on-read"
PROPERTIES = {"delete": "write.delete.mode", "update": "write.update.mode", "merge": "write.merge.mode"}


def chosen(txn: TxnState, key: Key, plan: ReadPlan, kind: str) -> bool:
    """Whether a `kind` ("delete", "update", "merge") statement on table `key` writes by
    position: the table asks for it and every file of it can be scanned with positions."""
    table: Any = plan.table
    if table is None or key[0] == "pg_temp" or plan.ref is not None:
        return False
    if table.metadata.properties.get(PROPERTIES[kind], "copy-on-write").lower() != MERGE_ON_READ:
        return False
    if table.metadata.format_version < 2:
        return False  # (delete files are v2's)
    write = txn.writes.get(key)
    if write is not None and write.metadata_change is not None:
        return False  # (the block's ALTERs give the files it wrote another shape)
    return all(f.matches_schema for f in plan.files)


def positions_of(found: pa.Table, file_column: str) -> dict[str, np.ndarray]:
    """Data file path -> the sorted positions `found` (rows with the file and POS_COLUMN) names."""
    out: dict[str, np.ndarray] = {}
    if not found.num_rows:
        return out
    paths = found.column(file_column).to_numpy(zero_copy_only=False)
    pos = found.column(POS_COLUMN).to_numpy(zero_copy_only=False).astype(np.int64, copy=False)
    order = np.lexsort((pos, paths))
    paths, pos = paths[order], pos[order]
    starts = np.flatnonzero(np.r_[True, paths[1:] != paths[:-1]])
    for start, end in zip(starts, [*starts[1:], len(paths)], strict=True):
        out[str(paths[start])] = np.unique(pos[start:end])
    return out


def stage(txn: TxnState, key: Key, positions: dict[str, np.ndarray], rows: pa.Table | None) -> None:
    """Stage the deletion of the rows at `positions` and the append of `rows` (new row versions,
    inserted rows): the transaction's delete files written anew. Blocking: writes files."""
    from icegres.engine.delete_commit import write_position_deletes

    write = txn.write_for(key)
    own = {p: pos for p, pos in positions.items() if p in write.added}
    if own:
        # Rows of files this transaction wrote itself (not in the catalog yet, so no delete file
        # can name them): those files are written again without the rows.
        kept = _without(write.base.table, write.target, own)
        write, orphans = write.rewrite(set(own), write_files(write.target, kept), 0)
        txn.stage(write, orphans)
        positions = {p: pos for p, pos in positions.items() if p not in own}
    deleted = dict(write.deleted)
    for path, pos in positions.items():
        deleted[path] = pos if path not in deleted else np.union1d(deleted[path], pos)
    # The delete files are written while the new rows are (each a PUT on an object store).
    from pyiceberg.utils.concurrent import ExecutorFactory

    pending = ExecutorFactory.get_or_create().submit(write_position_deletes, write.base.table, deleted,
                                                     write.base.data_files) if positions else None
    try:
        new_files = write_files(write.target, rows) if rows is not None and rows.num_rows else {}
    finally:
        delete_files = pending.result() if pending is not None else dict(write.delete_files)
    staged, orphans = write.deleted_rows(positions, delete_files, new_files, rows.num_rows if rows is not None else 0)
    txn.stage(staged, orphans)


def _without(table: Any, target: ReadPlan, positions: dict[str, np.ndarray]) -> pa.Table:
    """The rows of the staged data files `positions` names, but those at its positions."""
    import pyarrow.parquet as pq

    from icegres.engine.assign import write_schema

    schema = write_schema(target)
    parts = []
    for path, pos in positions.items():
        with table.io.new_input(path).open() as f:
            rows = pq.read_table(f)
        keep = np.ones(rows.num_rows, dtype=bool)
        keep[pos] = False
        parts.append(rows.filter(pa.array(keep)).select(schema.names).cast(schema))
    return pa.concat_tables(parts)
