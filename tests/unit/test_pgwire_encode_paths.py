"""The vectorised DataRow encoder against the value-by-value renderers it must agree with.

test_pgwire_types.py holds both to PostgreSQL itself; here the oracle is `encode_text_value` (each
value on its own), so the fast paths can be driven hard with generated values without a server:
float8 columns of short decimals, and the join that assembles rows from padded renderings.
"""

from __future__ import annotations

import struct
from datetime import UTC, datetime

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from icegres.pg import columns, pieces
from icegres.pg import types as T
from icegres.pg.clock import TextSettings
from icegres.pg.text_out import encode_text_value
from icegres.protocol.pgwire import datarows
from icegres.protocol.pgwire.datarows import encode_data_rows

pytestmark = pytest.mark.unit

SESSION = TextSettings()


def value_by_value(batch: pa.RecordBatch, s: TextSettings) -> bytes:
    """The DataRows built from encode_text_value alone: the exact path."""
    types = [T.pg_type_for_arrow(c.type) for c in batch.columns]
    out = bytearray()
    for row in range(batch.num_rows):
        fields = [
            encode_text_value(col[row].as_py(), t, s)
            for col, t in zip(batch.columns, types, strict=True)
        ]
        body = b"".join(
            b"\xff\xff\xff\xff" if f is None else struct.pack(">i", len(f)) + f for f in fields
        )
        out += struct.pack(">cih", b"D", 6 + len(body), batch.num_columns) + body
    return bytes(out)


def vectorised(batch: pa.RecordBatch, s: TextSettings = SESSION) -> bytes:
    small, datarows._SMALL_BATCH_VALUES_MAX = datarows._SMALL_BATCH_VALUES_MAX, 0
    try:
        return encode_data_rows(batch, [0] * batch.num_columns, s)
    finally:
        datarows._SMALL_BATCH_VALUES_MAX = small


# Decimals with few places, as prices and distances are, plus the values at the fast path's edges:
# signed zeros, the 15-digit limit, non-finite values that must send the batch down the general path.
short_decimals = st.builds(
    lambda m, k: m / 10**k, st.integers(-(10**15), 10**15), st.integers(0, 6)
)
edge_floats = st.sampled_from(
    [
        0.0,
        -0.0,
        1e-4,
        -1e-4,
        5e-5,
        0.1,
        0.3,
        1e15,
        -1e15,
        999999999999999.0,
        99999999999999.9,
        123456789012.3456,
        2.5,
        float("inf"),
        float("-inf"),
        float("nan"),
        1e300,
        5e-324,
    ]
)
float8_values = st.lists(
    st.one_of(short_decimals, short_decimals, edge_floats, st.floats(), st.none()), max_size=60
)


@settings(max_examples=400, deadline=None)
@given(float8_values)
def test_float8_text_matches_value_by_value(values: list[float | None]) -> None:
    batch = pa.record_batch([pa.array(values, pa.float64())], names=["v"])
    assert vectorised(batch) == value_by_value(batch, SESSION)


@settings(max_examples=200, deadline=None)
@given(
    # One number of places per column: at the column's most places, every value still has to fit
    # in 15 significant digits.
    st.integers(0, columns._DECIMAL_PLACES_MAX).flatmap(
        lambda k: st.lists(
            st.one_of(st.integers(1 - 10**15, 10**15 - 1).map(lambda m: m / 10**k), st.none()),
            min_size=1,
            max_size=60,
        )
    )
)
def test_short_decimal_columns_take_the_fast_path(values: list[float | None]) -> None:
    arr = pa.array(values, pa.float64())
    valid = pieces._validity(arr)
    piece = columns._short_decimal_piece(pieces._fixed_values(arr, np.dtype(np.float64)), valid)
    assert piece is not None  # otherwise the test above would not be testing it
    batch = pa.record_batch([arr], names=["v"])
    assert vectorised(batch) == value_by_value(batch, SESSION)


INT_TYPES = [
    pa.int8(),
    pa.int16(),
    pa.int32(),
    pa.int64(),
    pa.uint8(),
    pa.uint16(),
    pa.uint32(),
    pa.uint64(),
]


@st.composite
def int_columns(draw: st.DrawFn) -> pa.Array:
    dtype = draw(st.sampled_from(INT_TYPES))
    info = np.iinfo(dtype.to_pandas_dtype())
    lo, hi = int(info.min), int(info.max)
    # Extremes and the 32-bit boundary decide between the digit arithmetic and Arrow's cast.
    edges = [
        v for v in (lo, hi, 0, 1, -1, 9, 10, 2**32 - 1, 2**32, 1 - 2**32, -(2**32)) if lo <= v <= hi
    ]
    values = st.one_of(st.integers(lo, hi), st.sampled_from(edges), st.none())
    return pa.array(draw(st.lists(values, max_size=40)), dtype)


@settings(max_examples=400, deadline=None)
@given(int_columns())
def test_integer_text_matches_value_by_value(arr: pa.Array) -> None:
    batch = pa.record_batch([arr, arr], names=["a", "b"])  # a right-aligned piece, then another
    assert vectorised(batch) == value_by_value(batch, SESSION)


row_values = st.tuples(
    st.one_of(st.integers(-(2**63), 2**63 - 1), st.none()),
    st.one_of(st.text(max_size=12), st.none()),
    st.one_of(short_decimals, st.none()),
    st.one_of(
        st.datetimes(min_value=datetime(1, 1, 2), max_value=datetime(9999, 12, 30)).map(
            lambda d: d.replace(tzinfo=UTC)
        ),
        st.none(),
    ),
    st.one_of(st.booleans(), st.none()),
)


def rows_batch(rows: list[tuple[object, ...]], doubles: list[float | None] | None = None) -> pa.RecordBatch:
    """`row_values` rows as a demo.trips-like batch, with a second float8 column if given."""
    ids, texts, fares, stamps, flags = (list(c) for c in zip(*rows, strict=True))
    columns = [pa.array(ids, pa.int64()), pa.array(texts, pa.string()), pa.array(fares, pa.float64())]
    names = ["id", "city", "fare"]
    if doubles is not None:
        columns.append(pa.array(doubles[: len(rows)], pa.float64()))
        names.append("x")
    columns += [pa.array(stamps, pa.timestamp("us", tz="UTC")), pa.array(flags, pa.bool_())]
    return pa.record_batch(columns, names=[*names, "ts", "paid"])


@settings(max_examples=200, deadline=None)
@given(
    st.lists(row_values, min_size=1, max_size=40),
    st.sampled_from(["UTC", "America/New_York", "Asia/Kolkata"]),
    st.booleans(),
)
def test_rows_assembled_from_padded_renderings_match_value_by_value(
    rows: list[tuple[object, ...]], zone: str, compact: bool
) -> None:
    batch = rows_batch(rows)
    s = TextSettings(timezone=zone)
    with pytest.MonkeyPatch.context() as patch:
        # `compact` forces what a batch too big for int32 offsets gets: ragged sources copied
        # compactly instead of read in place, and the join done in large_binary.
        patch.setattr(pieces, "_RAGGED_SOURCE_BYTES_MAX", 0 if compact else 2**31 - 1)
        assert vectorised(batch, s) == value_by_value(batch, s)


def test_sliced_batches_encode_their_own_rows() -> None:
    fares = pa.array([1.5, None, 2.25, -0.0, 10.0, 3.125] * 50, pa.float64())
    stamps = pa.array(
        [datetime(2024, 1, 1, 12, 34, 56, 789000, tzinfo=UTC), None] * 150,
        pa.timestamp("us", tz="UTC"),
    )
    counts = pa.array([3, None, -12, 7, 123456, 0] * 50, pa.int32())
    batch = pa.record_batch([counts, fares, stamps], names=["n", "fare", "ts"]).slice(37, 201)
    assert vectorised(batch) == value_by_value(batch, SESSION)


def value_at_a_time(batch: pa.RecordBatch, s: TextSettings = SESSION) -> bytes:
    """encode_data_rows forced down its small-batch path, whatever the batch's size."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(datarows, "_SMALL_BATCH_VALUES_MAX", 2**62)
        return encode_data_rows(batch, [0] * batch.num_columns, s)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(row_values, min_size=1, max_size=40),
    st.lists(st.one_of(short_decimals, edge_floats, st.floats(), st.none()), min_size=40, max_size=40),
    st.sampled_from(["UTC", "America/New_York", "Asia/Kolkata"]),
)
def test_small_batches_rendered_value_at_a_time_match_value_by_value(
    rows: list[tuple[object, ...]], doubles: list[float | None], zone: str
) -> None:
    batch = rows_batch(rows, doubles)  # x: repr's fixed-notation range and beyond
    s = TextSettings(timezone=zone)
    assert value_at_a_time(batch, s) == value_by_value(batch, s)


@pytest.mark.parametrize("rows", [1, 3, 1000])
def test_a_result_without_columns_still_sends_one_datarow_per_row(rows: int) -> None:
    # PostgreSQL answers `SELECT FROM t` with a DataRow of zero fields for every row of t.
    batch = pa.record_batch([pa.array(range(rows))], names=["a"]).select([])
    empty_row = struct.pack(">cih", b"D", 6, 0)
    assert encode_data_rows(batch, [], SESSION) == empty_row * rows
    assert vectorised(batch) == value_at_a_time(batch) == empty_row * rows
