"""psycopg 3: simple and extended protocol, text and binary, prepared statements, cancel, timeouts."""

from __future__ import annotations

import datetime as dt
import threading
import time
import uuid

import psycopg
import pytest

from tests.e2e.expected import city_counts, trip

pytestmark = pytest.mark.e2e


@pytest.fixture
def conn(server):
    with psycopg.connect(server.dsn(), autocommit=True) as c:
        yield c


def test_group_by(conn):
    rows = conn.execute("select city, count(*) as n from demo.trips group by city").fetchall()
    assert dict(rows) == city_counts()


@pytest.mark.parametrize("binary", [False, True])
def test_point_lookup_types(conn, binary):
    cur = conn.cursor(binary=binary)
    row = cur.execute(
        "select id, city, fare, distance, pickup_ts, passengers, vendor, paid from demo.trips where id = %s",
        (4242,),
    ).fetchone()
    e = trip(4242)
    assert row == (4242, e["city"], e["fare"], e["distance"], e["pickup_ts"], e["passengers"], e["vendor"], e["paid"])
    assert isinstance(row[4], dt.datetime) and row[4].utcoffset() == dt.timedelta(0)
    assert [d.type_code for d in cur.description] == [20, 25, 701, 701, 1184, 23, 25, 16]


def test_prepare_threshold_zero_and_repeated_execution(server):
    with psycopg.connect(server.dsn(), autocommit=True, prepare_threshold=0) as c:
        for i in range(1, 8):
            assert c.execute("select id, passengers from demo.trips where id = %s", (i * 1000,)).fetchone() == (
                i * 1000, trip(i * 1000)["passengers"])
    with psycopg.connect(server.dsn(), autocommit=True) as c:  # default: named after 5 executions
        for i in range(1, 10):
            assert c.execute("select count(*) from demo.trips where id <= %s", (i,)).fetchone() == (i,)


def test_parameters_of_many_types(conn):
    row = conn.execute(
        "select %s::bigint + 1, %s || 'x', %s::double precision * 2, %s::boolean, %s::date, %s::text",
        (41, "ab", 1.25, True, dt.date(2024, 2, 29), None),
    ).fetchone()
    assert row == (42, "abx", 2.5, True, dt.date(2024, 2, 29), None)


def test_large_result_streams(conn):
    cur = conn.cursor(binary=True)
    cur.execute("select id, fare from demo.trips where id <= 300000")
    n = 0
    last = 0
    for rec in cur:
        n += 1
        last = max(last, rec[0])
    assert n == 300_000 and last == 300_000


def test_transaction_block_and_savepoints(server):
    with psycopg.connect(server.dsn()) as c:  # not autocommit: implicit BEGIN
        assert c.execute("select count(*) from demo.cities").fetchone() == (20,)
        with c.transaction():
            assert c.execute("select 1").fetchone() == (1,)
        c.commit()
        assert c.info.transaction_status == psycopg.pq.TransactionStatus.IDLE


def test_error_then_recover_in_transaction(server):
    with psycopg.connect(server.dsn()) as c:
        with pytest.raises(psycopg.errors.UndefinedTable):
            c.execute("select * from demo.missing")
        with pytest.raises(psycopg.errors.InFailedSqlTransaction):
            c.execute("select 1")
        c.rollback()
        assert c.execute("select 1").fetchone() == (1,)


def test_error_sqlstates(conn):
    with pytest.raises(psycopg.errors.UndefinedColumn):
        conn.execute("select nope from demo.trips")
    with pytest.raises(psycopg.errors.SyntaxError):
        conn.execute("selec 1")
    with pytest.raises(psycopg.errors.DivisionByZero):
        conn.execute("select 1 / 0")
    with pytest.raises(psycopg.errors.UndefinedFunction):
        conn.execute("select no_such_function(1)")
    assert conn.execute("select 2").fetchone() == (2,)


# Long but bounded, so the test is cheap on any backend (test_cancel_runaway.py cancels real runaways).
SLOW_BOUNDED = "select count(*), sum(a.fare + b.fare) from demo.trips a join demo.trips b on a.id = b.id"
# Streams 20M rows batch by batch: cancellation lands at the next batch boundary.
SLOW_STREAMING = "select a.id, b.city from demo.trips a cross join demo.cities b"


def test_statement_timeout(conn):
    conn.execute("set statement_timeout = 1")
    with pytest.raises(psycopg.errors.QueryCanceled):
        conn.execute(SLOW_BOUNDED)
    conn.execute("reset statement_timeout")
    assert conn.execute("show statement_timeout").fetchone() == ("0",)
    assert conn.execute("select 1").fetchone() == (1,)


def test_cancel(server):
    with psycopg.connect(server.dsn(), autocommit=True) as c:
        timer = threading.Timer(0.5, c.cancel)
        timer.start()
        started = time.monotonic()
        with pytest.raises(psycopg.errors.QueryCanceled):
            c.execute(SLOW_STREAMING)
        assert time.monotonic() - started < 30
        assert c.execute("select 1").fetchone() == (1,)


def test_session_settings(conn):
    conn.execute("set timezone = 'America/New_York'")
    assert conn.execute("show timezone").fetchone() == ("America/New_York",)
    assert conn.info.parameter_status("TimeZone") == "America/New_York"
    ts = conn.execute("select pickup_ts from demo.trips where id = 1").fetchone()[0]
    assert ts.utcoffset() == dt.timedelta(hours=-5)
    assert ts == trip(1)["pickup_ts"]
    conn.execute("set application_name = 'icetest'")
    assert conn.info.parameter_status("application_name") == "icetest"
    assert conn.execute("select current_setting('application_name')").fetchone() == ("icetest",)
    assert conn.execute("select version()").fetchone()[0].startswith("PostgreSQL 15")
    assert conn.execute("select current_database(), current_user").fetchone() == ("icegres", "icegres")


def test_search_path_resolution(conn):
    conn.execute("set search_path = demo, public")
    assert conn.execute("select count(*) from cities").fetchone() == (20,)
    assert conn.execute("select current_schema()").fetchone() == ("demo",)


def test_empty_query_and_multiple_statements(conn):
    cur = conn.execute("select 1; select 2")
    assert cur.fetchall() == [(1,)]
    assert cur.nextset() and cur.fetchall() == [(2,)]


def test_server_side_cursor(server):
    with psycopg.connect(server.dsn()) as c:
        with c.cursor(name="big") as cur:
            cur.itersize = 1000
            cur.execute("select id from demo.trips where id <= 2500 order by id")
            assert [r[0] for r in cur] == list(range(1, 2501))


def test_parameterised_writes_into_a_table_just_made(conn):
    """A table created by this session and not yet read by any statement, written with
    parameters (psycopg's Parse, Describe, Bind): INSERT … SELECT with a column list was 42P01 — a
    Parse pinned the tables mounted and skipped the new one — and WITH … INSERT a query DataFusion
    refused."""
    suffix = uuid.uuid4().hex[:8]
    fresh, src = f"fresh_{suffix}", f"src_{suffix}"
    conn.execute(f"create table {src} (id int, v int)")
    conn.execute(f"insert into {src} values (1, 2), (3, 4), (5, 6)")
    conn.execute(f"create table {fresh} (a int, b text)")
    cur = conn.cursor()
    cur.execute(f"insert into {fresh} (a) select id from {src} where v > %s", (3,))
    assert cur.statusmessage == "INSERT 0 2"
    cur.execute(f"with c as (select id from {src} where v > %s) insert into {fresh} (a, b) select id, 'w' from c "
                "returning a", (5,), prepare=True)
    assert cur.fetchall() == [(5,)]
    cur.execute(f"with c as (select id from {src} where v < %s) update {fresh} set b = 'u' from c "
                f"where {fresh}.a = c.id", (5,))
    assert cur.statusmessage == "UPDATE 1"
    assert conn.execute(f"select a, b from {fresh} order by a, b").fetchall() == [(3, "u"), (5, "w"), (5, None)]
    conn.execute(f"drop table {fresh}")
    conn.execute(f"drop table {src}")
