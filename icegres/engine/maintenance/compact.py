"""Compaction: Spark's `rewrite_data_files` (bin-pack, or sort), Trino's `optimize`.

A table written by many small commits holds as many small files, and every scan pays per file
(planning, opening, footers). Compaction reads the small files of each partition and writes their
rows again as files of the target size, in ONE Iceberg `replace` snapshot: the same rows, other
files. Earlier snapshots still list the old files, so time travel is untouched (until expiry).

What is rewritten, as Spark decides it:
- only files smaller than `min_file_size_bytes` (default 75% of the target), unless `rewrite_all`;
- per partition (spec and partition values): files of two partitions never share an output file;
- candidates are bin-packed into groups of at most the target size, and a group is rewritten only
  if it has at least `min_input_files` files (default 5), unless `rewrite_all`.
The target is `target_file_size_bytes`, else the table's `write.target-file-size-bytes`, else
512 MiB. With `sort`, a group's rows are written in the table's sort order (CREATE INDEX gives a
table one: ddl_index.py) or the order given, so each output file has tight column bounds.

Concurrency (first committer wins, the user's write never loses to compaction): the replace is
published through the commit machine as a copy-on-write overwrite of the rewritten files. A
commit that landed first and removed or rewrote any of them (an UPDATE, a DELETE, another
compaction) makes the machine abort the compaction with 40001 and delete what it wrote: nothing
changes. A commit that only added files (an INSERT) is rebased onto, and both land. A commit that
added merge-on-read delete files to a rewritten file is a conflict too (its deletes would be
lost): the machine's world counts such a file as changed (`LakeWorld.inspect`).

Delete files: position deletes another engine wrote are applied (pyiceberg's reader reads the
group), and a file that has any is always rewritten, whatever its size. The delete files stay
listed, dangling: they name files no snapshot from here on has, and the new files' sequence
number is above theirs, so they apply to nothing. Equality deletes and deletion vectors, which
icegres cannot read (position_deletes.py), make it refuse the table with 0A000.

Every function here blocks (Parquet reads and writes, catalog calls): run it in a worker thread.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from icegres.pg import errors as E
from icegres.pg.errors import PgError

if TYPE_CHECKING:
    import pyarrow as pa
    from pyiceberg.table import Table

    from icegres.engine.catalog import Lakehouse

log = logging.getLogger("icegres.maintain")

TARGET_PROPERTY = "write.target-file-size-bytes"
DEFAULT_TARGET_FILE_SIZE_BYTES = 512 * 1024 * 1024
DEFAULT_MIN_INPUT_FILES = 5
MIN_FILE_RATIO = 0.75  # Spark's min-file-size-bytes default: 75% of the target


@dataclass(frozen=True)
class SortKey:
    column: str
    descending: bool = False
    nulls_first: bool = False  # Iceberg's default: NULLS FIRST for ASC, NULLS LAST for DESC


@dataclass(frozen=True)
class CompactOptions:
    """What to rewrite; None: the table's property or Spark's default."""

    target_file_size_bytes: int | None = None
    min_file_size_bytes: int | None = None
    min_input_files: int = DEFAULT_MIN_INPUT_FILES
    rewrite_all: bool = False
    sort: bool = False
    sort_order: tuple[SortKey, ...] | None = None  # None: the table's sort order (with `sort`)

    def __post_init__(self) -> None:
        for name in ("target_file_size_bytes", "min_file_size_bytes"):
            value = getattr(self, name)
            if value is not None and value <= 0:
                raise PgError(E.INVALID_PARAMETER_VALUE, f"{name.replace('_', '-')} must be positive, not {value}")
        if self.min_input_files < 1:
            raise PgError(E.INVALID_PARAMETER_VALUE, f"min-input-files must be at least 1, not {self.min_input_files}")

    def target_bytes(self, properties: dict[str, str]) -> int:
        if self.target_file_size_bytes is not None:
            return self.target_file_size_bytes
        try:
            return max(1, int(properties.get(TARGET_PROPERTY, DEFAULT_TARGET_FILE_SIZE_BYTES)))
        except ValueError:
            return DEFAULT_TARGET_FILE_SIZE_BYTES

    def min_bytes(self, target: int) -> int:
        return self.min_file_size_bytes if self.min_file_size_bytes is not None else int(target * MIN_FILE_RATIO)


@dataclass(frozen=True)
class FileGroup:
    """Files of one partition rewritten together into files of the target size."""

    partition: str  # spec id and partition values, for progress and reports
    tasks: tuple[Any, ...]  # pyiceberg FileScanTasks

    @property
    def input_bytes(self) -> int:
        return sum(t.file.file_size_in_bytes for t in self.tasks)


@dataclass(frozen=True)
class CompactPlan:
    snapshot_id: int | None
    target_file_size_bytes: int
    min_file_size_bytes: int
    data_files: int  # of the snapshot, for reports
    groups: tuple[FileGroup, ...]

    @property
    def input_files(self) -> int:
        return sum(len(g.tasks) for g in self.groups)


@dataclass(frozen=True)
class CompactResult:
    """Spark's result row, plus what a report needs."""

    rewritten_data_files_count: int = 0
    added_data_files_count: int = 0
    rewritten_bytes_count: int = 0
    groups: int = 0
    data_files_before: int = 0
    snapshot_id: int | None = None  # the replace snapshot (None: nothing to rewrite)

    def as_dict(self) -> dict[str, Any]:
        return {"rewritten_data_files_count": self.rewritten_data_files_count,
                "added_data_files_count": self.added_data_files_count,
                "rewritten_bytes_count": self.rewritten_bytes_count,
                "groups": self.groups, "data_files_before": self.data_files_before,
                "snapshot_id": self.snapshot_id}

    def row(self) -> pa.Table:
        """Spark's result row set: rewritten_data_files_count, added_data_files_count,
        rewritten_bytes_count, and failed_data_files_count (always 0: one commit or none)."""
        import pyarrow as pa

        values = (self.rewritten_data_files_count, self.added_data_files_count, self.rewritten_bytes_count, 0)
        return pa.table([pa.array([v], f.type) for v, f in zip(values, result_schema(), strict=True)],
                        schema=result_schema())


def result_schema() -> pa.Schema:
    import pyarrow as pa

    return pa.schema([("rewritten_data_files_count", pa.int32()), ("added_data_files_count", pa.int32()),
                      ("rewritten_bytes_count", pa.int64()), ("failed_data_files_count", pa.int32())])


# Called after each group is written: (groups done, groups in all, the group, files it wrote).
Progress = Callable[[int, int, FileGroup, int], None]


# --- planning ---------------------------------------------------------------------------------


def plan_compaction(table: Table, options: CompactOptions, display: str) -> CompactPlan:
    """The groups of files `options` rewrites in the table's current snapshot (reads manifests)."""
    from pyiceberg.utils.bin_packing import ListPacker

    target = options.target_bytes(table.metadata.properties)
    small = options.min_bytes(target)
    snapshot = table.metadata.current_snapshot()
    if snapshot is None:
        return CompactPlan(None, target, small, 0, ())
    tasks = list(table.scan().plan_files())
    refuse_unreadable_deletes(tasks, display)
    by_partition: dict[tuple[int, tuple[Any, ...]], list[Any]] = {}
    # Oldest commit first (a fast append lists its manifest first): rows keep the order they were
    # written in, so a table written in key or time order keeps tight bounds per output file.
    for task in reversed(tasks):
        # A file with position deletes is always rewritten: the rewrite applies them.
        if options.rewrite_all or task.delete_files or task.file.file_size_in_bytes < small:
            by_partition.setdefault(_partition_key(task.file), []).append(task)
    groups = []
    packer: ListPacker[Any] = ListPacker(target_weight=target, lookback=1, largest_bin_first=False)
    for (spec_id, values), candidates in sorted(by_partition.items(), key=lambda kv: repr(kv[0])):
        for packed in packer.pack(candidates, lambda t: t.file.file_size_in_bytes):
            if (len(packed) >= options.min_input_files or (options.rewrite_all and packed)
                    or any(t.delete_files for t in packed)):
                shown = f"spec {spec_id} {values}" if values else "unpartitioned"
                groups.append(FileGroup(shown, tuple(packed)))
    return CompactPlan(snapshot.snapshot_id, target, small, len(tasks), tuple(groups))


def refuse_unreadable_deletes(tasks: list[Any], display: str) -> None:
    """0A000 for a table with equality deletes or deletion vectors, which icegres cannot apply
    (as its mount refuses such a table: position_deletes.py); position deletes are applied."""
    from pyiceberg.manifest import DataFileContent, FileFormat

    for task in tasks:
        for delete in task.delete_files:
            if delete.content != DataFileContent.POSITION_DELETES or delete.file_format != FileFormat.PARQUET:
                kind = "equality delete files" if delete.content == DataFileContent.EQUALITY_DELETES \
                    else "deletion vectors"
                raise PgError(E.FEATURE_NOT_SUPPORTED,
                              f'table "{display}" has merge-on-read {kind}, which icegres cannot apply yet',
                              detail="Compacting it without them would bring the rows they delete back.",
                              hint="Rewrite its data files with an engine that applies them (Spark's "
                                   "rewrite_data_files, Trino's optimize), then compact here.")


def _partition_key(data_file: Any) -> tuple[int, tuple[Any, ...]]:
    record = data_file.partition
    values = tuple(record[i] for i in range(len(record))) if record is not None else ()
    return data_file.spec_id, values


# --- rewriting --------------------------------------------------------------------------------


def sort_keys(table: Table, options: CompactOptions, display: str) -> tuple[SortKey, ...]:
    """The order a sorted compaction writes rows in: the one given, else the table's sort order
    (identity fields only); 22023 when there is none, 0A000 for a transform icegres cannot sort by."""
    if not options.sort and options.sort_order is None:
        return ()
    schema = table.schema()
    if options.sort_order is not None:
        columns = {f.name.lower() for f in schema.fields}
        for key in options.sort_order:
            if key.column.lower() not in columns:
                raise PgError(E.UNDEFINED_COLUMN, f'column "{key.column}" of relation "{display}" does not exist')
        return options.sort_order
    order = table.sort_order()
    if order.is_unsorted:
        raise PgError(E.INVALID_PARAMETER_VALUE, f'table "{display}" has no sort order to sort by',
                      hint="CREATE INDEX on the columns gives it one; or name them: sort_order => 'a, b DESC'.")
    keys = []
    for field in order.fields:
        if str(field.transform) != "identity":
            raise PgError(E.FEATURE_NOT_SUPPORTED,
                          f'cannot sort table "{display}" by {field.transform} of a column',
                          hint="Only identity sort fields are supported; name the columns with sort_order.")
        keys.append(SortKey(schema.find_column_name(field.source_id) or "",
                            descending=field.direction.value == "desc",
                            nulls_first=field.null_order.value == "nulls-first"))
    return tuple(keys)


def parse_sort_order(text: str) -> tuple[SortKey, ...]:
    """Spark's sort_order argument: `a, b DESC NULLS LAST` (22023 for what does not read so)."""
    keys = []
    for part in text.split(","):
        words = part.split()
        if not words:
            raise PgError(E.INVALID_PARAMETER_VALUE, f"sort_order {text!r} has an empty column")
        column, rest = words[0].strip('"'), [w.upper() for w in words[1:]]
        descending = False
        if rest and rest[0] in ("ASC", "DESC"):
            descending = rest.pop(0) == "DESC"
        nulls_first = not descending
        if rest[:1] == ["NULLS"] and len(rest) == 2 and rest[1] in ("FIRST", "LAST"):
            nulls_first, rest = rest[1] == "FIRST", []
        if rest:
            raise PgError(E.INVALID_PARAMETER_VALUE, f"cannot read sort_order {text!r}",
                          hint="A list of columns, each maybe followed by ASC or DESC and NULLS FIRST or LAST.")
        keys.append(SortKey(column, descending, nulls_first))
    return tuple(keys)


def read_group(table: Table, group: FileGroup) -> pa.Table:
    """The rows of a group's files under the table's current schema (columns matched by field id,
    as pyiceberg's own reader matches them: renamed and added columns read right)."""
    import pyarrow as pa
    from pyiceberg.expressions import AlwaysTrue
    from pyiceberg.io.pyarrow import ArrowScan, schema_to_pyarrow

    scan = ArrowScan(table.metadata, table.io, table.schema(), AlwaysTrue())
    batches = list(scan.to_record_batches(list(group.tasks)))
    if not batches:
        return schema_to_pyarrow(table.schema()).empty_table()
    # Files of other writers decode to other Arrow types for one column (DuckDB's strings come
    # back large_string, pyarrow's string): promoted to one type per column.
    return pa.concat_tables([pa.Table.from_batches([b]) for b in batches], promote_options="permissive")


def sorted_by(rows: pa.Table, keys: tuple[SortKey, ...]) -> pa.Table:
    import pyarrow.compute as pc

    if not keys or rows.num_rows < 2:
        return rows
    names = {n.lower(): n for n in rows.column_names}
    order = [(names[k.column.lower()], "descending" if k.descending else "ascending",
              "at_start" if k.nulls_first else "at_end") for k in keys]
    return rows.take(pc.sort_indices(rows, sort_keys=order))


def write_rows(table: Table, rows: pa.Table, target_bytes: int, *, presorted: bool = False) -> dict[str, Any]:
    """Write rows as data files of about `target_bytes` each (partitioned as the table's current
    spec says); path -> DataFile. `presorted`: the rows are in the order asked for, which icegres's
    writer must not re-sort by the table's index columns (parquet_files.sorted_rows)."""
    from pyiceberg.io.pyarrow import _dataframe_to_data_files

    from icegres.engine.parquet_files import SORT_PROPERTY

    if rows.num_rows == 0:
        return {}
    properties = {**table.metadata.properties, TARGET_PROPERTY: str(target_bytes)}
    if presorted:
        properties.pop(SORT_PROPERTY, None)
    metadata = table.metadata.model_copy(update={"properties": properties})
    files = list(_dataframe_to_data_files(table_metadata=metadata, df=rows, io=table.io))
    for f in files:
        f.spec_id = table.metadata.default_spec_id  # (read DataFiles carry theirs; a delete needs it)
    return {f.file_path: f for f in files}


def operations_since(metadata: Any, base: int | None) -> list[str] | None:
    """The operations of main's snapshots after `base`, newest first; None when `base` is not
    in main's history any more (a rollback, an expiry)."""
    out: list[str] = []
    snapshot = metadata.current_snapshot()
    while snapshot is not None and snapshot.snapshot_id != base:
        out.append(snapshot.summary.operation.value if snapshot.summary else "")
        snapshot = metadata.snapshot_by_id(snapshot.parent_snapshot_id) if snapshot.parent_snapshot_id else None
    return out if snapshot is not None else None


# --- the whole operation ----------------------------------------------------------------------


def compact(lakehouse: Lakehouse, key: tuple[str, str], options: CompactOptions,
            progress: Progress | None = None, before_commit: Callable[[], None] | None = None,
            snapshot_properties: dict[str, str] | None = None) -> CompactResult:
    """Compact the table's main branch as `options` say: one `replace` snapshot with the same rows
    in fewer files, or nothing when no group qualifies. PgError 40001 if a concurrent commit
    changed a file it rewrote (nothing changes then), 0A000 for a table with equality deletes.
    `before_commit` is called once the files are written and before the commit; what it raises
    stops the compaction there, its files deleted (automatic maintenance's lease check).
    `snapshot_properties` go into the replace snapshot's summary (the lease's epoch)."""
    display = f"{key[0]}.{key[1]}"
    table = lakehouse.load_table(*key)
    plan = plan_compaction(table, options, display)
    keys = sort_keys(table, options, display)
    if not plan.groups:
        return CompactResult(data_files_before=plan.data_files)
    added: dict[str, Any] = {}
    try:
        for index, group in enumerate(plan.groups, start=1):
            written = write_rows(table, sorted_by(read_group(table, group), keys), plan.target_file_size_bytes,
                                 presorted=bool(keys))
            added.update(written)
            if progress is not None:
                progress(index, len(plan.groups), group, len(written))
        if before_commit is not None:
            before_commit()
    except BaseException:
        _forget(table, added)
        raise
    # From here the commit machine owns the files: it deletes them after an abort and keeps them
    # when the outcome is unknown (a landed replace may reference them).
    snapshot_id = _commit(lakehouse, key, table, plan, added, snapshot_properties or {})
    return CompactResult(plan.input_files, len(added), sum(g.input_bytes for g in plan.groups),
                         len(plan.groups), plan.data_files, snapshot_id)


def _forget(table: Any, added: dict[str, Any]) -> None:
    """Delete what a compaction that failed before committing wrote (best effort)."""
    for path in added:
        try:
            table.io.delete(path)
        except Exception:
            log.warning("could not delete compacted file %s", path, exc_info=True)


def _commit(lakehouse: Lakehouse, key: tuple[str, str], table: Any, plan: CompactPlan,
            added: dict[str, Any], snapshot_properties: dict[str, str]) -> int | None:
    """Publish the replace through the commit machine; the new snapshot's id."""
    from types import MappingProxyType

    import pyarrow as pa
    import trio

    from icegres.engine.lake_world import LakeWorld, commit_request
    from icegres.engine.mounts import FileRead, ReadPlan
    from icegres.engine.txn import StagedWrite, TxnState
    from icegres.machines.commit import Config
    from icegres.machines.drivers.commit import run_commit

    meta = table.metadata
    tasks = [t for g in plan.groups for t in g.tasks]
    # The delete files each rewritten file had as read: one another engine adds to it before the
    # replace lands makes it a changed file, and the replace a conflict (LakeWorld.inspect).
    read = tuple(FileRead(t.file.file_path, (), tuple(sorted(d.file_path for d in t.delete_files))) for t in tasks)
    base = ReadPlan(metadata_location=table.metadata_location, schema=pa.schema([]), field_ids=(), files=read,
                    snapshot_id=plan.snapshot_id, table_uuid=str(meta.table_uuid),
                    schema_id=meta.current_schema_id, table=table)
    removed = {t.file.file_path: t.file for t in tasks}
    txn = TxnState()
    txn.snapshot_properties.update(snapshot_properties)
    txn.writes[key] = StagedWrite(key, base, removed=MappingProxyType(removed), added=MappingProxyType(added),
                                  replaces=True)
    request = commit_request(txn)
    assert request is not None
    # Called from a worker thread that runs no trio loop of its own: one short-lived loop drives it.
    # (More charged attempts than a statement's: each rebase follows an append that landed.)
    outcome = trio.run(run_commit, request, LakeWorld(lakehouse, txn), Config(max_attempts=20))
    if not outcome.committed:
        if outcome.sqlstate == "40001":
            raise PgError("40001", f'compaction of table "{key[0]}.{key[1]}" aborted: a concurrent commit '
                          "changed files it was rewriting; the table is unchanged",
                          detail=outcome.detail or outcome.message or "",
                          hint="The other commit won, as it should. Run the compaction again.")
        raise PgError(outcome.sqlstate or "XX000", outcome.message or "commit failed", detail=outcome.detail or None)
    landed = lakehouse.load_table(*key).metadata
    for snapshot in reversed(landed.snapshots):
        if snapshot.summary is not None and snapshot.summary.get("icegres.commit-token") == request.token:
            return snapshot.snapshot_id
    return landed.current_snapshot_id
