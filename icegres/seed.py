"""`icegres seed`: deterministic demo tables (demo.trips, demo.cities).

The same seed gives the same bytes of data on every machine, so benchmark numbers and test
expectations can be compared across runs.
"""

from __future__ import annotations

import sys
from collections.abc import Callable

import numpy as np
import pyarrow as pa

from icegres.engine.catalog import Lakehouse

TRIPS_ROWS = 1_000_000
CHUNK_ROWS = 250_000  # one data file per chunk, sorted by id, so files prune on id too
SEED = 20261202
START_TS_US = 1_704_067_200_000_000  # 2024-01-01T00:00:00Z

CITIES: tuple[tuple[str, str, int], ...] = (
    ("Amsterdam", "Netherlands", 931_298),
    ("Berlin", "Germany", 3_878_100),
    ("Bogota", "Colombia", 7_968_095),
    ("Cairo", "Egypt", 10_230_350),
    ("Chicago", "United States", 2_664_452),
    ("Delhi", "India", 16_787_941),
    ("Istanbul", "Turkey", 15_655_924),
    ("Jakarta", "Indonesia", 11_248_839),
    ("Lagos", "Nigeria", 15_388_000),
    ("Lima", "Peru", 10_092_000),
    ("London", "United Kingdom", 8_866_180),
    ("Madrid", "Spain", 3_332_035),
    ("Mexico City", "Mexico", 9_209_944),
    ("Mumbai", "India", 12_442_373),
    ("New York", "United States", 8_258_035),
    ("Paris", "France", 2_102_650),
    ("Seoul", "South Korea", 9_386_034),
    ("Sydney", "Australia", 5_450_496),
    ("Tokyo", "Japan", 14_094_034),
    ("Toronto", "Canada", 2_794_356),
)
VENDORS = ("CMT", "VTS", "DDS")


def trips_schema():
    from pyiceberg.schema import Schema
    from pyiceberg.types import (
        BooleanType,
        DoubleType,
        IntegerType,
        LongType,
        NestedField,
        StringType,
        TimestamptzType,
    )

    return Schema(
        NestedField(1, "id", LongType(), required=True),
        NestedField(2, "city", StringType(), required=False),
        NestedField(3, "fare", DoubleType(), required=False),
        NestedField(4, "distance", DoubleType(), required=False),
        NestedField(5, "pickup_ts", TimestamptzType(), required=False),
        NestedField(6, "passengers", IntegerType(), required=False),
        NestedField(7, "vendor", StringType(), required=False),
        NestedField(8, "paid", BooleanType(), required=False),
    )


def cities_schema():
    from pyiceberg.schema import Schema
    from pyiceberg.types import LongType, NestedField, StringType

    return Schema(
        NestedField(1, "city", StringType(), required=True),
        NestedField(2, "country", StringType(), required=False),
        NestedField(3, "population", LongType(), required=False),
    )


def trips_chunk(start_id: int, rows: int) -> pa.Table:
    """Rows start_id .. start_id+rows-1; each chunk is generated from its own seed."""
    rng = np.random.default_rng(SEED + start_id)
    ids = np.arange(start_id, start_id + rows, dtype=np.int64)
    distance = np.round(rng.gamma(2.0, 2.5, rows), 2)
    fare = np.round(3.0 + distance * 2.1 + rng.normal(0, 1.5, rows).clip(-2, None), 2)
    city_names = np.array([c[0] for c in CITIES], dtype=object)
    city = city_names[rng.integers(0, len(CITIES), rows)]
    ts = START_TS_US + ids * 30_000_000 + rng.integers(0, 30_000_000, rows)
    passengers = rng.integers(1, 7, rows).astype(np.int32)
    vendor = np.array(VENDORS, dtype=object)[rng.integers(0, len(VENDORS), rows)]
    paid = rng.random(rows) < 0.93
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "city": pa.array(city, pa.string()),
            "fare": pa.array(fare, pa.float64()),
            "distance": pa.array(distance, pa.float64()),
            "pickup_ts": pa.array(ts, pa.timestamp("us", tz="UTC")),
            "passengers": pa.array(passengers, pa.int32()),
            "vendor": pa.array(vendor, pa.string()),
            "paid": pa.array(paid, pa.bool_()),
        },
        schema=pa.schema(
            [
                pa.field("id", pa.int64(), nullable=False),
                pa.field("city", pa.string()),
                pa.field("fare", pa.float64()),
                pa.field("distance", pa.float64()),
                pa.field("pickup_ts", pa.timestamp("us", tz="UTC")),
                pa.field("passengers", pa.int32()),
                pa.field("vendor", pa.string()),
                pa.field("paid", pa.bool_()),
            ]
        ),
    )


def cities_table() -> pa.Table:
    return pa.table(
        {
            "city": pa.array([c[0] for c in CITIES], pa.string()),
            "country": pa.array([c[1] for c in CITIES], pa.string()),
            "population": pa.array([c[2] for c in CITIES], pa.int64()),
        },
        schema=pa.schema(
            [
                pa.field("city", pa.string(), nullable=False),
                pa.field("country", pa.string()),
                pa.field("population", pa.int64()),
            ]
        ),
    )


def _row_count(table) -> int:
    snapshot = table.current_snapshot()
    if snapshot is None or snapshot.summary is None:
        return 0
    return int(snapshot.summary.get("total-records", "0"))


def seed(
    lakehouse: Lakehouse,
    *,
    trips_rows: int = TRIPS_ROWS,
    progress: Callable[[str], None] = lambda line: print(line, file=sys.stderr, flush=True),
) -> bool:
    """Create and fill the demo tables unless they are already complete. Returns True if it wrote."""
    lakehouse.create_namespace_if_missing("demo")
    wrote = False
    if not lakehouse.table_exists("demo", "cities"):
        table = lakehouse.create_table("demo", "cities", cities_schema())
        table.append(cities_table())
        progress(f"demo.cities: {len(CITIES)} rows")
        wrote = True
    trips = (
        lakehouse.load_table("demo", "trips")
        if lakehouse.table_exists("demo", "trips")
        else lakehouse.create_table("demo", "trips", trips_schema())
    )
    have = _row_count(trips)
    if have == trips_rows:
        progress(f"demo.trips: already seeded ({have} rows)")
        return wrote
    if have:
        # A half-written seed cannot be resumed safely (chunks are whole commits, but the
        # count may come from another writer): start again from an empty table.
        trips.delete()
    with trips.transaction() as tx:
        for start in range(1, trips_rows + 1, CHUNK_ROWS):
            rows = min(CHUNK_ROWS, trips_rows + 1 - start)
            tx.append(trips_chunk(start, rows))
            progress(f"demo.trips: {start + rows - 1:>9,}/{trips_rows:,} rows")
    return True
