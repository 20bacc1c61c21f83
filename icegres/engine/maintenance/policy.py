"""Automatic maintenance's decisions (`serve --maintain`, docs/maintenance.md "Automatic maintenance"):
which table needs which job, read off plain values, and how long the scheduler rests.

Pure: no clock, no catalog, no trio. The scheduler (scheduler.py) reads a table's metadata into a
`TableStats` in a worker thread, asks `due` what to run, and sleeps what `rest_s` says. Why the
shape:

- **Everything is read from the metadata JSON and one manifest list**, never the manifests: the
  check runs for every changed table every interval, and reading 2,000 manifests to count small
  files would cost more than the compaction saves. The small-file count is therefore an estimate
  (`small_files`); compaction's own planner then decides exactly which files it rewrites, and a
  job that found nothing to do is not asked for again until the table changes (`Memo`).
- **A table's properties override the server's defaults**, `icegres.maintain.*` (`thresholds`),
  so one hot table can be tuned, or left alone (`icegres.maintain.enabled = false`), without a
  restart. A value that does not read as its type is ignored (the default holds) and reported,
  rather than stopping maintenance of every table.
- **Jobs in a fixed order**: compaction, then manifest rewrite (after compaction the manifests
  of the rewritten files are the ones worth merging), then expiry (it removes the snapshots
  compaction's replace left behind, and their files).
- **The budget is a duty cycle**: after a job that ran `t` seconds the scheduler rests
  `t * (1 - d) / d`, so maintenance takes at most a share `d` of one core's time on average,
  however much is due; and it starts a job only when the foreground has been quiet (`quiet`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum

__all__ = ["COMPACT", "EXPIRE", "MANIFESTS", "Defaults", "Job", "Memo", "Op", "SnapshotInfo", "TableStats",
           "Thresholds", "due", "expirable", "quiet", "rest_s", "small_files", "thresholds"]

PREFIX = "icegres.maintain."
DAY_MS = 86_400_000
# Iceberg's (and Spark's, Trino's) properties the defaults follow when icegres's own are unset.
MAX_SNAPSHOT_AGE_PROPERTY = "history.expire.max-snapshot-age-ms"
MIN_SNAPSHOTS_PROPERTY = "history.expire.min-snapshots-to-keep"
TARGET_FILE_SIZE_PROPERTY = "write.target-file-size-bytes"
DEFAULT_TARGET_FILE_SIZE_BYTES = 512 * 1024 * 1024
SMALL_FILE_RATIO = 0.75  # compaction's min-file-size-bytes default: a file under 75% of the target


class Op(Enum):
    COMPACT = "compact"
    MANIFESTS = "rewrite_manifests"
    EXPIRE = "expire"


COMPACT, MANIFESTS, EXPIRE = Op.COMPACT, Op.MANIFESTS, Op.EXPIRE
ORDER = (COMPACT, MANIFESTS, EXPIRE)


@dataclass(frozen=True)
class Defaults:
    """The server's thresholds; each is a table property's default (`icegres.maintain.<name>`)."""

    compact_min_files: int = 20  # compact once a table has about this many small files
    manifests_max: int = 100  # rewrite manifests once a table's current snapshot lists this many
    expire_min_snapshots: int = 20  # expire once this many snapshots are past the retention
    expire_max_age_ms: int | None = None  # None: history.expire.max-snapshot-age-ms, else 7 days
    expire_retain_last: int | None = None  # None: history.expire.min-snapshots-to-keep, else 1


@dataclass(frozen=True)
class Thresholds:
    """One table's, its properties over the server's `Defaults`."""

    enabled: bool
    compact_min_files: int
    manifests_max: int
    expire_min_snapshots: int
    expire_max_age_ms: int
    expire_retain_last: int
    small_file_bytes: int
    ignored: tuple[str, ...] = ()  # properties that did not read as their type

    @property
    def compact_min_input_files(self) -> int:
        """Compaction's per-group minimum (Spark's default 5), never above the table's trigger."""
        return max(1, min(5, self.compact_min_files))


_KEYS = {"enabled": "enabled", "compact.min-files": "compact_min_files", "manifests.max-count": "manifests_max",
         "expire.min-snapshots": "expire_min_snapshots", "expire.max-snapshot-age-ms": "expire_max_age_ms",
         "expire.retain-last": "expire_retain_last"}
PROPERTIES = tuple(PREFIX + k for k in _KEYS)


def thresholds(properties: Mapping[str, str], defaults: Defaults) -> Thresholds:
    """The table's thresholds: `icegres.maintain.*` properties, else Iceberg's expiry properties
    (for the retention), else `defaults`."""
    ignored: list[str] = []

    def number(key: str, fallback: int, minimum: int) -> int:
        raw = properties.get(PREFIX + key)
        if raw is None:
            return fallback
        try:
            value = int(str(raw).strip())
        except ValueError:
            ignored.append(PREFIX + key)
            return fallback
        if value < minimum:
            ignored.append(PREFIX + key)
            return fallback
        return value

    def iceberg(key: str, fallback: int, minimum: int) -> int:
        try:
            value = int(properties.get(key, fallback))
        except ValueError:
            return fallback
        return value if value >= minimum else fallback

    enabled_raw = str(properties.get(PREFIX + "enabled", "true")).strip().lower()
    if enabled_raw not in ("true", "false", "on", "off", "1", "0", "yes", "no"):
        ignored.append(PREFIX + "enabled")
        enabled_raw = "true"
    age = defaults.expire_max_age_ms if defaults.expire_max_age_ms is not None else \
        iceberg(MAX_SNAPSHOT_AGE_PROPERTY, 7 * DAY_MS, 0)
    retain = defaults.expire_retain_last if defaults.expire_retain_last is not None else \
        iceberg(MIN_SNAPSHOTS_PROPERTY, 1, 1)
    target = iceberg(TARGET_FILE_SIZE_PROPERTY, DEFAULT_TARGET_FILE_SIZE_BYTES, 1)
    return Thresholds(
        enabled=enabled_raw in ("true", "on", "1", "yes"),
        compact_min_files=number("compact.min-files", defaults.compact_min_files, 2),
        manifests_max=number("manifests.max-count", defaults.manifests_max, 2),
        expire_min_snapshots=number("expire.min-snapshots", defaults.expire_min_snapshots, 1),
        expire_max_age_ms=number("expire.max-snapshot-age-ms", age, 0),
        expire_retain_last=number("expire.retain-last", retain, 1),
        small_file_bytes=int(target * SMALL_FILE_RATIO),
        ignored=tuple(ignored),
    )


@dataclass(frozen=True)
class SnapshotInfo:
    """What a snapshot's summary says of the files it changed (main's history, newest first)."""

    operation: str  # append, overwrite, replace, delete
    added_files: int
    added_bytes: int
    deleted_files: int


@dataclass(frozen=True)
class TableStats:
    """One table as its metadata file and current manifest list describe it."""

    key: tuple[str, str]
    snapshot_id: int | None
    properties: Mapping[str, str]
    snapshot_times_ms: tuple[int, ...]  # of every snapshot in the metadata
    data_files: int  # the current snapshot's total-data-files
    data_bytes: int  # its total-files-size
    history: tuple[SnapshotInfo, ...]  # main's ancestry, newest first
    manifests: int  # in the current snapshot's manifest list
    table_uuid: str = ""  # (for what this server's transactions pinned)


def small_files(stats: TableStats, small_file_bytes: int) -> int:
    """About how many of the table's live files are small: the files added by appends of small
    average size since the last compaction (a replace that deleted files). When the history no
    longer reaches a compaction (expiry cut it), every file counts if the table's average file is
    small, should that be more. Never more than the table has."""
    since = 0
    for snapshot in stats.history:
        if snapshot.operation == "replace" and snapshot.deleted_files > 0:
            # A compaction: what came before it was rewritten (or was not worth it).
            return min(stats.data_files, since)
        if snapshot.operation == "append" and snapshot.added_files > 0 \
                and snapshot.added_bytes < small_file_bytes * snapshot.added_files:
            since += snapshot.added_files
    average_small = stats.data_files > 0 and stats.data_bytes < small_file_bytes * stats.data_files
    return min(stats.data_files, max(since, stats.data_files if average_small else 0))


def expirable(stats: TableStats, limits: Thresholds, now_ms: int) -> int:
    """About how many snapshots an expiry would remove now: those older than the retention, less
    the newest `retain_last` (expiry's own selection also keeps every ref's head and what
    transactions pinned)."""
    cutoff = now_ms - limits.expire_max_age_ms
    old = sum(1 for t in stats.snapshot_times_ms if t < cutoff)
    young = len(stats.snapshot_times_ms) - old
    return max(0, old - max(0, limits.expire_retain_last - young))


@dataclass(frozen=True)
class Memo:
    """A job that ran and found nothing to do on `snapshot_id`: not asked for again while the
    table stays there, for up to `until_ms` (expiry's answer changes as snapshots age)."""

    snapshot_id: int | None
    until_ms: int


@dataclass(frozen=True)
class Job:
    """What one table needs, in the order it runs, and why (for the log)."""

    key: tuple[str, str]
    ops: tuple[Op, ...]
    reasons: tuple[str, ...]
    limits: Thresholds
    urgency: float = 0.0  # the most overdue first


def due(stats: TableStats, defaults: Defaults, now_ms: int,
        memos: Mapping[Op, Memo] | None = None) -> Job | None:
    """The job `stats`' table needs now, or None. `memos`: what ran for nothing lately."""
    limits = thresholds(stats.properties, defaults)
    if not limits.enabled or stats.snapshot_id is None:
        return None

    def remembered(op: Op) -> bool:
        memo = (memos or {}).get(op)
        return memo is not None and memo.snapshot_id == stats.snapshot_id and now_ms < memo.until_ms

    ops: list[Op] = []
    reasons: list[str] = []
    urgency = 0.0
    small = small_files(stats, limits.small_file_bytes)
    if small >= limits.compact_min_files and not remembered(COMPACT):
        ops.append(COMPACT)
        reasons.append(f"~{small} small files (>= {limits.compact_min_files})")
        urgency = max(urgency, small / limits.compact_min_files)
    if stats.manifests >= limits.manifests_max and not remembered(MANIFESTS):
        ops.append(MANIFESTS)
        reasons.append(f"{stats.manifests} manifests (>= {limits.manifests_max})")
        urgency = max(urgency, stats.manifests / limits.manifests_max)
    old = expirable(stats, limits, now_ms)
    if old >= limits.expire_min_snapshots and not remembered(EXPIRE):
        ops.append(EXPIRE)
        reasons.append(f"~{old} snapshots past {limits.expire_max_age_ms} ms (>= {limits.expire_min_snapshots})")
        urgency = max(urgency, old / limits.expire_min_snapshots)
    if not ops:
        return None
    return Job(stats.key, tuple(op for op in ORDER if op in ops), tuple(reasons), limits, urgency)


def rest_s(job_s: float, duty_cycle: float, interval_s: float) -> float:
    """How long the scheduler rests after a job of `job_s` seconds: long enough that jobs take at
    most `duty_cycle` of the time, and never less than a tenth of the interval (so that a run of
    jobs that each found little to do does not spin on the catalog)."""
    if not 0 < duty_cycle <= 1:
        raise ValueError(f"duty cycle must be in (0, 1], not {duty_cycle}")
    return max(job_s * (1 - duty_cycle) / duty_cycle, interval_s / 10)


def quiet(before: tuple[int, int], after: tuple[int, int]) -> bool:
    """Whether the foreground was quiet between two samples of (statements running, statements
    finished so far): nothing running at either end and nothing finished in between."""
    return before[0] == 0 and after[0] == 0 and before[1] == after[1]
