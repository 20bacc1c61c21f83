"""engine/memory.py in process: one pool for every context made with the runtime, spilling into
the spill directory, and what cannot fit answered as PostgreSQL's 53200."""

from __future__ import annotations

import pytest

from icegres.engine.errors import from_datafusion
from icegres.engine.memory import runtime_env

pytestmark = pytest.mark.unit

# A cross join whose build side (3M int64 values, ~24 MB) stays reserved while its stream lives;
# it cannot spill (a nested-loop join can: DataFusion 55 falls back to passes over spilled input).
HELD_BUILD = "select a.value, b.value from range(0, 3000000) a cross join range(0, 100000000000) b"


def test_every_context_made_with_the_runtime_shares_one_pool(tmp_path):
    from datafusion import SessionContext

    runtime = runtime_env(40 << 20, tmp_path / "spill")
    first, second = SessionContext(None, runtime), SessionContext(None, runtime)
    held = first.sql(HELD_BUILD).execute_stream()
    next(held)
    with pytest.raises(Exception, match="Resources exhausted") as failed:
        next(second.sql(HELD_BUILD).execute_stream())
    err = from_datafusion(failed.value)
    assert (err.sqlstate, err.message) == ("53200", "out of memory")
    assert "CrossJoinExec" in (err.detail or "")
    del held
    next(second.sql(HELD_BUILD).execute_stream())  # the pool is free again


def test_a_sort_larger_than_the_pool_spills_and_answers(tmp_path):
    from datafusion import SessionConfig, SessionContext

    spill = tmp_path / "spill"
    ctx = SessionContext(SessionConfig().set("datafusion.sql_parser.dialect", "PostgreSQL"), runtime_env(16 << 20, spill))
    n = 1_000_000
    # Each value's rank under the key (v * 7919) % n is that key plus one: a permutation of 0..n-1.
    got = ctx.sql(f"select sum(x * rn) from (select value x, row_number() over (order by (value * 7919) % {n}) rn "
                  f"from range(0, {n})) t").collect()[0].column(0)[0].as_py()
    assert got == sum(v * ((v * 7919) % n + 1) for v in range(n))
    metrics = ctx.sql(f"explain analyze select value from range(0, {n}) order by (value * 7919) % {n}").collect()
    assert "spill_count=0" not in str(metrics[0].column(1)[0]).split("SortExec", 1)[1].split("\n")[0]


def test_the_runtime_empties_a_crashed_runs_spill_files(tmp_path):
    spill = tmp_path / "spill"
    spill.mkdir()
    (spill / "datafusion-left-over").mkdir()
    runtime_env(16 << 20, spill)
    assert list(spill.iterdir()) == []
