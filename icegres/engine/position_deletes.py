"""Merge-on-read position deletes, applied when a data file is read.

Other engines delete and update Iceberg rows without rewriting data files: Trino always, Spark
and DuckDB's iceberg extension in merge-on-read mode write a position-delete file instead, rows
of (file_path, pos) naming the rows of data files that are gone. pyiceberg's planning already
pairs each data file with the delete files that apply to it (by partition and sequence
number); here each delete file is read once, its positions for each data file collected, and
the data file's scan keeps only the rows whose position in the file is not among them.

The position comes from DataFusion's `file_row_index()`: the row's index in its file, from the
Parquet reader itself, so it stays right under row-group pruning and when a file is split
between partitions. The test is a scalar UDF over each batch of positions: a binary search in
the file's sorted deleted positions (memory per deleted row, not per row of the file).

Equality deletes (rows matching column values) and v3 deletion vectors are not read: a table
that has them is refused (0A000) rather than answered with rows that were deleted.
"""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa

from icegres.engine import damage
from icegres.pg.errors import FEATURE_NOT_SUPPORTED, PgError

if TYPE_CHECKING:
    from datafusion import DataFrame
    from pyiceberg.table import FileScanTask, Table

__all__ = ["Deletes", "live_rows", "read_position_deletes"]

# (delete file paths, sorted deleted positions) of one data file
Deletes = tuple[tuple[str, ...], np.ndarray]

_names = itertools.count()


def read_position_deletes(table: Table, tasks: list[FileScanTask], relation: str) -> dict[str, Deletes]:
    """Data file path -> its deletes, for the tasks that have any (blocking: reads the delete
    files). A delete file that is missing or cannot be decoded raises the PgError
    `damage.classify` gives it; an equality delete or a deletion vector raises 0A000."""
    from pyiceberg.manifest import DataFileContent, FileFormat

    wanted: dict[str, set[str]] = {}  # delete file -> the data files it is paired with
    for task in tasks:
        for delete in task.delete_files:
            if delete.content != DataFileContent.POSITION_DELETES or delete.file_format != FileFormat.PARQUET:
                kind = "equality delete files" if delete.content == DataFileContent.EQUALITY_DELETES \
                    else "deletion vectors"
                raise PgError(
                    FEATURE_NOT_SUPPORTED,
                    f"table {relation} has merge-on-read {kind}, which icegres cannot read yet",
                    hint="rewrite the table's data files (e.g. Spark rewrite_data_files) to apply them",
                )
            wanted.setdefault(delete.file_path, set()).add(task.file.file_path)
    positions: dict[str, list[np.ndarray]] = {}
    for path, data_files in wanted.items():
        try:
            rows = _read(table, path)
        except Exception as exc:
            raise damage.classify(relation, path, exc) from None
        for data_file, pos in _by_data_file(rows, data_files):
            positions.setdefault(data_file, []).append(pos)
    out: dict[str, Deletes] = {}
    for task in tasks:
        if task.delete_files:
            parts = positions.get(task.file.file_path, [])
            merged = np.unique(np.concatenate(parts)) if parts else np.empty(0, np.int64)
            out[task.file.file_path] = (tuple(sorted(d.file_path for d in task.delete_files)), merged)
    return out


def _read(table: Table, path: str) -> pa.Table:
    import pyarrow.parquet as pq

    with table.io.new_input(path).open() as f:
        return pq.read_table(f, columns=["file_path", "pos"])


def _by_data_file(rows: pa.Table, data_files: set[str]) -> list[tuple[str, np.ndarray]]:
    """The positions `rows` (a delete file's) name in each of `data_files`: one grouping pass, as
    one delete file may name thousands of data files (a partition's, as Trino writes them)."""
    grouped = rows.group_by("file_path").aggregate([("pos", "list")])
    out = []
    for path, pos in zip(grouped.column("file_path").to_pylist(), grouped.column("pos_list"), strict=True):
        if path in data_files:
            out.append((path, pos.values.to_numpy(zero_copy_only=False).astype(np.int64, copy=False)))
    return out


def live_rows(frame: DataFrame, deleted: np.ndarray) -> DataFrame:
    """`frame`, a scan of one Parquet file, without the rows at the `deleted` positions (sorted).
    `frame` must be the scan itself: `file_row_index()` is a column of the reader."""
    from datafusion import functions, udf

    if not len(deleted):
        return frame
    last = len(deleted) - 1

    def live(rows: pa.Array) -> pa.Array:
        at = rows.to_numpy(zero_copy_only=False)
        i = np.minimum(np.searchsorted(deleted, at), last)
        return pa.array(deleted[i] != at)

    # A name of its own per file: a union of several files' scans holds several of these.
    test = udf(live, [pa.int64()], pa.bool_(), "immutable", name=f"icegres_live_row_{next(_names)}")
    return frame.filter(test(functions.file_row_index()))

