"""session_zone: which columns a session in another TimeZone sees relabelled, and the catalog copy."""

from __future__ import annotations

import datetime as dt

import pyarrow as pa
import pytest
from datafusion import SessionContext

from icegres.engine.session_zone import is_utc, zoned, zoned_catalog, zoned_columns

pytestmark = pytest.mark.unit

UTC = dt.UTC


def _table() -> pa.Table:
    return pa.table({
        "id": pa.array([1], pa.int64()),
        "Tz": pa.array([dt.datetime(2024, 1, 1, 0, 30, tzinfo=UTC)], pa.timestamp("us", tz="UTC")),
        "ts": pa.array([dt.datetime(2024, 1, 1, 0, 30)], pa.timestamp("us")),
    })


def test_only_top_level_zoned_timestamps_are_relabelled() -> None:
    assert zoned_columns(_table().schema) == ["Tz"]
    assert is_utc("+00:00") and not is_utc("Europe/Berlin")


def test_a_relabelled_column_keeps_its_instants_and_names() -> None:
    ctx = SessionContext()
    out = zoned(ctx.from_arrow(_table()), "Europe/Berlin").to_arrow_table()
    assert out.schema.names == ["id", "Tz", "ts"]
    assert out.schema.field("Tz").type == pa.timestamp("us", tz="Europe/Berlin")
    assert out.column("Tz")[0].as_py() == dt.datetime(2024, 1, 1, 0, 30, tzinfo=UTC)
    assert out.column("ts").type == pa.timestamp("us")


def test_the_catalog_copy_relabels_lake_tables_and_shares_system_schemas() -> None:
    from datafusion.catalog import Schema

    master = SessionContext()
    master.catalog().register_schema("lake", Schema.memory_schema())
    master.catalog().register_schema("pg_catalog", Schema.memory_schema())
    master.catalog().schema("lake").register_table("t", master.from_arrow(_table()).into_view())
    master.catalog().schema("pg_catalog").register_table("s", master.from_arrow(_table()).into_view())
    copy = zoned_catalog(master, master.catalog(), "Asia/Tokyo", frozenset({"pg_catalog"}))
    assert copy.schema("lake").table("t").schema.field("Tz").type.tz == "Asia/Tokyo"
    assert copy.schema("pg_catalog").table("s").schema.field("Tz").type.tz == "UTC"
    session = SessionContext()
    session.register_catalog_provider("datafusion", copy)
    hour = session.sql("select extract(hour from \"Tz\") as h from lake.t").to_arrow_table()
    assert hour.column("h")[0].as_py() == 9  # 00:30 UTC is 09:30 in Tokyo
