"""COPY TO's vectorised encoder against the row-by-row one it replaced (each value by
`encode_text_value`, each row by `CopyFormat.line`), on random batches and random options.

tests/e2e/test_copy_out_semantics.py holds both to PostgreSQL 15 itself; here the oracle is the
row-by-row path, so the escaping and quoting can be driven hard without a server.
"""

from __future__ import annotations

import uuid
from datetime import UTC, date, datetime, time, timedelta
from decimal import Decimal

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from icegres.pg.clock import TextSettings
from icegres.pg.copy_format import CopyFormat
from icegres.pg.copy_out import encode_copy_rows
from icegres.pg.errors import PgError
from icegres.pg.text_out import encode_text_value
from icegres.pg.types import pg_type_for_arrow
from icegres.protocol.pgwire import messages as m
from icegres.protocol.pgwire.copy import copy_data_messages

pytestmark = pytest.mark.unit


def row_by_row(batch: pa.RecordBatch, fmt: CopyFormat, text: TextSettings) -> bytes:
    """COPY TO as icegres wrote it before it was vectorised: every value, then every row, alone."""
    types = [pg_type_for_arrow(f.type) for f in batch.schema]
    columns = [c.to_pylist() for c in batch.columns]
    out = []
    for row in zip(*columns, strict=True):
        values = []
        for value, t in zip(row, types, strict=True):
            raw = None if value is None else encode_text_value(value, t, text)
            values.append(None if raw is None else raw.decode())
        out.append(fmt.line(values).encode())
    return b"".join(out)


def vectorised(batch: pa.RecordBatch, fmt: CopyFormat, text: TextSettings) -> bytes:
    rows = encode_copy_rows(batch, fmt, text)
    assert len(rows.row_ends) == batch.num_rows
    assert (int(rows.row_ends[-1]) if batch.num_rows else 0) == len(rows.data)
    return rows.data


# Characters COPY escapes or quotes for, the characters options may be set to, and others.
SPECIAL = list("\\\t\n\r\b\f\v\x01,;:|\"'-. 0N") + ["\\.", "\\N", "NULL", "é", "✓", "\x7f", "𝄞"]
TEXTS = st.one_of(st.lists(st.sampled_from(SPECIAL), max_size=6).map("".join), st.text(max_size=6))

FLOATS = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([0.0, -0.0, 1.5e-7, 1e-5, 123456789.125, 1e15, 1e16, -1e300, 5e-324]),
    st.builds(lambda i, k: i / 10**k, st.integers(-(10**9), 10**9), st.integers(0, 4)),
)
TIMESTAMPS = st.datetimes(min_value=datetime(1, 1, 2), max_value=datetime(9999, 12, 30))

# (Arrow type, values) for each kind of column a COPY can carry.
COLUMN_KINDS: dict[str, tuple[pa.DataType, st.SearchStrategy]] = {
    "int8": (pa.int8(), st.integers(-128, 127)),
    "int32": (pa.int32(), st.integers(-(2**31), 2**31 - 1)),
    "int64": (pa.int64(), st.integers(-(2**63), 2**63 - 1)),
    "uint64": (pa.uint64(), st.integers(0, 2**64 - 1)),
    "float32": (pa.float32(), st.floats(width=32)),
    "float64": (pa.float64(), FLOATS),
    "decimal": (pa.decimal128(12, 3), st.decimals(-(10**8), 10**8, places=3, allow_nan=False)),
    "decimal0": (pa.decimal128(20, 0), st.integers(-(10**19), 10**19).map(Decimal)),
    "bool": (pa.bool_(), st.booleans()),
    "text": (pa.string(), TEXTS),
    "large_text": (pa.large_string(), TEXTS),
    "bytea": (pa.binary(), st.binary(max_size=6)),
    "date": (pa.date32(), st.dates(min_value=date(1, 1, 1), max_value=date(9999, 12, 31))),
    "timestamp": (pa.timestamp("us"), TIMESTAMPS),
    "timestamptz": (pa.timestamp("us", tz="UTC"), TIMESTAMPS.map(lambda d: d.replace(tzinfo=UTC))),
    "timestamp_ms": (
        pa.timestamp("ms"),
        TIMESTAMPS.map(lambda d: d.replace(microsecond=d.microsecond // 1000 * 1000)),
    ),
    "time": (pa.time64("us"), st.times()),
    "interval": (
        pa.month_day_nano_interval(),
        st.tuples(
            st.integers(-1000, 1000),
            st.integers(-1000, 1000),
            st.integers(-(10**15), 10**15).map(lambda ns: ns // 1000 * 1000),
        ).map(lambda t: pa.MonthDayNano(t)),
    ),
    "int_array": (
        pa.list_(pa.int32()),
        st.lists(st.one_of(st.none(), st.integers(-5, 5)), max_size=3),
    ),
    "text_array": (pa.list_(pa.string()), st.lists(st.one_of(st.none(), TEXTS), max_size=3)),
    "null": (pa.null(), st.none()),
}

OPTIONS = [
    {},
    {"delimiter": "|"},
    {"delimiter": ","},
    {"delimiter": ":"},
    {"delimiter": " "},
    {"delimiter": "-"},
    {"delimiter": "\x01"},
    {"null": "NUL"},
    {"null": ""},
    {"null": "0", "delimiter": ";"},
    {"format": "csv"},
    {"format": "csv", "null": "NULL"},
    {"format": "csv", "null": "0"},
    {"format": "csv", "null": "N"},
    {"format": "csv", "delimiter": ";", "quote": "'"},
    {"format": "csv", "delimiter": ":"},
    {"format": "csv", "delimiter": "-", "null": "\\N"},
    {"format": "csv", "delimiter": "|", "quote": "1"},
    {"format": "csv", "quote": "'", "escape": "\\"},
    {"format": "csv", "escape": "0"},
    {"format": "csv", "force_quote": "*"},
    {"format": "csv", "force_quote": "*", "escape": "1", "null": "X"},
    {"format": "csv", "force_quote": "(c0)", "delimiter": "\t"},
    {"format": "csv", "force_quote": "(c1, c2)", "quote": ".", "null": "-"},
]

ZONES = ["UTC", "Europe/Berlin", "Asia/Kolkata", "America/St_Johns"]


@st.composite
def batches(draw: st.DrawFn) -> pa.RecordBatch:
    kinds = draw(st.lists(st.sampled_from(sorted(COLUMN_KINDS)), min_size=1, max_size=4))
    nrows = draw(st.integers(1, 12))
    arrays = []
    for kind in kinds:
        dtype, values = COLUMN_KINDS[kind]
        column = draw(st.lists(st.one_of(st.none(), values), min_size=nrows, max_size=nrows))
        arrays.append(pa.array(column, dtype))
    batch = pa.RecordBatch.from_arrays(arrays, names=[f"c{i}" for i in range(len(arrays))])
    if draw(st.booleans()) and nrows > 2:  # a slice: offsets that do not start at zero
        batch = batch.slice(1, nrows - 2)
    return batch


def copy_format(options: dict[str, str], names: list[str]) -> CopyFormat | None:
    try:
        fmt = CopyFormat(options, is_from=False)
        fmt.columns(names)
    except PgError:
        return None  # options PostgreSQL refuses, or FORCE_QUOTE of a column this batch lacks
    return fmt


@given(
    batch=batches(),
    options=st.sampled_from(OPTIONS),
    zone=st.sampled_from(ZONES),
    efd=st.sampled_from([1, 0, -2]),
)
@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_vectorised_copy_writes_what_row_by_row_copy_wrote(
    batch: pa.RecordBatch, options: dict[str, str], zone: str, efd: int
) -> None:
    fmt = copy_format(options, batch.schema.names)
    if fmt is None:
        return
    text = TextSettings(timezone=zone, extra_float_digits=efd)
    assert vectorised(batch, fmt, text) == row_by_row(batch, fmt, text)


@pytest.mark.parametrize(
    "options", OPTIONS, ids=lambda o: ",".join(f"{k}={v!r}" for k, v in o.items()) or "text"
)
@given(data=st.data())
@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_every_kind_of_column_with_every_option(
    options: dict[str, str], data: st.DataObject
) -> None:
    """One column of each kind in one batch, NULLs and special characters in every one."""
    names = sorted(COLUMN_KINDS)
    arrays = []
    for kind in names:
        dtype, values = COLUMN_KINDS[kind]
        arrays.append(
            pa.array(
                data.draw(st.lists(st.one_of(st.none(), values), min_size=20, max_size=20)), dtype
            )
        )
    batch = pa.RecordBatch.from_arrays(arrays, names=names)
    renamed = {
        k: v.replace("c0", "text").replace("c1", "bytea").replace("c2", "timestamptz")
        for k, v in options.items()
    }
    fmt = copy_format(renamed, names)
    assert fmt is not None
    text = TextSettings(timezone="Europe/Berlin")
    assert vectorised(batch, fmt, text) == row_by_row(batch, fmt, text)


def test_a_column_of_only_specials_and_only_nulls() -> None:
    batch = pa.RecordBatch.from_arrays(
        [pa.array(["\\."] * 3, pa.string()), pa.array([None] * 3, pa.int64())], names=["a", "b"]
    )
    single = batch.select(["a"])
    for options in ({}, {"format": "csv"}, {"format": "csv", "null": "\\."}):
        for b in (batch, single):
            fmt = copy_format(options, b.schema.names)
            assert fmt is not None
            assert vectorised(b, fmt, TextSettings()) == row_by_row(b, fmt, TextSettings())
    fmt = copy_format({"format": "csv"}, ["a"])
    assert fmt is not None
    assert vectorised(single, fmt, TextSettings()) == b'"\\."\n' * 3  # alone on its line: quoted


def test_dictionary_and_uuid_columns() -> None:
    words = pa.array(["a,b", None, "c\td", "a,b"]).dictionary_encode()
    ids = pa.array([uuid.UUID(int=i).bytes if i else None for i in range(4)], pa.binary(16))
    batch = pa.RecordBatch.from_arrays([words, ids], names=["w", "u"])
    for options in ({}, {"format": "csv"}, {"format": "csv", "force_quote": "*", "delimiter": "-"}):
        fmt = copy_format(options, ["w", "u"])
        assert fmt is not None
        assert vectorised(batch, fmt, TextSettings()) == row_by_row(batch, fmt, TextSettings())


def test_rows_of_no_columns_are_empty_lines() -> None:
    batch = pa.RecordBatch.from_pydict({"a": [1, 2, 3]}).select([])
    fmt = copy_format({}, [])
    assert fmt is not None
    assert vectorised(batch, fmt, TextSettings()) == b"\n\n\n"


def test_big_batches_are_rendered_in_parts_with_the_same_bytes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from icegres.pg import copy_out

    n = 5000
    batch = pa.RecordBatch.from_pydict(
        {
            "id": pa.array(range(n), pa.int64()),
            "s": pa.array([f"x\t{i}" if i % 7 else None for i in range(n)], pa.string()),
            "ts": pa.array(
                [timedelta(seconds=i) + datetime(2024, 1, 1, tzinfo=UTC) for i in range(n)],
                pa.timestamp("us", tz="UTC"),
            ),
            "t": pa.array([time(1, 2, 3)] * n, pa.time64("us")),
        }
    )
    fmt = copy_format({"format": "csv"}, batch.schema.names)
    assert fmt is not None
    whole = encode_copy_rows(batch, fmt, TextSettings())
    monkeypatch.setattr(copy_out, "_BATCH_BYTES_MAX", 1000)
    parts = encode_copy_rows(batch, fmt, TextSettings())
    assert parts.data == whole.data == row_by_row(batch, fmt, TextSettings())
    assert (parts.row_ends == whole.row_ends).all()


@given(
    lines=st.lists(
        st.binary(min_size=1, max_size=50).map(lambda b: b + b"\n"), min_size=1, max_size=40
    ),
    size=st.integers(1, 200),
)
def test_copy_data_messages_carry_whole_rows_and_every_byte(lines: list[bytes], size: int) -> None:
    from icegres.pg.copy_out import CopyRows

    data = b"".join(lines)
    ends = np.cumsum([len(line) for line in lines])
    wire = copy_data_messages(CopyRows(data, ends), size)
    payloads, at = [], 0
    while at < len(wire):
        assert wire[at : at + 1] == b"d"
        length = int.from_bytes(wire[at + 1 : at + 5], "big")
        payloads.append(wire[at + 5 : at + 1 + length])
        at += 1 + length
    assert b"".join(payloads) == data
    boundaries = set(ends.tolist())
    position = 0
    for payload in payloads:
        position += len(payload)
        assert position in boundaries  # each message ends where a row ends
        assert len(payload) <= size or payload.count(b"\n") >= 1
    assert m.copy_data(b"xy") == m.copy_data_header(2) + b"xy"
