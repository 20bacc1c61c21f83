"""Tables as a session in another TimeZone than UTC sees them: timestamptz columns in its zone.

Iceberg stores a timestamptz as a UTC instant, and the lake's tables reach DataFusion as
`Timestamp(us, "UTC")`. DataFusion computes on a zoned timestamp in the zone of its type: in a
session whose TimeZone is Europe/Berlin, `date_trunc('day', ts)`, `extract(hour from ts)` and
`to_char(ts, ...)` came out in UTC, and `ts >= '2024-01-01'` read the text as UTC midnight, where
PostgreSQL uses the session's TimeZone for all of them. Relabelling the columns with the session's
zone (`Timestamp(us, zone)`, the same instants) gives PostgreSQL's answers: DataFusion then reads
untyped text compared with the column, and truncates and extracts, in that zone.

A session at UTC (the default) reads the tables as mounted, untouched. One in another zone reads
them through a copy of the catalog (`zoned_catalog`, kept by the engine per zone and rebuilt when
the catalog changes) in which each table with a timestamptz column is a view relabelling those
columns; the other tables are the master's own.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pyarrow as pa

if TYPE_CHECKING:
    from datafusion import DataFrame, SessionContext

UTC = "+00:00"  # how types.engine_time_zone spells every UTC TimeZone for DataFusion


def is_utc(zone: str) -> bool:
    """`zone` is an `engine_time_zone` spelling."""
    return zone == UTC


def zoned_columns(schema: pa.Schema) -> list[str]:
    """The top-level timestamptz columns of `schema`."""
    return [f.name for f in schema if pa.types.is_timestamp(f.type) and f.type.tz is not None]


def zoned(df: DataFrame, zone: str) -> DataFrame:
    """`df` with its timestamptz columns relabelled to `zone` (as is when it has none)."""
    from datafusion import col

    schema = df.schema()
    names = set(zoned_columns(schema))
    if not names:
        return df
    return df.select(*[
        col(f'"{f.name}"').cast(pa.timestamp(f.type.unit, tz=zone)).alias(f.name) if f.name in names
        else col(f'"{f.name}"')
        for f in schema
    ])


def zoned_catalog(master: SessionContext, catalog: Any, zone: str, shared: frozenset[str]) -> Any:
    """A copy of `catalog` (the master's) whose tables of a timestamptz column are views that
    relabel it to `zone`; the schemas named in `shared` (pg_catalog, information_schema) are the
    master's own. Built outside any query (DataFusion cannot be re-entered while it plans, so a
    Python catalog provider could not make the views when asked)."""
    from datafusion.catalog import Catalog, Schema

    out = Catalog.memory_catalog()
    for name in catalog.names():
        source = catalog.schema(name)
        if name in shared:
            out.register_schema(name, source)
            continue
        copy = Schema.memory_schema()
        for table_name in source.names():
            table = source.table(table_name)
            if zoned_columns(table.schema):
                table = zoned(master.read_table(table), zone).into_view()
            copy.register_table(table_name, table)
        out.register_schema(name, copy)
    return out
