"""Automatic maintenance's policy (engine/maintenance/policy.py): which job a table's metadata calls
for, table properties over the server's defaults, the duty cycle and the foreground's quiet."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from icegres.engine.maintenance import policy
from icegres.engine.maintenance.policy import (
    COMPACT,
    EXPIRE,
    MANIFESTS,
    Defaults,
    Memo,
    SnapshotInfo,
    TableStats,
    due,
    expirable,
    quiet,
    rest_s,
    small_files,
    thresholds,
)

pytestmark = pytest.mark.unit

NOW_MS = 1_800_000_000_000
DAY_MS = 86_400_000
KB = 1024


def appends(n: int, size: int = 2 * KB) -> tuple[SnapshotInfo, ...]:
    return tuple(SnapshotInfo("append", 1, size, 0) for _ in range(n))


def table(history: tuple[SnapshotInfo, ...] = (), *, props: dict[str, str] | None = None, manifests: int = 1,
          times: tuple[int, ...] | None = None, data_files: int | None = None, data_bytes: int | None = None,
          snapshot_id: int | None = 7) -> TableStats:
    files = data_files if data_files is not None else sum(s.added_files for s in history)
    size = data_bytes if data_bytes is not None else sum(s.added_bytes for s in history)
    stamps = times if times is not None else tuple(NOW_MS - i * 1000 for i in range(len(history)))
    return TableStats(("demo", "t"), snapshot_id, props or {}, stamps, files, size, history, manifests)


def test_a_table_of_many_small_appends_is_due_for_compaction() -> None:
    job = due(table(appends(25)), Defaults(compact_min_files=20), NOW_MS)
    assert job is not None and job.ops == (COMPACT,)
    assert "25 small files" in job.reasons[0]


def test_fewer_small_files_than_the_trigger_is_not_due() -> None:
    assert due(table(appends(19)), Defaults(compact_min_files=20), NOW_MS) is None


def test_a_compaction_in_the_history_resets_the_count() -> None:
    # Newest first: 3 small appends since a replace that rewrote 40 files into one big one.
    big = 400 * 1024 * KB
    history = (*appends(3), SnapshotInfo("replace", 1, big, 40), *appends(40))
    stats = table(history, data_files=4, data_bytes=big + 6 * KB)
    assert small_files(stats, policy.thresholds({}, Defaults()).small_file_bytes) == 3
    assert due(stats, Defaults(compact_min_files=20), NOW_MS) is None


def test_large_appends_are_not_small_files() -> None:
    big = appends(30, size=450 * 1024 * KB)  # over 75% of the 512 MiB default target
    assert due(table(big), Defaults(compact_min_files=20), NOW_MS) is None


def test_the_tables_target_file_size_decides_what_is_small() -> None:
    history = appends(30, size=100 * KB)
    assert due(table(history), Defaults(compact_min_files=20), NOW_MS) is not None
    props = {"write.target-file-size-bytes": str(64 * KB)}  # small: under 48 KiB
    assert due(table(history, props=props), Defaults(compact_min_files=20), NOW_MS) is None


def test_a_small_average_file_counts_every_file_even_without_history() -> None:
    # Expiry cut the history: the metadata's totals still tell the files are small.
    stats = table((), data_files=50, data_bytes=50 * 3 * KB)
    assert small_files(stats, 1024 * KB) == 50


def test_many_manifests_are_due_for_a_rewrite() -> None:
    big = appends(5, size=450 * 1024 * KB)
    job = due(table(big, manifests=150), Defaults(manifests_max=100), NOW_MS)
    assert job is not None and job.ops == (MANIFESTS,)
    assert due(table(big, manifests=99), Defaults(manifests_max=100), NOW_MS) is None


def test_snapshots_past_the_retention_are_due_for_expiry() -> None:
    big = appends(30, size=450 * 1024 * KB)
    times = tuple(NOW_MS - 8 * DAY_MS - i for i in range(30))  # all older than the 7-day default
    job = due(table(big, times=times), Defaults(expire_min_snapshots=20), NOW_MS)
    assert job is not None and job.ops == (EXPIRE,)
    young = tuple(NOW_MS - i for i in range(30))
    assert due(table(big, times=young), Defaults(expire_min_snapshots=20), NOW_MS) is None


def test_expiry_retention_follows_icebergs_property_then_icegres_own() -> None:
    big = appends(30, size=450 * 1024 * KB)
    times = tuple(NOW_MS - 2 * DAY_MS - i for i in range(30))
    defaults = Defaults(expire_min_snapshots=20)
    assert due(table(big, times=times), defaults, NOW_MS) is None  # 7 days by default
    iceberg = {"history.expire.max-snapshot-age-ms": str(DAY_MS)}
    assert due(table(big, times=times, props=iceberg), defaults, NOW_MS) is not None
    ours = {**iceberg, "icegres.maintain.expire.max-snapshot-age-ms": str(3 * DAY_MS)}
    assert due(table(big, times=times, props=ours), defaults, NOW_MS) is None


def test_retain_last_is_kept_out_of_the_expirable_count() -> None:
    old = tuple(NOW_MS - 8 * DAY_MS - i for i in range(10))
    limits = thresholds({"icegres.maintain.expire.retain-last": "4"}, Defaults())
    assert expirable(table(appends(10), times=old), limits, NOW_MS) == 6
    # Young snapshots count towards the retained ones first.
    mixed = (NOW_MS, NOW_MS - 1, *old[:8])
    assert expirable(table(appends(10), times=mixed), limits, NOW_MS) == 6


def test_jobs_run_in_a_fixed_order_compaction_first() -> None:
    times = tuple(NOW_MS - 8 * DAY_MS - i for i in range(40))
    job = due(table(appends(40), manifests=200, times=times), Defaults(), NOW_MS)
    assert job is not None and job.ops == (COMPACT, MANIFESTS, EXPIRE)


def test_maintenance_disabled_by_a_table_property() -> None:
    props = {"icegres.maintain.enabled": "false"}
    assert due(table(appends(100), props=props, manifests=500), Defaults(), NOW_MS) is None
    assert due(table(appends(100), props={"icegres.maintain.enabled": "TRUE"}), Defaults(), NOW_MS) is not None


def test_a_table_property_overrides_the_servers_threshold() -> None:
    props = {"icegres.maintain.compact.min-files": "5"}
    assert due(table(appends(6)), Defaults(compact_min_files=20), NOW_MS) is None
    job = due(table(appends(6), props=props), Defaults(compact_min_files=20), NOW_MS)
    assert job is not None and job.ops == (COMPACT,)
    assert job.limits.compact_min_input_files == 5


def test_a_property_that_does_not_read_is_ignored_and_reported() -> None:
    limits = thresholds({"icegres.maintain.compact.min-files": "lots", "icegres.maintain.enabled": "perhaps",
                         "icegres.maintain.manifests.max-count": "0"}, Defaults(compact_min_files=20))
    assert limits.compact_min_files == 20 and limits.enabled and limits.manifests_max == 100
    assert set(limits.ignored) == {"icegres.maintain.compact.min-files", "icegres.maintain.enabled",
                                   "icegres.maintain.manifests.max-count"}


def test_a_job_that_found_nothing_is_not_asked_for_again_on_the_same_snapshot() -> None:
    stats = table(appends(25))
    memo = {COMPACT: Memo(stats.snapshot_id, NOW_MS + 1000)}
    assert due(stats, Defaults(), NOW_MS, memo) is None
    assert due(stats, Defaults(), NOW_MS + 1000, memo) is not None  # the memo ran out
    moved = table(appends(26), snapshot_id=8)
    assert due(moved, Defaults(), NOW_MS, memo) is not None  # the table changed


def test_an_empty_table_is_never_due() -> None:
    assert due(table((), snapshot_id=None, manifests=0), Defaults(), NOW_MS) is None


def test_the_most_overdue_table_is_the_most_urgent() -> None:
    a = due(table(appends(25)), Defaults(compact_min_files=20), NOW_MS)
    b = due(table(appends(200)), Defaults(compact_min_files=20), NOW_MS)
    assert a is not None and b is not None and b.urgency > a.urgency


@given(st.floats(0.0, 1e4), st.floats(0.01, 1.0), st.floats(0.1, 1e4))
def test_the_duty_cycle_bounds_maintenances_share_of_time(job_s: float, duty: float, interval_s: float) -> None:
    rest = rest_s(job_s, duty, interval_s)
    assert rest >= interval_s / 10
    if job_s > 0:
        assert job_s / (job_s + rest) <= duty + 1e-9


def test_a_duty_cycle_outside_0_1_is_refused() -> None:
    for bad in (0.0, -0.5, 1.5):
        with pytest.raises(ValueError):
            rest_s(1.0, bad, 60.0)


def test_quiet_means_nothing_ran_and_nothing_finished() -> None:
    assert quiet((0, 10), (0, 10))
    assert not quiet((0, 10), (0, 11))  # a statement ran and finished in between
    assert not quiet((1, 10), (0, 10))
    assert not quiet((0, 10), (2, 10))
