"""CREATE INDEX and DROP INDEX on an Iceberg table: what an index means here.

An Iceberg table has no index structures, and icegres will not accept an index that does
nothing (pandas' `to_sql` creates one by default). `CREATE INDEX name ON t (a, b)`:
- becomes the table's sort order (Iceberg's, which Spark and Trino writers follow too) and the
  order icegres's own writer sorts each data file's rows in (parquet_files.py), so the files
  written from then on have tight min/max statistics on those columns and a scan filtering on
  them prunes files and row groups;
- turns on Iceberg's `write.parquet.bloom-filter-enabled.column.<col>` for each column, which
  Parquet writers (icegres's included) honour: an equality filter skips row groups that cannot
  hold the value;
- is recorded as the table property `icegres.index.<name>` = `a,b`, so pg_indexes, pg_class
  (relkind 'i'), pg_index and psql's \\d list it, and DROP INDEX finds it.
Files written before the index stay as they were (no rewrite). The most recently created index
of a table gives its sort order; dropping it falls back to the previous one. UNIQUE, expression
and partial indexes are refused (0A000): nothing would enforce or use them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sqlglot.tokens import TokenType

from icegres.engine.ddl_commands import CreateIndex, DropIndex
from icegres.engine.parquet_files import BLOOM_PREFIX, SORT_PROPERTY
from icegres.pg import errors as e
from icegres.pg.errors import PgError

if TYPE_CHECKING:
    from pyiceberg.table import Table

    from icegres.engine.catalog import Lakehouse

INDEX_PREFIX = "icegres.index."
DUPLICATE_TABLE = "42P07"


def table_indexes(properties: dict[str, str]) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """(name, columns) of every index a table's properties record, by name."""
    return tuple(sorted((key[len(INDEX_PREFIX):], tuple(value.split(",")))
                        for key, value in properties.items() if key.startswith(INDEX_PREFIX)))


# --- parsing (called by ddl._Parser after CREATE [UNIQUE] INDEX / DROP INDEX) ----------------


def parse_create_index(p: Any, unique: bool) -> CreateIndex:
    start = p.i
    if unique:
        raise PgError(e.FEATURE_NOT_SUPPORTED, "CREATE UNIQUE INDEX is not supported",
                      hint="Nothing would enforce it on an Iceberg table: declare a PRIMARY KEY, "
                           "which every write checks.", position=p.position(start))
    if p.accept("CONCURRENTLY"):
        pass  # no lock to avoid: every index here is built without blocking writers
    if_not_exists = p.accept("IF", "NOT", "EXISTS")
    name = None if p.peek("ON") else p.ident()
    p.expect("ON")
    p.accept("ONLY")
    schema, table = p.qualified_name()
    if p.accept("USING"):
        method_at = p.i
        method = p.ident().lower()
        if method not in ("btree", "brin", "hash"):
            raise PgError(e.FEATURE_NOT_SUPPORTED, f'access method "{method}" is not supported',
                          position=p.position(method_at))
    p.expect_type(TokenType.L_PAREN)
    columns = []
    while True:
        at = p.i
        if p.peek_type(TokenType.L_PAREN):
            raise PgError(e.FEATURE_NOT_SUPPORTED, "expression indexes are not supported",
                          position=p.position(at))
        columns.append(p.ident())
        if p.accept("DESC"):
            raise PgError(e.FEATURE_NOT_SUPPORTED, "descending index columns are not supported",
                          position=p.position(at))
        p.accept("ASC")
        if p.accept("NULLS"):
            if not p.accept("LAST"):
                p.expect("FIRST")
                raise PgError(e.FEATURE_NOT_SUPPORTED, "NULLS FIRST index columns are not supported",
                              position=p.position(at))
        if not p.accept_type(TokenType.COMMA):
            break
    p.expect_type(TokenType.R_PAREN)
    if p.peek("INCLUDE") or p.peek("WHERE") or p.peek("WITH") or p.peek("TABLESPACE"):
        raise PgError(e.FEATURE_NOT_SUPPORTED, f"CREATE INDEX ... {p.toks[p.i].text.upper()} is not supported",
                      position=p.position())
    p.expect_end()
    return CreateIndex(schema, table, name, tuple(columns), if_not_exists)


def parse_drop_index(p: Any) -> DropIndex:
    p.accept("CONCURRENTLY")
    if_exists = p.accept("IF", "EXISTS")
    names = [p.qualified_name()]
    while p.accept_type(TokenType.COMMA):
        names.append(p.qualified_name())
    p.drop_behavior()
    return DropIndex(tuple(names), if_exists)


# --- applying -----------------------------------------------------------------------------------


def apply_create_index(lakehouse: Lakehouse, cmd: CreateIndex, namespace: str, notices: list[str]) -> None:
    table = lakehouse.load_table(namespace, cmd.table)
    fields = {f.name for f in table.schema().fields}
    for column in cmd.columns:
        if column not in fields:
            raise PgError(e.UNDEFINED_COLUMN, f'column "{column}" does not exist')
    name = cmd.name or _default_name(cmd.table, cmd.columns)
    if _relation_named(lakehouse, namespace, name):
        if cmd.if_not_exists:
            notices.append(f'relation "{name}" already exists, skipping')
            return
        raise PgError(DUPLICATE_TABLE, f'relation "{name}" already exists')
    indexes = dict(table_indexes(table.properties))
    indexes[name] = cmd.columns
    _write_indexes(table, indexes, sort=cmd.columns)


def apply_drop_index(lakehouse: Lakehouse, cmd: DropIndex, search_path: list[str], notices: list[str]) -> None:
    found: list[tuple[Table, str]] = []
    for schema, name in cmd.names:
        table = _table_of_index(lakehouse, schema, name, search_path)
        if table is None:
            shown = f"{schema}.{name}" if schema else name
            if not cmd.if_exists:
                raise PgError(e.UNDEFINED_OBJECT, f'index "{shown}" does not exist')
            notices.append(f'index "{shown}" does not exist, skipping')
            continue
        found.append((table, name))
    for table, name in found:  # every name checked before anything changes
        table = table.refresh()
        with table.transaction() as tx:
            drop_index_change(table, name)(tx)


def drop_index_change(table: Table, name: str) -> Any:
    """The change that drops index `name` of `table`: its properties go, and the sort order
    falls back to the newest index left (or none) if it was this index's."""
    indexes = dict(table_indexes(table.properties))
    sort_was = tuple(table.properties.get(SORT_PROPERTY, "").split(",")) if SORT_PROPERTY in table.properties else ()
    dropped = indexes.pop(name)
    sort = sort_was if sort_was != dropped else (next(reversed(indexes.values())) if indexes else ())
    return index_change(table, indexes, sort=sort, removed=(name,))


def _write_indexes(table: Table, indexes: dict[str, tuple[str, ...]], *, sort: tuple[str, ...],
                   removed: tuple[str, ...] = ()) -> None:
    """One Iceberg transaction: the index properties, the bloom filters they ask for, the sort order."""
    with table.transaction() as tx:
        index_change(table, indexes, sort=sort, removed=removed)(tx)


def index_change(table: Table, indexes: dict[str, tuple[str, ...]], *, sort: tuple[str, ...],
                 removed: tuple[str, ...] = ()) -> Any:
    """The change to `table` that gives it `indexes`, as a function of a pyiceberg Transaction."""
    from pyiceberg.transforms import IdentityTransform

    bloom = {column for columns in indexes.values() for column in columns}
    stale_bloom = [key for key in table.properties
                   if key.startswith(BLOOM_PREFIX) and key[len(BLOOM_PREFIX):] not in bloom]
    updates = {f"{INDEX_PREFIX}{name}": ",".join(columns) for name, columns in indexes.items()}
    updates.update({f"{BLOOM_PREFIX}{column}": "true" for column in bloom})
    if sort:
        updates[SORT_PROPERTY] = ",".join(sort)
    gone = [f"{INDEX_PREFIX}{name}" for name in removed] + stale_bloom
    if not sort and SORT_PROPERTY in table.properties:
        gone.append(SORT_PROPERTY)

    def change(tx: Any) -> None:
        tx.set_properties(updates)
        if gone:
            tx.remove_properties(*gone)
        with tx.update_sort_order() as order:
            for column in sort:
                order.asc(column, IdentityTransform())

    return change


def _default_name(table: str, columns: tuple[str, ...]) -> str:
    # PostgreSQL's ChooseIndexName: table_col1_col2_idx, cut to 63 bytes
    return f"{table}_{'_'.join(columns)}_idx"[:63]


def _relation_named(lakehouse: Lakehouse, namespace: str, name: str) -> bool:
    if lakehouse.table_exists(namespace, name):
        return True
    return _table_of_index(lakehouse, namespace, name, []) is not None


def _table_of_index(lakehouse: Lakehouse, schema: str | None, name: str, search_path: list[str]) -> Table | None:
    namespaces = [schema] if schema is not None else [s for s in search_path if s not in ("pg_catalog",)]
    for namespace in namespaces:
        try:
            tables = lakehouse.catalog.list_tables(namespace)
        except Exception:  # no such namespace
            continue
        for identifier in tables:
            table = lakehouse.catalog.load_table(identifier)
            if f"{INDEX_PREFIX}{name}" in table.properties:
                return table
    return None
