"""pg_catalog's and information_schema's relations as Arrow tables, registered in a context.

Building them is proportional to the lake (~25-30 ms for a few tables and their columns, on
this machine), so the engine builds them outside its lock, and only for a statement that reads
them (engine/lake.py `_publish_catalog`): built under the lock at every change of the lake's
shape, they made every other session's statement wait that long, 100-250 ms on a loaded
machine (test_limits.py's bystander beside a 50 MB COMMENT ON, 2026-12-07).
"""

from __future__ import annotations

import threading

import datafusion
import pyarrow as pa

from icegres.engine import pg_catalog
from icegres.engine.pg_catalog import CatalogSnapshot


def register_private_catalog(ctx: datafusion.SessionContext, tables: dict[str, pa.Table]) -> None:
    """Register catalog relations (`build_catalog_tables` of a session's own snapshot) into that
    session's own context, leaving the process-wide latest snapshot alone."""
    catalog = ctx.catalog()
    for key, table in tables.items():
        schema_name, name = key.split(".", 1)
        schema = catalog.schema(schema_name)
        if name in schema.table_names():
            schema.deregister_table(name)
        schema.register_table(name, ctx.from_arrow(table))


_built: tuple[CatalogSnapshot, dict[str, pa.Table]] | None = None  # the last snapshot built, and its tables


def catalog_tables(snap: CatalogSnapshot) -> dict[str, pa.Table]:
    """`build_catalog_tables(snap)`, or the tables built last if they were built for an equal
    snapshot (most changes of the lake are new data, not new columns)."""
    global _built
    built = _built
    if built is not None and built[0] == snap:
        return built[1]
    tables = pg_catalog.build_catalog_tables(snap)
    _built = (snap, tables)
    return tables


def register_catalog(ctx: datafusion.SessionContext, snap: CatalogSnapshot,
                     tables: dict[str, pa.Table] | None = None, *, latest: bool = True) -> None:
    """(Re)register every catalog relation of `snap` (`tables`, if already built) into ctx's
    schemas pg_catalog and information_schema; `latest`: and answer catalog functions from it."""
    from datafusion.catalog import Schema

    catalog = ctx.catalog()
    for schema_name in ("pg_catalog", "information_schema"):
        if schema_name not in catalog.schema_names():
            catalog.register_schema(schema_name, Schema.memory_schema())
    register_private_catalog(ctx, catalog_tables(snap) if tables is None else tables)
    if latest:
        pg_catalog.note_snapshot(snap)


class CatalogPublication:
    """Which catalog shape's relations a context (the engine's master) has. They are built and
    registered one builder at a time (`building`), so a registration never goes back to an older
    shape; a shape noted while one is built is the next reader's to publish."""

    def __init__(self) -> None:
        self.shape: CatalogSnapshot | None = None
        self.building = threading.Lock()

    def needed(self, newest: CatalogSnapshot | None) -> bool:
        return newest is not None and newest is not self.shape
