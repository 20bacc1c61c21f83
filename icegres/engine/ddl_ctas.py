"""CREATE TABLE AS: the table a query's columns make (the rows are appended by the caller through
the commit machine)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pyarrow as pa

from icegres.engine.ddl_apply import (
    DUPLICATE_TABLE,
    PUBLIC,
    char_type_properties,
    creation_schema,
    iceberg_schema_of_arrow,
    partition_spec_for,
)
from icegres.engine.ddl_commands import CreateTableAs
from icegres.pg.chars import CharType, described
from icegres.pg.errors import PgError

if TYPE_CHECKING:
    from pyiceberg.partitioning import PartitionSpec
    from pyiceberg.schema import Schema
    from pyiceberg.table import Table

    from icegres.engine.catalog import Lakehouse


def create_table_from_arrow(lakehouse: Lakehouse, cmd: CreateTableAs, arrow_schema: pa.Schema,
                            search_path: list[str]) -> tuple[str, str] | None:
    """Create the table a CTAS names, with the query's columns; None if it exists (IF NOT EXISTS).

    The rows are appended afterwards through the commit machine by the caller.
    """
    namespace = creation_schema(lakehouse, cmd.schema, search_path)
    if lakehouse.table_exists(namespace, cmd.name) or lakehouse.view_location(namespace, cmd.name):
        if not cmd.if_not_exists:
            raise PgError(DUPLICATE_TABLE, f'relation "{cmd.name}" already exists')
        return None
    create_arrow_table_in(lakehouse, namespace, cmd.name, cmd, arrow_schema)
    return (namespace, cmd.name)


def create_arrow_table_in(lakehouse: Lakehouse, namespace: str, name: str, cmd: CreateTableAs,
                          arrow_schema: pa.Schema) -> Table:
    """Create the table of a CTAS as `namespace.name`, with the query's columns."""
    schema, spec, properties = arrow_table_definition(cmd, arrow_schema)
    if namespace == PUBLIC:
        lakehouse.create_namespace_if_missing(PUBLIC)
    return lakehouse.create_partitioned_table(namespace, name, schema, spec, properties)


def arrow_table_definition(cmd: CreateTableAs, arrow_schema: pa.Schema
                           ) -> tuple[Schema, PartitionSpec, dict[str, str]]:
    """The Iceberg schema, partition spec and properties of a CTAS's table."""
    names = list(cmd.column_names) + arrow_schema.names[len(cmd.column_names):]
    if len(cmd.column_names) > len(arrow_schema):
        raise PgError("42601", "too many column names were specified")
    if len(set(names)) != len(names):
        dup = next(n for n in names if names.count(n) > 1)
        raise PgError("42701", f'column "{dup}" specified more than once')
    schema = iceberg_schema_of_arrow(names, arrow_schema, "table")
    spec = partition_spec_for(schema, cmd.partitioning)
    properties = dict(cmd.properties)
    properties.update(char_type_properties(schema, zip(names, map(_source_char_type, arrow_schema), strict=True)))
    return schema, spec, properties


def _source_char_type(f: pa.Field) -> CharType | None:
    """The varchar(n) / char(n) type of a query column read straight from such a table column
    (pg_catalog.sourced_schema's annotation), which CREATE TABLE AS keeps as PostgreSQL does."""
    meta = f.metadata or {}
    return described(int(meta.get(b"pg_type_oid", b"0")), int(meta.get(b"pg_typmod", b"-1")))


