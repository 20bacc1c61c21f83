"""Merge-on-read writes: position-delete files, and the snapshot that publishes them.

A table whose `write.delete.mode` / `write.update.mode` / `write.merge.mode` is `merge-on-read`
(Iceberg's properties, read by dml/merge_on_read.py) has its deleted and updated rows named in a
position-delete file instead of its data files rewritten. The file is the Iceberg v2 spec's:
Parquet with `file_path` (string, field id 2147483546) and `pos` (long, field id 2147483545),
sorted by both, with lower and upper bounds on each so that readers skip it for data files it
cannot name. A delete file applies only to data files of its partition, so rows of several
partitions get one file per partition.

pyiceberg 0.12 reads delete files but its API writes none: the snapshot is built on its
internals — a `_SnapshotProducer` that keeps every manifest of the parent (a delete removes no
file), writes a data manifest for the files added (updated rows' new versions, a MERGE's inserted
rows) and a DELETES manifest for the delete files. Its summary counts both (pyiceberg's collector
knows delete files: added-delete-files, added-position-delete-files, added-position-deletes).
"""

from __future__ import annotations

import uuid
from typing import Any

import numpy as np
import pyarrow as pa
from pyiceberg.manifest import (
    DataFile,
    DataFileContent,
    FileFormat,
    ManifestContent,
    ManifestEntry,
    ManifestEntryStatus,
    ManifestFile,
    ManifestWriterV2,
)
from pyiceberg.table.snapshots import Operation
from pyiceberg.table.update.snapshot import _FastAppendFiles, _OverwriteFiles

__all__ = ["FILE_PATH_ID", "POS_ID", "add_snapshot", "write_position_deletes"]

FILE_PATH_ID = 2147483546
POS_ID = 2147483545

_SCHEMA = pa.schema([
    pa.field("file_path", pa.string(), nullable=False, metadata={b"PARQUET:field_id": str(FILE_PATH_ID).encode()}),
    pa.field("pos", pa.int64(), nullable=False, metadata={b"PARQUET:field_id": str(POS_ID).encode()}),
])


def write_position_deletes(table: Any, deleted: dict[str, np.ndarray], data_files: dict[str, Any]) -> dict[str, DataFile]:
    """Write the position-delete files saying that the rows at `deleted` (data file path -> sorted
    positions) are gone: one per partition of the data files (`data_files`: path -> DataFile).
    Returns path -> DataFile (content POSITION_DELETES). Blocking: writes to the table's storage."""
    groups: dict[tuple[int, Any], list[str]] = {}
    for path in sorted(deleted):
        if len(deleted[path]):
            data_file = data_files[path]
            groups.setdefault((data_file.spec_id, data_file.partition), []).append(path)
    out = {}
    for (spec_id, partition), paths in groups.items():
        delete_file = _write_one(table, paths, deleted, spec_id, partition)
        out[delete_file.file_path] = delete_file
    return out


def _write_one(table: Any, paths: list[str], deleted: dict[str, np.ndarray], spec_id: int, partition: Any) -> DataFile:
    import pyarrow.parquet as pq
    from pyiceberg.conversions import to_bytes
    from pyiceberg.types import LongType, StringType

    # (paths sorted, each file's positions sorted: the spec's order)
    names = pa.array(np.repeat(np.array(paths, dtype=object), [len(deleted[p]) for p in paths]), pa.string())
    pos = pa.array(np.concatenate([deleted[p] for p in paths]).astype(np.int64, copy=False))
    rows = pa.table([names, pos], schema=_SCHEMA)
    from icegres.engine import staging

    location = table.location_provider().new_data_location(f"{uuid.uuid4()}-deletes.parquet")
    stager = staging.current() if staging.stageable(table) else None
    if stager is not None:  # recorded before it exists (engine/staging.py)
        stager.announce(location, staging.table_name(table), str(table.metadata.table_uuid), table.io)
    out = table.io.new_output(location)
    try:
        with out.create(overwrite=True) as f:
            pq.write_table(rows, f, compression="zstd")
    finally:
        if stager is not None:
            stager.finished(location)
    size = len(out)
    lower = {FILE_PATH_ID: to_bytes(StringType(), paths[0]), POS_ID: to_bytes(LongType(), int(np.min(pos)))}
    upper = {FILE_PATH_ID: to_bytes(StringType(), paths[-1]), POS_ID: to_bytes(LongType(), int(np.max(pos)))}
    delete_file = DataFile.from_args(
        content=DataFileContent.POSITION_DELETES,
        file_path=location,
        file_format=FileFormat.PARQUET,
        partition=partition,
        record_count=rows.num_rows,
        file_size_in_bytes=size,
        column_sizes=None,
        value_counts={FILE_PATH_ID: rows.num_rows, POS_ID: rows.num_rows},
        null_value_counts={FILE_PATH_ID: 0, POS_ID: 0},
        nan_value_counts=None,
        lower_bounds=lower,
        upper_bounds=upper,
        key_metadata=None,
        split_offsets=None,
        equality_ids=None,
        sort_order_id=None,
    )
    delete_file.spec_id = spec_id  # (not a field of the manifest entry: from_args drops it)
    return delete_file


class _DeleteManifestWriter(ManifestWriterV2):
    """pyiceberg's v2 manifest writer, for a manifest of delete files (its own says "data")."""

    def content(self) -> ManifestContent:
        return ManifestContent.DELETES

    @property
    def _meta(self) -> dict[str, str]:
        return {**super()._meta, "content": "deletes"}


class _WithDeleteFiles:
    """A snapshot producer that adds delete files (`_delete_files`) beside its data files."""

    _delete_files: list[DataFile] = []

    def _manifests(self) -> list[ManifestFile]:
        from pyiceberg.utils.concurrent import ExecutorFactory

        by_spec: dict[int, list[DataFile]] = {}
        for f in self._delete_files:
            by_spec.setdefault(f.spec_id, []).append(f)
        # Written while pyiceberg writes the data manifest (each is a PUT on an object store).
        executor = ExecutorFactory.get_or_create()
        pending = [executor.submit(self._delete_manifest, spec_id, files) for spec_id, files in sorted(by_spec.items())]
        manifests = super()._manifests()  # type: ignore[misc]  # the data files added, the parent's kept
        return [*manifests, *(p.result() for p in pending)]

    def _delete_manifest(self, spec_id: int, files: list[DataFile]) -> ManifestFile:
        producer: Any = self
        metadata = producer._transaction.table_metadata
        writer = _DeleteManifestWriter(metadata.specs()[spec_id], producer.schema(), producer.new_manifest_output(),
                                       producer._snapshot_id, producer._compression)
        with writer:
            for f in files:
                writer.add_entry(ManifestEntry.from_args(status=ManifestEntryStatus.ADDED,
                                                         snapshot_id=producer._snapshot_id, sequence_number=None,
                                                         file_sequence_number=None, data_file=f))
        return writer.to_manifest_file()

    def _summary(self, snapshot_properties: Any = None) -> Any:
        # pyiceberg's collector counts what `_added_data_files` holds: the delete files too, for
        # the summary only (the data manifest was written before they were put there).
        producer: Any = self
        added = producer._added_data_files
        producer._added_data_files = [*added, *self._delete_files]
        try:
            return super()._summary(snapshot_properties or {})  # type: ignore[misc]
        finally:
            producer._added_data_files = added


class _MergeOnRead(_WithDeleteFiles, _FastAppendFiles):
    """Keeps every manifest of the parent (no data file is removed), like a fast append."""


class _OverwriteMergeOnRead(_WithDeleteFiles, _OverwriteFiles):
    """A transaction that both rewrote files (a statement that fell back to copy-on-write) and
    deleted rows by position: pyiceberg's overwrite, with the delete files besides."""


def add_snapshot(tx: Any, write: Any, properties: dict[str, str], branch: str | None) -> None:
    """The snapshot of a merge-on-read write (a txn.StagedWrite with delete files) on `tx`: operation "overwrite" when it adds (or
    removes) data files, "delete" when it only deletes rows."""
    operation = Operation.OVERWRITE if write.added or write.removed else Operation.DELETE
    kind = _OverwriteMergeOnRead if write.removed else _MergeOnRead
    producer = kind(operation=operation, transaction=tx, io=tx._table.io, branch=branch or "main",
                    snapshot_properties=properties)
    producer._delete_files = list(write.delete_files.values())
    with producer:
        for data_file in write.removed.values():
            producer.delete_data_file(data_file)
        for data_file in write.added.values():
            producer.append_data_file(data_file)
