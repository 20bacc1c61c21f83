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
import threading
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from typing import Any

import pyarrow as pa

__all__ = ["PIECE_CHARS", "array", "prepare", "utf8_pieces"]

_KEPT_CHARS = 256 << 20  # big strings' arrays kept, most recently used last (each holds its str alive)
_LOCK = threading.Lock()
_MADE: OrderedDict[tuple[int, str], tuple[str, pa.Array]] = OrderedDict()

PIECE_CHARS = 1 << 20


def utf8_pieces(text: str) -> Iterator[bytes]:
    """`text`'s UTF-8, PIECE_CHARS characters at a time: each encode is a short C call, where one
    of a 50 MB str held the GIL 50-90 ms. (A str slices by code point: no character is split.)"""
    chars = PIECE_CHARS
    for at in range(0, len(text), chars):
        yield text[at:at + chars].encode()


def array(values: Sequence[Any], type: pa.DataType) -> pa.Array | pa.ChunkedArray:  # noqa: A002  (pyarrow's name)
    """`pa.array(values, type=type)`, the same values, without one long C call for a big string:
    then chunked, a big string's array a chunk of its own (concatenated, its 50 MB were copied
    under the GIL, ~40 ms)."""
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
    return pa.chunked_array(parts, type=type)


def prepare(value: str) -> None:
    """Make `value`'s array now, in the caller's thread, if it is big: the catalog is built
    under the engine's lock, and there a 50 MB comment took ~150 ms of every other session's
    statement (they wait on that lock to see the catalog change)."""
    if len(value) > PIECE_CHARS:
        _big(value, pa.string())


def _big(value: str, type: pa.DataType) -> pa.Array:  # noqa: A002
    """A one-row array of `value`, its UTF-8 made a slice at a time into one buffer; kept for
    the same str (by identity: hashing it would take as long), as the catalog is built again at
    every change of the lake, with the same texts."""
    key = (id(value), str(type))
    with _LOCK:
        made = _MADE.get(key)
        if made is not None and made[0] is value:
            _MADE.move_to_end(key)
            return made[1]
    array = _made(value, type)
    with _LOCK:
        _MADE[key] = (value, array)
        while len(_MADE) > 1 and sum(len(v) for v, _ in _MADE.values()) > _KEPT_CHARS:
            _MADE.popitem(last=False)
    return array


def _made(value: str, type: pa.DataType) -> pa.Array:  # noqa: A002
    pieces = list(utf8_pieces(value))
    size = sum(map(len, pieces))
    data = pa.allocate_buffer(size)
    view = memoryview(data).cast("B")  # type: ignore[arg-type]
    at = 0
    for piece in pieces:
        view[at:at + len(piece)] = piece
        at += len(piece)
    offsets = pa.py_buffer(struct.pack("<qq" if pa.types.is_large_string(type) else "<ii", 0, size))
    return pa.Array.from_buffers(type, 1, [None, offsets, data])
