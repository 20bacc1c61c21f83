"""Parameter rows a DoPut binds, and a query run once per row.

A Flight SQL client binds parameters as an Arrow stream whose columns are the statement's
placeholders in order (ADBC names them "0", "1", …): column i is `$i+1`, and so is the i-th `?`
(`icegres.sql.placeholders`). One DoPut may bind several rows. FlightSql.proto: "All of the bound
parameter sets will be executed as a single atomic execution"; Arrow's reference server (the Go
SQLite example) runs a query once per row and concatenates the result sets, and ADBC's
`cursor.execute(query, record_batch)` documents its rows as "each bound in turn". So a query with
several rows runs once per row, reading one snapshot, its results in row order; a write runs once
per row in one transaction (`writes.py`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

import pyarrow as pa

from icegres.pg.errors import DATATYPE_MISMATCH, PROGRAM_LIMIT_EXCEEDED, PgError

Params = dict[str, Any]  # "1" -> value, as QueryContext.start takes them

# The results of a query bound to several rows are held until the last row ran (its errors
# surface at GetFlightInfo, and its snapshot is one read transaction's).
RESULT_BYTES_MAX = 256 << 20


def param_rows(batches: Iterable[pa.RecordBatch]) -> list[Params]:
    """Each row of the parameter batches as the engine takes its values: {"1": first column's
    value, "2": …}, in order (by position: the columns' names do not matter)."""
    rows: list[Params] = []
    for batch in batches:
        columns = [column.to_pylist() for column in batch.columns]
        rows.extend({str(i + 1): values[r] for i, values in enumerate(columns)} for r in range(batch.num_rows))
    return rows


def run_each(start: Callable[[Params | None], tuple[pa.Schema, Any]], rows: Sequence[Params | None],
             bytes_max: int = RESULT_BYTES_MAX) -> tuple[pa.Schema, list[pa.RecordBatch]]:
    """A query started (`start`: QueryContext.start of one row) and read to its end once per
    parameter row, in order: the one schema of all of them and their batches, concatenated.
    Blocking. PgError 54000 beyond `bytes_max` of results."""
    from icegres.engine.row_source import RowSource

    schemas: list[pa.Schema] = []
    batches: list[pa.RecordBatch] = []
    size = 0
    for row in rows:
        schema, stream = start(row)
        schemas.append(schema)
        source = RowSource(schema, stream)
        while (batch := source.take(0)) is not None:
            size += batch.nbytes
            if size > bytes_max:
                raise PgError(PROGRAM_LIMIT_EXCEEDED,
                              f"the results of a query bound to {len(rows)} parameter rows exceed "
                              f"{bytes_max >> 20} MiB: bind fewer rows per execution")
            batches.append(batch)
    schema = common_schema(schemas)
    return schema, [_conform(batch, schema) for batch in batches]


def common_schema(schemas: list[pa.Schema]) -> pa.Schema:
    """One schema for the results of one statement under different parameter rows: a column is
    typed by the first row that gives it a type (a NULL parameter can leave it `null`), and
    nullable where any row's is or the types differ."""
    first = schemas[0]
    if any(len(s) != len(first) for s in schemas):
        raise PgError(DATATYPE_MISMATCH, "the parameter rows give results of different widths")
    fields = []
    for i, field in enumerate(first):
        others = [s.field(i) for s in schemas[1:]]
        typed = next((f.type for f in (field, *others) if f.type != pa.null()), field.type)
        nullable = field.nullable or any(f.nullable or f.type != typed for f in others) or field.type != typed
        fields.append(field.with_type(typed).with_nullable(nullable))
    return pa.schema(fields, first.metadata)


def _conform(batch: pa.RecordBatch, schema: pa.Schema) -> pa.RecordBatch:
    columns = []
    for column, field in zip(batch.columns, schema, strict=True):
        if column.type != field.type:
            try:
                column = column.cast(field.type)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
                raise PgError(DATATYPE_MISMATCH,
                              f'column "{field.name}" is {field.type} for one parameter row and '
                              f"{column.type} for another") from None
        columns.append(column)
    return pa.RecordBatch.from_arrays(columns, schema=schema)
