"""A table's metadata tables (`"t$snapshots"` and the rest): Arrow tables from its metadata only.

Trino's names and columns, with the content pyiceberg's `table.inspect` gives; no data file is
opened (the manifest list and manifests are, for $files, $manifests and $partitions). Maps and
structs reach clients as json, as every Arrow map or struct does (pg/types.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pyarrow as pa

if TYPE_CHECKING:
    from pyiceberg.table import Table

_UTC_US = pa.timestamp("us", tz="UTC")


def build(table: Table, which: str) -> pa.Table:
    """Metadata table `which` (one of sql.time_travel.METADATA_TABLES) of `table`."""
    return _BUILDERS[which](table)


def _times(arrow: pa.Table, *names: str) -> pa.Table:
    """Timestamp columns as timestamptz (Trino: timestamp(3) with time zone)."""
    for name in names:
        i = arrow.schema.get_field_index(name)
        arrow = arrow.set_column(i, name, arrow.column(i).cast(_UTC_US))
    return arrow


def _snapshots(table: Table) -> pa.Table:
    arrow = table.inspect.snapshots()
    return _times(arrow.select(["committed_at", "snapshot_id", "parent_id", "operation", "manifest_list", "summary"]),
                  "committed_at")


def _history(table: Table) -> pa.Table:
    arrow = table.inspect.history()
    return _times(arrow.select(["made_current_at", "snapshot_id", "parent_id", "is_current_ancestor"]),
                  "made_current_at")


def _refs(table: Table) -> pa.Table:
    return table.inspect.refs().select(["name", "type", "snapshot_id", "max_reference_age_in_ms",
                                        "min_snapshots_to_keep", "max_snapshot_age_in_ms"])


def _files(table: Table) -> pa.Table:
    return table.inspect.files()


def _manifests(table: Table) -> pa.Table:
    """Trino's $manifests: pyiceberg's lacks the row counts, which each manifest file carries."""
    snapshot = table.current_snapshot()
    manifests = [] if snapshot is None else snapshot.manifests(table.io)
    summaries = pa.list_(pa.struct([("contains_null", pa.bool_()), ("contains_nan", pa.bool_()),
                                    ("lower_bound", pa.string()), ("upper_bound", pa.string())]))
    rows: dict[str, list[Any]] = {name: [] for name in _MANIFEST_COLUMNS}
    spec_types = {spec.spec_id: spec.partition_type(table.schema()) for spec in table.metadata.partition_specs}
    for m in manifests:
        rows["path"].append(m.manifest_path)
        rows["length"].append(m.manifest_length)
        rows["partition_spec_id"].append(m.partition_spec_id)
        rows["added_snapshot_id"].append(m.added_snapshot_id)
        rows["added_data_files_count"].append(m.added_files_count)
        rows["added_rows_count"].append(m.added_rows_count)
        rows["existing_data_files_count"].append(m.existing_files_count)
        rows["existing_rows_count"].append(m.existing_rows_count)
        rows["deleted_data_files_count"].append(m.deleted_files_count)
        rows["deleted_rows_count"].append(m.deleted_rows_count)
        fields = spec_types[m.partition_spec_id].fields if m.partition_spec_id in spec_types else ()
        rows["partition_summaries"].append([
            {"contains_null": s.contains_null, "contains_nan": s.contains_nan,
             "lower_bound": _bound(f, s.lower_bound), "upper_bound": _bound(f, s.upper_bound)}
            for f, s in zip(fields, m.partitions or (), strict=False)])
    types = {"path": pa.string(), "length": pa.int64(), "partition_spec_id": pa.int32(),
             "added_snapshot_id": pa.int64(), "partition_summaries": summaries}
    return pa.table({name: pa.array(values, types.get(name, pa.int32() if name.endswith("files_count")
                                                              else pa.int64()))
                     for name, values in rows.items()})


_MANIFEST_COLUMNS = ("path", "length", "partition_spec_id", "added_snapshot_id", "added_data_files_count",
                     "added_rows_count", "existing_data_files_count", "existing_rows_count",
                     "deleted_data_files_count", "deleted_rows_count", "partition_summaries")


def _bound(field: Any, raw: bytes | None) -> str | None:
    """A partition bound as Trino shows it: the value as text."""
    if raw is None:
        return None
    from pyiceberg.conversions import from_bytes

    try:
        return str(from_bytes(field.field_type, raw))
    except Exception:
        return raw.hex()


def _partitions(table: Table) -> pa.Table:
    arrow = table.inspect.partitions()
    renamed = arrow.rename_columns(["total_size" if n == "total_data_file_size_in_bytes" else n
                                    for n in arrow.column_names])
    keep = ["record_count", "file_count", "total_size"]
    if table.spec().fields:
        keep.insert(0, "partition")
    return renamed.select(keep)


def _metadata_log_entries(table: Table) -> pa.Table:
    arrow = table.inspect.metadata_log_entries()
    return _times(arrow.select(["timestamp", "file", "latest_snapshot_id", "latest_schema_id",
                                "latest_sequence_number"]), "timestamp")


def _properties(table: Table) -> pa.Table:
    props = sorted(table.properties.items())
    return pa.table({"key": pa.array([k for k, _ in props], pa.string()),
                     "value": pa.array([v for _, v in props], pa.string())})


_BUILDERS = {
    "snapshots": _snapshots, "history": _history, "refs": _refs, "files": _files,
    "manifests": _manifests, "partitions": _partitions, "metadata_log_entries": _metadata_log_entries,
    "properties": _properties,
}

