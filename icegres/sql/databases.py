"""Which database a three-part name (`"icegres"."demo"."t"`) may name: the one served, or its
alias `postgres`. dbt and BI tools name every relation with its database."""

from __future__ import annotations

from icegres.pg.errors import FEATURE_NOT_SUPPORTED, PgError

# `postgres` names the served database too (pgAdmin, DBeaver and Metabase connect to it).
DATABASE_ALIASES = ("postgres",)


def check_database(catalog: str, database: str, qualified: str) -> None:
    """A three-part name's first part must be this database (PostgreSQL: 0A000 otherwise)."""
    if catalog and catalog not in (database, *DATABASE_ALIASES):
        raise PgError(FEATURE_NOT_SUPPORTED, f"cross-database references are not implemented: {qualified}")
