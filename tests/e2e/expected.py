"""Expected answers computed independently of icegres: straight from the seed generator with pyarrow."""

from __future__ import annotations

import functools

import pyarrow as pa
import pyarrow.compute as pc

from icegres.seed import CHUNK_ROWS, TRIPS_ROWS, trips_chunk


@functools.cache
def trips() -> pa.Table:
    chunks = [trips_chunk(start, min(CHUNK_ROWS, TRIPS_ROWS + 1 - start)) for start in range(1, TRIPS_ROWS + 1, CHUNK_ROWS)]
    return pa.concat_tables(chunks)


def city_counts() -> dict[str, int]:
    t = trips().group_by("city").aggregate([("id", "count")])
    return dict(zip(t["city"].to_pylist(), t["id_count"].to_pylist(), strict=True))


def trip(trip_id: int) -> dict:
    t = trips()
    return t.filter(pc.equal(t["id"], trip_id)).to_pylist()[0]
