"""Cutting a result's batches into DoGet messages (`result_stream.take_groups`): every row once and in
order, at most BATCH_ROWS rows a message, and under MESSAGE_BYTES when the rows are alike."""

from __future__ import annotations

import threading

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from icegres.engine.row_source import RowSource
from icegres.protocol.flightsql import messages as M
from icegres.protocol.flightsql import result_stream

pytestmark = pytest.mark.unit


def _batches(sizes: list[int], width: int, view: bool) -> list[pa.RecordBatch]:
    out, start = [], 0
    for n in sizes:
        ids = pa.array(range(start, start + n), pa.int64())
        text = pa.array([f"{i:0{width}d}" for i in range(start, start + n)], pa.string_view() if view else pa.string())
        out.append(pa.record_batch({"id": ids, "s": text}))
        start += n
    return out


def _take_all(batches: list[pa.RecordBatch], budget: int) -> list[list[pa.RecordBatch]]:
    source = RowSource(schema=batches[0].schema, stream=iter(batches))
    groups: list[list[pa.RecordBatch]] = []
    while True:
        taken, exhausted = result_stream.take_groups(source, threading.Event(), budget)
        groups.extend(taken)
        if exhausted:
            return groups


@settings(max_examples=200, deadline=None)
@given(sizes=st.lists(st.integers(1, 300), min_size=1, max_size=12), width=st.integers(1, 40),
       view=st.booleans(), message_bytes=st.integers(64, 20_000), batch_rows=st.integers(1, 500),
       budget=st.integers(1, 50_000))
def test_every_row_once_in_order_within_the_message_bounds(sizes, width, view, message_bytes,
                                                           batch_rows, budget):
    batches = _batches(sizes, width, view)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(result_stream, "MESSAGE_BYTES", message_bytes)
        patch.setattr(result_stream, "BATCH_ROWS", batch_rows)
        groups = _take_all(batches, budget)
    ids = [i for g in groups for b in g for i in b.column("id").to_pylist()]
    assert ids == list(range(sum(sizes)))
    schema = M.wire_schema(batches[0].schema)
    for group in groups:
        rows = sum(b.num_rows for b in group)
        assert 0 < rows <= batch_rows
        if rows > 1:  # (a message of one row is one row too big for the bound: it goes alone)
            # Alike rows: what the message puts on the wire stays under the bound it was cut to.
            wire = pa.concat_batches([M.to_wire(b, schema) for b in group])
            assert wire.nbytes <= message_bytes


def test_a_stopped_take_ends_between_batches():
    batches = _batches([10] * 5, 4, True)
    source = RowSource(schema=batches[0].schema, stream=iter(batches))
    stop = threading.Event()
    stop.set()
    groups, exhausted = result_stream.take_groups(source, stop)
    assert groups == [] and exhausted
