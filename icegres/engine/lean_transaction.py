"""A pyiceberg Transaction that does not deep-copy the table metadata every time it is looked at.

pyiceberg's `Transaction.table_metadata` re-applies the staged updates to the base metadata and
returns `model_copy(deep=True)` of the result, and a snapshot producer reads that property a dozen
times per commit. The metadata holds every snapshot and log entry of the table, so one buffered
flush of one row spent most of its CPU (and the GIL, which the front door needs) deep-copying a
history that grows with every flush (measured with py-spy: 55% of the flush thread's samples).

The updates pyiceberg applies are functional (each returns `model_copy(update=...)` with new
containers; nothing mutates its input), and nothing in icegres or in the snapshot producers mutates
the metadata they read, so the copy buys nothing here. This transaction applies the staged updates
once per distinct update tuple, without the copy. What is committed is unchanged: the catalog
builds the metadata it writes from the base and the updates itself.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pyiceberg.table import Transaction
from pyiceberg.table.snapshots import Operation, Summary
from pyiceberg.table.update import _apply_table_update, _TableMetadataUpdateContext
from pyiceberg.table.update.snapshot import _OverwriteFiles
from pyiceberg.typedef import EMPTY_DICT
from pyiceberg.utils.datetime import datetime_to_millis


class LeanTransaction(Transaction):
    _lean: tuple[tuple[Any, ...], Any] | None = None  # (the updates applied, the metadata they give)

    @property
    def table_metadata(self) -> Any:
        base = self._table.metadata
        updates = self._updates
        if not updates:
            return base
        cached = self._lean
        if cached is not None and cached[0] is updates:
            return cached[1]
        metadata = _applied(base, updates, None)
        self._lean = (updates, metadata)  # holding the tuple keeps its identity from being reused
        return metadata


def _applied(base: Any, updates: tuple[Any, ...], metadata_location: str | None) -> Any:
    """pyiceberg's `update_table_metadata` minus its final deep copy: the same update functions,
    the same metadata-log rule (given the base's location) and last-updated rule, the same checks."""
    from pyiceberg.table.update import _update_table_metadata_log

    context = _TableMetadataUpdateContext()
    metadata = base
    for update in updates:
        metadata = _apply_table_update(update, metadata, context)
    if context.has_changes():
        if metadata_location:
            metadata = _update_table_metadata_log(metadata, metadata_location, base.last_updated_ms)
        if base.last_updated_ms == metadata.last_updated_ms:
            metadata = metadata.model_copy(update={"last_updated_ms": datetime_to_millis(datetime.now().astimezone())})
    metadata.spec().check_compatible(metadata.schema())
    metadata.sort_order().check_compatible(metadata.schema())
    return metadata


def transaction(table: Any) -> LeanTransaction:
    """`table.transaction()`, lean."""
    return LeanTransaction(table)


def stage_update(catalog: Any, current: Any, identifier: tuple[str, ...], requirements: tuple[Any, ...],
                 updates: tuple[Any, ...]) -> Any:
    """pyiceberg's `MetastoreCatalog._update_and_stage_table` for an existing table, without its
    deep copy: validate the requirements on `current`, apply the updates, name the next metadata
    file. The metadata written is built exactly as pyiceberg builds it (same update functions,
    same metadata-log and last-updated rules)."""
    from pyiceberg.table import StagedTable
    from pyiceberg.table.locations import load_location_provider

    for requirement in requirements:
        requirement.validate(current.metadata)
    metadata = _applied(current.metadata, updates, current.metadata_location)
    version = catalog._parse_metadata_version(current.metadata_location) + 1
    location = load_location_provider(metadata.location, metadata.properties).new_table_metadata_file_location(version)
    return StagedTable(identifier=identifier, metadata=metadata, metadata_location=location,
                       io=catalog._load_file_io(properties=metadata.properties, location=location), catalog=catalog)


def add_snapshot(tx: LeanTransaction, write: Any, properties: dict[str, str] | None = None,
                 branch: str | None = None) -> None:
    """The snapshot of a staged write (txn.StagedWrite) on `tx`, on `branch` (None: main): a fast
    append of its files, or an overwrite that removes its removed files and adds its added ones
    (a merge-on-read write, with delete files: delete_commit.py)."""
    if write.delete_files:
        from icegres.engine import delete_commit

        delete_commit.add_snapshot(tx, write, properties or {}, branch)
        return
    producer = tx.update_snapshot(snapshot_properties=properties or {}, branch=branch or "main")
    if write.replaces:
        with ReplaceFiles(tx, properties or {}, branch or "main") as rewrite:
            for data_file in write.removed.values():
                rewrite.delete_data_file(data_file)
            for data_file in write.added.values():
                rewrite.append_data_file(data_file)
    elif write.is_append:
        with producer.fast_append() as append:
            for data_file in write.added.values():
                append.append_data_file(data_file)
    else:
        with producer.overwrite() as overwrite:
            for data_file in write.removed.values():
                overwrite.delete_data_file(data_file)
            for data_file in write.added.values():
                overwrite.append_data_file(data_file)


class ReplaceFiles(_OverwriteFiles):
    """pyiceberg's overwrite producer, summarised as Iceberg's `replace` operation: the same rows
    in other files (a compaction). pyiceberg 0.12 has no rewrite API, and its summary totals only
    know append, overwrite and delete; a replace's totals are an overwrite's, under its own name."""

    def __init__(self, tx: LeanTransaction, properties: dict[str, str], branch: str) -> None:
        super().__init__(operation=Operation.OVERWRITE, transaction=tx, io=tx._table.io,
                         snapshot_properties=properties, branch=branch)

    def _summary(self, snapshot_properties: dict[str, str] = EMPTY_DICT) -> Summary:
        summary = super()._summary(snapshot_properties)
        return Summary(Operation.REPLACE, **summary.additional_properties)
