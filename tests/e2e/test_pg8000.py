"""pg8000: the unnamed extended statement over three Sync cycles (Parse/Sync, Describe/Sync,
Bind/Execute/Sync) with text parameters of OID 0, through both the native and DB-API interfaces."""

from __future__ import annotations

import datetime as dt

import pg8000.dbapi
import pg8000.native
import pytest

from tests.e2e.expected import city_counts, trip

pytestmark = pytest.mark.e2e


@pytest.fixture
def native(server):
    c = pg8000.native.Connection(server.user, host=server.host, port=server.port, database=server.database)
    try:
        yield c
    finally:
        c.close()


@pytest.fixture
def dbapi(server):
    c = pg8000.dbapi.connect(user=server.user, host=server.host, port=server.port, database=server.database)
    try:
        yield c
    finally:
        c.close()


def test_native_group_by(native):
    rows = native.run("select city, count(*) as n from demo.trips group by city")
    assert {c: n for c, n in rows} == city_counts()
    assert [(col["name"], col["type_oid"]) for col in native.columns] == [("city", 25), ("n", 20)]


def test_native_named_params_and_types(native):
    rows = native.run(
        "select id, city, fare, distance, pickup_ts, passengers, vendor, paid from demo.trips where id = :id",
        id=4242,
    )
    e = trip(4242)
    assert rows == [[4242, e["city"], e["fare"], e["distance"], e["pickup_ts"], e["passengers"], e["vendor"], e["paid"]]]
    assert [type(v) for v in rows[0]] == [int, str, float, float, dt.datetime, int, str, bool]
    assert rows[0][4].utcoffset() == dt.timedelta(0)
    assert [col["type_oid"] for col in native.columns] == [20, 25, 701, 701, 1184, 23, 25, 16]


def test_native_params_of_many_types(native):
    rows = native.run(
        "select cast(:a as bigint) + 1, :s || 'x', cast(:f as double precision) * 2, cast(:b as boolean), "
        "cast(:d as date)",
        a=41, s="ab", f=1.25, b=True, d=dt.date(2024, 2, 29),
    )
    assert rows == [[42, "abx", 2.5, True, dt.date(2024, 2, 29)]]
    assert [type(v) for v in rows[0]] == [int, str, float, bool, dt.date]


def test_native_prepared_statement_reused(native):
    ps = native.prepare("select count(*) from demo.trips where id <= :n and city = :c")
    try:
        e = trip(10)
        for n in (10, 100, 1000):
            [[count]] = ps.run(n=n, c=e["city"])
            assert isinstance(count, int) and 1 <= count <= n
        [[zero]] = ps.run(n=0, c=e["city"])
        assert zero == 0
    finally:
        ps.close()


def test_native_error_then_recover(native):
    with pytest.raises(pg8000.native.DatabaseError) as ei:
        native.run("select * from demo.missing")
    assert ei.value.args[0]["C"] == "42P01"
    assert native.run("select 1") == [[1]]


def test_dbapi_format_params(dbapi):
    cur = dbapi.cursor()
    cur.execute("select city, country, population from demo.cities where population > %s order by city", (0,))
    rows = cur.fetchall()
    assert len(rows) == 20
    assert all(isinstance(c, str) and isinstance(p, int) for c, _, p in rows)
    assert [d[0] for d in cur.description] == ["city", "country", "population"]
    assert [d[1] for d in cur.description] == [25, 25, 20]
    cur.execute("select id, paid, fare from demo.trips where id between %s and %s order by id", (7, 9))
    got = cur.fetchall()
    assert [tuple(r) for r in got] == [(i, trip(i)["paid"], trip(i)["fare"]) for i in (7, 8, 9)]
    assert [type(v) for v in got[0]] == [int, bool, float]
    dbapi.commit()


def test_dbapi_transaction_error_and_rollback(dbapi):
    cur = dbapi.cursor()
    cur.execute("select count(*) from demo.cities")
    assert cur.fetchone() == [20]
    with pytest.raises(pg8000.dbapi.DatabaseError) as ei:
        cur.execute("select nope from demo.trips")
    assert ei.value.args[0]["C"] == "42703"
    dbapi.rollback()
    cur.execute("select %s::text, %s::int", ("x", 3))
    assert cur.fetchone() == ["x", 3]
