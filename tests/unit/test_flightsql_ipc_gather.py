"""Record batch messages gathered from several batches' buffers read back, through Arrow's own
IPC reader (which verifies the flatbuffer), as the batches concatenated and cast to the wire."""

from __future__ import annotations

import datetime
import decimal

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from icegres.protocol.flightsql import messages as M
from icegres.protocol.flightsql.ipc_gather import gather

pytestmark = pytest.mark.unit


def _read_back(parts: list[pa.RecordBatch], schema: pa.Schema) -> pa.RecordBatch:
    message = gather(parts, schema)
    assert message is not None
    body = b"".join(bytes(p) for p in message.body)
    assert len(body) == message.body_size and message.body_size % 8 == 0
    assert message.rows == sum(p.num_rows for p in parts)
    ipc = b"\xff\xff\xff\xff" + len(message.header).to_bytes(4, "little") + message.header + body
    return pa.ipc.read_record_batch(pa.ipc.read_message(ipc), schema)


def _expected(parts: list[pa.RecordBatch], schema: pa.Schema) -> pa.RecordBatch:
    return pa.concat_batches([M.to_wire(p, schema) for p in parts])


_VALUES = {
    pa.int8(): st.integers(-128, 127),
    pa.int64(): st.integers(-(2**63), 2**63 - 1),
    pa.uint16(): st.integers(0, 2**16 - 1),
    pa.float32(): st.floats(width=32, allow_nan=False),
    pa.float64(): st.floats(allow_nan=False),
    pa.bool_(): st.booleans(),
    pa.string(): st.text(max_size=20),
    pa.string_view(): st.text(max_size=20),
    pa.large_string(): st.text(max_size=5),
    pa.binary(): st.binary(max_size=20),
    pa.large_binary(): st.binary(max_size=5),
    pa.date32(): st.dates(),
    pa.timestamp("us", "UTC"): st.datetimes(timezones=st.just(datetime.UTC)),
    pa.time64("us"): st.times(),
    pa.duration("ms"): st.timedeltas(min_value=datetime.timedelta(days=-9999), max_value=datetime.timedelta(days=9999)),
    pa.decimal128(12, 3): st.decimals(min_value=-10**8, max_value=10**8, places=3, allow_nan=False, allow_infinity=False),
    pa.binary(3): st.binary(min_size=3, max_size=3),
}


@st.composite
def _parts(draw):
    types = draw(st.lists(st.sampled_from(list(_VALUES)), min_size=1, max_size=5))
    nullable = [draw(st.booleans()) for _ in types]
    sizes = draw(st.lists(st.integers(0, 40), min_size=1, max_size=5))
    parts = []
    for rows in sizes:
        columns = []
        for t, may_be_null in zip(types, nullable, strict=True):
            value = _VALUES[t] | st.none() if may_be_null else _VALUES[t]
            columns.append(pa.array(draw(st.lists(value, min_size=rows + 9, max_size=rows + 9)), t))
        batch = pa.RecordBatch.from_arrays(columns, [f"c{i}" for i in range(len(types))])
        start = draw(st.integers(0, 9))  # slices at any bit offset, as DoGet's message cuts make
        parts.append(batch.slice(start, rows))
    return parts


@settings(max_examples=150, deadline=None)
@given(parts=_parts())
def test_gathered_message_reads_back_as_the_concatenated_batches(parts):
    schema = M.wire_schema(parts[0].schema)
    if sum(p.num_rows for p in parts) == 0:
        assert gather(parts, schema) is None
        return
    assert _read_back(parts, schema).equals(_expected(parts, schema))


def test_views_dictionaries_and_mixed_part_types_are_cast_to_the_wire():
    a = pa.record_batch({"s": pa.array(["x", None, "a longer string than twelve"], pa.string_view()),
                         "d": pa.array(["p", "q", None]).dictionary_encode()})
    b = pa.record_batch({"s": pa.array(["plain"], pa.string()), "d": pa.array(["r"]).dictionary_encode()})
    schema = pa.schema([pa.field("s", pa.string()), pa.field("d", pa.string())])
    got = _read_back([a, b], schema)
    assert got.to_pydict() == {"s": ["x", None, "a longer string than twelve", "plain"], "d": ["p", "q", None, "r"]}


def test_string_offsets_that_do_not_start_at_zero():
    # Arrow's Rust side exports a sliced string array as offset 0 with its offsets buffer sliced:
    # the first offset is then not 0, and the data before it is not part of the array.
    data = pa.py_buffer(b"skipHELLOworld")
    offsets = pa.array([4, 9, 14], pa.int32()).buffers()[1]
    array = pa.Array.from_buffers(pa.string(), 2, [None, offsets, data])
    assert array.offset == 0 and array.to_pylist() == ["HELLO", "world"]
    batch = pa.record_batch({"s": array})
    got = _read_back([batch], batch.schema)
    assert got.to_pydict() == {"s": ["HELLO", "world"]}
    # Sent rebased, as Arrow's writer does: offsets from 0, without the bytes before the first.
    assert got.column(0).buffers()[1].to_pybytes()[:4] == bytes(4)
    assert got.column(0).buffers()[2].to_pybytes() == b"HELLOworld"


def test_fixed_width_columns_are_not_copied():
    batches = [pa.record_batch({"i": pa.array(range(n), pa.int64())}) for n in (5, 8)]
    message = gather(batches, batches[0].schema)
    data = [b.column(0).buffers()[1].address for b in batches]
    assert [p.address for p in message.body if isinstance(p, pa.Buffer)] == data


def test_other_types_are_left_to_serialize():
    for t, value in ((pa.list_(pa.int32()), [1]), (pa.struct([("a", pa.int8())]), {"a": 1}),
                     (pa.null(), None), (pa.month_day_nano_interval(), None)):
        batch = pa.record_batch({"x": pa.array([value], t)})
        assert gather([batch], batch.schema) is None
    decimals = pa.record_batch({"x": pa.array([decimal.Decimal("1.5")], pa.decimal256(40, 2))})
    assert _read_back([decimals], decimals.schema).equals(decimals)
