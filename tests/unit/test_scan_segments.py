"""scan_sets.segments_for: the runs a scan set of many files is made of. Whatever the live
segments, the runs concatenate to the file list; a set of few files is one run; appends one
file at a time reuse what is live and link each file again only about log2(n) times; the number
of runs stays small."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from icegres.engine.scan_sets import SEGMENTED_FROM, segments_for

pytestmark = pytest.mark.unit


def _index(runs):
    starting: dict[str, list[tuple[str, ...]]] = {}
    for run in runs:
        starting.setdefault(run[0], []).append(run)
    return lambda first: starting.get(first, [])


def test_a_set_of_few_files_is_one_run():
    files = tuple(f"f{i}" for i in range(SEGMENTED_FROM - 1))
    assert segments_for(files, lambda first: []) == [files]


@pytest.mark.parametrize("at_front", [False, True])
def test_appends_reuse_live_runs_and_link_each_file_about_log_n_times(at_front):
    files: tuple[str, ...] = ()
    live: list[tuple[str, ...]] = []
    linked = 0
    for i in range(2000):
        files = ((f"f{i}",) + files) if at_front else (files + (f"f{i}",))
        runs = segments_for(files, _index(live))
        assert tuple(f for run in runs for f in run) == files
        linked += sum(len(run) for run in runs if run not in live)
        live = runs  # (the previous snapshot's set let go)
        assert len(runs) <= 2 * math.log2(len(files)) + 2
    assert linked / 2000 < 2 * math.log2(2000)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 300), min_size=SEGMENTED_FROM, max_size=400, unique=True),
       st.lists(st.tuples(st.integers(0, 399), st.integers(1, 200)), max_size=6))
def test_runs_always_concatenate_to_the_files_whatever_is_live(order, spans):
    files = tuple(f"f{n}" for n in order)
    other = tuple(f"f{n}" for n in sorted(order))
    live = [other[a:a + n] for a, n in spans if other[a:a + n]]  # runs of another snapshot's order
    runs = segments_for(files, _index(live))
    assert tuple(f for run in runs for f in run) == files
    assert len(runs) <= 32 and all(runs)
