"""Query results on the wire: RowDescription from an Arrow schema, and columns reshaped for it."""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa
import pyarrow.compute as pc

from icegres.pg.errors import PROTOCOL_VIOLATION, PgError
from icegres.pg.types import PgType, pg_type_by_oid, pg_type_for_arrow
from icegres.protocol.pgwire import messages as m


def expand_formats(formats: Sequence[int], ncols: int) -> list[int]:
    """Bind's result-format codes: none = all text, one = applies to all, else one per column."""
    if not formats:
        return [0] * ncols
    if len(formats) == 1:
        return [formats[0]] * ncols
    if len(formats) != ncols:
        raise PgError(PROTOCOL_VIOLATION, f"bind message has {len(formats)} result formats but query has {ncols} columns")
    for f in formats:
        if f not in (0, 1):
            raise PgError(PROTOCOL_VIOLATION, f"unsupported format code: {f}")
    return list(formats)


_PG_TYPE_OID_KEY = b"pg_type_oid"  # set by engine/pg_catalog.py on catalog columns
_FOUR_BYTE_OIDS = (b"26", b"28", b"30", b"1028")  # oid, xid, oidvector, oid[]


def field_type(field: pa.Field) -> PgType:
    """The PostgreSQL type of a result column: a catalog annotation if any, else by Arrow type."""
    annotated = (field.metadata or {}).get(_PG_TYPE_OID_KEY)
    if annotated is not None:
        t = pg_type_by_oid(int(annotated))
        if t is not None:
            return t
    return pg_type_for_arrow(field.type)


def row_description(schema: pa.Schema, formats: Sequence[int]) -> bytes:
    """Names come from the engine already in PostgreSQL's spelling (QueryContext.pg_schema)."""
    fields = []
    for f, fmt in zip(schema, formats, strict=True):
        t = field_type(f)
        fields.append(m.FieldDescription(f.name, t.oid, t.typlen, -1, 0, 0, fmt))
    return m.row_description(fields)


def presentable(batch: pa.RecordBatch, schema: pa.Schema, formats: Sequence[int]) -> pa.RecordBatch:
    """Reshape columns whose PostgreSQL type differs from their Arrow type's natural one.

    psqlODBC's SQLStatistics hangs unless int2vector comes as `1 2` rather than `{1,2}`.
    """
    columns = None
    for i, (f, fmt) in enumerate(zip(schema, formats, strict=True)):
        annotated = f.metadata.get(_PG_TYPE_OID_KEY) if f.metadata else None
        if annotated is None:
            continue
        col = batch.column(i)
        is_list = pa.types.is_list(col.type) or pa.types.is_large_list(col.type)
        if fmt == 0 and annotated in (b"22", b"30") and is_list:
            col = pc.binary_join(pc.cast(col, pa.list_(pa.string())), " ")
        elif fmt == 1 and annotated in _FOUR_BYTE_OIDS:
            # oid, xid and their vectors are 4 bytes on the wire; the catalog holds them as int64.
            col = pc.cast(col, pa.list_(pa.int32()) if is_list else pa.int32())
        else:
            continue
        columns = columns or list(batch.columns)
        columns[i] = col
    if columns is None:
        return batch
    return pa.RecordBatch.from_arrays(columns, names=batch.schema.names)
