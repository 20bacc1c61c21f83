"""RecordBatches as DataRow messages: the column-at-a-time renderers of `icegres.pg.columns`
joined row by row, and small batches rendered value by value."""

from __future__ import annotations

import struct
from collections.abc import Sequence

import numpy as np
import pyarrow as pa

from icegres.pg.clock import _DAYS_1970_TO_2000, _US_1970_TO_2000, TextSettings, _zone
from icegres.pg.columns import (
    _BINARY_INT_DTYPE,
    _INT32_LIMITS,
    _INT64_LIMITS,
    _encode_column,
    _rebase,
    _to_us,
)
from icegres.pg.pieces import _bool_values, _fixed_values, _join_pieces, _Piece, _validity
from icegres.pg.text_out import _date_text, _float_text, _timestamp_text, _timestamptz_text
from icegres.pg.types import pg_type_for_arrow

# --- small batches: one value at a time ----------------------------------------------------------
#
# The column-at-a-time path costs tens of µs per column whatever the row count (pyarrow.compute
# dispatch, numpy set-up): 0.6 ms for a demo.trips point lookup's one row of 8 columns, 0.25 ms
# for one row of (bigint, double), against 0.03 and 0.01 ms value by value. Value by value costs
# ~1 µs per plain value (5 µs a row of demo.trips), so the two meet near 500 values: a batch of up
# to that many values of the plain types is rendered one value at a time, with the same scalar
# renderers the vectorised path uses for its rare rows; the tests check both paths against
# PostgreSQL.

_SMALL_BATCH_VALUES_MAX = 512  # rows x columns
_FIELD_LENGTH = struct.Struct(">i")
_DATA_ROW_START = struct.Struct(">cih")
_NULL_FIELD = b"\xff\xff\xff\xff"
_AS_BYTES = {pa.string().id: pa.binary(), pa.large_string().id: pa.large_binary(),
             pa.string_view().id: pa.binary_view()}


def _fixed_width_fields(values: np.ndarray) -> list[bytes]:
    data = values.tobytes()
    w = values.dtype.itemsize
    return [data[i : i + w] for i in range(0, len(data), w)]


def _small_fields(arr: pa.Array, fmt: int, settings: TextSettings) -> list[bytes | None] | None:
    """One column's field bytes (None for NULL), or None when the type needs the vectorised path."""
    dt = arr.type
    ty = pa.types
    fields: list[bytes | None]
    if ty.is_boolean(dt):
        words = (b"f", b"t") if fmt == 0 else (b"\x00", b"\x01")
        fields = [words[v] for v in _bool_values(arr).tolist()]
    elif ty.is_integer(dt):
        oid = pg_type_for_arrow(dt).oid
        if oid not in _BINARY_INT_DTYPE:
            return None  # uint64: numeric
        values = _fixed_values(arr, np.dtype(dt.to_pandas_dtype()))
        if fmt == 0:
            fields = [str(v).encode() for v in values.tolist()]
        else:
            fields = _fixed_width_fields(values.astype(_BINARY_INT_DTYPE[oid]))
    elif ty.is_float32(dt) or ty.is_float64(dt):
        float4 = ty.is_float32(dt)
        values = _fixed_values(arr, np.dtype(np.float32 if float4 else np.float64))
        if fmt == 0:
            efd = settings.extra_float_digits
            fields = [_float_text(v, float4, efd).encode() for v in values.tolist()]
        else:
            fields = _fixed_width_fields(values.astype(">f4" if float4 else ">f8"))
    elif ty.is_string(dt) or ty.is_large_string(dt) or ty.is_string_view(dt):
        # A text field's bytes are the value's UTF-8, as Arrow holds it: read as bytes, not decoded
        # and encoded again (for a 50 MB value two calls of ~40-80 ms of GIL each, now one copy).
        return arr.view(_AS_BYTES[dt.id]).to_pylist()
    elif ty.is_timestamp(dt):
        utc_us = _to_us(arr)
        if fmt == 1:
            fields = _fixed_width_fields(
                _rebase(utc_us, _US_1970_TO_2000, _INT64_LIMITS).astype(">i8")
            )
        else:
            zone = _zone(settings.timezone) if dt.tz is not None else None
            valid = _validity(arr)
            fields = [
                None
                if valid is not None and not valid[i]
                else (
                    _timestamptz_text(us, zone) if zone is not None else _timestamp_text(us, None)
                ).encode()
                for i, us in enumerate(utc_us.tolist())
            ]
    elif ty.is_date(dt):
        if ty.is_date64(dt):
            days = _fixed_values(arr, np.dtype(np.int64)) // 86_400_000
        else:
            days = _fixed_values(arr, np.dtype(np.int32)).astype(np.int64)
        if fmt == 1:
            fields = _fixed_width_fields(
                _rebase(days, _DAYS_1970_TO_2000, _INT32_LIMITS).astype(">i4")
            )
        else:
            valid = _validity(arr)
            fields = [
                None if valid is not None and not valid[i] else _date_text(d).encode()
                for i, d in enumerate(days.tolist())
            ]
    else:
        return None
    if arr.null_count:
        valid = _validity(arr)
        assert valid is not None
        fields = [f if ok else None for f, ok in zip(fields, valid.tolist(), strict=True)]
    return fields


def _small_data_rows(
    batch: pa.RecordBatch, formats: Sequence[int], settings: TextSettings
) -> bytes | None:
    """DataRows of a small batch rendered value by value; None if a column's type needs the
    vectorised path."""
    columns = []
    for col, fmt in zip(batch.columns, formats, strict=True):
        fields = _small_fields(col, fmt, settings)
        if fields is None:
            return None
        columns.append(fields)
    ncols = batch.num_columns
    if not ncols:  # `SELECT FROM t`: one empty row per row, which zip() would not yield
        return _DATA_ROW_START.pack(b"D", 6, 0) * batch.num_rows
    out: list[bytes] = []
    for row in zip(*columns, strict=True):
        parts: list[bytes] = []
        size = 6
        for v in row:
            if v is None:
                parts.append(_NULL_FIELD)
                size += 4
            else:
                parts.append(_FIELD_LENGTH.pack(len(v)))
                parts.append(v)
                size += 4 + len(v)
        out.append(_DATA_ROW_START.pack(b"D", size, ncols))
        out += parts
    return b"".join(out)


_CHUNK_BUFFER_BYTES_MAX = 64 << 20  # keeps every rendered chunk well under int32 offsets (2 GiB)
_DATA_ROW_HEADER = np.dtype([("tag", "u1"), ("length", ">i4"), ("ncols", ">i2")])


def encode_data_rows(
    batch: pa.RecordBatch, formats: Sequence[int], settings: TextSettings
) -> bytes:
    """Concatenated DataRow ('D') messages for every row of `batch`, as PostgreSQL 15 sends them.

    `formats` holds one format code per column (0 text, 1 binary), already expanded by the caller.
    """
    if len(formats) != batch.num_columns:
        raise ValueError(f"{len(formats)} formats for {batch.num_columns} columns")
    if batch.num_rows == 0:
        return b""
    # nbytes, unlike get_total_buffer_size, counts only what a slice covers.
    if batch.num_rows > 1 and batch.nbytes > _CHUNK_BUFFER_BYTES_MAX:
        half = batch.num_rows // 2
        return encode_data_rows(batch.slice(0, half), formats, settings) + encode_data_rows(
            batch.slice(half), formats, settings
        )
    if batch.num_rows * max(batch.num_columns, 1) <= _SMALL_BATCH_VALUES_MAX:
        small = _small_data_rows(batch, formats, settings)
        if small is not None:
            return small
    n = batch.num_rows
    columns = [
        _encode_column(col, fmt, settings) for col, fmt in zip(batch.columns, formats, strict=True)
    ]
    header = np.empty(n, dtype=_DATA_ROW_HEADER)
    header["tag"] = ord("D")
    header["length"] = 6 + sum((c.sizes for c in columns), np.zeros(n, dtype=np.int64))
    header["ncols"] = batch.num_columns
    pieces: list[_Piece] = [header.view(np.uint8).reshape(n, _DATA_ROW_HEADER.itemsize)]
    pieces += [p for c in columns for p in c.pieces]
    return _join_pieces(pieces, n)
