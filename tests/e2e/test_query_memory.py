"""--query-memory: sorts and hash aggregates of 10M rows spill under a 256 MB limit (spill files
appear under <data-dir>/spill while they run) and answer right; a cross join whose build side cannot fit fails with 53200 and the server carries on, its
RSS bounded throughout (the server's and its execution processes', sampled with psutil while each
statement runs)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psycopg
import pytest

from tests.support.icegres_server import IcegresServer, running_icegres
from tests.support.processes import tree_rss_mb

pytestmark = pytest.mark.e2e

POOL_MB = 256
ROWS = 10_000_000
# What the server may hold beyond its idle RSS while a statement runs: the pool, and as much again
# for what the pool does not count (batches in flight, Parquet decoding: engine/memory.py).
RSS_GROWTH_MAX_MB = 2 * POOL_MB


@pytest.fixture(scope="module")
def server(seeded_dir) -> Iterator[IcegresServer]:
    with running_icegres(seeded_dir, args=("--query-memory", f"{POOL_MB}MB")) as srv:
        srv.wait_executors()  # (the idle memory and CPU measured include them)
        yield srv


@contextmanager
def peak_rss_mb(pid: int) -> Iterator[list[float]]:
    """[peak RSS in MiB] of `pid` and its children while the block runs, sampled every 20 ms."""
    peak, done = [0.0], threading.Event()

    def sample() -> None:
        while not done.is_set():
            peak[0] = max(peak[0], tree_rss_mb(pid))
            time.sleep(0.02)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        yield peak
    finally:
        done.set()
        sampler.join()


@contextmanager
def spilled(server: IcegresServer) -> Iterator[list[int]]:
    """[most spill files seen at once, most bytes] under the server's spill directory (the server's
    and its execution processes': engine/memory.py) while the block runs, sampled every 20 ms.
    DataFusion deletes a spill file once it is read back, so only sampling during the statement
    sees them."""
    spill, most, done = Path(server.data_dir) / "spill", [0, 0], threading.Event()

    def sample() -> None:
        while not done.is_set():
            sizes = []
            for path in spill.rglob("*"):
                try:
                    if path.is_file():
                        sizes.append(path.stat().st_size)
                except OSError:  # deleted between the listing and the stat
                    pass
            most[0], most[1] = max(most[0], len(sizes)), max(most[1], sum(sizes))
            time.sleep(0.02)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        yield most
    finally:
        done.set()
        sampler.join()


def _idle_rss_mb(server: IcegresServer) -> float:
    return tree_rss_mb(server.pid)


def test_a_sort_of_10m_rows_spills_under_256mb_and_answers_right(server):
    # Each value's rank under the key (v * 7919) % ROWS is that key plus one (7919 is prime to
    # ROWS: the key is a permutation), so the sum is known without sorting.
    expected = sum(v * ((v * 7919) % ROWS + 1) for v in range(ROWS))
    with psycopg.connect(server.dsn(), autocommit=True) as conn:
        conn.execute("set statement_timeout = '120s'")
        idle = _idle_rss_mb(server)
        with peak_rss_mb(server.pid) as peak, spilled(server) as spill:
            got = conn.execute(f"select sum(x * rn) from (select value x, row_number() over (order by (value * 7919) % {ROWS}) rn "
                               f"from range(0, {ROWS})) t").fetchone()[0]
    assert got == expected
    assert spill[0] > 0 and spill[1] > 0, spill  # it spilled, rather than fitting after all
    assert peak[0] - idle < RSS_GROWTH_MAX_MB, (idle, peak[0])


def test_a_hash_aggregate_of_10m_rows_spills_under_256mb_and_answers_right(server):
    groups = 5_000_000
    with psycopg.connect(server.dsn(), autocommit=True) as conn:
        conn.execute("set statement_timeout = '120s'")
        idle = _idle_rss_mb(server)
        with peak_rss_mb(server.pid) as peak, spilled(server) as spill:
            got = conn.execute(f"select count(*), sum(k * c) from (select value % {groups} k, count(*) c "
                               f"from range(0, {ROWS}) group by value % {groups}) t").fetchone()
    assert got == (groups, 2 * sum(range(groups)))
    assert spill[0] > 0 and spill[1] > 0, spill
    assert peak[0] - idle < RSS_GROWTH_MAX_MB, (idle, peak[0])


def test_a_cross_join_that_cannot_fit_fails_with_53200_and_the_server_carries_on(server):
    with psycopg.connect(server.dsn(), autocommit=True) as conn:
        conn.execute("set statement_timeout = '60s'")
        idle = _idle_rss_mb(server)
        with peak_rss_mb(server.pid) as peak, pytest.raises(psycopg.errors.OutOfMemory) as failed:
            conn.execute("select sum(a.value - b.value) from range(0, 100000000) a cross join range(0, 100000000) b")
        assert failed.value.diag.message_primary == "out of memory"
        assert "CrossJoinExec" in (failed.value.diag.message_detail or "")
        assert peak[0] - idle < RSS_GROWTH_MAX_MB, (idle, peak[0])
        assert conn.execute("select count(*) from demo.cities").fetchone() == (20,)


@pytest.mark.parametrize("sql", ["select length(repeat('x', 2147483647))", "select length(repeat('ab', 600000000))",
                                 "select length(lpad('x', 300000000))", "select rpad(city, 2000000000) from demo.cities"])
def test_a_text_result_over_postgresqls_1gb_is_refused_before_it_is_built(server, sql):
    # The pool cannot see a scalar function's output: repeat('x', 2^31 - 1) reached 9 GB of RSS.
    with psycopg.connect(server.dsn(), autocommit=True) as conn:
        idle = _idle_rss_mb(server)
        with peak_rss_mb(server.pid) as peak, pytest.raises(psycopg.errors.ProgramLimitExceeded,
                                                             match="requested length too large"):
            conn.execute(sql)
        assert peak[0] - idle < 100, (idle, peak[0])
        assert conn.execute("select repeat('ab', 3), lpad('x', 4, 'y'), rpad('x', 3)").fetchone() == ("ababab", "yyyx", "x  ")
