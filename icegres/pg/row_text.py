"""A row as PostgreSQL quotes it in a constraint violation's DETAIL: `Failing row contains (1, null).`

PostgreSQL (ExecBuildSlotValueDescription) writes each column's text output, `null` for NULL, cut
to 64 bytes with `...` after a value that was longer, in the table's column order.
"""

from __future__ import annotations

import pyarrow as pa

from icegres.pg.clock import TextSettings
from icegres.pg.text_out import encode_text_value
from icegres.pg.types import pg_type_for_arrow

_MAX_FIELD_BYTES = 64


def failing_row(rows: pa.Table, row: int, zone: str = "UTC") -> str:
    """The DETAIL of a NOT NULL or CHECK violation by row `row` of `rows`."""
    settings = TextSettings(timezone=zone)
    values = []
    for column in rows.columns:
        value = column[row].as_py()
        text = encode_text_value(value, pg_type_for_arrow(column.type), settings)
        values.append("null" if text is None else _clipped(text))
    return f"Failing row contains ({', '.join(values)})."


def _clipped(text: bytes) -> str:
    if len(text) <= _MAX_FIELD_BYTES:
        return text.decode("utf-8")
    # Cut at a character boundary, as pg_mbcliplen does.
    return text[:_MAX_FIELD_BYTES].decode("utf-8", "ignore") + "..."
