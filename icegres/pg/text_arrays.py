"""A column of Python values as an Arrow array, with a big string converted a piece at a time.

`pa.array` converts a str in one C call that holds the GIL, and for a 50 MB str that is not
ASCII (its UTF-8 is made and checked then) it took 1.1-3.8 s on a shared 2-core machine: every
other session's statement, and the event loop, waited that long. The catalog's rows carry such a
str when a column's DEFAULT is a 50 MB literal (pg_attrdef.adbin, information_schema.columns'
column_default; issue 26). Here a string over PIECE_CHARS is encoded a slice at a time (each
call ~1 ms, the GIL free for others between them) into one buffer.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import Any

import pyarrow as pa

__all__ = ["PIECE_CHARS", "array"]

PIECE_CHARS = 1 << 20


def array(values: Sequence[Any], type: pa.DataType) -> pa.Array:  # noqa: A002  (pyarrow's name)
    """`pa.array(values, type=type)`, the same array, without one long C call for a big string."""
    if not (pa.types.is_string(type) or pa.types.is_large_string(type)) or not any(
            isinstance(v, str) and len(v) > PIECE_CHARS for v in values):
        return pa.array(values, type=type)
    parts: list[pa.Array] = []
    run: list[Any] = []
    for value in values:
        if isinstance(value, str) and len(value) > PIECE_CHARS:
            if run:
                parts.append(pa.array(run, type=type))
                run = []
            parts.append(_big(value, type))
        else:
            run.append(value)
    if run:
        parts.append(pa.array(run, type=type))
    return pa.concat_arrays(parts)


def _big(value: str, type: pa.DataType) -> pa.Array:  # noqa: A002
    """A one-row array of `value`, its UTF-8 made a slice at a time into one buffer."""
    pieces = [value[at:at + PIECE_CHARS].encode() for at in range(0, len(value), PIECE_CHARS)]
    size = sum(map(len, pieces))
    data = pa.allocate_buffer(size)
    view = memoryview(data).cast("B")  # type: ignore[arg-type]
    at = 0
    for piece in pieces:
        view[at:at + len(piece)] = piece
        at += len(piece)
    offsets = pa.py_buffer(struct.pack("<qq" if pa.types.is_large_string(type) else "<ii", 0, size))
    return pa.Array.from_buffers(type, 1, [None, offsets, data])
