"""ibis 12 postgres backend (psycopg 3 underneath): SET TIMEZONE, CURRENT_DATABASE/CURRENT_SCHEMA,
BEGIN/COMMIT around every call, `= ANY($1)` with an untyped '{demo}' for list_tables, schema
reflection and a compiled group-by executed into pandas."""

from __future__ import annotations

import datetime as dt

import ibis
import ibis.expr.datatypes as idt
import pytest

from tests.e2e.expected import city_counts, trip

pytestmark = pytest.mark.e2e


@pytest.fixture
def con(server):
    c = ibis.postgres.connect(host=server.host, port=server.port, user=server.user, database=server.database)
    try:
        yield c
    finally:
        c.disconnect()


def test_current_database_and_list_tables(con):
    assert con.current_database == "public"  # ibis: database = schema, catalog = database
    assert con.current_catalog == "icegres"
    assert sorted(con.list_tables(database="demo")) == ["cities", "trips"]
    assert con.list_tables(database="demo", like="^cit") == ["cities"]


def test_table_schema(con):
    t = con.table("trips", database="demo")
    schema = t.schema()
    assert list(schema.names) == ["id", "city", "fare", "distance", "pickup_ts", "passengers", "vendor", "paid"]
    assert schema["id"] == idt.Int64(nullable=False)
    assert schema["city"] == idt.String()
    assert schema["fare"] == idt.Float64()
    assert schema["distance"] == idt.Float64()
    assert schema["vendor"] == idt.String()
    assert schema["pickup_ts"] == idt.Timestamp(timezone="UTC", scale=6)  # format_type: timestamp with time zone
    assert schema["passengers"] == idt.Int32()
    assert schema["paid"] == idt.Boolean()
    cities = con.table("cities", database="demo").schema()
    assert dict(cities.items()) == {"city": idt.String(nullable=False), "country": idt.String(),
                                    "population": idt.Int64()}


def test_group_by_execute(con):
    t = con.table("trips", database="demo")
    df = t.group_by("city").aggregate(n=t.count()).order_by("city").execute()
    assert list(df.columns) == ["city", "n"]
    assert dict(zip(df["city"], df["n"], strict=True)) == city_counts()
    assert df["n"].dtype.kind == "i"


def test_filter_and_scalar(con):
    t = con.table("trips", database="demo")
    row = t.filter(t.id == 4242).select("id", "fare", "pickup_ts", "paid").execute()
    e = trip(4242)
    assert row["id"].tolist() == [4242]
    assert row["fare"].tolist() == [e["fare"]]
    assert row["paid"].tolist() == [e["paid"]]
    ts = row["pickup_ts"].iloc[0].to_pydatetime()
    assert isinstance(ts, dt.datetime) and ts == e["pickup_ts"]
    assert t.filter(t.id <= 1000).count().execute() == 1000
    assert isinstance(t.fare.max().execute(), float)
