"""--max-concurrent-queries: with one slot, a second heavy statement waits for the first, and its
statement_timeout counts the wait; light statements do not wait; Flight SQL queues in the same
slots as pgwire (one process serving both)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import psycopg
import pytest

from tests.e2e.test_cancel_runaway import RUNAWAY

pytestmark = pytest.mark.e2e

# A join (heavy: it runs in an execution process) that takes milliseconds on its own. Each test
# has its own text: a repeat whose first pull was quick runs in the server, admitted at once
# (its work is known to be short: engine/batches.py).
SMALL_JOIN = "select count(*) from demo.cities a join demo.cities b on a.city < b.city"
SMALL_JOIN_FLIGHT = "select count(*) from demo.cities a join demo.cities b on a.city <= b.city"


@pytest.fixture(scope="module")
def both(seeded_dir) -> Iterator[tuple[str, str]]:
    """(pgwire DSN, Flight URI) of one server with a single execution slot."""
    from tests.e2e.test_flightsql import flight_server

    with flight_server(seeded_dir, "--max-concurrent-queries", "1", "--query-threads", "2",
                       command="serve") as (uri, _, _, port):
        yield f"host=127.0.0.1 port={port} dbname=icegres user=icegres", uri


class Runaway:
    """RUNAWAY on a connection of its own, holding the one slot until `stop()`."""

    def __init__(self, dsn: str) -> None:
        self.conn = psycopg.connect(dsn, autocommit=True)
        self.conn.execute("set statement_timeout = '60s'")  # bounded if the test goes wrong
        self.error: Exception | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()
        time.sleep(1.0)  # admitted and running

    def _run(self) -> None:
        try:
            self.conn.execute(RUNAWAY)
        except Exception as exc:  # noqa: BLE001 - the cancel, checked by stop()
            self.error = exc

    def stop(self) -> None:
        self.conn.cancel()
        self.thread.join(timeout=10)
        assert isinstance(self.error, psycopg.errors.QueryCanceled)
        self.conn.close()


def test_a_queued_statement_times_out_counting_its_wait_and_runs_once_the_slot_frees(both):
    dsn, _ = both
    runaway = Runaway(dsn)
    try:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("set statement_timeout = 500")
            started = time.monotonic()
            with pytest.raises(psycopg.errors.QueryCanceled, match="statement timeout"):
                conn.execute(SMALL_JOIN)
            assert 0.4 < time.monotonic() - started < 3
            # A light statement (a scan with a filter) does not queue behind the runaway.
            started = time.monotonic()
            assert conn.execute("select count(*) from demo.trips where id < 10").fetchone() == (9,)
            assert time.monotonic() - started < 0.5
    finally:
        runaway.stop()
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("set statement_timeout = '15s'")
        assert conn.execute(SMALL_JOIN).fetchone() == (190,)


def test_flight_sql_queues_in_the_same_slots(both):
    import adbc_driver_flightsql.dbapi as adbc
    import adbc_driver_manager
    from adbc_driver_flightsql import StatementOptions

    dsn, uri = both
    runaway = Runaway(dsn)
    try:
        with adbc.connect(uri, autocommit=True) as c, c.cursor() as cur:
            cur.adbc_statement.set_options(**{StatementOptions.TIMEOUT_QUERY.value: "0.5",
                                              StatementOptions.TIMEOUT_FETCH.value: "0.5"})
            with pytest.raises(adbc_driver_manager.OperationalError, match="(?i)deadline"):
                cur.execute(SMALL_JOIN_FLIGHT)
                cur.fetchall()
    finally:
        runaway.stop()
    with adbc.connect(uri, autocommit=True) as c, c.cursor() as cur:
        cur.adbc_statement.set_options(**{StatementOptions.TIMEOUT_QUERY.value: "15"})
        cur.execute(SMALL_JOIN_FLIGHT)
        assert cur.fetchall() == [(210,)]


@pytest.mark.parametrize("sql, expected", [
    ("select count(*) from generate_series(1, 5000000)", 5000000),
    ("select count(*) from range(0, 5000000)", 5000000),
    ("select count(*) from range(0, 3000) a cross join range(0, 2000) b", 6000000),
    ("select count(*) from demo.cities a join demo.cities b on a.city <> b.city", 380),
])
def test_heavy_statements_that_project_no_column_answer_right(both, sql, expected):
    # count(*) over a table function projects no column of it: DataFusion 55's plan serialisation
    # loses that empty projection, so such plans run in the server (engine/executor.py).
    with psycopg.connect(both[0], autocommit=True) as conn:
        assert conn.execute(sql).fetchone() == (expected,)
