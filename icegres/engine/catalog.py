"""The lakehouse catalog: the only module that imports pyiceberg.catalog.

The embedded default is pyiceberg's SQL catalog on SQLite with a local warehouse directory.
Everything here blocks (SQL, file and object-store I/O): callers run it in worker threads.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog
    from pyiceberg.table import Table

CATALOG_NAME = "icegres"

# Applied to every table icegres creates. pyiceberg's default row group is 1,048,576 rows, which
# no engine can prune (DESIGN.md: a point lookup on 1M rows went 44 ms -> 10 ms with 64k groups).
DEFAULT_TABLE_PROPERTIES = {
    "write.parquet.row-group-limit": "65536",
    "write.target-file-size-bytes": str(128 * 1024 * 1024),
    "write.parquet.compression-codec": "zstd",
}


@dataclass(frozen=True)
class TableEntry:
    namespace: str
    name: str
    metadata_location: str


@dataclass(frozen=True)
class Listing:
    """Every namespace and table of the catalog at one instant, with each table's metadata file."""

    namespaces: tuple[str, ...]
    tables: tuple[TableEntry, ...]


class Lakehouse:
    """One catalog object per process (creating one costs a config fetch on REST catalogs)."""

    def __init__(self, catalog: Catalog, description: str, sqlite_path: Path | None = None) -> None:
        self.catalog = catalog
        self.description = description
        self._lock = threading.Lock()
        self._sqlite_path = sqlite_path
        self._watch: Any = None  # sqlite3 connection used only to read PRAGMA data_version

    @classmethod
    def embedded(cls, data_dir: Path) -> Lakehouse:
        from pyiceberg.catalog.sql import SqlCatalog

        data_dir = data_dir.resolve()
        warehouse = data_dir / "warehouse"
        warehouse.mkdir(parents=True, exist_ok=True)
        catalog = SqlCatalog(
            CATALOG_NAME,
            uri=f"sqlite:///{data_dir / 'catalog.db'}",
            warehouse=warehouse.as_uri(),
        )
        return cls(catalog, f"sqlite catalog at {data_dir / 'catalog.db'}", data_dir / "catalog.db")

    def change_token(self) -> int | None:
        """A value that changes whenever any connection commits to the catalog; None if unknown.

        SQLite's `PRAGMA data_version` (~10 us) changes whenever another connection — in this
        process or any other — commits. It lets a statement skip the listing query when nothing
        changed, without giving up exact freshness. The watching connection never writes.
        """
        if self._sqlite_path is None:
            return None
        import sqlite3

        with self._lock:
            if self._watch is None:
                self._watch = sqlite3.connect(self._sqlite_path, check_same_thread=False)
            return int(self._watch.execute("PRAGMA data_version").fetchone()[0])

    def listing(self) -> Listing:
        """The cheap per-statement freshness check: one query for every table's metadata location.

        On SQL catalogs this reads pyiceberg's own tables directly (well under a millisecond on
        SQLite) instead of loading each table's metadata.
        """
        from sqlalchemy import text

        engine = self.catalog.engine  # type: ignore[attr-defined]
        with engine.connect() as conn:
            tables = conn.execute(
                text(
                    "SELECT table_namespace, table_name, metadata_location FROM iceberg_tables "
                    "WHERE catalog_name = :c"
                ),
                {"c": self.catalog.name},
            ).all()
            namespaces = conn.execute(
                text(
                    "SELECT DISTINCT namespace FROM iceberg_namespace_properties "
                    "WHERE catalog_name = :c"
                ),
                {"c": self.catalog.name},
            ).all()
        names = {row[0] for row in namespaces} | {row[0] for row in tables}
        entries = tuple(
            sorted(
                (TableEntry(ns, name, loc) for ns, name, loc in tables if loc),
                key=lambda e: (e.namespace, e.name),
            )
        )
        return Listing(tuple(sorted(names)), entries)

    def load_table(self, namespace: str, name: str) -> Table:
        return self.catalog.load_table((*namespace.split("."), name))

    def create_namespace_if_missing(self, namespace: str) -> None:
        self.catalog.create_namespace_if_not_exists(namespace)

    def create_table(self, namespace: str, name: str, schema: Any, properties: dict[str, str] | None = None) -> Table:
        props = {**DEFAULT_TABLE_PROPERTIES, **(properties or {})}
        return self.catalog.create_table((namespace, name), schema=schema, properties=props)

    def table_exists(self, namespace: str, name: str) -> bool:
        return self.catalog.table_exists((namespace, name))
