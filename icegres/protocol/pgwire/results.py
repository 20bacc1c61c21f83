"""Query results on the wire: RowDescription from an Arrow schema, columns reshaped for it, and
rows pulled from a running query in chunks of encoded DataRows."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from icegres.engine.row_source import RowSource
from icegres.pg import chars
from icegres.pg.clock import TextSettings
from icegres.pg.errors import PROTOCOL_VIOLATION, PgError
from icegres.pg.types import PgType, pg_type_by_oid, pg_type_for_arrow
from icegres.protocol.pgwire import messages as m
from icegres.protocol.pgwire.datarows import encode_data_rows


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
_BPCHAR = str(chars.BPCHAR_OID).encode()


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
        meta = f.metadata or {}
        # a column read straight from a table: its table, number and typmod (engine/pg_catalog.py)
        typmod = int(meta.get(b"pg_typmod", b"-1"))
        table_oid, attnum = int(meta.get(b"pg_table_oid", b"0")), int(meta.get(b"pg_attnum", b"0"))
        fields.append(m.FieldDescription(f.name, t.oid, t.typlen, typmod, table_oid, attnum, fmt))
    return m.row_description(fields)


def presentable(batch: pa.RecordBatch, schema: pa.Schema, formats: Sequence[int]) -> pa.RecordBatch:
    """Reshape columns whose PostgreSQL type differs from their Arrow type's natural one.

    psqlODBC's SQLStatistics hangs unless int2vector comes as `1 2` rather than `{1,2}`. A
    char(n) column read from a table is padded to n, as PostgreSQL stores it (pg/chars.py).
    """
    columns = None
    for i, (f, fmt) in enumerate(zip(schema, formats, strict=True)):
        annotated = f.metadata.get(_PG_TYPE_OID_KEY) if f.metadata else None
        if annotated is None:
            continue
        col = batch.column(i)
        is_list = pa.types.is_list(col.type) or pa.types.is_large_list(col.type)
        char = chars.described(chars.BPCHAR_OID, int(f.metadata.get(b"pg_typmod", b"-1"))) \
            if annotated == _BPCHAR else None
        if char is not None and char.length is not None:
            col = chars.pad(col, char)
        elif fmt == 0 and annotated in (b"22", b"30") and is_list:
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


CHUNK_BYTES = 512 * 1024  # a chunk (one worker-thread hop) ends with the batch that passes this


@dataclass(frozen=True)
class Chunk:
    rows: int
    data: bytes
    exhausted: bool  # no rows remain after this chunk


@dataclass
class Encoder:
    """RecordBatch -> DataRow bytes for one result's column formats (called in worker threads)."""

    formats: list[int]
    text: TextSettings
    schema: pa.Schema | None = None

    def __call__(self, batch: pa.RecordBatch) -> bytes:
        if self.schema is not None:
            batch = presentable(batch, self.schema, self.formats)
        return encode_data_rows(batch, self.formats, self.text)


def pull(source: RowSource, limit: int, encode: Callable[[pa.RecordBatch], bytes]) -> Chunk:
    """Encode up to `limit` rows (0 = all) but at most about CHUNK_BYTES. Blocking.

    Reports whether the source is exhausted, peeking one batch ahead when the limit is hit,
    so the caller can choose between PortalSuspended and CommandComplete without another hop.
    """
    rows = 0
    parts: list[bytes] = []
    size = 0
    while limit == 0 or rows < limit:
        batch = source.take_many(limit - rows if limit else 0)
        if batch is None:
            return Chunk(rows, b"".join(parts), True)
        data = encode(batch)
        rows += batch.num_rows
        parts.append(data)
        size += len(data)
        if size >= CHUNK_BYTES:
            break
    return Chunk(rows, b"".join(parts), not source.has_more())

