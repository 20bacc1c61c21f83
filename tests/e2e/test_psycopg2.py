"""psycopg2: simple Query only with client-side parameters, implicit BEGIN, DECLARE/FETCH named
cursors, SQLSTATE → exception class mapping and CancelRequest sent directly (no SSLRequest)."""

from __future__ import annotations

import datetime as dt
import threading
import time

import psycopg2
import psycopg2.errors
import psycopg2.extensions
import pytest

from tests.e2e.expected import city_counts, trip

pytestmark = pytest.mark.e2e

# Streams 20M rows batch by batch, so cancellation lands at the next batch boundary. A runaway
# blocking operator (a count(*) over a huge join) cannot be interrupted mid-batch by DataFusion:
# see docs/limitations.md.
LONG_QUERY = "select a.id, b.city from demo.trips a cross join demo.cities b"


@pytest.fixture
def conn(server):
    c = psycopg2.connect(server.dsn())
    try:
        yield c
    finally:
        c.close()


def test_group_by_and_implicit_begin(conn):
    cur = conn.cursor()
    cur.execute("select city, count(*) as n from demo.trips group by city")
    assert conn.get_transaction_status() == psycopg2.extensions.TRANSACTION_STATUS_INTRANS
    rows = cur.fetchall()
    assert dict(rows) == city_counts()
    assert all(isinstance(c, str) and isinstance(n, int) for c, n in rows)
    assert [d.name for d in cur.description] == ["city", "n"]
    assert [d.type_code for d in cur.description] == [25, 20]
    conn.commit()
    assert conn.get_transaction_status() == psycopg2.extensions.TRANSACTION_STATUS_IDLE


def test_point_lookup_with_inlined_parameter(conn):
    cur = conn.cursor()
    cur.execute(
        "select id, city, fare, distance, pickup_ts, passengers, vendor, paid from demo.trips where id = %s",
        (4242,),
    )
    row = cur.fetchone()
    e = trip(4242)
    assert row == (4242, e["city"], e["fare"], e["distance"], e["pickup_ts"], e["passengers"], e["vendor"], e["paid"])
    assert [type(v) for v in row] == [int, str, float, float, dt.datetime, int, str, bool]
    assert row[4].utcoffset() == dt.timedelta(0)  # server TimeZone defaults to UTC
    assert [d.type_code for d in cur.description] == [20, 25, 701, 701, 1184, 23, 25, 16]
    cur.execute("select count(*) from demo.cities where city = %s or population > %s", ("no-such-city", -1))
    assert cur.fetchone() == (20,)


def test_named_server_side_cursor(conn):
    with conn.cursor(name="trips_cur") as cur:  # DECLARE "trips_cur" CURSOR WITHOUT HOLD FOR …
        cur.itersize = 1000  # FETCH FORWARD 1000 FROM "trips_cur"
        cur.execute("select id, fare, paid from demo.trips where id <= %s order by id", (2500,))
        rows = list(cur)
    assert [r[0] for r in rows] == list(range(1, 2501))
    e = trip(2500)
    assert rows[-1] == (2500, e["fare"], e["paid"])
    assert isinstance(rows[-1][1], float) and isinstance(rows[-1][2], bool)
    conn.commit()
    with conn.cursor(name="manual") as cur:
        cur.execute("select city, population from demo.cities order by city")
        first = cur.fetchmany(3)
        rest = cur.fetchall()
    assert len(first) == 3 and len(first) + len(rest) == 20
    names = [r[0] for r in first + rest]
    assert names == sorted(names)
    assert all(isinstance(p, int) and p > 0 for _, p in first + rest)
    conn.commit()


def test_errors_map_to_classes_and_recover(conn):
    cur = conn.cursor()
    with pytest.raises(psycopg2.errors.UndefinedTable) as ei:
        cur.execute("select * from demo.missing")
    assert ei.value.pgcode == "42P01"
    with pytest.raises(psycopg2.errors.InFailedSqlTransaction):
        cur.execute("select 1")
    conn.rollback()
    with pytest.raises(psycopg2.errors.UndefinedColumn):
        cur.execute("select nope from demo.trips")
    conn.rollback()
    cur.execute("select 1")
    assert cur.fetchone() == (1,)


def test_unsupported_write_rejected(conn):
    # The shared demo lake must not change: CLUSTER is refused before anything is written.
    cur = conn.cursor()
    with pytest.raises(psycopg2.errors.FeatureNotSupported) as ei:
        cur.execute("cluster demo.cities")
    assert ei.value.pgcode == "0A000"
    conn.rollback()


def test_cancel_long_query(server):
    c = psycopg2.connect(server.dsn())
    c.autocommit = True
    try:
        cur = c.cursor()
        timer = threading.Timer(0.5, c.cancel)  # CancelRequest directly, no SSLRequest first
        timer.start()
        started = time.monotonic()
        with pytest.raises(psycopg2.errors.QueryCanceled) as ei:
            cur.execute(LONG_QUERY)
        timer.join()
        assert ei.value.pgcode == "57014"
        assert time.monotonic() - started < 30
        # A cancelled statement must stop consuming the server: the next one answers promptly.
        after = time.monotonic()
        cur.execute("select 1")
        assert cur.fetchone() == (1,)
        assert time.monotonic() - after < 5
    finally:
        c.close()
