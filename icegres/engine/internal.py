"""The catalog's namespaces that are icegres's own, not the user's: the one place that names them.

icegres keeps some state in the Iceberg catalog itself, because the catalog is what every server of
a lakehouse shares: maintenance leases (`icegres_maintenance`, engine/lease_store.py) and the
authorization document (`icegres_auth`, engine/acl_store.py). Their tables are records, not data:
they are never mounted, and no listing shows them (pg_namespace, pg_class, information_schema,
psql's \\dt, Flight SQL's GetDbSchemas and GetTables all read the mounted catalog). A statement
naming one finds no such relation, as PostgreSQL answers for a schema a role cannot see.
"""

from __future__ import annotations

MAINTENANCE_NAMESPACE = "icegres_maintenance"
AUTH_NAMESPACE = "icegres_auth"
INTERNAL_NAMESPACES = frozenset({MAINTENANCE_NAMESPACE, AUTH_NAMESPACE})


def is_internal(namespace: str) -> bool:
    """True for an internal namespace (and anything nested under one)."""
    return namespace.split(".", 1)[0] in INTERNAL_NAMESPACES
