"""COPY ... TO's text and CSV output a RecordBatch at a time, byte for byte as PostgreSQL 15's
CopyOneRowTo writes it (CopyAttributeOutText, CopyAttributeOutCSV).

Each column is rendered once by the vectorised text renderers of `icegres.pg.columns`; the rows
are then one join of every column's pieces with delimiter, NULL and newline pieces between them
(`icegres.pg.pieces._join_pieces`). Only columns that can hold a character COPY must escape or
quote for are looked at byte by byte, and only the rows that hold one are rewritten:

- a type whose text uses a known alphabet (numbers, booleans, dates and times, uuids) needs
  nothing unless the options use a character of that alphabet (DELIMITER ':' and a timestamp,
  NULL '0' and an integer in CSV); its pieces go into the join as rendered;
- any other column (text, bytea, arrays, json, intervals ...) is materialised as one binary
  array, a 256-entry table finds the rows holding a special byte in one pass over its bytes, and
  pyarrow.compute escapes or quotes those rows.

The row-by-row reference is `CopyFormat.line` over `text_out.encode_text_value`; the unit tests
hold this module to it on random batches, and the e2e tests both to PostgreSQL itself.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from icegres.pg.clock import TextSettings
from icegres.pg.columns import text_values
from icegres.pg.copy_format import CopyFormat
from icegres.pg.pieces import (
    _as_binary,
    _bitmap,
    _fixed_piece,
    _join_pieces,
    _Piece,
    _piece_lengths,
    _ragged_piece,
    _validity,
    _varlen_lengths,
)
from icegres.pg.types import UUID, _is_uuid_type, pg_type_for_arrow

# CopyAttributeOutText: these bytes become a backslash and a letter (or a second backslash); the
# delimiter, whatever it is, becomes a backslash and itself.
_TEXT_ESCAPES = {
    b"\\": b"\\\\",
    b"\b": b"\\b",
    b"\f": b"\\f",
    b"\n": b"\\n",
    b"\r": b"\\r",
    b"\t": b"\\t",
    b"\v": b"\\v",
}

# The characters PostgreSQL's output functions can write for a type (DateStyle ISO, IntervalStyle
# aside): a column of such a type needs no escaping or quoting unless an option uses one of them.
_DIGITS = "0123456789"
_ALPHABET_BOOL = "tf"
_ALPHABET_INT = "-" + _DIGITS
_ALPHABET_FLOAT = "-+.eEInfinityNa" + _DIGITS  # 1.5e-07, -Infinity, NaN
_ALPHABET_DECIMAL = "-.NaN" + _DIGITS
_ALPHABET_CLOCK = "-+:. BCinfty" + _DIGITS  # 2024-01-02 03:04:05.5+05:30, 0044-03-15 BC, -infinity
_ALPHABET_UUID = "-abcdef" + _DIGITS

_BATCH_BYTES_MAX = 64 << 20  # a bigger batch is rendered in halves: int32 offsets, bounded memory


@dataclass(frozen=True)
class CopyRows:
    """A batch's rows as COPY writes them, and where each row ends in `data` (cumulative)."""

    data: bytes
    row_ends: np.ndarray  # int64, one per row


def encode_copy_rows(batch: pa.RecordBatch, fmt: CopyFormat, settings: TextSettings) -> CopyRows:
    """Every row of `batch` in COPY's text or CSV format (`fmt`, whose `columns` has been told
    the batch's column names), as PostgreSQL 15's COPY TO writes it. Blocking; pure."""
    n = batch.num_rows
    if n == 0:
        return CopyRows(b"", np.zeros(0, dtype=np.int64))
    if batch.num_columns == 0:  # COPY (SELECT FROM t): an empty line per row
        return CopyRows(b"\n" * n, np.arange(1, n + 1, dtype=np.int64))
    if n > 1 and batch.nbytes > _BATCH_BYTES_MAX:
        first = encode_copy_rows(batch.slice(0, n // 2), fmt, settings)
        second = encode_copy_rows(batch.slice(n // 2), fmt, settings)
        ends = np.concatenate([first.row_ends, second.row_ends + len(first.data)])
        return CopyRows(first.data + second.data, ends)
    single = batch.num_columns == 1
    forced = fmt.force or [False] * batch.num_columns
    delimiter = _row_matrix(fmt.delimiter.encode(), n)
    pieces: list[_Piece] = []
    for j, column in enumerate(batch.columns):
        if j:
            pieces.append(delimiter)
        pieces += _field_pieces(column, fmt, forced[j], single, settings)
    pieces.append(_row_matrix(b"\n", n))
    lengths = sum((_piece_lengths(p) for p in pieces), np.zeros(n, dtype=np.int64))
    return CopyRows(_join_pieces(pieces, n), np.cumsum(lengths))


def _row_matrix(text: bytes, n: int) -> np.ndarray:
    return np.tile(np.frombuffer(text, dtype=np.uint8), (n, 1))


def _field_pieces(
    arr: pa.Array, fmt: CopyFormat, forced: bool, single: bool, settings: TextSettings
) -> list[_Piece]:
    """One column's fields: the rendered (and escaped or quoted) values, then the NULL string
    where a value is NULL. Each row holds exactly one of the two."""
    t = pg_type_for_arrow(arr.type)
    if pa.types.is_dictionary(arr.type):
        arr = arr.dictionary_decode()
    if isinstance(arr, pa.ExtensionArray) and not _is_uuid_type(arr.type):
        arr = arr.storage
    n = len(arr)
    valid = _validity(arr)
    alphabet = _alphabet(arr.type, t.oid == UUID.oid)
    pieces: list[_Piece]
    if alphabet is not None and _plain(alphabet, fmt, forced):
        pieces, _ = text_values(arr, settings)
        if forced:  # CSV FORCE_QUOTE: quotes around every non-NULL value
            quote = _fixed_piece(_row_matrix(fmt.quote.encode(), n), valid)
            pieces = [quote, *pieces, quote]
    else:
        values = _rendered(arr, settings)
        values = (
            _csv_quoted(values, valid, fmt, forced, single)
            if fmt.csv
            else _text_escaped(values, valid, fmt)
        )
        pieces = [values]
    null = fmt.null.encode()
    if valid is not None and null:
        lens = np.where(valid, 0, len(null))
        pieces.append(_ragged_piece(_row_matrix(null, n), lens))
    return pieces


def _alphabet(dt: pa.DataType, is_uuid: bool) -> str | None:
    """The characters a column of this type can render to, or None if it can render to any."""
    ty = pa.types
    if ty.is_null(dt):
        return ""
    if ty.is_boolean(dt):
        return _ALPHABET_BOOL
    if ty.is_integer(dt):
        return _ALPHABET_INT
    if ty.is_floating(dt):
        return _ALPHABET_FLOAT
    if ty.is_decimal(dt):
        return _ALPHABET_DECIMAL
    if ty.is_timestamp(dt) or ty.is_date(dt) or ty.is_time(dt):
        return _ALPHABET_CLOCK
    if is_uuid:
        return _ALPHABET_UUID
    return None


def _plain(alphabet: str, fmt: CopyFormat, forced: bool) -> bool:
    """Whether no value written in `alphabet` needs escaping (text) or quoting (CSV, beyond
    FORCE_QUOTE's) under these options."""
    if fmt.delimiter in alphabet:
        return False
    if not fmt.csv:
        return True  # the alphabets hold no backslash and no control character
    if fmt.quote in alphabet or (forced and fmt.escape in alphabet):
        return False
    # A value equal to the NULL string is quoted; an empty NULL string no such value can equal.
    return not fmt.null or not all(c in alphabet for c in fmt.null)


def _rendered(arr: pa.Array, settings: TextSettings) -> pa.Array:
    """The column's text values as one binary array, NULL where the value is NULL."""
    ty = pa.types
    if ty.is_string(arr.type) or ty.is_large_string(arr.type) or ty.is_string_view(arr.type):
        return _as_binary(arr)
    pieces, lens = text_values(arr, settings)
    if len(pieces) == 1 and isinstance(pieces[0], pa.Array):
        return _as_binary(pieces[0])
    n = len(arr)
    valid = _validity(arr)
    offsets = np.zeros(n + 1, dtype=np.int32)
    np.cumsum(lens, out=offsets[1:])
    data = _join_pieces(pieces, n)
    return pa.Array.from_buffers(
        pa.binary(),
        n,
        [_bitmap(valid), pa.py_buffer(offsets), pa.py_buffer(data)],
        0 if valid is None else n - int(np.count_nonzero(valid)),
    )


def _rows_holding(values: pa.Array, special: bytes, valid: np.ndarray | None) -> np.ndarray | None:
    """Which non-NULL rows hold any of the `special` bytes: one table lookup per byte of the
    column, then only the hits are placed in rows. None if no row does."""
    n = len(values)
    data_buffer = values.buffers()[2]
    if data_buffer is None or not special:
        return None
    offsets = np.frombuffer(
        values.buffers()[1], dtype=np.int32, count=n + 1, offset=values.offset * 4
    )
    data = np.frombuffer(data_buffer, dtype=np.uint8)[offsets[0] : offsets[-1]]
    table = np.zeros(256, dtype=bool)
    table[np.frombuffer(special, dtype=np.uint8)] = True
    hits = np.flatnonzero(table[data])
    if not len(hits):
        return None
    rows = np.searchsorted(offsets[1:].astype(np.int64) - int(offsets[0]), hits, side="right")
    mask = np.zeros(n, dtype=bool)
    mask[rows] = True
    if valid is not None:
        mask &= valid  # a NULL slot's bytes, if any, are not a value
    return mask if mask.any() else None


def _text_escaped(values: pa.Array, valid: np.ndarray | None, fmt: CopyFormat) -> pa.Array:
    """CopyAttributeOutText: backslash, \\b \\f \\n \\r \\t \\v and the delimiter escaped."""
    delimiter = fmt.delimiter.encode()
    escapes = dict(_TEXT_ESCAPES)
    escapes.setdefault(delimiter, b"\\" + delimiter)
    mask = _rows_holding(values, b"".join(escapes), valid)
    if mask is None:
        return values
    rows = values.filter(pa.array(mask))
    present = np.bincount(np.frombuffer(_data_bytes(rows), dtype=np.uint8), minlength=256)
    for char, escaped in escapes.items():  # the backslash first: it must not meet its own escapes
        if present[char[0]]:
            rows = pc.replace_substring(rows, char, escaped)
    return pc.replace_with_mask(values, pa.array(mask), rows)


def _csv_quoted(
    values: pa.Array, valid: np.ndarray | None, fmt: CopyFormat, forced: bool, single: bool
) -> pa.Array:
    """CopyAttributeOutCSV: a value is quoted when forced, when it equals the NULL string, when it
    holds the delimiter, the quote, CR or LF, or when it is `\\.` alone on its line; inside the
    quotes the quote and the escape character are preceded by the escape character."""
    n = len(values)
    if forced:
        mask = np.ones(n, dtype=bool) if valid is None else valid.copy()
    else:
        special = (fmt.delimiter + fmt.quote + "\n\r").encode()
        held = _rows_holding(values, special, valid)
        mask = np.zeros(n, dtype=bool) if held is None else held
        mask |= _equal(values, fmt.null.encode(), valid)
        if single:
            mask |= _equal(values, b"\\.", valid)
    if not mask.any():
        return values
    quote, escape = fmt.quote.encode(), fmt.escape.encode()
    rows = values.filter(pa.array(mask))
    body = pc.replace_substring(rows, escape, escape + escape)
    if escape != quote:
        body = pc.replace_substring(body, quote, escape + quote)
    return pc.replace_with_mask(
        values, pa.array(mask), pc.binary_join_element_wise(quote, body, quote, b"")
    )


def _equal(values: pa.Array, text: bytes, valid: np.ndarray | None) -> np.ndarray:
    """Which non-NULL rows are exactly `text`: by length first, comparing only rows that fit."""
    lens = _varlen_lengths(values)
    mask = lens == len(text)
    if valid is not None:
        mask &= valid
    if not mask.any():
        return mask
    which = np.flatnonzero(mask)
    same = pc.equal(values.take(pa.array(which)), pa.scalar(text, pa.binary()))
    mask[which] = np.asarray(same.to_numpy(zero_copy_only=False), dtype=bool)
    return mask


def _data_bytes(values: pa.Array) -> memoryview | bytes:
    """The bytes a binary array's values span (NULL slots included, if they span any)."""
    n = len(values)
    data_buffer = values.buffers()[2]
    if not n or data_buffer is None:
        return b""
    offsets = np.frombuffer(
        values.buffers()[1], dtype=np.int32, count=n + 1, offset=values.offset * 4
    )
    return memoryview(data_buffer)[int(offsets[0]) : int(offsets[-1])]
