"""COPY ... TO STDOUT in text and CSV formats (what `psql \\copy (select ...) to file` sends)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa

from icegres.engine.row_source import RowSource
from icegres.pg.copy_format import CopyFormat
from icegres.pg.copy_out import CopyRows, encode_copy_rows
from icegres.protocol.pgwire import messages as m
from icegres.protocol.pgwire.results import presentable, pull

if TYPE_CHECKING:
    from icegres.protocol.pgwire.port import SessionPort

# PostgreSQL sends one CopyData per row; the protocol lets a message hold any part of the
# stream, and per-row messages cost a client one read per row (1M reads for demo.trips). So the
# rows go out in messages of about this size, each ending at the end of a row, so a client that
# handles each message as whole lines still sees whole lines.
COPY_DATA_BYTES = 256 * 1024


async def copy_out_rows(session: SessionPort, source: RowSource, options: dict[str, str]) -> None:
    fmt = CopyFormat(options, is_from=False)
    schema = source.schema
    text = session.text_settings()
    fmt.columns(schema.names)
    session.send(m.copy_out_response(len(schema)))
    if fmt.header:  # FORCE_QUOTE quotes no header name, as in PostgreSQL
        session.send(m.copy_data(fmt.line(schema.names, header=True).encode()))

    formats = [0] * len(schema)

    def encode(batch: pa.RecordBatch) -> bytes:  # in a worker thread
        # as a query's text results show them: a char(n) column blank-padded, for one
        return copy_data_messages(encode_copy_rows(presentable(batch, schema, formats), fmt, text))

    total = 0
    while True:
        chunk = await session.in_thread(pull, source, 0, encode)
        total += chunk.rows
        if chunk.data:
            session.send(chunk.data)
            await session.maybe_flush()
        if chunk.exhausted:
            break
    session.send(m.COPY_DONE)
    session.send(session.trace.completed(f"COPY {total}"))


def copy_data_messages(rows: CopyRows, size: int = COPY_DATA_BYTES) -> bytes:
    """`rows` as CopyData messages of about `size` bytes each (one row may be more), each ending
    at the end of a row."""
    ends = rows.row_ends
    if not len(ends):
        return b""
    data = memoryview(rows.data)
    parts: list[bytes | memoryview] = []
    start = 0
    total = int(ends[-1])
    while start < total:
        i = int(np.searchsorted(ends, start + size, side="left"))
        end = int(ends[min(i, len(ends) - 1)])
        parts.append(m.copy_data_header(end - start))
        parts.append(data[start:end])
        start = end
    return b"".join(parts)
