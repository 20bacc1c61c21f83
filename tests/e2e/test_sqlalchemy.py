"""SQLAlchemy 2.1 over the psycopg, psycopg2 and asyncpg dialects: first-connect probes, reflection
through the Inspector (pg_catalog queries), bound-parameter selects, and pandas read_sql /
read_sql_table on top of an Engine."""

from __future__ import annotations

import asyncio
import datetime as dt

import pandas as pd
import pyarrow.compute as pc
import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import create_async_engine

from tests.e2e.expected import city_counts, trip, trips

pytestmark = pytest.mark.e2e

SYNC_DRIVERS = ["postgresql+psycopg", "postgresql+psycopg2"]

TRIPS_COLUMNS = [
    ("id", sa.BigInteger, False), ("city", sa.Text, True), ("fare", sa.Double, True),
    ("distance", sa.Double, True), ("pickup_ts", sa.TIMESTAMP, True), ("passengers", sa.Integer, True),
    ("vendor", sa.Text, True), ("paid", sa.Boolean, True),
]


@pytest.fixture(params=SYNC_DRIVERS)
def engine(server, request):
    eng = sa.create_engine(server.url(request.param), pool_pre_ping=False)
    try:
        yield eng
    finally:
        eng.dispose()


def picked_up_by(trip_id: int, among_first: int = 1000) -> int:
    """How many of trips 1..among_first were picked up no later than trip `trip_id`."""
    t = trips().slice(0, among_first)
    return pc.sum(pc.less_equal(t["pickup_ts"], trip(trip_id)["pickup_ts"])).as_py()


def test_first_connect_and_dialect_probes(engine):
    with engine.connect() as c:
        assert engine.dialect.server_version_info[:1] == (15,)
        assert c.execute(sa.text("select current_schema()")).scalar_one() == "public"
        assert engine.dialect.default_schema_name == "public"
        row = c.execute(sa.text("select version()")).one()
        assert isinstance(row[0], str) and row[0].startswith("PostgreSQL 15")


def test_select_with_bound_parameters(engine):
    with engine.connect() as c:
        rows = c.execute(
            sa.text("select id, city, fare, pickup_ts, passengers, paid from demo.trips "
                    "where id between :lo and :hi order by id"),
            {"lo": 100, "hi": 102},
        ).all()
        assert [tuple(r) for r in rows] == [
            (i, trip(i)["city"], trip(i)["fare"], trip(i)["pickup_ts"], trip(i)["passengers"], trip(i)["paid"])
            for i in (100, 101, 102)
        ]
        assert [type(v) for v in rows[0]] == [int, str, float, dt.datetime, int, bool]
        assert rows[0].pickup_ts.utcoffset() == dt.timedelta(0)
        n = c.execute(sa.text("select count(*) from demo.trips where id <= 1000 and pickup_ts <= :ts"),
                      {"ts": trip(500)["pickup_ts"]}).scalar_one()
        assert type(n) is int and n == picked_up_by(500)


def test_core_table_select_group_by(engine):
    md = sa.MetaData()
    trips = sa.Table("trips", md, sa.Column("id", sa.BigInteger), sa.Column("city", sa.Text), schema="demo")
    stmt = sa.select(trips.c.city, sa.func.count().label("n")).group_by(trips.c.city)
    with engine.connect() as c:
        got = {city: n for city, n in c.execute(stmt)}
        assert got == city_counts()
        one = c.execute(sa.select(trips.c.city).where(trips.c.id == sa.bindparam("x")), {"x": 77}).scalar_one()
        assert one == trip(77)["city"]


def test_inspector(engine):
    insp = sa.inspect(engine)
    assert "demo" in insp.get_schema_names()
    assert sorted(insp.get_table_names(schema="demo")) == ["cities", "trips"]
    assert insp.has_table("trips", schema="demo") is True
    assert insp.has_table("missing", schema="demo") is False
    cols = insp.get_columns("trips", schema="demo")
    assert [c["name"] for c in cols] == [name for name, _, _ in TRIPS_COLUMNS]
    for col, (name, type_, nullable) in zip(cols, TRIPS_COLUMNS, strict=True):
        assert isinstance(col["type"], type_), (name, col["type"])
        assert col["nullable"] is nullable, name
    ts = next(c for c in cols if c["name"] == "pickup_ts")["type"]
    assert ts.timezone is True
    city_cols = insp.get_columns("cities", schema="demo")
    assert [(c["name"], type(c["type"]).__name__, c["nullable"]) for c in city_cols] == [
        ("city", "TEXT", False), ("country", "TEXT", True), ("population", "BIGINT", True)]
    pk = insp.get_pk_constraint("trips", schema="demo")
    assert pk["constrained_columns"] == []  # the seed declares no Iceberg identifier fields
    assert insp.get_indexes("trips", schema="demo") == []
    assert insp.get_foreign_keys("trips", schema="demo") == []


def test_reflect_table_and_select(engine):
    md = sa.MetaData()
    cities = sa.Table("cities", md, schema="demo", autoload_with=engine)
    assert [c.name for c in cities.columns] == ["city", "country", "population"]
    with engine.connect() as c:
        n = c.execute(sa.select(sa.func.count()).select_from(cities).where(cities.c.population > 0)).scalar_one()
        assert n == 20


def test_pandas_read_sql(engine):
    df = pd.read_sql("select city, count(*) as n from demo.trips group by city order by city", engine)
    assert list(df.columns) == ["city", "n"]
    assert dict(zip(df["city"], df["n"], strict=True)) == city_counts()
    assert df["n"].dtype.kind == "i"
    df2 = pd.read_sql(sa.text("select id, fare, paid from demo.trips where id <= :n order by id"), engine,
                      params={"n": 5})
    assert df2["id"].tolist() == [1, 2, 3, 4, 5]
    assert df2["fare"].tolist() == [trip(i)["fare"] for i in range(1, 6)]
    assert df2["fare"].dtype.kind == "f" and df2["paid"].dtype.kind == "b"


def test_pandas_read_sql_table(engine):
    df = pd.read_sql_table("cities", engine, schema="demo")
    assert list(df.columns) == ["city", "country", "population"]
    assert len(df) == 20
    assert df["population"].dtype.kind == "i"
    assert set(city_counts()) <= set(df["city"])


def test_asyncpg_dialect(server):
    async def body():
        eng = create_async_engine(server.url("postgresql+asyncpg"))
        try:
            async with eng.connect() as c:
                rows = (await c.execute(
                    sa.text("select id, fare, pickup_ts, paid from demo.trips where id = :id"), {"id": 31337})).all()
                e = trip(31337)
                assert [tuple(r) for r in rows] == [(31337, e["fare"], e["pickup_ts"], e["paid"])]
                assert [type(v) for v in rows[0]] == [int, float, dt.datetime, bool]
                names = await c.run_sync(lambda sc: sa.inspect(sc).get_table_names(schema="demo"))
                assert sorted(names) == ["cities", "trips"]
                cols = await c.run_sync(lambda sc: sa.inspect(sc).get_columns("cities", schema="demo"))
                assert [(col["name"], type(col["type"]).__name__) for col in cols] == [
                    ("city", "TEXT"), ("country", "TEXT"), ("population", "BIGINT")]
                has = await c.run_sync(lambda sc: sa.inspect(sc).has_table("cities", schema="demo"))
                assert has is True
        finally:
            await eng.dispose()

    asyncio.run(asyncio.wait_for(body(), 60))
