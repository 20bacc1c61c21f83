"""asyncpg: Parse/Describe/Flush without Sync, binary parameters and results, max_rows=1 fetches,
named-portal cursors (PortalSuspended), pool reset query, and SQLSTATE → exception mapping.

pytest runs in trio mode, so each test drives its own asyncio loop with asyncio.run."""

from __future__ import annotations

import asyncio
import datetime as dt

import asyncpg
import pyarrow.compute as pc
import pytest

from tests.e2e.expected import city_counts, trip, trips

pytestmark = pytest.mark.e2e

TIMEOUT_S = 60


def picked_up_by(trip_id: int, among_first: int = 1000) -> int:
    """How many of trips 1..among_first were picked up no later than trip `trip_id`."""
    t = trips().slice(0, among_first)
    return pc.sum(pc.less_equal(t["pickup_ts"], trip(trip_id)["pickup_ts"])).as_py()


def run(coro):
    async def bounded():
        return await asyncio.wait_for(coro, TIMEOUT_S)
    return asyncio.run(bounded())


async def connect(server) -> asyncpg.Connection:
    return await asyncpg.connect(host=server.host, port=server.port, user=server.user, database=server.database)


def test_fetch_group_by(server):
    async def body():
        c = await connect(server)
        try:
            rows = await c.fetch("select city, count(*) as n from demo.trips group by city")
            assert {r["city"]: r["n"] for r in rows} == city_counts()
            assert all(type(r["city"]) is str and type(r["n"]) is int for r in rows)
            st = await c.prepare("select city, count(*) as n from demo.trips group by city")
            assert [(a.name, a.type.name) for a in st.get_attributes()] == [("city", "text"), ("n", "int8")]
        finally:
            await c.close()
    run(body())


def test_fetchrow_binary_types_with_params(server):
    async def body():
        c = await connect(server)
        try:
            row = await c.fetchrow(
                "select id, city, fare, distance, pickup_ts, passengers, vendor, paid from demo.trips where id = $1",
                4242,
            )
            e = trip(4242)
            assert tuple(row) == (4242, e["city"], e["fare"], e["distance"], e["pickup_ts"], e["passengers"],
                                  e["vendor"], e["paid"])
            assert [type(v) for v in row] == [int, str, float, float, dt.datetime, int, str, bool]
            assert row["pickup_ts"].tzinfo is not None
            # several named statements stay open, with parameters of different binary types
            assert await c.fetchval("select count(*) from demo.trips where id <= $1", 1234) == 1234
            assert await c.fetchval("select fare from demo.trips where id = $1", 7) == trip(7)["fare"]
            assert await c.fetchval("select count(*) from demo.cities where city = $1", e["city"]) == 1
            assert await c.fetchval("select $1::double precision * 2", 1.25) == 2.5
            assert await c.fetchval("select $1::boolean", False) is False
            assert await c.fetchval("select $1::date", dt.date(2024, 2, 29)) == dt.date(2024, 2, 29)
            assert await c.fetchrow("select id from demo.trips where id = $1", 0) is None
        finally:
            await c.close()
    run(body())


def test_timestamptz_parameters(server):
    cutoff = trip(500)["pickup_ts"]

    async def body():
        c = await connect(server)
        try:
            # compared with a column: the type comes from the column
            n = await c.fetchval("select count(*) from demo.trips where id <= 1000 and pickup_ts <= $1", cutoff)
            assert type(n) is int and n == picked_up_by(500)
            # an explicit cast: ParameterDescription must say timestamptz (1184), as PostgreSQL does
            st = await c.prepare("select $1::timestamptz")
            assert [t.name for t in st.get_parameters()] == ["timestamptz"]
            got = await c.fetchval("select $1::timestamptz", dt.datetime(2024, 2, 29, 12, tzinfo=dt.UTC))
            assert got == dt.datetime(2024, 2, 29, 12, tzinfo=dt.UTC)
        finally:
            await c.close()
    run(body())


def test_array_parameter(server):
    async def body():
        c = await connect(server)
        try:
            st = await c.prepare("select count(*) from demo.trips where id = any($1::bigint[])")
            # What asyncpg reports against a real PostgreSQL 15 for the same statement.
            assert [(t.name, t.kind) for t in st.get_parameters()] == [("int8[]", "array")]
            assert await st.fetchval([1, 2, 3, 9]) == 4
        finally:
            await c.close()
    run(body())


def test_cursor_in_transaction(server):
    async def body():
        c = await connect(server)
        try:
            async with c.transaction():
                ids = [r["id"] async for r in c.cursor("select id, paid from demo.trips where id <= $1 order by id",
                                                       25, prefetch=2)]
                assert ids == list(range(1, 26))
                cur = await c.cursor("select id, fare from demo.trips where id > $1 order by id", 999_990)
                first = await cur.fetch(3)
                assert [tuple(r) for r in first] == [(i, trip(i)["fare"]) for i in (999_991, 999_992, 999_993)]
                assert type(first[0]["fare"]) is float
                nxt = await cur.fetchrow()
                assert nxt["id"] == 999_994
            assert c.is_in_transaction() is False
        finally:
            await c.close()
    run(body())


def test_pool_acquire_release(server):
    async def body():
        pool = await asyncpg.create_pool(host=server.host, port=server.port, user=server.user,
                                         database=server.database, min_size=1, max_size=2)
        try:
            for i in range(3):  # each release runs the reset query: pg_advisory_unlock_all(); CLOSE ALL; ...
                async with pool.acquire() as c:
                    assert await c.fetchval("select count(*) from demo.cities where population > $1", i) == 20
            async with pool.acquire() as c1, pool.acquire() as c2:
                a, b = await asyncio.gather(c1.fetchval("select $1::int + 1", 1), c2.fetchval("select $1::text", "z"))
                assert (a, b) == (2, "z")
            assert await pool.fetchval("select count(*) from demo.trips where id <= $1", 10) == 10
        finally:
            await pool.close()
    run(body())


def test_error_mapping(server):
    async def body():
        c = await connect(server)
        try:
            with pytest.raises(asyncpg.UndefinedTableError) as ei:
                await c.fetch("select * from demo.missing")
            assert ei.value.sqlstate == "42P01"
            with pytest.raises(asyncpg.UndefinedColumnError):
                await c.fetchval("select nope from demo.trips where id = $1", 1)
            with pytest.raises(asyncpg.FeatureNotSupportedError):
                await c.execute("cluster demo.cities")
            assert await c.fetchval("select $1::int", 5) == 5
        finally:
            await c.close()
    run(body())
