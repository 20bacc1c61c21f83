"""COPY ... TO STDOUT in text and CSV formats (what `psql \\copy (select ...) to file` sends)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from icegres.engine.row_source import RowSource
from icegres.pg.copy_format import CopyFormat
from icegres.pg.text_out import encode_text_value
from icegres.pg.types import pg_type_for_arrow
from icegres.protocol.pgwire import messages as m

if TYPE_CHECKING:
    from icegres.protocol.pgwire.port import SessionPort


async def copy_out_rows(session: SessionPort, source: RowSource, options: dict[str, str]) -> None:
    fmt = CopyFormat(options, is_from=False)
    schema = source.schema
    text = session.text_settings()
    types = [pg_type_for_arrow(f.type) for f in schema]
    fmt.columns(schema.names)
    session.send(m.copy_out_response(len(schema)))
    if fmt.header:  # FORCE_QUOTE quotes no header name, as in PostgreSQL
        session.send(m.copy_data(fmt.line(schema.names, header=True).encode()))

    def next_lines() -> tuple[int, bytes] | None:
        batch = source.take(0)
        if batch is None:
            return None
        columns = [batch.column(i).to_pylist() for i in range(batch.num_columns)]
        out = []
        for row in zip(*columns, strict=True):
            values = []
            for value, t in zip(row, types, strict=True):
                raw = None if value is None else encode_text_value(value, t, text)
                values.append(None if raw is None else raw.decode())
            out.append(m.copy_data(fmt.line(values).encode()))
        return batch.num_rows, b"".join(out)

    total = 0
    while True:
        chunk = await session.in_thread(next_lines)
        if chunk is None:
            break
        total += chunk[0]
        session.send(chunk[1])
        await session.maybe_flush()
    session.send(m.COPY_DONE)
    session.send(m.command_complete(f"COPY {total}"))
