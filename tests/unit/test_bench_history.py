"""The history suite's pure parts: the first/last windows, the smoothing of its plot, when
maintenance runs, the count model's check and the CALLs it sends. Nothing here measures anything."""

from __future__ import annotations

import math

import pytest

from bench.suites.history import (
    call_sql,
    checkpoint_due,
    count_mismatches,
    paired_drift,
    rolling_median,
    window_p50s,
)

pytestmark = pytest.mark.unit


def test_window_p50s_compares_the_first_and_last_windows():
    values = [1.0] * 100 + [5.0] * 300 + [2.0, 3.0, 4.0] * 33 + [3.0]
    first, last, ratio = window_p50s(values, 100)
    assert (first, last, ratio) == (1.0, 3.0, 3.0)


def test_window_p50s_of_a_short_run_overlaps_and_of_none_is_nan():
    assert window_p50s([1.0, 2.0, 4.0], 2) == (1.5, 3.0, 2.0)
    assert all(math.isnan(v) for v in window_p50s([], 100))


def test_rolling_median_uses_the_trailing_window_and_fewer_at_the_start():
    assert rolling_median([1, 9, 2, 8, 3], 3) == [1, 5.0, 2, 8, 3]


def test_maintenance_follows_every_kth_commit_counted_from_one():
    assert [i for i in range(200) if checkpoint_due(i, 50)] == [49, 99, 149, 199]
    assert not any(checkpoint_due(i, 0) for i in range(10))


def test_count_mismatches_names_each_metadata_table_the_model_got_wrong():
    model = {"snapshots": 50, "manifests": 50}
    assert count_mismatches("demo.t", model, {"snapshots": 50, "manifests": 50}) == []
    assert count_mismatches("demo.t", model, {"snapshots": 51, "manifests": 50}) == [
        "demo.t: model says 50 snapshots, the server 51"]


def test_expiry_keeps_the_last_n_whatever_their_age_and_the_others_take_the_table_alone():
    sql = call_sql("expire_snapshots", "demo.maintained")
    assert "retention_threshold => '0s'" in sql and "retain_last => 20" in sql
    assert call_sql("rewrite_manifests", "demo.t") == "call system.rewrite_manifests('demo.t')"


def test_paired_drift_cancels_a_machine_that_gets_busier_for_both_tables():
    reference = [10.0] * 100 + [30.0] * 100  # the whole machine 3x slower later
    assert paired_drift([x * 2 for x in reference], reference, 100) == 1.0
    assert paired_drift([x * (1 + i // 100) for i, x in enumerate(reference)], reference, 100) == 2.0
    assert math.isnan(paired_drift([1.0], [0.0], 100))
