"""A cancelled runaway query frees its worker thread at once and stops computing.

The server runs with one query thread, so a thread still busy with the cancelled query would make
the next statement (from any client) wait for it; the runaway would run for hours. The statement
after the cancel carries its own statement_timeout, so a regression fails in bounded time. The
cancel comes from statement_timeout, a CancelRequest, a Flight deadline, or the client's death.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections.abc import Iterator

import psutil
import psycopg
import pytest

from tests.support.icegres_server import IcegresServer, running_icegres

pytestmark = pytest.mark.e2e

# A join fed batch by batch by an endless range: ~10^15 rows to sum, no batch until the end.
RUNAWAY = "select sum(a.value * b.value) from range(1, 1000) a cross join range(1, 1000000000000) b"
# An aggregate over demo.trips that needs the one query thread; it fails (57014) after this long.
NEXT_TIMEOUT_MS = 15_000


@pytest.fixture(scope="module")
def server(seeded_dir) -> Iterator[IcegresServer]:
    with running_icegres(seeded_dir, args=("--query-threads", "1")) as srv:
        yield srv


def _server_cpu_rate(pid: int, seconds: float = 1.0) -> float:
    proc = psutil.Process(pid)
    before = sum(proc.cpu_times()[:2])
    time.sleep(seconds)
    return (sum(proc.cpu_times()[:2]) - before) / seconds


def _assert_freed_and_quiet(server: IcegresServer) -> None:
    with psycopg.connect(server.dsn(), autocommit=True) as other:
        other.execute(f"set statement_timeout = {NEXT_TIMEOUT_MS}")
        started = time.monotonic()
        assert other.execute("select count(*) from demo.cities").fetchone() == (20,)
        assert time.monotonic() - started < NEXT_TIMEOUT_MS / 1000
    # The cancelled query's tasks stopped: the server idles (a runaway would hold both cores).
    deadline = time.monotonic() + 10
    while (rate := _server_cpu_rate(server.pid)) > 0.3:
        assert time.monotonic() < deadline, f"server still busy after the cancel: {rate:.2f} cores"


def test_statement_timeout_frees_the_thread_and_stops_the_runaway(server):
    with psycopg.connect(server.dsn(), autocommit=True) as conn:
        conn.execute("set statement_timeout = 500")
        started = time.monotonic()
        with pytest.raises(psycopg.errors.QueryCanceled):
            conn.execute(RUNAWAY)
        assert time.monotonic() - started < 10
        _assert_freed_and_quiet(server)
        conn.execute("reset statement_timeout")
        assert conn.execute("select 1").fetchone() == (1,)


def test_cancel_request_frees_the_thread_and_stops_the_runaway(server):
    with psycopg.connect(server.dsn(), autocommit=True) as conn:
        timer = threading.Timer(0.5, conn.cancel)
        timer.start()
        try:
            with pytest.raises(psycopg.errors.QueryCanceled):
                conn.execute(RUNAWAY)
        finally:
            timer.cancel()
        _assert_freed_and_quiet(server)


def test_a_runaway_prepared_statement_is_cancelled_the_same_way(server):
    # The extended protocol pulls its first batch in the Execute's thread job.
    with psycopg.connect(server.dsn(), autocommit=True, prepare_threshold=0) as conn:
        conn.execute("set statement_timeout = 500")
        with pytest.raises(psycopg.errors.QueryCanceled):
            conn.execute(RUNAWAY + " where a.value > %s", (0,))
        _assert_freed_and_quiet(server)


def test_a_flight_deadline_frees_the_thread_and_stops_the_runaway(seeded_dir):
    import adbc_driver_flightsql.dbapi as adbc
    import adbc_driver_manager
    from adbc_driver_flightsql import StatementOptions

    from tests.e2e.test_flightsql import flight_server

    with flight_server(seeded_dir, "--query-threads", "1") as (uri, pid, _, _):
        with adbc.connect(uri, autocommit=True) as c, c.cursor() as cur:
            cur.adbc_statement.set_options(**{StatementOptions.TIMEOUT_QUERY.value: "0.5",
                                              StatementOptions.TIMEOUT_FETCH.value: "0.5"})
            with pytest.raises(adbc_driver_manager.OperationalError, match="(?i)deadline"):
                cur.execute(RUNAWAY)
                cur.fetchall()
        with adbc.connect(uri, autocommit=True) as c, c.cursor() as cur:
            cur.adbc_statement.set_options(**{StatementOptions.TIMEOUT_QUERY.value: str(NEXT_TIMEOUT_MS / 1000)})
            cur.execute("select count(*) as n from demo.cities")
            assert cur.fetchall() == [(20,)]
        deadline = time.monotonic() + 10
        while (rate := _server_cpu_rate(pid)) > 0.3:
            assert time.monotonic() < deadline, f"server still busy after the deadline: {rate:.2f} cores"


def test_a_client_that_disconnects_mid_query_frees_the_thread_and_stops_the_runaway(server):
    # The client process dies with the runaway running; nobody sends a CancelRequest.
    client = subprocess.Popen(
        [sys.executable, "-c", "import psycopg, sys; psycopg.connect(sys.argv[1], autocommit=True).execute(sys.argv[2])",
         server.dsn(), RUNAWAY],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(1.5)
        assert client.poll() is None  # still waiting for its runaway
    finally:
        client.kill()
        client.wait(timeout=10)
    _assert_freed_and_quiet(server)
