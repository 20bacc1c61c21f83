"""Which tables of a statement are read at another point than their head, and how it says so.

Every spelling users bring from other engines means one of three things for a table reference:

- a version: `FOR VERSION AS OF x`, `FOR SYSTEM_VERSION AS OF x`, `AS OF x` (x a snapshot id or a
  branch or tag name), or the name `"t@x"`;
- a time: `FOR SYSTEM_TIME AS OF ts`, `FOR TIMESTAMP AS OF ts`, `AS OF TIMESTAMP '...'`;
- a metadata table: `"t$snapshots"` (Trino) and the others of METADATA_TABLES.

The parser (parse.py) puts the first two into the table's `version`; the names are read here.
Pure: what a reference asks for, not what it resolves to (engine/time_travel.py).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING

from icegres.sql import text_scan

if TYPE_CHECKING:
    from sqlglot import exp

METADATA_TABLES = ("snapshots", "history", "refs", "files", "manifests", "partitions",
                   "metadata_log_entries", "properties")

# The table functions read here: `branch_diff('a', 'b' [, 'namespace'])`, `icegres branch diff`'s rows.
TABLE_FUNCTIONS = ("branch_diff",)

# A cheap test before any tree is walked: `AS OF`, a name holding `@` or `$name`, `.snapshots`,
# a table function of TABLE_FUNCTIONS, or something like them (a false yes costs only the walk).
# Each pattern starts with a literal, which `re` finds at memchr's speed, and the text is lowered
# a piece at a time (`text_scan`): one IGNORECASE alternation starting with `\b` and `\w` took
# ~0.3 s over a 4 MB INSERT, one C call holding the GIL.
_MENTIONS = (re.compile(r"as\s+of\b"), re.compile("@"), re.compile(r"\$[a-z]"),
             re.compile(r"\.\"?(?:" + "|".join(METADATA_TABLES) + r")\b"),
             re.compile(r"(?:" + "|".join(TABLE_FUNCTIONS) + r")\s*\("))


class Point(Enum):
    VERSION = "version"  # a snapshot id, or a branch or tag name
    TIMESTAMP = "timestamp"  # the snapshot current at a time
    METADATA = "metadata"  # one of METADATA_TABLES


@dataclass(frozen=True)
class Travel:
    """Where one table reference reads: `name` is the table's own name (without `@x`/`$m`)."""

    point: Point
    name: str
    value: exp.Expression | None = None  # VERSION/TIMESTAMP written as an expression
    ref: str | None = None  # VERSION written in the name: `t@x` (an id or a ref name)
    metadata: str | None = None  # METADATA: which one


def mentions(sql: str) -> bool:
    return text_scan.search(_MENTIONS, sql)


def travel_of(table: exp.Table) -> Travel | None:
    """What `table` (a reference in a FROM clause) asks for; None: its head, as usual."""
    version = table.args.get("version")
    name = table.name
    if version is not None:
        point = Point.TIMESTAMP if str(version.this).upper() == "TIMESTAMP" else Point.VERSION
        return Travel(point, name, value=version.expression)
    if "@" in name:
        base, _, ref = name.rpartition("@")
        if base and ref:
            return Travel(Point.VERSION, base, ref=ref)
    if "$" in name:
        base, _, which = name.rpartition("$")
        if base and which.lower() in METADATA_TABLES:
            return Travel(Point.METADATA, base, metadata=which.lower())
    return None


def table_function(table: exp.Table) -> tuple[str, list[exp.Expression]] | None:
    """(name, arguments) where `table` is a call of one of TABLE_FUNCTIONS in a FROM clause."""
    from sqlglot import exp

    call = table.this
    if isinstance(call, exp.Anonymous) and str(call.this).lower() in TABLE_FUNCTIONS:
        return str(call.this).lower(), list(call.expressions)
    return None


def spark_metadata(table: exp.Table) -> tuple[str, str, str] | None:
    """Spark's `schema.table.snapshots`: (schema, table, metadata table) where the three-part
    name ends in a metadata table's name; the caller decides whether it clashes with a real
    table (a database-qualified `db.schema.table` is PostgreSQL's meaning)."""
    catalog, db, name = table.catalog, table.db, table.name
    if catalog and db and name.lower() in METADATA_TABLES and table.args.get("version") is None:
        return catalog, db, name.lower()
    return None
