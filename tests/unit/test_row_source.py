"""Pulling a RowSource in chunks (pgwire results.pull over RowSource.take_many): batches gathered
for encoding, limits, and the exhausted flag."""

from __future__ import annotations

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from icegres.engine import row_source
from icegres.engine.row_source import RowSource
from icegres.pg.clock import TextSettings
from icegres.protocol.pgwire.datarows import encode_data_rows
from icegres.protocol.pgwire.results import pull

pytestmark = pytest.mark.unit


def batches(sizes: list[int]) -> list[pa.RecordBatch]:
    out, start = [], 0
    for n in sizes:
        out.append(pa.record_batch([pa.array(range(start, start + n), pa.int64())], names=["id"]))
        start += n
    return out


def encoder(calls: list[int]):
    def encode(batch: pa.RecordBatch) -> bytes:
        calls.append(batch.num_rows)
        return encode_data_rows(batch, [0], TextSettings())

    return encode


def test_small_batches_are_encoded_together_and_bytes_are_unchanged(monkeypatch) -> None:
    monkeypatch.setattr(row_source, "ENCODE_ROWS", 25)
    parts = batches([10, 10, 10, 10, 3])
    calls: list[int] = []
    source = RowSource(parts[0].schema, iter(parts))
    chunks = []
    while True:
        chunk = pull(source, 0, encoder(calls))
        chunks.append(chunk)
        if chunk.exhausted:
            break
    assert calls == [30, 13]  # gathered until ENCODE_ROWS, then what was left
    expected = b"".join(encode_data_rows(b, [0], TextSettings()) for b in parts)
    assert b"".join(c.data for c in chunks) == expected
    assert sum(c.rows for c in chunks) == 43


def test_limit_is_exact_and_the_rest_stays_for_the_next_pull(monkeypatch) -> None:
    monkeypatch.setattr(row_source, "ENCODE_ROWS", 1000)
    parts = batches([10, 10, 10])
    calls: list[int] = []
    source = RowSource(parts[0].schema, iter(parts))
    first = pull(source, 15, encoder(calls))
    assert (first.rows, first.exhausted) == (15, False)
    rest = pull(source, 0, encoder(calls))
    assert (rest.rows, rest.exhausted) == (15, True)
    assert calls == [15, 15]


def test_a_batch_of_another_schema_is_not_concatenated(monkeypatch) -> None:
    monkeypatch.setattr(row_source, "ENCODE_ROWS", 1000)
    a = batches([5])[0]
    b = pa.record_batch([pa.array(["x", "y"])], names=["id"])
    calls: list[int] = []
    source = RowSource(a.schema, iter([a, b]))
    chunk = pull(source, 0, encoder(calls))
    assert calls == [5, 2]
    assert (chunk.rows, chunk.exhausted) == (7, True)


@settings(max_examples=300, deadline=None)
@given(sizes=st.lists(st.integers(1, 40), min_size=1, max_size=10),
       other_schema=st.lists(st.booleans(), min_size=10, max_size=10),
       limits=st.lists(st.integers(0, 50), min_size=1, max_size=30), encode_rows=st.integers(1, 60))
def test_every_row_once_in_order_whatever_the_limits_and_schemas(sizes, other_schema, limits, encode_rows) -> None:
    # A batch whose schema differs (here: int32 ids) is never concatenated with its
    # neighbours, and a portal's row limit may cut any batch.
    parts = [pa.record_batch([b.column(0).cast(pa.int32())], names=["id"]) if other_schema[k] else b
             for k, b in enumerate(batches(sizes))]
    source = RowSource(parts[0].schema, iter(parts))
    seen: list[int] = []

    def encode(batch: pa.RecordBatch) -> bytes:
        seen.extend(batch.column(0).to_pylist())
        return b"x" * batch.num_rows

    total = sum(sizes)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(row_source, "ENCODE_ROWS", encode_rows)
        for limit in [*limits, 0]:
            before = len(seen)
            chunk = pull(source, limit, encode)
            assert chunk.rows == len(seen) - before == len(chunk.data)
            assert limit == 0 or chunk.rows <= limit
            assert chunk.exhausted == (len(seen) == total)
            if chunk.exhausted:
                break
    assert seen == list(range(total))
