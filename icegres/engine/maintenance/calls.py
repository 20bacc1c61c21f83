"""The maintenance procedures as SQL runs them: `CALL system.expire_snapshots(...)`,
`CALL system.remove_orphan_files(...)` and Trino's `ALTER TABLE t EXECUTE ...` (parsed to the
same Call by engine/procedures.py). Each answers with Spark's result rows and NOTICEs saying
what was expired and deleted. Blocking: the write path runs `run` in a worker thread.
Compaction's procedures: compaction_calls.py (`result_schema` answers for both)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from icegres.engine.maintenance import expire, orphans, times
from icegres.engine.procedures import COMPACTION, Call, Timestamp, epoch_ms, maintained_table
from icegres.pg.errors import INVALID_PARAMETER_VALUE, PgError

if TYPE_CHECKING:
    from icegres.engine.catalog import Lakehouse

_COUNT = pa.int64()
RESULT_SCHEMAS: dict[str, pa.Schema] = {
    "expire_snapshots": pa.schema([(name, _COUNT) for name in (
        "deleted_data_files_count", "deleted_position_delete_files_count", "deleted_equality_delete_files_count",
        "deleted_manifest_files_count", "deleted_manifest_lists_count", "deleted_statistics_files_count")]),
    # Spark's one column, and the size icegres adds (a dry run is for deciding).
    "remove_orphan_files": pa.schema([("orphan_file_location", pa.string()), ("file_size_in_bytes", _COUNT)]),
}


def result_schema(call: Call) -> pa.Schema | None:
    """The columns of the rows `call` answers with; None for Trino's `optimize` (a command tag)."""
    if call.procedure in COMPACTION:
        from icegres.engine.maintenance import compaction_calls

        return compaction_calls.result_schema(call)
    return RESULT_SCHEMAS[call.procedure]


def run(lakehouse: Lakehouse, call: Call, search_path: list[str],
        pinned: Callable[[Any], set[int]]) -> tuple[pa.Table, list[str], tuple[str, str]]:
    """Run a maintenance `call`; its result rows, notices and table. PgError 42P01 (no such table),
    22023 (a bad argument), 40001 (lost every race), 58030 (unreadable metadata)."""
    namespace, _ = maintained_table(lakehouse, call, search_path)
    display = f"{namespace}.{call.name}"
    args = dict(call.args)
    now_ms = int(time.time() * 1000)
    older_than = _older_than(args, call.time_zone, now_ms)
    if call.procedure == "expire_snapshots":
        policy = expire.Policy(older_than, _count(args, "retain_last"))
        report = expire.expire(lambda: lakehouse.load_table(namespace, call.name), display, policy,
                               dry_run=_flag(args, "dry_run", False), pinned=pinned,
                               local_requirements=lakehouse.kind == "sql")
        rows = pa.Table.from_pylist([report.spark_row()], schema=RESULT_SCHEMAS[call.procedure])
        verb = "would expire" if report.dry_run else "expired"
        notes = [f'table "{display}": {verb} {len(report.expired_snapshots)} snapshot(s), '
                 f"{'would delete' if report.dry_run else 'deleted'} {len(report.deleted.kinds)} file(s), "
                 f"{report.deleted_bytes} bytes"]
        if report.kept_files:
            notes.append("the table's metadata could not be read after the expiry: no file was deleted")
        return rows, notes, (namespace, call.name)
    location = args.get("location")
    if location is not None and not isinstance(location, str):
        raise PgError(INVALID_PARAMETER_VALUE, 'argument "location" must be a string')
    table = lakehouse.load_table(namespace, call.name)
    if location is not None and not location.rstrip("/").startswith(table.metadata.location.rstrip("/")):
        raise PgError(INVALID_PARAMETER_VALUE, f'location "{location}" is not under the location of table "{display}"')
    found = orphans.remove_orphans(table, display, older_than_ms=older_than, dry_run=_flag(args, "dry_run", True),
                                   location=location, now_ms=now_ms,
                                   neighbours=neighbours(lakehouse, (namespace, call.name)))
    rows = pa.Table.from_pylist([{"orphan_file_location": o.path, "file_size_in_bytes": o.size_bytes}
                                 for o in found.orphans], schema=RESULT_SCHEMAS[call.procedure])
    verb = "would delete" if found.dry_run else "deleted"
    notes = [f'table "{display}": {verb} {len(found.orphans)} orphan file(s), {found.orphan_bytes} bytes '
             f"(of {found.scanned_files} listed)"]
    if found.dry_run:
        notes.append("dry run: nothing was deleted (dry_run => false deletes)")
    return rows, notes, (namespace, call.name)


def neighbours(lakehouse: Lakehouse, key: tuple[str, str]) -> list[tuple[str, str]]:
    """(name, metadata location) of every other table of the catalog (for orphans.remove_orphans)."""
    return [(f"{e.namespace}.{e.name}", e.metadata_location) for e in lakehouse.listing(internal=True).tables
            if (e.namespace, e.name) != key]


def _older_than(args: dict[str, Any], zone: str, now_ms: int) -> int | None:
    if "older_than" in args and "retention_threshold" in args:
        raise PgError(INVALID_PARAMETER_VALUE, "give older_than or retention_threshold, not both")
    value = args.get("older_than")
    if isinstance(value, Timestamp):
        return epoch_ms(value, zone)
    if isinstance(value, str):
        return times.older_than_ms(value, now_ms)
    if value is not None:
        raise PgError(INVALID_PARAMETER_VALUE, "older_than takes TIMESTAMP '...'")
    threshold = args.get("retention_threshold")
    if threshold is None:
        return None
    if not isinstance(threshold, str):
        raise PgError(INVALID_PARAMETER_VALUE, "retention_threshold takes a duration such as '7d'")
    return now_ms - times.duration_ms(threshold)


def _count(args: dict[str, Any], name: str) -> int | None:
    value = args.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise PgError(INVALID_PARAMETER_VALUE, f'argument "{name}" must be a positive integer')
    return value


def _flag(args: dict[str, Any], name: str, default: bool) -> bool:
    value = args.get(name, default)
    if not isinstance(value, bool):
        raise PgError(INVALID_PARAMETER_VALUE, f'argument "{name}" must be true or false')
    return value
