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


def test_each_process_spills_under_its_own_directory_and_removes_only_the_dead_ones(tmp_path):
    """Servers share a data directory (one starts while the one before it drains): a start
    removes what dead processes left, never a running one's spill files (it emptied the whole
    directory before, and a start racing another failed with EEXIST)."""
    import os
    import subprocess
    import sys

    from icegres.engine.memory import spill_dir

    root = tmp_path / "spill"
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    (root / dead.stdout.strip()).mkdir(parents=True)
    (root / dead.stdout.strip() / "datafusion-x.tmp").write_bytes(b"left by a crash")
    alive = root / str(os.getppid())
    alive.mkdir()
    (alive / "spilling").write_bytes(b"in use")
    old, new = root / "datafusion-old", root / "datafusion-new"
    old.mkdir()
    new.mkdir()
    os.utime(old, (0, 0))
    own = spill_dir(tmp_path)
    assert own == root / str(os.getpid()) and own.is_dir() and not any(own.iterdir())
    assert sorted(p.name for p in root.iterdir()) == sorted([own.name, alive.name, new.name])
    assert (alive / "spilling").read_bytes() == b"in use"
