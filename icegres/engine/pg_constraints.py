"""A lakehouse table's constraints as PostgreSQL's catalog shows them: the primary key (Iceberg's
identifier fields) and CHECK constraints (table properties, check_text.py), in pg_constraint,
pg_get_constraintdef, information_schema.table_constraints, key_column_usage and
check_constraints.

The rows are built from a pg_catalog.CatalogIndex (`ix`), passed in: this module sits beside
pg_catalog.py, which imports it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from icegres.engine import check_text
from icegres.pg.keywords import quote_ident

Rows = list[dict[str, Any]]


@dataclass(frozen=True)
class ConstraintEntry:
    oid: int
    name: str
    schema: str
    contype: str  # 'p' primary key, 'c' check
    table_oid: int
    index_oid: int  # a primary key's index; 0 for a check
    key_attnums: tuple[int, ...]  # the key's columns, or the columns a check reads
    key_names: tuple[str, ...]
    check: str = ""  # a check's expression, as SQL text


def check_entries(oid_of: dict[str, int], schema: str, table: str, table_oid: int,
                  attnums: dict[str, int], checks: tuple[tuple[str, str], ...]) -> list[ConstraintEntry]:
    """A table's CHECKs, each with the OID allocated for `check_key`."""
    out = []
    for name, text in checks:
        names = tuple(sorted(check_text.columns_of(text) & set(attnums), key=attnums.__getitem__))
        out.append(ConstraintEntry(oid_of[check_key(schema, table, name)], name, schema, "c", table_oid, 0,
                                   tuple(attnums[n] for n in names), names, text))
    return out


def check_key(schema: str, table: str, name: str) -> str:
    """The OID allocation key of a CHECK (its name is unique per table, not per schema)."""
    return f"constraint:{schema}.{table}.{name}.check"


def rows_pg_constraint(ix: Any) -> Rows:
    return [{
        "oid": c.oid, "conname": c.name, "connamespace": ix.namespaces[c.schema],
        "contype": c.contype, "convalidated": True, "conrelid": c.table_oid,
        "conindid": c.index_oid, "conislocal": True, "connoinherit": c.contype == "p",
        "conkey": list(c.key_attnums), "conbin": c.check or None,
        "condeferrable": False, "condeferred": False, "coninhcount": 0, "contypid": 0,
    } for c in ix.constraints.values()]


def constraint_definition(ix: Any, oid: int) -> str | None:
    """pg_get_constraintdef(oid)."""
    c = ix.constraints.get(oid)
    if c is None:
        return None
    if c.contype == "c":
        return check_text.definition(c.check)
    kind = {"p": "PRIMARY KEY", "u": "UNIQUE"}[c.contype]
    return f"{kind} ({', '.join(quote_ident(n) for n in c.key_names)})"


def rows_table_constraints(ix: Any) -> Rows:
    db = ix.snapshot.database
    kinds = {"p": "PRIMARY KEY", "c": "CHECK"}
    rows = [{"constraint_catalog": db, "constraint_schema": c.schema, "constraint_name": c.name,
             "table_catalog": db, "table_schema": c.schema,
             "table_name": ix.by_oid[c.table_oid].name, "constraint_type": kinds[c.contype],
             "nulls_distinct": "YES" if c.contype == "p" else None}
            for c in ix.constraints.values()]
    rows += [{"constraint_catalog": db, "constraint_schema": t.schema, "constraint_name": name,
              "table_catalog": db, "table_schema": t.schema, "table_name": t.name, "constraint_type": "CHECK"}
             for t, name, _ in _not_nulls(ix)]
    for row in rows:
        row.update(is_deferrable="NO", initially_deferred="NO", enforced="YES")
    return rows


def _not_nulls(ix: Any) -> list[tuple[Any, str, str]]:
    """(table, name, column) of each NOT NULL column of a lakehouse table, which
    information_schema shows as a CHECK named `<schema oid>_<table oid>_<attnum>_not_null`."""
    return [(t, f"{ix.namespaces[t.schema]}_{t.oid}_{c.attnum}_not_null", c.name)
            for t in ix.relations.values() if t.relkind == "r" and t.table is not None
            for c in t.columns if c.not_null]


def rows_key_column_usage(ix: Any) -> Rows:
    db = ix.snapshot.database
    return [{"constraint_catalog": db, "constraint_schema": c.schema, "constraint_name": c.name,
             "table_catalog": db, "table_schema": c.schema,
             "table_name": ix.by_oid[c.table_oid].name, "column_name": name,
             "ordinal_position": position}
            for c in ix.constraints.values() if c.contype == "p"
            for position, name in enumerate(c.key_names, 1)]


def rows_check_constraints(ix: Any) -> Rows:
    """information_schema.check_constraints: PostgreSQL's check_clause is the definition after
    `CHECK `."""
    db = ix.snapshot.database
    return [{"constraint_catalog": db, "constraint_schema": c.schema, "constraint_name": c.name,
             "check_clause": check_text.definition(c.check)[len("CHECK "):]}
            for c in ix.constraints.values() if c.contype == "c"] + [
            {"constraint_catalog": db, "constraint_schema": t.schema, "constraint_name": name,
             "check_clause": f"{quote_ident(column)} IS NOT NULL"} for t, name, column in _not_nulls(ix)]


def rows_constraint_column_usage(ix: Any) -> Rows:
    db = ix.snapshot.database
    return [{"table_catalog": db, "table_schema": c.schema, "table_name": ix.by_oid[c.table_oid].name,
             "column_name": name, "constraint_catalog": db, "constraint_schema": c.schema,
             "constraint_name": c.name}
            for c in ix.constraints.values() for name in c.key_names]
