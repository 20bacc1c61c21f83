"""A lakehouse's sequences as PostgreSQL's catalog shows them: pg_sequence,
information_schema.sequences (an identity column's own sequence left out, as PostgreSQL leaves
out its internal dependents) and pg_get_serial_sequence. Rows are built from a
pg_catalog.CatalogIndex (`ix`), passed in: pg_catalog.py imports this module.
"""

from __future__ import annotations

import re
from typing import Any

Rows = list[dict[str, Any]]


def _sequences(ix: Any) -> list[tuple[Any, Any]]:
    return [(e, e.table.sequence) for e in ix.relations.values()
            if e.relkind == "S" and e.table is not None and e.table.sequence is not None]


def rows_pg_sequence(ix: Any) -> Rows:
    return [{"seqrelid": e.oid, "seqtypid": 20, "seqstart": d.start, "seqincrement": d.increment,
             "seqmax": d.max_value, "seqmin": d.min_value, "seqcache": d.cache, "seqcycle": d.cycle}
            for e, d in _sequences(ix)]


def rows_sequences(ix: Any) -> Rows:
    return [{"sequence_catalog": ix.snapshot.database, "sequence_schema": e.schema, "sequence_name": e.name,
             "data_type": "bigint", "numeric_precision": 64, "numeric_precision_radix": 2, "numeric_scale": 0,
             "start_value": str(d.start), "minimum_value": str(d.min_value), "maximum_value": str(d.max_value),
             "increment": str(d.increment), "cycle_option": "YES" if d.cycle else "NO"}
            for e, d in _sequences(ix) if not e.table.identity_sequence]


def serial_sequence(ix: Any, table: str, column: str, search_path: list[str]) -> str | None:
    """pg_get_serial_sequence(table, column): the sequence a serial or identity column's default
    draws from, schema-qualified."""
    oid = ix.resolve(table, search_path)
    entry = ix.by_oid.get(oid) if oid is not None else None
    info = next((c for c in entry.table.columns if c.name == column), None) if entry and entry.table else None
    found = re.fullmatch(r"nextval\('(.+)'::regclass\)", info.default or "") if info is not None else None
    return found.group(1) if found else None


