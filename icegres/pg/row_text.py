"""A row as PostgreSQL quotes it in a constraint violation's DETAIL: `Failing row contains (1, null).`

PostgreSQL (ExecBuildSlotValueDescription) writes each column's text output, `null` for NULL, cut
to 64 bytes with `...` after a value that was longer, in the table's column order.
"""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa
import pyarrow.compute as pc

from icegres.pg.chars import CharType, pad
from icegres.pg.clock import TextSettings
from icegres.pg.text_out import encode_text_value
from icegres.pg.types import pg_type_for_arrow

_MAX_FIELD_BYTES = 64


def failing_row(rows: pa.Table, row: int, zone: str = "UTC", char_types: Sequence[CharType | None] = ()) -> str:
    """The DETAIL of a NOT NULL or CHECK violation by row `row` of `rows`, whose columns have the
    character types `char_types` (a char(n) value shows padded to n, as PostgreSQL shows it)."""
    settings = TextSettings(timezone=zone)
    values = []
    for i, column in enumerate(rows.columns):
        char = char_types[i] if i < len(char_types) else None
        one = column.slice(row, 1)
        if char is not None:
            one = pad(one, char)
        if pa.types.is_string(one.type) or pa.types.is_large_string(one.type) or pa.types.is_string_view(one.type):
            # What is shown is cut to 64 bytes: a 50 MB value is not made a str to be cut.
            one = pc.utf8_slice_codeunits(one, 0, _MAX_FIELD_BYTES + 1)
        value = one[0].as_py()
        text = encode_text_value(value, pg_type_for_arrow(column.type), settings)
        values.append("null" if text is None else _clipped(text))
    return f"Failing row contains ({', '.join(values)})."


def _clipped(text: bytes) -> str:
    if len(text) <= _MAX_FIELD_BYTES:
        return text.decode("utf-8")
    # Cut at a character boundary, as pg_mbcliplen does.
    return text[:_MAX_FIELD_BYTES].decode("utf-8", "ignore") + "..."
