"""Query results on the wire: RowDescription from an Arrow schema, and row streaming state."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from icegres.engine.errors import from_datafusion
from icegres.protocol.pgwire import messages as m
from icegres.protocol.pgwire.errors import PROTOCOL_VIOLATION, PgError
from icegres.protocol.pgwire.types import PgType, pg_type_by_oid, pg_type_for_arrow

_FUNC_NAME = re.compile(r"^(?:[A-Za-z_][\w]*\.)*([A-Za-z_][\w]*)\(")
# DataFusion names unaliased literals after their type ("Int64(1)", "Utf8(\"a\")").
_LITERAL_TYPES = {
    "Int8", "Int16", "Int32", "Int64", "UInt8", "UInt16", "UInt32", "UInt64", "Float16", "Float32",
    "Float64", "Utf8", "Utf8View", "LargeUtf8", "Boolean", "Decimal128", "Date32", "Binary",
    "TimestampMicrosecond", "TimestampNanosecond", "IntervalMonthDayNano", "List", "NULL",
}


def column_name(name: str) -> str:
    """The name PostgreSQL would give an unaliased output column that DataFusion named `name`.

    `count(*)` -> `count`, `Int64(1)` -> `?column?`; plain column names pass through.
    """
    if re.fullmatch(r"[A-Za-z_][\w$]*", name) or not name:
        return name
    fm = _FUNC_NAME.match(name)
    if fm and fm.group(1) not in _LITERAL_TYPES and name.endswith(")") and _balanced_call(name):
        fn = fm.group(1)
        return "?column?" if fn.upper() in ("CAST", "TRY_CAST") else fn
    if re.fullmatch(r"[A-Za-z_][\w]*\.[A-Za-z_][\w.]*", name):
        return name.rsplit(".", 1)[1]
    if name == "NULL" or _FUNC_NAME.match(name) or " " in name:
        return "?column?"
    return name


def _balanced_call(name: str) -> bool:
    """True when the whole name is one call `f(...)`, not `f(a) + g(b)`."""
    depth = 0
    opened = False
    for i, ch in enumerate(name):
        if ch == "(":
            depth += 1
            opened = True
        elif ch == ")":
            depth -= 1
            if depth == 0 and opened and i != len(name) - 1:
                return False
    return True


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


CHUNK_BYTES = 512 * 1024  # a chunk (one worker-thread hop) ends with the batch that passes this
# The column-at-a-time encoders cost per call as well as per row, so DataFusion's 8192-row batches
# are gathered into bigger ones first: 1M rows of demo.trips encoded ~20% faster in 32k-row
# batches. The byte cap keeps wide rows from piling up. A slow stream's first rows wait for the
# gathering, as they already waited for the one-batch peek that tells "exhausted" apart.
ENCODE_ROWS = 32_768
ENCODE_BYTES_MAX = 8 << 20


@dataclass(frozen=True)
class Chunk:
    rows: int
    data: bytes
    exhausted: bool  # no rows remain after this chunk


@dataclass
class RowSource:
    """A running query's rows: DataFusion's batch stream plus what is left of the last batch."""

    schema: pa.Schema
    stream: Any  # datafusion RecordBatchStream, or an iterator of pa.RecordBatch
    pending: pa.RecordBatch | None = None
    done: bool = False
    rows_sent: int = 0
    extra: dict[str, Any] = field(default_factory=dict)

    def pull(self, limit: int, encode: Callable[[pa.RecordBatch], bytes]) -> Chunk:
        """Encode up to `limit` rows (0 = all) but at most about CHUNK_BYTES. Blocking.

        Reports whether the source is exhausted, peeking one batch ahead when the limit is hit,
        so the caller can choose between PortalSuspended and CommandComplete without another hop.
        """
        rows = 0
        parts: list[bytes] = []
        size = 0
        while limit == 0 or rows < limit:
            batch = self._take_many(limit - rows if limit else 0)
            if batch is None:
                return Chunk(rows, b"".join(parts), True)
            data = encode(batch)
            rows += batch.num_rows
            parts.append(data)
            size += len(data)
            if size >= CHUNK_BYTES:
                break
        return Chunk(rows, b"".join(parts), not self.has_more())

    def _take_many(self, limit: int) -> pa.RecordBatch | None:
        """Like take, but gathers batches until ENCODE_ROWS rows (or ENCODE_BYTES_MAX bytes)."""
        first = self.take(limit)
        if first is None:
            return None
        batches = [first]
        rows, size = first.num_rows, first.nbytes
        while rows < ENCODE_ROWS and size < ENCODE_BYTES_MAX and (limit == 0 or rows < limit):
            # A whole batch first, cut to the limit only once it is known to join: cut by
            # `take(limit)`, a batch of another schema put back would drop the rows cut off.
            nxt = self.take(0)
            if nxt is None:
                break
            if not nxt.schema.equals(first.schema):
                self.pending = nxt  # encoded on its own, next time
                break
            if limit and nxt.num_rows > limit - rows:
                self.pending = nxt.slice(limit - rows)
                nxt = nxt.slice(0, limit - rows)
            batches.append(nxt)
            rows += nxt.num_rows
            size += nxt.nbytes
        return first if len(batches) == 1 else pa.concat_batches(batches)

    def has_more(self) -> bool:
        batch = self.take(0)
        if batch is None:
            return False
        self.pending = batch
        return True

    def take(self, limit: int) -> pa.RecordBatch | None:
        """Up to `limit` rows (0 = no limit: one whole batch); None at the end. Blocking."""
        while True:
            if self.pending is not None and self.pending.num_rows:
                batch = self.pending
                if limit and batch.num_rows > limit:
                    self.pending = batch.slice(limit)
                    return batch.slice(0, limit)
                self.pending = None
                return batch
            if self.done:
                return None
            try:
                nxt = next(self.stream)
            except StopIteration:
                self.done = True
                return None
            except Exception as exc:
                self.done = True
                raise from_datafusion(exc) from None
            self.pending = nxt if isinstance(nxt, pa.RecordBatch) else nxt.to_pyarrow()
