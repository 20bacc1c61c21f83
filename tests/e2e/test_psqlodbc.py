"""psqlODBC (Unicode driver) through pyodbc: several statements in one Query at connect, BEGIN;…
batching, _PLAN statements dropped with DEALLOCATE, per-query savepoints, and the catalog calls
behind SQLTables / SQLColumns. DSN-less, so no odbcinst.ini editing is needed."""

from __future__ import annotations

import datetime as dt
import glob

import pyodbc
import pytest

from tests.e2e.expected import city_counts, trip

pytestmark = pytest.mark.e2e

DRIVER_GLOBS = ("/usr/lib/x86_64-linux-gnu/odbc/psqlodbcw.so", "/usr/lib/aarch64-linux-gnu/odbc/psqlodbcw.so",
                "/usr/lib/*/odbc/psqlodbcw.so")
SQL_BIGINT, SQL_INTEGER, SQL_FLOAT, SQL_BIT = -5, 4, 6, -7  # psqlODBC maps float8 to SQL_FLOAT
SQL_WVARCHAR, SQL_WLONGVARCHAR, SQL_VARCHAR, SQL_LONGVARCHAR = -9, -10, 12, -1
SQL_TYPE_TIMESTAMP = 93


def _driver() -> str:
    for pattern in DRIVER_GLOBS:
        found = sorted(glob.glob(pattern))
        if found:
            return found[0]
    raise FileNotFoundError("psqlodbcw.so not found; run infra/system-deps.sh")


def conn_str(server, **extra: str) -> str:
    # BoolsAsChar=0: bool as SQL_BIT / Python bool (the driver's default reports bool as char '1'/'0')
    parts = {"DRIVER": _driver(), "SERVER": server.host, "PORT": str(server.port), "DATABASE": server.database,
             "UID": server.user, "BoolsAsChar": "0", **extra}
    return ";".join(f"{k}={v}" for k, v in parts.items()) + ";"


@pytest.fixture
def conn(server):
    c = pyodbc.connect(conn_str(server), autocommit=True, timeout=30)
    try:
        yield c
    finally:
        c.close()


def test_group_by(conn):
    cur = conn.cursor()
    rows = cur.execute("select city, count(*) as n from demo.trips group by city").fetchall()
    assert {r.city: r.n for r in rows} == city_counts()
    assert all(type(r.city) is str and type(r.n) is int for r in rows)
    assert [d[0] for d in cur.description] == ["city", "n"]
    assert cur.description[0][1] is str and cur.description[1][1] is int


def test_query_with_parameter_and_types(conn):
    cur = conn.cursor()
    sql = "select id, city, fare, distance, pickup_ts, passengers, vendor, paid from demo.trips where id = ?"
    for trip_id in (4242, 4243, 4244):  # the same statement re-executed with a new parameter
        row = cur.execute(sql, trip_id).fetchone()
        e = trip(trip_id)
        assert tuple(row[:4]) == (trip_id, e["city"], e["fare"], e["distance"])
        assert tuple(row[5:]) == (e["passengers"], e["vendor"], e["paid"])
        # ODBC timestamps are naive; the server session TimeZone is UTC
        assert row[4] == e["pickup_ts"].astimezone(dt.UTC).replace(tzinfo=None)
        assert [type(v) for v in row] == [int, str, float, float, dt.datetime, int, str, bool]
    row = cur.execute("select count(*) from demo.cities where city = ? and population > ?", (e["city"], 0)).fetchone()
    assert row[0] == 1


def test_default_bools_as_char(server):
    c = pyodbc.connect(conn_str(server, BoolsAsChar="1"), autocommit=True, timeout=30)
    try:
        row = c.cursor().execute("select paid from demo.trips where id = ?", 4242).fetchone()
        assert row[0] == ("1" if trip(4242)["paid"] else "0")
    finally:
        c.close()


def test_transaction_mode_batches_begin(server):
    # autocommit off: psqlODBC sends "BEGIN;SELECT …" in one Query and wraps statements in
    # SAVEPOINT _per_query_svp_ / RELEASE.
    c = pyodbc.connect(conn_str(server), autocommit=False, timeout=30)
    try:
        cur = c.cursor()
        assert cur.execute("select count(*) from demo.trips where id <= ?", 777).fetchone()[0] == 777
        assert cur.execute("select population from demo.cities where city = ?", trip(1)["city"]).fetchone()[0] > 0
        c.commit()
        with pytest.raises(pyodbc.Error) as ei:
            cur.execute("select * from demo.missing")
        assert "42P01" in str(ei.value)
        c.rollback()
        assert cur.execute("select 1").fetchone()[0] == 1
        c.commit()
    finally:
        c.close()


def test_sqltables(conn):
    cur = conn.cursor()
    rows = cur.tables(schema="demo").fetchall()
    got = sorted((r.table_schem, r.table_name, r.table_type) for r in rows)
    assert got == [("demo", "cities", "TABLE"), ("demo", "trips", "TABLE")]
    rows = cur.tables(table="cities", schema="demo", tableType="TABLE").fetchall()
    assert [(r.table_cat, r.table_schem, r.table_name) for r in rows] == [("icegres", "demo", "cities")]


def test_sqlcolumns(conn):
    cur = conn.cursor()
    cols = cur.columns(table="trips", schema="demo").fetchall()
    assert [c.column_name for c in cols] == ["id", "city", "fare", "distance", "pickup_ts", "passengers", "vendor",
                                             "paid"]
    by = {c.column_name: c for c in cols}
    assert [c.ordinal_position for c in cols] == list(range(1, 9))
    assert by["id"].data_type == SQL_BIGINT and by["id"].type_name == "int8" and by["id"].nullable == 0
    assert by["passengers"].data_type == SQL_INTEGER and by["passengers"].type_name == "int4"
    assert by["fare"].data_type == SQL_FLOAT and by["fare"].type_name == "float8"
    assert by["paid"].data_type == SQL_BIT and by["paid"].type_name == "bool"
    assert by["pickup_ts"].data_type == SQL_TYPE_TIMESTAMP and by["pickup_ts"].type_name == "timestamptz"
    assert by["city"].type_name == "text" and by["city"].data_type in (
        SQL_WVARCHAR, SQL_WLONGVARCHAR, SQL_VARCHAR, SQL_LONGVARCHAR)
    assert all(c.nullable == 1 for c in cols if c.column_name != "id")
    assert all(c.table_schem == "demo" and c.table_name == "trips" for c in cols)


def test_error_and_recover(conn):
    cur = conn.cursor()
    with pytest.raises(pyodbc.ProgrammingError) as ei:
        cur.execute("select nope from demo.trips")
    assert "42703" in str(ei.value)
    assert cur.execute("select ?::int + 1", 1).fetchone()[0] == 2
